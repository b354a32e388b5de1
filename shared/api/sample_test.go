package api

import (
	"testing"
	"time"
)

// TestApprovalChecks guards the hold's checks: 30 s after it began, then
// every minute for its first hour, then every 5 minutes; a held message
// waits to the next one plus 15–30 s, never past SQS's 15-minute delay.
func TestApprovalChecks(t *testing.T) {
	since := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		after, next time.Duration
	}{
		{-time.Second, 30 * time.Second}, // a clock behind the hold's start
		{0, 30 * time.Second},
		{30 * time.Second, 90 * time.Second},
		{time.Minute, 90 * time.Second},
		{59 * time.Minute, 59*time.Minute + 30*time.Second},
		{59*time.Minute + 30*time.Second, time.Hour},
		{time.Hour, time.Hour + 5*time.Minute},
		{time.Hour + 7*time.Minute, time.Hour + 10*time.Minute},
		{30 * time.Hour, 30*time.Hour + 5*time.Minute},
	} {
		if got := ApprovalCheckAt(since, since.Add(c.after)).Sub(since); got != c.next {
			t.Errorf("%v into the hold: next check at +%v, want +%v", c.after, got, c.next)
		}
	}
	now := since.Add(90 * time.Second)
	if lo, hi := ApprovalWait(since, now, 0), ApprovalWait(since, now, 1); lo != 75*time.Second || hi != 90*time.Second {
		t.Errorf("90 s in: waits %v–%v, want 1 m 15 s–1 m 30 s (the check at +2 m 30 s, plus 15–30 s)", lo, hi)
	}
	if w := ApprovalWait(since, since.Add(-time.Hour), 1); w != MaxResendDelay {
		t.Errorf("an hour before the hold's start: wait %v, want SQS's longest %v", w, MaxResendDelay)
	}
	// Re-sends per held message: 61 in the first hour, then 12 an hour.
	n, at := 0, since
	for at.Before(since.Add(2 * time.Hour)) {
		at = ApprovalCheckAt(since, at)
		n++
	}
	if n != 61+12 {
		t.Errorf("%d checks in the first 2 hours, want 73", n)
	}
}
