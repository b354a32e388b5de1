package ledger

import (
	"time"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// RateLease is what Store.LeaseRate asks of one bucket row of a
// downstream key's rate (shared/pace, docs/adr/0031): a lease that moves
// the row's Next by Spacing (its requests at the key's rate per row,
// pace.Spacing), booked at most Horizon ahead of Now. Key is the rate's
// key (api.Rate.KeyOf), Shard the row, 0 … pace.RateShards − 1. Idle
// is a hint, no more: the caller last saw the row's Next pass (or never
// saw the row), so a store that writes in two forms tries the idle one
// first.
type RateLease struct {
	Key     string
	Shard   int
	Spacing time.Duration
	Now     time.Time
	Horizon time.Duration
	Idle    bool
}

// RateGrant is Store.LeaseRate's answer: Granted with the lease's Start
// (Now when the row was idle, else its Next) and the row's Next after
// the lease; not Granted, Next is the row's Next, more than Horizon
// ahead of Now, and nothing was booked.
type RateGrant struct {
	Granted bool
	Start   time.Time
	Next    time.Time
}

// TokenLease is what Store.LeaseTokens asks of a downstream key's token
// row (docs/adr/0035): a lease of the tokens a unit is expected to use,
// as the time they take at the key's budget (Spacing: tokens / tokens a
// second), booked at most Horizon ahead of Now, on the GCRA schedule of
// RateLease. Idle is the same hint as RateLease.Idle.
type TokenLease struct {
	Key     string
	Spacing time.Duration
	Now     time.Time
	Horizon time.Duration
	Idle    bool
}

// TokenGrant is Store.LeaseTokens', SettleTokens' and ReadTokens'
// answer: the RateGrant of the lease (SettleTokens: Granted, Next the
// row's Next after it; ReadTokens: Next), and the row's state — Used
// tokens settled over Calls calls, from which a unit estimates what its
// calls will use (also when the lease was not granted), and Drift, the
// sum of the settles' Deltas that moved the row's Next: a booking made
// when Drift was d starts later by Drift − d, the debts settled since
// (docs/adr/0035).
type TokenGrant struct {
	RateGrant
	Used  float64
	Calls int64
	Drift time.Duration
}

// TokenSettle is what Store.SettleTokens writes once a unit's calls
// ended: Used tokens reported by its Calls calls (api.TokensCostName),
// and Delta, the time (used − booked) takes at the key's budget. A
// positive Delta moves the row's Next later: from Next when it is ahead
// of Now, else from Now (a debt starts now, it is never lost to an idle
// row). A negative Delta gives booked time back, moving Next earlier,
// only while Next is ahead of Now (an idle row banks nothing).
type TokenSettle struct {
	Key   string
	Delta time.Duration
	Used  float64
	Calls int
	Now   time.Time
}

// AdaptCut is what Store.CutAdapt writes on a downstream key's adaptive
// row (docs/adr/0036, pace.Adapt): Row, in place of Was, the row as the
// caller read it (the zero Adapt: no row), all but its Booked. Key is the
// downstream key (the webhook's host, the Lambda function;
// pacer.DownstreamKey).
type AdaptCut struct {
	Key string
	Was pace.Adapt
	Row pace.Adapt
	Now time.Time
}

// AdaptLease is what Store.LeaseAdapt asks of a key's adaptive row: the
// next N positions in line (pace.Adapt.Booked), At being the row's
// allowance now (pace.Adapt.Allowance) — positions not taken by then are
// lost to an idle key, so that a lease starts no earlier than At — and
// Ahead, the furthest past At a lease may start (pace.Adapt.Ahead).
type AdaptLease struct {
	Key   string
	N     int
	At    float64
	Ahead float64
	Now   time.Time
}

// AdaptGrant is Store.LeaseAdapt's answer: Granted with the lease's first
// position Pos (its calls are Pos … Pos + N), and the row as it is after
// the lease (not granted: as it is; nothing was booked).
type AdaptGrant struct {
	Granted bool
	Pos     float64
	Row     pace.Adapt
}
