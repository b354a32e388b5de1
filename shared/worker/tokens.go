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

// Token budgets (api.Rate.TokensPerSecond / TokensPerMinute): a unit
// books its calls' expected use before its take and settles what they
// reported after (shared/pacer, docs/adr/0035). A booking this delivery
// made and did not run is given back whole; one that came with the
// message only while wholly ahead of now + pace.LeaseSleep (no receive
// can have used it); a message received again books anew.

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

// leaseTokens books m's expected use of b's token budget before its take
// (shared/pacer), or takes the booking m carries, moved by the drift
// settled since. It returns the booking's start, at most pace.LeaseSleep
// ahead (m then holds the booking, settled by runUnit), or how long the
// unit waits first: for the booking it then carries, or, when none could
// be booked, before booking again.
func (w *Worker) leaseTokens(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, redelivered bool) (time.Time, time.Duration, error) {
	budget := b.Rate.TokenBudget()
	key := b.Rate.KeyOf(b.ID)
	now := w.Clock.Now()
	start, booked, drift := m.tokensCarried()
	m.setTokensCarried(time.Time{}, 0, 0) // a booking is used once
	carried := !start.IsZero() && !redelivered
	if !carried {
		start = time.Time{}
	}
	bk, err := pacer.TakeTokens(ctx, w.Store, key, len(m.Items), budget, pacer.Booking{Start: start, Spacing: booked, Drift: drift}, now)
	if err != nil {
		if carried {
			m.setTokensCarried(start, booked, drift) // still carried
		}
		return time.Time{}, 0, err
	}
	if !bk.Granted {
		log.InfoContext(ctx, "token budget booked ahead; waiting to book", "token_key", key, "retry_in_ms", bk.Wait.Milliseconds())
		return time.Time{}, bk.Wait, nil
	}
	start, booked, drift = bk.Start, bk.Spacing, bk.Drift
	m.tokens = tokenBooking{key: key, budget: budget, start: start, booked: booked, drift: drift, carried: carried}
	if wait := start.Sub(w.Clock.Now()); wait > pace.LeaseSleep {
		m.carryTokens()
		return time.Time{}, wait, nil
	}
	return start, 0, nil
}

// carryTokens moves m's token booking onto its message (or track unit).
func (m *unitMessage) carryTokens() {
	if t := m.tokens; t.key != "" {
		m.setTokensCarried(t.start, t.booked, t.drift)
		m.tokens = tokenBooking{}
	}
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

// tokensRan records the unit's calls' tokens (pacer.Counted) for its
// settle; an attempt that never called the pipeline (a bad row; a stop
// or a refusal: no time, no cost) is not a call.
func (m *unitMessage) tokensRan(runs []*itemRun) {
	if m.tokens.key == "" {
		return
	}
	for _, r := range runs {
		if r.started && r.invalid == "" && (r.took > 0 || len(r.cost) > 0) {
			m.tokens.calls++
			m.tokens.used += pacer.Counted(r.cost[api.TokensCostName])
		}
	}
}

// settleTokens writes m's token booking's settle: what its calls used
// less what it booked. A booking of no calls is given back whole when
// this delivery made it, and when it came with the message only while it
// is wholly ahead of now + pace.LeaseSleep (no receive can have used it
// yet). An error is logged, never returned: the budget's bookkeeping
// never changes an item's outcome.
func (w *Worker) settleTokens(ctx context.Context, log *slog.Logger, m *unitMessage) {
	t := m.tokens
	if t.key == "" {
		return
	}
	m.tokens = tokenBooking{}
	now := w.Clock.Now()
	if t.calls == 0 && t.carried && !t.start.After(now.Add(pace.LeaseSleep)) {
		return
	}
	if err := pacer.SettleTokens(context.WithoutCancel(ctx), w.Store, t.key, t.budget, t.start, t.booked, t.used, t.calls, now); err != nil {
		log.WarnContext(ctx, "token budget not settled; the key is off by this unit's estimate", "token_key", t.key, "used", t.used, "booked_ms", t.booked.Milliseconds(), "error", err)
	}
}
