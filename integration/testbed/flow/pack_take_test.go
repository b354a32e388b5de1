package flow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// readCountingStore counts the worker's pack reads; forget drops the row
// a refused take brings back, as a store that cannot return it would.
type readCountingStore struct {
	worker.Store
	reads  atomic.Int64
	forget bool
}

func (s *readCountingStore) GetPack(ctx context.Context, ref ledger.PackRef) (ledger.Pack, error) {
	s.reads.Add(1)
	return s.Store.GetPack(ctx, ref)
}

func (s *readCountingStore) WritePack(ctx context.Context, w ledger.PackWrite) error {
	err := s.Store.WritePack(ctx, w)
	var pc *ledger.PackConflict
	if s.forget && errors.As(err, &pc) {
		return pc.Err
	}
	return err
}

// TestPackTakeWritesFirst guards the take of a fresh pack message (a first
// run's first delivery): one conditional write and no read of the pack
// row; and a duplicate of that message delivered after its items ended —
// with the same receive count, as SQS may — runs none of them again,
// planning from the row that came back with the refused take (no read) or,
// from a store that does not send it back, from a read.
func TestPackTakeWritesFirst(t *testing.T) {
	for _, forget := range []bool{false, true} {
		name := map[bool]string{false: "row sent back", true: "row read"}[forget]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, failOn3)
			r.sub.ChunkItems = 25
			counting := &readCountingStore{Store: r.store, forget: forget}
			r.worker.Store = counting
			submitK(t, r, "first", 10, 50, nil)
			r.worker.Handle(ctx, r.queue.take()) // the fan-out messages expand
			ds := r.queue.take()
			if len(ds) != 6 {
				t.Fatalf("%d pack messages, want 6 (packs of 10,10,5 per chunk of 25)", len(ds))
			}
			if failed := r.worker.Handle(ctx, ds); len(failed) != 0 {
				t.Fatalf("first deliveries failed: %v", failed)
			}
			if n := counting.reads.Load(); n != 0 {
				t.Errorf("%d pack reads for 6 fresh pack messages, want 0 (the take is the first call)", n)
			}
			// The same messages again, as SQS may deliver a message twice.
			if failed := r.worker.Handle(ctx, ds); len(failed) != 0 {
				t.Fatalf("duplicate deliveries failed: %v", failed)
			}
			for i := range 50 {
				if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
			wantReads := map[bool]int64{false: 0, true: 6}[forget]
			if n := counting.reads.Load(); n != wantReads {
				t.Errorf("%d pack reads after 6 duplicates, want %d", n, wantReads)
			}
			r.drain(t, ctx, 1)
			r.finalizeFour(t, ctx, "first", func(c api.Census) {
				if c.Total != 50 || c.Succeeded+c.Failed != 50 || c.Cost.Text("calls") != "45" {
					t.Errorf("census %+v", c)
				}
			})
		})
	}
}
