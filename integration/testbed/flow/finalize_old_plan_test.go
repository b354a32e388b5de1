package flow

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// scanCount counts a finalize store's shard reads.
type scanCount struct {
	finalize.Store
	n *atomic.Int64
}

func (s scanCount) ScanShard(ctx context.Context, id string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	s.n.Add(1)
	return s.Store.ScanShard(ctx, id, shard, after, limit)
}

// TestOldPlanKeepsItsParts guards a run read in parts whose last part
// ends long after its plan (an item held or suspended for hours): its
// merge goes on from the parts' results whether the plan is an hour or
// 13 hours old (past ledger.TTLGrace/2, after which a chain of uploads
// starts over), the last part and the merge reading the same shard pages
// (the last part's own). Dated from the plan, the merge's chain was 13
// hours old at its first checkpoint and started over as one chain over
// every row (9 pages read here against 1).
func TestOldPlanKeepsItsParts(t *testing.T) {
	reads := map[time.Duration]int64{}
	ages := []time.Duration{time.Hour, ledger.TTLGrace/2 + time.Hour}
	for _, age := range ages {
		r := partsRun(t, 900, 1)
		want := singlePass(t, 900, 1)
		calls := &partCalls{lost: map[int]bool{}}
		for i := range 300 {
			calls.lost[i] = true
		}
		r.fin.Parts = calls
		ctx := context.Background()
		if _, err := r.fin.Finalize(ctx, "b", 1); err != nil {
			t.Fatal(err)
		}
		parts := calls.take()
		r.clock.T = r.clock.T.Add(age)
		for _, p := range parts[:len(parts)-1] {
			if _, err := r.fin.FinalizePart(ctx, "b", 1, 1, p); err != nil {
				t.Fatal(err)
			}
		}
		// The last part: its own shard, then the merge of every part.
		var n atomic.Int64
		r.fin.Store = scanCount{Store: r.fin.Store, n: &n}
		res, err := r.fin.FinalizePart(ctx, "b", 1, 1, parts[len(parts)-1])
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; res.Continued && i < 50; i++ {
			if res, err = r.fin.Finalize(ctx, "b", 1); err != nil {
				t.Fatal(err)
			}
		}
		reads[age] = n.Load()
		sameFinish(t, finishedRun(t, r, res.Report), want, "a plan "+age.String()+" old")
	}
	if fresh, old := reads[ages[0]], reads[ages[1]]; old != fresh {
		t.Errorf("the last part and the merge read %d shard pages with the plan %v old, %d with it %v old: want the same (the parts' results, no shard again)",
			old, ages[1], fresh, ages[0])
	}
}
