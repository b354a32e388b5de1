//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/queue"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// Lambda's recursive loop detection (docs/design/faults.md, "Recursive loops"):
// the item function sends an item's message again to the queue that
// invokes it while AWS is unavailable, and a max_concurrency track sends
// itself on after each slice it claims and when it waits. On AWS, past about 16 invocations of one chain
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

// TestLoopItemWaitsTwoMinutesOnATrack: a batch with max_concurrency 1,
// whose first item runs 2 minutes. The second waits behind it on the
// batch's one track (shared/pace), a line of the manifest, with no
// message sent while it waits (the slot poll that tracks replaced sent
// one every 1–4 s, ≈ 50 of one chain). Both items succeed, the second
// only once the first has ended, the queue carries at most 3 messages
// in all (the track, its send after its claim, its end), and no message
// is stopped as a recursive loop.
func TestLoopItemWaitsTwoMinutesOnATrack(t *testing.T) {
	requireLane(t)
	t.Parallel() // 2 minutes of waiting, on its own harness: beside the others
	ctx := context.Background()
	first := api.PositionalKey(0)
	var mu sync.Mutex
	var firstEnded, secondStarted time.Time
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Key == first {
			time.Sleep(2 * time.Minute)
		}
		mu.Lock()
		defer mu.Unlock()
		if req.Key == first {
			firstEnded = time.Now()
		} else if secondStarted.IsZero() {
			secondStarted = time.Now()
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	h.worker.Lease = 5 * time.Minute // the track is held while the first item runs
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxConcurrency: 1, Source: api.SourceSpec{Items: inlineItems(2)}}); err != nil {
		t.Fatal(err)
	}
	handled := 0
	for range 10 {
		ds := h.receive(t, 10)
		if len(ds) == 0 {
			break
		}
		handled += len(ds)
		h.worker.Handle(ctx, ds)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d messages handled; the second item started %s after the first ended", handled, secondStarted.Sub(firstEnded).Round(time.Millisecond))
	if h.outcome(t, id, first) != api.OutcomeSucceeded || h.outcome(t, id, api.PositionalKey(1)) != api.OutcomeSucceeded {
		t.Errorf("items %s and %s, want both succeeded", h.outcome(t, id, first), h.outcome(t, id, api.PositionalKey(1)))
	}
	if secondStarted.Before(firstEnded) {
		t.Errorf("the second item started %s before the first ended, with max_concurrency 1", firstEnded.Sub(secondStarted))
	}
	if handled > 3 {
		t.Errorf("%d messages handled, want at most 3: a waiting item sends none", handled)
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
