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
	ctx, now, s, c := rateFixture()
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
		t.Errorf("a token budget whose row was never leased: %+v, want none", *r)
	}
	b.Rate = nil
	if r := c.RateBooked(ctx, b, now); r != nil {
		t.Errorf("no rate: %+v, want none", *r)
	}
}

// TestRateBookedShowsTheTokenBudget guards the same view for a batch with
// a token budget: the key's token row's Next when it books further than
// the requests (a unit needs both), By naming which; a budget alone
// shows its row.
func TestRateBookedShowsTheTokenBudget(t *testing.T) {
	ctx, now, s, c := rateFixture()
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{Key: "llm", TokensPerMinute: 9000}
	if g, err := s.LeaseTokens(ctx, pace.TokenLease{Key: "llm", Spacing: 30 * time.Second, Now: now, Horizon: pace.LeaseHorizon}); err != nil || !g.Granted {
		t.Fatalf("lease tokens: %+v, %v", g, err)
	}
	r := c.RateBooked(ctx, b, now)
	if r == nil || r.By != api.BookedByTokens || r.TokensPerSecond != 150 || r.RequestsPerSecond != 0 || r.AheadSeconds != 30 {
		t.Fatalf("a budget alone: %+v; want its token row 30 s ahead, by tokens, 150 tokens/s", r)
	}
	// Requests booked 10 s ahead, tokens 30 s: the tokens hold a unit back.
	b.Rate = &api.Rate{Key: "llm", RequestsPerSecond: 5, TokensPerMinute: 9000}
	if g, err := s.LeaseRate(ctx, pace.RateLease{Key: "llm", Shard: 0, Spacing: 10 * time.Second, Now: now, Horizon: pace.LeaseHorizon}); err != nil || !g.Granted {
		t.Fatalf("lease requests: %+v, %v", g, err)
	}
	if r := c.RateBooked(ctx, b, now); r == nil || r.By != api.BookedByTokens || r.AheadSeconds != 30 || r.RequestsPerSecond != 5 {
		t.Errorf("both, tokens further: %+v; want 30 s by tokens", r)
	}
	// 25 s later: tokens 5 s ahead, requests free: the tokens still.
	if r := c.RateBooked(ctx, b, now.Add(25*time.Second)); r == nil || r.By != api.BookedByTokens || r.AheadSeconds != 5 {
		t.Errorf("requests free, tokens 5 s ahead: %+v; want 5 s by tokens", r)
	}
	// Requests 60 s ahead now: they hold a unit back longer.
	if g, err := s.LeaseRate(ctx, pace.RateLease{Key: "llm", Shard: 0, Spacing: 50 * time.Second, Now: now, Horizon: pace.LeaseHorizon}); err != nil || !g.Granted {
		t.Fatalf("lease requests: %+v, %v", g, err)
	}
	if r := c.RateBooked(ctx, b, now); r == nil || r.By != api.BookedByRequests || r.AheadSeconds != 60 {
		t.Errorf("requests further: %+v; want 60 s by requests", r)
	}
}

// TestRateBookedListingReadsEachBatchsRows guards the listing's cache of
// rate bookings: two batches on one key, one with a token budget alone
// and one with requests and the budget, read different rows, so neither
// is shown the other's answer, in either order.
func TestRateBookedListingReadsEachBatchsRows(t *testing.T) {
	ctx, now, s, c := rateFixture()
	if g, err := s.LeaseRate(ctx, pace.RateLease{Key: "llm", Shard: 0, Spacing: 60 * time.Second, Now: now, Horizon: pace.LeaseHorizon}); err != nil || !g.Granted {
		t.Fatalf("lease requests: %+v, %v", g, err)
	}
	if g, err := s.LeaseTokens(ctx, pace.TokenLease{Key: "llm", Spacing: 10 * time.Second, Now: now, Horizon: pace.LeaseHorizon}); err != nil || !g.Granted {
		t.Fatalf("lease tokens: %+v, %v", g, err)
	}
	tokens := ledger.Batch{Batch: api.Batch{ID: "tokens", Run: 1}}
	tokens.Rate = &api.Rate{Key: "llm", TokensPerMinute: 9000}
	both := ledger.Batch{Batch: api.Batch{ID: "both", Run: 1}}
	both.Rate = &api.Rate{Key: "llm", RequestsPerSecond: 5, TokensPerMinute: 9000}
	for _, order := range [][]ledger.Batch{{tokens, both}, {both, tokens}} {
		r := &adaptiveReads{seen: map[string]*api.AdaptivePace{}, rates: map[string]*api.RateBooked{}}
		got := map[string]*api.RateBooked{}
		for _, b := range order {
			got[b.ID] = r.booked(ctx, c, b)
		}
		if g := got["tokens"]; g == nil || g.By != api.BookedByTokens || g.AheadSeconds != 10 || g.RequestsPerSecond != 0 {
			t.Errorf("%s first: the token-only batch %+v, want its token row 10 s ahead", order[0].ID, g)
		}
		if g := got["both"]; g == nil || g.By != api.BookedByRequests || g.AheadSeconds != 60 {
			t.Errorf("%s first: the batch with both %+v, want its bucket row 60 s ahead", order[0].ID, g)
		}
	}
}

// rateFixture is a control over an empty in-memory store at a fixed now.
func rateFixture() (context.Context, time.Time, *memstore.Store, *Control) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	s := memstore.NewStore()
	return context.Background(), now, s, &Control{Store: s, Clock: &memstore.FixedClock{T: now}}
}
