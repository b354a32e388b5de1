package pace

import (
	"math"
	"time"
)

// Rates per downstream key (docs/adr/0031). A batch with a rate names a
// key (its downstream: a host, an API account, a model) and a pace in
// requests a second; every batch naming the key shares one schedule,
// kept in bucket rows of the ledger. The schedule is a GCRA (generic cell
// rate algorithm, ITU-T I.371; the "virtual scheduling" form): a row keeps
// Next, the time from which the next lease may start. A lease of n
// requests at rate r starts at max(now, Next) and moves Next to that
// start + n / r, so the leases of a row never overlap and a row's calls
// over any window of W seconds are at most r × W + n. A lease is one
// conditional write, taken before the unit's take (no attempt), for the
// unit's items; its calls start at or after its start.
//
// A lease may be booked up to LeaseHorizon ahead: the unit then waits for
// it on the queue (a message delayed until the start, or in its track),
// carrying its lease so that it is not leased again, and costs nothing
// while it waits. One starting within LeaseSleep is waited for in the
// invocation (SQS delays are whole seconds). A lease used later than its
// start + LeaseGrace is stale and taken again, so that calls held up in
// an invocation do not bunch with the calls of later leases. A lease
// left unused (a unit already recorded, a message lost, a stale lease, an
// invocation ending) is lost: the key runs slower, never faster.

// MaxRequestsPerSecond is the highest rate a batch may give its key
// (api.MaxRequestsPerSecond): 10,000 requests a second, 20 rows of
// ShardRequestsPerSecond.
const MaxRequestsPerSecond = 10000

// ShardRequestsPerSecond is the most requests a second one bucket row
// paces: each lease is one write, at least one request, so a row takes at
// most 500 successful writes a second, half of DynamoDB's 1,000 write
// units a second per partition ("Burst and adaptive capacity", DynamoDB
// developer guide), leaving the rest for refused leases. A faster key is
// split over RateShards rows, each at rate / RateShards, and a unit leases
// from one of them at random.
const ShardRequestsPerSecond = 500

// LeaseHorizon is the furthest ahead a lease is booked: 15 minutes, the
// longest a message can be delayed (SQS DelaySeconds, 900 s). A unit whose
// lease would start later books none and waits until it would not.
const LeaseHorizon = 15 * time.Minute

// LeaseSleep is the longest an invocation waits for a lease's start
// before a unit's take: SQS delays are whole seconds, so a unit waiting
// longer is sent to come back between 1 and 2 s before its lease starts,
// and sleeps the rest.
const LeaseSleep = 2 * time.Second

// LeaseGrace is how long after its start a booked lease may still be
// used; later it is stale and the unit leases again.
const LeaseGrace = 500 * time.Millisecond

// RateShards is how many bucket rows pace a key at rate requests a
// second: ⌈rate / ShardRequestsPerSecond⌉, at least 1.
func RateShards(rate float64) int {
	return max(1, int(math.Ceil(rate/ShardRequestsPerSecond)))
}

// Spacing is how far a lease of n requests at rate requests a second
// moves its row's Next: n / rate, rounded up to the microsecond (never
// shorter, so the rate holds), at least 1 µs.
func Spacing(n int, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	us := math.Ceil(float64(max(n, 1)) * 1e6 / rate)
	return max(time.Duration(us)*time.Microsecond, time.Microsecond)
}

// Booking is the answer to a lease of a bucket row: OK with the lease's
// Start and the row's Next after it, or, when the start would be past
// LeaseHorizon, not OK and Wait, how long until it would not be.
type Booking struct {
	OK    bool
	Start time.Time
	Next  time.Time
	Wait  time.Duration
}

// Book leases spacing (Spacing) of a row whose Next is next (zero: no row
// yet) at now, booking up to horizon ahead.
func Book(next, now time.Time, spacing, horizon time.Duration) Booking {
	start := now
	if next.After(now) {
		start = next
	}
	if ahead := start.Sub(now); ahead > horizon {
		return Booking{Next: next, Wait: ahead - horizon}
	}
	return Booking{OK: true, Start: start, Next: start.Add(spacing)}
}

// MaxCallsInWindow is the most calls a key at rate requests a second,
// paced by leases of at most n requests (a unit's items), may make in any
// window of w: per shard rate / shards × (w + LeaseGrace) + n, summed
// over its shards. A call of a lease starts in [start, start +
// LeaseGrace] (a later one leases again), the leases of a row do not
// overlap, and the last lease of a window may start within it.
func MaxCallsInWindow(rate float64, n int, w time.Duration) float64 {
	s := RateShards(rate)
	return rate*(w+LeaseGrace).Seconds() + float64(s*max(n, 1))
}

// LeaseWritesPerSecond is the writes a second a bucket row takes at rate
// requests a second in leases of n requests: rate / shards / n, at most
// ShardRequestsPerSecond.
func LeaseWritesPerSecond(rate float64, n int) float64 {
	return rate / float64(RateShards(rate)) / float64(max(n, 1))
}

// MaxTokensPerCall is the most tokens one call's report counts toward a
// token budget (docs/adr/0035): 10^9, a second of the highest budget
// (api.MaxTokensPerSecond), so that one wrong report cannot book a key
// for years.
const MaxTokensPerCall = 1e9
