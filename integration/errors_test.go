//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/secret"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/effects"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

// conflictRule answers a TransactWriteItems holding contains (every one
// when "") with DynamoDB's TransactionCanceledException, its operations
// cancelled for reasons (the rest None), max times (0: every time).
func conflictRule(contains string, max int, reasons ...string) faultproxy.Rule {
	return faultproxy.Rule{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Contains: contains, Kind: faultproxy.KindError,
		Code: "TransactionCanceledException", Reasons: reasons, Rate: 1, Max: max}
}

// TestHarnessTransactionConflictIsRetried guards "a transaction conflict
// is transient" (docs/design/errors.md, class retry): a DynamoDB
// transaction cancelled for TransactionConflict — a concurrent write to
// one of its items, not a failed condition — is sent again in place
// (no SDK retries TransactionCanceledException on its own; bulkrun's
// retryer does, from awsfault.Table), and one that keeps conflicting past
// the tries is unavailable (ledger.ErrUnavailable), never a conflict:
//   - finishing a run (FinishRun's transaction) cancelled twice finishes;
//   - a release of a quarantined pack item cancelled twice releases it,
//     and one cancelled every time answers unavailable, not "not
//     quarantined" (api.ErrConflict, a 409 to the caller);
//   - a pack item's outcome with staged writes cancelled twice is
//     committed once, with one pipeline call and one attempt.
func TestHarnessTransactionConflictIsRetried(t *testing.T) {
	t.Parallel() // its own harnesses (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()

	t.Run("finish a run", func(t *testing.T) {
		h, proxy := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{Output: req.Input}, nil
		})
		id := newID(t)
		if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(3)}}); err != nil {
			t.Fatal(err)
		}
		h.drain(t, ctx)
		setFaults(t, proxy, 1, conflictRule(`"PUBLISH"`, 2, "None", "None", "TransactionConflict"))
		r, err := h.finalizer.Finalize(ctx, id, 1)
		if err != nil || !r.Wrote || r.Report.Status != api.StatusCompleted {
			t.Fatalf("finalize: %+v, %v; want the run finished", r, err)
		}
		if st := proxy.Status(); st.Fired[0] != 2 {
			t.Fatalf("the conflict fired %d times, want 2", st.Fired[0])
		}
		if b := mustBatch(t, h, id); b.Status != api.StatusCompleted {
			t.Fatalf("batch %s", b.Status)
		}
	})

	t.Run("release a pack item", func(t *testing.T) {
		h, proxy := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{}, pipeline.Quarantine(errors.New("check me"))
		})
		id := newID(t)
		if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(4)}, ItemsPerMessage: 4}); err != nil {
			t.Fatal(err)
		}
		h.drain(t, ctx)
		if r, err := h.finalizer.Finalize(ctx, id, 1); err != nil || r.Report.Census.Quarantined != 4 {
			t.Fatalf("finalize: %+v, %v", r.Report.Census, err)
		}
		ctl := h.control()
		setFaults(t, proxy, 1, conflictRule("", 2, "None", "TransactionConflict"))
		if err := ctl.Release(ctx, id, api.PositionalKey(0)); err != nil {
			t.Fatalf("release under a passing conflict: %v, want it released", err)
		}
		if it := itemState(t, h, id, api.PositionalKey(0)); !it.Released {
			t.Fatalf("%s not released: %+v", api.PositionalKey(0), it)
		}
		setFaults(t, proxy, 1, conflictRule("", 0, "TransactionConflict"))
		err := ctl.Release(ctx, id, api.PositionalKey(1))
		if !errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, api.ErrConflict) {
			t.Fatalf("release under a lasting conflict: %v; want unavailable, not a conflict (the item is quarantined)", err)
		}
		setFaults(t, proxy, 1)
		if err := ctl.Release(ctx, id, api.PositionalKey(1)); err != nil {
			t.Fatalf("release once the conflict ended: %v", err)
		}
	})

	t.Run("pack outcome with staged writes", func(t *testing.T) {
		table := effectsTable(t)
		h, proxy := newFaultHarness(t, stagingCounter(table))
		h.worker.Staging = effects.Staging([]string{table})
		laneBindEffects(t, h, table)
		id := newID(t)
		if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(3)}, ItemsPerMessage: 3}); err != nil {
			t.Fatal(err)
		}
		h.worker.Handle(ctx, h.receive(t, 1)) // the fan-out
		setFaults(t, proxy, 1, conflictRule("", 2, "TransactionConflict"))
		h.drain(t, ctx)
		if st := proxy.Status(); st.Fired[0] != 2 {
			t.Fatalf("the conflict fired %d times, want 2", st.Fired[0])
		}
		for i := range 3 {
			key := api.PositionalKey(int64(i))
			it := itemState(t, h, id, key)
			if it.Outcome != api.OutcomeSucceeded || it.RunAttempts != 1 || h.callsOf(key) != 1 || applied(t, table, key) != 1 {
				t.Errorf("%s: %s after %d attempts, %d calls, applied %d; want succeeded, 1, 1, 1", key, it.Outcome, it.RunAttempts, h.callsOf(key), applied(t, table, key))
			}
		}
	})
}

// TestHarnessSlowDownOnOutputsUsesNoAttempt guards "S3 asks callers to
// back off" (docs/design/errors.md, class backoff; Amazon S3 user guide,
// "Best practices design patterns: optimizing Amazon S3 performance"): a
// pipeline whose output writes (Outputs.Put) S3 answers 503 SlowDown past
// the SDK's tries, three times over — as many as the batch's attempts —
// fails no item and uses no attempt: each such attempt waits as a
// throttled one, and the item succeeds at its first counted attempt once
// S3 takes the writes.
func TestHarnessSlowDownOnOutputsUsesNoAttempt(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h, proxy := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		uri, err := req.Outputs.Put(ctx, req.Key+".txt", "text/plain", []byte("out of "+req.Key))
		if err != nil {
			return pipeline.Result{}, fmt.Errorf("store the output: %w", err)
		}
		out, _ := json.Marshal(map[string]string{"uri": uri})
		return pipeline.Result{Output: out}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(1)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1)) // the fan-out
	const tries = 6 * 3                   // the SDK's 6 tries, three times: the batch's 3 attempts
	setFaults(t, proxy, 1, faultproxy.Rule{Service: "s3", Operations: []string{"PutObject"}, Kind: faultproxy.KindThrottle, Rate: 1, Max: tries})
	key := api.PositionalKey(0)
	// The queue as the event source mapping uses it: a delivery the worker
	// does not acknowledge comes back after its visibility timeout.
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) && !h.outcome(t, id, key).Terminal() {
		if ds := h.poll(t); len(ds) > 0 {
			h.handleAndAck(t, h.worker, ds)
		}
	}
	ok := h.outcome(t, id, key).Terminal()
	if st := proxy.Status(); !ok || st.Fired[0] != tries {
		t.Fatalf("finished %v; SlowDown fired %d times, want %d", ok, st.Fired[0], tries)
	}
	it := itemState(t, h, id, key)
	if it.Outcome != api.OutcomeSucceeded || it.RunAttempts != 1 {
		t.Fatalf("%s: %s after %d attempts (%q); want succeeded at its first counted attempt", key, it.Outcome, it.RunAttempts, it.Error)
	}
	if body, err := h.blobs.Get(ctx, api.OutputsPrefix(id)+key+".txt"); err != nil || string(body) != "out of "+key {
		t.Fatalf("output %q, %v", body, err)
	}
}

// TestHarnessErrorClasses guards docs/design/errors.md's classes, each
// injected through the fault proxy in its service's wire shape and
// checked on bulkrun's outcome (class backoff: TestHarnessThrottlingNeverDeadLetters
// and TestHarnessSlowDownOnOutputsUsesNoAttempt; a transaction conflict:
// TestHarnessTransactionConflictIsRetried):
//   - retry: a DynamoDB 500 on an item's reservation is sent again in
//     place; the item succeeds at its first attempt, its message neither
//     sent again nor delayed;
//   - pause: S3 answering KMS.DisabledException to an item's output write
//     (the bucket's key disabled) pauses the batch (class "aws s3
//     KMS.DisabledException"), fails no item and uses no attempt; once the
//     key is back and the batch unpaused, the item succeeds at its first
//     counted attempt;
//   - permanent: Secrets Manager answering ResourceNotFoundException for
//     a batch's secret reference fails its item at once, naming it; an
//     AccessDeniedException on the item's own reservation fails nothing
//     and counts no attempt: the delivery is left to the queue (its
//     redrive), not sent again;
//   - conflict: a release whose transaction DynamoDB cancels for a failed
//     condition answers "not quarantined" (api.ErrConflict).
func TestHarnessErrorClasses(t *testing.T) {
	t.Parallel() // its own harnesses (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	ok := func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	}
	oneItem := func(t *testing.T, h *harness, req api.SubmitRequest) string {
		t.Helper()
		req.BatchID, req.Pipeline, req.Source = newID(t), "counted", api.SourceSpec{Items: inlineItems(1)}
		if _, err := h.submitter.Submit(ctx, req); err != nil {
			t.Fatal(err)
		}
		h.worker.Handle(ctx, h.receive(t, 1)) // the fan-out
		return req.BatchID
	}
	key := api.PositionalKey(0)

	t.Run("retry", func(t *testing.T) {
		h, proxy := newFaultHarness(t, ok)
		rq := &recordingQueue{Queue: h.queue}
		h.worker.Queue = rq
		id := oneItem(t, h, api.SubmitRequest{})
		setFaults(t, proxy, 1, faultproxy.Rule{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: `"` + key + `"`,
			Kind: faultproxy.KindError, Code: "InternalServerError", Rate: 1, Max: 2})
		if failed := h.worker.Handle(ctx, h.receive(t, 1)); len(failed) != 0 {
			t.Fatalf("failed deliveries %v", failed)
		}
		it := itemState(t, h, id, key)
		if st := proxy.Status(); st.Fired[0] != 2 || it.Outcome != api.OutcomeSucceeded || it.RunAttempts != 1 || len(rq.requeues)+len(rq.delays) != 0 {
			t.Fatalf("fired %d; %s after %d attempts, %d requeues, %d delays; want 2, succeeded after 1, none", st.Fired[0], it.Outcome, it.RunAttempts, len(rq.requeues), len(rq.delays))
		}
	})

	t.Run("pause", func(t *testing.T) {
		h, proxy := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
			if _, err := req.Outputs.Put(ctx, req.Key+".txt", "text/plain", []byte("out")); err != nil {
				return pipeline.Result{}, fmt.Errorf("store the output: %w", err)
			}
			return pipeline.Result{Output: req.Input}, nil
		})
		id := oneItem(t, h, api.SubmitRequest{})
		setFaults(t, proxy, 1, faultproxy.Rule{Service: "s3", Operations: []string{"PutObject"}, Kind: faultproxy.KindError,
			Code: "KMS.DisabledException", Message: "arn:aws:kms:us-east-1:000000000000:key/k is disabled.", Rate: 1})
		if failed := h.worker.Handle(ctx, h.receive(t, 1)); len(failed) != 0 {
			t.Fatalf("failed deliveries %v: the message must be sent again, not left to the queue", failed)
		}
		b := mustBatch(t, h, id)
		it := itemState(t, h, id, key)
		if b.Pause == nil || b.Pause.By != api.PauseByOutage || b.Pause.Class != "aws s3 KMS.DisabledException" {
			t.Fatalf("pause %+v, want an outage pause of class aws s3 KMS.DisabledException", b.Pause)
		}
		if it.Outcome.Terminal() || it.RunAttempts != 0 {
			t.Fatalf("%s after %d counted attempts; want in flight, none counted", it.Outcome, it.RunAttempts)
		}
		setFaults(t, proxy, 1) // the key is back
		if _, err := h.control().Unpause(ctx, id); err != nil {
			t.Fatal(err)
		}
		done := h.handleUntil(t, ctx, h.worker, time.Minute, func() bool { return h.outcome(t, id, key).Terminal() })
		if it := itemState(t, h, id, key); !done || it.Outcome != api.OutcomeSucceeded || it.RunAttempts != 1 {
			t.Fatalf("%s after %d attempts; want succeeded after 1", it.Outcome, it.RunAttempts)
		}
	})

	t.Run("permanent", func(t *testing.T) {
		h, proxy := newFaultHarness(t, ok)
		const arn = "arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/gone-AbCdEf"
		_, cfg := faultProxy(t, faultproxy.Config{Seed: 1, Rules: []faultproxy.Rule{{Service: "secretsmanager", Kind: faultproxy.KindError,
			Code: "ResourceNotFoundException", Message: "Secrets Manager can't find the specified secret.", Rate: 1}}})
		h.worker.Secrets = secret.New(h.as(cfg, "item"), time.Minute)
		h.submitter.SecretPrefixes = []string{arn}
		id := oneItem(t, h, api.SubmitRequest{Headers: map[string]string{"Authorization": secretref.Prefix + arn}})
		if failed := h.worker.Handle(ctx, h.receive(t, 1)); len(failed) != 0 {
			t.Fatalf("failed deliveries %v", failed)
		}
		it := itemState(t, h, id, key)
		if it.Outcome != api.OutcomeFailed || it.Reason != api.ReasonPermanent || !strings.Contains(it.Error, "ResourceNotFoundException") || h.callsOf(key) != 0 {
			t.Fatalf("%s (%s) %q after %d calls; want failed permanently, naming ResourceNotFoundException, no call", it.Outcome, it.Reason, it.Error, h.callsOf(key))
		}

		// bulkrun's own call refused: no item fails for it.
		rq := &recordingQueue{Queue: h.queue}
		h.worker.Queue, h.worker.Secrets, h.submitter.SecretPrefixes = rq, nil, nil
		id = oneItem(t, h, api.SubmitRequest{})
		setFaults(t, proxy, 1, faultproxy.Rule{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: `"` + key + `"`,
			Kind: faultproxy.KindError, Code: "AccessDeniedException", Rate: 1})
		ds := h.receive(t, 1)
		if failed := h.worker.Handle(ctx, ds); len(failed) != 1 || len(rq.requeues) != 0 {
			t.Fatalf("failed deliveries %v, %d requeues; want the delivery left to the queue, not sent again", failed, len(rq.requeues))
		}
		if o := h.outcome(t, id, key); o.Terminal() {
			t.Fatalf("the item ended %s for bulkrun's own refused call", o)
		}
	})

	t.Run("conflict", func(t *testing.T) {
		h, proxy := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{}, pipeline.Quarantine(errors.New("check me"))
		})
		id := newID(t)
		if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(2)}, ItemsPerMessage: 2}); err != nil {
			t.Fatal(err)
		}
		h.drain(t, ctx)
		if _, err := h.finalizer.Finalize(ctx, id, 1); err != nil {
			t.Fatal(err)
		}
		setFaults(t, proxy, 1, conflictRule("", 0, "None", "ConditionalCheckFailed"))
		if err := h.control().Release(ctx, id, key); !errors.Is(err, api.ErrConflict) || errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("release under a failed condition: %v, want api.ErrConflict", err)
		}
	})
}
