package ledger

import "time"

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
