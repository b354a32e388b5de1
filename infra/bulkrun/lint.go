package bulkrun

import (
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Template linters: cfn-lint (with the serverless rules,
// cfn-lint-serverless) and checkov, run by `make lint` on the templates
// bulkrun ships (tools/lint/lint-templates).
const (
	LintCfnLint = "cfn-lint"
	LintCheckov = "checkov"
)

// LintSuppression is one written exception to a template linter, on the
// Runner's resources of one CloudFormation type (and, with Construct, only
// the one with that construct id under the Runner). It is written into
// the resource's template Metadata — cfn-lint's
// {"cfn-lint": {"config": {"ignore_checks": [Rule]}}}, checkov's
// {"checkov": {"skip": [{"id": Rule, "comment": Reason}]}} — so an app that
// embeds the Runner keeps them. Every one is listed, with the same reason,
// in infra/README.md ("Template linters"); a test keeps both equal.
type LintSuppression struct {
	Tool      string // LintCfnLint or LintCheckov
	Rule      string // "W3005", "CKV_AWS_117"
	Type      string // CloudFormation resource type
	Construct string // "" every resource of Type under the Runner; else that construct's
	Reason    string
}

// LintSuppressions are the Runner's template-linter exceptions.
var LintSuppressions = []LintSuppression{
	{LintCfnLint, "W3005", "AWS::Lambda::Function", "",
		"CDK writes DependsOn on each function's role and its default policy so that the function exists only once its grants do; the GetAtt of the role makes one of them redundant, not wrong."},
	{LintCfnLint, "WS1000", "AWS::Lambda::Function", "",
		"X-Ray active tracing is the Tracing prop (off by default: X-Ray bills per trace recorded, and the functions' metrics and JSON logs say what an operator needs); with it on, every function traces."},
	{LintCfnLint, "WS1004", "AWS::Lambda::Function", "",
		"On AWS each function logs to its own log group with a one-month retention (LoggingConfig.LogGroup); the rule only finds groups named /aws/lambda/{function}. On the emulator Lambda's default group is used."},
	{LintCfnLint, "WS1002", "AWS::Lambda::Function", FunctionSubmit,
		"submit is invoked by API Gateway (the REST API), S3 (uploads under incoming/) and EventBridge (the schedules): one permission per caller, each scoped to its source."},
	{LintCfnLint, "ES1001", "AWS::Lambda::EventSourceMapping", "",
		"SQS event source mappings take no on-failure destination (Lambda supports DestinationConfig for stream and Kafka sources only); a message that keeps failing goes through the queues' redrive policies: items queue, dead-letter queue, parking queue, alarmed."},
	{LintCfnLint, "ES1007", "AWS::Lambda::Permission", "",
		"Every function S3 and EventBridge invoke asynchronously (submit, finalize, sweep) has an AWS::Lambda::EventInvokeConfig with an alarmed on-failure queue; the rule matches the permission's function (its ARN) against the config's (its name) and misses it."},
	{LintCfnLint, "ES6000", "AWS::SQS::Queue", "ItemsParkingQueue",
		"The parking queue is the last stop of dead letters the item function could not record: nothing consumes it, an operator redrives it (docs/operations.md), and its depth is alarmed."},
	{LintCfnLint, "ES6000", "AWS::SQS::Queue", "SubmitFailuresQueue",
		"The submit failures queue is itself the on-failure destination of submit's asynchronous invocations: nothing consumes it, an operator reads and redrives it, and its depth is alarmed."},
	{LintCfnLint, "ES6000", "AWS::SQS::Queue", "InvokeFailuresQueue",
		"The invocation failures queue is itself the on-failure destination of finalize's and sweep's asynchronous invocations: nothing consumes it, and its depth is alarmed."},
	{LintCfnLint, "ES6000", "AWS::SQS::Queue", "ScheduleDeadLetterQueue",
		"The schedule dead-letter queue is itself the dead-letter queue of the schedules' EventBridge targets: nothing consumes it, and its depth is alarmed."},
	{LintCfnLint, "WS2002", "AWS::ApiGateway::Stage", "",
		"X-Ray tracing of the API stage is the Tracing prop (off by default, billed per trace); access logs record every request."},
	{LintCheckov, "CKV_AWS_117", "AWS::Lambda::Function", "",
		"The functions reach only AWS APIs and the webhook pipeline's public receivers (non-public addresses are refused unless allow-listed, package egress); a VPC would add NAT gateways and their cost, and protect nothing the IAM policies do not."},
	{LintCheckov, "CKV_AWS_115", "AWS::Lambda::Function", "",
		"Reserved concurrency is the ReservedConcurrency prop, checked against the account at synth (docs/operations.md, \"Raising limits\"); by default none is reserved, since a reservation takes capacity from the account's other functions, and the item function is bounded by ItemsMaxConcurrency."},
	{LintCheckov, "CKV_AWS_116", "AWS::Lambda::Function", "",
		"A function's dead-letter queue is for asynchronous invocations: submit, finalize and sweep have on-failure destinations instead (EventInvokeConfig, alarmed), item is invoked by its SQS event sources, whose failures go through the queues' redrive policies, and setup is invoked synchronously by CloudFormation, which fails the stack operation when it fails."},
	{LintCheckov, "CKV_AWS_173", "AWS::Lambda::Function", "",
		"The environment holds names and numbers only (table, bucket, queue URLs, limits); secrets are never in it, batches reference them in SSM or Secrets Manager. Lambda encrypts it at rest with an AWS managed key."},
	{LintCheckov, "CKV_AWS_158", "AWS::Logs::LogGroup", "",
		"CloudWatch Logs encrypts every log group at rest; the functions log no item payload and no secret (docs: logs carry neither), and access logs no header or body, so a customer managed key would protect nothing more."},
	{LintCheckov, "CKV_AWS_27", "AWS::SQS::Queue", "",
		"Every queue is encrypted at rest with SQS-managed keys (SSE-SQS, SqsManagedSseEnabled); checkov looks only for a KMS key."},
	{LintCheckov, "CKV_AWS_119", "AWS::DynamoDB::Table", "",
		"DynamoDB encrypts the table at rest with an AWS owned key; a customer managed key adds a KMS request per read and write on the hottest path, and the table holds no secret."},
	{LintCheckov, "CKV_AWS_18", "AWS::S3::Bucket", "",
		"Only the stack's functions and uploaders write the bucket; object-level access is audited with CloudTrail data events where the account wants them, not with server access logs (which would need a second, unlogged bucket)."},
	{LintCheckov, "CKV_AWS_21", "AWS::S3::Bucket", "",
		"Versioning is the BucketVersioning prop (off by default: a swept or forgotten batch must not live on as noncurrent versions; with it on they expire after the retention)."},
	{LintCheckov, "CKV_AWS_120", "AWS::ApiGateway::Stage", "",
		"The API answers live state (a batch's census while it runs, new submits): a cache would serve stale answers."},
	{LintCheckov, "CKV_AWS_73", "AWS::ApiGateway::Stage", "",
		"X-Ray tracing of the API stage is the Tracing prop (off by default, billed per trace); access logs record every request."},
}

// lintSuppressions writes LintSuppressions into the Metadata of the
// Runner's resources (the last step of NewRunner, after every resource
// exists).
func lintSuppressions(root constructs.Construct) {
	for _, c := range *root.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		res, ok := c.(awscdk.CfnResource)
		if !ok {
			continue
		}
		var picked []LintSuppression
		for _, l := range LintSuppressions {
			if l.Type == *res.CfnResourceType() && (l.Construct == "" || childOf(root, c, l.Construct)) {
				picked = append(picked, l)
			}
		}
		SuppressLint(res, picked...)
	}
}

// childOf says whether c is, or is under, root's child with id.
func childOf(root constructs.Construct, c constructs.IConstruct, id string) bool {
	child := root.Node().TryFindChild(jsii.String(id))
	if child == nil {
		return false
	}
	for n := c; n != nil; n = n.Node().Scope() {
		if *n.Node().Path() == *child.Node().Path() {
			return true
		}
	}
	return false
}

// SuppressLint writes suppressions into res's template Metadata, the
// shapes cfn-lint and checkov read; an app applies them to its own
// resources next to the Runner's. It replaces what an earlier call wrote.
func SuppressLint(res awscdk.CfnResource, suppressions ...LintSuppression) {
	var ignore []string
	var skip []map[string]string
	for _, l := range suppressions {
		switch l.Tool {
		case LintCfnLint:
			if !slices.Contains(ignore, l.Rule) {
				ignore = append(ignore, l.Rule)
			}
		case LintCheckov:
			skip = append(skip, map[string]string{"id": l.Rule, "comment": l.Reason})
		}
	}
	if len(ignore) > 0 {
		res.AddMetadata(jsii.String("cfn-lint"), map[string]any{"config": map[string]any{"ignore_checks": ignore}})
	}
	if len(skip) > 0 {
		res.AddMetadata(jsii.String("checkov"), map[string]any{"skip": skip})
	}
}
