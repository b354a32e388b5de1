//go:build integration

package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// drain hands every message on the harness queue to the worker until none
// is left, handing failed deliveries back as the queue would redeliver
// them (the harness deletes messages on receipt). A delivery fails when
// its item is under a lease; that includes a reservation whose answer was
// lost and that the SDK retried (the retry then finds the item leased by
// its own first write): it succeeds once the lease ends, so drain gives
// the deliveries twice the worker's lease before it fails the test.
// Dropping them instead left the item in flight and finalize refused the
// run ("item ... is in_flight").
func (h *harness) drain(t *testing.T, ctx context.Context) {
	t.Helper()
	h.drainRetrying(t, ctx, 2*h.worker.Lease)
}

// In a rerun, a duplicate delivery of an item answered from an earlier
// run's row is counted once: a quarantined item delivered twice must not
// look like two failures and stop the run.
func TestHarnessRerunCountsAnsweredItemsOnce(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Key == api.PositionalKey(0) {
			return pipeline.Result{}, pipeline.Quarantine(errors.New("check me"))
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	one := int64(1)
	req := api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(3)}, Threshold: api.Threshold{FailureCount: &one}}
	if _, err := h.submitter.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	h.drain(t, ctx)
	if r, err := h.finalizer.Finalize(ctx, id, 1); err != nil || r.Report.Status != api.StatusCompleted {
		t.Fatalf("run 1: %+v %v", r.Report, err)
	}
	if _, err := h.submitter.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1))
	msgs := h.receive(t, 3)
	h.worker.Handle(ctx, append(msgs, msgs...)) // every message twice
	b, _ := h.store.GetBatch(ctx, id)
	if b.Stop != "" {
		t.Fatalf("run 2 stopped (%s: %s) with 1 quarantined item against a tolerated count of 1", b.Stop, b.StopDetail)
	}
	p, _ := h.store.Progress(ctx, id, 2, b.CounterShards)
	if p.Done != 3 || p.Failures != 1 {
		t.Fatalf("run 2 progress %+v, want done 3 failures 1", p)
	}
	r, err := h.finalizer.Finalize(ctx, id, 2)
	if err != nil || r.Report.Status != api.StatusCompleted || r.Report.Census.Quarantined != 1 {
		t.Fatalf("run 2: %+v %v", r.Report, err)
	}
}

// A released item is pending in the next run until it runs: finalize does
// not count it as quarantined, and release is refused while a run is going.
func TestHarnessReleasedItemIsPendingUntilItRuns(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	var fixed bool
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Key == api.PositionalKey(0) && !fixed {
			return pipeline.Result{}, pipeline.Quarantine(errors.New("check me"))
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	control := h.control()
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(2)}}); err != nil {
		t.Fatal(err)
	}
	if err := control.Release(ctx, id, api.PositionalKey(0)); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("release while running: %v, want ErrConflict", err)
	}
	h.drain(t, ctx)
	if _, err := h.finalizer.Finalize(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if err := control.Release(ctx, id, api.PositionalKey(0)); err != nil {
		t.Fatal(err)
	}
	fixed = true
	if _, err := h.submitter.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1))
	msgs := h.receive(t, 2)
	var released worker.Delivery
	var others []worker.Delivery
	for _, d := range msgs {
		if strings.Contains(string(d.Body), api.PositionalKey(0)) {
			released = d
		} else {
			others = append(others, d)
		}
	}
	h.worker.Handle(ctx, others)
	if _, err := h.finalizer.Finalize(ctx, id, 2); !errors.Is(err, api.ErrNotFinished) {
		t.Fatalf("finalize before the released item ran: %v, want ErrNotFinished", err)
	}
	h.worker.Handle(ctx, []worker.Delivery{released})
	r, err := h.finalizer.Finalize(ctx, id, 2)
	if err != nil || r.Report.Census.Succeeded != 2 || r.Report.Census.Quarantined != 0 {
		t.Fatalf("run 2: %+v %v", r.Report.Census, err)
	}
}

// A stopped run's message for an item still under a live lease comes back
// (the holder may have died) instead of being acknowledged.
func TestHarnessStopKeepsLiveLeasesMessages(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(1)}}); err != nil {
		t.Fatal(err)
	}
	b, _ := h.store.GetBatch(ctx, id)
	key := api.PositionalKey(0)
	if _, err := h.store.Reserve(ctx, ledger.Reservation{BatchID: id, Key: key, RunID: ledger.RunID(id, key), Run: 1, ListShards: b.ListShards, Now: time.Now(), Lease: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.control().Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1))
	msgs := h.receive(t, 1)
	if failed := h.worker.Handle(ctx, msgs); len(failed) != 1 {
		t.Fatalf("a message for an item under a live lease was acknowledged")
	}
	time.Sleep(500 * time.Millisecond) // the holder is dead: its lease ends
	if failed := h.worker.Handle(ctx, msgs); len(failed) != 0 {
		t.Fatalf("after the lease: %v", failed)
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil || r.Report.Status != api.StatusCancelled || r.Report.Census.Cancelled != 1 {
		t.Fatalf("report %+v %v", r.Report, err)
	}
}

// The tick re-sends the fan-out of a run whose submit died before sending
// it, and the run then finishes.
func TestHarnessTickResendsLostFanout(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(9)}}); err != nil {
		t.Fatal(err)
	}
	// Lose the fan-out: drop its messages and mark the run not fanned out.
	if lost := h.receive(t, 2); len(lost) != 2 {
		t.Fatalf("%d fan-out messages", len(lost))
	}
	expr, _ := expression.NewBuilder().WithUpdate(expression.Set(expression.Name("fanned_out"), expression.Value(false))).Build()
	if _, err := h.store.DB().UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(h.store.Table()),
		Key:              map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "BATCH#" + id}, "sk": &ddbtypes.AttributeValueMemberS{Value: "BATCH"}},
		UpdateExpression: expr.Update(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}); err != nil {
		t.Fatal(err)
	}
	h.finalizer.FanOut = h.submitter.FanOut
	h.finalizer.Stall = time.Millisecond
	res, err := h.finalizer.Tick(ctx)
	if err != nil || res.FannedOut < 1 {
		t.Fatalf("tick: %+v %v", res, err)
	}
	h.drain(t, ctx)
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil || r.Report.Census.Succeeded != 9 {
		t.Fatalf("report %+v %v", r.Report.Census, err)
	}
}

// A dead-lettered fan-out message records its chunk's items failed, so
// the run still finishes.
func TestHarnessDeadLetteredFanoutFailsItsItems(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(10)}}); err != nil {
		t.Fatal(err)
	}
	fan := h.receive(t, 2) // chunks of 7 and 3
	fan[0].DeadLetter, fan[0].ReceiveCount = true, 10
	if failed := h.worker.Handle(ctx, fan); len(failed) != 0 {
		t.Fatal(failed)
	}
	h.drain(t, ctx)
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil || r.Report.Census.Failed+r.Report.Census.Succeeded != 10 || r.Report.Census.Failed == 0 {
		t.Fatalf("report %+v %v", r.Report.Census, err)
	}
	p, _ := h.control().Items(ctx, id, api.OutcomeFailed, "", 100)
	for _, it := range p.Items {
		if it.Reason != api.ReasonDeadLettered {
			t.Errorf("%s: reason %s", it.Key, it.Reason)
		}
	}
}

// A listing continues when one shard holds more matches than a page.
func TestHarnessListingPagesWithinOneShard(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	id := newID(t)
	b := ledger.Batch{Batch: api.Batch{ID: id, Plan: api.Plan{Pipeline: "counted", Digest: "d", MaxAttempts: 1}, Run: 1, Status: api.StatusRunning, ItemCount: 7, ListShards: 1, CounterShards: 1}}
	if _, err := h.store.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		k := api.PositionalKey(int64(i))
		if _, err := h.store.Settle(ctx, ledger.Record{BatchID: id, Key: k, RunID: ledger.RunID(id, k), Run: 1, ListShards: 1, Outcome: api.OutcomeFailed, Reason: api.ReasonPermanent, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	cursor := ""
	for range 10 {
		p, err := h.control().Items(ctx, id, api.OutcomeFailed, cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			keys = append(keys, it.Key)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(keys) != 7 {
		t.Fatalf("listed %d of 7: %v", len(keys), keys)
	}
}

func (h *harness) control() *control.Control {
	sub := h.fn["submit"]
	return &control.Control{Store: sub.store, Blobs: sub.blobs, Log: h.worker.Log}
}

// Once a forget has begun, no resume can start a run on the batch; a
// forget is refused while a run is going.
func TestHarnessForgetBlocksResume(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	id := newID(t)
	b := ledger.Batch{Batch: api.Batch{ID: id, Plan: api.Plan{Pipeline: "counted", Digest: "d", MaxAttempts: 1}, Run: 1, Status: api.StatusRunning, ItemCount: 0, ListShards: 1, CounterShards: 1}}
	if _, err := h.store.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := h.store.MarkForgetting(ctx, ledger.ForgetMark{BatchID: id, Now: time.Now()}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("forgetting a running batch: %v, want ErrConflict", err)
	}
	if err := h.store.FinishRun(ctx, id, 1, ledger.Finish{Status: api.StatusCompleted, FinishedAt: time.Now(), ExpiresAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.MarkForgetting(ctx, ledger.ForgetMark{BatchID: id, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.StartRun(ctx, id, 1, time.Now()); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("resume while forgetting: %v, want ErrConflict", err)
	}
	if err := h.store.MarkForgetting(ctx, ledger.ForgetMark{BatchID: "it-no-such-batch", Now: time.Now()}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("forgetting a missing batch: %v, want ErrNotFound", err)
	}
}
