package flow

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/live"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// A woken (signalled) item whose take is given back (a caller's pause
// landed right after it: not started) goes back to held, woken, in a
// pack; its next take counts it out of the held items again. Before,
// the give-back did not count it back in, so the live view counted one
// suspended item fewer than the rows hold. At one item a message the
// give-back leaves the item row in flight, no longer held.
func TestMemGivenBackWokenItemStaysCountedAsHeld(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			const n = 7
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				if req.Signal == nil {
					return pipeline.Result{}, pipeline.Suspend("awaiting approval", time.Time{})
				}
				return pipeline.Result{Output: []byte(`{}`)}, nil
			})
			r.wakeHeld()
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "b", Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 1)
			suspended := func() (rows, live, counter int64) {
				b, _ := r.store.GetBatch(ctx, "b")
				p, _ := r.store.Progress(ctx, "b", 1, max(1, b.CounterShards))
				page, _ := r.ctl.Items(ctx, "b", api.OutcomeSuspended, "", 100)
				return int64(len(page.Items)), liveOf(b, p, r.clock.T).Suspended, p.Held[api.OutcomeSuspended]
			}
			if rows, l, c := suspended(); rows != n || l != n || c != n {
				t.Fatalf("suspended: rows %d, live %d, counter %d; want %d each", rows, l, c, n)
			}
			if _, err := r.ctl.Signal(ctx, "b", api.PositionalKey(0), "", "", []byte(`1`)); err != nil {
				t.Fatal(err)
			}
			ps := &pausingStore{Store: r.worker.Store, pause: func() {
				if _, err := r.ctl.Pause(ctx, "b"); err != nil {
					t.Errorf("pause: %v", err)
				}
			}}
			r.worker.Store, r.worker.StopCheck = ps, -1
			ds := r.queue.take()
			failed := r.worker.Handle(ctx, ds)
			r.worker.Store = ps.Store
			if !ps.done.Load() {
				t.Fatal("no take to pause after")
			}
			if c := r.callsOf(api.PositionalKey(0)); c != 1 {
				t.Fatalf("item 0 called %d times, want 1 (its woken take given back, not started)", c)
			}
			if rows, l, c := suspended(); l != rows || c != rows {
				t.Errorf("after the give-back: %d suspended rows, live view %d, counter %d; want them equal", rows, l, c)
			}
			if _, err := r.ctl.Unpause(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			r.clock.T = r.clock.T.Add(time.Hour)
			for _, d := range ds {
				if slices.Contains(failed, d.MessageID) {
					d.ReceiveCount++
					r.queue.put([]worker.Delivery{d})
				}
			}
			r.drain(t, ctx, 1)
			if c := r.callsOf(api.PositionalKey(0)); c != 2 {
				t.Fatalf("item 0 called %d times, want 2 (its suspension, then its signal)", c)
			}
			if rows, l, c := suspended(); rows != n-1 || l != rows || c != rows {
				t.Errorf("at the end: %d suspended rows, live view %d, counter %d; want %d each", rows, l, c, n-1)
			}
		})
	}
}

func liveOf(b ledger.Batch, p ledger.Progress, now time.Time) api.LiveView {
	return live.Of(b, p, now, 0)
}

// pausingStore runs pause once, right after the first take of a unit
// (a pack's take, an item row's reservation) that succeeded.
type pausingStore struct {
	worker.Store
	pause func()
	done  atomic.Bool
}

func (s *pausingStore) WritePack(ctx context.Context, w ledger.PackWrite) error {
	err := s.Store.WritePack(ctx, w)
	if err == nil && w.Take && s.done.CompareAndSwap(false, true) {
		s.pause()
	}
	return err
}

func (s *pausingStore) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Item, error) {
	it, err := s.Store.Reserve(ctx, r)
	if err == nil && s.done.CompareAndSwap(false, true) {
		s.pause()
	}
	return it, err
}
