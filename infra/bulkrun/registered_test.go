package bulkrun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/function"
)

// pipelineCode returns a folder holding a team's bootstrap, whose content
// (so its asset hash) differs from FunctionsDir's.
func pipelineCode(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("#!/bin/sh\n# the team's submit and item\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPipelineCodeServesSubmitAndItem guards the product line "a team's
// own Go pipeline is deployed through the construct": with PipelineCode
// and CustomPipelines, submit and item run the team's binary (one asset,
// not bulkrun's), each told which it is (config.EnvFunction, the values
// function.Start dispatches on), finalize and sweep keep bulkrun's, and
// the custom names join the built-ins in both functions'
// BULKRUN_PIPELINES (all by default; Pipelines may narrow to them).
func TestPipelineCodeServesSubmitAndItem(t *testing.T) {
	if function.SubmitName != FunctionSubmit || function.ItemName != FunctionItem {
		t.Fatalf("function.Start dispatches on %q and %q, the stack names %q and %q", function.SubmitName, function.ItemName, FunctionSubmit, FunctionItem)
	}
	code := pipelineCode(t)
	for _, tt := range []struct {
		pipelines []string
		want      string
	}{
		{nil, "enrich,lambda,thumbnail,webhook"},
		{[]string{"enrich", "webhook"}, "enrich,webhook"},
	} {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
		stack, err := NewStack(app, "team", &RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir,
			PipelineCode: code, CustomPipelines: []string{"enrich"}, Pipelines: tt.pipelines, DefaultPipeline: "enrich"})
		if err != nil {
			t.Fatalf("NewStack(Pipelines %v): %v", tt.pipelines, err)
		}
		raw, err := json.Marshal(assertions.Template_FromStack(stack, nil).ToJSON())
		if err != nil {
			t.Fatal(err)
		}
		var tmpl struct {
			Resources map[string]struct {
				Properties struct {
					Code        struct{ S3Key any }
					Environment struct{ Variables map[string]any }
				}
			}
		}
		if err := json.Unmarshal(raw, &tmpl); err != nil {
			t.Fatal(err)
		}
		fn := func(name string) (key string, env map[string]any) {
			p := tmpl.Resources[logicalID(stack, name)].Properties
			k, _ := json.Marshal(p.Code.S3Key)
			return string(k), p.Environment.Variables
		}
		submitKey, submitEnv := fn(FunctionSubmit)
		itemKey, itemEnv := fn(FunctionItem)
		finalizeKey, finalizeEnv := fn(FunctionFinalize)
		sweepKey, _ := fn(FunctionSweep)
		if submitKey != itemKey || submitKey == finalizeKey || finalizeKey != sweepKey {
			t.Errorf("code: submit %s, item %s, finalize %s, sweep %s; want submit and item the team's one asset, finalize and sweep bulkrun's", submitKey, itemKey, finalizeKey, sweepKey)
		}
		if submitEnv[config.EnvFunction] != FunctionSubmit || itemEnv[config.EnvFunction] != FunctionItem || finalizeEnv[config.EnvFunction] != nil {
			t.Errorf("%s: submit %v, item %v, finalize %v", config.EnvFunction, submitEnv[config.EnvFunction], itemEnv[config.EnvFunction], finalizeEnv[config.EnvFunction])
		}
		for name, env := range map[string]map[string]any{FunctionSubmit: submitEnv, FunctionItem: itemEnv} {
			if env[config.EnvPipelines] != tt.want {
				t.Errorf("Pipelines %v: %s's %s = %v, want %s", tt.pipelines, name, config.EnvPipelines, env[config.EnvPipelines], tt.want)
			}
		}
	}
}

// TestPipelineCodeRefusedAtSynth guards "the stack cannot name a pipeline
// its submit and item binary does not run": custom names without the
// team's binary (or the reverse), bad, built-in or repeated names, a
// Pipelines entry that is neither built in nor custom, and a missing
// bootstrap fail synth naming the field; the unknown name's error says
// where to declare it.
func TestPipelineCodeRefusedAtSynth(t *testing.T) {
	code := pipelineCode(t)
	for _, tt := range []struct {
		name  string
		props RunnerProps
		says  []string
	}{
		{"custom without code", RunnerProps{CustomPipelines: []string{"enrich"}}, []string{"CustomPipelines", "set PipelineCode"}},
		{"code without custom", RunnerProps{PipelineCode: code}, []string{"PipelineCode", "CustomPipelines"}},
		{"invalid name", RunnerProps{PipelineCode: code, CustomPipelines: []string{"Enrich!"}}, []string{`CustomPipelines="Enrich!"`, "not a valid pipeline name"}},
		{"built-in name", RunnerProps{PipelineCode: code, CustomPipelines: []string{"webhook"}}, []string{`CustomPipelines="webhook"`, "built-in"}},
		{"twice", RunnerProps{PipelineCode: code, CustomPipelines: []string{"enrich", "enrich"}}, []string{`CustomPipelines="enrich"`, "listed twice"}},
		{"no bootstrap", RunnerProps{PipelineCode: t.TempDir(), CustomPipelines: []string{"enrich"}}, []string{"PipelineCode", "bootstrap", "function.Start"}},
		{"unknown in Pipelines", RunnerProps{Pipelines: []string{"webhook", "nope"}}, []string{`Pipelines="nope"`, api.RegisterPipelineHint}},
		{"custom not declared", RunnerProps{PipelineCode: code, CustomPipelines: []string{"enrich"}, Pipelines: []string{"mine"}}, []string{`Pipelines="mine"`, "have enrich, lambda"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			props := tt.props
			props.Target, props.FunctionsDir = TargetEmulator, functionsDir
			_, err := NewStack(awscdk.NewApp(nil), "refused", &props)
			if err == nil {
				t.Fatal("NewStack accepted the props")
			}
			for _, want := range tt.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
		})
	}
}
