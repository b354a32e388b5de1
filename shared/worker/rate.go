package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pacer"
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
		return 0, nil
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
	start := m.leaseAt()
	m.setLeaseAt(time.Time{}) // a lease is used once
	if !start.IsZero() && pacer.Later(now, from).After(start.Add(pace.LeaseGrace)) {
		// Stale, or its token booking moved past it: leased again from then.
		log.InfoContext(ctx, "rate lease stale; leased again", "late_ms", pacer.Later(now, from).Sub(start).Milliseconds())
		start = time.Time{}
	}
	if start.IsZero() {
		key := b.Rate.KeyOf(b.ID)
		bk, err := pacer.LeaseRequests(ctx, w.Store, key, b.Rate.RequestsPerSecond, len(m.Items), now, from)
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
