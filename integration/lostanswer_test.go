//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// TestLostAnswerKeepsTheManifest guards the product lines "a submit
// deletes only a manifest no batch row names" (Submitter.Submit) and "a
// background read deletes its manifest only when another read froze the
// batch" (Submitter.Complete). Through the fault proxy, the emulator
// applies the batch row's write and the connection is reset before its
// answer arrives; the SDK retries the write, which now loses its own
// condition. The batch row must still name a manifest that exists, and
// the batch must run. (Submit's row is put by TransactWriteItems, which
// the SDK retries with the same ClientRequestToken, so DynamoDB answers
// the retry as the first write: the case shows the invariant holds there
// too. Complete's Freeze is an UpdateItem, whose retry loses its own
// condition: without the check, the read deleted the frozen manifest.)
func TestLostAnswerKeepsTheManifest(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	for _, tc := range []struct {
		name, op string
		submit   func(t *testing.T, h *harness, s *submit.Submitter, id string) error
	}{
		{"submit", "TransactWriteItems", func(t *testing.T, h *harness, s *submit.Submitter, id string) error {
			_, err := s.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(3)}})
			return err
		}},
		{"background read", "UpdateItem", func(t *testing.T, h *harness, s *submit.Submitter, id string) error {
			key := "uploads/" + id + ".jsonl"
			if err := h.blobs.Put(ctx, key, "application/x-ndjson", []byte("{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n")); err != nil {
				t.Fatal(err)
			}
			accepting := *s
			accepting.Store = h.store // accept without faults
			accepting.Handoff = &handoffs{}
			if _, err := accepting.Accept(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Object: "s3://" + h.blobs.Bucket() + "/" + key}}); err != nil {
				t.Fatal(err)
			}
			_, err := s.Complete(ctx, id)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: req.Input}, nil
			})
			id := newID(t)
			proxy, cfg := faultProxy(t, faultproxy.Config{Seed: 3, Rules: []faultproxy.Rule{
				// Only the batch row's writes: BeginSubmit is an UpdateItem
				// too, so the background read's rule fires on its second.
				{Service: "dynamodb", Operations: []string{tc.op}, Contains: "manifest_key", Kind: faultproxy.KindResetAfter, Rate: 1, Max: 1},
			}})
			faulty := *h.submitter
			faulty.Store = dynamo.New(dynamodb.NewFromConfig(h.as(cfg, "submit")), h.table)
			if err := tc.submit(t, h, &faulty, id); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if n := proxy.Status().Injected[faultproxy.KindResetAfter]; n != 1 {
				t.Fatalf("answers lost: %d, want 1 (the rule did not fire: the test proves nothing)", n)
			}
			b, err := h.store.GetBatch(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if b.Status != api.StatusRunning || b.ManifestKey == "" {
				t.Fatalf("batch %s manifest %q, want running with a manifest", b.Status, b.ManifestKey)
			}
			if _, err := h.blobs.Get(ctx, b.ManifestKey); err != nil {
				t.Fatalf("the manifest the batch row names: %v (deleted by the write that lost its answer?)", err)
			}
			h.drain(t, ctx)
			r, err := h.finalizer.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Report.Census.Succeeded != 3 {
				t.Errorf("census %+v, want 3 succeeded", r.Report.Census)
			}
			for i := range 3 {
				if c := h.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
		})
	}
}

// Guards the product line "an item's outcome is recorded once, counted,
// and its run finalized" (dynamo.Store.Record) when the outcome write's
// answer is lost: through the fault proxy the emulator applies the write
// and the connection is reset before its answer arrives; the SDK sends the
// write again, and the retry finds the row no longer in flight. The retry
// is this attempt's own write, not a later attempt's fence: the delivery
// is acknowledged, the item counted and finalize triggered. Before, the
// delivery failed ("outcome fenced by a later attempt"), its message came
// back only after the queue's visibility timeout, the counters never
// counted the item and the run was finished by the scheduled tick minutes
// later.
func TestLostAnswerOfTheOutcomeWrite(t *testing.T) {
	ctx := context.Background()
	h, p := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(1)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1))
	items := h.receive(t, 1)
	if len(items) != 1 {
		t.Fatalf("%d item messages, want 1", len(items))
	}
	setFaults(t, p, 1, faultproxy.Rule{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: string(api.OutcomeSucceeded),
		Kind: faultproxy.KindResetAfter, Rate: 1, Max: 1})
	if failed := h.worker.Handle(ctx, items); len(failed) != 0 {
		t.Errorf("the delivery failed after its outcome write lost its answer: %v", failed)
	}
	if n := p.Status().ByCall["dynamodb.UpdateItem"][faultproxy.KindResetAfter]; n != 1 {
		t.Fatalf("%d outcome write answers lost, want 1: the test did not exercise a lost answer", n)
	}
	if n := h.triggered.Load(); n != 1 {
		t.Errorf("finalize triggered %d times, want 1", n)
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil || r.Report.Census.Succeeded != 1 || h.callsOf(api.PositionalKey(0)) != 1 {
		t.Fatalf("report %+v %v (pipeline calls %d)", r.Report.Census, err, h.callsOf(api.PositionalKey(0)))
	}
}

// TestLostAnswerOfTheCounterWrite guards the product line "a counter
// write whose answer was lost is recognised, never counted twice"
// (Store.CountLane, Store.CountRun). Through the fault proxy, the
// emulator applies the run's counter-lane write (or the run row's) and the
// connection is reset before its answer arrives, or DynamoDB answers 500
// without applying it. Either way the run is counted once: finalize is
// triggered exactly once, when the last item is recorded, and the
// counters add up to the run's items. (Before, the SDK sent an ADD again
// after a lost answer and counted a message batch twice: finalize was
// triggered while an item was still in flight.)
func TestLostAnswerOfTheCounterWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, row string
		kind      faultproxy.Kind
	}{
		{"lane applied", `"LANE"`, faultproxy.KindResetAfter},
		{"lane not applied", `"LANE"`, faultproxy.KindServerError},
		{"run row applied", `"RUN"`, faultproxy.KindResetAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, p := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: req.Input}, nil
			})
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(4)}}); err != nil {
				t.Fatal(err)
			}
			h.worker.Handle(ctx, h.receive(t, 1))
			items := h.receive(t, 4)
			if len(items) != 4 {
				t.Fatalf("%d item messages, want 4", len(items))
			}
			// The first three items, then the last one: the lane fills with
			// the second message batch, whose write completes the run. A
			// write that DynamoDB did not apply is the lane's first, so
			// that the read after it tells for sure.
			first := 3
			if tc.kind == faultproxy.KindServerError {
				first = 0
			}
			if failed := h.worker.Handle(ctx, items[:first]); len(failed) != 0 {
				t.Fatalf("deliveries failed: %v", failed)
			}
			if n := h.triggered.Load(); n != 0 {
				t.Fatalf("finalize triggered %d times with an item not yet run", n)
			}
			setFaults(t, p, 1, faultproxy.Rule{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: tc.row,
				Kind: tc.kind, Rate: 1, Max: 1})
			if failed := h.worker.Handle(ctx, items[first:]); len(failed) != 0 {
				t.Fatalf("deliveries failed: %v", failed)
			}
			if n := p.Status().ByCall["dynamodb.UpdateItem"][tc.kind]; n != 1 {
				t.Fatalf("%d counter writes faulted, want 1: the test did not exercise a lost answer", n)
			}
			if n := h.triggered.Load(); n != 1 {
				t.Errorf("finalize triggered %d times, want 1", n)
			}
			b, err := h.store.GetBatch(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			pr, err := h.store.Progress(ctx, id, 1, b.CounterShards)
			if err != nil || pr.Done != 4 {
				t.Errorf("counted %d items (%v), want 4", pr.Done, err)
			}
			r, err := h.finalizer.Finalize(ctx, id, 1)
			if err != nil || r.Report.Census.Succeeded != 4 {
				t.Fatalf("report %+v %v", r.Report.Census, err)
			}
		})
	}
}

// Guards the product line "throttling, 5xx and lost answers never use an
// attempt, fail an item or dead-letter it" (docs/design.md) for the take:
// through the fault proxy the emulator applies an item's reservation (or
// a pack's take) and the connection is reset before its answer arrives;
// the SDK sends the take again, and the resend fails its condition on
// the take's own row. The row carries the take's token
// (ledger.Reservation.Token), so the store answers the resend as the
// first try: the item runs once and succeeds. Before, the delivery took
// its own take for another delivery's live lease and held itself off;
// once the lease ended the next take found the item interrupted, and
// with max_attempts 1 and on_interrupt quarantine every item ended
// quarantined without a call.
func TestLostAnswerOfTheTake(t *testing.T) {
	ctx := context.Background()
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("%d items per message", k), func(t *testing.T) {
			h, p := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: req.Input}, nil
			})
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(10)},
				ItemsPerMessage: k, MaxAttempts: 1, OnInterrupt: api.InterruptQuarantine}); err != nil {
				t.Fatal(err)
			}
			// Every take's first answer is lost (the takes alone carry the
			// token's attribute); the fan-out, if any, and the items'
			// messages are handled as they come.
			setFaults(t, p, 1, faultproxy.Rule{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: `"tk"`,
				Kind: faultproxy.KindResetAfter, Rate: 1, Max: 10 / k})
			for ds := h.receive(t, 10); len(ds) > 0; ds = h.receive(t, 10) {
				if failed := h.worker.Handle(ctx, ds); len(failed) != 0 {
					t.Errorf("deliveries failed or held off after their take lost its answer: %v", failed)
				}
			}
			if n := p.Status().ByCall["dynamodb.UpdateItem"][faultproxy.KindResetAfter]; n != int64(10/k) {
				t.Fatalf("%d take answers lost, want %d: the test did not exercise a lost answer", n, 10/k)
			}
			r, err := h.finalizer.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := r.Report.Census; c.Succeeded != 10 {
				t.Errorf("census %+v, want 10 succeeded", c)
			}
			for i := range 10 {
				if c := h.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
		})
	}
}
