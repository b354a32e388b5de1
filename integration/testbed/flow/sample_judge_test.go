package flow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// lagStore is the rig's store whose counter reads fail while lag is set:
// a read after the sample's last write that does not see it (the
// counters' Query is eventually consistent on DynamoDB), or fails.
type lagStore struct {
	*memstore.Store
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

// stopFails is the rig's store whose Stop fails: a cancel that does not
// land after a rejection.
type stopFails struct{ *memstore.Store }

func (stopFails) Stop(context.Context, ledger.StopMark) error {
	return errors.New("dynamodb: unavailable")
}

// A rejection whose cancel fails (the decision and the stop are two
// writes) leaves the rest held: nothing outside the sample is called,
// however often the held messages come back; rejecting again cancels.
// Before, a rejected batch held nothing, and its 86 items outside the
// sample ran unapproved.
func TestSampleRejectedWithoutItsCancelRunsNothingMore(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, sampledPipeline)
	const id = "rejected-half"
	r.submitSampled(t, ctx, id, 100, 10, nil)
	if b := r.sampleRounds(t, ctx, id, 4); b.Approval.State != api.ApprovalAwaiting {
		t.Fatalf("approval %+v: want awaiting_approval", b.Approval)
	}
	r.ctl.Store = stopFails{r.store}
	if _, err := r.ctl.Reject(ctx, id); err == nil {
		t.Fatal("reject with a failing stop: no error")
	}
	b := r.sampleRounds(t, ctx, id, 4)
	if n := r.totalCalls(); n != 14 || b.Approval.State != api.ApprovalRejected || b.Stop != "" {
		t.Fatalf("%d calls, approval %s, stop %q: want the sample's 14 only, rejected, no stop yet", n, b.Approval.State, b.Stop)
	}
	r.ctl.Store = r.store
	if b, err := r.ctl.Reject(ctx, id); err != nil || b.Stop != api.StatusCancelled {
		t.Fatalf("reject again: stop %q, %v: want cancelled", b.Stop, err)
	}
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Census; c.Cancelled != 86 || r.totalCalls() != 14 {
		t.Fatalf("census %+v, %d calls: want 86 cancelled, the sample's 14 called", c, r.totalCalls())
	}
}

// A sample whose items all suspend (held: spent nothing, failed
// nothing) gets its estimate, but is not approved without a person,
// whatever its auto_approve_usd.
func TestSampleOfHeldItemsIsNotAutoApproved(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Suspend("awaiting a person", time.Time{})
	})
	auto := 1000.0
	const id = "held-sample"
	r.submitSampled(t, ctx, id, 100, 10, &auto)
	b := r.sampleRounds(t, ctx, id, 4)
	if a := b.Approval; a.State != api.ApprovalAwaiting || a.Estimate == nil || a.Estimate.SampleItems != 14 {
		t.Fatalf("approval %+v: want awaiting_approval on the 14 held sample items, not approved", a)
	}
	if n := r.totalCalls(); n != 14 {
		t.Fatalf("%d calls, want the sample's 14", n)
	}
}
