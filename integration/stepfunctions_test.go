//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/bulkrun/bulkrun/examples/stepfunctions/workflow"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// exampleStack is the stack TestStepFunctionsExample deploys the example
// app (examples/stepfunctions) as.
const exampleStack = "bulkrun-it-stepfunctions"

// deployStepFunctionsExample builds the example's submitter for the
// emulator and deploys the example's own CDK app (cdk deploy, its
// main.go) beside the stack, pointed at the stack's API, and returns the
// state machine's ARN. The stack's TaskStateMachines names the example's
// state machine on the emulator (bulkrun.DefaultEmulatorTaskStateMachines).
func deployStepFunctionsExample(t *testing.T, ctx context.Context) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	code := t.TempDir()
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", filepath.Join(code, "bootstrap"), "./examples/stepfunctions/submitter")
	build.Dir = root
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the submitter: %v\n%s", err, out)
	}
	apiID, err := env.stack.Get(config.OutputAPIID)
	if err != nil {
		t.Fatal(err)
	}
	stage := env.stack[config.OutputAPIStage]
	if stage == "" {
		stage = config.DefaultAPIStage
	}
	cdk := exec.CommandContext(ctx, filepath.Join(root, "tools", "cdk", "node_modules", ".bin", "cdk"), "deploy", exampleStack,
		"--require-approval", "never", "--no-notices", "--output", t.TempDir(),
		"-c", "apiId="+apiID, "-c", "apiStage="+stage, "-c", "target=emulator", "-c", "stackName="+exampleStack, "-c", "submitterCode="+code)
	cdk.Dir = filepath.Join(root, "examples", "stepfunctions")
	cdk.Env = append(os.Environ(), "CDK_DEFAULT_ACCOUNT=000000000000", "CDK_DEFAULT_REGION="+env.aws.Region,
		"JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20",
		"AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED=true", "CDK_DISABLE_CLI_TELEMETRY=true")
	start := time.Now()
	if out, err := cdk.CombinedOutput(); err != nil {
		t.Fatalf("cdk deploy of examples/stepfunctions: %v\n%s", err, out)
	}
	t.Logf("examples/stepfunctions deployed as %s in %s", exampleStack, time.Since(start).Round(time.Second))
	outputs, err := client.FindStack(ctx, env.aws, exampleStack)
	if err != nil {
		t.Fatal(err)
	}
	arn, err := outputs.Get("StateMachineArn")
	if err != nil {
		t.Fatal(err)
	}
	return arn
}

// historyStep is one event of an execution's history: its type and, for
// a state's entry or exit, the state's name.
type historyStep struct{ Type, State string }

func (s historyStep) String() string {
	if s.State == "" {
		return s.Type
	}
	return s.Type + "(" + s.State + ")"
}

// TestStepFunctionsExample guards the product line "a Step Functions
// task waits for a batch and branches on its verdict": the example state
// machine of examples/stepfunctions, deployed by its own CDK app, runs two
// executions at once. One submits a batch whose items all succeed: its
// Submit task succeeds once (bulkrun's SendTaskSuccess, status completed)
// and the Verdict choice takes the Completed branch (SUCCEEDED). The other
// submits a batch with two failures against a tolerated count of 0 (and
// no stop on the threshold, so that every item runs): its
// task succeeds once too (threshold_exceeded is a verdict, not a task
// failure) and the choice takes the ThresholdExceeded branch, which fails
// the execution with bulkrun.ThresholdExceeded. After each run finalize is
// invoked again for the batch by hand: it writes nothing, and the token
// stays answered exactly once — the history holds one TaskSucceeded and
// no other task event, and the token, read from the batch row, is
// refused by Step Functions as a task no longer awaited (TaskDoesNotExist
// on the emulator).
func TestStepFunctionsExample(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	machine := deployStepFunctionsExample(t, ctx)
	states := sfn.NewFromConfig(env.aws)
	zero := int64(0)
	cases := []struct {
		name      string
		items     string
		threshold api.Threshold
		status    sfntypes.ExecutionStatus
		branch    historyStep
		census    api.Census
	}{
		{"completed", `[{"k":"a","text":"one two"},{"k":"b","text":"three"}]`, api.Threshold{FailureCount: &zero},
			sfntypes.ExecutionStatusSucceeded, historyStep{"SucceedStateEntered", workflow.StateCompleted}, api.Census{Total: 2, Succeeded: 2}},
		{"threshold", `[{"k":"a","text":"one two"},{"k":"b","txt":"typo"},{"k":"c","txt":"typo"}]`, api.Threshold{FailureCount: &zero},
			sfntypes.ExecutionStatusFailed, historyStep{"FailStateEntered", workflow.StateThresholdExceeded}, api.Census{Total: 3, Succeeded: 1, Failed: 2}},
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runExampleExecution(t, ctx, states, machine, c.name, c.items, c.threshold, c.status, c.branch, c.census); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}()
	}
	wg.Wait()
}

// runExampleExecution starts one execution of the example state machine
// whose batch is items with threshold, waits for it to end and checks its
// history, then finalizes the batch again and checks the token was
// answered once.
func runExampleExecution(t *testing.T, ctx context.Context, states *sfn.Client, machine, name, items string, threshold api.Threshold,
	status sfntypes.ExecutionStatus, branch historyStep, census api.Census) error {
	id := newID(t)
	if laneOn() {
		// The lane learns the batch's token from its submit and checks
		// finalize's answer on this state machine.
		if err := lanePost("/tests", map[string]any{"test": t.Name(), "batch_ids": []string{id}, "state_machine": machine}); err != nil {
			return err
		}
	}
	// Every item runs (no stop on the threshold), so the census is exact.
	input, err := json.Marshal(api.SubmitRequest{Pipeline: "enrich", KeyField: "k", Source: api.SourceSpec{Items: json.RawMessage(items)},
		Threshold: threshold, StopOnThreshold: new(false)})
	if err != nil {
		return err
	}
	started, err := states.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: &machine, Name: aws.String(id), Input: aws.String(string(input))})
	if err != nil {
		return fmt.Errorf("start execution: %w", err)
	}
	var ex *sfn.DescribeExecutionOutput
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if ex, err = states.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: started.ExecutionArn}); err != nil {
			return fmt.Errorf("describe execution: %w", err)
		}
		if ex.Status != sfntypes.ExecutionStatusRunning {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("execution %s still RUNNING after 3 minutes", id)
		}
		time.Sleep(time.Second)
	}
	steps, outputs, err := executionHistory(ctx, states, aws.ToString(started.ExecutionArn))
	if err != nil {
		return err
	}
	t.Logf("%s execution %s: %s (%s)\n  history: %s", name, id, ex.Status, aws.ToString(ex.Error), strings.Join(stepStrings(steps), " → "))
	var problems []string
	if ex.Status != status {
		problems = append(problems, fmt.Sprintf("status %s, want %s (error %s, cause %s)", ex.Status, status, aws.ToString(ex.Error), aws.ToString(ex.Cause)))
	}
	if status == sfntypes.ExecutionStatusFailed && aws.ToString(ex.Error) != workflow.ErrorThresholdExceeded {
		problems = append(problems, fmt.Sprintf("error %q, want %q", aws.ToString(ex.Error), workflow.ErrorThresholdExceeded))
	}
	count := map[string]int{}
	branchTaken := false
	for _, s := range steps {
		count[s.Type]++
		branchTaken = branchTaken || s == branch
	}
	if count["TaskSucceeded"] != 1 || count["TaskFailed"] != 0 || count["TaskScheduled"] != 1 {
		problems = append(problems, fmt.Sprintf("TaskScheduled %d, TaskSucceeded %d, TaskFailed %d: want one task answered once with SendTaskSuccess",
			count["TaskScheduled"], count["TaskSucceeded"], count["TaskFailed"]))
	}
	if !branchTaken {
		problems = append(problems, fmt.Sprintf("the verdict's branch %s is not in the history", branch))
	}
	var out api.TaskOutput
	if len(outputs) != 1 || json.Unmarshal([]byte(outputs[0]), &out) != nil {
		problems = append(problems, fmt.Sprintf("task outputs %q, want one api.TaskOutput", outputs))
	} else if out.BatchID != id || out.Run != 1 || out.Census.Total != census.Total || out.Census.Succeeded != census.Succeeded || out.Census.Failed != census.Failed ||
		out.Verdict.Exceeded != (status == sfntypes.ExecutionStatusFailed) || out.Report == "" {
		problems = append(problems, fmt.Sprintf("task output %s, want batch %s run 1, census total %d succeeded %d failed %d, exceeded %v, a report",
			outputs[0], id, census.Total, census.Succeeded, census.Failed, status == sfntypes.ExecutionStatusFailed))
	}

	// Finalize again by hand, as a redelivered or repeated finalize would:
	// it writes nothing and sends no second answer.
	payload, _ := json.Marshal(ledger.FinalizeEvent{BatchID: id, Run: 1})
	again, err := env.lambda.Invoke(ctx, &lambda.InvokeInput{FunctionName: &env.finalizeFn, Payload: payload})
	if err != nil || again.FunctionError != nil {
		return fmt.Errorf("invoke finalize again: %v %s", err, again.Payload)
	}
	var answer map[string]any
	if err := json.Unmarshal(again.Payload, &answer); err != nil || answer["wrote"] != false {
		problems = append(problems, fmt.Sprintf("finalize invoked again answered %s, want wrote=false", again.Payload))
	}
	if after, _, err := executionHistory(ctx, states, aws.ToString(started.ExecutionArn)); err != nil || len(after) != len(steps) {
		problems = append(problems, fmt.Sprintf("the history changed after finalize ran again (%d events, then %d; %v)", len(steps), len(after), err))
	}
	b, err := env.store.GetBatch(ctx, id)
	if err != nil {
		return err
	}
	if b.TaskToken == "" {
		problems = append(problems, "the batch row holds no task token")
	} else {
		_, err := states.SendTaskSuccess(ctx, &sfn.SendTaskSuccessInput{TaskToken: aws.String(b.TaskToken), Output: aws.String("{}")})
		var gone *sfntypes.TaskDoesNotExist
		var timedOut *sfntypes.TaskTimedOut
		if !errors.As(err, &gone) && !errors.As(err, &timedOut) {
			problems = append(problems, fmt.Sprintf("SendTaskSuccess with the batch's token after the run answered %v, want TaskDoesNotExist or TaskTimedOut (answered already)", err))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// executionHistory reads an execution's whole history: its steps and the
// outputs of its TaskSucceeded events.
func executionHistory(ctx context.Context, states *sfn.Client, arn string) ([]historyStep, []string, error) {
	var steps []historyStep
	var outputs []string
	p := sfn.NewGetExecutionHistoryPaginator(states, &sfn.GetExecutionHistoryInput{ExecutionArn: &arn})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("execution history: %w", err)
		}
		for _, e := range page.Events {
			s := historyStep{Type: string(e.Type)}
			if d := e.StateEnteredEventDetails; d != nil {
				s.State = aws.ToString(d.Name)
			}
			if d := e.StateExitedEventDetails; d != nil {
				s.State = aws.ToString(d.Name)
			}
			if d := e.TaskSucceededEventDetails; d != nil {
				outputs = append(outputs, aws.ToString(d.Output))
			}
			steps = append(steps, s)
		}
	}
	return steps, outputs, nil
}

func stepStrings(steps []historyStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.String()
	}
	return out
}
