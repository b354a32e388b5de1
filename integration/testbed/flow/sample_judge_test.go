package flow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/ledgertest"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// lagStore is the rig's store whose counter reads fail while lag is set:
// a read after the sample's last write that does not see it (the
// counters' Query is eventually consistent on DynamoDB), or fails.
type lagStore struct {
	*ledgertest.Store
	lag atomic.Bool
}

func (s *lagStore) Progress(ctx context.Context, id string, run, parts int) (ledger.Progress, error) {
	if s.lag.Load() {
		return ledger.Progress{}, errors.New("dynamodb: read behind")
	}
	return s.Store.Progress(ctx, id, run, parts)
}

// A sample whose reads after its counter writes all missed its end (here:
// failed) is still judged: the held messages, back at the next check,
// read the counters again and write the estimate. Before they did, a
// 20,000-item batch on the stack waited 3 minutes without one (its last
// writes fell within the judge's spacing then).
func TestSampleEstimateNotMissedBetweenReads(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
	})
	lag := &lagStore{Store: r.store}
	r.worker.Store = lag
	const id = "judged"
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Sample: 14, Source: api.SourceSpec{Items: items(100)}}); err != nil {
		t.Fatal(err)
	}
	// One message at a time, the clock standing still; the counters
	// read behind from the sample's last message on.
	for i := 0; r.totalCalls() < 13; i++ {
		if i == 200 {
			t.Fatalf("%d calls after 200 deliveries, want 13", r.totalCalls())
		}
		r.handleOne(ctx)
	}
	lag.lag.Store(true)
	for range 60 {
		r.handleOne(ctx)
	}
	lag.lag.Store(false)
	b, err := r.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.totalCalls(); n != 14 || b.Approval.Estimate != nil {
		t.Fatalf("%d calls, estimate %+v: want the sample's 14 and no estimate yet (its last reads failed)", n, b.Approval.Estimate)
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
