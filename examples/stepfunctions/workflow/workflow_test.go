package workflow

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/api"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// flatten renders a template value as text: strings as they are, an
// Fn::Join's parts joined, any other intrinsic as "<ref>".
func flatten(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			var parts []string
			for _, p := range j[1].([]any) {
				parts = append(parts, flatten(p))
			}
			return strings.Join(parts, j[0].(string))
		}
	}
	return "<ref>"
}

// TestWorkflowDefinition guards the example's contract with bulkrun: the
// Submit task waits for the token (lambda:invoke.waitForTaskToken) with
// the token, the execution's name and the input in its payload and
// HeartbeatSeconds as set; its Catch clauses match bulkrun's three
// SendTaskFailure error names; the Verdict choice branches on
// $.batch.status; the state machine's role may only invoke the
// submitter; the submitter's may only call POST /batches of the API.
func TestWorkflowDefinition(t *testing.T) {
	code := t.TempDir()
	if err := os.WriteFile(filepath.Join(code, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	stack := awscdk.NewStack(app, jsii.String("example"), nil)
	New(stack, "Workflow", Props{StateMachineName: "orders-batch", APIID: "abc123", APIStage: "v1", SubmitterCode: code})
	tpl := assertions.Template_FromStack(stack, nil)
	var doc struct {
		Resources map[string]struct {
			Type       string         `json:"Type"`
			Properties map[string]any `json:"Properties"`
		} `json:"Resources"`
	}
	b, _ := json.Marshal(tpl.ToJSON())
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var def struct {
		StartAt string `json:"StartAt"`
		States  map[string]struct {
			Type             string         `json:"Type"`
			Resource         string         `json:"Resource"`
			HeartbeatSeconds int            `json:"HeartbeatSeconds"`
			ResultPath       string         `json:"ResultPath"`
			Parameters       map[string]any `json:"Parameters"`
			Catch            []struct {
				ErrorEquals []string
				Next        string
			} `json:"Catch"`
			Choices []struct{ Variable, StringEquals, Next string } `json:"Choices"`
			Default string                                          `json:"Default"`
			Error   string                                          `json:"Error"`
		} `json:"States"`
	}
	var policies []string
	for _, r := range doc.Resources {
		switch r.Type {
		case "AWS::StepFunctions::StateMachine":
			if r.Properties["StateMachineName"] != "orders-batch" {
				t.Errorf("StateMachineName %v, want orders-batch", r.Properties["StateMachineName"])
			}
			if err := json.Unmarshal([]byte(flatten(r.Properties["DefinitionString"])), &def); err != nil {
				t.Fatalf("definition: %v\n%s", err, flatten(r.Properties["DefinitionString"]))
			}
		case "AWS::IAM::Policy":
			pb, _ := json.Marshal(r.Properties["PolicyDocument"])
			policies = append(policies, string(pb))
		}
	}
	submit := def.States[StateSubmit]
	if def.StartAt != StateSubmit || submit.Resource != "arn:<ref>:states:::lambda:invoke.waitForTaskToken" || submit.HeartbeatSeconds != api.MinTaskHeartbeatSeconds || submit.ResultPath != "$.batch" {
		t.Errorf("Submit: start %s, resource %q, heartbeat %d, result path %q", def.StartAt, submit.Resource, submit.HeartbeatSeconds, submit.ResultPath)
	}
	payload, _ := submit.Parameters["Payload"].(map[string]any)
	if payload["task_token.$"] != "$$.Task.Token" || payload["execution.$"] != "$$.Execution.Name" || payload["request.$"] != "$" {
		t.Errorf("Submit's payload %v", payload)
	}
	var caught []string
	for _, c := range submit.Catch {
		caught = append(caught, c.ErrorEquals...)
		if def.States[c.Next].Type != "Fail" || !slices.Contains(c.ErrorEquals, def.States[c.Next].Error) {
			t.Errorf("catch %v goes to %s (%+v), want a Fail state of that error", c.ErrorEquals, c.Next, def.States[c.Next])
		}
	}
	slices.Sort(caught)
	if want := []string{api.TaskErrorCancelled, api.TaskErrorFinalizeFailed, api.TaskErrorRefused}; !slices.Equal(caught, want) {
		t.Errorf("Submit catches %v, want %v", caught, want)
	}
	verdict := def.States[StateVerdict]
	want := map[string]string{string(api.StatusCompleted): StateCompleted, string(api.StatusThresholdExceeded): StateThresholdExceeded}
	for _, c := range verdict.Choices {
		if c.Variable != "$.batch.status" || want[c.StringEquals] != c.Next {
			t.Errorf("Verdict choice %+v", c)
		}
		delete(want, c.StringEquals)
	}
	if len(want) != 0 || verdict.Default != StateUnexpected || def.States[StateCompleted].Type != "Succeed" || def.States[StateThresholdExceeded].Error != ErrorThresholdExceeded {
		t.Errorf("Verdict: missing %v, default %s; Completed %+v; ThresholdExceeded %+v", want, verdict.Default, def.States[StateCompleted], def.States[StateThresholdExceeded])
	}
	all := strings.Join(policies, "\n")
	if strings.Count(all, `"Action":"lambda:InvokeFunction"`) != 1 || !strings.Contains(all, `"execute-api:Invoke"`) ||
		!strings.Contains(all, `abc123/v1/POST/batches`) || strings.Contains(all, `"Resource":"*"`) || len(policies) != 2 {
		t.Errorf("the roles' policies, want the state machine's invoking the submitter only and the submitter's on POST /batches only:\n%s", all)
	}
}

// TestLintSuppressionsWritten keeps the example README's table of its
// template-linter exceptions equal to lintSuppressions, and every reason
// long enough to justify something.
func TestLintSuppressionsWritten(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- workflow.lintSuppressions -->", "<!-- /workflow.lintSuppressions -->"
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("examples/stepfunctions/README.md has no %s … %s table", begin, end)
	}
	var got, want []string
	for _, line := range strings.Split(doc[i+len(begin):j], "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| tool ") && !strings.HasPrefix(line, "| ---") {
			got = append(got, line)
		}
	}
	for _, l := range lintSuppressions {
		if len(l.Reason) < 40 {
			t.Errorf("%s %s: reason %q is too short to justify anything", l.Tool, l.Rule, l.Reason)
		}
		want = append(want, "| "+l.Tool+" | `"+l.Rule+"` | `"+l.Type+"` | "+l.Reason+" |")
	}
	if !slices.Equal(got, want) {
		t.Errorf("the README's linter table differs from lintSuppressions; it should read:\n%s", strings.Join(want, "\n"))
	}
}
