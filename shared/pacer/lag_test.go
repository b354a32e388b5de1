package pacer

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// TestLagTracksHowLateUnitsComeBack guards the lead a unit waiting for
// its rate lease is sent with (Lead): pace.LeaseSleep/2 while its key's
// units come back on time; raised toward a lateness seen often (most
// returns then on time), not to one outlier's; lowered again once they
// come back on time; never past MaxLag; per key.
func TestLagTracksHowLateUnitsComeBack(t *testing.T) {
	t.Cleanup(Forget)
	Forget()
	if got := Lead("k"); got != pace.LeaseSleep/2 {
		t.Fatalf("lead before any return %v, want %v", got, pace.LeaseSleep/2)
	}
	for range 200 {
		Arrived("k", 4*time.Second)
	}
	if got := Lag("k"); got < 3900*time.Millisecond || got > 4*time.Second {
		t.Errorf("lag after returns 4 s late %v, want ≈ 4 s", got)
	}
	if got := Lag("other"); got != 0 {
		t.Errorf("another key's lag %v, want 0", got)
	}
	Arrived("k", time.Minute) // one outlier
	if got := Lag("k"); got > 20*time.Second {
		t.Errorf("lag after one return a minute late %v, want it moved a quarter of the way (≤ 20 s)", got)
	}
	for range 400 {
		Arrived("k", -500*time.Millisecond)
	}
	if got := Lag("k"); got != 0 {
		t.Errorf("lag after returns on time %v, want 0", got)
	}
	for range 200 {
		Arrived("k", time.Hour)
	}
	if got := Lag("k"); got != MaxLag {
		t.Errorf("lag after returns an hour late %v, want MaxLag %v", got, MaxLag)
	}
}

// TestUnitWokenBeforeItsStartByTheTakesTime guards a unit whose take is
// slow (a store taking 700 ms, more than pace.LeaseGrace, between the
// lease's sleep and the first call): at first its calls are late (given
// back); within a few units the process wakes them the take's time
// before their start (TakeLead, at most MaxTakeLead), so that the first
// call comes within the grace, never before its start (WaitCall sleeps
// the rest), and a fast take lowers the lead again.
func TestUnitWokenBeforeItsStartByTheTakesTime(t *testing.T) {
	t.Cleanup(Forget)
	Forget()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	st := &fakeRows{}
	p := &Pacer{Store: st, Clock: at{&now}, Sleep: func(_ context.Context, d time.Duration) { now = now.Add(d) }}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{RequestsPerSecond: 10}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	unit := func(take time.Duration) (late bool, callAt time.Time) {
		t.Helper()
		st.start = now.Add(1500 * time.Millisecond)
		var c carried
		var l Lease
		if wait, err := p.Unit(ctx, log, b, &c, 1, false, &l); err != nil || wait != 0 {
			t.Fatalf("lease 1.5 s ahead: wait %v, err %v", wait, err)
		}
		now = now.Add(take)
		if !p.WaitCall(ctx, &l, 0, 0) {
			t.Fatal("WaitCall: the call may not start")
		}
		return l.Late(0, now), now
	}
	if late, _ := unit(700 * time.Millisecond); !late {
		t.Fatal("the first unit with a 700 ms take: not late; want late (nothing learned yet)")
	}
	lateCount := 0
	for range 20 {
		late, at := unit(700 * time.Millisecond)
		if at.Before(st.start) {
			t.Fatalf("a call at %v, before its lease's start %v", at, st.start)
		}
		if late {
			lateCount++
		}
	}
	if lateCount > 3 {
		t.Errorf("%d of 20 units late after the first, want ≤ 3", lateCount)
	}
	if got := TakeLead(); got < 200*time.Millisecond || got > MaxTakeLead {
		t.Errorf("TakeLead %v, want at least the take's time less the grace and at most %v", got, MaxTakeLead)
	}
	for range 100 {
		unit(0)
	}
	if got := TakeLead(); got > 10*time.Millisecond {
		t.Errorf("TakeLead after fast takes %v, want ≈ 0", got)
	}
	for range 100 {
		unit(5 * time.Second)
	}
	if got := TakeLead(); got != MaxTakeLead {
		t.Errorf("TakeLead after 5 s takes %v, want MaxTakeLead %v", got, MaxTakeLead)
	}
}

// horizonRows is a fakeRows whose rate rows grant only within the
// lease's Horizon, as the store does, and record it.
type horizonRows struct {
	fakeRows
	horizon time.Duration
}

func (r *horizonRows) LeaseRate(ctx context.Context, l pace.RateLease) (pace.RateGrant, error) {
	r.horizon = l.Horizon
	if r.err == nil && r.start.Sub(l.Now) > l.Horizon {
		r.leases++
		return pace.RateGrant{Next: r.start}, nil
	}
	return r.fakeRows.LeaseRate(ctx, l)
}

// TestReletLeasesALateCallAgain guards a call late for its place in its
// unit's rate lease (Lease.Late): leased again from now, one request,
// when the key's row allows it within pace.LeaseSleep (the row asked
// with that horizon, so that a row booked further books nothing), slept
// to, and run (true); given back (false) when the row is booked
// further (once seen so, with no write), past Until or the deadline's
// margin (the row asked only within them, so no place is booked and
// lost), on a store error, or for a unit with no request rate or on an
// adaptive place.
func TestReletLeasesALateCallAgain(t *testing.T) {
	t.Cleanup(Forget)
	Forget()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	st := &horizonRows{}
	var slept time.Duration
	p := &Pacer{Store: st, Clock: at{&now}, Sleep: func(_ context.Context, d time.Duration) { slept += d; now = now.Add(d) }}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{RequestsPerSecond: 10}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	l := Lease{Leased: now.Add(-2 * time.Second)}
	if !l.Late(0, now) {
		t.Fatal("a lease 2 s past its start: not late")
	}
	st.start = now.Add(300 * time.Millisecond)
	if !p.Relet(ctx, log, b, &l, 0, 0) || slept != 300*time.Millisecond || st.horizon != pace.LeaseSleep || st.spacing != 100*time.Millisecond {
		t.Fatalf("row free in 300 ms: slept %v, horizon %v, spacing %v; want it leased again (one request, horizon LeaseSleep) and slept 300 ms", slept, st.horizon, st.spacing)
	}
	slept = 0
	st.start = now.Add(5 * time.Second)
	leases := st.leases
	if p.Relet(ctx, log, b, &l, 0, 0) || slept != 0 || st.leases != leases+1 {
		t.Errorf("row booked 5 s ahead: leased again (slept %v, %d writes), want given back after one refused write", slept, st.leases-leases)
	}
	if p.Relet(ctx, log, b, &l, 0, 0) || st.leases != leases+1 {
		t.Errorf("row seen booked 5 s ahead: %d more writes, want given back with none", st.leases-leases-1)
	}
	Forget()
	st.start = now.Add(time.Second)
	l.Until = now.Add(500 * time.Millisecond)
	if p.Relet(ctx, log, b, &l, 0, 0) || slept != 0 || st.horizon != 500*time.Millisecond {
		t.Errorf("a start past Until: leased again, or asked with horizon %v; want given back, asked within Until (500ms)", st.horizon)
	}
	Forget() // (the row was seen booked past 500 ms just now)
	dctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if p.Relet(dctx, log, b, &l, 0, time.Hour-200*time.Millisecond) || st.horizon > 200*time.Millisecond {
		t.Errorf("a deadline 200 ms past the margin: leased again, or asked with horizon %v; want asked within it", st.horizon)
	}
	leases = st.leases
	if p.Relet(ctx, log, b, &Lease{Leased: l.Leased, Until: now.Add(-time.Second)}, 0, 0) || st.leases != leases {
		t.Error("Until passed: asked the store, want given back with no write")
	}
	l.Until = time.Time{}
	st.err = errors.New("throttled by DynamoDB")
	if p.Relet(ctx, log, b, &l, 0, 0) {
		t.Error("the store failing: leased again, want given back")
	}
	st.err = nil
	tokensOnly := b
	tokensOnly.Rate = &api.Rate{TokensPerSecond: 100}
	placed := Lease{Leased: l.Leased, placed: true}
	leases = st.leases
	if p.Relet(ctx, log, tokensOnly, &l, 0, 0) || p.Relet(ctx, log, b, &placed, 0, 0) || st.leases != leases {
		t.Error("a token budget alone, or an adaptive place: leased again, want given back with no lease")
	}
}

// tokenRows is a fakeRows whose token rows grant the booking start it is
// told.
type tokenRows struct {
	fakeRows
	tokens time.Time
}

func (r *tokenRows) LeaseTokens(_ context.Context, l pace.TokenLease) (pace.TokenGrant, error) {
	return pace.TokenGrant{RateGrant: pace.RateGrant{Granted: true, Start: r.tokens, Next: r.tokens.Add(l.Spacing)}}, nil
}

// TestWokenEarlyCallWaitsForItsTokens guards a unit under a rate and a
// token budget, woken TakeLead before its work may start: its message
// carries a request lease starting at S, its tokens are booked from
// S + 400 ms (within pace.LeaseGrace, so the lease is not stale), and
// the process has learned a take of MaxTakeLead. Its first call starts
// at S + 400 ms, not at S, before the tokens it spends; and it is late
// past S + pace.LeaseGrace, its request lease's window, not the
// booking's.
func TestWokenEarlyCallWaitsForItsTokens(t *testing.T) {
	t.Cleanup(Forget)
	Forget()
	for range 100 {
		Took(5 * time.Second) // TakeLead at MaxTakeLead
	}
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	s := now.Add(1500 * time.Millisecond)
	st := &tokenRows{tokens: s.Add(400 * time.Millisecond)}
	p := &Pacer{Store: st, Clock: at{&now}, Sleep: func(_ context.Context, d time.Duration) { now = now.Add(d) }}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{RequestsPerSecond: 10, TokensPerSecond: 1000}
	c := carried{at: s, lead: time.Second}
	var l Lease
	if wait, err := p.Unit(context.Background(), slog.New(slog.DiscardHandler), b, &c, 1, false, &l); err != nil || wait != 0 {
		t.Fatalf("carried lease 1.5 s ahead, tokens 1.9 s ahead: wait %v, err %v", wait, err)
	}
	if st.leases != 0 {
		t.Fatalf("%d request leases, want 0 (the carried lease is fresh)", st.leases)
	}
	if !p.WaitCall(context.Background(), &l, 0, 0) {
		t.Fatal("WaitCall: the call may not start")
	}
	if now.Before(st.tokens) {
		t.Errorf("first call at S%+v, before its tokens' booking at S+400ms", now.Sub(s))
	}
	if l.Late(0, now) {
		t.Errorf("first call at S%+v reported late", now.Sub(s))
	}
	// Lateness counts from the request lease, not the booking: a call at
	// S + 600 ms is past S + pace.LeaseGrace, outside the window the
	// rate's bound counts on (pace.MaxCallsInWindow), and is late.
	if late := s.Add(600 * time.Millisecond); !l.Late(0, late) {
		t.Errorf("a call at S%+v not late; want late past S+%v", late.Sub(s), pace.LeaseGrace)
	}
}
