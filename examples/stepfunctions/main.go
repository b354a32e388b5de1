// Command stepfunctions is the CDK app of the example state machine
// (package workflow): a stack of its own, beside a deployed bulkrun
// stack, holding a state machine that submits a batch with its task
// token, waits for bulkrun's answer and branches on the verdict, and the
// small function that submits (./submitter). README.md in this folder
// says how to deploy it on AWS and on the emulator.
//
// Context (cdk.json sets the defaults; -c key=value overrides):
//
//	apiId             bulkrun's REST API id (the bulkrun stack's ApiId output); required
//	apiStage          its stage (ApiStage output; default v1)
//	stateMachineName  the state machine's name (default bulkrun-example-batch,
//	                  which bulkrun's stack must name in TaskStateMachines)
//	submitterCode     the folder of the submitter's bootstrap (default
//	                  ../../build/stepfunctions-submitter: make stepfunctions-example)
//	target            aws (default: the submitter is arm64) or emulator (the host's architecture)
//	stackName         the stack (default bulkrun-stepfunctions-example)
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/examples/stepfunctions/workflow"
	"github.com/bulkrun/bulkrun/shared/config"
)

// DefaultStackName is the example stack's name when stackName is unset.
const DefaultStackName = "bulkrun-stepfunctions-example"

// NewExample defines the example stack in app from its context.
func NewExample(app awscdk.App) (awscdk.Stack, workflow.Workflow, error) {
	get := func(key, def string) string {
		if v, ok := app.Node().TryGetContext(jsii.String(key)).(string); ok && v != "" {
			return v
		}
		return def
	}
	apiID := get("apiId", "")
	if apiID == "" {
		return nil, workflow.Workflow{}, fmt.Errorf("context apiId is required: bulkrun's REST API id, the ApiId output of its stack (-c apiId=…)")
	}
	arch := awslambda.Architecture_ARM_64()
	switch t := get("target", "aws"); t {
	case "aws":
	case "emulator":
		if runtime.GOARCH == "amd64" {
			arch = awslambda.Architecture_X86_64()
		}
	default:
		return nil, workflow.Workflow{}, fmt.Errorf("context target: %q is neither aws nor emulator", t)
	}
	env := &awscdk.Environment{}
	if a := os.Getenv("CDK_DEFAULT_ACCOUNT"); a != "" {
		env.Account = jsii.String(a)
	}
	if r := os.Getenv("CDK_DEFAULT_REGION"); r != "" {
		env.Region = jsii.String(r)
	}
	stack := awscdk.NewStack(app, jsii.String(get("stackName", DefaultStackName)), &awscdk.StackProps{Env: env})
	w := workflow.New(stack, "Workflow", workflow.Props{
		StateMachineName: get("stateMachineName", config.ExampleStateMachine),
		APIID:            apiID,
		APIStage:         get("apiStage", config.DefaultAPIStage),
		SubmitterCode:    get("submitterCode", "../../build/stepfunctions-submitter"),
		Architecture:     arch,
	})
	awscdk.NewCfnOutput(stack, jsii.String("StateMachineArn"), &awscdk.CfnOutputProps{Value: w.StateMachine.StateMachineArn()})
	awscdk.NewCfnOutput(stack, jsii.String("SubmitterFunction"), &awscdk.CfnOutputProps{Value: w.Submitter.FunctionName()})
	return stack, w, nil
}

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	if _, _, err := NewExample(app); err != nil {
		fmt.Fprintln(os.Stderr, "stepfunctions:", err)
		jsii.Close()
		os.Exit(2)
	}
	app.Synth(nil)
}
