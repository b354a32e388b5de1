package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestPercentThresholdIsOfTheWholeBatch pins what a failure percentage
// judges (docs/api.md, "Thresholds"): the batch's item_count, never the
// items ended so far, so a run stops early only once its final verdict
// can no longer be within the threshold. A 1,000-item batch at 5 % whose
// first 5 items fail runs every item (5 failures of the 50 it tolerates);
// one whose first 60 fail stops once 51 have failed (51 × 100 > 5 ×
// 1,000), never on a projection from its first items.
func TestPercentThresholdIsOfTheWholeBatch(t *testing.T) {
	for _, tc := range []struct {
		failFirst int64
		stopped   bool
	}{{5, false}, {50, false}, {60, true}} {
		t.Run(fmt.Sprintf("first %d fail", tc.failFirst), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				var in struct{ N int64 }
				if err := json.Unmarshal(req.Input, &in); err != nil {
					return pipeline.Result{}, err
				}
				if in.N < tc.failFirst {
					return pipeline.Result{}, pipeline.Permanent(errors.New("no"))
				}
				return pipeline.Result{}, nil
			})
			five := 5.0
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "pc", Pipeline: "counted", Source: api.SourceSpec{Items: items(1000)},
				ItemsPerMessage: 1, Threshold: api.Threshold{FailurePercent: &five}}); err != nil {
				t.Fatal(err)
			}
			r.drainBy(t, ctx, 1, 10)
			b, _ := r.store.GetBatch(ctx, "pc")
			res, err := r.fin.Finalize(ctx, "pc", 1)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Report.Census
			var calls int64
			for i := range 1000 {
				calls += r.callsOf(api.PositionalKey(int64(i)))
			}
			if !tc.stopped {
				if b.Stop != "" || res.Report.Status != api.StatusCompleted || c.Failed != tc.failFirst || c.Succeeded != 1000-tc.failFirst || calls != 1000 {
					t.Fatalf("stop %q, status %s, census %+v, %d calls: want every item run once, %d failed, the run completed", b.Stop, res.Report.Status, c, calls, tc.failFirst)
				}
				return
			}
			// The stop is marked when an invocation's outcomes are counted:
			// at the 51st failure or later within the same invocation (10
			// messages here), never before it.
			if b.Stop != api.StatusThresholdExceeded || b.StopFailures < 51 || b.StopFailures > 60 || res.Report.Status != api.StatusThresholdExceeded {
				t.Fatalf("stop %q with %d failures, status %s: want threshold_exceeded once 51 had failed", b.Stop, b.StopFailures, res.Report.Status)
			}
			if c.Cancelled == 0 || c.Failed > tc.failFirst || calls != c.Failed+c.Succeeded {
				t.Fatalf("census %+v, %d calls: want the items not started cancelled, none run after", c, calls)
			}
		})
	}
}
