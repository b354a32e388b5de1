package bulkrun

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
)

// TestOnePlaceRegistersPipeline guards the product line "a custom Go
// pipeline is added by editing one place": a Declaration appended to
// registered.Custom (and nothing else) reaches submit's and item's
// BULKRUN_PIPELINES in the synthesized template, and naming it in the
// Pipelines prop is then accepted. If the stack kept its own list of names,
// the probe would be missing from the template.
func TestOnePlaceRegistersPipeline(t *testing.T) {
	const probe = "probe-one-place"
	saved := registered.Custom
	t.Cleanup(func() { registered.Custom = saved })
	registered.Custom = append(slices.Clone(saved), registered.Declaration{Name: probe, New: func(registered.Deps) (pipeline.Pipeline, error) {
		return pipeline.Func(func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil }), nil
	}})

	for _, props := range []*RunnerProps{
		{Target: TargetEmulator, FunctionsDir: functionsDir},
		{Target: TargetEmulator, FunctionsDir: functionsDir, Pipelines: []string{probe}},
	} {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
		stack, err := NewStack(app, "one-place", props)
		if err != nil {
			t.Fatalf("NewStack(Pipelines %v): %v", props.Pipelines, err)
		}
		raw, err := json.Marshal(assertions.Template_FromStack(stack, nil).ToJSON())
		if err != nil {
			t.Fatal(err)
		}
		var tmpl struct {
			Resources map[string]struct {
				Type       string
				Properties struct {
					Environment struct{ Variables map[string]any }
				}
			}
		}
		if err := json.Unmarshal(raw, &tmpl); err != nil {
			t.Fatal(err)
		}
		for _, fn := range []string{FunctionSubmit, FunctionItem} {
			id := logicalID(stack, fn)
			got, _ := tmpl.Resources[id].Properties.Environment.Variables[config.EnvPipelines].(string)
			if !slices.Contains(strings.Split(got, ","), probe) {
				t.Errorf("Pipelines %v: %s's %s = %q, want it to name %q", props.Pipelines, fn, config.EnvPipelines, got, probe)
			}
		}
	}
}

// TestPipelinesPropRefusesUnregistered guards "the stack cannot name a
// pipeline the item binary does not run": Pipelines naming an unregistered
// pipeline fails synth with an error that says where to register it.
func TestPipelinesPropRefusesUnregistered(t *testing.T) {
	app := awscdk.NewApp(nil)
	_, err := NewStack(app, "refused", &RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, Pipelines: []string{"webhook", "nope"}})
	if err == nil {
		t.Fatal("NewStack accepted an unregistered pipeline")
	}
	for _, want := range []string{`"nope"`, "shared/pipeline/registered/registered.go", "Write your own pipeline"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
}
