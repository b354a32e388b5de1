package handler

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The finalize function routes a part of a run read in parts ({"part",
// "plan"}, what trigger.Lambda.StartFinalizePart sends) to
// Finalizer.FinalizePart: a part of a batch that no longer exists is done
// (no error, so Lambda does not retry it, and nothing is chained), and a
// part event without its plan is refused.
func TestFinalizeRoutesParts(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := &Finalize{Finalizer: &finalize.Finalizer{Store: memstore.NewStore(), Blobs: &bucket{written: map[string][]byte{}}, Clock: ledger.SystemClock{}, Log: log}, Log: log}
	res, err := h.Handle(context.Background(), ledger.FinalizeEvent{BatchID: "gone", Run: 1, Part: 3, Plan: 1, Chain: 1})
	if err != nil {
		t.Fatalf("a part of a forgotten batch: %v, want done", err)
	}
	if answer, _ := json.Marshal(res); string(answer) != `{"status":"running","part":2}` {
		t.Fatalf("answer %s, want part 2 done, nothing chained", answer)
	}
	if _, err := h.Handle(context.Background(), ledger.FinalizeEvent{BatchID: "gone", Run: 1, Part: 3}); err == nil || !strings.Contains(err.Error(), "plan 0") {
		t.Fatalf("a part without its plan: %v, want refused", err)
	}
}
