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

// TestRateBookedListingReadsEachBatchsRows guards the listing's cache of
// rate bookings: two batches on one key, one with a token budget alone
// and one with requests and the budget, read different rows, so neither
// is shown the other's answer, in either order.
func TestRateBookedListingReadsEachBatchsRows(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	s := memstore.NewStore()
	c := &Control{Store: s, Clock: &memstore.FixedClock{T: now}}
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
