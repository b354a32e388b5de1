package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// TestMemSuspendSignalAndTimer guards "items that wait" (docs/adr/0034)
// at K = 1 and 10 under duplicate deliveries: of 20 items, 10 suspend
// without a wake time and 10 with one an hour ahead (past one 15-minute
// hop). The run does not finish while they wait; the timer messages
// that come early send the next hop (each at most api.MaxWakeHop); the
// signals wake the first 10 (a repeated one answers woken false), the
// clock past the wake time the other 10; each item is called exactly
// once more, a signalled one with its payload, and the run completes. A
// second batch, suspended and cancelled, settles cancelled.
func TestMemSuspendSignalAndTimer(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { suspendSignalAndTimer(t, k) })
	}
}

func suspendSignalAndTimer(t *testing.T, k int) {
	ctx := context.Background()
	const n = 20
	var mu sync.Mutex
	signals := map[string][]string{}
	var wakeAt time.Time
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		calls := append(signals[req.BatchID+"/"+req.Key], string(req.Signal))
		signals[req.BatchID+"/"+req.Key] = calls
		if len(calls) > 1 {
			return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
		}
		i, _ := strconv.Atoi(req.Key[len(req.Key)-4:])
		if i >= n/2 {
			return pipeline.Result{}, pipeline.Suspend("awaiting a file", wakeAt)
		}
		return pipeline.Result{}, &pipeline.SuspendError{Reason: "awaiting approval", Token: "t-" + req.Key}
	})
	wakeAt = r.clock.T.Add(time.Hour)
	r.wakeHeld()
	// round delivers what is queued now, each message twice; those the
	// worker failed (a pack held by the other copy) come back.
	round := func() {
		ds := r.queue.take()
		failed := r.worker.Handle(ctx, append(append(ds[:0:0], ds...), ds...))
		for _, d := range ds {
			if slices.Contains(failed, d.MessageID) {
				d.ReceiveCount++
				r.queue.put([]worker.Delivery{d})
			}
		}
	}
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "wait", Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		round() // the fan-out, the first calls, the timers coming early
	}
	page, err := r.ctl.Items(ctx, "wait", api.OutcomeSuspended, "", 100)
	if err != nil || len(page.Items) != n {
		t.Fatalf("suspended listing: %d items, %v; want %d", len(page.Items), err, n)
	}
	for _, it := range page.Items {
		if it.Hold == nil || it.Reason != api.ReasonSuspend || it.Next == "" || r.callsOf(it.Key) != 1 {
			t.Fatalf("%s: %+v hold %+v after %d calls; want suspended with a next move after 1 call", it.Key, it, it.Hold, r.callsOf(it.Key))
		}
	}
	if _, err := r.fin.Finalize(ctx, "wait", 1); err == nil {
		t.Fatal("finalize finished a run whose items are suspended")
	}
	for _, d := range r.queue.delays() {
		if d > api.MaxWakeHop {
			t.Fatalf("a timer waits %s, more than a hop (%s)", d, api.MaxWakeHop)
		}
	}

	for i := range n / 2 {
		key := api.PositionalKey(int64(i))
		if _, err := r.ctl.Signal(ctx, "wait", key, "", "wrong", nil); !errors.Is(err, api.ErrConflict) {
			t.Fatalf("signal %s under another token: %v, want a conflict", key, err)
		}
		res, err := r.ctl.Signal(ctx, "wait", key, "", "t-"+key, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
		if err != nil || !res.Woken {
			t.Fatalf("signal %s: %+v %v", key, res, err)
		}
		if again, err := r.ctl.Signal(ctx, "wait", key, "", "", json.RawMessage(`{"i":-1}`)); err != nil || again.Woken || again.By != api.WakeSignal {
			t.Fatalf("signal %s again: %+v %v; want woken false by signal", key, again, err)
		}
	}
	round()
	round()
	r.clock.T = wakeAt.Add(time.Second)
	for range 6 {
		round()
	}
	mu.Lock()
	for i := range n {
		key := api.PositionalKey(int64(i))
		want := ""
		if i < n/2 {
			want = fmt.Sprintf(`{"i":%d}`, i)
		}
		if got := signals["wait/"+key]; len(got) != 2 || got[1] != want {
			t.Errorf("%s: calls with signals %q; want exactly 2, the second with %q", key, got, want)
		}
	}
	mu.Unlock()
	fin, err := r.fin.Finalize(ctx, "wait", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := fin.Report.Census; c.Succeeded != n || c.Suspended != 0 || fin.Report.Status != api.StatusCompleted {
		t.Fatalf("after the wakes: %s %+v; want completed, %d succeeded", fin.Report.Status, c, n)
	}

	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "stop", Pipeline: "counted", Source: api.SourceSpec{Items: items(2)}, ItemsPerMessage: k}); err != nil {
		t.Fatal(err)
	}
	round()
	round()
	if _, err := r.ctl.Cancel(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	round()
	round()
	if it := memItem(t, r, "stop", api.PositionalKey(0)); it.Outcome != api.OutcomeCancelled {
		t.Fatalf("a suspended item of a cancelled batch: %s, want cancelled", it.Outcome)
	}
}

// TestMemSignalRetryAfterASecondSuspension guards a signal sent again
// under its ID (a client's retry after a lost answer) at K = 1 and 10:
// when it arrives after the item ran and was suspended again, it is
// answered as delivered (woken false, by signal) and wakes nothing; a
// signal of another ID wakes the new suspension; each signal runs the
// item exactly once.
func TestMemSignalRetryAfterASecondSuspension(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				if string(req.Signal) == `{"step":2}` {
					return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
				}
				return pipeline.Result{}, pipeline.Suspend("awaiting the next approval", time.Time{})
			})
			r.wakeHeld()
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "twice", Pipeline: "counted", Source: api.SourceSpec{Items: items(3)}, ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 1)
			key := api.PositionalKey(1)
			if _, err := r.ctl.Signal(ctx, "twice", key, "bad id!", "", nil); err == nil {
				t.Fatal("a signal_id with a space and a bang was taken")
			}
			if res, err := r.ctl.Signal(ctx, "twice", key, "s1", "", json.RawMessage(`{"step":1}`)); err != nil || !res.Woken {
				t.Fatalf("first signal: %+v %v", res, err)
			}
			r.drain(t, ctx, 2) // runs once more, and is suspended again
			if it := memItem(t, r, "twice", key); it.Outcome != api.OutcomeSuspended || r.callsOf(key) != 2 {
				t.Fatalf("after the first signal: %s, %d calls; want suspended again after 2", it.Outcome, r.callsOf(key))
			}
			if res, err := r.ctl.Signal(ctx, "twice", key, "s1", "", json.RawMessage(`{"step":1}`)); err != nil || res.Woken || res.By != api.WakeSignal {
				t.Fatalf("the first signal sent again: %+v %v; want answered as delivered", res, err)
			}
			r.drain(t, ctx, 1)
			if it := memItem(t, r, "twice", key); it.Outcome != api.OutcomeSuspended || r.callsOf(key) != 2 {
				t.Fatalf("after the retry: %s, %d calls; want still suspended after 2", it.Outcome, r.callsOf(key))
			}
			if res, err := r.ctl.Signal(ctx, "twice", key, "s2", "", json.RawMessage(`{"step":2}`)); err != nil || !res.Woken {
				t.Fatalf("second signal: %+v %v", res, err)
			}
			r.drain(t, ctx, 2)
			if it := memItem(t, r, "twice", key); it.Outcome != api.OutcomeSucceeded || r.callsOf(key) != 3 {
				t.Fatalf("after the second signal: %s, %d calls; want succeeded after 3", it.Outcome, r.callsOf(key))
			}
		})
	}
}
