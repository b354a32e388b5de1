// Command embed is the CDK app of a team that already has its own stack
// and drops bulkrun into it: its own Python function (the example in
// examples/lambda-python) is the pipeline, run once per item by bulkrun's
// built-in "lambda" pipeline, and its own SNS topic gets bulkrun's alarms.
//
// Run it from examples/embed with the cdk CLI (cdk.json says "go run ."),
// after building bulkrun's functions (make functions, at the repository's
// root):
//
//	cdk synth -c functionsDir=../../build/functions
//	cdk deploy -c functionsDir=../../build/functions
//
// then submit batches naming the function the stack outputs:
//
//	bulkrun submit orders.jsonl --stack orders --pipeline lambda \
//	    --options '{"function": "<ScorerFunctionArn output>"}'
package main

import (
	"os"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/infra/bulkrun"
	"github.com/bulkrun/bulkrun/shared/config"
)

// Orders is the team's stack with bulkrun inside it.
type Orders struct {
	Stack    awscdk.Stack
	Scorer   awslambda.Function // the team's own function, the pipeline
	Uploader awsiam.Role        // the team's role that starts batches by upload
	Runner   bulkrun.Runner
}

// NewOrders defines the stack id in scope. functionsDir holds bulkrun's
// function binaries (bulkrun.RunnerProps.FunctionsDir); scorerDir the
// Python function's code.
func NewOrders(scope constructs.Construct, id, functionsDir, scorerDir string) Orders {
	env := &awscdk.Environment{}
	if a := os.Getenv("CDK_DEFAULT_ACCOUNT"); a != "" {
		env.Account = jsii.String(a)
	}
	if r := os.Getenv("CDK_DEFAULT_REGION"); r != "" {
		env.Region = jsii.String(r)
	}
	stack := awscdk.NewStack(scope, jsii.String(id), &awscdk.StackProps{Env: env})

	// The team's own function, in Python.
	scorer := awslambda.NewFunction(stack, jsii.String("Scorer"), &awslambda.FunctionProps{
		Runtime:    awslambda.Runtime_PYTHON_3_12(),
		Handler:    jsii.String("handler.handler"),
		Code:       awslambda.Code_FromAsset(jsii.String(scorerDir), nil),
		Timeout:    awscdk.Duration_Seconds(jsii.Number(30)),
		MemorySize: jsii.Number(256),
	})
	alarms := awssns.NewTopic(stack, jsii.String("Alarms"), nil)

	// bulkrun: only the lambda pipeline, allowed to invoke only the
	// scorer; items get 2 minutes and 5 attempts.
	runner := bulkrun.NewRunner(stack, jsii.String("Bulkrun"), &bulkrun.RunnerProps{
		FunctionsDir:        functionsDir,
		Pipelines:           []string{"lambda"},
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
	functionsDir := "../../build/functions"
	if v, ok := app.Node().TryGetContext(jsii.String("functionsDir")).(string); ok && v != "" {
		functionsDir = v
	}
	NewOrders(app, "orders", functionsDir, "../lambda-python")
	app.Synth(nil)
}
