//go:build integration

package integration

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/shared/finalize"

	"github.com/bulkrun/bulkrun/shared/ledger"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// chain is finalize invoking itself, run at once in this process.
type chain struct {
	h     *handler.Finalize
	calls []int
}

func (c *chain) Continue(ctx context.Context, batchID string, run, n int) error {
	c.calls = append(c.calls, n)
	_, err := c.h.Handle(ctx, ledger.FinalizeEvent{BatchID: batchID, Run: run, Chain: n})
	return err
}

// TestFinalizeChainsItsChunks guards the product line "finalize goes on
// with a run's next chunk at once, not on the next tick": a run whose rows
// take several chunks is finalized from one trigger, each call invoking
// the next (the finalize function invoking itself), one report; a run
// that takes more than finalize.MaxFinalizeChain calls stops chaining
// there (under Lambda's recursive loop detection, 16 per chain) and the
// tick goes on from its checkpoint.
func TestFinalizeChainsItsChunks(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		chunkRows int64
		chained   int // calls the trigger's chain makes after it
		done      bool
	}{{"5 chunks", 25, 4, true}, {"24 chunks", 5, finalize.MaxFinalizeChain - 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: req.Input}, nil
			})
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(120)}}); err != nil {
				t.Fatal(err)
			}
			h.drain(t, ctx)
			f := *h.finalizer
			f.ChunkRows = tc.chunkRows
			c := &chain{}
			f.Chain = c
			c.h = &handler.Finalize{Finalizer: &f, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if _, err := c.h.Handle(ctx, ledger.FinalizeEvent{BatchID: id, Run: 1}); err != nil {
				t.Fatal(err)
			}
			if len(c.calls) != tc.chained || len(c.calls) > 0 && c.calls[len(c.calls)-1] != tc.chained {
				t.Errorf("chained calls %v, want 1 … %d", c.calls, tc.chained)
			}
			b := mustBatch(t, h, id)
			if finished := b.Status == api.StatusCompleted; finished != tc.done {
				t.Fatalf("status %s after the chain, finished %v, want %v", b.Status, finished, tc.done)
			}
			if !tc.done {
				// The tick goes on from the chain's checkpoint.
				for range 20 {
					if _, err := f.Finalize(ctx, id, 1); err != nil {
						t.Fatal(err)
					}
					if b = mustBatch(t, h, id); b.Status == api.StatusCompleted {
						break
					}
				}
			}
			r, err := f.Finalize(ctx, id, 1)
			if err != nil || r.Wrote || r.Report.Census.Succeeded != 120 || b.Status != api.StatusCompleted {
				t.Fatalf("report %+v (wrote again %v) %v, status %s", r.Report.Census, r.Wrote, err, b.Status)
			}
		})
	}
}
