package flow

import (
	"context"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// A sample whose last counter write comes within the judge's spacing of
// an earlier read (one process, its clock standing still) is still
// judged: the held messages, back at the next check, read the counters
// again and write the estimate. Before they did, a 20,000-item batch on
// the stack waited 3 minutes without one.
func TestSampleEstimateNotMissedBetweenReads(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
	})
	const id = "judged"
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Sample: 14, Source: api.SourceSpec{Items: items(100)}}); err != nil {
		t.Fatal(err)
	}
	// The worker's own spacing (r.worker.BudgetEvery 0: 1 s for the
	// sample), the clock standing still: one message at a time, so the
	// counters are written 14 times and read once.
	for range 60 {
		r.handleOne(ctx)
	}
	b, err := r.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.totalCalls(); n != 14 || b.Approval.Estimate != nil {
		t.Fatalf("%d calls, estimate %+v: want the sample's 14 and no estimate yet (one read, before the last write)", n, b.Approval.Estimate)
	}
	r.clock.T = r.clock.T.Add(2 * time.Second)
	r.handleOne(ctx) // a held message back
	if b, err = r.store.GetBatch(ctx, id); err != nil || b.Approval.State != api.ApprovalAwaiting || b.Approval.Estimate.SampleItems != 14 {
		t.Fatalf("after a held message came back: approval %+v, %v: want awaiting_approval on 14 sample items", b.Approval, err)
	}
}

// handleOne hands the first queued message alone to the worker, and puts
// it back at the end if it failed; the clock does not move.
func (r *rig) handleOne(ctx context.Context) {
	ds := r.queue.take()
	if len(ds) == 0 {
		return
	}
	r.queue.put(ds[1:])
	d := ds[0]
	if failed := r.worker.Handle(ctx, ds[:1]); len(failed) > 0 {
		d.ReceiveCount++
		r.queue.put(ds[:1])
	}
}
