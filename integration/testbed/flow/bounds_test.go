package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Every bound bulkrun puts on what an item reports is met by moving or
// cutting what is beyond it, the record saying so, never by failing the
// item (docs/design/bounds.md, "Every aggregate within its service's
// limit"), at K = 1 and 10, on the in-memory store, which refuses a row
// over DynamoDB's 400 KB as DynamoDB does:
//
//   - an output over worker.MaxInlineOutputBytes goes to S3, the item's
//     output_ref pointing at it;
//   - outputs of 60 KiB (inline for an item row) fill a pack row past
//     ledger.PackRowBudget: the largest go to S3, every item succeeds;
//   - an error text of 1 MiB is kept cut to pipeline.MaxErrorTextBytes,
//     ending "… [N bytes cut]".
func TestMemBoundsKeepTheOutcome(t *testing.T) {
	ctx := context.Background()
	big := strings.Repeat("x", 100<<10)
	wide := strings.Repeat("w", 60<<10)
	for _, tc := range []struct {
		name string
		run  pipeline.Func
		// check looks at one item as its unit holds it.
		check func(t *testing.T, r *rig, k int, key string)
		want  api.Outcome
	}{
		{"an output of 100 KiB", func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"key":%q,"blob":%q}`, req.Key, big))}, nil
		}, func(t *testing.T, r *rig, _ int, key string) {
			it := memItem(t, r, "bounds", key)
			if it.OutputRef == "" || len(it.Output) != 0 {
				t.Fatalf("%s: output %d bytes inline, ref %q; want it in S3", key, len(it.Output), it.OutputRef)
			}
			obj, err := r.blobs.Get(ctx, strings.TrimPrefix(it.OutputRef, "s3://"+r.blobs.Bucket()+"/"))
			if err != nil || !strings.Contains(string(obj), fmt.Sprintf(`"key":%q`, key)) {
				t.Fatalf("%s: the output at %s: %d bytes, %v", key, it.OutputRef, len(obj), err)
			}
		}, api.OutcomeSucceeded},
		{"outputs of 60 KiB", func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"key":%q,"blob":%q}`, req.Key, wide))}, nil
		}, func(t *testing.T, r *rig, k int, key string) {
			it := memItem(t, r, "bounds", key)
			if (len(it.Output) == 0) == (it.OutputRef == "") || k == 1 && it.OutputRef != "" {
				t.Fatalf("%s: output %d bytes inline, ref %q; want one of them (inline at K = 1)", key, len(it.Output), it.OutputRef)
			}
		}, api.OutcomeSucceeded},
		{"an error text of 1 MiB", func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{Cost: pipeline.Cost{"calls": 1}}, pipeline.Permanent(errors.New(req.Key + ": " + strings.Repeat("e", 1<<20)))
		}, func(t *testing.T, r *rig, _ int, key string) {
			it := memItem(t, r, "bounds", key)
			if len(it.Error) > pipeline.MaxErrorTextBytes || !strings.HasPrefix(it.Error, key+": eee") || !strings.Contains(it.Error, "bytes cut]") ||
				it.Cost["calls"] != 1 {
				t.Fatalf("%s: error of %d bytes ending %q, cost %v; want it cut to %d, saying so, the call counted", key, len(it.Error),
					it.Error[max(0, len(it.Error)-40):], it.Cost, pipeline.MaxErrorTextBytes)
			}
		}, api.OutcomeFailed},
	} {
		for _, k := range packKs {
			t.Run(fmt.Sprintf("%s K%d", tc.name, k), func(t *testing.T) {
				r := newRig(t, tc.run)
				r.sub.ChunkItems = 100 // whole packs of 10
				submitK(t, r, "bounds", k, 20, nil)
				r.drain(t, ctx, 1)
				res, err := r.fin.Finalize(ctx, "bounds", 1)
				if err != nil {
					t.Fatal(err)
				}
				c := res.Report.Census
				if got := map[api.Outcome]int64{api.OutcomeSucceeded: c.Succeeded, api.OutcomeFailed: c.Failed}[tc.want]; got != 20 || c.Total != 20 {
					t.Fatalf("census %+v, want 20 items %s", c, tc.want)
				}
				for i := range 20 {
					tc.check(t, r, k, api.PositionalKey(int64(i)))
				}
			})
		}
	}
}

// The run's counters stay within DynamoDB's limits whatever cost names
// the items report, at K = 1 and 10: 400 items naming 10 costs of their
// own (4,000 names) are all counted — each counter lane write names at
// most api.MaxCensusCostNames per rollup (its update expression within
// 4 KB), the rest folded under pipeline.FoldedCost, and a lane whose row
// would pass 400 KB with new names counts the items with their cost
// folded whole — so the last write triggers finalize, whose report has
// every name from the rows.
func TestMemCounterLanesStayWithinLimits(t *testing.T) {
	ctx := context.Background()
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				c := pipeline.Cost{}
				for i := range pipeline.MaxCostNames {
					c[fmt.Sprintf("%s-%02d-%s", req.Key, i, strings.Repeat("y", 10))] = 1
				}
				return pipeline.Result{Cost: c}, nil
			})
			r.sub.ChunkItems = 1000
			b := submitK(t, r, "lanes", k, 400, nil)
			r.drainBy(t, ctx, 1, 4) // many lane writes: the lane rows fill

			p, err := r.store.Progress(ctx, "lanes", 1, max(1, b.CounterShards))
			if err != nil {
				t.Fatal(err)
			}
			var amount float64
			for _, name := range p.Cost.Names() {
				if name != pipeline.FoldedCostNames {
					amount += p.Cost[name].InexactFloat64()
				}
			}
			if p.Done != 400 || r.trigger.n.Load() < 1 || amount != 4000 {
				t.Fatalf("counters: %d items done, %d finalize triggers, %d cost names summing to %v; want 400 items, a trigger, every amount (4000)",
					p.Done, r.trigger.n.Load(), len(p.Cost), amount)
			}
			res, err := r.fin.Finalize(ctx, "lanes", 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Report.Census; c.Succeeded != 400 || len(c.Cost) != 4000 {
				t.Fatalf("report census %d succeeded, %d cost names; want 400, 4000", c.Succeeded, len(c.Cost))
			}
			t.Logf("counters: %d cost names (%s names folded)", len(p.Cost), p.Cost.Text(pipeline.FoldedCostNames))
		})
	}
}
