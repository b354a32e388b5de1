package pace

import (
	"math"
	"time"
)

// Adaptive pace (docs/adr/0036). A batch with no rate runs its calls as
// fast as its invocations take them, until its downstream answers that
// it is over its own limit: a throttled call (an HTTP 429 or 503, Lambda's
// TooManyRequestsException, a pipeline's *pipeline.ThrottledError). Then
// every batch calling that downstream key (its host, its function) is
// paced together at an adaptive limit kept on the key's adaptive row:
// AIMD, "additive increase, multiplicative decrease", as TCP's congestion
// control does (RFC 5681 §3.1): a throttled call cuts the limit to
// AdaptBackoff of itself (CUBIC's β, RFC 9438 §4.6), or to the share of
// the calls the downstream took when that is less (Backoff), and it grows
// by a Step a second while no call is throttled; when a key starts being
// paced, or after a Retry-After from a downstream that took none of the
// throttled process's calls in the last AdaptTookWithin, it doubles
// instead (slow start) until the next throttled call. The row is written
// only by a cut (at most one a second, AdaptCutEvery); the limit's growth
// is computed from the time of its last cut, so that a climbing limit
// costs no write.
//
// The row's schedule counts calls, not time: Allowance(t) is how many
// calls the limit allowed by t since the key was first paced, and a unit
// leases the next positions in line (Booked, one conditional write). A
// position is due when the allowance reaches it (Due): a unit carries
// its position while it waits on the queue, and when it comes back, its
// start is worked out again from the row as it is then, so that a cut made
// while it waited delays it and a limit that grew brings it forward,
// with its place in line kept. A key whose limit climbed past
// AdaptCeiling, or was not cut for AdaptForget, is not paced until its
// next throttled call.

// AdaptBackoff is the factor a cut multiplies the limit by: 0.7, CUBIC's
// β (RFC 9438 §4.6), a smaller step down than TCP Reno's halving, so
// that a downstream at its limit loses less of its pace per throttle.
const AdaptBackoff = 0.7

// AdaptGrowth is the share of the limit a cut leaves that the limit
// grows by each second after it (at least AdaptMinStep): 10 %, so that a
// cut of 30 % is climbed back in about 4 s.
const AdaptGrowth = 0.1

// AdaptMinStep is the least growth of the limit a second: 1 request a
// second.
const AdaptMinStep = 1.0

// AdaptDoubling is how long a limit in slow start takes to double: 2 s.
// A key starts paced in slow start (its first limit is a guess: AdaptBackoff
// × the calls the throttled process made in the last AdaptWindow, a lower
// bound of the key's pace), and goes back to it after a throttled call
// that named a Retry-After when the receiver took none of the process's
// calls in the last AdaptTookWithin (it said when, not how fast:
// Throttled), so that a receiver that takes calls again finds its pace
// within seconds.
const AdaptDoubling = 2 * time.Second

// AdaptFloor is the lowest limit: a request every 10 s, so that a key
// throttled on every call is still probed.
const AdaptFloor = 0.1

// AdaptCeiling is the limit past which a key is not paced: 500 requests
// a second, what one row takes in leases of one call at half of
// DynamoDB's 1,000 writes a second per partition (ShardRequestsPerSecond);
// the adaptive schedule is one row.
const AdaptCeiling = ShardRequestsPerSecond

// AdaptCutEvery is the least time between two cuts of the limit: the
// throttled answers of calls made before a cut was felt are one signal,
// not many (TCP cuts once a round trip, RFC 5681 §3.1).
const AdaptCutEvery = time.Second

// AdaptForget is how long after its last cut a key's limit stands: 10
// minutes, after which the key runs unpaced until it is throttled again.
const AdaptForget = 10 * time.Minute

// AdaptHorizon is the furthest ahead of the allowance a lease is booked:
// the calls the limit allows in the next hour. A unit booked further
// waits on the queue in steps of at most 15 minutes (SQS's longest delay)
// and works its start out again each time it comes back.
const AdaptHorizon = time.Hour

// AdaptWindow is the window a process counts its own calls of a key in:
// 1 s (AdaptDoubling).
const AdaptWindow = time.Second

// Adapt is a key's adaptive row: its Limit (requests a second) as set by
// its last Cut, the Step it grows by each second after it (Slow: it
// doubles every AdaptDoubling instead, up to Thresh when that is set —
// slow start's threshold, RFC 5681 §3.1's ssthresh — and grows by Step
// past it; 0: up to AdaptCeiling), Hold, a time before which no call
// starts and the limit does not grow (the downstream's Retry-After; zero:
// none), Base, the allowance at the cut, and Booked, the positions leased
// so far (Rows.LeaseAdapt's; a cut leaves it). The zero Adapt is a key
// never throttled.
type Adapt struct {
	Limit  float64
	Step   float64
	Slow   bool
	Thresh float64
	Cut    time.Time
	Hold   time.Time
	Base   float64
	Booked float64
	// Restarted: the last cut was a resume's restart (Resumed), not a
	// throttled answer (Throttled clears it), so that what reads the row
	// says why the key is paced.
	Restarted bool
}

// from is when the limit starts growing and the allowance accruing: the
// cut, or the end of its hold.
func (a Adapt) from() time.Time {
	if a.Hold.After(a.Cut) {
		return a.Hold
	}
	return a.Cut
}

// limitAfter is the limit s seconds after from(), at most AdaptCeiling.
func (a Adapt) limitAfter(s float64) float64 {
	s = max(s, 0)
	l := a.Limit
	if a.Slow {
		t, se := a.slowStart(AdaptCeiling)
		if s <= se {
			return min(l*math.Exp2(s/AdaptDoubling.Seconds()), AdaptCeiling)
		}
		s -= se
		l = max(l, t)
	}
	return min(l+a.Step*s, AdaptCeiling)
}

// slowStart is where a's slow start ends, at most top (Thresh when it is
// set and below top, else top), and how many seconds of doubling from
// Limit reach it (0 for a limit already past it, which grows by Step
// from where it is).
func (a Adapt) slowStart(top float64) (end, seconds float64) {
	end = top
	if a.Thresh > 0 && a.Thresh < top {
		end = a.Thresh
	}
	if a.Limit >= end {
		return end, 0
	}
	return end, AdaptDoubling.Seconds() * math.Log2(end/a.Limit)
}

// LimitAt is a's limit at now (before its hold ends: the limit the cut
// set); 0 when the key is not paced: never cut, its limit at
// AdaptCeiling, or its cut AdaptForget old.
func (a Adapt) LimitAt(now time.Time) float64 {
	if a.Limit <= 0 || a.Cut.IsZero() || now.Sub(a.Cut) >= AdaptForget {
		return 0
	}
	l := a.limitAfter(now.Sub(a.from()).Seconds())
	if l >= AdaptCeiling {
		return 0
	}
	return l
}

// Paced reports whether a call of the key at now must lease: its limit
// stands, or a Hold is ahead.
func (a Adapt) Paced(now time.Time) bool {
	return a.LimitAt(now) > 0 || a.Hold.After(now)
}

// Allowance is how many calls a's limit allowed by t: Base at the cut,
// plus the integral of the limit from the end of its hold (at most
// AdaptCeiling a second; none before the hold ends). Continuous in t, so
// that a position is due at one time.
func (a Adapt) Allowance(t time.Time) float64 { return a.allowance(t, AdaptCeiling) }

// allowance is Allowance with the limit at most top a second.
func (a Adapt) allowance(t time.Time, top float64) float64 {
	if a.Limit <= 0 || a.Cut.IsZero() {
		return a.Base
	}
	s := t.Sub(a.from()).Seconds()
	if s <= 0 {
		return a.Base
	}
	base, l := a.Base, a.Limit
	if l >= top {
		return base + top*s
	}
	if a.Slow {
		// Doubling up to slow start's end, then by Step as out of it.
		if t, se := a.slowStart(top); se > 0 {
			d := AdaptDoubling.Seconds()
			if s <= se {
				return base + l*d/math.Ln2*(math.Exp2(s/d)-1)
			}
			base += (t - l) * d / math.Ln2
			s -= se
			l = t
		}
		if l >= top {
			return base + top*s
		}
	}
	if a.Step <= 0 {
		return base + l*s
	}
	sc := (top - l) / a.Step // seconds until the limit reaches top
	if s <= sc {
		return base + l*s + a.Step*s*s/2
	}
	return base + l*sc + a.Step*sc*sc/2 + top*(s-sc)
}

// Due is when position p is due: the first time from now on at which the
// allowance reaches it (now when it already has), to the microsecond.
func (a Adapt) Due(p float64, now time.Time) time.Time { return a.due(p, now, AdaptCeiling) }

// Wake is when a unit whose lease starts at position p should come back
// to run it: Due, with the limit counted no higher than the pace its
// last cut was made at (Limit ÷ AdaptBackoff) once out of slow start.
// A limit at its downstream's pace goes up and down between a cut and
// that pace, so the full count (which grows on) would wake most units
// early, only to wait again. A lower count would wake some late, whose
// positions are then due at once, together: a burst (at the middle of
// the cut, the flow test bed's 100/s receiver refused 8.9 % of calls and
// saw 176 a second in a 10 s window, against 1.5 % and 88 a second).
func (a Adapt) Wake(p float64, now time.Time) time.Time {
	if a.Slow {
		return a.Due(p, now)
	}
	grown := a.limitAfter(now.Add(AdaptWakeAhead).Sub(a.from()).Seconds())
	return a.due(p, now, min(max(a.Limit/AdaptBackoff, grown), AdaptCeiling))
}

// AdaptWakeAhead is how far ahead Wake counts the limit's growth: 5 s.
// A unit's wake is fixed when it is sent to wait (a queue's delay cannot
// be shortened), so a count capped at the pace of the last cut alone
// kept a backlog at that pace however far the limit grew: on the
// emulator, a cut to 3.5 a second held 330 waiting units at 4.5 calls a
// second for 70 s against a receiver taking 20. Counting 5 s of growth
// (at least 1 a second a second, AdaptMinStep) wakes them at most that
// much ahead of the limit; one that comes back before its place is due
// waits again, one more message: in the flow test bed's 100-a-second
// receiver, 5.7 messages a unit at one item a message against 4.7 with
// no growth counted, and 6.3 with 10 s.
const AdaptWakeAhead = 5 * time.Second

func (a Adapt) due(p float64, now time.Time, top float64) time.Time {
	if a.allowance(now, top) >= p || a.Limit <= 0 || a.Cut.IsZero() {
		return now
	}
	lo, hi := now, now.Add(time.Minute)
	for i := 0; a.allowance(hi, top) < p; i++ {
		if i == 40 {
			return hi // beyond any wait (the allowance grows at least AdaptFloor a second)
		}
		lo, hi = hi, hi.Add(hi.Sub(now))
	}
	for hi.Sub(lo) > time.Microsecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if a.allowance(mid, top) >= p {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// AdaptDeepest is the deepest one cut goes: to half the limit, TCP
// Reno's cut (RFC 5681 §3.1). A cut by the share the downstream took
// (Backoff) goes no deeper: that share also counts calls made above the
// limit (units whose process had not yet read the last cut run unpaced
// for up to AdaptReadEvery), and the limit climbs back by a tenth of
// what a cut leaves a second (AdaptGrowth), so a deeper cut is slow to
// undo: on the emulator, with cuts down to a quarter, 400 items at one a
// message went at about 10 calls a second for 30 s against a receiver
// taking 20, none refused.
const AdaptDeepest = 0.5

// AdaptShareMin is the least number of a process's own calls in the
// last AdaptWindow whose refused share sets a cut (Backoff): 10; with
// fewer, one refusal more or less is a tenth of the share, and the cut
// is AdaptBackoff.
const AdaptShareMin = 10

// Backoff is the factor a cut multiplies the limit by when a process
// made own calls of the key paced by its row in the last AdaptWindow
// and refused of them were throttled: AdaptBackoff, or the share the
// downstream took, (own − refused) ÷ own, when that is smaller (at least
// AdaptDeepest, and only from AdaptShareMin calls on). A throttled answer
// from a quota says how much of the pace the downstream takes: at a
// limit 2.6 times a receiver's quota (52 calls a second against 20),
// cuts of 0.7 take three to reach it (0.7³ = 0.34), at most one a second
// (AdaptCutEvery), each a second of refusals; by the share (0.38, cut at
// 0.5) it takes two. Cutting by how much was refused is DCTCP's rule (RFC 8257 §3.3:
// the window shrinks in proportion to the share of packets marked),
// taken whole here since a refused call, unlike a mark, is work not
// done.
func Backoff(own, refused int) float64 {
	if own < AdaptShareMin || refused <= 0 {
		return AdaptBackoff
	}
	took := float64(own-min(refused, own)) / float64(own)
	return max(AdaptDeepest, min(AdaptBackoff, took))
}

// Throttled is a's row after a call of the key was throttled at now,
// the downstream asking for retryAfter (0: it named none), by a process
// that made own calls of the key in the last AdaptWindow (itself
// included) and whose last paced call the downstream took started at
// accepted (zero: none), cutting by factor f (Backoff; AdaptBackoff when
// out of (0, 1]); and whether the row changed. A key not paced starts in
// slow start at f × own (at least AdaptFloor); a paced one is cut to f ×
// its limit at now, at most once per AdaptCutEvery, growing by its Step
// a second after it — or in slow start again when the downstream named a
// Retry-After and took none of the process's paced calls in the last
// AdaptTookWithin, up to the limit it had then (Thresh; on without one
// when the key was in a slow start that knew none), and no lower than
// the limit that slow start began at when the key was in one: a
// downstream closed for a while (an outage, a
// maintenance window) says when, not how fast, and slow start finds its
// pace once it opens; one that took calls and refused the excess (a
// quota that answers each refusal with a Retry-After, as most APIs do)
// is at its pace, and a slow start from there would overshoot it every
// few seconds (on the flow test bed, a 20-a-second quota with
// Retry-After: 1 refused 3.9 % of calls and the queue carried 19
// messages a unit, against 1.4 % and 6.1). Each cut keeps the allowance as
// it was at now (Base), so that the positions leased beyond it are due
// at the new pace. Hold moves to now + retryAfter when that is later.
func (a Adapt) Throttled(now time.Time, own int, f float64, retryAfter time.Duration, accepted time.Time) (Adapt, bool) {
	n := a
	n.Restarted = false // what this writes is a throttled answer's
	cut := false
	if f <= 0 || f > 1 {
		f = AdaptBackoff
	}
	if l := a.LimitAt(now); l <= 0 {
		n.Limit, n.Slow, n.Thresh, cut = max(AdaptFloor, f*float64(own)), true, 0, true
	} else if now.Sub(a.Cut) >= AdaptCutEvery {
		took := !accepted.IsZero() && !accepted.After(now) && now.Sub(accepted) < AdaptTookWithin
		n.Limit, n.Slow, n.Thresh, cut = max(AdaptFloor, f*l), retryAfter > 0 && !took, 0, true
		if n.Slow {
			// Slow start back to the pace the key ran at when it closed, then
			// by the step: RFC 5681 §3.1's ssthresh. Closed again on the way,
			// it keeps the pace it was going back to, or none when it knew
			// none (a slow start from the key's first throttle or a resume).
			n.Thresh = l
			if a.Slow && (a.Thresh == 0 || a.Thresh > l) {
				n.Thresh = a.Thresh
			}
			if a.Slow {
				// Closed again before its slow start grew much: no lower
				// than that slow start began. Refusals while closed say
				// when, not how fast; cut on each, the limit fell 0.7×
				// a Retry-After for as long as the downstream was closed.
				n.Limit = max(n.Limit, a.Limit) // a slow start's limit only grows: l ≥ a.Limit
			}
		}
	}
	if cut {
		n.Base, n.Cut, n.Hold = a.Allowance(now), now, time.Time{}
		if a.Hold.After(now) {
			n.Hold = a.Hold
		}
		n.Step = max(AdaptMinStep, AdaptGrowth*max(n.Limit, n.Thresh))
	}
	// The hold moves to the latest Retry-After, but at most once per
	// AdaptCutEvery while one is ahead: each refused call of a held key
	// would otherwise rewrite the row (64 writes for one unit's refusals
	// on the emulator, the limit unchanged).
	if h := now.Add(retryAfter); retryAfter > 0 && (!n.Hold.After(now) || h.Sub(n.Hold) >= AdaptCutEvery) && h.After(n.Hold) {
		n.Hold = h
	}
	return n, cut || !n.Hold.Equal(a.Hold)
}

// AdaptTookWithin is how recent a process's last paced call the
// downstream took must be for a throttled call's Retry-After to be a
// quota's, not a closed downstream's (Throttled): 10 s. The evidence is
// the process's own (the row does not know which calls were made), and
// one process of many makes few of the key's calls: on the emulator, 102
// item processes made 1–3 calls a second each against a 20-a-second
// quota, so that "one taken since the last cut" (tried first) was most
// often false, each cut went back to slow start, and the limit passed
// 500 a second and left the key unpaced, in bursts of 190–350 calls a
// second. With 10 s, runs of 3,000 items still refused 45–51 % of their
// calls; the item function's log of cuts showed every cut of a run's
// first five minutes in a slow start that knew no pace (from the key's
// first throttle), cut again and again on Retry-Afters and in slow start
// again each time, until one climbed past 500 a second
// (docs/pipelines.md, "Rates"). A downstream that closes after taking
// calls is cut by the step for its first 10 s, then in slow start.
const AdaptTookWithin = 10 * time.Second

// AdaptResume is the limit a key is paced at when a batch calling it
// resumes after a pause (an outage pause whose probe was answered, a
// caller's unpause, a raised budget) and the key is not paced: 10
// requests a second in slow start, doubling every AdaptDoubling, so that
// the units that waited out the pause come back spread over about 11 s
// (≈ 1,400 calls) up to AdaptCeiling, not all at once.
const AdaptResume = 10.0

// Resumed is a's row when a batch calling the key resumes at now after a
// pause, and whether it changed: a key paced now, or cut within
// AdaptForget (its limit climbed past AdaptCeiling: other batches call it
// that fast), is left as it is — its leases already spread the units
// that come back, and its limit is its downstream's, not the resuming
// batch's; a key never cut, or forgotten, starts at AdaptResume in slow
// start, its allowance kept (Base).
func (a Adapt) Resumed(now time.Time) (Adapt, bool) {
	if a.Paced(now) || !a.Cut.IsZero() && now.Sub(a.Cut) < AdaptForget {
		return a, false
	}
	n := a
	// A slow start with no end: the key's pace before the pause is no
	// bound on it now.
	n.Limit, n.Slow, n.Thresh, n.Step = AdaptResume, true, 0, max(AdaptMinStep, AdaptGrowth*AdaptResume)
	n.Base, n.Cut, n.Hold, n.Restarted = a.Allowance(now), now, time.Time{}, true
	return n, true
}

// Ahead is how far ahead of the allowance at now a lease may be booked:
// the calls the limit allows in the next AdaptHorizon.
func (a Adapt) Ahead(now time.Time) float64 {
	return a.Allowance(now.Add(AdaptHorizon)) - a.Allowance(now)
}

// AdaptWait is how long a unit waits before it leases again when the
// key's schedule is booked further ahead than Ahead allows: 15 minutes,
// SQS's longest delay, less up to 5 (jitter 0–1, the caller's random
// draw) so that the waiting units come back spread.
func AdaptWait(jitter float64) time.Duration {
	return 15*time.Minute - time.Duration(math.Max(0, math.Min(jitter, 1))*float64(5*time.Minute))
}
