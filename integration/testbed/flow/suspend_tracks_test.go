package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// TestSuspendUnderMaxConcurrency: max_concurrency 3 (3 tracks), 120 items
// in 12 slices of 10. Items 0–59 suspend on their first call (even ones
// for a signal, odd ones for a timer 1 h ahead: 4 hops); items 60–119 and
// resumed calls take 20 ms. Once 0–59 are suspended, the even ones are
// signalled while the tracks run 60–119 (one round delivered twice); then
// the clock moves 15 min a round past the wake time. Every signalled item
// runs exactly once more with its payload, every timer item once more
// without one, the others once; no wait is longer than a hop; the run
// does not finish while items are suspended, then completes. The calls
// at once never pass max_concurrency: a woken unit is handed to a track
// of its run, or runs under a retired track's fence row
// (docs/design/items.md, "Per-batch concurrency (max_concurrency)"),
// both while the tracks run (phase 2: signals) and once they retired
// (phase 3: timers); the figures are logged.
func TestSuspendUnderMaxConcurrency(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			const n, limit, heldN = 120, 3, 60
			var running, most atomic.Int64
			var mu sync.Mutex
			calls := map[string][]string{}
			var wakeAt time.Time
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				c := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
				}
				i, _ := strconv.Atoi(strings.TrimPrefix(req.Key, "item-"))
				mu.Lock()
				cs := append(calls[req.Key], string(req.Signal))
				calls[req.Key] = cs
				mu.Unlock()
				if i < heldN && len(cs) == 1 && i%2 == 0 {
					return pipeline.Result{}, &pipeline.SuspendError{Reason: "awaiting approval"}
				} else if i < heldN && len(cs) == 1 {
					return pipeline.Result{}, pipeline.Suspend("awaiting a file", wakeAt)
				}
				time.Sleep(20 * time.Millisecond)
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			wakeAt = r.clock.T.Add(time.Hour)
			r.wakeHeld()
			r.worker.Concurrency, r.worker.ItemConcurrency = 500, 500 // only max_concurrency bounds
			r.sub.ChunkItems = n
			submitK(t, r, "lim", k, n, func(req *api.SubmitRequest) { req.MaxConcurrency = limit })
			round := func(copies int) int { // every queued message, copies times at once
				ds := r.queue.take()
				var all []worker.Delivery
				for range copies {
					all = append(all, ds...)
				}
				failed := r.worker.Handle(ctx, all)
				for _, d := range ds {
					if slices.Contains(failed, d.MessageID) {
						d.ReceiveCount++
						r.queue.put([]worker.Delivery{d})
					}
				}
				return len(ds)
			}
			want := func(i int) []string {
				switch {
				case i >= heldN:
					return []string{""}
				case i%2 == 1:
					return []string{"", ""}
				}
				return []string{"", fmt.Sprintf(`{"i":%d}`, i)}
			}
			until := func(what string, done func(i, calls int) bool) { // rounds until done for every item
				for rounds := 0; ; rounds++ {
					mu.Lock()
					all := true
					for i := range n {
						all = all && done(i, len(calls[api.PositionalKey(int64(i))]))
					}
					mu.Unlock()
					if all {
						return
					}
					if rounds > 300 {
						t.Fatalf("%s: not done in 300 rounds", what)
					}
					round(1)
				}
			}
			until("phase 1", func(i, c int) bool { return i >= heldN || c >= 1 })
			page, err := r.ctl.Items(ctx, "lim", api.OutcomeSuspended, "", 200)
			if err != nil || len(page.Items) != heldN {
				t.Fatalf("suspended: %d, %v; want %d", len(page.Items), err, heldN)
			}
			most.Store(0)
			for i := 0; i < heldN; i += 2 { // phase 2: signals while the tracks run 60–119
				key := api.PositionalKey(int64(i))
				if res, err := r.ctl.Signal(ctx, "lim", key, "", "", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))); err != nil || !res.Woken {
					t.Fatalf("signal %s: %+v %v", key, res, err)
				}
			}
			round(2) // woken messages and tracks delivered twice, once
			until("phase 2", func(i, c int) bool { return i%2 == 1 && i < heldN || c >= len(want(i)) })
			t.Logf("phase 2: most pipeline calls at once %d, max_concurrency %d", most.Load(), limit)
			if m := most.Load(); m > limit {
				t.Errorf("%d pipeline calls at once, more than max_concurrency %d", m, limit)
			}
			if _, err := r.fin.Finalize(ctx, "lim", 1); err == nil {
				t.Fatal("finalize finished a run whose timer items are suspended")
			}
			for _, d := range r.queue.delays() {
				if d > api.MaxWakeHop {
					t.Fatalf("a wait of %s, more than a hop (%s)", d, api.MaxWakeHop)
				}
			}
			most.Store(0)
			for r.clock.T.Before(wakeAt) { // phase 3: the timers, hop by hop
				r.clock.T = r.clock.T.Add(api.MaxWakeHop)
				round(1)
			}
			for rounds := 0; round(1) > 0; rounds++ {
				if rounds > 300 {
					t.Fatal("the queue did not drain after the wake time")
				}
			}
			t.Logf("phase 3: most pipeline calls at once %d, max_concurrency %d", most.Load(), limit)
			if m := most.Load(); m > limit {
				t.Errorf("%d pipeline calls at once after the tracks retired, more than max_concurrency %d", m, limit)
			}
			for i := range n {
				if cs := calls[api.PositionalKey(int64(i))]; !slices.Equal(cs, want(i)) {
					t.Errorf("%s: calls with signals %q, want %q", api.PositionalKey(int64(i)), cs, want(i))
				}
			}
			fin, err := r.fin.Finalize(ctx, "lim", 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := fin.Report.Census; c.Succeeded != n || fin.Report.Status != api.StatusCompleted {
				t.Fatalf("%s %+v; want completed, %d succeeded", fin.Report.Status, c, n)
			}
		})
	}
}

// failRetire refuses the first retire of a track (TakeTrack with the
// retired holder) as AWS unavailable.
type failRetire struct {
	*memstore.Store
	failed atomic.Bool
}

func (s *failRetire) TakeTrack(ctx context.Context, t ledger.TrackTake) (ledger.TrackTaken, error) {
	if t.Holder == ledger.TrackRetired && s.failed.CompareAndSwap(false, true) {
		return ledger.TrackTaken{}, fmt.Errorf("take track: %w", ledger.ErrUnavailable)
	}
	return s.Store.TakeTrack(ctx, t)
}

// TestRetireThatFailsLeavesNoHandoffBehind: max_concurrency 1 (one
// track), 20 items of which item 0 suspends on its first call; the
// track's retire, once every item ran, fails (AWS unavailable). The track
// is sent on rather than acknowledged, so the signal's hand-off to it is
// run by its next delivery: item 0 runs once more and the run completes
// (when the failed retire was acknowledged, the hand-off waited on a row
// no delivery took, and the run never ended).
func TestRetireThatFailsLeavesNoHandoffBehind(t *testing.T) {
	ctx := context.Background()
	var r *rig
	r = newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Key == api.PositionalKey(0) && r.callsOf(req.Key) == 1 {
			return pipeline.Result{}, &pipeline.SuspendError{Reason: "awaiting approval"}
		}
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	r.wakeHeld()
	fr := &failRetire{Store: r.store}
	r.worker.Store = fr
	submitK(t, r, "one", 1, 20, func(req *api.SubmitRequest) { req.MaxConcurrency = 1 })
	r.drain(t, ctx, 1)
	if !fr.failed.Load() {
		t.Fatal("the track's retire was never tried")
	}
	if res, err := r.ctl.Signal(ctx, "one", api.PositionalKey(0), "", "", nil); err != nil || !res.Woken {
		t.Fatalf("signal: %+v %v", res, err)
	}
	r.drain(t, ctx, 1)
	if n := r.callsOf(api.PositionalKey(0)); n != 2 {
		t.Fatalf("item 0 called %d times, want 2 (suspended, then signalled)", n)
	}
	fin, err := r.fin.Finalize(ctx, "one", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := fin.Report.Census; c.Succeeded != 20 || fin.Report.Status != api.StatusCompleted {
		t.Fatalf("%s %+v; want completed, 20 succeeded", fin.Report.Status, c)
	}
}
