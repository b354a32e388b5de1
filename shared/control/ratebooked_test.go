package control

import (
	"context"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// TestRateBookedIsTheKeysEarliestRow guards the live view of a batch
// waiting behind its rate key's bookings: the earliest Next of the key's
// bucket rows (a 1,000/s key has two; a unit leases one at random), how
// far past now, whoever booked it, on its view and in a listing; nothing
// while a row is free, nor for a batch with no request rate.
func TestRateBookedIsTheKeysEarliestRow(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	s := memstore.NewStore()
	c := &Control{Store: s, Clock: &memstore.FixedClock{T: now}}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{Key: "api.example.com", RequestsPerSecond: 1000}
	if r := c.RateBooked(ctx, b, now); r != nil {
		t.Fatalf("a key never leased: %+v, want none", *r)
	}
	// Another batch's leases: 10 s on shard 0, 14.2 s on shard 1.
	for shard, ahead := range []time.Duration{10 * time.Second, 14200 * time.Millisecond} {
		if g, err := s.LeaseRate(ctx, pace.RateLease{Key: "api.example.com", Shard: shard, Spacing: ahead, Now: now, Horizon: pace.LeaseHorizon}); err != nil || !g.Granted {
			t.Fatalf("lease shard %d: %+v, %v", shard, g, err)
		}
	}
	r := c.RateBooked(ctx, b, now)
	if r == nil || r.Key != "api.example.com" || r.RequestsPerSecond != 1000 || !r.Until.Equal(now.Add(10*time.Second)) || r.AheadSeconds != 10 {
		t.Fatalf("booked %+v; want until +10 s on api.example.com (its earlier row: a unit leases one at random)", r)
	}
	if r := c.RateBooked(ctx, b, now.Add(12*time.Second)); r != nil {
		t.Errorf("one row free: %+v, want none (a unit may start at once)", *r)
	}
	page := []api.BatchSummary{{ID: "b1", Status: api.StatusRunning}}
	b.Status = api.StatusRunning
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	c.liveSummaries(ctx, page)
	if l := page[0].Live; l == nil || l.RateBooked == nil || l.RateBooked.AheadSeconds != 10 {
		t.Errorf("the listing's live summary: %+v; want the key booked 10 s ahead", l)
	}
	b.Rate = &api.Rate{Key: "api.example.com", TokensPerMinute: 9000}
	if r := c.RateBooked(ctx, b, now); r != nil {
		t.Errorf("a token budget without a request rate: %+v, want none", *r)
	}
	b.Rate = nil
	if r := c.RateBooked(ctx, b, now); r != nil {
		t.Errorf("no rate: %+v, want none", *r)
	}
}
