package pipelines

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
)

type noSource struct{}

func (noSource) Open(context.Context, string, string) (io.ReadCloser, error) {
	return nil, errors.New("none")
}

// TestAllRunsInBulkrunsRegistry guards "the team's one list is what its
// binary runs": All builds into the registry function.Start builds (the
// built-ins and enrich, checked by registered.Check), its names are what
// the CDK app gives CustomPipelines, and an item runs through it.
func TestAllRunsInBulkrunsRegistry(t *testing.T) {
	if got := registered.Declared(All...); !slices.Equal(got, []string{"enrich"}) {
		t.Fatalf("Declared(All) = %v, want [enrich]", got)
	}
	reg, err := registered.Build(registered.Deps{Source: noSource{}}, All...)
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Names(); !slices.Equal(got, []string{"enrich", "lambda", "thumbnail", "webhook"}) {
		t.Fatalf("registry = %v", got)
	}
	p, _ := reg.Lookup("enrich")
	res, err := p.Run(context.Background(), pipeline.Request{BatchID: "b", Key: "a", Attempt: 1, Input: json.RawMessage(`{"text":"hello big world"}`)})
	if err != nil || string(res.Output) != `{"words":3,"runes":15,"first_word":"hello"}` {
		t.Fatalf("enrich: %s, %v", res.Output, err)
	}
}
