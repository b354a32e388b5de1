package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pacer"
)

// Token budgets (api.Rate.TokensPerSecond / TokensPerMinute,
// docs/adr/0035): a key's budget is a GCRA schedule on its token row, as
// a request rate is on its bucket rows, but what a call uses is known only
// once it answered. So a unit books before its take what its calls are
// expected to use (shared/pacer: its items × the key's tokens per call
// so far), waits for the booking's start as for a request lease (slept
// up to pace.LeaseSleep, else carried on its message or in its track),
// and settles after its calls what they reported (api.TokensCostName)
// less what it booked: a debt moves the row's Next later, an
// over-booking gives the time back. A unit that does not run after
// booking (its request lease carried, no slot, another delivery's lease,
// every item already recorded) gives its booking back. A settle lost
// with its invocation leaves the key off by that unit's estimate.

// tokenBooking is a unit's token booking: the key, its budget (tokens a
// second), the time it booked, and once its calls ended what they used.
type tokenBooking struct {
	key    string
	budget float64
	start  time.Time
	booked time.Duration
	used   float64
	calls  int
}

// leaseTokens books m's expected use of b's token budget before its take
// (shared/pacer), or uses the booking m carries. It returns 0 once the
// booking starts (after a sleep of at most pace.LeaseSleep), or how long
// the unit waits first: for the booking it then carries, or, when none
// could be booked, before booking again.
func (w *Worker) leaseTokens(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage) (time.Duration, error) {
	budget := b.Rate.TokenBudget()
	key := b.Rate.KeyOf(b.ID)
	now := w.Clock.Now()
	start, booked, drift := m.tokensCarried()
	m.setTokensCarried(time.Time{}, 0, 0) // a booking is used once
	late := start
	if !start.IsZero() {
		// Moved by the debts (later) and give-backs (earlier) settled
		// since it was booked; moved earlier than now, it starts now.
		s, d, err := pacer.Shifted(ctx, w.Store, key, start, drift)
		if err != nil {
			m.setTokensCarried(start, booked, drift) // still carried
			return 0, err
		}
		start, drift = s, d
		if start.After(late) {
			late = start
		}
	}
	if !late.IsZero() && now.After(late.Add(pace.LeaseGrace)) {
		// Stale: its calls would bunch with later bookings'. What remains
		// of it is given back (a settle of no use), and it books again.
		log.InfoContext(ctx, "token booking stale; given back and booked again", "late_ms", now.Sub(start).Milliseconds())
		w.settleTokens(ctx, log, &unitMessage{tokens: tokenBooking{key: key, budget: budget, start: start, booked: booked}})
		start = time.Time{}
	}
	if start.IsZero() {
		bk, err := pacer.BookTokens(ctx, w.Store, key, len(m.Items), budget, now)
		if err != nil {
			return 0, err
		}
		if !bk.Granted {
			log.InfoContext(ctx, "token budget booked ahead; waiting to book", "token_key", key, "retry_in_ms", bk.Wait.Milliseconds())
			return bk.Wait, nil
		}
		start, booked, drift = bk.Start, bk.Spacing, bk.Drift
	}
	wait := start.Sub(w.Clock.Now())
	if wait > pace.LeaseSleep {
		m.setTokensCarried(start, booked, drift)
		return wait, nil
	}
	m.tokens = tokenBooking{key: key, budget: budget, start: start, booked: booked}
	if wait > 0 {
		w.sleep(ctx, wait)
	}
	return 0, nil
}

// tokensCarried is the token booking m carries: its start (zero: none),
// the time it booked and the key's drift when it booked.
func (m *unitMessage) tokensCarried() (time.Time, time.Duration, time.Duration) {
	at, booked, drift := m.ref.TokensAtUs, m.ref.TokensUs, m.ref.TokensDrift
	if m.track == nil && m.tokensAt != nil {
		at, booked, drift = *m.tokensAt, *m.tokensBooked, *m.tokensDrift
	}
	if at == 0 {
		return time.Time{}, 0, 0
	}
	return time.UnixMicro(at).UTC(), time.Duration(booked) * time.Microsecond, time.Duration(drift) * time.Microsecond
}

// setTokensCarried makes m carry a token booking starting at t (zero:
// none) of booked, made at the key's drift.
func (m *unitMessage) setTokensCarried(t time.Time, booked, drift time.Duration) {
	var at, us, dr int64
	if !t.IsZero() {
		at, us, dr = t.UnixMicro(), booked.Microseconds(), drift.Microseconds()
	}
	if m.track != nil || m.tokensAt == nil {
		m.ref.TokensAtUs, m.ref.TokensUs, m.ref.TokensDrift = at, us, dr
		return
	}
	*m.tokensAt, *m.tokensBooked, *m.tokensDrift = at, us, dr
}

// tokensRan records what the unit's started calls reported under
// api.TokensCostName, for its settle.
func (m *unitMessage) tokensRan(runs []*itemRun) {
	if m.tokens.key == "" {
		return
	}
	for _, r := range runs {
		if r.started {
			m.tokens.calls++
			m.tokens.used += r.cost[api.TokensCostName]
		}
	}
}

// settleTokens writes m's token booking's settle: what its calls used
// less what it booked (all of it given back when none ran). An error is
// logged, never returned: the budget's bookkeeping never changes an
// item's outcome.
func (w *Worker) settleTokens(ctx context.Context, log *slog.Logger, m *unitMessage) {
	t := m.tokens
	if t.key == "" {
		return
	}
	m.tokens = tokenBooking{}
	if err := pacer.SettleTokens(context.WithoutCancel(ctx), w.Store, t.key, t.budget, t.start, t.booked, t.used, t.calls, w.Clock.Now()); err != nil {
		log.WarnContext(ctx, "token budget not settled; the key is off by this unit's estimate", "token_key", t.key, "used", t.used, "booked_ms", t.booked.Milliseconds(), "error", err)
	}
}
