package registered_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/builtin"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
)

type noSource struct{}

func (noSource) Open(context.Context, string, string) (io.ReadCloser, error) {
	return nil, errors.New("none")
}

func probe(name string) registered.Declaration {
	return registered.Declaration{Name: name, New: func(registered.Deps) (pipeline.Pipeline, error) {
		return pipeline.Func(func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil }), nil
	}}
}

// withCustom replaces registered.Custom for the test.
func withCustom(t *testing.T, decls ...registered.Declaration) {
	saved := registered.Custom
	t.Cleanup(func() { registered.Custom = saved })
	registered.Custom = append(slices.Clone(saved), decls...)
}

// TestOnePlaceSubmitAccepts guards the product line "a custom Go pipeline
// is added by editing one place": a name appended to registered.Custom is
// in Names (what the stack puts in BULKRUN_PIPELINES) and in Build's
// registry (what the item function runs), and submit — built the way the
// submit function builds it, from the same registry — accepts it, while a
// name that is not there is refused up front with the hint.
func TestOnePlaceSubmitAccepts(t *testing.T) {
	withCustom(t, probe("probe-one-place"))
	reg, err := registered.Build(registered.Deps{Source: noSource{}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := reg.Names(), registered.Names(); !slices.Equal(got, want) {
		t.Fatalf("registry runs %v, stack is told %v", got, want)
	}
	if !slices.Contains(registered.Names(), "probe-one-place") {
		t.Fatalf("Names() = %v, want the probe", registered.Names())
	}
	s := &batch.Submitter{Pipelines: registered.Names(), Registry: reg}
	items := json.RawMessage(`[{"key":"a","input":{}}]`)
	if err := s.Validate(&batch.SubmitRequest{Pipeline: "probe-one-place", Source: batch.SourceSpec{Items: items}}); err != nil {
		t.Errorf("submit refused the registered pipeline: %v", err)
	}
	err = s.Validate(&batch.SubmitRequest{Pipeline: "nope", Source: batch.SourceSpec{Items: items}})
	var ie *batch.InputError
	if !errors.As(err, &ie) || ie.Field != "pipeline" || !strings.Contains(err.Error(), batch.RegisterPipelineHint) {
		t.Errorf("unknown pipeline: %v, want a pipeline InputError with the hint", err)
	}
}

// TestNamesAndBuild: the built-ins and every Custom pipeline, sorted, and a
// registry holding exactly those.
func TestNamesAndBuild(t *testing.T) {
	want := append(builtin.Names(), "enrich")
	slices.Sort(want)
	if got := registered.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if _, err := registered.Build(registered.Deps{}); err == nil {
		t.Error("Build without a Source succeeded")
	}
}

// TestCheckRefusesBadDeclarations: a bad Custom entry fails Check (so the
// stack's synth) and Build, naming the entry.
func TestCheckRefusesBadDeclarations(t *testing.T) {
	for _, tt := range []struct {
		name string
		decl registered.Declaration
		says string
	}{
		{"invalid name", probe("Enrich!"), "not a valid pipeline name"},
		{"built-in name", probe("webhook"), "declared twice"},
		{"nil New", registered.Declaration{Name: "x"}, "nil New"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			withCustom(t, tt.decl)
			if err := registered.Check(); err == nil || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), "Custom[") {
				t.Errorf("Check() = %v, want it to name the entry and say %q", err, tt.says)
			}
			if _, err := registered.Build(registered.Deps{Source: noSource{}}); err == nil {
				t.Error("Build accepted the bad declaration")
			}
		})
	}
	withCustom(t, registered.Declaration{Name: "broken", New: func(registered.Deps) (pipeline.Pipeline, error) { return nil, errors.New("no key") }})
	if _, err := registered.Build(registered.Deps{Source: noSource{}}); err == nil || !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("Build = %v, want the constructor's error naming the pipeline", err)
	}
}

// TestRegisterPipelineHint guards the product line "the unknown-pipeline
// error says where to register": the file the hint names exists and
// declares Custom, and the README section it names exists.
func TestRegisterPipelineHint(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	file := regexp.MustCompile(`\S+\.go`).FindString(batch.RegisterPipelineHint)
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatalf("hint names %q: %v", file, err)
	}
	if !strings.Contains(batch.RegisterPipelineHint, "registered.Custom") || !strings.Contains(string(src), "var Custom = ") {
		t.Errorf("hint %q does not name the variable %s declares", batch.RegisterPipelineHint, file)
	}
	section := regexp.MustCompile(`README "([^"]+)"`).FindStringSubmatch(batch.RegisterPipelineHint)
	if section == nil {
		t.Fatalf("hint %q names no README section", batch.RegisterPipelineHint)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(section[1]) + `\s*$`).Match(readme) {
		t.Errorf("README has no section %q", section[1])
	}
}
