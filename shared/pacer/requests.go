package pacer

import (
	"context"
	mrand "math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// RateStore is the ledger port a request rate leases on
// (pace.Rows.LeaseRate).
type RateStore interface {
	LeaseRate(ctx context.Context, l pace.RateLease) (pace.RateGrant, error)
}

// LeaseRequests leases n calls of key at rate requests a second from one
// of its bucket rows at random (pace.RateShards), starting no earlier
// than from (a token booking's start; zero or past: now), booked up to
// pace.LeaseHorizon ahead. Granted, the Booking's Start is the lease's;
// not granted (the key is booked past the horizon), its Wait is until it
// would not be, spread over a second so that the waiting units do not
// come back at once, and at least a second. Spacing is the lease's.
func LeaseRequests(ctx context.Context, st RateStore, key string, rate float64, n int, now, from time.Time) (Booking, error) {
	return leaseRequests(ctx, st, key, rate, n, now, from, pace.LeaseHorizon)
}

// leaseRequests is LeaseRequests booking up to horizon ahead.
func leaseRequests(ctx context.Context, st RateStore, key string, rate float64, n int, now, from time.Time, horizon time.Duration) (Booking, error) {
	shards := pace.RateShards(rate)
	shard := mrand.IntN(shards)
	row := Row{Key: key, Shard: shard}
	spacing := pace.Spacing(n, rate/float64(shards))
	g, err := st.LeaseRate(ctx, pace.RateLease{Key: key, Shard: shard, Spacing: spacing, Now: Later(now, from), Horizon: horizon, Idle: Idle(row, now)})
	if err != nil {
		return Booking{}, err
	}
	Saw(row, g.Next, now)
	if !g.Granted {
		wait := g.Next.Sub(now) - horizon + time.Duration(mrand.Int64N(int64(time.Second)))
		return Booking{Wait: max(wait, time.Second)}, nil
	}
	return Booking{Granted: true, Start: g.Start, Spacing: spacing}, nil
}

// Later is the later of a and b.
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
