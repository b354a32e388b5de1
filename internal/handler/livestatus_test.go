package handler

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// liveStore counts what GET /batches/{id} reads of a running batch.
type liveStore struct {
	ledger.Store // other methods are not reached
	b            ledger.Batch
	scans        int
	shardsRead   int
	adaptReads   int
}

func (s *liveStore) GetBatch(context.Context, string) (ledger.Batch, error) { return s.b, nil }

// ReadAdapt counts the read of the downstream's adaptive row (one per
// view, whatever the batch's size); the key was never throttled.
func (s *liveStore) ReadAdapt(context.Context, string) (pace.Adapt, error) {
	s.adaptReads++
	return pace.Adapt{}, nil
}
func (s *liveStore) ScanItems(context.Context, string, int, func(ledger.Item) error) error {
	s.scans++
	return nil
}
func (s *liveStore) Progress(_ context.Context, _ string, _ int, shards int) (ledger.Progress, error) {
	s.shardsRead += shards
	return ledger.Progress{Done: 7, Failures: 2, ByOutcome: map[api.Outcome]int64{
		api.OutcomeSucceeded: 4, api.OutcomeFailed: 1, api.OutcomeQuarantined: 1, api.OutcomeCancelled: 1}}, nil
}

// Live status costs O(shards), not O(items), for every batch size: the
// view of a running batch reads its counter shards, never its item rows,
// whether it holds 10 items or 10^7 (the product line "GET /batches/{id}
// and watch on a running batch cost a few reads"). Counting a small batch
// from its rows again fails here.
func TestLiveStatusReadsShardsNotItems(t *testing.T) {
	for _, items := range []int64{10, 10_000, 10_000_000} {
		b := ledger.Batch{
			Batch: api.Batch{
				ID:            "b1",
				Status:        api.StatusRunning,
				Run:           1,
				ItemCount:     items,
				ListShards:    ledger.ListShards(items, 0),
				CounterShards: ledger.CounterShards(0),
			},
		}
		s := &liveStore{b: b}
		a := NewAPI(nil, s, &discardBlobs{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		v, err := a.View(context.Background(), "b1")
		if err != nil {
			t.Fatal(err)
		}
		if s.scans != 0 || s.shardsRead != b.CounterShards || s.adaptReads != 1 {
			t.Errorf("%d items: %d item scans, %d counter shards and %d adaptive rows read, want 0, %d and 1", items, s.scans, s.shardsRead, s.adaptReads, b.CounterShards)
		}
		c := v.Census
		if v.CensusSource != wire.CensusFromCounters || c == nil || v.Progress == nil || v.Progress.Done != 7 {
			t.Fatalf("%d items: view %+v", items, v)
		}
		if c.Total != items || c.Succeeded != 4 || c.Failed != 1 || c.Quarantined != 1 || c.Cancelled != 1 || c.InFlight+c.Pending != items-7 || !v.NeedsAttention {
			t.Errorf("%d items: census %+v, needs attention %v", items, *c, v.NeedsAttention)
		}
	}
}
