package pacer

import (
	"context"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Pacing a unit (docs/adr/0031, 0035, 0036): a unit of a batch with a
// rate leases its calls (one request per item) from one bucket row of
// the rate's key before its take, so that waiting uses no attempt; a
// batch with a token budget books its calls' expected use first and
// settles what they reported after; a batch with neither is paced by its
// downstream key's adaptive line once the downstream throttled a call.
// A lease starting within pace.LeaseSleep is slept in the invocation; a
// later one (booked up to pace.LeaseHorizon ahead) is carried by the
// unit's message (Carried), which waits for it on the queue or in its
// track (the item engine's part) and runs at its start without leasing
// again. A key whose schedule is booked past the horizon books nothing:
// the unit waits until it would not be, and leases then. The pacing's
// own bookkeeping never changes an item's outcome: a row that cannot be
// read leaves the unit unpaced, a settle that cannot be written is
// logged.

// Store is every pacing row a unit leases on (pace.Rows, part of
// ledger.Store).
type Store interface {
	RateStore
	TokenStore
	AdaptStore
}

// Carried is what a unit's message carries of its pacing while it waits
// (ledger.Message.RateAtUs, RatePos, TokensAtUs, TokensBookedUs,
// TokensDriftUs, or a track unit's ledger.TrackRetry): the start of its
// request lease or adaptive place (zero: none) and the place's position,
// its token booking's start (zero: none), the time it booked and the
// key's drift when it booked; and how long before its request lease's
// start it was sent to come back (ledger.Message.RateLeadMs; 0: not
// said; negative: its lateness is not the queue's — a unit of a track
// received again — and is not learned). Each is used once: Unit clears
// what it takes.
type Carried interface {
	LeaseAt() time.Time
	SetLeaseAt(t time.Time)
	LeasePos() float64
	SetLeasePos(p float64)
	LeaseLead() time.Duration
	SetLeaseLead(d time.Duration)
	TokensCarried() (at time.Time, booked, drift time.Duration)
	SetTokensCarried(at time.Time, booked, drift time.Duration)
}

// Pacer paces an item function's units: a value made for each unit, its
// Adapts the process's (shared by every Pacer of the process).
type Pacer struct {
	// Store holds the pacing rows.
	Store Store
	// Clock is the time; nil: the wall clock.
	Clock ledger.Clock
	// Sleep waits for a lease's start (at most pace.LeaseSleep); nil: a
	// timer. Tests on a clock of their own move it.
	Sleep func(ctx context.Context, d time.Duration)
	// Adapts is what this process knows of its downstream keys'
	// adaptive rows; nil: nothing (every unit reads the rows).
	Adapts *Adapts
}

// Lease is one delivery's pacing of its unit: the start of the request
// lease or adaptive place it runs under, and the token booking it holds
// until Settle. The zero value is a unit not paced.
type Lease struct {
	// Leased is the start of the lease this delivery runs under (zero:
	// none): its calls start by then + pace.LeaseGrace (Late).
	Leased time.Time
	tokens tokenBooking
	// place is the unit's first position on its key's adaptive line
	// (placed: it has one); keep, set by Observe, that a throttled call
	// of the unit wrote the key's row (its cut or hold), so that the
	// unit keeps its place when it waits (KeepPlace).
	place  float64
	placed bool
	keep   atomic.Bool
	// Until is the latest this delivery's calls may start (zero: any
	// time), set by the caller before Unit: a lease starting after it is
	// carried by the message as one past pace.LeaseSleep is, not slept,
	// so that the invocation's time is not slept away before a call that
	// it could no longer finish (worker: half the time left before its
	// deadline margin).
	Until time.Time
	// Window is how long a rate lease's calls may spread (zero: any), set
	// by the caller before Unit (worker: half the time a fresh
	// invocation has for its calls): a unit whose calls at the rate take
	// longer leases only those that fit (Covers), and its other items are
	// given back unstarted, to lease again, instead of leasing time they
	// could not use. The count depends only on the unit's items, the rate
	// and Window, so a lease carried on the message covers the same calls
	// when it comes back.
	Window time.Duration
	// leased is how many of the unit's calls its rate lease covers (0:
	// all).
	leased int
	// gap is a rate lease's time between two of its calls (the lease's
	// pace.Spacing over its calls); adapt the key's adaptive row the
	// place was leased on, whose Due times its later calls.
	gap   time.Duration
	adapt pace.Adapt
	// woke is when the rate lease's sleep before the take ended (zero:
	// none), waited how long its first call then slept for its place
	// (WaitCall): the time between, less waited, is the take's (TakeLead).
	woke   time.Time
	waited time.Duration
	// notBefore is the start of the unit's token booking under a rate
	// lease (zero: none): no call of the unit starts before it.
	notBefore time.Time
	// Probe is set by the caller before Unit when the unit is its paused
	// batch's probe (one item): under a rate it runs off the rate's
	// schedule (probe).
	Probe bool
}

// tokenBooking is a unit's token booking (budget: tokens a second;
// carried: it came with the message) and, once its calls ended, their use.
type tokenBooking struct {
	key     string
	budget  float64
	start   time.Time
	booked  time.Duration
	drift   time.Duration
	carried bool
	used    float64
	calls   int
}

func (p *Pacer) now() time.Time {
	if p.Clock == nil {
		return time.Now()
	}
	return p.Clock.Now()
}

// adapts is p.Adapts, or a record of its own when none.
func (p *Pacer) adapts() *Adapts {
	if p.Adapts == nil {
		p.Adapts = &Adapts{}
	}
	return p.Adapts
}

// sleep waits d on p.Sleep, or a timer, or until ctx ends.
func (p *Pacer) sleep(ctx context.Context, d time.Duration) {
	if p.Sleep != nil {
		p.Sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Unit leases the calls of a unit of b (calls items, one call each; c
// what its message carries, redelivered: this delivery is the same
// message received again, whose bookings another receive may have used)
// into l: its token budget's booking first, then its requests from the
// booking's start on, so that a unit waiting for tokens holds no request
// lease and its request lease never starts before its tokens; with no
// rate, its place in the key's adaptive line. It returns 0 when the unit
// may be taken now (after a sleep of at most pace.LeaseSleep until what
// it leased has started), or how long it waits first (what it booked
// carried in c). An error is the store's: the unit waits as for AWS
// unavailable, holding no booking.
func (p *Pacer) Unit(ctx context.Context, log *slog.Logger, b ledger.Batch, c Carried, calls int, redelivered bool, l *Lease) (time.Duration, error) {
	if b.Rate == nil {
		return p.adaptive(ctx, log, b, c, calls, redelivered, l)
	}
	if l.Probe {
		p.probe(b, c, l)
		return 0, nil
	}
	now := p.now()
	from := now // when the unit's tokens allow its calls
	if b.Rate.Budgeted() {
		at, wait, err := p.tokens(ctx, log, b, c, calls, redelivered, l)
		if err != nil || wait > 0 {
			c.SetLeaseAt(time.Time{}) // a unit waiting for tokens holds no request lease
			return wait, err
		}
		from = at
	}
	if b.Rate.RequestsPerSecond <= 0 {
		if wait := from.Sub(p.now()); wait > 0 {
			p.sleep(ctx, wait)
		}
		return 0, nil
	}
	key := b.Rate.KeyOf(b.ID)
	perRow := b.Rate.RequestsPerSecond / float64(pace.RateShards(b.Rate.RequestsPerSecond))
	n := l.fit(calls, perRow)
	wait, err := p.calls(ctx, log, c, l, key, now, from, redelivered, func() (Booking, error) {
		return LeaseRequests(ctx, p.Store, key, b.Rate.RequestsPerSecond, n, now, from)
	})
	if n < calls {
		l.leased = n
	}
	if l.Paced() && n > 1 {
		// A lease of n calls moves its row by pace.Spacing of n at the
		// row's share of the rate: its calls start that far apart, not
		// all at its start (a burst of n the rate never allowed).
		l.gap = pace.Spacing(n, perRow) / time.Duration(n)
	}
	return wait, err
}

// fit is how many of a unit's calls a rate lease takes at perRow
// requests a second on its row: all of them, or those that start within
// Window.
func (l *Lease) fit(calls int, perRow float64) int {
	if l.Window <= 0 || calls <= 1 || perRow <= 0 {
		return calls
	}
	return min(calls, 1+int(l.Window.Seconds()*perRow))
}

// Covers reports whether the i-th call (from 0) of l's unit is covered
// by its lease: every call, unless a rate lease took only those that fit
// its Window.
func (l *Lease) Covers(i int) bool { return l.leased == 0 || i < l.leased }

// adaptive paces a unit's calls when b has no rate (docs/adr/0036): not
// at all while its downstream key is not paced (pace.Adapt.Paced, the
// row read at most once a second per process); else it leases the next
// positions in the key's line (Adapts.LeaseAdaptive) and waits until they
// are due (pace.Adapt.Due) and the key's hold has passed: slept in the
// invocation within pace.LeaseSleep, else carried on c (its position and
// start) while it waits on the queue, its start worked out again from
// the row when it comes back. The row unread, the unit runs unpaced:
// bulkrun's pacing never stops an item.
func (p *Pacer) adaptive(ctx context.Context, log *slog.Logger, b ledger.Batch, c Carried, calls int, redelivered bool, l *Lease) (time.Duration, error) {
	key := DownstreamKey(b)
	now := p.now()
	a, err := p.adapts().Adapt(ctx, p.Store, key, now)
	if err != nil {
		log.WarnContext(ctx, "adaptive pace unread; the unit runs unpaced", "downstream_key", key, "error", pipeline.ErrorText(err))
		return 0, nil
	}
	// A place is carried by the message sent to wait for it, used once:
	// the same message received again (a retry's delay, a give-back,
	// another delivery holding the unit) leases anew.
	carried, pos := !c.LeaseAt().IsZero() && !redelivered, c.LeasePos()
	c.SetLeaseAt(time.Time{}) // a lease is used once
	c.SetLeasePos(0)
	if !a.Paced(now) {
		return 0, nil // not paced, or no longer: it runs now
	}
	if !carried {
		at, ok, row, err := p.adapts().LeaseAdaptive(ctx, p.Store, key, a, calls, now)
		if err != nil {
			return 0, err
		}
		if !ok {
			wait := pace.AdaptWait(mrand.Float64())
			log.InfoContext(ctx, "downstream's adaptive pace booked past its horizon; waiting to lease", "downstream_key", key, "retry_in_ms", wait.Milliseconds())
			return wait, nil
		}
		pos, a = at, row
	}
	for slept := 0; ; slept++ {
		start := Later(a.Due(pos, now), a.Hold)
		wait := start.Sub(p.now())
		if !l.sleepable(wait, start) {
			wake := Later(a.Wake(pos, now), start)
			c.SetLeaseAt(wake)
			c.SetLeasePos(pos)
			return wake.Sub(p.now()), nil
		}
		if wait <= 0 || slept == adaptSleeps {
			if wait > 0 {
				p.sleep(ctx, wait)
			}
			l.at(start, pos, a)
			return 0, nil
		}
		p.sleep(ctx, wait)
		// A hold made while it slept moves its start: worked out again
		// from the process's copy of the row (no read: a Retry-After of
		// a call of this process is in it at once, another's once the
		// copy is read again), as when it comes back from the queue. A
		// cut alone does not: a place leased before it runs at its start,
		// as one woken from the queue within pace.LeaseSleep does
		// (re-timing sleepers on every cut too held a 20-a-second quota's
		// receiver to 9.7 calls a second in its busiest 10 s on the
		// emulator, under the half its test wants).
		now = p.now()
		na := p.adapts().Seen(key)
		if !na.Hold.After(a.Hold) {
			l.at(start, pos, a)
			return 0, nil
		}
		a = na
	}
}

// adaptSleeps bounds how many times a unit leased on a key's adaptive
// line sleeps in its invocation for its start to come: a hold made while
// it slept moves the start, and it sleeps again (at most pace.LeaseSleep
// each time) or waits on the queue.
const adaptSleeps = 3

// calls leases a unit's calls of key with lease, from from on (zero or
// past: now), unless c carries a lease still fresh (its return, unless
// redelivered, recorded: Arrived): it returns 0 when
// the unit may be taken now (after a sleep of at most pace.LeaseSleep
// until the lease and from have started), or how long it waits first
// (its lease carried in c, or none when the key is booked past the
// horizon).
func (p *Pacer) calls(ctx context.Context, log *slog.Logger, c Carried, l *Lease, key string, now, from time.Time, redelivered bool, lease func() (Booking, error)) (time.Duration, error) {
	start := c.LeaseAt()
	c.SetLeaseAt(time.Time{}) // a lease is used once
	lead := c.LeaseLead()
	c.SetLeaseLead(0)
	if !start.IsZero() && !redelivered && lead >= 0 {
		// (A message received again came back after its visibility
		// timeout, not its delay: it says nothing of the queue's lag; nor
		// does a unit of a track received again, its lead negative.)
		if lead == 0 {
			lead = pace.LeaseSleep / 2
		}
		Arrived(key, now.Sub(start)+lead)
	}
	if !start.IsZero() && Later(now, from).After(start.Add(pace.LeaseGrace)) {
		// Stale, or its token booking moved past it: leased again from then.
		log.InfoContext(ctx, "rate lease stale; leased again", "late_ms", Later(now, from).Sub(start).Milliseconds())
		start = time.Time{}
	}
	if start.IsZero() {
		bk, err := lease()
		if err != nil {
			return 0, err
		}
		if !bk.Granted {
			log.InfoContext(ctx, "rate booked past the horizon; waiting to lease", "rate_key", key, "retry_in_ms", bk.Wait.Milliseconds())
			return bk.Wait, nil
		}
		start = bk.Start
	}
	wait := Later(start, from).Sub(p.now())
	if !l.sleepable(wait, Later(start, from)) {
		c.SetLeaseAt(start)
		l.Carry(c) // the token booking waits with it
		return wait, nil
	}
	if wait -= TakeLead(); wait > 0 {
		// Woken the take's time early, so that the first call comes at
		// its start, not that late (WaitCall sleeps the rest).
		p.sleep(ctx, wait)
	}
	// Its calls start at the lease's start, never before its tokens'
	// booking (from may be up to pace.LeaseGrace past a carried lease):
	// woken TakeLead early, each call waits for the later of them
	// (WaitCall), and is late past its place in the lease + the grace
	// (Late), whatever the booking.
	l.Leased, l.notBefore, l.woke = start, from, p.now()
	return 0, nil
}

// tokens books a unit's expected use of b's token budget before its take
// (TakeTokens), or takes the booking c carries, moved by the drift
// settled since. It returns the booking's start, at most pace.LeaseSleep
// ahead (l then holds the booking, settled by Settle), or how long the
// unit waits first: for the booking c then carries, or, when none could
// be booked, before booking again.
func (p *Pacer) tokens(ctx context.Context, log *slog.Logger, b ledger.Batch, c Carried, calls int, redelivered bool, l *Lease) (time.Time, time.Duration, error) {
	budget := b.Rate.TokenBudget()
	key := b.Rate.KeyOf(b.ID)
	now := p.now()
	start, booked, drift := c.TokensCarried()
	c.SetTokensCarried(time.Time{}, 0, 0) // a booking is used once
	carried := !start.IsZero() && !redelivered
	if !carried {
		start = time.Time{}
	}
	bk, err := TakeTokens(ctx, p.Store, key, calls, budget, Booking{Start: start, Spacing: booked, Drift: drift}, now)
	if err != nil {
		if carried {
			c.SetTokensCarried(start, booked, drift) // still carried
		}
		return time.Time{}, 0, err
	}
	if !bk.Granted {
		log.InfoContext(ctx, "token budget booked ahead; waiting to book", "token_key", key, "retry_in_ms", bk.Wait.Milliseconds())
		return time.Time{}, bk.Wait, nil
	}
	start, booked, drift = bk.Start, bk.Spacing, bk.Drift
	l.tokens = tokenBooking{key: key, budget: budget, start: start, booked: booked, drift: drift, carried: carried}
	if wait := start.Sub(p.now()); !l.sleepable(wait, start) {
		l.Carry(c)
		return time.Time{}, wait, nil
	}
	return start, 0, nil
}

// Carry moves l's token booking onto c (the unit's message, sent to wait).
func (l *Lease) Carry(c Carried) {
	if t := l.tokens; t.key != "" {
		c.SetTokensCarried(t.start, t.booked, t.drift)
		l.tokens = tokenBooking{}
	}
}

// at makes l run under the adaptive place at position pos of row a,
// starting at start.
func (l *Lease) at(start time.Time, pos float64, a pace.Adapt) {
	l.Leased, l.place, l.placed, l.adapt = start, pos, true, a
}

// sleepable reports whether a lease starting at start, wait from now,
// is slept in the invocation: within pace.LeaseSleep and not after
// Until.
func (l *Lease) sleepable(wait time.Duration, start time.Time) bool {
	return wait <= pace.LeaseSleep && (l.Until.IsZero() || !start.After(l.Until))
}

// CallAt is when the i-th call (from 0) of l's unit starts: the lease's
// start for the first; for the others, a rate lease's start + i gaps
// (its row's spacing a call), an adaptive place's position i due on the
// row it was leased on (pace.Adapt.Due), never before the key's hold.
// The calls of a unit run at once in their invocation (worker's
// ItemConcurrency), so a unit of 10 calls at 5 a second started together
// were a burst of 10 the rate never allowed; spread, they keep to it
// within the second. Zero when l is not paced.
func (l *Lease) CallAt(i int) time.Time {
	switch {
	case !l.Paced() || i <= 0:
		return l.Leased
	case l.gap > 0:
		return l.Leased.Add(time.Duration(i) * l.gap)
	case l.placed:
		return Later(Later(l.adapt.Due(l.place+float64(i), l.Leased), l.adapt.Hold), l.Leased)
	}
	return l.Leased
}

// WaitCall sleeps until the i-th call (from 0) of l's unit may start,
// at its place in the lease (CallAt: a paced unit's calls start spread
// over their lease, not at once) and not before its token booking, on
// p's Sleep, and reports whether it may start: false, without sleeping,
// when the lease does not cover the
// call (Covers), when its place is past Until, or when ctx's deadline
// comes less than margin after it — the caller then gives the item back
// unstarted (no attempt used) and it leases again with its unit's
// message, so that a call started late in the spread still has at least
// half the time its invocation had for its calls, where one started just
// inside the deadline margin was cut off there, its attempt used (an
// item failed at max-attempts so, uncalled to its end). True at once when
// the call is due (an unpaced unit's always is).
func (p *Pacer) WaitCall(ctx context.Context, l *Lease, i int, margin time.Duration) bool {
	if !l.Covers(i) {
		return false
	}
	at := Later(l.CallAt(i), l.notBefore)
	due := at.Sub(p.now())
	if due <= 0 {
		return true
	}
	if i == 0 {
		l.waited = due
	}
	if !l.Until.IsZero() && at.After(l.Until) {
		return false
	}
	if dl, has := ctx.Deadline(); has && time.Until(dl) < margin+due {
		return false
	}
	p.sleep(ctx, due)
	return true
}

// Bound sets l's Until and Window for a delivery in an invocation whose
// calls are cut off margin before ctx's deadline and whose fresh
// invocations have usable for their calls: Until half of the time left
// from now to that cut-off (a call starting then has as long again to
// run; now when none is left; zero, no bound, when ctx has no deadline),
// Window half of usable. A rate lease then takes no more calls than
// start within half a fresh invocation's time (100 items at under 0.68
// a second in a 5-minute invocation with its 10 s margin take fewer), so
// only a unit taken late in its invocation gives back calls it leased
// (docs/pipelines.md, "Rates").
func (l *Lease) Bound(ctx context.Context, now time.Time, margin, usable time.Duration) {
	l.Until, l.Window = time.Time{}, usable/2
	dl, has := ctx.Deadline()
	if !has {
		return
	}
	left := time.Until(dl) - margin
	if left <= 0 {
		l.Until = now
		return
	}
	l.Until = now.Add(left / 2)
}

// Paced reports whether l's unit runs under a lease (a rate's, or a
// place on its key's adaptive line).
func (l *Lease) Paced() bool { return l != nil && !l.Leased.IsZero() }

// KeepPlace makes c carry l's unit's place on its key's adaptive line,
// from at on, when a throttled call of the unit wrote the key's row
// (Observe), and reports whether it did. The unit, throttled, waits as
// every throttled unit does (its message sent again), and when it comes
// back it calls at its place: due already, so at the end of the key's
// hold, before the units behind it in line — where a unit that leases
// again goes to the end of the line (the flow test bed: a refused item's
// next call a median 32.5 s after a Retry-After of 2 s). At most one
// unit keeps its place per write of the row (a cut at most once per
// pace.AdaptCutEvery, a hold moved as often), and the worker runs a
// unit's throttled item first and alone: the calls it makes beyond the
// key's allowance are about one per write.
func (l *Lease) KeepPlace(c Carried, at time.Time) bool {
	if !l.placed || !l.keep.Load() {
		return false
	}
	c.SetLeaseAt(at)
	c.SetLeasePos(l.place)
	return true
}

// Late reports whether the i-th call of l's unit starting at now would
// start past its own start (CallAt) + pace.LeaseGrace (its item then
// waited for the invocation's other items, or a slow take): it is
// leased again from now (Relet) or given back, so that late calls do not
// bunch with the calls of later leases. Asked for the first call of a
// rate lease, it records how long the unit took from its lease's sleep
// to that call (Took).
func (l *Lease) Late(i int, now time.Time) bool {
	if i == 0 && !l.woke.IsZero() {
		Took(now.Sub(l.woke) - l.waited)
		l.woke = time.Time{}
	}
	return l.Paced() && now.After(l.CallAt(i).Add(pace.LeaseGrace))
}

// Called records a call of l's unit that reported tokens (its cost's
// api.TokensCostName, as Counted counts it) for Settle. Only calls that
// reached the pipeline are recorded: an attempt that never called it (a
// bad row; a stop or a refusal) is not a call.
func (l *Lease) Called(tokens float64) {
	if l.tokens.key == "" {
		return
	}
	l.tokens.calls++
	l.tokens.used += Counted(tokens)
}

// Settle writes l's token booking's settle: what its calls used less
// what it booked. A booking of no calls is given back whole when this
// delivery made it, and when it came with the message only while it is
// wholly ahead of now + pace.LeaseSleep (no receive can have used it
// yet). An error is logged, never returned: the budget's bookkeeping
// never changes an item's outcome.
func (p *Pacer) Settle(ctx context.Context, log *slog.Logger, l *Lease) {
	t := l.tokens
	if t.key == "" {
		return
	}
	l.tokens = tokenBooking{}
	now := p.now()
	if t.calls == 0 && (t.booked == 0 || t.carried && !t.start.After(now.Add(pace.LeaseSleep))) {
		return // nothing to give back, or a receive may have used it
	}
	if err := SettleTokens(context.WithoutCancel(ctx), p.Store, t.key, t.budget, t.start, t.booked, t.used, t.calls, now); err != nil {
		log.WarnContext(ctx, "token budget not settled; the key is off by this unit's estimate", "token_key", t.key, "used", t.used, "booked_ms", t.booked.Milliseconds(), "error", err)
	}
}

// Hold readies the pacing c carries for a unit that waits for its
// batch's pause to end: its request lease or adaptive place is dropped
// (stale by the time the unit comes back, and leased again then
// anyway); its token booking is dropped when it starts within
// pace.LeaseSleep of now — passed, or too near to wait for — and kept
// when it starts later, and Hold then returns that start (zero: none).
// The caller sends the unit back by then (HoldWait), so that, the pause
// ended, it runs at its booking, and, still paused, it drops it then.
// A dropped booking is not given back: its time stays taken on its key,
// and the unit books again when its batch runs, behind what the key has
// booked then. Kept, a booking passed while its batch waited was spent
// as the unit came back, with those of every other unit the pause held
// (the flow test bed: 200 items of 500 tokens on 500 tokens/s, every
// item failing once so that the batch paused on an outage again and
// again, went to 8,500–13,000 tokens in the busiest second, 29,500–46,500
// with max_concurrency 3; docs/adr/0035). A give-back would move every
// booking of the key (its drift), those carried before it too, and the
// units of other batches, or of this batch's other tracks, that carry
// one would start together (tried: 7 runs in 20 of that test went
// 15–72 % over the budget in their busiest minute).
func Hold(c Carried, now time.Time) time.Time {
	c.SetLeaseAt(time.Time{})
	c.SetLeasePos(0)
	c.SetLeaseLead(0)
	start, _, _ := c.TokensCarried()
	if start.IsZero() || start.After(now.Add(pace.LeaseSleep)) {
		return start
	}
	c.SetTokensCarried(time.Time{}, 0, 0)
	return time.Time{}
}

// Overdue readies the token bookings the units cs carry when they come
// back late for a reason that is not the queue's lag (a track received
// again: its holder died, or its lease lapsed; docs/adr/0035). A booking
// whose start, moved by the debts settled on its key since it was
// booked, is over pace.LeaseSleep before now is made to start now, at the
// key's drift now (one read of its row), with nothing booked (spacing
// 0). Such a unit waits for the debts settled on the key after that read
// (TakeTokens moves it by them), calls, and is settled after the call as
// a debt of all its tokens (SettleTokens, nothing booked), which moves
// the key's schedule, and every booking after it, later by their time at
// the budget. The overdue units of one delivery so run one after another
// at the budget, each moving the rest of the key out of its way; spent
// as booked they came at once on top of the key's schedule (the flow
// test bed, a 30,000 tokens/min key, one track message in four lost
// once: 41,000 tokens in the busiest minute; since, 21,500). Booked
// again instead, each waited behind the key's backlog and its own passed
// bookings, and with one track message in four lost the batch did not
// end. The passed booking's time stays taken: a lost delivery costs its
// units' time at the budget once more. Nothing changes when b has no
// token budget or no unit carries a booking (no read), or when the row
// cannot be read (the error is answered; the bookings are then spent as
// they come).
func (p *Pacer) Overdue(ctx context.Context, b ledger.Batch, cs []Carried) error {
	if b.Rate == nil || !b.Rate.Budgeted() {
		return nil
	}
	if !slices.ContainsFunc(cs, func(c Carried) bool { at, _, _ := c.TokensCarried(); return !at.IsZero() }) {
		return nil
	}
	g, err := p.Store.ReadTokens(ctx, b.Rate.KeyOf(b.ID))
	if err != nil {
		return err
	}
	now := p.now()
	passed := now.Add(-pace.LeaseSleep)
	for _, c := range cs {
		// Its start moved by the debts settled since it was booked.
		if at, _, drift := c.TokensCarried(); !at.IsZero() && at.Add(g.Drift-drift).Before(passed) {
			c.SetTokensCarried(now, 0, g.Drift)
		}
	}
	return nil
}

// HoldWait is how long a held unit waits (Hold): wait, its pause's, or
// less when it keeps a token booking starting at start, so that it
// comes back pace.LeaseSleep/2 before it.
func HoldWait(wait time.Duration, start, now time.Time) time.Duration {
	if start.IsZero() {
		return wait
	}
	return min(wait, max(start.Sub(now)-pace.LeaseSleep/2, 0))
}

// probe runs a paused batch's probe (Lease.Probe) off its rate's
// schedule: its one call is not leased or booked, so that a probe does
// not wait behind what the key has booked (up to TokenHorizon ahead) and
// keep the batch paused long after its downstream is back; the pacing
// its unit carried is dropped (its time stays taken). Under a token
// budget its tokens are settled after the call as a debt (Settle: the
// key's schedule moves later by their time at the budget); one request
// a check goes past a request rate. That is per paused batch: N batches
// paused on one key probe N calls a check beside what the key booked.
func (p *Pacer) probe(b ledger.Batch, c Carried, l *Lease) {
	c.SetLeaseAt(time.Time{})
	c.SetLeasePos(0)
	c.SetLeaseLead(0)
	c.SetTokensCarried(time.Time{}, 0, 0)
	if b.Rate.Budgeted() {
		l.tokens = tokenBooking{key: b.Rate.KeyOf(b.ID), budget: b.Rate.TokenBudget(), start: p.now()}
	}
}

// Observe counts a call of b's downstream key started at start under l
// (paced: at a place leased on the key's adaptive row), for a batch with
// no rate, and applies a throttled answer (err) to the key's adaptive
// row (Adapts.Observe), reporting whether the downstream throttled it. A
// paced call whose throttled answer wrote the row (its cut, or its
// hold moved) makes l keep the unit's place (KeepPlace). A failed write
// is logged, never the item's: bulkrun's pacing never changes an item's
// outcome.
func (p *Pacer) Observe(ctx context.Context, log *slog.Logger, b ledger.Batch, start time.Time, l *Lease, err error) bool {
	if b.Rate != nil {
		return false
	}
	key := DownstreamKey(b)
	now := p.now()
	paced := l.Paced()
	a, cut, oerr := p.adapts().Observe(context.WithoutCancel(ctx), p.Store, key, start, now, paced, err)
	switch {
	case oerr != nil:
		log.WarnContext(ctx, "downstream throttled; its adaptive pace not written", "downstream_key", key, "error", pipeline.ErrorText(oerr))
	case cut:
		kept := paced && l.placed
		if kept {
			l.keep.Store(true)
		}
		// Which way the limit climbs back (slow start, and where it ends)
		// is what tells a cycle of slow starts from a limit held at its
		// downstream's pace.
		log.WarnContext(ctx, "downstream throttled; its key is paced", "downstream_key", key, "limit_per_s", a.LimitAt(now),
			"hold_ms", max(a.Hold.Sub(now), 0).Milliseconds(), "slow_start", a.Slow, "slow_start_to", a.Thresh, "place_kept", kept)
	}
	_, throttled := DownstreamThrottle(err)
	p.adapts().answered(key, throttled)
	return throttled
}

// Resume ramps b's downstream back up as b resumes after its outage
// pause (Adapts.Resume): its units that waited come back spread, not at
// once. A batch with a rate is paced by it already; a failed write
// leaves the units unpaced, the unpause standing.
func (p *Pacer) Resume(ctx context.Context, log *slog.Logger, b ledger.Batch) {
	if b.Rate != nil {
		return
	}
	key := DownstreamKey(b)
	if _, _, err := p.adapts().Resume(ctx, p.Store, key, p.now()); err != nil {
		log.WarnContext(ctx, "adaptive pace not restarted; the resumed units run unpaced", "downstream_key", key, "error", pipeline.ErrorText(err))
	}
}
