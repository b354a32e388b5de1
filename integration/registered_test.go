//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// TestRegisteredPipelineRunsDeployed guards the product line "a Go team
// adds its own pipeline from its own module, deployed through the
// construct": the example pipeline "enrich", declared only in the example
// team module (examples/embed/pipelines, built by `make functions` into
// the binary the stack deploys as submit and item, RunnerProps.PipelineCode),
// is accepted by the deployed submit, which checks its options with the
// pipeline's own rules (bulkrun's own submit could not), and run by the
// deployed item function (outputs, cost records, permanent and quarantine
// outcomes); an unknown pipeline is a 400 that says where to declare it.
func TestRegisteredPipelineRunsDeployed(t *testing.T) {
	ctx := context.Background()
	_, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: newID(t), Pipeline: "enrich-nope", Source: api.SourceSpec{Items: json.RawMessage(`[{"text":"x"}]`)}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "pipeline" || !strings.Contains(ae.Body.Message, api.RegisterPipelineHint) {
		t.Fatalf("unknown pipeline: %v, want a 400 naming pipeline with the hint", err)
	}

	_, err = env.api.Submit(ctx, api.SubmitRequest{BatchID: newID(t), Pipeline: "enrich", Source: api.SourceSpec{Items: json.RawMessage(`[{"text":"x"}]`)},
		Options: json.RawMessage(`{"max_words":-1}`)})
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "pipeline_options.max_words" {
		t.Fatalf("enrich with max_words -1: %v, want a 400 naming pipeline_options.max_words", err)
	}

	id := newID(t)
	items := json.RawMessage(`[{"key":"a","text":"hello big world"},{"key":"b"},{"key":"c","text":"one two three four"}]`)
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "enrich", KeyField: "key",
		Source: api.SourceSpec{Items: items}, Options: json.RawMessage(`{"max_words":3}`)}); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Census.Succeeded != 1 || v.Census.Failed != 1 || v.Census.Quarantined != 1 || v.Census.Cost.Text("calls") != "2" || v.Census.Cost.Text("words") != "7" {
		t.Fatalf("batch: %s %+v, want 1 succeeded, 1 failed, 1 quarantined, calls 2, words 7", v.Status, v.Census)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ok := readResults(t, rep.Results.Files[api.OutcomeSucceeded].URI)
	if len(ok) != 1 || ok[0].Key != "a" || string(ok[0].Output) != `{"words":3,"runes":15,"first_word":"hello"}` {
		t.Fatalf("succeeded lines %+v", ok)
	}
}
