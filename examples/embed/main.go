// Command embed is the CDK app of a team that already has its own stack
// and its own Go module (this folder: go.mod, module example.com/orders),
// and drops bulkrun into it with two kinds of pipeline:
//
//   - its Go pipeline "enrich" (package enrich), declared once in package
//     pipelines: the team's binary (runner/) runs it as bulkrun's submit
//     and item functions, and this app names it to the construct
//     (RunnerProps.PipelineCode, CustomPipelines);
//   - its Python function (the example in examples/lambda-python), run
//     once per item by bulkrun's built-in "lambda" pipeline.
//
// Its own SNS topic gets bulkrun's alarms and batch events, encrypted
// with a key of its own that CloudWatch and EventBridge may use.
//
// Build the functions, then run the cdk CLI from examples/embed (cdk.json
// says "go run ." and points functionsDir and pipelineCode at the builds
// of `make functions` at the repository's root):
//
//	make functions                      # at the root: bulkrun's and ./runner
//	cdk deploy                          # here
//
// then submit batches to either pipeline:
//
//	bulkrun submit texts.jsonl --stack orders --pipeline enrich --key-field key
//	bulkrun submit orders.jsonl --stack orders --pipeline lambda \
//	    --options '{"function": "<ScorerFunctionArn output>"}'
package main

import (
	"os"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/infra/bulkrun"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"

	"example.com/orders/pipelines"
)

// Orders is the team's stack with bulkrun inside it.
type Orders struct {
	Stack    awscdk.Stack
	Scorer   awslambda.Function // the team's own function, the pipeline
	Uploader awsiam.Role        // the team's role that starts batches by upload
	Runner   bulkrun.Runner
}

// NewOrders defines the stack id in scope. functionsDir holds bulkrun's
// function binaries (bulkrun.RunnerProps.FunctionsDir), pipelineCode the
// bootstrap built from ./runner (RunnerProps.PipelineCode), scorerDir the
// Python function's code.
func NewOrders(scope constructs.Construct, id, functionsDir, pipelineCode, scorerDir string) Orders {
	env := &awscdk.Environment{}
	if a := os.Getenv("CDK_DEFAULT_ACCOUNT"); a != "" {
		env.Account = jsii.String(a)
	}
	if r := os.Getenv("CDK_DEFAULT_REGION"); r != "" {
		env.Region = jsii.String(r)
	}
	stack := awscdk.NewStack(scope, jsii.String(id), &awscdk.StackProps{Env: env})

	// The team's own function, in Python: traced, its own log group, and
	// enough reserved concurrency for bulkrun's item function (2 event
	// sources × ItemsMaxConcurrency 20) to call it at once.
	scorer := awslambda.NewFunction(stack, jsii.String("Scorer"), &awslambda.FunctionProps{
		Runtime:                      awslambda.Runtime_PYTHON_3_12(),
		Handler:                      jsii.String("handler.handler"),
		Code:                         awslambda.Code_FromAsset(jsii.String(scorerDir), nil),
		Timeout:                      awscdk.Duration_Seconds(jsii.Number(30)),
		MemorySize:                   jsii.Number(256),
		Tracing:                      awslambda.Tracing_ACTIVE,
		ReservedConcurrentExecutions: jsii.Number(40),
		LoggingFormat:                awslambda.LoggingFormat_JSON,
		LogGroup: awslogs.NewLogGroup(stack, jsii.String("ScorerLogs"), &awslogs.LogGroupProps{
			Retention: awslogs.RetentionDays_ONE_MONTH,
		}),
	})
	// The team's reasons for what the template linters flag on its own
	// function, written next to bulkrun's (make lint checks this template).
	bulkrun.SuppressLint(scorer.Node().DefaultChild().(awscdk.CfnResource),
		bulkrun.LintSuppression{Tool: bulkrun.LintCfnLint, Rule: "W3005"},  // CDK's DependsOn on the role's policy
		bulkrun.LintSuppression{Tool: bulkrun.LintCfnLint, Rule: "WS1004"}, // ScorerLogs, one month, through LoggingConfig
		bulkrun.LintSuppression{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_117", Reason: "The scorer calls no network service: no VPC."},
		bulkrun.LintSuppression{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_116", Reason: "Invoked synchronously by bulkrun's item function, which retries it: no asynchronous dead letters."},
		bulkrun.LintSuppression{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_173", Reason: "No environment variables of its own."},
	)
	bulkrun.SuppressLint(stack.Node().FindChild(jsii.String("ScorerLogs")).Node().DefaultChild().(awscdk.CfnResource),
		bulkrun.LintSuppression{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_158", Reason: "The scorer logs no item payload; CloudWatch Logs encrypts at rest."})
	// The alarm topic, encrypted with a key of the team's own: CloudWatch
	// (bulkrun's alarms) and EventBridge (its batch events) publish only
	// to a topic whose key policy lets their service principals use the
	// key, which the AWS managed aws/sns key's never does ("Encrypting
	// messages published to Amazon SNS with AWS KMS", Amazon SNS developer
	// guide); the topic's own policy lets them publish, from this
	// account only. `bulkrun doctor` checks a stack's alarm topic so.
	publishers := []awsiam.IPrincipal{
		awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil),
		awsiam.NewServicePrincipal(jsii.String("events.amazonaws.com"), nil),
	}
	alarmsKey := awskms.NewKey(stack, jsii.String("AlarmsKey"), &awskms.KeyProps{
		Description:       jsii.String("orders: the alarm topic's messages"),
		EnableKeyRotation: jsii.Bool(true),
	})
	alarmsKey.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAndEventBridgePublishToTheAlarmTopic"),
		Principals: &publishers,
		Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey*"),
		Resources:  jsii.Strings("*"),
	}), nil)
	alarms := awssns.NewTopic(stack, jsii.String("Alarms"), &awssns.TopicProps{MasterKey: alarmsKey})
	alarms.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAndEventBridgePublish"),
		Principals: &publishers,
		Actions:    jsii.Strings("sns:Publish"),
		Resources:  jsii.Strings(*alarms.TopicArn()),
		Conditions: &map[string]any{"StringEquals": map[string]any{"aws:SourceAccount": stack.Account()}},
	}))

	// bulkrun: the team's Go pipelines (the binary built from ./runner,
	// and their names from the same list) and the lambda pipeline, allowed
	// to invoke only the scorer; items get 2 minutes and 5 attempts.
	custom := registered.Declared(pipelines.All...)
	runner := bulkrun.NewRunner(stack, jsii.String("Bulkrun"), &bulkrun.RunnerProps{
		FunctionsDir:        functionsDir,
		PipelineCode:        pipelineCode,
		CustomPipelines:     custom,
		Pipelines:           append([]string{"lambda"}, custom...),
		LambdaFunctions:     []string{*scorer.FunctionArn()},
		ItemTimeout:         2 * time.Minute,
		MaxAttempts:         5,
		MaxReceiveCount:     8,
		ItemsMaxConcurrency: 20,
		AlarmTopicARN:       *alarms.TopicArn(),
	})

	// The team's nightly export job uploads files under incoming/: each
	// starts a batch (pipeline and options in the object's metadata).
	uploader := awsiam.NewRole(stack, jsii.String("Uploader"), &awsiam.RoleProps{
		AssumedBy: awsiam.NewServicePrincipal(jsii.String("batch.amazonaws.com"), nil),
	})
	runner.Bucket().GrantPut(uploader, jsii.String(config.IncomingPrefix+"*"))

	awscdk.NewCfnOutput(stack, jsii.String("ScorerFunctionArn"), &awscdk.CfnOutputProps{
		Value:       scorer.FunctionArn(),
		Description: jsii.String(`the function to name in pipeline_options: {"function": "<this>"}`),
	})
	return Orders{Stack: stack, Scorer: scorer, Uploader: uploader, Runner: runner}
}

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	dir := func(key, def string) string {
		if v, ok := app.Node().TryGetContext(jsii.String(key)).(string); ok && v != "" {
			return v
		}
		return def
	}
	NewOrders(app, "orders", dir("functionsDir", "../../build/functions"), dir("pipelineCode", "../../build/pipeline-code"), "../lambda-python")
	app.Synth(nil)
}
