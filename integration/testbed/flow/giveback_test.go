package flow

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// TestGivenBackTakeUsesNoAttempt guards an item row's attempts (one item
// a message) when its take is given back unstarted — here its rate lease
// went stale while it slept (the clock jumps past pace.LeaseGrace during
// the sleep), as a unit's take is given back at the deadline margin, in a
// pause, or behind its downstream's throttle: the take moved the row's
// attempt (the fence never goes back), but the attempt is not counted, so
// that an item with max_attempts 1 given back many times still runs, once,
// and succeeds. (An adaptive pace's ramp on the emulator gave back takes
// this way until 8 of 300 items ended "interrupted: attempt 4 exceeds max
// attempts 3" without a call.)
func TestGivenBackTakeUsesNoAttempt(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	r.clock.T = time.Now().UTC()
	r.worker.Concurrency, r.worker.ItemConcurrency = 1, 1
	var mu sync.Mutex
	late := 12 // the sleeps after which the lease is stale
	r.worker.Sleep = func(_ context.Context, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		r.clock.T = r.clock.T.Add(d)
		if late > 0 {
			late--
			r.clock.T = r.clock.T.Add(pace.LeaseGrace + time.Millisecond)
		}
	}
	// A late call is leased again from now when its key's row allows a
	// start within pace.LeaseSleep (pacer.Pacer.Relet); here the row
	// never does (booked an hour ahead for that ask), so the late take
	// is given back.
	r.worker.Store = noRelet{r.worker.Store}
	const n = 5
	submitK(t, r, "giveback", 1, n, func(req *api.SubmitRequest) {
		req.MaxAttempts = 1
		req.Rate = &api.Rate{Key: "giveback", RequestsPerSecond: 1}
	})
	r.drain(t, ctx, 1)
	if late > 0 {
		t.Fatalf("%d of 12 stale leases left: the test gave back fewer takes than it means to", late)
	}
	res, err := r.fin.Finalize(ctx, "giveback", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Census; c.Succeeded != n || c.Failed != 0 {
		t.Errorf("census %+v: want %d succeeded (12 takes given back, none counted), none failed", c, n)
	}
	for i := range n {
		if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
			t.Errorf("%s called %d times, want once", api.PositionalKey(int64(i)), c)
		}
	}
}

// noRelet is a store whose rate rows refuse every lease asked with a
// horizon of pace.LeaseSleep or less (pacer.Pacer.Relet's; a unit's own
// lease asks pace.LeaseHorizon): a late call is given back.
type noRelet struct{ worker.Store }

func (s noRelet) LeaseRate(ctx context.Context, l pace.RateLease) (pace.RateGrant, error) {
	if l.Horizon <= pace.LeaseSleep {
		return pace.RateGrant{Next: l.Now.Add(time.Hour)}, nil
	}
	return s.Store.LeaseRate(ctx, l)
}

// TestInterruptedTakeIsNotGivenBack guards on_interrupt: quarantine
// across a give-back: an item whose first attempt's holder died (its call
// may have reached the receiver) is taken over by a delivery whose rate
// lease goes stale before the call. The takeover must end it quarantined
// without a call, not give it back: a give-back recorded a scheduled
// retry, the next take no longer saw the interruption, and the item was
// called again.
func TestInterruptedTakeIsNotGivenBack(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	r.clock.T = time.Now().UTC()
	r.worker.Concurrency, r.worker.ItemConcurrency = 1, 1
	var mu sync.Mutex
	late := 1 // the first sleep (item 1's, behind item 0's lease) ends past its lease
	r.worker.Sleep = func(_ context.Context, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		r.clock.T = r.clock.T.Add(d)
		if late > 0 {
			late--
			r.clock.T = r.clock.T.Add(pace.LeaseGrace + time.Millisecond)
		}
	}
	b := submitK(t, r, "interrupted", 1, 2, func(req *api.SubmitRequest) {
		req.OnInterrupt = api.InterruptQuarantine
		req.Rate = &api.Rate{Key: "interrupted", RequestsPerSecond: 1}
	})
	// A holder that dies takes item 1 first: its lease ends unanswered.
	key := api.PositionalKey(1)
	if _, err := r.store.Reserve(ctx, ledger.Reservation{BatchID: "interrupted", Key: key, RunID: ledger.RunID("interrupted", key), Run: 1,
		ListShards: b.ListShards, Now: r.clock.T, Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	r.clock.T = r.clock.T.Add(2 * time.Second)
	r.drain(t, ctx, 1)
	if late > 0 {
		t.Fatal("no lease went stale: the test did not give back a take")
	}
	res, err := r.fin.Finalize(ctx, "interrupted", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Census; c.Quarantined != 1 || c.Succeeded != 1 || r.callsOf(key) != 0 {
		t.Errorf("census %+v, item 1 called %d times: want it quarantined, never called again (item 0 succeeded)", c, r.callsOf(key))
	}
}
