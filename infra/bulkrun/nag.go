package bulkrun

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// NagSuppression is one written exception to cdk-nag's AwsSolutions
// checks (https://github.com/cdklabs/cdk-nag, RULES.md). Every one is
// listed, with the same reason, in infra/README.md ("cdk-nag"); the
// infra tests check both the list and that nothing else fires.
type NagSuppression struct {
	Rule string
	// AppliesTo are ECMA-262 regexes over the finding ids of IAM4/IAM5
	// ("Resource::<...>", "Policy::<...>"); empty: the whole rule.
	AppliesTo []string
	// Target limits the suppression to one target; "" is every target.
	Target string
	// Construct limits the suppression to the construct with this id
	// under the stack (skipped when the stack has none); "" is the stack.
	Construct string
	Reason    string
}

// nagBucket matches the bucket of an S3 ARN in a cdk-nag finding: a name,
// or GeneratedBucketName as cdk-nag writes it (its Fn::Split holds a "/").
const nagBucket = `(?:bulkrun-\{"Fn::Select":\[2,\{"Fn::Split":\["\/",\{"Ref":"AWS::StackId"\}\]\}\]\}|[^/]+)`

// NagSuppressions are the stack's cdk-nag exceptions.
var NagSuppressions = []NagSuppression{
	{Rule: "AwsSolutions-IAM4", AppliesTo: []string{`/^Policy::arn:<AWS::Partition>:iam::aws:policy\/service-role\/AWSLambdaBasicExecutionRole$/`},
		Reason: "The functions' AWS managed basic execution role grants only logs:CreateLogGroup, CreateLogStream and PutLogEvents, which every Lambda function needs; everything else is an explicit inline grant."},
	{Rule: "AwsSolutions-IAM4", AppliesTo: []string{`/^Policy::arn:<AWS::Partition>:iam::aws:policy\/service-role\/AmazonAPIGatewayPushToCloudWatchLogs$/`}, Target: TargetAWS,
		Reason: "API Gateway's account-level CloudWatch role, needed for the stage's access and execution logs, uses the AWS managed policy made for it (log writes only)."},
	{Rule: "AwsSolutions-IAM5", AppliesTo: []string{`/^Resource::<[A-Za-z0-9]*Table[0-9A-F]+\.Arn>\/index\/\*$/`},
		Reason: "Query on the table's own global secondary indexes (list, attention, batches): the wildcard covers only this table's indexes."},
	{Rule: "AwsSolutions-IAM5", AppliesTo: []string{`/^Resource::arn:<AWS::Partition>:s3:::` + nagBucket + `\/(batches|batches\/\*\/finalize|incoming-errors|schedule-errors)\/\*$/`},
		Reason: "Objects under the prefixes the stack owns (batches/{batch id}/…, finalize's checkpoints batches/{batch id}/finalize/…, incoming-errors/…, schedule-errors/…): keys carry batch ids or upload names chosen at run time."},
	{Rule: "AwsSolutions-IAM5", AppliesTo: []string{`/^Resource::arn:<AWS::Partition>:s3:::` + nagBucket + `\/\*$/`},
		Reason: "submit and item read sources named by callers (s3:GetObject only) in the stack's bucket and the declared SourceBuckets; the keys are chosen per batch, so no narrower resource can be named."},
	{Rule: "AwsSolutions-IAM5", AppliesTo: []string{`/^Resource::arn:aws[a-z-]*:(ssm:[a-z0-9-]+:[0-9]{12}:parameter\/|secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:).*\*$/`},
		Reason: "The item function reads the SSM parameters and Secrets Manager secrets that batches reference, under the SecretPrefixes the operator declared (ssm:GetParameter and secretsmanager:GetSecretValue only, one statement per service); the names under a prefix are chosen per batch."},
	{Rule: "AwsSolutions-IAM5", AppliesTo: []string{`/^Resource::\*$/`},
		Reason: "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions (only with Tracing on)."},
	{Rule: "AwsSolutions-APIG3",
		Reason: "Every method needs SigV4-signed IAM credentials and the stage is throttled; a WAF web ACL is an account-level choice (and cost) that can be associated with the stage without changing the stack."},
	{Rule: "AwsSolutions-COG4",
		Reason: "The API authorizes with AWS_IAM (SigV4) on every method: callers are IAM principals, not Cognito users."},
	{Rule: "AwsSolutions-S1",
		Reason: "Only the stack's functions and uploaders write the bucket; object-level access is audited with CloudTrail data events where the account wants them, not with server access logs (which would need a second, unlogged bucket)."},
	{Rule: "AwsSolutions-SQS3", Construct: "InvokeFailuresQueue",
		Reason: "The invocation failures queue is itself the last stop of finalize's and sweep's failed asynchronous invocations (alarmed on depth); an operator reads it and invokes again, nothing consumes it, so it needs no dead-letter queue of its own."},
	{Rule: "AwsSolutions-SQS3", Construct: "ScheduleDeadLetterQueue",
		Reason: "The schedule dead-letter queue is itself the dead-letter queue of the schedules' EventBridge targets (alarmed on depth); nothing consumes it, so it needs none of its own."},
	{Rule: "AwsSolutions-SQS3", Construct: "SubmitFailuresQueue",
		Reason: "The submit failures queue is itself the last stop of submit's failed asynchronous invocations (alarmed on depth); an operator reads and redrives it, nothing consumes it, so it needs no dead-letter queue of its own."},
	{Rule: "AwsSolutions-DDB3", Target: TargetEmulator,
		Reason: "The emulator does not apply point-in-time recovery; the AWS target turns it on."},
}

// nagSuppressions records NagSuppressions of s's target on the stack, as
// cdk-nag metadata: without cdk-nag the template is otherwise unchanged.
func nagSuppressions(stack constructs.Construct, s settings, _ operated) {
	var list []*cdknag.NagPackSuppression
	for _, n := range NagSuppressions {
		if n.Target != "" && n.Target != s.target {
			continue
		}
		sup := &cdknag.NagPackSuppression{Id: jsii.String(n.Rule), Reason: jsii.String(n.Reason)}
		if len(n.AppliesTo) > 0 {
			var to []any
			for _, re := range n.AppliesTo {
				to = append(to, &cdknag.RegexAppliesTo{Regex: jsii.String(re)})
			}
			sup.AppliesTo = &to
		}
		if n.Construct != "" {
			if c := stack.Node().TryFindChild(jsii.String(n.Construct)); c != nil {
				cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{sup}, jsii.Bool(true))
			}
			continue
		}
		list = append(list, sup)
	}
	// On the runner's construct and its children only: a stack that
	// embeds the runner keeps cdk-nag's findings on its own resources.
	cdknag.NagSuppressions_AddResourceSuppressions(stack, &list, jsii.Bool(true))
	// A role whose default policy is too large for one document (long
	// allow-lists) gets OverflowPolicy managed policies at synth, from a
	// mutating aspect of CDK's, after the line above: an aspect that runs
	// after it gives them the same suppressions, before cdk-nag's checks.
	awscdk.Aspects_Of(stack).Add(&overflowSuppressions{list: list},
		&awscdk.AspectOptions{Priority: jsii.Number(*awscdk.AspectPriority_MUTATING() + 1)})
}

// overflowSuppressions writes its suppressions on the OverflowPolicy
// managed policies CDK splits off a role's default policy.
type overflowSuppressions struct {
	list []*cdknag.NagPackSuppression
}

func (o *overflowSuppressions) Visit(node constructs.IConstruct) {
	if _, ok := node.(awsiam.CfnManagedPolicy); ok && strings.Contains(*node.Node().Path(), "/OverflowPolicy") {
		cdknag.NagSuppressions_AddResourceSuppressions(node, &o.list, jsii.Bool(false))
	}
}
