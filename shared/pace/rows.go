package pace

import (
	"context"
	"time"
)

// Rows is the store's port for the pacing rows of downstream keys (a
// rate's bucket rows, a token budget's row, the adaptive pace's row):
// every engine's ledger.Store has it, on DynamoDB (internal/dynamo) and
// in memory (the test bed's memstore), both held to
// integration/testbed/pacetest. Each row belongs to its key, not to a
// batch: it lives on across batches, its TTL renewed by each write.
type Rows interface {
	// LeaseRate books a lease on one bucket row of a downstream key's rate
	// (Book): when the row's Next (none: idle) is at most
	// l.Horizon past l.Now, the lease starts at the later of Now and Next
	// and Next moves to its start + l.Spacing, atomically, so that leases
	// of one row never overlap whoever takes them; otherwise nothing is
	// written and the grant is not Granted, with the row's Next. Not
	// idempotent: a lease asked again is a second lease (an unused one only
	// slows the key). The row lives on (its TTL renewed per lease) across
	// batches: it belongs to the key, not to a batch.
	LeaseRate(ctx context.Context, l RateLease) (RateGrant, error)
	// ReadRate reads the Next of shard of key's rate (a strongly
	// consistent read; no row: the zero time): until when the row's
	// calls are booked, for the live view of a batch that waits behind
	// them.
	ReadRate(ctx context.Context, key string, shard int) (time.Time, error)
	// LeaseTokens books a lease on a key's token row as LeaseRate does on
	// a bucket row (the same schedule, its own row: TOKENS#{key}), and
	// answers the usage settled on the row so far, granted or not. Not
	// idempotent. SettleTokens adds what a unit's calls used to the row
	// (Used, Calls) and moves its Next by s.Delta (TokenSettle); not
	// idempotent either: a settle written twice counts twice (it slows
	// the key, or speeds it by one unit's estimate at most). Both rows
	// live on across batches, their TTL renewed by each write.
	LeaseTokens(ctx context.Context, l TokenLease) (TokenGrant, error)
	SettleTokens(ctx context.Context, s TokenSettle) (TokenGrant, error)
	// ReadTokens reads key's token row as it is now (a strongly
	// consistent read; no row: the zero grant), for a booking carried
	// ahead to start later by the Drift settled since it was made.
	ReadTokens(ctx context.Context, key string) (TokenGrant, error)
	// ReadAdapt reads key's adaptive row (Adapt; no row: the zero
	// Adapt), strongly consistent. CutAdapt writes c.Row on it, all but
	// Booked, only if the row's Cut and Hold are still c.Was's (the zero
	// times: no row, or none set), at microseconds; else it writes
	// nothing and answers the stored row and false. Idempotent for a
	// given Was: written once, a second try is refused. LeaseAdapt books
	// the next l.N positions: from Booked when it is at least l.At and at
	// most l.At + l.Ahead, from l.At when Booked is below it (or unset),
	// atomically, so that leases never share a position whoever takes
	// them; past l.At + l.Ahead nothing is booked. Not idempotent: a
	// lease asked again is a second lease (an unused one only slows the
	// key). The row lives on across batches, its TTL renewed by each
	// write.
	ReadAdapt(ctx context.Context, key string) (Adapt, error)
	CutAdapt(ctx context.Context, c AdaptCut) (Adapt, bool, error)
	LeaseAdapt(ctx context.Context, l AdaptLease) (AdaptGrant, error)
}

// RateLease is what Store.LeaseRate asks of one bucket row of a
// downstream key's rate (shared/pace, docs/adr/0031): a lease that moves
// the row's Next by Spacing (its requests at the key's rate per row,
// Spacing), booked at most Horizon ahead of Now. Key is the rate's
// key (api.Rate.KeyOf), Shard the row, 0 … RateShards − 1. Idle
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
// row (docs/adr/0036, Adapt): Row, in place of Was, the row as the
// caller read it (the zero Adapt: no row), all but its Booked. Key is the
// downstream key (the webhook's host, the Lambda function;
// pacer.DownstreamKey).
type AdaptCut struct {
	Key string
	Was Adapt
	Row Adapt
	Now time.Time
}

// AdaptLease is what Store.LeaseAdapt asks of a key's adaptive row: the
// next N positions in line (Adapt.Booked), At being the row's
// allowance now (Adapt.Allowance) — positions not taken by then are
// lost to an idle key, so that a lease starts no earlier than At — and
// Ahead, the furthest past At a lease may start (Adapt.Ahead).
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
	Row     Adapt
}
