package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/infra/bulkrun"
	"github.com/bulkrun/bulkrun/shared/config"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// TestEmbedSynthesizes guards the product lines "a CDK app of a user
// imports the construct and adds its own function as the pipeline" and
// "a Go team's own pipeline, in its own module, deployed through the
// construct": the example app synthesizes into a cloud assembly whose one
// stack holds the team's Python function, bulkrun's resources and
// outputs, the team's binary as the submit and item functions with its
// pipeline's name from the module's one list (pipelines.All), a lambda
// pipeline allowed to invoke exactly that function (the item role's
// grant, the functions' allow-list), the team's topic on bulkrun's
// alarms, and the team's uploader allowed to start batches.
func TestEmbedSynthesizes(t *testing.T) {
	functionsDir := t.TempDir()
	for _, fn := range []string{bulkrun.FunctionSubmit, bulkrun.FunctionItem, bulkrun.FunctionFinalize, bulkrun.FunctionSweep, bulkrun.FunctionSetup} {
		if err := os.MkdirAll(filepath.Join(functionsDir, fn), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(functionsDir, fn, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pipelineCode := t.TempDir()
	const teamBootstrap = "#!/bin/sh\n# runner\n"
	if err := os.WriteFile(filepath.Join(pipelineCode, "bootstrap"), []byte(teamBootstrap), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
	t.Setenv("CDK_DEFAULT_REGION", "eu-west-1")
	outdir := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(outdir)})
	orders := NewOrders(app, "orders", functionsDir, pipelineCode, "../lambda-python")
	assembly := app.Synth(nil)

	stacks := *assembly.Stacks()
	if len(stacks) != 1 || *stacks[0].StackName() != "orders" {
		t.Fatalf("assembly has %d stacks, want the one orders stack", len(stacks))
	}
	raw, err := json.Marshal(stacks[0].Template())
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
		}
		Outputs map[string]any
	}
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	scorerID := *orders.Stack.GetLogicalId(orders.Scorer.Node().DefaultChild().(awscdk.CfnElement))
	if r := tmpl.Resources[scorerID]; r.Type != "AWS::Lambda::Function" || r.Properties["Runtime"] != "python3.12" {
		t.Fatalf("scorer %s: %+v, want a python3.12 function", scorerID, r)
	}
	scorerArn := `{"Fn::GetAtt":["` + scorerID + `","Arn"]}`

	// bulkrun's submit and item: the team's binary (its bootstrap in the
	// staged asset), told which it is, with the lambda pipeline and the
	// team's enrich, the lambda pipeline allowed the scorer.
	var item map[string]any
	for _, fn := range []string{bulkrun.FunctionSubmit, bulkrun.FunctionItem} {
		props := tmpl.Resources[*orders.Stack.GetLogicalId(orders.Runner.Function(fn).Node().DefaultChild().(awscdk.CfnElement))].Properties
		vars, _ := props["Environment"].(map[string]any)["Variables"].(map[string]any)
		allowed, _ := json.Marshal(vars[config.EnvLambdaFunctions])
		if vars[config.EnvPipelines] != "lambda,enrich" || string(allowed) != scorerArn {
			t.Errorf("%s: %s=%v %s=%s, want lambda,enrich and the scorer's ARN", fn, config.EnvPipelines, vars[config.EnvPipelines], config.EnvLambdaFunctions, allowed)
		}
		if vars[config.EnvFunction] != fn {
			t.Errorf("%s: %s=%v", fn, config.EnvFunction, vars[config.EnvFunction])
		}
		hash := strings.TrimSuffix(fmt.Sprint(props["Code"].(map[string]any)["S3Key"]), ".zip")
		if got, err := os.ReadFile(filepath.Join(outdir, "asset."+hash, "bootstrap")); err != nil || string(got) != teamBootstrap {
			t.Errorf("%s's code %s: %q, %v; want the team's bootstrap", fn, hash, got, err)
		}
		if fn == bulkrun.FunctionItem {
			item = props
		}
	}
	if item["Timeout"] != 120.0 {
		t.Errorf("item timeout %v, want 120", item["Timeout"])
	}

	// The item role may invoke the scorer, in a statement of its own; the
	// uploader may put under incoming/.
	var invoke, upload bool
	for _, r := range tmpl.Resources {
		if r.Type != "AWS::IAM::Policy" {
			continue
		}
		doc, _ := json.Marshal(r.Properties["PolicyDocument"])
		roles, _ := json.Marshal(r.Properties["Roles"])
		var d struct{ Statement []map[string]any }
		_ = json.Unmarshal(doc, &d)
		for _, st := range d.Statement {
			res, _ := json.Marshal(st["Resource"])
			if st["Action"] == "lambda:InvokeFunction" && string(res) == scorerArn {
				invoke = strings.Contains(string(roles), "itemServiceRole")
			}
			if strings.Contains(string(res), config.IncomingPrefix+"*") && strings.Contains(string(roles), "Uploader") {
				upload = true
			}
		}
	}
	if !invoke || !upload {
		t.Errorf("item may invoke the scorer: %v; the uploader may put under incoming/: %v", invoke, upload)
	}

	// The team's topic gets bulkrun's alarms; the outputs the CLI reads
	// are there, with the team's own.
	topicID := ""
	for id, r := range tmpl.Resources {
		if r.Type == "AWS::SNS::Topic" {
			topicID = id
		}
	}
	alarmed := 0
	for _, r := range tmpl.Resources {
		if a, _ := json.Marshal(r.Properties["AlarmActions"]); r.Type == "AWS::CloudWatch::Alarm" && string(a) == `[{"Ref":"`+topicID+`"}]` {
			alarmed++
		}
	}
	if topicID == "" || alarmed < 10 {
		t.Errorf("%d alarms notify the team's topic %q", alarmed, topicID)
	}
	// The topic can receive them: encrypted with a key of the stack (not
	// aws/sns) whose policy lets CloudWatch and EventBridge use it, and a
	// topic policy letting both publish.
	keyID := ""
	if k, ok := tmpl.Resources[topicID].Properties["KmsMasterKeyId"].(map[string]any); ok {
		if g, ok := k["Fn::GetAtt"].([]any); ok {
			keyID, _ = g[0].(string)
		}
	}
	if tmpl.Resources[keyID].Type != "AWS::KMS::Key" {
		t.Fatalf("the topic's key %v is not a key of the stack (aws/sns: neither CloudWatch nor EventBridge may use it)", tmpl.Resources[topicID].Properties["KmsMasterKeyId"])
	}
	allows := func(doc any, principal string, actions ...string) bool {
		raw, _ := json.Marshal(doc)
		var d struct{ Statement []map[string]any }
		_ = json.Unmarshal(raw, &d)
		for _, st := range d.Statement {
			p, _ := json.Marshal(st["Principal"])
			a, _ := json.Marshal(st["Action"])
			if st["Effect"] != "Allow" || !strings.Contains(string(p), principal) {
				continue
			}
			all := true
			for _, want := range actions {
				all = all && strings.Contains(string(a), want)
			}
			if all {
				return true
			}
		}
		return false
	}
	var topicPolicy any
	for _, r := range tmpl.Resources {
		if r.Type == "AWS::SNS::TopicPolicy" {
			topicPolicy = r.Properties["PolicyDocument"]
		}
	}
	for _, p := range []string{"cloudwatch.amazonaws.com", "events.amazonaws.com"} {
		if !allows(tmpl.Resources[keyID].Properties["KeyPolicy"], p, "kms:Decrypt", "kms:GenerateDataKey*") {
			t.Errorf("the key policy does not let %s use the key", p)
		}
		if !allows(topicPolicy, p, "sns:Publish") {
			t.Errorf("the topic policy does not let %s publish", p)
		}
	}
	var outputs []string
	for k := range tmpl.Outputs {
		outputs = append(outputs, k)
	}
	for _, k := range []string{config.OutputAPIID, config.OutputBucket, config.OutputTable, config.OutputSubmitFunction, "ScorerFunctionArn"} {
		if !slices.Contains(outputs, k) {
			t.Errorf("outputs %v lack %s", outputs, k)
		}
	}
}
