package function

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
)

func decl(name string) registered.Declaration {
	return registered.Declaration{Name: name, New: func(registered.Deps) (pipeline.Pipeline, error) {
		return pipeline.Func(func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil }), nil
	}}
}

// TestListNamesTheBinarysPipelines guards "the stack learns the names from
// the binary": `bootstrap pipelines` prints exactly the declared names, in
// order, one per line (what the Makefile passes as customPipelines), and
// refuses a bad declaration instead of printing it.
func TestListNamesTheBinarysPipelines(t *testing.T) {
	var out bytes.Buffer
	if err := list(&out, []registered.Declaration{decl("enrich"), decl("score")}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "enrich\nscore\n" {
		t.Errorf("list = %q, want enrich and score", out.String())
	}
	out.Reset()
	if err := list(&out, []registered.Declaration{decl("webhook")}); err == nil || out.Len() != 0 {
		t.Errorf("list of a built-in's name = %v, printed %q; want an error and nothing", err, out.String())
	}

	saved := os.Args
	t.Cleanup(func() { os.Args = saved })
	os.Args = []string{"bootstrap", ListArg}
	if err := Start(context.Background()); err != nil {
		t.Errorf("Start(%s) without declarations = %v", ListArg, err)
	}
}

// TestStartNeedsItsFunction: a binary started without config.EnvFunction
// (or with another function's name) says which variable and values it
// wants instead of serving the wrong handler.
func TestStartNeedsItsFunction(t *testing.T) {
	saved := os.Args
	t.Cleanup(func() { os.Args = saved })
	os.Args = []string{"bootstrap"}
	for _, v := range []string{"", "finalize"} {
		t.Setenv(config.EnvFunction, v)
		err := Start(context.Background(), decl("enrich"))
		if err == nil || !strings.Contains(err.Error(), config.EnvFunction) || !strings.Contains(err.Error(), `"submit" or "item"`) {
			t.Errorf("%s=%q: Start = %v, want it to name the variable and its values", config.EnvFunction, v, err)
		}
	}
}
