package api

import (
	"testing"
	"time"
)

// TestApprovalChecks guards the hold's checks: every 10 s for its first
// 10 minutes, every minute to its first hour, then every 5 minutes; a
// held message waits to the next one plus 2–4 s, never past SQS's
// 15-minute delay.
func TestApprovalChecks(t *testing.T) {
	since := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		after, next time.Duration
	}{
		{-time.Second, 10 * time.Second}, // a clock behind the hold's start
		{0, 10 * time.Second},
		{9 * time.Second, 10 * time.Second},
		{10 * time.Second, 20 * time.Second},
		{9*time.Minute + 55*time.Second, 10 * time.Minute},
		{10 * time.Minute, 11 * time.Minute},
		{59*time.Minute + 30*time.Second, time.Hour},
		{time.Hour, time.Hour + 5*time.Minute},
		{time.Hour + 7*time.Minute, time.Hour + 10*time.Minute},
		{30 * time.Hour, 30*time.Hour + 5*time.Minute},
	} {
		if got := ApprovalCheckAt(since, since.Add(c.after)).Sub(since); got != c.next {
			t.Errorf("%v into the hold: next check at +%v, want +%v", c.after, got, c.next)
		}
	}
	now := since.Add(95 * time.Second)
	if lo, hi := ApprovalWait(since, now, 0), ApprovalWait(since, now, 1); lo != 7*time.Second || hi != 9*time.Second {
		t.Errorf("95 s in: waits %v–%v, want 7–9 s (the check at +1 m 40 s, plus 2–4 s)", lo, hi)
	}
	if by := ApprovalReachesBy(since, now).Sub(now); by != 9*time.Second {
		t.Errorf("95 s in: an approval reaches the rest within %v, want 9 s", by)
	}
	if w := ApprovalWait(since, since.Add(-time.Hour), 1); w != MaxResendDelay {
		t.Errorf("an hour before the hold's start: wait %v, want SQS's longest %v", w, MaxResendDelay)
	}
	if w := ApprovalWait(since, since.Add(2*time.Hour+time.Second), 1); w > MaxResendDelay || w < 4*time.Minute {
		t.Errorf("2 h in: wait %v, want the 5-minute check's, within SQS's longest %v", w, MaxResendDelay)
	}
	// Re-sends per held message: 110 in the first hour, then 12 an hour.
	n, at := 0, since
	for at.Before(since.Add(time.Hour)) {
		at = ApprovalCheckAt(since, at)
		n++
	}
	if n != 110 {
		t.Errorf("%d checks in the first hour, want 110", n)
	}
	for at.Before(since.Add(2 * time.Hour)) {
		at = ApprovalCheckAt(since, at)
		n++
	}
	if n != 110+12 {
		t.Errorf("%d checks in the first 2 hours, want 122", n)
	}
}
