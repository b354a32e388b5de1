package credential

import (
	"context"
	"sync"
	"testing"
	"time"
)

// countingSecrets counts its reads past the cache; Resolve answers the
// cached value, ResolveFresh the latest and caches it.
type countingSecrets struct {
	mu             sync.Mutex
	cached, latest string
	fresh          int
}

func (s *countingSecrets) Resolve(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cached, nil
}

func (s *countingSecrets) ResolveFresh(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fresh++
	s.cached = s.latest
	return s.latest, nil
}

// TestLiftsReadOncePerLift guards Lifts.Resolve for a batch row with no
// lift time (a lift by an earlier release): the first lifted unit of
// a process reads past the cache and gets the fixed value; the others of
// that lift (a later wake page within FreshEvery included) take it from
// the cache; a lift FreshEvery after the read is read past the cache
// again; a subject never read is.
func TestLiftsReadOncePerLift(t *testing.T) {
	s := &countingSecrets{cached: "Bearer wrong", latest: "Bearer right"}
	var l Lifts
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	resolve := func(woken, now time.Time) string {
		t.Helper()
		return authorization(t, &l, s, time.Time{}, woken, now)
	}
	if got := resolve(t0, t0.Add(time.Second)); got != "Bearer right" || s.fresh != 1 {
		t.Fatalf("first lifted unit: %q after %d fresh reads, want the fixed value after 1", got, s.fresh)
	}
	if got := resolve(t0, t0.Add(2*time.Second)); got != "Bearer right" || s.fresh != 1 {
		t.Errorf("second unit of the lift: %q after %d fresh reads, want the cached fixed value, no read", got, s.fresh)
	}
	if resolve(t0.Add(5*time.Second), t0.Add(6*time.Second)); s.fresh != 1 {
		t.Errorf("a later wake page within FreshEvery: %d fresh reads, want 1", s.fresh)
	}
	if resolve(t0.Add(FreshEvery+2*time.Second), t0.Add(FreshEvery+3*time.Second)); s.fresh != 2 {
		t.Errorf("a lift FreshEvery after the read: %d fresh reads, want 2", s.fresh)
	}
	if resolve(t0, t0.Add(FreshEvery+4*time.Second)); s.fresh != 2 {
		t.Errorf("an item woken before the last read: %d fresh reads, want 2", s.fresh)
	}
}

// TestLiftsReadOncePerBatchLift guards Lifts.Resolve with the batch's
// lift time: the first unit after a lift reads past the cache, whatever
// woke it (a woken item, or an item of a run resumed after the lift,
// woken by nothing); the process's other units of that lift take the
// value from the cache; a second lift 5 s later (a fix that was wrong
// too) is read past the cache again, where the rule without a lift time
// waits FreshEvery and sends the cached value.
func TestLiftsReadOncePerBatchLift(t *testing.T) {
	s := &countingSecrets{cached: "Bearer wrong", latest: "Bearer right"}
	var l Lifts
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	resolve := func(lifted, now time.Time) string {
		t.Helper()
		return authorization(t, &l, s, lifted, time.Time{}, now)
	}
	if got := resolve(t0, t0.Add(time.Second)); got != "Bearer right" || s.fresh != 1 {
		t.Fatalf("first unit after the lift: %q after %d fresh reads, want the fixed value after 1", got, s.fresh)
	}
	if got := resolve(t0, t0.Add(15*time.Second)); got != "Bearer right" || s.fresh != 1 {
		t.Errorf("another unit of the lift: %q after %d fresh reads, want the cached value, no read", got, s.fresh)
	}
	s.mu.Lock()
	s.latest = "Bearer right-at-last"
	s.mu.Unlock()
	if got := resolve(t0.Add(20*time.Second), t0.Add(21*time.Second)); got != "Bearer right-at-last" || s.fresh != 2 {
		t.Errorf("a second lift 20 s after the first: %q after %d fresh reads, want the new value after 2", got, s.fresh)
	}
}

const liftsARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hook"

// authorization is the Authorization header l resolves from s for a
// unit of a batch lifted at lifted, its item woken at woken.
func authorization(t *testing.T, l *Lifts, s Secrets, lifted, woken, now time.Time) string {
	t.Helper()
	headers := map[string]string{"Authorization": "secret:" + liftsARN}
	h, _, err := l.Resolve(context.Background(), s, "secret:"+liftsARN, lifted, woken, now, headers, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h["Authorization"]
}
