package pacer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// TestHintsForgetPassedRows holds the process's hints to the rows leased
// from within the horizon: after many keys whose leases have passed, a
// sweep leaves only the hints still ahead of now.
func TestHintsForgetPassedRows(t *testing.T) {
	t.Cleanup(Forget)
	Forget()
	now := time.Unix(1_800_000_000, 0)
	ahead := Row{Key: "live"}
	Saw(ahead, now.Add(time.Hour), now)
	for i := range 3 * SweepEvery {
		Saw(Row{Key: fmt.Sprint("gone-", i), Tokens: i%2 == 0}, now.Add(-time.Second), now)
	}
	n := 0
	rows.Range(func(any, any) bool { n++; return true })
	if n > SweepEvery {
		t.Fatalf("%d hints kept after %d stores of passed leases; want at most %d", n, 3*SweepEvery, SweepEvery)
	}
	if Idle(ahead, now) {
		t.Fatal("the hint of a lease still ahead was swept")
	}
}

// rowStub answers leases as a token row whose usage is used over calls
// and whose Next is next, granting within the horizon; it records the
// spacings asked.
type rowStub struct {
	next     time.Time
	used     float64
	calls    int64
	spacings []time.Duration
	horizons []time.Duration
}

func (s *rowStub) LeaseTokens(_ context.Context, l pace.TokenLease) (pace.TokenGrant, error) {
	s.spacings, s.horizons = append(s.spacings, l.Spacing), append(s.horizons, l.Horizon)
	b := pace.Book(s.next, l.Now, l.Spacing, l.Horizon)
	if !b.OK {
		return pace.TokenGrant{RateGrant: pace.RateGrant{Next: s.next}, Used: s.used, Calls: s.calls}, nil
	}
	s.next = b.Next
	return pace.TokenGrant{RateGrant: pace.RateGrant{Granted: true, Start: b.Start, Next: b.Next}, Used: s.used, Calls: s.calls}, nil
}

func (s *rowStub) ReadTokens(context.Context, string) (pace.TokenGrant, error) {
	return pace.TokenGrant{RateGrant: pace.RateGrant{Next: s.next}, Used: s.used, Calls: s.calls}, nil
}

func (s *rowStub) SettleTokens(_ context.Context, st pace.TokenSettle) (pace.TokenGrant, error) {
	s.used += st.Used
	s.calls += int64(st.Calls)
	return pace.TokenGrant{RateGrant: pace.RateGrant{Granted: true, Next: s.next}, Used: s.used, Calls: s.calls}, nil
}

// TestBookTokensFirstGuessNear guards the first booking of a process:
// with no estimate it books one second of the budget within the sleep
// only; refused, it books again at once with the row's tokens per call,
// as far as the horizon; a settle's answer keeps the estimate.
func TestBookTokensFirstGuessNear(t *testing.T) {
	t.Cleanup(Forget)
	Forget()
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	st := &rowStub{next: now.Add(time.Minute), used: 5000, calls: 10} // 500 a call
	b, err := BookTokens(ctx, st, "k", 10, 500, now)
	if err != nil || !b.Granted {
		t.Fatalf("booking %+v %v, want granted on the second lease", b, err)
	}
	if len(st.spacings) != 2 || st.spacings[0] != time.Second || st.horizons[0] != pace.LeaseSleep ||
		st.spacings[1] != 10*time.Second || st.horizons[1] != TokenHorizon {
		t.Fatalf("leases asked %v within %v; want 1s within %v, then 10s within %v", st.spacings, st.horizons, pace.LeaseSleep, TokenHorizon)
	}
	if !b.Start.Equal(now.Add(time.Minute)) || b.Spacing != 10*time.Second {
		t.Fatalf("booking %+v, want it to start at the row's Next with 10 s booked", b)
	}
	if err := SettleTokens(ctx, st, "k", 500, b.Start, b.Spacing, 1000, 10, now); err != nil {
		t.Fatal(err)
	}
	if sp, known := tokenSpacing("k", 1, 500); !known || sp != 600*time.Millisecond {
		t.Fatalf("estimate after the settle: %v (known %v), want 0.6 s a call (6,000 tokens over 20 calls at 500 a second)", sp, known)
	}
	st.next = now.Add(7 * time.Hour)
	if b, err := BookTokens(ctx, st, "k", 1, 500, now); err != nil || b.Granted || b.Wait < time.Hour || b.Wait > 90*time.Minute+time.Second {
		t.Fatalf("booking past the horizon: %+v %v, want a wait of 1 h spread by up to half again", b, err)
	}
	// A debt or a booking past a day counts a day (a float past
	// time.Duration's range would wrap).
	if d := durationOf(1e300); d != MaxBooking {
		t.Fatalf("durationOf(1e300) = %v, want %v", d, MaxBooking)
	}
}

// deltaStub records the settles' Delta.
type deltaStub struct {
	rowStub
	deltas []time.Duration
}

func (s *deltaStub) SettleTokens(ctx context.Context, st pace.TokenSettle) (pace.TokenGrant, error) {
	s.deltas = append(s.deltas, st.Delta)
	return s.rowStub.SettleTokens(ctx, st)
}

// TestSettleGivesBackOnlyWhatIsAhead guards the settle's give-back: a
// booking of 10 s from T that used 2 s of the budget gives back 8 s when
// settled at T + 1 s, 4 s at T + 6 s, nothing at T + 11 s; a debt is
// settled whole whenever; a booking of no calls found stale at T + 3 s
// gives back 7 s, not 10 (the 3 s passed cannot be spent again).
func TestSettleGivesBackOnlyWhatIsAhead(t *testing.T) {
	t.Cleanup(Forget)
	ctx := context.Background()
	T := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		at   time.Duration
		used float64
		want time.Duration
	}{{time.Second, 1000, -8 * time.Second}, {6 * time.Second, 1000, -4 * time.Second}, {11 * time.Second, 1000, 0},
		{11 * time.Second, 6000, 2 * time.Second}, {3 * time.Second, 0, -7 * time.Second}} {
		st := &deltaStub{}
		if err := SettleTokens(ctx, st, "k", 500, T, 10*time.Second, c.used, 1, T.Add(c.at)); err != nil {
			t.Fatal(err)
		}
		if st.deltas[0] != c.want {
			t.Errorf("booked 10 s from T, used %v tokens at 500/s, settled at T + %v: delta %v, want %v", c.used, c.at, st.deltas[0], c.want)
		}
	}
}

// TestHoldKeepsOnlyWhatIsAhead guards what a unit waiting for its
// batch's pause does with its pacing (Hold, HoldWait): its request lease
// and place are cleared; its token booking is kept when it starts past
// now + pace.LeaseSleep, and the unit then waits until 1 s before it
// (or its pause's wait, when shorter); a booking that starts within the
// sleep, or has passed, is dropped, and the unit waits its pause's wait.
func TestHoldKeepsOnlyWhatIsAhead(t *testing.T) {
	T := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name  string
		now   time.Time
		pause time.Duration
		kept  bool
		wait  time.Duration
	}{
		{"ahead", T.Add(-time.Minute), 5 * time.Minute, true, time.Minute - time.Second},
		{"ahead, past the check", T.Add(-10 * time.Minute), 5 * time.Minute, true, 5 * time.Minute},
		{"within the sleep", T.Add(-pace.LeaseSleep), 5 * time.Minute, false, 5 * time.Minute},
		{"passed", T.Add(time.Minute), 5 * time.Minute, false, 5 * time.Minute},
	} {
		m := &carried{at: T, pos: 3, lead: time.Second, tokensAt: T, booked: 10 * time.Second, drifted: time.Second}
		at := Hold(m, c.now)
		want := carried{}
		if c.kept {
			want = carried{tokensAt: T, booked: 10 * time.Second, drifted: time.Second}
		}
		if *m != want || at.IsZero() == c.kept {
			t.Errorf("%s: carried %+v, start %v; want %+v", c.name, *m, at, want)
		}
		if w := HoldWait(c.pause, at, c.now); w != c.wait {
			t.Errorf("%s: wait %v, want %v", c.name, w, c.wait)
		}
	}
}

// driftRows is a pacing store whose token row's drift is drift (err: its
// read fails); it counts the reads.
type driftRows struct {
	fakeRows
	drift time.Duration
	err   error
	reads int
}

func (r *driftRows) ReadTokens(context.Context, string) (pace.TokenGrant, error) {
	r.reads++
	return pace.TokenGrant{Drift: r.drift}, r.err
}

// TestOverdueStartsPassedBookingsNow guards the bookings of units
// received again late: one that started over pace.LeaseSleep ago starts
// now at the key's drift now with nothing booked (settled as a debt);
// one within the sleep, one ahead, one moved ahead by the debts settled
// since it was booked, and none are left; a batch without a
// token budget reads nothing, and a failed read changes nothing.
func TestOverdueStartsPassedBookingsNow(t *testing.T) {
	T := time.Unix(1_800_000_000, 0)
	budgeted := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	budgeted.Rate = &api.Rate{TokensPerSecond: 500}
	requests := ledger.Batch{Batch: api.Batch{ID: "b2", Run: 1}}
	requests.Rate = &api.Rate{RequestsPerSecond: 5}
	units := func() []*carried {
		return []*carried{
			{tokensAt: T.Add(-time.Minute), booked: time.Second, drifted: time.Second},
			{tokensAt: T.Add(-pace.LeaseSleep), booked: time.Second, drifted: time.Second},
			{tokensAt: T.Add(time.Minute), booked: time.Second, drifted: time.Second},
			{tokensAt: T.Add(-4 * time.Second), booked: time.Second, drifted: time.Second}, // moved 6 s later since
			{},
		}
	}
	for _, c := range []struct {
		name  string
		b     ledger.Batch
		err   error
		reads int
		first carried
	}{
		{"budgeted", budgeted, nil, 1, carried{tokensAt: T, drifted: 7 * time.Second}},
		{"no budget", requests, nil, 0, carried{tokensAt: T.Add(-time.Minute), booked: time.Second, drifted: time.Second}},
		{"no rate", ledger.Batch{Batch: api.Batch{ID: "b3", Run: 1}}, nil, 0, carried{tokensAt: T.Add(-time.Minute), booked: time.Second, drifted: time.Second}},
		{"read fails", budgeted, errors.New("unavailable"), 1, carried{tokensAt: T.Add(-time.Minute), booked: time.Second, drifted: time.Second}},
	} {
		st := &driftRows{drift: 7 * time.Second, err: c.err}
		p := &Pacer{Store: st, Clock: at{&T}}
		us := units()
		cs := make([]Carried, len(us))
		for i, u := range us {
			cs[i] = u
		}
		if err := p.Overdue(context.Background(), c.b, cs); (err != nil) != (c.err != nil) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
		}
		want := units()
		want[0] = &c.first
		for i := range us {
			if *us[i] != *want[i] {
				t.Errorf("%s: unit %d carries %+v, want %+v", c.name, i, *us[i], *want[i])
			}
		}
		if st.reads != c.reads {
			t.Errorf("%s: %d reads, want %d", c.name, st.reads, c.reads)
		}
	}
}
