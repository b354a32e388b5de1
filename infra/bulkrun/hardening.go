package bulkrun

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
)

// Operations defaults (RunnerProps.QueueAgeAlarm, APIRateLimit, APIBurstLimit).
const (
	DefaultQueueAgeAlarm = 30 * time.Minute
	DefaultStallAlarm    = api.StallAttention
	DefaultAPIRateLimit  = 50.0
	DefaultAPIBurstLimit = 100
)

// operated are the resources of NewRunner that harden and observe extend.
type operated struct {
	bucket awss3.Bucket
	table  awsdynamodb.Table
	items  awssqs.Queue
	dlq    awssqs.Queue
	// scheduleDLQ takes what the stack's EventBridge rules could not
	// deliver (alarmed).
	scheduleDLQ awssqs.Queue
	api         awsapigateway.LambdaRestApi
	functions   map[string]awslambda.Function // by Function* name
}

// opsSettings are the operations props with defaults filled.
type opsSettings struct {
	alarmTopicARN    string
	tracing          bool
	queueAgeAlarm    time.Duration
	stallAlarm       time.Duration
	noEventAlarms    bool
	bucketVersioning bool
	apiRate          float64
	apiBurst         int
	// itemsMaxConcurrency is RunnerProps.ItemsMaxConcurrency (default
	// DefaultItemsMaxConcurrency), or 10 × ItemsMaximumPollers in
	// provisioned mode: the messages-resent alarm scales with it.
	itemsMaxConcurrency int
}

func opsOf(props *RunnerProps) opsSettings {
	o := opsSettings{queueAgeAlarm: DefaultQueueAgeAlarm, stallAlarm: DefaultStallAlarm, apiRate: DefaultAPIRateLimit, apiBurst: DefaultAPIBurstLimit,
		itemsMaxConcurrency: DefaultItemsMaxConcurrency}
	if props == nil {
		return o
	}
	if props.ItemsMaxConcurrency != 0 {
		o.itemsMaxConcurrency = props.ItemsMaxConcurrency
	}
	// Provisioned mode: the items queue's source runs what its pollers drive.
	o.itemsMaxConcurrency = config.ItemsConcurrencyOf(o.itemsMaxConcurrency, props.ItemsMaximumPollers)
	o.alarmTopicARN, o.tracing, o.bucketVersioning = props.AlarmTopicARN, props.Tracing, props.BucketVersioning
	if props.QueueAgeAlarm != 0 {
		o.queueAgeAlarm = props.QueueAgeAlarm
	}
	if props.StallAlarm != 0 {
		o.stallAlarm = props.StallAlarm
	}
	o.noEventAlarms = props.NoBatchEventAlarms
	if props.APIRateLimit != 0 {
		o.apiRate = props.APIRateLimit
	}
	if props.APIBurstLimit != 0 {
		o.apiBurst = props.APIBurstLimit
	}
	return o
}

// checkOperations validates the operations props (derive's hook).
func checkOperations(props *RunnerProps) []error {
	o := opsOf(props)
	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &PropError{Field: field, Value: value, Reason: reason})
	}
	// A token (topic.TopicArn() of a topic in the same app) resolves at deploy.
	if o.alarmTopicARN != "" && !*awscdk.Token_IsUnresolved(jsii.String(o.alarmTopicARN)) && !snsARNPattern.MatchString(o.alarmTopicARN) {
		bad("AlarmTopicARN", o.alarmTopicARN, "want an SNS topic ARN, arn:<partition>:sns:<region>:<account>:<name>")
	}
	// SQS keeps a message at most 14 days; CloudWatch alarms take whole
	// periods of 60 s multiples.
	if o.queueAgeAlarm < time.Minute || o.queueAgeAlarm > itemsRetention || o.queueAgeAlarm%time.Minute != 0 {
		bad("QueueAgeAlarm", o.queueAgeAlarm.String(), "want whole minutes from 1m to 168h (the items queue's 7-day retention)")
	}
	// Finalize's tick measures a run's stall every 5 minutes.
	if o.stallAlarm < 10*time.Minute || o.stallAlarm > 12*time.Hour || o.stallAlarm%time.Minute != 0 {
		bad("StallAlarm", o.stallAlarm.String(), "want whole minutes from 10m to 12h (finalize's tick measures every 5 minutes)")
	}
	if !(o.apiRate > 0) {
		bad("APIRateLimit", strconv.FormatFloat(o.apiRate, 'g', -1, 64), "want requests per second > 0")
	}
	if o.apiBurst < 1 {
		bad("APIBurstLimit", strconv.Itoa(o.apiBurst), "want at least 1 request")
	}
	return errs
}

// harden adds what the storage and the API need beyond their
// construction in NewRunner:
//
//   - SSL-only resource policies (deny when aws:SecureTransport is false) on
//     every queue of the stack, on every target; the bucket gets its own through
//     EnforceSSL. The emulator serves plain HTTP and evaluates neither
//     policy (localstack/README.md), so its tests are not locked out.
//   - Bucket versioning when RunnerProps.BucketVersioning, with noncurrent
//     versions (and the delete markers they leave) expiring after the
//     retention, so that a deleted batch does not live on as versions.
//   - (On the AWS target the table's deletion protection is turned on by
//     the TableProtection custom resource once the create got that far,
//     setup.go; point-in-time recovery is set where the table is built.)
//   - Stage throttling (RunnerProps.APIRateLimit, APIBurstLimit) on every
//     method, and a request validator on every method (request parameters:
//     the {proxy+} path must be present). Bodies are checked by submit,
//     which names the field at fault, and capped at
//     handler.MaxRequestBodyBytes (Lambda's 6 MB synchronous payload;
//     API Gateway's own 10 MB limit cannot be lowered).
func harden(stack constructs.Construct, s settings, props *RunnerProps, r operated) {
	o := opsOf(props)
	onAWS := s.target == TargetAWS
	for _, q := range queues(stack) {
		q.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String("DenyInsecureTransport"),
			Effect:     awsiam.Effect_DENY,
			Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
			Actions:    jsii.Strings("sqs:*"),
			Resources:  jsii.Strings(*q.QueueArn()),
			Conditions: &map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
		}))
		// A queue kept by `cdk destroy` keeps its SSL-only policy (and a
		// failed first create deletes both).
		if onAWS {
			q.Node().FindChild(jsii.String("Policy")).(awssqs.QueuePolicy).ApplyRemovalPolicy(awscdk.RemovalPolicy_RETAIN_ON_UPDATE_OR_DELETE)
		}
	}
	// So does the bucket (EnforceSSL made its policy).
	if onAWS {
		r.bucket.Policy().ApplyRemovalPolicy(awscdk.RemovalPolicy_RETAIN_ON_UPDATE_OR_DELETE)
	}

	if o.bucketVersioning {
		cfnBucket := r.bucket.Node().DefaultChild().(awss3.CfnBucket)
		cfnBucket.SetVersioningConfiguration(&awss3.CfnBucket_VersioningConfigurationProperty{Status: jsii.String("Enabled")})
		r.bucket.AddLifecycleRule(&awss3.LifecycleRule{
			Id:                          jsii.String("expire-noncurrent-versions"),
			Enabled:                     jsii.Bool(true),
			NoncurrentVersionExpiration: awscdk.Duration_Days(jsii.Number(float64(s.retentionDays))),
			ExpiredObjectDeleteMarker:   jsii.Bool(true),
		})
	}

	stage := r.api.DeploymentStage().Node().DefaultChild().(awsapigateway.CfnStage)
	stage.SetMethodSettings(&[]any{&awsapigateway.CfnStage_MethodSettingProperty{
		ResourcePath:         jsii.String("/*"),
		HttpMethod:           jsii.String("*"),
		ThrottlingRateLimit:  jsii.Number(o.apiRate),
		ThrottlingBurstLimit: jsii.Number(float64(o.apiBurst)),
		// Execution logs of errors only (access logs carry every request,
		// observability.go); never request bodies.
		LoggingLevel:     jsii.String("ERROR"),
		DataTraceEnabled: jsii.Bool(false),
		MetricsEnabled:   jsii.Bool(false),
	}})
	validator := awsapigateway.NewRequestValidator(stack, jsii.String("RequestValidator"), &awsapigateway.RequestValidatorProps{
		RestApi:                   r.api,
		RequestValidatorName:      jsii.String("parameters"),
		ValidateRequestParameters: jsii.Bool(true),
		ValidateRequestBody:       jsii.Bool(true),
	})
	for _, m := range *r.api.Methods() {
		cm := m.Node().DefaultChild().(awsapigateway.CfnMethod)
		cm.SetRequestValidatorId(validator.RequestValidatorId())
		if strings.HasSuffix(*m.Resource().Path(), "/{proxy+}") {
			cm.SetRequestParameters(&map[string]any{"method.request.path.proxy": true})
		}
	}
}

// queues returns every SQS queue of the stack (the items queue, its
// dead-letter queue, and any other the stack defines).
func queues(stack constructs.Construct) []awssqs.Queue {
	var out []awssqs.Queue
	for _, c := range *stack.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		if q, ok := c.(awssqs.Queue); ok {
			out = append(out, q)
		}
	}
	return out
}

// snsARNPattern is the form of an SNS topic ARN.
var snsARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$`)
