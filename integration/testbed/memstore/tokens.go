package memstore

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// tokenRow is a token key's row: its Next (zero: none yet) and the usage
// settled on it.
type tokenRow struct {
	next  time.Time
	used  float64
	calls int64
	drift time.Duration
}

// grant is r as a TokenGrant.
func (r tokenRow) grant(g pace.RateGrant) pace.TokenGrant {
	return pace.TokenGrant{RateGrant: g, Used: r.used, Calls: r.calls, Drift: r.drift}
}

// ReadTokens implements ledger.Store.
func (s *Store) ReadTokens(_ context.Context, key string) (pace.TokenGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.tokens[key]
	return r.grant(pace.RateGrant{Next: r.next}), nil
}

// LeaseTokens implements ledger.Store: LeaseRate's schedule on the key's
// token row, answering the row's usage, granted or not. Next is kept at
// DynamoDB's row's precision (microseconds).
func (s *Store) LeaseTokens(_ context.Context, l pace.TokenLease) (pace.TokenGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.tokens[l.Key]
	now := l.Now.Truncate(time.Microsecond)
	b := pace.Book(r.next, now, l.Spacing.Truncate(time.Microsecond), l.Horizon.Truncate(time.Microsecond))
	if !b.OK {
		return r.grant(pace.RateGrant{Next: b.Next}), nil
	}
	r.next = b.Next
	s.tokens[l.Key] = r
	return r.grant(pace.RateGrant{Granted: true, Start: b.Start, Next: b.Next}), nil
}

// SettleTokens implements ledger.Store: it adds st's usage to the key's
// token row (made if absent) and moves its Next by st.Delta — a debt
// from Next while it is ahead of Now, else from Now; a give-back only
// while Next is ahead of Now — at microseconds, adding the Delta to the
// row's Drift when it moved Next.
func (s *Store) SettleTokens(_ context.Context, st pace.TokenSettle) (pace.TokenGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.tokens[st.Key]
	now := st.Now.Truncate(time.Microsecond)
	delta := st.Delta.Truncate(time.Microsecond)
	switch busy := r.next.After(now); {
	case delta > 0 && busy, delta < 0 && busy:
		r.next = r.next.Add(delta)
		r.drift += delta
	case delta > 0:
		r.next = now.Add(delta)
		r.drift += delta
	}
	r.used += st.Used
	r.calls += int64(st.Calls)
	s.tokens[st.Key] = r
	return r.grant(pace.RateGrant{Granted: true, Next: r.next}), nil
}
