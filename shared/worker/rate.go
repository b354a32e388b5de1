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

// Rates, token budgets and the adaptive pace (api.Rate, docs/adr/0031,
// 0035, 0036) are shared/pacer's: a unit leases its calls before its
// take (pacer.Pacer.Unit), so that waiting uses no attempt, and settles
// its token booking once it ends (pacer.Pacer.Settle). What stays here is
// the item engine's part: where a unit's carried lease lives (its
// message, or its track's retry: unitMessage's pacer.Carried) and how it
// waits for it (rateWait).

// pacing is a pacer.Pacer on w's Store, Clock and Sleep, with what this
// process knows of its downstream keys' adaptive rows (w.adapts, made on
// first use; a Worker copied before that keeps its own).
func (w *Worker) pacing() *pacer.Pacer {
	return &pacer.Pacer{Store: w.Store, Clock: w.Clock, Sleep: w.Sleep, Adapts: made(&w.adapts)}
}

// LeaseAt is the start of the rate lease m carries (zero: none).
func (m *unitMessage) LeaseAt() time.Time {
	us := m.ref.RateAtUs
	if m.track == nil && m.rateAt != nil {
		us = *m.rateAt
	}
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// SetLeaseAt makes m carry a lease starting at t (zero: none).
func (m *unitMessage) SetLeaseAt(t time.Time) {
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

// LeaseLead is how long before its lease's start m was sent to come
// back (0: not said).
func (m *unitMessage) LeaseLead() time.Duration {
	ms := m.ref.RateLeadMs
	if m.track == nil && m.rateLead != nil {
		ms = *m.rateLead
	}
	return time.Duration(ms) * time.Millisecond
}

// SetLeaseLead makes m say it was sent to come back d before its lease's
// start.
func (m *unitMessage) SetLeaseLead(d time.Duration) {
	if m.track != nil || m.rateLead == nil {
		m.ref.RateLeadMs = d.Milliseconds()
		return
	}
	*m.rateLead = d.Milliseconds()
}

// LeasePos is the position of the adaptive lease m carries (with its
// start, LeaseAt).
func (m *unitMessage) LeasePos() float64 {
	if m.track == nil && m.ratePos != nil {
		return *m.ratePos
	}
	return m.ref.RatePos
}

// SetLeasePos makes m carry an adaptive lease at position p.
func (m *unitMessage) SetLeasePos(p float64) {
	if m.track != nil || m.ratePos == nil {
		m.ref.RatePos = p
		return
	}
	*m.ratePos = p
}

// rateWait makes m's unit of b wait wait for its rate: in its track, due
// its key's lead (pacer.Lead: pace.LeaseSleep/2 and how late its units
// have come back) before its lease starts; else sent again as a new
// message delayed by whole seconds to arrive that lead before it, this
// delivery acknowledged (no attempt, no receive counted), bounded by
// ledger.MaxResends as a slot wait is.
func (w *Worker) rateWait(ctx context.Context, log *slog.Logger, d Delivery, b ledger.Batch, m *unitMessage, wait time.Duration) bool {
	lead := pace.LeaseSleep / 2
	if b.Rate != nil {
		lead = pacer.Lead(b.Rate.KeyOf(b.ID))
	}
	early := wait - lead
	if at, _, _ := m.TokensCarried(); !m.LeaseAt().IsZero() || !at.IsZero() {
		early = early.Truncate(time.Second)
	}
	m.SetLeaseLead(0)
	if !m.LeaseAt().IsZero() {
		m.SetLeaseLead(wait - max(early, 0))
	}
	if m.track != nil {
		return m.track.park(m, max(early, 0), m.ref.Requeued)
	}
	return w.resendWaiting(ctx, log, d, m, max(early, 0), "rate")
}

// TokensCarried is the token booking m carries: its start (zero: none),
// the time it booked and the key's drift when it booked.
func (m *unitMessage) TokensCarried() (time.Time, time.Duration, time.Duration) {
	at, booked, drift := m.ref.TokensAtUs, m.ref.TokensUs, m.ref.TokensDrift
	if m.track == nil && m.tokensAt != nil {
		at, booked, drift = *m.tokensAt, *m.tokensBooked, *m.tokensDrift
	}
	if at == 0 {
		return time.Time{}, 0, 0
	}
	return time.UnixMicro(at).UTC(), time.Duration(booked) * time.Microsecond, time.Duration(drift) * time.Microsecond
}

// SetTokensCarried makes m carry a token booking starting at t (zero:
// none) of booked, made at the key's drift.
func (m *unitMessage) SetTokensCarried(t time.Time, booked, drift time.Duration) {
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

// tokensRan records the unit's calls' tokens (pacer.Lease.Called) for
// its settle; an attempt that never called the pipeline (a bad row; a stop
// or a refusal: no time, no cost) is not a call.
func (m *unitMessage) tokensRan(runs []*itemRun) {
	for _, r := range runs {
		if r.started && r.invalid == "" && (r.took > 0 || len(r.cost) > 0) {
			m.lease.Called(r.cost[api.TokensCostName])
		}
	}
}
