package flow

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestListShowsTheAdaptivePace guards the listing's live views
// (control.ListBatches): a running batch with no rate whose downstream
// key is paced shows that pace (api.LiveView.AdaptivePace: its key and
// limit), read once for the batches sharing the key; a batch with a rate
// of its own, paced by that, shows none.
func TestListShowsTheAdaptivePace(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	submitK(t, r, "unrated-1", 1, 5, nil)
	submitK(t, r, "unrated-2", 1, 5, nil)
	submitK(t, r, "rated", 1, 5, func(req *api.SubmitRequest) { req.Rate = &api.Rate{RequestsPerSecond: 5} })
	b, err := r.store.GetBatch(ctx, "unrated-1")
	if err != nil {
		t.Fatal(err)
	}
	key := pacer.DownstreamKey(b)
	now := r.clock.Now()
	if _, ok, err := r.store.CutAdapt(ctx, pace.AdaptCut{Key: key, Row: pace.Adapt{Limit: 12, Step: 1.2, Cut: now.Add(-time.Second)}, Now: now}); err != nil || !ok {
		t.Fatalf("cut %s: %v %v", key, ok, err)
	}
	page, err := r.ctl.ListBatches(ctx, api.ListBatchesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, s := range page.Batches {
		if s.Live == nil {
			t.Fatalf("%s: running, listed without its live view", s.ID)
		}
		p := s.Live.AdaptivePace
		switch s.ID {
		case "rated":
			if p != nil {
				t.Errorf("rated: adaptive pace %+v, want none (a batch with a rate is paced by it)", *p)
			}
		default:
			seen++
			if p == nil || p.Key != key || math.Abs(p.LimitPerSecond-13.2) > 1e-6 {
				t.Errorf("%s: adaptive pace %+v, want key %s at 13.2 a second (12, +1.2 for the second since the cut)", s.ID, p, key)
			}
		}
	}
	if seen != 2 {
		t.Errorf("listed %d batches with no rate, want 2", seen)
	}
}
