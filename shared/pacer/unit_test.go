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
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// fakeRows is a pacing store whose rate rows grant the start it is told and
// whose adaptive rows are unpaced; it counts the leases and reads.
type fakeRows struct {
	start   time.Time     // the start LeaseRate grants
	spacing time.Duration // the last lease's
	leases  int
	reads   int
	err     error
}

func (r *fakeRows) LeaseRate(_ context.Context, l pace.RateLease) (pace.RateGrant, error) {
	r.leases++
	r.spacing = l.Spacing
	if r.err != nil {
		return pace.RateGrant{}, r.err
	}
	return pace.RateGrant{Granted: true, Start: r.start, Next: r.start.Add(l.Spacing)}, nil
}

func (r *fakeRows) LeaseTokens(context.Context, pace.TokenLease) (pace.TokenGrant, error) {
	return pace.TokenGrant{}, errors.New("no token budget here")
}

func (r *fakeRows) SettleTokens(context.Context, pace.TokenSettle) (pace.TokenGrant, error) {
	return pace.TokenGrant{}, errors.New("no token budget here")
}

func (r *fakeRows) ReadTokens(context.Context, string) (pace.TokenGrant, error) {
	return pace.TokenGrant{}, errors.New("no token budget here")
}

func (r *fakeRows) ReadAdapt(context.Context, string) (pace.Adapt, error) {
	r.reads++
	return pace.Adapt{}, nil
}

func (r *fakeRows) CutAdapt(context.Context, pace.AdaptCut) (pace.Adapt, bool, error) {
	return pace.Adapt{}, false, errors.New("not cut here")
}

func (r *fakeRows) LeaseAdapt(context.Context, pace.AdaptLease) (pace.AdaptGrant, error) {
	return pace.AdaptGrant{}, errors.New("not paced here")
}

// carried is a unit message's carried pacing.
type carried struct {
	at              time.Time
	pos             float64
	lead            time.Duration
	tokensAt        time.Time
	booked, drifted time.Duration
}

func (c *carried) LeaseAt() time.Time           { return c.at }
func (c *carried) SetLeaseAt(t time.Time)       { c.at = t }
func (c *carried) LeasePos() float64            { return c.pos }
func (c *carried) LeaseLead() time.Duration     { return c.lead }
func (c *carried) SetLeaseLead(d time.Duration) { c.lead = d }
func (c *carried) SetLeasePos(p float64)        { c.pos = p }
func (c *carried) TokensCarried() (time.Time, time.Duration, time.Duration) {
	return c.tokensAt, c.booked, c.drifted
}
func (c *carried) SetTokensCarried(t time.Time, booked, drift time.Duration) {
	c.tokensAt, c.booked, c.drifted = t, booked, drift
}

type at struct{ t *time.Time }

func (c at) Now() time.Time { return *c.t }

// TestUnitLeasesSleepsOrCarries guards a unit's request lease: a start
// within pace.LeaseSleep is slept in the invocation and run under
// (Lease.Leased); a later one is carried by the message, which comes
// back and runs at it without leasing again; a carried lease gone stale
// (past its start + pace.LeaseGrace) is leased again; a store error
// holds no lease; a batch with no rate whose key is not paced runs at
// once, leasing nothing.
func TestUnitLeasesSleepsOrCarries(t *testing.T) {
	t.Cleanup(Forget)
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	st := &fakeRows{}
	var slept time.Duration
	p := &Pacer{Store: st, Clock: at{&now}, Sleep: func(_ context.Context, d time.Duration) { slept += d }}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{RequestsPerSecond: 10}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	st.start = now.Add(time.Second)
	var c carried
	var l Lease
	if wait, err := p.Unit(ctx, log, b, &c, 1, false, &l); err != nil || wait != 0 || slept != time.Second || !l.Leased.Equal(st.start) || !c.at.IsZero() {
		t.Fatalf("a lease 1 s ahead: wait %v, err %v, slept %v, leased %v, carried %v; want it slept and run under", wait, err, slept, l.Leased, c.at)
	}
	if l.Late(0, st.start.Add(pace.LeaseGrace)) || !l.Late(0, st.start.Add(pace.LeaseGrace+time.Millisecond)) {
		t.Error("Late: want false up to the lease's start + LeaseGrace, true after")
	}

	slept, l = 0, Lease{}
	st.start = now.Add(10 * time.Second)
	if wait, err := p.Unit(ctx, log, b, &c, 1, false, &l); err != nil || wait != 10*time.Second || slept != 0 || !l.Leased.IsZero() || !c.at.Equal(st.start) {
		t.Fatalf("a lease 10 s ahead: wait %v, err %v, slept %v, leased %v, carried %v; want it carried, the unit waiting 10 s", wait, err, slept, l.Leased, c.at)
	}
	now = st.start.Add(-100 * time.Millisecond) // the message back, just before its start
	leases := st.leases
	if wait, err := p.Unit(ctx, log, b, &c, 1, false, &l); err != nil || wait != 0 || st.leases != leases || !l.Leased.Equal(st.start) || !c.at.IsZero() {
		t.Fatalf("back with its lease: wait %v, err %v, %d more leases, leased %v, carried %v; want it run at the carried lease, used once", wait, err, st.leases-leases, l.Leased, c.at)
	}

	l = Lease{}
	c.at = now.Add(-time.Second) // carried, and stale
	st.start = now.Add(500 * time.Millisecond)
	if wait, err := p.Unit(ctx, log, b, &c, 1, false, &l); err != nil || wait != 0 || st.leases != leases+1 || !l.Leased.Equal(st.start) {
		t.Fatalf("a stale carried lease: wait %v, err %v, %d more leases, leased %v; want it leased again", wait, err, st.leases-leases, l.Leased)
	}

	l, st.err = Lease{}, errors.New("throttled by DynamoDB")
	if _, err := p.Unit(ctx, log, b, &c, 1, false, &l); err == nil || !l.Leased.IsZero() || !c.at.IsZero() {
		t.Fatalf("the store failing: err %v, leased %v, carried %v; want the error, no lease held", err, l.Leased, c.at)
	}

	b.Rate, st.err, l = nil, nil, Lease{}
	leases = st.leases
	if wait, err := p.Unit(ctx, log, b, &c, 1, false, &l); err != nil || wait != 0 || st.leases != leases || !l.Leased.IsZero() || st.reads != 1 {
		t.Fatalf("no rate, the key not paced: wait %v, err %v, %d leases, leased %v, %d reads; want it run at once after one read of the key's row", wait, err, st.leases-leases, l.Leased, st.reads)
	}
}

// adaptUnitRows is fakeRows whose adaptive rows are an adaptStub's.
type adaptUnitRows struct {
	fakeRows
	a *adaptStub
}

func (r *adaptUnitRows) ReadAdapt(ctx context.Context, key string) (pace.Adapt, error) {
	return r.a.ReadAdapt(ctx, key)
}

func (r *adaptUnitRows) CutAdapt(ctx context.Context, c pace.AdaptCut) (pace.Adapt, bool, error) {
	return r.a.CutAdapt(ctx, c)
}

func (r *adaptUnitRows) LeaseAdapt(ctx context.Context, l pace.AdaptLease) (pace.AdaptGrant, error) {
	return r.a.LeaseAdapt(ctx, l)
}

// TestAdaptiveSleeperFeelsACutMadeMeanwhile guards a unit that sleeps in
// its invocation for its place in a key's adaptive line: when a cut
// with a Retry-After's hold lands in the process's copy of the row while
// it sleeps (another unit of the process throttled), its start is
// worked out again and it waits on the queue for it, its place carried,
// instead of calling inside the hold; with no hold meanwhile it runs at
// its start after one sleep.
func TestAdaptiveSleeperFeelsACutMadeMeanwhile(t *testing.T) {
	t.Cleanup(Forget)
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, cut := range []bool{false, true} {
		// Paced at 1 a second (no growth) since a cut 10 s ago: 10
		// positions allowed, 11 booked: the lease takes position 11, due
		// in 1 s.
		row := pace.Adapt{Limit: 1, Cut: now.Add(-10 * time.Second)}
		st := &adaptUnitRows{a: &adaptStub{row: row}}
		st.a.row.Booked = row.Allowance(now) + 1
		clock := now
		var sleeps []time.Duration
		ad := &Adapts{}
		p := &Pacer{Store: st, Clock: at{&clock}, Adapts: ad, Sleep: func(_ context.Context, d time.Duration) {
			sleeps = append(sleeps, d)
			if cut && len(sleeps) == 1 { // a cut held 5 s by another unit's throttled call, while it sleeps
				at := clock.Add(d / 2)
				if _, _, err := ad.Throttle(context.Background(), st, DownstreamKey(ledger.Batch{}), at, 5*time.Second-d/2); err != nil {
					t.Fatal(err)
				}
			}
			clock = clock.Add(d)
		}}
		b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
		var c carried
		var l Lease
		wait, err := p.Unit(context.Background(), slog.New(slog.DiscardHandler), b, &c, 1, false, &l)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !cut && (len(sleeps) != 1 || wait != 0 || l.Leased.IsZero() || !c.at.IsZero()):
			t.Errorf("no cut while it slept: sleeps %v, wait %v, leased %v, carried %v; want one sleep, then run", sleeps, wait, l.Leased, c.at)
		case cut && (len(sleeps) != 1 || wait <= 0 || !l.Leased.IsZero() || c.at.Before(st.a.row.Hold) || c.pos != 11):
			t.Errorf("a cut held to %v while it slept: sleeps %v, wait %v, leased %v, carried %v at %v; want it carried to the hold's end or later, its place 11 kept", st.a.row.Hold, sleeps, wait, l.Leased, c.at, c.pos)
		}
	}
}

// TestThrottledUnitKeepsItsPlace guards a paced unit whose call the
// downstream throttled with a Retry-After: when its throttle wrote the
// key's row (the cut), the unit carries its place while it waits, and
// when it comes back at the hold's end it calls there, leasing nothing
// new (not at the end of the line); a unit throttled just after, whose
// throttle wrote nothing, and an unpaced unit keep none.
func TestThrottledUnitKeepsItsPlace(t *testing.T) {
	t.Cleanup(Forget)
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	// Paced at 1 a second since a cut 10 s ago, booked up to its
	// allowance: the first unit's lease is due now (position 10); 20
	// others lease behind it.
	row := pace.Adapt{Limit: 1, Cut: now.Add(-10 * time.Second)}
	st := &adaptUnitRows{a: &adaptStub{row: row}}
	st.a.row.Booked = row.Allowance(now)
	clock := now
	p := &Pacer{Store: st, Clock: at{&clock}, Adapts: &Adapts{}, Sleep: func(_ context.Context, d time.Duration) { clock = clock.Add(d) }}
	log := slog.New(slog.DiscardHandler)
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	var c1, c2 carried
	var l1, l2 Lease
	if wait, err := p.Unit(context.Background(), log, b, &c1, 1, false, &l1); err != nil || wait != 0 || l1.Leased.IsZero() {
		t.Fatalf("first unit: wait %v, err %v, leased %v; want it run now", wait, err, l1.Leased)
	}
	place := l1.place
	st.a.row.Booked += 20 // others in line behind it
	refused := pipeline.Throttled("http", "429", 2*time.Second, errors.New("429"))
	if !p.Observe(context.Background(), log, b, now, &l1, refused) || st.a.cuts != 1 {
		t.Fatalf("first unit's refusal: %d cuts, want it throttled and the row cut", st.a.cuts)
	}
	hold := st.a.row.Hold
	if !l1.KeepPlace(&c1, hold) || c1.pos != place || !c1.at.Equal(hold) {
		t.Fatalf("first unit keeps its place: carried %v at %v, want %v at %v", c1.pos, c1.at, place, hold)
	}
	// A second unit of the process, at a place of its own, throttled
	// 100 ms later: its throttle writes nothing (one cut a second).
	l2 = Lease{Leased: now, place: place + 1, placed: true}
	clock = now.Add(100 * time.Millisecond)
	if !p.Observe(context.Background(), log, b, now, &l2, refused) || st.a.cuts != 1 || l2.KeepPlace(&c2, hold) || !c2.at.IsZero() {
		t.Errorf("second unit: %d cuts, carried %v; want no write and no place kept", st.a.cuts, c2.at)
	}
	var l3 Lease // unpaced
	if p.Observe(context.Background(), log, b, now, &l3, refused); l3.KeepPlace(&c2, hold) {
		t.Errorf("an unpaced unit kept a place")
	}
	// The first unit comes back at the hold's end: it calls there, its
	// place due, with no new lease.
	clock = hold
	booked := st.a.row.Booked
	var l4 Lease
	if wait, err := p.Unit(context.Background(), log, b, &c1, 1, false, &l4); err != nil || wait != 0 || !l4.Leased.Equal(hold) || st.a.row.Booked != booked {
		t.Errorf("back at the hold's end: wait %v, err %v, leased %v, booked %v → %v; want it run at the hold's end, nothing leased", wait, err, l4.Leased, booked, st.a.row.Booked)
	}
}

// TestUnitCallsSpreadOverTheirLease guards the start of each call of a
// paced unit whose calls run at once in their invocation: a rate lease
// of 10 calls at 5 a second starts its calls 200 ms apart (not a burst
// of 10 at its start), an adaptive place of 10 positions at 2 a second
// starts its calls at their positions' due times, 500 ms apart; a
// call's lateness counts from its own start; an unpaced unit's calls
// all start at once.
func TestUnitCallsSpreadOverTheirLease(t *testing.T) {
	t.Cleanup(Forget)
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	st := &fakeRows{start: now}
	p := &Pacer{Store: st, Clock: at{&now}, Sleep: func(context.Context, time.Duration) {}}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{RequestsPerSecond: 5}
	var c carried
	var l Lease
	if wait, err := p.Unit(ctx, log, b, &c, 10, false, &l); err != nil || wait != 0 || !l.Leased.Equal(now) {
		t.Fatalf("a rate lease of 10 calls now: wait %v, err %v, leased %v", wait, err, l.Leased)
	}
	for i := range 10 {
		if got, want := l.CallAt(i), now.Add(time.Duration(i)*200*time.Millisecond); !got.Equal(want) {
			t.Errorf("rate: call %d starts %v after the lease, want %v", i, got.Sub(now), want.Sub(now))
		}
	}
	if l.Late(9, now.Add(1800*time.Millisecond+pace.LeaseGrace)) || !l.Late(9, now.Add(1800*time.Millisecond+pace.LeaseGrace+time.Millisecond)) {
		t.Error("rate: the last call's lateness counts from its own start (1.8 s), want late only past it + LeaseGrace")
	}

	// Adaptive: paced at 2 a second (no growth) since a cut 10 s ago,
	// booked up to its allowance: the unit's 10 positions are due from
	// now, one every 500 ms.
	row := pace.Adapt{Limit: 2, Cut: now.Add(-10 * time.Second)}
	ast := &adaptUnitRows{a: &adaptStub{row: row}}
	ast.a.row.Booked = row.Allowance(now)
	pa := &Pacer{Store: ast, Clock: at{&now}, Adapts: &Adapts{}, Sleep: func(context.Context, time.Duration) {}}
	b.Rate = nil
	var la Lease
	if wait, err := pa.Unit(ctx, log, b, &c, 10, false, &la); err != nil || wait != 0 || la.Leased.IsZero() {
		t.Fatalf("an adaptive place of 10 calls: wait %v, err %v, leased %v", wait, err, la.Leased)
	}
	for i := 1; i < 10; i++ {
		gap := la.CallAt(i).Sub(la.CallAt(i - 1))
		if gap < 450*time.Millisecond || gap > 550*time.Millisecond {
			t.Errorf("adaptive: call %d starts %v after call %d, want ≈ 500 ms (2 a second)", i, gap, i-1)
		}
	}
	var unpaced Lease
	if !unpaced.CallAt(5).IsZero() || unpaced.Late(5, now) {
		t.Error("an unpaced unit's call: want no start of its own and never late")
	}
}

// TestUnitLeasesWhatFitsItsInvocation guards a paced unit against its
// invocation's deadline: a rate lease takes only the calls that start
// within its Window (10 items at 5 a second in a 1 s window: 6, their
// spacing 1.2 s), the others not covered (given back by the worker, to
// lease again); a lease starting after Until is carried on the message,
// not slept, even within pace.LeaseSleep.
func TestUnitLeasesWhatFitsItsInvocation(t *testing.T) {
	t.Cleanup(Forget)
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	st := &fakeRows{start: now}
	var slept time.Duration
	p := &Pacer{Store: st, Clock: at{&now}, Sleep: func(_ context.Context, d time.Duration) { slept += d }}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{RequestsPerSecond: 5}
	var c carried
	l := Lease{Window: time.Second}
	if wait, err := p.Unit(ctx, log, b, &c, 10, false, &l); err != nil || wait != 0 || !l.Leased.Equal(now) {
		t.Fatalf("a lease now: wait %v, err %v, leased %v", wait, err, l.Leased)
	}
	if st.spacing != 1200*time.Millisecond || !l.Covers(5) || l.Covers(6) {
		t.Errorf("10 calls at 5 a second in a 1 s window: leased spacing %v, covers call 5 %v, call 6 %v; want 1.2 s (6 calls), 5 covered, 6 not", st.spacing, l.Covers(5), l.Covers(6))
	}
	if got := l.CallAt(5).Sub(now); got != time.Second {
		t.Errorf("the last covered call starts %v after the lease, want 1 s", got)
	}
	all := Lease{}
	if _, err := p.Unit(ctx, log, b, &c, 10, false, &all); err != nil || st.spacing != 2*time.Second || !all.Covers(9) {
		t.Errorf("no window: spacing %v, covers call 9 %v, err %v; want every call leased (2 s)", st.spacing, all.Covers(9), err)
	}

	st.start = now.Add(time.Second)
	slept = 0
	late := Lease{Until: now.Add(500 * time.Millisecond)}
	if wait, err := p.Unit(ctx, log, b, &c, 1, false, &late); err != nil || wait != time.Second || slept != 0 || late.Paced() || !c.at.Equal(st.start) {
		t.Errorf("a lease 1 s ahead with Until at +500 ms: wait %v, err %v, slept %v, paced %v, carried %v; want it carried, not slept", wait, err, slept, late.Paced(), c.at)
	}
}

// TestWaitCallStartsOnlyWhatItsInvocationCanFinish: a covered call is
// slept to its place and starts; a call the lease does not cover, one
// whose place is past Until, and one whose place leaves less than the
// margin before the deadline start not (given back unstarted, no sleep).
// Bound puts Until halfway to the margin before the deadline.
func TestWaitCallStartsOnlyWhatItsInvocationCanFinish(t *testing.T) {
	t.Cleanup(Forget)
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	log := slog.New(slog.DiscardHandler)
	st := &fakeRows{start: now}
	var slept time.Duration
	p := &Pacer{Store: st, Clock: at{&now}, Sleep: func(_ context.Context, d time.Duration) { slept += d }}
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	b.Rate = &api.Rate{RequestsPerSecond: 5}

	ctx, cancel := context.WithTimeout(context.Background(), 21*time.Second)
	defer cancel()
	var l Lease
	l.Bound(ctx, now, time.Second, 30*time.Second)
	if until := l.Until.Sub(now); until < 9*time.Second || until > 10*time.Second || l.Window != 15*time.Second {
		t.Fatalf("Bound with ≈ 21 s to the deadline, a 1 s margin, 30 s usable: Until +%v, Window %v; want ≈ +10 s, 15 s", until, l.Window)
	}
	var c carried
	if wait, err := p.Unit(ctx, log, b, &c, 100, false, &l); err != nil || wait != 0 || !l.Paced() {
		t.Fatalf("a lease now: wait %v, err %v", wait, err)
	}
	if !p.WaitCall(ctx, &l, 0, time.Second) || slept != 0 {
		t.Errorf("the first call: want it to start at once, slept %v", slept)
	}
	if !p.WaitCall(ctx, &l, 3, time.Second) || slept != 600*time.Millisecond {
		t.Errorf("the 4th call at 5 a second: want it to start after 600 ms, slept %v", slept)
	}
	slept = 0
	if p.WaitCall(ctx, &l, 60, time.Second) || slept != 0 {
		t.Errorf("call 60 (+12 s, past Until at ≈ +10 s): want it given back unslept, slept %v", slept)
	}
	if p.WaitCall(ctx, &l, 80, time.Second) || slept != 0 {
		t.Errorf("call 80 (past the 15 s window): want it not covered, slept %v", slept)
	}
	l.Until = time.Time{}
	if p.WaitCall(ctx, &l, 70, 8*time.Second) || slept != 0 {
		t.Errorf("call 70 (+14 s) with ≈ 21 s to the deadline and an 8 s margin: want it given back unslept, slept %v", slept)
	}

	var none Lease
	none.Bound(context.Background(), now, time.Second, 30*time.Second)
	if !none.Until.IsZero() || !p.WaitCall(context.Background(), &none, 5, time.Second) {
		t.Errorf("no deadline: Until %v, want none; an unpaced call starts at once", none.Until)
	}
	spent, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	none.Bound(spent, now, time.Second, 30*time.Second)
	if !none.Until.Equal(now) {
		t.Errorf("less than the margin left: Until %v, want now", none.Until)
	}
}
