package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The submit function routes a part step of a source read in parts
// ({"bulkrun_submit_part": …}, what trigger.Lambda.StartPart sends) to
// Submitter.Part: a step of a batch that no longer exists is done (no
// error, so Lambda does not retry it), and a step whose plan is missing is
// an error (retried).
func TestSubmitRoutesPartSteps(t *testing.T) {
	var logs bytes.Buffer
	s := newSubmit(&bucket{written: map[string][]byte{}}, &bus{}, &logs)
	ev, _ := json.Marshal(ledger.PartEvent{Step: ledger.PartStepRead, BatchID: "gone", Plan: "p1", Index: 3})
	if _, err := s.Handle(context.Background(), ev); err != nil {
		t.Fatalf("a step of a forgotten batch: %v, want done", err)
	}
	if !strings.Contains(logs.String(), `"step":"read","index":3`) {
		t.Fatalf("logs %s, want the step's line", logs.String())
	}
	ctx := context.Background()
	if _, err := s.Submitter.Store.CreateBatch(ctx, ledger.Batch{Batch: api.Batch{ID: "live", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusSubmitting, Run: 1}}); err != nil {
		t.Fatal(err)
	}
	ev, _ = json.Marshal(ledger.PartEvent{Step: ledger.PartStepKeys, BatchID: "live", Plan: "p1", Index: 0})
	if _, err := s.Handle(ctx, ev); err == nil || !strings.Contains(err.Error(), "plan p1 is missing") {
		t.Fatalf("a step without its plan: %v, want an error naming the plan", err)
	}
}
