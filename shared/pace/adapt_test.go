package pace

import (
	"math"
	"testing"
	"time"
)

var at0 = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*max(1, math.Abs(b)) }

// TestAdaptCutsAndGrows guards the AIMD rule: a key's first throttled
// call starts it in slow start at AdaptBackoff × the process's own calls,
// held until its Retry-After; a throttle within AdaptCutEvery changes
// only the hold; a later one cuts to AdaptBackoff × the limit then,
// growing by its Step a second (or in slow start again after a
// Retry-After, unless the downstream took a call since the last cut);
// the limit stops pacing past AdaptCeiling or AdaptForget.
func TestAdaptCutsAndGrows(t *testing.T) {
	var a Adapt
	if a.Paced(at0) {
		t.Fatal("a key never throttled is paced")
	}
	a, changed := a.Throttled(at0, 100, AdaptBackoff, 2*time.Second, time.Time{})
	if !changed || a.Limit != 70 || !a.Slow || !a.Cut.Equal(at0) || !a.Hold.Equal(at0.Add(2*time.Second)) || a.Base != 0 {
		t.Fatalf("first throttle: %+v (changed %v), want limit 70 in slow start, cut at0, hold at0+2s", a, changed)
	}
	if l := a.LimitAt(at0.Add(time.Second)); l != 70 {
		t.Errorf("LimitAt within the hold = %v, want 70", l)
	}
	if l := a.LimitAt(at0.Add(4 * time.Second)); !near(l, 140) {
		t.Errorf("LimitAt 2 s after the hold = %v, want 140 (doubled)", l)
	}
	b, changed := a.Throttled(at0.Add(500*time.Millisecond), 500, AdaptBackoff, time.Second, time.Time{})
	if changed || b != a {
		t.Errorf("a throttle within AdaptCutEvery with an earlier hold changed the row: %+v", b)
	}
	b, _ = a.Throttled(at0.Add(500*time.Millisecond), 500, AdaptBackoff, 5*time.Second, time.Time{})
	if b.Limit != 70 || !b.Hold.Equal(at0.Add(5500*time.Millisecond)) {
		t.Errorf("a throttle within AdaptCutEvery: %+v, want the limit kept and the hold moved", b)
	}
	c, _ := a.Throttled(at0.Add(4*time.Second), 1, AdaptBackoff, 0, time.Time{})
	if !near(c.Limit, 98) || c.Slow || !near(c.Step, 9.8) || !near(c.Base, a.Allowance(at0.Add(4*time.Second))) || !c.Hold.IsZero() {
		t.Errorf("a cut 4 s on: %+v, want limit 0.7 × 140 = 98, step 9.8, out of slow start, the allowance kept, no hold", c)
	}
	if l := c.LimitAt(at0.Add(6 * time.Second)); !near(l, 98+2*9.8) {
		t.Errorf("LimitAt 2 s after the cut = %v, want %v", l, 98+2*9.8)
	}
	if d, _ := c.Throttled(at0.Add(6*time.Second), 1, AdaptBackoff, 2*time.Second, time.Time{}); !d.Slow || !d.Hold.Equal(at0.Add(8*time.Second)) {
		t.Errorf("a cut with a Retry-After: %+v, want slow start after a hold to +8 s", d)
	}
	// A downstream that took one of the process's paced calls within
	// AdaptTookWithin (at +5 s, 1 s before) is at a quota: the
	// Retry-After holds the key, and the limit grows back by its step.
	if d, _ := c.Throttled(at0.Add(6*time.Second), 1, AdaptBackoff, 2*time.Second, at0.Add(5*time.Second)); d.Slow || !near(d.Limit, 0.7*(98+2*9.8)) || !d.Hold.Equal(at0.Add(8*time.Second)) {
		t.Errorf("a cut with a Retry-After after a call was taken: %+v, want limit 0.7 × %v out of slow start, held to +8 s", d, 98+2*9.8)
	}
	// One taken longer ago says nothing of the downstream now.
	if d, _ := c.Throttled(at0.Add(6*time.Second), 1, AdaptBackoff, 2*time.Second, at0.Add(6*time.Second-AdaptTookWithin)); !d.Slow {
		t.Errorf("a cut with a Retry-After, the last call taken AdaptTookWithin before: %+v, want slow start", d)
	}
	if c.LimitAt(at0.Add(AdaptForget)) != 0 {
		t.Error("a limit AdaptForget old still paces")
	}
	if l := c.LimitAt(at0.Add(60 * time.Second)); l != 0 {
		t.Errorf("a limit grown past the ceiling still paces at %v", l)
	}
	f, _ := Adapt{}.Throttled(at0, 0, AdaptBackoff, 0, time.Time{})
	if f.Limit != AdaptFloor || f.Step != AdaptMinStep {
		t.Errorf("a throttle with no own calls: %+v, want the floor and the least step", f)
	}
	if !(Adapt{Hold: at0.Add(time.Second)}).Paced(at0) {
		t.Error("a key held by a Retry-After is not paced")
	}
}

// TestAdaptAllowanceAndDue guards that the allowance is the integral of
// the limit from the end of the hold (none before), continuous across a
// cut, and that Due inverts it.
func TestAdaptAllowanceAndDue(t *testing.T) {
	a := Adapt{Limit: 10, Step: 2, Cut: at0, Hold: at0.Add(time.Second), Base: 100}
	if got := a.Allowance(at0.Add(time.Second)); got != 100 {
		t.Errorf("allowance at the hold's end = %v, want 100", got)
	}
	if got := a.Allowance(at0.Add(3 * time.Second)); !near(got, 100+10*2+2*4/2.0) {
		t.Errorf("allowance 2 s after the hold = %v, want 124", got)
	}
	if d := a.Due(124, at0); d.Sub(at0.Add(3*time.Second)).Abs() > 2*time.Microsecond {
		t.Errorf("Due(124) = %v, want +3s", d.Sub(at0))
	}
	if d := a.Due(50, at0.Add(5*time.Second)); !d.Equal(at0.Add(5 * time.Second)) {
		t.Errorf("a position already allowed is due %v, want now", d.Sub(at0))
	}
	s := Adapt{Limit: 1, Slow: true, Cut: at0}
	want := 1 * AdaptDoubling.Seconds() / math.Ln2 * (math.Exp2(2) - 1) // 4 s of doubling every 2 s
	if got := s.Allowance(at0.Add(4 * time.Second)); !near(got, want) {
		t.Errorf("slow start's allowance after 4 s = %v, want %v", got, want)
	}
	c, _ := a.Throttled(at0.Add(5*time.Second), 0, AdaptBackoff, 0, time.Time{})
	if !near(c.Allowance(at0.Add(5*time.Second)), a.Allowance(at0.Add(5*time.Second))) {
		t.Errorf("the allowance jumps at a cut: %v → %v", a.Allowance(at0.Add(5*time.Second)), c.Allowance(at0.Add(5*time.Second)))
	}
	if c.Due(c.Base+10, at0.Add(5*time.Second)).Sub(a.Due(c.Base+10, at0.Add(5*time.Second))) <= 0 {
		t.Error("a cut did not delay the positions beyond the allowance")
	}
	if h := (Adapt{Limit: 400, Step: 40, Cut: at0}).Allowance(at0.Add(10 * time.Second)); !near(h, 400*2.5+40*2.5*2.5/2+500*7.5) {
		t.Errorf("allowance past the ceiling = %v, want it to grow at AdaptCeiling", h)
	}
}

// TestAdaptSlowStartEndsAtThePaceItLeft guards slow start's threshold
// (RFC 5681 §3.1's ssthresh): after a Retry-After from a downstream that
// took none of the process's calls, the limit doubles from AdaptBackoff
// × the limit it had back to that limit, then grows by a step of a
// tenth of it a second, as out of slow start — it does not double on to
// AdaptCeiling and leave the key unpaced (on the emulator, a limit went
// from 18 to past 500 a second in 17 s against a 20-a-second quota). A
// key closed again on its way back keeps the pace it was going back to;
// the allowance is the integral of that limit, and Due inverts it.
func TestAdaptSlowStartEndsAtThePaceItLeft(t *testing.T) {
	a := Adapt{Limit: 20, Step: 2, Cut: at0}
	now := at0.Add(2 * time.Second) // the limit at 24
	b, _ := a.Throttled(now, 5, AdaptBackoff, 2*time.Second, time.Time{})
	if !b.Slow || !near(b.Limit, 16.8) || !near(b.Thresh, 24) || !near(b.Step, 2.4) || !b.Hold.Equal(now.Add(2*time.Second)) {
		t.Fatalf("a Retry-After from a closed downstream: %+v, want slow start at 16.8 up to 24, step 2.4, held 2 s", b)
	}
	open := now.Add(2 * time.Second) // the hold's end
	se := AdaptDoubling.Seconds() * math.Log2(24/16.8)
	for _, c := range []struct {
		s    float64
		want float64
	}{
		{0, 16.8}, {se / 2, 16.8 * math.Exp2(se/2/AdaptDoubling.Seconds())}, {se, 24}, {se + 10, 48}, {se + 1000, 0},
	} {
		at := open.Add(time.Duration(c.s * float64(time.Second)))
		if got := b.LimitAt(at); !near(got, c.want) {
			t.Errorf("LimitAt %.3f s after the hold = %v, want %v", c.s, got, c.want)
		}
	}
	// The allowance is the limit's integral: by the trapezoid rule over
	// small steps, within 0.01 calls, through the threshold and the
	// ceiling.
	sum, prev := b.Base, b.limitAfter(0)
	const dt = 0.001
	for i := 1; i <= 250000; i++ {
		l := b.limitAfter(float64(i) * dt)
		sum += (prev + l) / 2 * dt
		prev = l
		if i%25000 == 0 {
			at := open.Add(time.Duration(float64(i) * dt * float64(time.Second)))
			if got := b.Allowance(at); math.Abs(got-sum) > 0.01 {
				t.Fatalf("allowance %v s after the hold = %v, want the integral %v", float64(i)*dt, got, sum)
			}
			if d := b.Due(sum, open); d.Sub(at).Abs() > 5*time.Millisecond {
				t.Errorf("Due(%v) = +%v after the hold, want +%v", sum, d.Sub(open), at.Sub(open))
			}
		}
	}
	// Closed again 1 s into the slow start, at 23.8: 0.7 × it is under
	// the 16.8 that slow start began at, which it keeps, back up to 24.
	again := open.Add(time.Second)
	c, _ := b.Throttled(again, 5, AdaptBackoff, 2*time.Second, time.Time{})
	if l := b.LimitAt(again); !c.Slow || !near(c.Limit, 16.8) || !near(c.Thresh, 24) || 0.7*l >= 16.8 {
		t.Errorf("closed again at %v on the way back: %+v, want slow start at 16.8 (not 0.7 × it) up to 24", l, c)
	}
	// Closed again and again while held (refusals of a downstream closed
	// for a while, each Retry-After a cut): the limit stays.
	d := c
	for i := 1; i <= 10; i++ {
		d, _ = d.Throttled(d.Hold.Add(100*time.Millisecond), 5, AdaptBackoff, 2*time.Second, time.Time{})
	}
	if !d.Slow || !near(d.Limit, 16.8) || !near(d.Thresh, 24) {
		t.Errorf("closed 10 times more, each at its hold's end: %+v, want slow start at 16.8 up to 24", d)
	}
	// Closed again 5 s into it, at 33.5 (past 24, by the step): cut to
	// 0.7 × that, above where it began, up to 33.5.
	late := open.Add(5 * time.Second)
	if l := b.LimitAt(late); l < 33 {
		t.Fatalf("limit 5 s after the hold %v, want ≈ 33.5", l)
	} else if e, _ := b.Throttled(late, 5, AdaptBackoff, 2*time.Second, time.Time{}); !e.Slow || !near(e.Limit, 0.7*l) || !near(e.Thresh, l) {
		t.Errorf("closed again at %v: %+v, want slow start at 0.7 × it up to it", l, e)
	}
	// Closed again in a slow start that knew no pace (the key's first
	// throttle): none still.
	first, _ := (Adapt{}).Throttled(at0, 10, AdaptBackoff, 2*time.Second, time.Time{})
	if d, _ := first.Throttled(at0.Add(5*time.Second), 10, AdaptBackoff, 2*time.Second, time.Time{}); !d.Slow || d.Thresh != 0 {
		t.Errorf("closed again after a first throttle: %+v, want slow start with no threshold", d)
	}
	// Out of slow start, a Retry-After from a quota that took a call
	// within AdaptTookWithin is an ordinary cut: no threshold.
	if d, _ := b.Throttled(open.Add(20*time.Second), 5, AdaptBackoff, 2*time.Second, open.Add(19*time.Second)); d.Slow || d.Thresh != 0 {
		t.Errorf("a quota's Retry-After: %+v, want a cut out of slow start, no threshold", d)
	}
	// A key's first throttle knows no pace to go back to: slow start to
	// AdaptCeiling.
	if f, _ := (Adapt{}).Throttled(at0, 10, AdaptBackoff, 0, time.Time{}); !f.Slow || f.Thresh != 0 {
		t.Errorf("a first throttle: %+v, want slow start with no threshold", f)
	}
}

// TestAdaptWait guards that a unit booked past the horizon waits 10–15
// minutes.
func TestAdaptWait(t *testing.T) {
	if w := AdaptWait(0); w != 15*time.Minute {
		t.Errorf("AdaptWait(0) = %v, want 15m", w)
	}
	if w := AdaptWait(1); w != 10*time.Minute {
		t.Errorf("AdaptWait(1) = %v, want 10m", w)
	}
}

// TestAdaptResumed guards the ramp after a pause: a key never paced (or
// forgotten) starts again at AdaptResume in slow start, its allowance
// kept, so that the units that waited are due over seconds, not at once
// (the first 20 positions after the resume take ≈ 1.5 s, and the limit
// reaches AdaptCeiling in ≈ 11 s); a key paced now, or cut within
// AdaptForget and since climbed past the ceiling, is left as it is.
func TestAdaptResumed(t *testing.T) {
	var a Adapt
	r, changed := a.Resumed(at0)
	if !changed || r.Limit != AdaptResume || !r.Slow || !r.Cut.Equal(at0) || r.Base != 0 || !r.Paced(at0) || !r.Restarted {
		t.Fatalf("a key not paced, resumed: %+v (changed %v), want %v a second in slow start from at0, restarted", r, changed, AdaptResume)
	}
	if th, changed := r.Throttled(at0.Add(2*time.Second), 30, AdaptBackoff, 0, time.Time{}); !changed || th.Restarted {
		t.Errorf("a restarted key cut by a throttled answer: %+v (changed %v), want its cause the throttling", th, changed)
	}
	if d := r.Due(20, at0).Sub(at0); d < 1400*time.Millisecond || d > 1700*time.Millisecond {
		t.Errorf("position 20 due %v after the resume, want ≈ 1.5 s (10/s doubling every 2 s)", d)
	}
	if r.Paced(at0.Add(12 * time.Second)) {
		t.Errorf("still paced 12 s after the resume: limit %v", r.LimitAt(at0.Add(12*time.Second)))
	}
	if !r.Paced(at0.Add(10 * time.Second)) {
		t.Error("not paced 10 s after the resume (the limit reaches 500/s at ≈ 11.3 s)")
	}

	later := at0.Add(time.Second)
	for name, k := range map[string]Adapt{
		"paced at 1.4 a second":                   func() Adapt { k, _ := (Adapt{}).Throttled(at0, 2, AdaptBackoff, 0, time.Time{}); return k }(),
		"paced at 70 a second":                    func() Adapt { k, _ := (Adapt{}).Throttled(at0, 100, AdaptBackoff, 0, time.Time{}); return k }(),
		"held for its Retry-After":                func() Adapt { k, _ := (Adapt{}).Throttled(at0, 2, AdaptBackoff, 30*time.Second, time.Time{}); return k }(),
		"past the ceiling 1 minute after its cut": {Limit: 400, Step: 40, Cut: later.Add(-time.Minute)},
	} {
		if r, changed := k.Resumed(later); changed || r != k {
			t.Errorf("a key %s, resumed: %+v (changed %v), want it left as it is", name, r, changed)
		}
	}
	old := Adapt{Limit: 400, Step: 40, Cut: later.Add(-AdaptForget), Base: 1000, Booked: 2000, Slow: true, Thresh: 24}
	r, changed = old.Resumed(later)
	if !changed || r.Limit != AdaptResume || !r.Slow || r.Thresh != 0 || !near(r.Base, old.Allowance(later)) || r.Booked != 2000 {
		t.Errorf("a key forgotten (cut %v ago), resumed: %+v (changed %v), want %v a second from its allowance %v in a slow start with no end, its bookings kept",
			AdaptForget, r, changed, AdaptResume, old.Allowance(later))
	}
}

// TestBackoff guards a cut's depth: AdaptBackoff, or the share of the
// process's own calls the downstream took when that is less, from
// AdaptShareMin calls on, never below AdaptDeepest.
func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		own, refused int
		want         float64
	}{
		{0, 0, AdaptBackoff},
		{9, 9, AdaptBackoff},   // too few calls for a share
		{51, 1, AdaptBackoff},  // the downstream took 98 %: the ordinary cut
		{52, 32, AdaptDeepest}, // a quota of 20 against 52 calls: 0.38, cut at half
		{50, 20, 0.6},          // 60 % taken
		{100, 95, AdaptDeepest},
		{10, 12, AdaptDeepest}, // more refused than counted (a window's edge)
	} {
		if got := Backoff(c.own, c.refused); !near(got, c.want) {
			t.Errorf("Backoff(%d, %d) = %v, want %v", c.own, c.refused, got, c.want)
		}
	}
	a, _ := Adapt{}.Throttled(at0, 100, Backoff(100, 10), 0, time.Time{})
	paced := at0.Add(2 * time.Second)
	b, _ := a.Throttled(paced, 50, Backoff(50, 20), 0, time.Time{})
	if want := 0.6 * a.LimitAt(paced); !near(b.Limit, want) || b.Slow {
		t.Errorf("a cut with 20 of 50 own calls refused: %+v, want limit 0.6 × %v = %v out of slow start", b, a.LimitAt(paced), want)
	}
}
