package flow

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// stagedMark is set by a pipeline call that staged a write.
type stagedMark struct{ on atomic.Bool }

type stagedKey struct{}

// oneStagedWrite is a staged write of one item.
type oneStagedWrite struct{}

func (oneStagedWrite) Len() int { return 1 }

// commitFailsOnce commits a pack item's staged writes as a plain pack
// write (the in-memory store has no transactions), and fails the first
// commit with an error that is neither a conflict nor a refusal of the
// writes: its outcome is unknown.
type commitFailsOnce struct {
	worker.Store
	failed atomic.Int64
}

func (s *commitFailsOnce) WritePack(ctx context.Context, w ledger.PackWrite) error {
	if w.Effects != nil && w.Effects.Len() > 0 {
		if s.failed.Add(1) == 1 {
			return errors.New("commit: connection reset")
		}
		w.Effects = nil
	}
	return s.Store.WritePack(ctx, w)
}

// TestPackRecordsItsItemsWhenOneCommitIsUnknown guards the pack's other
// items when one item's write with its staged writes fails with an
// unknown outcome (neither a conflict nor a refusal: an error the SDK
// gave up on, a transaction cancelled for a reason it does not name):
// item 3 of a pack of 10 stages a write whose commit fails once. The nine
// others succeeded in that delivery and are recorded then, called once
// each, never quarantined; item 3's attempt ends unknown, so the next
// take finds it interrupted and the batch's on_interrupt decides (run
// again, or quarantine). Before, the delivery wrote nothing: under
// on_interrupt retry the nine were called a second time, under
// quarantine all ten ended quarantined.
func TestPackRecordsItsItemsWhenOneCommitIsUnknown(t *testing.T) {
	for _, policy := range []api.InterruptPolicy{api.InterruptRetry, api.InterruptQuarantine} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if req.Key == api.PositionalKey(3) {
					ctx.Value(stagedKey{}).(*stagedMark).on.Store(true)
				}
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			r.clock.T = time.Now().UTC()
			r.worker.Store = &commitFailsOnce{Store: r.store}
			r.worker.Staging = func(ctx context.Context) (context.Context, func() ledger.StagedEffects) {
				m := &stagedMark{}
				return context.WithValue(ctx, stagedKey{}, m), func() ledger.StagedEffects {
					if m.on.Load() {
						return oneStagedWrite{}
					}
					return nil
				}
			}
			r.sub.ChunkItems = 10
			submitK(t, r, "fx", 10, 10, func(q *api.SubmitRequest) { q.OnInterrupt = policy })
			r.worker.Handle(ctx, r.queue.take()) // fan-out
			ds := r.queue.take()
			if failed := r.worker.Handle(ctx, ds); len(failed) != 1 {
				t.Fatalf("first delivery: failed %v, want it back for item 3", failed)
			}
			r.clock.T = r.clock.T.Add(2 * time.Minute) // past the take's lease
			r.queue.put(ds)
			r.drain(t, ctx, 1)
			res, err := r.fin.Finalize(ctx, "fx", 1)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Report.Census
			for i := range int64(10) {
				if key := api.PositionalKey(i); i != 3 && r.callsOf(key) != 1 {
					t.Errorf("%s: called %d times, want once: its first call succeeded and its unit's holder wrote it", key, r.callsOf(key))
				}
			}
			want3 := api.OutcomeSucceeded // run again
			if policy == api.InterruptQuarantine {
				want3 = api.OutcomeQuarantined
			}
			for _, it := range resultLines(t, r, "fx", 1, api.OutcomeQuarantined) {
				if it.Key != api.PositionalKey(3) {
					t.Errorf("%s quarantined (%s) though its call succeeded", it.Key, it.Reason)
				}
			}
			if want3 == api.OutcomeSucceeded && (c.Succeeded != 10 || r.callsOf(api.PositionalKey(3)) != 2) {
				t.Errorf("census %+v, item 3 called %d times; want 10 succeeded, item 3 run again once", c, r.callsOf(api.PositionalKey(3)))
			}
			if want3 == api.OutcomeQuarantined && (c.Succeeded != 9 || c.Quarantined != 1) {
				t.Errorf("census %+v; want 9 succeeded, item 3 quarantined (interrupted)", c)
			}
		})
	}
}

// TestPackRecordsItsItemsWhenAHeldMessageIsNotKept guards the pack's
// other items when the message a held item needs for its wake cannot be
// kept (S3 failing past the worker's tries): item 0 of a pack of 10
// suspends and the save fails once; the nine others succeeded in that
// delivery and are recorded then, called once each; item 0 is given back
// (nothing would wake it held) and runs again, suspends, and is held.
// Before, the delivery wrote nothing: the nine were called again, or
// quarantined as interrupted.
func TestPackRecordsItsItemsWhenAHeldMessageIsNotKept(t *testing.T) {
	for _, policy := range []api.InterruptPolicy{api.InterruptRetry, api.InterruptQuarantine} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				if req.Key == api.PositionalKey(0) {
					return pipeline.Result{}, &pipeline.SuspendError{Reason: "awaiting approval", Token: "tok"}
				}
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			r.clock.T = time.Now().UTC()
			r.wakeHeld()
			var failed atomic.Int64
			memblobs.FailBlobs(r.blobs, func(op, key string) error {
				if strings.Contains(key, "/held/") && op != "get" && failed.Add(1) == 1 {
					return errors.New("s3: internal error")
				}
				return nil
			})
			r.sub.ChunkItems = 10
			submitK(t, r, "hs", 10, 10, func(q *api.SubmitRequest) { q.OnInterrupt = policy })
			r.worker.Handle(ctx, r.queue.take()) // fan-out
			ds := r.queue.take()
			if f := r.worker.Handle(ctx, ds); len(f) != 1 || failed.Load() == 0 {
				t.Fatalf("first delivery: failed %v after %d failed saves; want it back for item 0", f, failed.Load())
			}
			r.clock.T = r.clock.T.Add(2 * time.Minute) // past the take's lease
			r.queue.put(ds)
			r.drain(t, ctx, 1)
			for i := int64(1); i < 10; i++ {
				if key := api.PositionalKey(i); r.callsOf(key) != 1 {
					t.Errorf("%s: called %d times, want once: its first call succeeded", key, r.callsOf(key))
				}
			}
			page, err := r.ctl.Items(ctx, "hs", api.OutcomeQuarantined, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range page.Items {
				t.Errorf("%s quarantined (%s)", it.Key, it.Reason)
			}
			held, err := r.ctl.Items(ctx, "hs", api.OutcomeSuspended, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(held.Items) != 1 || held.Items[0].Key != api.PositionalKey(0) || r.callsOf(api.PositionalKey(0)) != 2 {
				t.Errorf("suspended %+v, item 0 called %d times; want item 0 suspended after its second call", held.Items, r.callsOf(api.PositionalKey(0)))
			}
		})
	}
}
