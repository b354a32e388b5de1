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

	"github.com/bulkrun/bulkrun/internal/pipeline/builtin"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
	"github.com/bulkrun/bulkrun/shared/submit"
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

// TestOneDeclarationSubmitAccepts guards the product line "a custom Go
// pipeline is added by declaring it once": the declarations a binary is
// given are in Names and in Build's registry (what the item function
// runs), and submit — built the way the submit function builds it, from
// the same registry — accepts the name, while a name that is not there is
// refused up front with the hint.
func TestOneDeclarationSubmitAccepts(t *testing.T) {
	custom := []registered.Declaration{probe("probe-one-place")}
	reg, err := registered.Build(registered.Deps{Source: noSource{}}, custom...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := reg.Names(), registered.Names(custom...); !slices.Equal(got, want) {
		t.Fatalf("registry runs %v, Names says %v", got, want)
	}
	if !slices.Contains(registered.Names(custom...), "probe-one-place") {
		t.Fatalf("Names() = %v, want the probe", registered.Names(custom...))
	}
	s := &submit.Submitter{Pipelines: registered.Names(custom...), Registry: reg}
	items := json.RawMessage(`[{"key":"a","input":{}}]`)
	if err := s.Validate(&api.SubmitRequest{Pipeline: "probe-one-place", Source: api.SourceSpec{Items: items}}); err != nil {
		t.Errorf("submit refused the registered pipeline: %v", err)
	}
	err = s.Validate(&api.SubmitRequest{Pipeline: "nope", Source: api.SourceSpec{Items: items}})
	var ie *api.InputError
	if !errors.As(err, &ie) || ie.Field != "pipeline" || !strings.Contains(err.Error(), api.RegisterPipelineHint) {
		t.Errorf("unknown pipeline: %v, want a pipeline InputError with the hint", err)
	}
}

// TestNamesAndBuild: the built-ins and the given declarations, sorted,
// and a registry holding exactly those; without declarations (bulkrun's
// own binaries) the built-ins only.
func TestNamesAndBuild(t *testing.T) {
	if got := registered.Names(); !slices.Equal(got, builtin.Names()) {
		t.Errorf("Names() = %v, want the built-ins %v", got, builtin.Names())
	}
	want := append(builtin.Names(), "mine")
	slices.Sort(want)
	if got := registered.Names(probe("mine")); !slices.Equal(got, want) {
		t.Errorf("Names(mine) = %v, want %v", got, want)
	}
	if _, err := registered.Build(registered.Deps{}); err == nil {
		t.Error("Build without a Source succeeded")
	}
}

// TestCheckRefusesBadDeclarations: a bad declaration fails Check and
// Build (so the function's start), naming the entry.
func TestCheckRefusesBadDeclarations(t *testing.T) {
	for _, tt := range []struct {
		name  string
		decls []registered.Declaration
		says  string
	}{
		{"invalid name", []registered.Declaration{probe("Enrich!")}, "declaration 0: \"Enrich!\" is not a valid pipeline name"},
		{"built-in name", []registered.Declaration{probe("webhook")}, "declaration 0: \"webhook\" is declared twice or is a built-in"},
		{"duplicate", []registered.Declaration{probe("mine"), probe("mine")}, "declaration 1: \"mine\" is declared twice"},
		{"nil New", []registered.Declaration{{Name: "x"}}, "declaration 0 \"x\": nil New"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := registered.Check(tt.decls...); err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("Check() = %v, want it to say %q", err, tt.says)
			}
			if _, err := registered.Build(registered.Deps{Source: noSource{}}, tt.decls...); err == nil {
				t.Error("Build accepted the bad declaration")
			}
		})
	}
	broken := registered.Declaration{Name: "broken", New: func(registered.Deps) (pipeline.Pipeline, error) { return nil, errors.New("no key") }}
	if _, err := registered.Build(registered.Deps{Source: noSource{}}, broken); err == nil || !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("Build = %v, want the constructor's error naming the pipeline", err)
	}
}

// TestCheckListed guards "a stack naming a pipeline its submit and item
// binary does not run fails at start, saying which and where to declare
// it" (the binary given as RunnerProps.PipelineCode is not the one whose
// declarations the stack's CustomPipelines names).
func TestCheckListed(t *testing.T) {
	for _, tt := range []struct {
		name    string
		listed  []string
		custom  []registered.Declaration
		missing string // "" when fine
	}{
		{"empty list", nil, nil, ""},
		{"built-ins", []string{"lambda", "webhook"}, nil, ""},
		{"declared", []string{"mine", "webhook"}, []registered.Declaration{probe("mine")}, ""},
		{"not declared", []string{"webhook", "mine"}, nil, `["mine"]`},
		{"another binary", []string{"enrich", "mine"}, []registered.Declaration{probe("mine")}, `["enrich"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := registered.CheckListed(tt.listed, tt.custom...)
			if tt.missing == "" {
				if err != nil {
					t.Fatalf("CheckListed = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.missing) || !strings.Contains(err.Error(), "function.Start") || !strings.Contains(err.Error(), "PipelineCode") {
				t.Fatalf("CheckListed = %v, want it to name %s and where to declare it", err, tt.missing)
			}
		})
	}
}

// TestRegisterPipelineHint guards the product line "the unknown-pipeline
// error says where to register": the files the hint names exist and
// declare what it names (function.Start, RunnerProps.CustomPipelines),
// and the section of the manual it names exists.
func TestRegisterPipelineHint(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	files := regexp.MustCompile(`[\w/]+\.go`).FindAllString(api.RegisterPipelineHint, -1)
	declares := map[string]string{"shared/function/function.go": "func Start(", "infra/bulkrun/runner.go": "\tCustomPipelines []string"}
	if len(files) != len(declares) {
		t.Fatalf("hint %q names files %v, want %d", api.RegisterPipelineHint, files, len(declares))
	}
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatalf("hint names %q: %v", file, err)
		}
		if want, ok := declares[file]; !ok || !strings.Contains(string(src), want) {
			t.Errorf("hint %q: %s does not declare %q", api.RegisterPipelineHint, file, want)
		}
	}
	section := regexp.MustCompile(`(docs/[a-z]+\.md) "([^"]+)"`).FindStringSubmatch(api.RegisterPipelineHint)
	if section == nil {
		t.Fatalf("hint %q names no section of the manual (docs/PAGE.md \"Heading\")", api.RegisterPipelineHint)
	}
	page, err := os.ReadFile(filepath.Join(root, section[1]))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(section[2]) + `\s*$`).Match(page) {
		t.Errorf("%s has no section %q", section[1], section[2])
	}
}
