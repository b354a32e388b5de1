package memstore

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// rateKey is a bucket row of a rate key.
type rateKey struct {
	key   string
	shard int
}

// LeaseRate implements ledger.Store, keeping Next at DynamoDB's row's
// precision (microseconds).
func (s *Store) LeaseRate(_ context.Context, l pace.RateLease) (pace.RateGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := rateKey{key: l.Key, shard: l.Shard}
	now := l.Now.Truncate(time.Microsecond)
	b := pace.Book(s.rates[k], now, l.Spacing, l.Horizon)
	if !b.OK {
		return pace.RateGrant{Next: b.Next}, nil
	}
	s.rates[k] = b.Next
	return pace.RateGrant{Granted: true, Start: b.Start, Next: b.Next}, nil
}

// ReadRate implements ledger.Store.
func (s *Store) ReadRate(_ context.Context, key string, shard int) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rates[rateKey{key: key, shard: shard}], nil
}

// ReadAdapt implements ledger.Store.
func (s *Store) ReadAdapt(_ context.Context, key string) (pace.Adapt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adapts[key], nil
}

// CutAdapt implements ledger.Store: c.Row in place of c.Was, all but
// Booked, compared and kept at DynamoDB's row's precision
// (microseconds).
func (s *Store) CutAdapt(_ context.Context, c pace.AdaptCut) (pace.Adapt, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.adapts[c.Key]
	if !cur.Cut.Equal(c.Was.Cut.Truncate(time.Microsecond)) || !cur.Hold.Equal(c.Was.Hold.Truncate(time.Microsecond)) {
		return cur, false, nil
	}
	r := c.Row
	r.Cut, r.Hold, r.Booked = r.Cut.Truncate(time.Microsecond), r.Hold.Truncate(time.Microsecond), cur.Booked
	s.adapts[c.Key] = r
	return r, true, nil
}

// LeaseAdapt implements ledger.Store.
func (s *Store) LeaseAdapt(_ context.Context, l pace.AdaptLease) (pace.AdaptGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.adapts[l.Key]
	if r.Booked > l.At+l.Ahead {
		return pace.AdaptGrant{Row: r}, nil
	}
	pos := max(r.Booked, l.At)
	r.Booked = pos + float64(l.N)
	s.adapts[l.Key] = r
	return pace.AdaptGrant{Granted: true, Pos: pos, Row: r}, nil
}

// FixedClock is a Clock that tells T until moved.
type FixedClock struct{ T time.Time }

// Now returns c.T.
func (c *FixedClock) Now() time.Time { return c.T }
