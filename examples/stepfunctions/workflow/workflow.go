// Package workflow is the example state machine of
// examples/stepfunctions: a Task state that submits a batch to bulkrun
// with its task token and waits for bulkrun's answer, then a Choice on
// the run's status.
//
//	Submit ──(bulkrun.Cancelled)────→ Cancelled (Fail)
//	   │   ──(bulkrun.Refused)──────→ Refused (Fail)
//	   │   ──(bulkrun.FinalizeFailed)→ FinalizeFailed (Fail)
//	   ▼
//	Verdict ── status completed ──────────→ Completed (Succeed)
//	        ── status threshold_exceeded ─→ ThresholdExceeded (Fail)
//	        ── otherwise ─────────────────→ UnexpectedStatus (Fail)
//
// Submit invokes the submitter function (examples/stepfunctions/submitter)
// with `arn:aws:states:::lambda:invoke.waitForTaskToken`: the function
// POSTs the batch with "task_token": $$.Task.Token and returns, and the
// task waits until bulkrun answers the token when the batch's first run
// ends (docs/api.md, "Step Functions"): SendTaskSuccess with
// api.TaskOutput, which the state puts at $.batch, or SendTaskFailure
// with one of the error names the Catch clauses match. The state's
// HeartbeatSeconds is the batch's task_heartbeat_seconds (bulkrun's
// ticks send a heartbeat every 5 minutes by default, so 600 s, twice
// that, is the least it takes).
package workflow

import (
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	sfn "github.com/aws/aws-cdk-go/awscdk/v2/awsstepfunctions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsstepfunctionstasks"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/infra/bulkrun"
	"github.com/bulkrun/bulkrun/shared/api"
)

// The states' names, as the execution history shows them.
const (
	StateSubmit            = "Submit"
	StateVerdict           = "Verdict"
	StateCompleted         = "Completed"
	StateThresholdExceeded = "ThresholdExceeded"
	StateUnexpected        = "UnexpectedStatus"
	StateCancelled         = "Cancelled"
	StateRefused           = "Refused"
	StateFinalizeFailed    = "FinalizeFailed"
)

// ErrorThresholdExceeded is the error of the ThresholdExceeded state: the
// execution fails with it when the batch's failures exceeded its
// threshold (the census and verdict are in the state's input, $.batch).
const ErrorThresholdExceeded = "bulkrun.ThresholdExceeded"

// DefaultHeartbeatSeconds is Props.HeartbeatSeconds when zero:
// api.MinTaskHeartbeatSeconds, twice bulkrun's default tick.
const DefaultHeartbeatSeconds = api.MinTaskHeartbeatSeconds

// Props configure New.
type Props struct {
	// StateMachineName names the state machine; bulkrun's stack must name
	// it in TaskStateMachines (its finalize and submit functions may
	// answer only the tokens of the state machines named there).
	StateMachineName string
	// APIID and APIStage are bulkrun's REST API's id and stage (the
	// stack's outputs ApiId and ApiStage).
	APIID, APIStage string
	// SubmitterCode is a folder holding the submitter's `bootstrap`
	// (examples/stepfunctions/submitter built for linux and Architecture).
	SubmitterCode string
	// Architecture is the submitter's: awslambda.Architecture_ARM_64() or
	// X86_64(); nil: ARM_64.
	Architecture awslambda.Architecture
	// HeartbeatSeconds is the Submit state's HeartbeatSeconds and the
	// batches' task_heartbeat_seconds, ≥ api.MinTaskHeartbeatSeconds (≥
	// twice bulkrun's tick period); 0: DefaultHeartbeatSeconds.
	HeartbeatSeconds int
}

// Workflow is what New defines.
type Workflow struct {
	StateMachine sfn.StateMachine
	Submitter    awslambda.Function
}

// New defines the submitter function and the state machine in scope.
// The state machine's role may invoke only the submitter; the
// submitter's role may call only bulkrun's submit route (execute-api:Invoke
// on POST /batches of the API's stage).
func New(scope constructs.Construct, id string, p Props) Workflow {
	c := constructs.NewConstruct(scope, jsii.String(id))
	heartbeat := p.HeartbeatSeconds
	if heartbeat == 0 {
		heartbeat = DefaultHeartbeatSeconds
	}
	arch := p.Architecture
	if arch == nil {
		arch = awslambda.Architecture_ARM_64()
	}
	stack := awscdk.Stack_Of(c)
	apiURL := awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("https://" + p.APIID + ".execute-api."),
		stack.Region(), jsii.String("."), stack.UrlSuffix(), jsii.String("/" + p.APIStage)})
	submitter := awslambda.NewFunction(c, jsii.String("Submitter"), &awslambda.FunctionProps{
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Handler:      jsii.String("bootstrap"),
		Architecture: arch,
		Code:         awslambda.Code_FromAsset(jsii.String(p.SubmitterCode), nil),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(60)),
		MemorySize:   jsii.Number(128),
		Description:  jsii.String("Submits a batch to bulkrun with its Step Functions task token"),
		Environment: &map[string]*string{
			"BATCH_API_ID":            jsii.String(p.APIID),
			"BATCH_API_STAGE":         jsii.String(p.APIStage),
			"BATCH_API_URL":           apiURL,
			"BATCH_HEARTBEAT_SECONDS": jsii.String(strconv.Itoa(heartbeat)),
		},
	})
	submitter.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings("execute-api:Invoke"),
		Resources: &[]*string{awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("arn:"), stack.Partition(), jsii.String(":execute-api:"),
			stack.Region(), jsii.String(":"), stack.Account(), jsii.String(":" + p.APIID + "/" + p.APIStage + "/POST/batches")})},
	}))

	submit := awsstepfunctionstasks.NewLambdaInvoke(c, jsii.String(StateSubmit), &awsstepfunctionstasks.LambdaInvokeProps{
		StateName:          jsii.String(StateSubmit),
		LambdaFunction:     submitter,
		IntegrationPattern: sfn.IntegrationPattern_WAIT_FOR_TASK_TOKEN,
		Payload: sfn.TaskInput_FromObject(&map[string]any{
			"task_token": sfn.JsonPath_TaskToken(),
			"execution":  sfn.JsonPath_StringAt(jsii.String("$$.Execution.Name")),
			"request":    sfn.JsonPath_ObjectAt(jsii.String("$")),
		}),
		HeartbeatTimeout: sfn.Timeout_Duration(awscdk.Duration_Seconds(jsii.Number(float64(heartbeat)))),
		ResultPath:       jsii.String("$.batch"),
	})
	fail := func(name, errName, cause string) sfn.Fail {
		return sfn.NewFail(c, jsii.String(name), &sfn.FailProps{StateName: jsii.String(name), Error: jsii.String(errName), Cause: jsii.String(cause)})
	}
	for _, f := range []struct{ state, err, cause string }{
		{StateCancelled, api.TaskErrorCancelled, "the batch's run was cancelled"},
		{StateRefused, api.TaskErrorRefused, "bulkrun refused the batch's source; nothing ran"},
		{StateFinalizeFailed, api.TaskErrorFinalizeFailed, "the batch's run could not be finished"},
	} {
		submit.AddCatch(fail(f.state, f.err, f.cause), &sfn.CatchProps{Errors: jsii.Strings(f.err), ResultPath: jsii.String("$.error")})
	}
	verdict := sfn.NewChoice(c, jsii.String(StateVerdict), &sfn.ChoiceProps{StateName: jsii.String(StateVerdict)}).
		When(sfn.Condition_StringEquals(jsii.String("$.batch.status"), jsii.String(string(api.StatusCompleted))),
			sfn.NewSucceed(c, jsii.String(StateCompleted), &sfn.SucceedProps{StateName: jsii.String(StateCompleted)}), nil).
		When(sfn.Condition_StringEquals(jsii.String("$.batch.status"), jsii.String(string(api.StatusThresholdExceeded))),
			fail(StateThresholdExceeded, ErrorThresholdExceeded, "the batch's failures exceeded its threshold (its census and verdict: the state's input, batch)"), nil).
		Otherwise(fail(StateUnexpected, "bulkrun.UnexpectedStatus", "bulkrun answered a status this state machine does not know"))
	machine := sfn.NewStateMachine(c, jsii.String("StateMachine"), &sfn.StateMachineProps{
		StateMachineName: jsii.String(p.StateMachineName),
		DefinitionBody:   sfn.DefinitionBody_FromChainable(submit.Next(verdict)),
	})
	bulkrun.SuppressLint(submitter.Node().DefaultChild().(awscdk.CfnResource), LintSuppressions(awslambda.CfnFunction_CFN_RESOURCE_TYPE_NAME())...)
	bulkrun.SuppressLint(machine.Node().DefaultChild().(awscdk.CfnResource), LintSuppressions(sfn.CfnStateMachine_CFN_RESOURCE_TYPE_NAME())...)
	return Workflow{StateMachine: machine, Submitter: submitter}
}

// lintSuppressions are the example's written exceptions to the template
// linters `make lint` runs on it (tools/lint/lint-templates, template
// "stepfunctions"); README.md lists them with the same reasons.
var lintSuppressions = []bulkrun.LintSuppression{
	{Tool: bulkrun.LintCfnLint, Rule: "W3005", Type: "AWS::Lambda::Function",
		Reason: "CDK writes DependsOn on the submitter's role and its default policy so that it exists only once its grant does; the GetAtt of the role makes one of them redundant, not wrong."},
	{Tool: bulkrun.LintCfnLint, Rule: "W3005", Type: "AWS::StepFunctions::StateMachine",
		Reason: "CDK writes DependsOn on the state machine's role and its default policy so that it exists only once its grant does; the GetAtt of the role makes one of them redundant, not wrong."},
	{Tool: bulkrun.LintCfnLint, Rule: "WS1000", Type: "AWS::Lambda::Function",
		Reason: "X-Ray is billed per trace recorded; the submitter makes one API call per execution, and bulkrun's own traces (OpenTelemetry, docs/operations.md \"Traces\") start at that call."},
	{Tool: bulkrun.LintCfnLint, Rule: "WS1004", Type: "AWS::Lambda::Function",
		Reason: "The submitter logs to Lambda's default group, /aws/lambda/{function}, which CloudFormation does not own; an app built on this example sets its retention or passes a LogGroup of its own."},
	{Tool: bulkrun.LintCfnLint, Rule: "WS5000", Type: "AWS::StepFunctions::StateMachine",
		Reason: "X-Ray is billed per trace recorded; the execution history records every state, and bulkrun's own traces (OpenTelemetry) follow the batch."},
	{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_116", Type: "AWS::Lambda::Function",
		Reason: "Step Functions invokes the submitter synchronously (lambda:invoke.waitForTaskToken): a failed invocation fails the Submit state, where the execution's history records it; a dead-letter queue applies to asynchronous invocations only."},
	{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_117", Type: "AWS::Lambda::Function",
		Reason: "The submitter reaches only bulkrun's API (execute-api:Invoke on POST /batches, its only grant); a VPC would add NAT gateways and their cost and protect nothing its policy does not."},
	{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_115", Type: "AWS::Lambda::Function",
		Reason: "The submitter runs once per execution, for under a second; reserving concurrency for it would take capacity from the account's other functions."},
	{Tool: bulkrun.LintCheckov, Rule: "CKV_AWS_173", Type: "AWS::Lambda::Function",
		Reason: "The environment holds the API's id, stage, URL and the heartbeat seconds, no secret; Lambda encrypts it at rest with an AWS managed key."},
}

// LintSuppressions returns the example's template-linter exceptions on
// resources of the CloudFormation type typ.
func LintSuppressions(typ *string) []bulkrun.LintSuppression {
	var out []bulkrun.LintSuppression
	for _, l := range lintSuppressions {
		if l.Type == *typ {
			out = append(out, l)
		}
	}
	return out
}
