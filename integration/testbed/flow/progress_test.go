package flow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestMemProgressWhileAnInvocationRuns: an invocation still running
// counts what its finished messages ended (Worker.ProgressEvery), at
// K = 1 and 10. 30 items in one message batch; the pipeline answers at
// once except item 5's call, held until the counters show every item of
// the other messages ended (29 at K = 1; 20 at K = 10, a pack's items
// being recorded, and counted, with its last) or 5 s pass (0.5 s when
// it should show none). Meanwhile the
// invocation has not returned; once released it counts the rest, and the
// counters and finalize's census from the rows both say 30 succeeded.
// With ProgressEvery negative (counting only at the end) the counters
// show nothing while the call is held: the counting is the flush's.
func TestMemProgressWhileAnInvocationRuns(t *testing.T) {
	for _, k := range packKs {
		for _, every := range []time.Duration{50 * time.Millisecond, -1} {
			name := "flush"
			if every < 0 {
				name = "at-the-end"
			}
			t.Run(fmt.Sprintf("K%d/%s", k, name), func(t *testing.T) {
				ctx := context.Background()
				const n, held = 30, "item-0000000005"
				release := make(chan struct{})
				r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
					if req.Key == held {
						<-release
					}
					return pipeline.Result{}, nil
				})
				r.sub.ChunkItems = 100 // one chunk: packs of 10
				r.worker.ProgressEvery = every
				id := fmt.Sprintf("live-%d-%d", k, max(0, every.Milliseconds()))
				b := submitK(t, r, id, k, n, nil)
				r.worker.Handle(ctx, r.queue.take()) // the fan-out
				ds := r.queue.take()
				returned := make(chan []string)
				go func() { returned <- r.worker.Handle(ctx, ds) }()
				want := int64(n - k) // every item but those of the held unit
				if every < 0 {
					want = 0
				}
				done := func() int64 {
					p, err := r.store.Progress(ctx, id, 1, max(1, b.CounterShards))
					if err != nil {
						t.Fatal(err)
					}
					return p.Done
				}
				var shown int64
				wait := 5 * time.Second
				if every < 0 {
					wait = 500 * time.Millisecond // ten flushes' time, had there been any
				}
				for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
					if shown = done(); shown >= want && every > 0 || time.Now().After(deadline) {
						break
					}
				}
				select {
				case <-returned:
					t.Fatal("the invocation returned while an item's call was held")
				default:
				}
				if shown != want {
					t.Errorf("while item 5's call is held the counters show %d items ended; want %d", shown, want)
				}
				close(release)
				if failed := <-returned; len(failed) != 0 {
					t.Fatalf("%d messages failed", len(failed))
				}
				if got := done(); got != n {
					t.Fatalf("after the invocation the counters show %d items ended; want %d", got, n)
				}
				res, err := r.fin.Finalize(ctx, id, 1)
				if err != nil {
					t.Fatal(err)
				}
				if c := res.Report.Census; res.Report.Status != api.StatusCompleted || c.Succeeded != n {
					t.Fatalf("report %s, census %+v; want completed, %d succeeded", res.Report.Status, c, n)
				}
			})
		}
	}
}
