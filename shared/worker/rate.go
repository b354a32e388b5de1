package worker

import (
	"context"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Rates (api.Rate, shared/pace, docs/adr/0031): a unit of a batch with a
// rate leases its calls (one request per item) from one bucket row of
// the rate's key before its take, so that waiting uses no attempt. A
// lease starting within pace.LeaseSleep is slept in the invocation; a
// later one (booked up to pace.LeaseHorizon ahead) is carried by the
// unit, which waits for it on the queue (a message sent again, delayed)
// or in its track, and runs at its start without leasing again. A key
// whose schedule is booked past the horizon books nothing: the unit waits
// until it would not be, and leases then.

// paceUnit leases m's calls when b has a rate: its token budget's
// booking first (tokens.go), then its requests from the booking's start
// on, so that a unit waiting for tokens holds no request lease and its
// request lease never starts before its tokens. It returns 0 when the
// unit may be taken now (after a sleep of at most pace.LeaseSleep until
// both have started), or how long it waits first (what it booked carried
// in m). redelivered: this delivery is the same message received again,
// whose token booking another receive may have used (it books anew).
func (w *Worker) paceUnit(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, redelivered bool) (time.Duration, error) {
	if b.Rate == nil {
		return w.paceAdaptive(ctx, log, b, m, redelivered)
	}
	now := w.Clock.Now()
	from := now // when the unit's tokens allow its calls
	if b.Rate.Budgeted() {
		at, wait, err := w.leaseTokens(ctx, log, b, m, redelivered)
		if err != nil || wait > 0 {
			m.setLeaseAt(time.Time{}) // a unit waiting for tokens holds no request lease
			return wait, err
		}
		from = at
	}
	if b.Rate.RequestsPerSecond <= 0 {
		if wait := from.Sub(w.Clock.Now()); wait > 0 {
			w.sleep(ctx, wait)
		}
		return 0, nil
	}
	key := b.Rate.KeyOf(b.ID)
	return w.leaseCalls(ctx, log, m, key, now, from, func() (pacer.Booking, error) {
		return pacer.LeaseRequests(ctx, w.Store, key, b.Rate.RequestsPerSecond, len(m.Items), now, from)
	})
}

// paceAdaptive paces m's calls when b has no rate (docs/adr/0036): not
// at all while its downstream key is not paced (pace.Adapt.Paced, the
// row read at most once a second per process); else it leases the next
// positions in the key's line (pacer.Adapts.LeaseAdaptive) and waits until they
// are due (pace.Adapt.Due) and the key's hold has passed: slept in the
// invocation within pace.LeaseSleep, else carried on m (its position and
// start) while it waits on the queue, its start worked out again from
// the row when it comes back. The row unread, the unit runs unpaced:
// bulkrun's pacing never stops an item.
func (w *Worker) paceAdaptive(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, redelivered bool) (time.Duration, error) {
	key := pacer.DownstreamKey(b)
	now := w.Clock.Now()
	a, err := w.adaptBook().Adapt(ctx, w.Store, key, now)
	if err != nil {
		log.WarnContext(ctx, "adaptive pace unread; the unit runs unpaced", "key", key, "error", pipeline.ErrorText(err))
		return 0, nil
	}
	// A place is carried by the message sent to wait for it, used once:
	// the same message received again (a retry's delay, a give-back,
	// another delivery holding the unit) leases anew.
	carried, pos := !m.leaseAt().IsZero() && !redelivered, m.leasePos()
	m.setLeaseAt(time.Time{}) // a lease is used once
	m.setLeasePos(0)
	if !a.Paced(now) {
		return 0, nil // not paced, or no longer: it runs now
	}
	if !carried {
		p, ok, row, err := w.adaptBook().LeaseAdaptive(ctx, w.Store, key, a, len(m.Items), now)
		if err != nil {
			return 0, err
		}
		if !ok {
			wait := pace.AdaptWait(mrand.Float64())
			log.InfoContext(ctx, "downstream's adaptive pace booked past its horizon; waiting to lease", "key", key, "retry_in_ms", wait.Milliseconds())
			return wait, nil
		}
		pos, a = p, row
	}
	start := pacer.Later(a.Due(pos, now), a.Hold)
	wait := start.Sub(w.Clock.Now())
	if wait > pace.LeaseSleep {
		wake := pacer.Later(a.Wake(pos, now), start)
		m.setLeaseAt(wake)
		m.setLeasePos(pos)
		return wake.Sub(w.Clock.Now()), nil
	}
	if wait > 0 {
		w.sleep(ctx, wait)
	}
	m.leased = start
	return 0, nil
}

// resumePace ramps b's downstream back up as b resumes after its outage
// pause (pacer.Adapts.Resume): its units that waited come back spread,
// not at once. A batch with a rate is paced by it already; a failed
// write leaves the units unpaced, the unpause standing.
func (w *Worker) resumePace(ctx context.Context, log *slog.Logger, b ledger.Batch) {
	if b.Rate != nil {
		return
	}
	key := pacer.DownstreamKey(b)
	if _, _, err := w.adaptBook().Resume(ctx, w.Store, key, w.Clock.Now()); err != nil {
		log.WarnContext(ctx, "adaptive pace not restarted; the resumed units run unpaced", "key", key, "error", pipeline.ErrorText(err))
	}
}

// adaptBooks guards the making of a Worker's Adapts.
var adaptBooks sync.Mutex

// adaptBook is what w knows of its downstream keys' adaptive rows, made
// on first use (a Worker copied before that keeps its own).
func (w *Worker) adaptBook() *pacer.Adapts {
	adaptBooks.Lock()
	defer adaptBooks.Unlock()
	if w.adapts == nil {
		w.adapts = &pacer.Adapts{}
	}
	return w.adapts
}

// leaseCalls leases m's calls of key with lease, from from on (zero or
// past: now), unless m carries a lease still fresh: it returns 0 when
// the unit may be taken now (after a sleep of at most pace.LeaseSleep
// until the lease and from have started), or how long it waits first
// (its lease carried in m, or none when the key is booked past the
// horizon).
func (w *Worker) leaseCalls(ctx context.Context, log *slog.Logger, m *unitMessage, key string, now, from time.Time, lease func() (pacer.Booking, error)) (time.Duration, error) {
	start := m.leaseAt()
	m.setLeaseAt(time.Time{}) // a lease is used once
	if !start.IsZero() && pacer.Later(now, from).After(start.Add(pace.LeaseGrace)) {
		// Stale, or its token booking moved past it: leased again from then.
		log.InfoContext(ctx, "rate lease stale; leased again", "late_ms", pacer.Later(now, from).Sub(start).Milliseconds())
		start = time.Time{}
	}
	if start.IsZero() {
		bk, err := lease()
		if err != nil {
			return 0, err
		}
		if !bk.Granted {
			log.InfoContext(ctx, "rate booked past the horizon; waiting to lease", "key", key, "retry_in_ms", bk.Wait.Milliseconds())
			return bk.Wait, nil
		}
		start = bk.Start
	}
	wait := pacer.Later(start, from).Sub(w.Clock.Now())
	if wait > pace.LeaseSleep {
		m.setLeaseAt(start)
		m.carryTokens() // the token booking waits with it
		return wait, nil
	}
	if wait > 0 {
		w.sleep(ctx, wait)
	}
	m.leased = start
	return 0, nil
}

// observeCall counts a call of b's downstream key started at start
// (paced: at a place leased on the key's adaptive row), for a batch with
// no rate, and applies a throttled answer (err) to the key's
// adaptive row (pacer.Adapts.Observe), reporting whether the downstream
// throttled it. A failed write is logged, never the item's: bulkrun's
// pacing never changes an item's outcome.
func (w *Worker) observeCall(ctx context.Context, log *slog.Logger, b ledger.Batch, start time.Time, paced bool, err error) bool {
	if b.Rate != nil {
		return false
	}
	key := pacer.DownstreamKey(b)
	now := w.Clock.Now()
	a, cut, oerr := w.adaptBook().Observe(context.WithoutCancel(ctx), w.Store, key, start, now, paced, err)
	switch {
	case oerr != nil:
		log.WarnContext(ctx, "downstream throttled; its adaptive pace not written", "key", key, "error", pipeline.ErrorText(oerr))
	case cut:
		log.WarnContext(ctx, "downstream throttled; its key is paced", "key", key, "limit_per_s", a.LimitAt(now), "hold_ms", max(a.Hold.Sub(now), 0).Milliseconds())
	}
	_, throttled := pacer.DownstreamThrottle(err)
	return throttled
}

// leaseLate reports whether a call of m's unit starting at now would
// start past its rate lease's start + pace.LeaseGrace (its item then
// waited for the invocation's other items, or a slow take): it is given
// back and leases again, so that late calls do not bunch with the calls
// of later leases.
func (m *unitMessage) leaseLate(now time.Time) bool {
	return !m.leased.IsZero() && now.After(m.leased.Add(pace.LeaseGrace))
}

// leaseAt is the start of the rate lease m carries (zero: none).
func (m *unitMessage) leaseAt() time.Time {
	us := m.ref.RateAtUs
	if m.track == nil && m.rateAt != nil {
		us = *m.rateAt
	}
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// setLeaseAt makes m carry a lease starting at t (zero: none).
func (m *unitMessage) setLeaseAt(t time.Time) {
	var us int64
	if !t.IsZero() {
		us = t.UnixMicro()
	}
	if m.track != nil || m.rateAt == nil {
		m.ref.RateAtUs = us
		return
	}
	*m.rateAt = us
}

// leasePos is the position of the adaptive lease m carries (with its
// start, leaseAt).
func (m *unitMessage) leasePos() float64 {
	if m.track == nil && m.ratePos != nil {
		return *m.ratePos
	}
	return m.ref.RatePos
}

// setLeasePos makes m carry an adaptive lease at position p.
func (m *unitMessage) setLeasePos(p float64) {
	if m.track != nil || m.ratePos == nil {
		m.ref.RatePos = p
		return
	}
	*m.ratePos = p
}

// sleep waits d on the worker's Sleep (a test's clock), or a timer, or
// until ctx ends.
func (w *Worker) sleep(ctx context.Context, d time.Duration) {
	if w.Sleep != nil {
		w.Sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// rateWait makes m's unit wait wait for its rate: in its track, due
// pace.LeaseSleep before its lease starts; else sent again as a new
// message delayed by whole seconds to arrive within pace.LeaseSleep of
// it, this delivery acknowledged (no attempt, no receive counted),
// bounded by ledger.MaxResends as a slot wait is.
func (w *Worker) rateWait(ctx context.Context, log *slog.Logger, d Delivery, m *unitMessage, wait time.Duration) bool {
	early := wait - pace.LeaseSleep/2
	if at, _, _ := m.tokensCarried(); !m.leaseAt().IsZero() || !at.IsZero() {
		early = (wait - pace.LeaseSleep/2).Truncate(time.Second)
	}
	if m.track != nil {
		return m.track.park(m, max(early, 0), m.ref.Requeued)
	}
	return w.resendWaiting(ctx, log, d, m, max(early, 0), "rate")
}
