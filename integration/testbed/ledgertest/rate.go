package ledgertest

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// rateKey is a bucket row of a rate key.
type rateKey struct {
	key   string
	shard int
}

// LeaseRate implements ledger.Store, keeping Next at DynamoDB's row's
// precision (microseconds).
func (s *Store) LeaseRate(_ context.Context, l ledger.RateLease) (ledger.RateGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := rateKey{key: l.Key, shard: l.Shard}
	now := l.Now.Truncate(time.Microsecond)
	b := pace.Book(s.rates[k], now, l.Spacing, l.Horizon)
	if !b.OK {
		return ledger.RateGrant{Next: b.Next}, nil
	}
	s.rates[k] = b.Next
	return ledger.RateGrant{Granted: true, Start: b.Start, Next: b.Next}, nil
}

// FixedClock is a Clock that tells T until moved.
type FixedClock struct{ T time.Time }

// Now returns c.T.
func (c *FixedClock) Now() time.Time { return c.T }
