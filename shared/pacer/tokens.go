package pacer

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// TokenStore is the ledger port a token budget books on
// (pace.Rows.LeaseTokens and SettleTokens).
type TokenStore interface {
	LeaseTokens(ctx context.Context, l pace.TokenLease) (pace.TokenGrant, error)
	SettleTokens(ctx context.Context, s pace.TokenSettle) (pace.TokenGrant, error)
	ReadTokens(ctx context.Context, key string) (pace.TokenGrant, error)
}

// Booking is BookTokens' answer: Granted with the booking's Start, the
// time it booked (Spacing) and the key's Drift when it booked, or, not
// granted, how long to Wait before booking again.
type Booking struct {
	Granted bool
	Start   time.Time
	Spacing time.Duration
	Drift   time.Duration
	Wait    time.Duration
}

// Shifted is the start of a booking carried ahead, made at start when the
// key's drift was drift, moved by the debts (and give-backs) settled on
// the key since — every booking after it moves by as much, so that a
// backlog booked at once on a first estimate runs at what its calls
// report — and the key's drift now, from one read of its row.
func Shifted(ctx context.Context, st TokenStore, key string, start time.Time, drift time.Duration) (time.Time, time.Duration, error) {
	g, err := st.ReadTokens(ctx, key)
	if err != nil {
		return start, drift, err
	}
	return start.Add(g.Drift - drift), g.Drift, nil
}

// BookTokens books the expected use of n calls of key's budget (tokens a
// second) at now: n × the key's tokens per call as this process knows it,
// up to TokenHorizon ahead. A process that knows no estimate books
// one second of the budget, within pace.LeaseSleep only (a first guess is
// not booked far), and books again at once with the estimate the row's
// answer gives, if it gives one. Not granted, the Wait is until the
// booking would start within the horizon, spread by up to half again and
// a second so that the units waiting on one key do not come back together.
func BookTokens(ctx context.Context, st TokenStore, key string, n int, budget float64, now time.Time) (Booking, error) {
	spacing, known := tokenSpacing(key, n, budget)
	g, err := leaseTokens(ctx, st, key, spacing, now, known)
	if err != nil {
		return Booking{}, err
	}
	if !g.Granted && !known && g.Calls > 0 {
		spacing, known = tokenSpacing(key, n, budget)
		if g, err = leaseTokens(ctx, st, key, spacing, now, known); err != nil {
			return Booking{}, err
		}
	}
	if g.Granted {
		return Booking{Granted: true, Start: g.Start, Spacing: spacing, Drift: g.Drift}, nil
	}
	horizon := pace.LeaseSleep
	if known {
		horizon = TokenHorizon
	}
	d := max(g.Next.Sub(now)-horizon, 0)
	wait := d + time.Duration(mrand.Int64N(int64(d/2)+int64(time.Second)))
	return Booking{Wait: max(wait, time.Second)}, nil
}

// SettleTokens settles a booking of booked at key's budget, starting at
// start, once its calls ended: used tokens reported by calls calls. A
// debt (used past what was booked) moves the key's schedule later by its
// time at the budget; an over-booking gives back only the part of the
// booking still ahead of now — the booking spans [start, start + booked]
// and its used part comes first, so what it did not use and has already
// passed cannot be spent again (a booking of no calls gives back what
// remains of it).
func SettleTokens(ctx context.Context, st TokenStore, key string, budget float64, start time.Time, booked time.Duration, used float64, calls int, now time.Time) error {
	debt := durationOf(used / budget)
	delta := debt - booked
	if delta < 0 {
		unused := start.Add(debt)
		if now.After(unused) {
			unused = now
		}
		delta = -max(start.Add(booked).Sub(unused), 0)
	}
	g, err := st.SettleTokens(ctx, pace.TokenSettle{Key: key, Delta: delta, Used: used, Calls: calls, Now: now})
	if err != nil {
		return err
	}
	sawTokens(key, g, now)
	return nil
}

// leaseTokens leases spacing of key's token row, up to TokenHorizon
// ahead when far, else pace.LeaseSleep.
func leaseTokens(ctx context.Context, st TokenStore, key string, spacing time.Duration, now time.Time, far bool) (pace.TokenGrant, error) {
	horizon := pace.LeaseSleep
	if far {
		horizon = TokenHorizon
	}
	g, err := st.LeaseTokens(ctx, pace.TokenLease{Key: key, Spacing: spacing, Now: now, Horizon: horizon, Idle: Idle(Row{Key: key, Tokens: true}, now)})
	if err != nil {
		return g, err
	}
	sawTokens(key, g, now)
	return g, nil
}

// sawTokens keeps g's Next as key's token row hint and, when its row has
// settled calls, its tokens per call.
func sawTokens(key string, g pace.TokenGrant, now time.Time) {
	r := Row{Key: key, Tokens: true}
	v, _ := rows.Load(r)
	s, _ := v.(seen)
	s.next = g.Next
	if g.Calls > 0 {
		s.perCall, s.known = g.Used/float64(g.Calls), true
	}
	save(r, s, now)
}

// tokenSpacing is the time n calls are expected to take of a budget of
// budget tokens a second on key, and whether the process knows the key's
// tokens per call: n × those over the budget, at least 1 µs; one second
// when it does not (the first units of a key run at most a few at once
// until the first settles).
func tokenSpacing(key string, n int, budget float64) (time.Duration, bool) {
	v, _ := rows.Load(Row{Key: key, Tokens: true})
	s, _ := v.(seen)
	if !s.known {
		return time.Second, false
	}
	return max(durationOf(float64(max(n, 1))*s.perCall/budget), time.Microsecond), true
}

// durationOf is secs seconds, at most MaxBooking (a float beyond
// time.Duration's range would wrap).
func durationOf(secs float64) time.Duration {
	if !(secs < MaxBooking.Seconds()) {
		return MaxBooking
	}
	return time.Duration(secs * float64(time.Second))
}

// MaxBooking bounds the time one booking or one settle's debt takes of a
// budget: a day. A unit whose calls are expected to take longer books a
// day; a debt over a day counts a day.
const MaxBooking = 24 * time.Hour

// TokenHorizon is the furthest ahead a token booking is made once the
// process knows the key's tokens per call: 6 hours. A booking beyond
// SQS's 15-minute delay is carried across several waits (one message each
// 15 minutes, and one read of the row) — a token budget's backlog is
// often longer than a request rate's — where refusing it would send every
// waiting unit back when the schedule's end comes within the horizon, all
// at once (a poll: 302 messages an item, measured, at a 67-minute
// backlog with a 15-minute horizon).
const TokenHorizon = 6 * time.Hour

// TakeTokens is a unit's token booking at now: the one it carries
// (carried.Start not zero), moved by the drift settled since it was made
// (Shifted) and never before now, or else a new one (BookTokens).
func TakeTokens(ctx context.Context, st TokenStore, key string, n int, budget float64, carried Booking, now time.Time) (Booking, error) {
	if carried.Start.IsZero() {
		return BookTokens(ctx, st, key, n, budget, now)
	}
	start, drift, err := Shifted(ctx, st, key, carried.Start, carried.Drift)
	if err != nil {
		return Booking{}, err
	}
	return Booking{Granted: true, Start: Later(start, now), Spacing: carried.Spacing, Drift: drift}, nil
}

// Counted is what a call's report of n tokens counts toward a budget:
// 0 when n is not a number ≥ 0 (NaN, negative, +Inf), at most
// pace.MaxTokensPerCall.
func Counted(n float64) float64 {
	if !(n > 0) || math.IsInf(n, 1) {
		return 0
	}
	return min(n, pace.MaxTokensPerCall)
}
