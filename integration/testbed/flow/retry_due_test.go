package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// callLog is a pipeline's own log of its calls: each key's calls, at the
// rig's clock, from start.
type callLog struct {
	mu    sync.Mutex
	start time.Time
	calls map[string][]time.Duration
}

func (l *callLog) add(key string, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[key] = append(l.calls[key], at.Sub(l.start))
	return len(l.calls[key])
}

func (l *callLog) of(key string) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.calls[key]...)
}

// firstCalls runs batch id's first calls: n items at k a message on a
// rig whose clock is the machine's (so that a transient failure is one,
// not a call cut off at a deadline long past), each key's first call
// answered first(key) (nil: success), every later call a success. It
// returns the rig, its calls and the deliveries of those first calls.
func firstCalls(t *testing.T, id string, k, n int, first func(key string, start time.Time) error) (*rig, *callLog, []worker.Delivery) {
	t.Helper()
	ctx := context.Background()
	var r *rig
	log := &callLog{calls: map[string][]time.Duration{}}
	r = newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		if log.add(req.Key, r.clock.T) == 1 {
			if err := first(req.Key, log.start); err != nil {
				return pipeline.Result{}, err
			}
		}
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	r.clock.T = time.Now().UTC()
	log.start = r.clock.T
	r.wakeHeld()
	submitK(t, r, id, k, n, func(q *api.SubmitRequest) { q.MaxAttempts = 3 })
	r.worker.Handle(ctx, r.queue.take()) // fan-out
	ds := r.queue.take()
	r.worker.Handle(ctx, ds)
	return r, log, ds
}

// TestRetryNotDueIsLeftBySiblingsWake guards a scheduled retry's wait
// against the pack's message sent again for a sibling: in one unit, item
// 0 suspends, item 1's call times out after 30 s (its retry waits at
// least twice that: the call may still run downstream) and item 2 is
// answered Retry-After 1 h. Item 0 is signalled 2 s later and its unit's
// message, sent again by the wake, delivered: item 0 runs, items 1 and 2
// are not called, and the delivery is not acknowledged — it comes back
// when item 1's retry is due. Before, the pack's take ran every item in
// flight with a retry scheduled (ItemState.RetryAt did not exist): items
// 1 and 2 were called again at +2 s.
func TestRetryNotDueIsLeftBySiblingsWake(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			r, log, _ := firstCalls(t, "sib", k, 3, func(key string, _ time.Time) error {
				switch key {
				case api.PositionalKey(0):
					return &pipeline.SuspendError{Reason: "awaiting approval", Token: "tok"}
				case api.PositionalKey(1):
					return pipeline.TimedOut(errors.New("no answer in 30 s"), 30*time.Second)
				case api.PositionalKey(2):
					return pipeline.RetryAfter(errors.New("503 come back later"), time.Hour)
				}
				return nil
			}) // 0 suspended, 1 timed out, 2 told to wait an hour
			r.clock.T = r.clock.T.Add(2 * time.Second)
			res, err := r.ctl.Signal(ctx, "sib", api.PositionalKey(0), "", "tok", json.RawMessage(`{"ok":1}`))
			if err != nil || !res.Woken {
				t.Fatalf("signal: %+v %v", res, err)
			}
			woken := r.queue.take()
			before := len(r.queue.delays())
			failed := r.worker.Handle(ctx, woken)
			if got := len(log.of(api.PositionalKey(0))); got != 2 {
				t.Errorf("item 0 called %d times, want 2 (woken)", got)
			}
			for _, j := range []int64{1, 2} {
				if c := log.of(api.PositionalKey(j)); len(c) != 1 {
					t.Errorf("item %d called at %v, want once (its retry is not due at +2 s)", j, c)
				}
			}
			if k == 10 {
				// The woken pack's delivery comes back for items 1 and 2.
				waits := r.queue.delays()[before:]
				if len(failed) != 1 || len(waits) == 0 || waits[len(waits)-1] < 55*time.Second {
					t.Errorf("woken delivery: failed %v, waits asked %v; want it kept, back ≥ 55 s later (item 1's retry)", failed, waits)
				}
			}
		})
	}
}

// TestRetryNotDueIsLeftByTimerHop guards a Retry-After against the timer
// of a sibling: item 0 suspends for a day (its timer message hops every
// 15 minutes at most), item 1 is answered Retry-After 1 h; the timer's
// first hop, 15 min later, runs nothing. Before, it called item 1 then.
func TestRetryNotDueIsLeftByTimerHop(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			r, log, _ := firstCalls(t, "hop", k, 2, func(key string, start time.Time) error {
				switch key {
				case api.PositionalKey(0):
					return pipeline.Suspend("awaiting a file", start.Add(24*time.Hour))
				case api.PositionalKey(1):
					return pipeline.RetryAfter(errors.New("503 come back in an hour"), time.Hour)
				}
				return nil
			})
			r.clock.T = r.clock.T.Add(15*time.Minute + time.Second)
			r.worker.Handle(ctx, r.queue.take()) // the timer's hop
			if c := log.of(api.PositionalKey(1)); len(c) != 1 {
				t.Errorf("item 1 (Retry-After 1 h) called at %v, want once by +15 min", c)
			}
		})
	}
}

// TestDuplicateComesBackWhenTheRetryIsDue guards a scheduled retry's wait
// against an SQS duplicate of its message (standard queues deliver at
// least once, "Amazon SQS standard queues", SQS developer guide): an
// item answered Retry-After 1 h, its message delivered again 2 s later,
// is not called; the duplicate is not acknowledged and comes back when
// the retry is due, not at the rechecks of a live lease (which would
// count a receive every 5–80 s toward the dead-letter queue); at the due
// time it runs and succeeds. Before, an item row's release ended its
// lease at once and a pack's take ran any item with a retry scheduled:
// the duplicate called it at +2 s.
func TestDuplicateComesBackWhenTheRetryIsDue(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			r, log, first := firstCalls(t, "dup", k, 1, func(string, time.Time) error {
				return pipeline.RetryAfter(errors.New("429 come back in an hour"), time.Hour)
			})
			r.queue.take() // the message the throttled wait sent again, if any
			r.clock.T = r.clock.T.Add(2 * time.Second)
			before := len(r.queue.delays())
			if failed := r.worker.Handle(ctx, first); len(failed) != 1 {
				t.Errorf("the duplicate at +2 s was acknowledged (failed %v): the retry it leaves has no message of its own", failed)
			}
			if c := log.of(api.PositionalKey(0)); len(c) != 1 {
				t.Fatalf("calls %v, want one: the duplicate at +2 s called the item", c)
			}
			waits := r.queue.delays()[before:]
			if len(waits) != 1 || waits[0] < time.Hour-5*time.Second || waits[0] > time.Hour {
				t.Errorf("the duplicate asked to come back after %v, want once, ≈ 1 h less 2 s", waits)
			}
			r.clock.T = log.start.Add(time.Hour + 2*time.Second)
			if failed := r.worker.Handle(ctx, first); len(failed) != 0 {
				t.Errorf("at the retry's time: failed %v, want it run and acknowledged", failed)
			}
			c := log.of(api.PositionalKey(0))
			if len(c) != 2 || c[1] < time.Hour {
				t.Errorf("calls at %v, want the second at or after 1 h", c)
			}
		})
	}
}

// keptOf hands ds to the worker and returns those not acknowledged.
func keptOf(r *rig, ds []worker.Delivery) []worker.Delivery {
	failed := r.worker.Handle(context.Background(), ds)
	var kept []worker.Delivery
	for _, d := range ds {
		if slices.Contains(failed, d.MessageID) {
			kept = append(kept, d)
		}
	}
	return kept
}

// TestRetryNotDueKeepsOneTimerChain guards a suspended item's timer
// beside a sibling's retry that is not due: a pack of 2, item 0
// suspended for a day (its timer hops every 15 minutes), item 1 answered
// Retry-After 1 h. Each hop before the hour sends one message — the next
// hop, due no later than the retry — and is acknowledged; after the hour
// item 1 has run again and at most two messages wait for item 0, as
// before the retry's due time was kept. A first version kept each early
// hop for the retry beside the next hop: the chain forked at every hop
// (5 messages after three hops).
func TestRetryNotDueKeepsOneTimerChain(t *testing.T) {
	r, log, first := firstCalls(t, "fork", 10, 2, func(key string, start time.Time) error {
		switch key {
		case api.PositionalKey(0):
			return pipeline.Suspend("awaiting a file", start.Add(24*time.Hour))
		case api.PositionalKey(1):
			return pipeline.RetryAfter(errors.New("503 come back in an hour"), time.Hour)
		}
		return nil
	})
	kept := append([]worker.Delivery(nil), first...) // the first delivery, delayed 1 h
	for i := 1; i <= 3; i++ {
		r.clock.T = log.start.Add(time.Duration(i)*15*time.Minute + time.Second)
		hops := r.queue.take()
		if len(hops) != 1 {
			t.Fatalf("+%d min: %d messages on the queue, want the one timer hop", i*15, len(hops))
		}
		if k := keptOf(r, hops); len(k) != 0 {
			t.Errorf("+%d min: the hop was kept beside the next one", i*15)
		}
	}
	r.clock.T = log.start.Add(time.Hour + 2*time.Second)
	var left []worker.Delivery
	for _, d := range append(kept, r.queue.take()...) { // one at a time: no race between them
		left = append(left, keptOf(r, []worker.Delivery{d})...)
	}
	if c := log.of(api.PositionalKey(1)); len(c) != 2 || c[1] < time.Hour {
		t.Errorf("item 1 called at %v, want again at or after 1 h", c)
	}
	if n := len(r.queue.take()) + len(left); n > 2 {
		t.Errorf("after the hour %d messages wait for item 0's timer, want at most 2", n)
	}
}

// TestDeadLetterWhileARetryWaits guards a dead letter of a unit whose
// item waits out a Retry-After of 1 h (its message's receives ran out;
// a duplicate counted the last): an item row's is brought back once,
// when the retry is due (its row's lease holds until then and no holder
// would decide), not at each of the dead-letter queue's visibility
// timeouts; a pack's settles it failed at once, as before.
func TestDeadLetterWhileARetryWaits(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			r, log, first := firstCalls(t, "dlq", k, 1, func(string, time.Time) error {
				return pipeline.RetryAfter(errors.New("503 come back in an hour"), time.Hour)
			})
			r.queue.take()
			r.clock.T = log.start.Add(2 * time.Second)
			var dl []worker.Delivery
			for _, d := range first {
				d.DeadLetter, d.ReceiveCount = true, 1
				dl = append(dl, d)
			}
			before := len(r.queue.delays())
			failed := r.worker.Handle(ctx, dl)
			waits := r.queue.delays()[before:]
			if k > 1 {
				page, err := r.ctl.Items(ctx, "dlq", api.OutcomeFailed, "", 10)
				if err != nil || len(failed) != 0 || len(page.Items) != 1 {
					t.Errorf("pack dead letter: failed %v, failed items %+v (%v); want it settled failed at once", failed, page.Items, err)
				}
				return
			}
			if len(failed) != 1 || len(waits) != 1 || waits[0] < time.Hour-5*time.Second || waits[0] > time.Hour {
				t.Errorf("item row dead letter: failed %v, waits %v; want it kept and back once, ≈ 1 h less 2 s later", failed, waits)
			}
			r.clock.T = log.start.Add(time.Hour + 2*time.Second)
			if failed := r.worker.Handle(ctx, dl); len(failed) != 0 {
				t.Errorf("at the retry's time the dead letter was not settled: failed %v", failed)
			}
		})
	}
}
