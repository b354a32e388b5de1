package pace

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRateShards guards that no bucket row paces more than
// ShardRequestsPerSecond, and that a key under it has one row.
func TestRateShards(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want int
	}{{0.01, 1}, {50, 1}, {500, 1}, {500.5, 2}, {1000, 2}, {1001, 3}, {MaxRequestsPerSecond, 20}} {
		got := RateShards(c.rate)
		if got != c.want {
			t.Errorf("RateShards(%v) = %d, want %d", c.rate, got, c.want)
		}
		if per := c.rate / float64(got); per > ShardRequestsPerSecond {
			t.Errorf("RateShards(%v): %v a second per row", c.rate, per)
		}
		if w := LeaseWritesPerSecond(c.rate, 1); w > 1000 {
			t.Errorf("LeaseWritesPerSecond(%v, 1) = %v, over 1,000", c.rate, w)
		}
	}
}

// TestSpacing guards that a lease never moves Next less than its
// requests take at the rate (rounded up), so the rate holds.
func TestSpacing(t *testing.T) {
	for _, c := range []struct {
		n    int
		rate float64
		want time.Duration
	}{{1, 50, 20 * time.Millisecond}, {10, 50, 200 * time.Millisecond}, {1, 3, 333334 * time.Microsecond}, {0, 1, time.Second},
		{1, 1e7, time.Microsecond}, {1, 0.01, 100 * time.Second}, {5, 0, 0}} {
		if got := Spacing(c.n, c.rate); got != c.want {
			t.Errorf("Spacing(%d, %v) = %v, want %v", c.n, c.rate, got, c.want)
		}
	}
}

// TestBook guards a lease's answer: an idle row starts now, a busy one at
// its Next, and one past the horizon is refused with the wait until it
// would not be.
func TestBook(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	sp := 20 * time.Millisecond
	for _, c := range []struct {
		name string
		next time.Time
		want Booking
	}{
		{"no row", time.Time{}, Booking{OK: true, Start: now, Next: now.Add(sp)}},
		{"idle", now.Add(-time.Hour), Booking{OK: true, Start: now, Next: now.Add(sp)}},
		{"busy", now.Add(3 * time.Second), Booking{OK: true, Start: now.Add(3 * time.Second), Next: now.Add(3*time.Second + sp)}},
		{"at the horizon", now.Add(time.Minute), Booking{OK: true, Start: now.Add(time.Minute), Next: now.Add(time.Minute + sp)}},
		{"past the horizon", now.Add(time.Minute + 5*time.Second), Booking{Next: now.Add(time.Minute + 5*time.Second), Wait: 5 * time.Second}},
	} {
		if got := Book(c.next, now, sp, time.Minute); got != c.want {
			t.Errorf("%s: Book = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestLeasesHoldTheRate books leases of 1–10 requests at random times
// from many callers on one row at 50 requests a second, each call made
// at a random moment within LeaseGrace of its lease's start, and checks
// that every 10 s window holds at most MaxCallsInWindow calls, which is
// within 10 % of the rate.
func TestLeasesHoldTheRate(t *testing.T) {
	const rate = 50.0
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	var next time.Time
	var calls []time.Time
	now := t0
	for now.Before(t0.Add(2 * time.Minute)) {
		now = now.Add(time.Duration(rng.IntN(5)) * time.Millisecond)
		n := 1 + rng.IntN(10)
		b := Book(next, now, Spacing(n, rate), LeaseHorizon)
		if !b.OK {
			t.Fatalf("refused at %v", now)
		}
		next = b.Next
		for range n {
			calls = append(calls, b.Start.Add(time.Duration(rng.Int64N(int64(LeaseGrace)))))
		}
		if b.Start.After(now.Add(time.Second)) {
			now = b.Start.Add(-time.Second) // callers wait for their leases
		}
	}
	slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })
	bound := MaxCallsInWindow(rate, 10, 10*time.Second)
	if bound > 1.1*rate*10 {
		t.Fatalf("bound %v is over 10 %% above the rate", bound)
	}
	most, j := 0, 0
	for i := range calls {
		for calls[i].Sub(calls[j]) >= 10*time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	if float64(most) > bound || most < 400 {
		t.Errorf("%d calls in the busiest 10 s window of %d, want ≤ %v and near %v", most, len(calls), bound, rate*10)
	}
}
