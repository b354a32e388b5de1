package flow

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
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
