//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/queue"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// Lambda's recursive loop detection (docs/design/faults.md, "Recursive loops"):
// the item function sends an item's message again to the queue that
// invokes it while the item waits for a max_concurrency slot and while
// AWS is unavailable. On AWS, past about 16 invocations of one chain
// Lambda stops the next one and the message goes to the dead-letter queue.
// The IAM lane counts the chain as Lambda does and stops it the same way
// (integration/testbed/iamlane, rules.go), so these tests fail on a stack
// whose item function would be stopped.

// requireLane skips (fails under CI=true) without the lane: the emulator
// alone has no loop detection, so the tests would prove nothing.
func requireLane(t *testing.T) {
	t.Helper()
	if laneOn() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the IAM lane is off: .ci/run starts the emulator with BULKRUN_FAULT_PROXY=1 BULKRUN_IAM_LANE=1")
	}
	t.Skip("the IAM lane is off (BULKRUN_FAULT_PROXY=1 BULKRUN_IAM_LANE=1)")
}

// handleUntil handles the harness queue's deliveries with w until done
// reports true or limit passes, and returns whether done did.
func (h *harness) handleUntil(t *testing.T, ctx context.Context, w *worker.Worker, limit time.Duration, done func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if done() {
			return true
		}
		if ds := h.receive(t, 10); len(ds) > 0 {
			w.Handle(ctx, ds)
		}
	}
	return done()
}

func (h *harness) outcome(t *testing.T, id, key string) api.Outcome {
	t.Helper()
	it, err := h.store.GetItem(context.Background(), id, key)
	if errors.Is(err, api.ErrNotFound) {
		return api.OutcomePending // no row yet: never reserved
	}
	if err != nil {
		t.Fatal(err)
	}
	return it.Outcome
}

// TestLoopItemWaitsTwoMinutesForASlot: a batch with max_concurrency 1,
// whose first item runs 2 minutes; the second waits for the slot, its
// message sent again every 1–4 s (≈ 50 sends of one chain). Both items
// must succeed, the second once the first is done, and no message may be
// stopped as a recursive loop.
func TestLoopItemWaitsTwoMinutesForASlot(t *testing.T) {
	requireLane(t)
	t.Parallel() // 2 minutes of waiting, on its own harness: beside the others
	ctx := context.Background()
	first := api.PositionalKey(0)
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Key == first {
			time.Sleep(2 * time.Minute)
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	h.worker.Lease = 5 * time.Minute // the slot is held while the first item runs
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxConcurrency: 1, Source: api.SourceSpec{Items: inlineItems(2)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1)) // the fan-out
	ds := h.receive(t, 2)
	if len(ds) != 2 {
		t.Fatalf("%d item messages, want 2", len(ds))
	}
	var firstDelivery, second []worker.Delivery
	for _, d := range ds {
		var m ledger.Message
		if err := json.Unmarshal(d.Body, &m); err == nil && m.Key == first {
			firstDelivery = append(firstDelivery, d)
		} else {
			second = append(second, d)
		}
	}
	running := make(chan struct{})
	go func() {
		defer close(running)
		h.worker.Handle(ctx, firstDelivery) // takes the slot and runs 2 minutes
	}()
	time.Sleep(time.Second)
	h.worker.Handle(ctx, second) // no slot: sent again
	start := time.Now()
	ok := h.handleUntil(t, ctx, h.worker, 4*time.Minute, func() bool {
		return h.outcome(t, id, api.PositionalKey(1)) == api.OutcomeSucceeded
	})
	<-running
	t.Logf("second item after %s: %s (calls %d)", time.Since(start).Round(time.Second), h.outcome(t, id, api.PositionalKey(1)), h.callsOf(api.PositionalKey(1)))
	if !ok || h.outcome(t, id, first) != api.OutcomeSucceeded {
		t.Errorf("items %s and %s, want both succeeded: the waiting item's message was lost", h.outcome(t, id, first), h.outcome(t, id, api.PositionalKey(1)))
	}
}

// TestLoopItemThrottled20Times: the item's reservation is throttled 20
// times in a row (the SDK's retries off), so its message is sent again 20
// times (no attempt used). It must succeed once DynamoDB answers, and no
// message may be stopped as a recursive loop.
func TestLoopItemThrottled20Times(t *testing.T) {
	requireLane(t)
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(1)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1)) // the fan-out
	// Unavailable 20 times in a row: the SDK retries nothing here (on AWS
	// each of these is 6 throttled tries), so each throttle is one.
	const times, tries = 20, 1
	proxy, cfg := faultProxy(t, faultproxy.Config{Seed: 1, Rules: []faultproxy.Rule{
		{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: `"` + api.PositionalKey(0) + `"`, Kind: faultproxy.KindThrottle, Rate: 1, Max: times * tries},
	}})
	cfg.Retryer = func() aws.Retryer { return aws.NopRetryer{} }
	w := *h.worker
	w.Store = dynamo.New(dynamodb.NewFromConfig(h.as(cfg, "item")), h.table)
	w.Queue = queue.New(sqs.NewFromConfig(h.as(cfg, "item")), h.queueURL)
	w.UnavailableDelay = func(int) time.Duration { return 0 }
	ok := h.handleUntil(t, ctx, &w, 4*time.Minute, func() bool {
		return h.outcome(t, id, api.PositionalKey(0)) == api.OutcomeSucceeded
	})
	t.Logf("throttles injected %d; item %s", proxy.Status().Fired[0], h.outcome(t, id, api.PositionalKey(0)))
	if !ok {
		t.Errorf("item %s after %d throttled reservations, want succeeded: its message was lost", h.outcome(t, id, api.PositionalKey(0)), proxy.Status().Fired[0]/tries)
	}
}
