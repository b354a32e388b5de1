package retry

import (
	"testing"
	"time"
)

// TestScheduleDelay guards the schedule's arithmetic: the n-th delay is
// Interval × BackoffRate^(n−1) capped by MaxDelay, within ±Jitter of it,
// jittered when Jitter > 0 and exact when it is 0.
func TestScheduleDelay(t *testing.T) {
	tests := []struct {
		name     string
		s        Schedule
		n        int
		low, top time.Duration
	}{
		{"first", Schedule{Interval: time.Second}, 1, time.Second, time.Second},
		{"doubles", Schedule{Interval: time.Second}, 4, 8 * time.Second, 8 * time.Second},
		{"rate 3", Schedule{Interval: time.Second, BackoffRate: 3}, 3, 9 * time.Second, 9 * time.Second},
		{"capped", Schedule{Interval: time.Second, MaxDelay: 8 * time.Second}, 10, 8 * time.Second, 8 * time.Second},
		{"n below 1", Schedule{Interval: time.Second}, 0, time.Second, time.Second},
		{"jittered", Schedule{Interval: 2 * time.Second, Jitter: 0.5}, 1, time.Second, 3 * time.Second},
		{"jittered and capped", Schedule{Interval: 2 * time.Second, MaxDelay: 5 * time.Minute, Jitter: 0.5}, 20, 150 * time.Second, 450 * time.Second},
		{"interval over the cap", Schedule{Interval: time.Minute, MaxDelay: time.Second}, 1, time.Second, time.Second},
		{"zero", Schedule{}, 3, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 200 {
				d := tt.s.Delay(tt.n)
				if d < tt.low || d > tt.top {
					t.Fatalf("Delay(%d) = %s, want within [%s, %s]", tt.n, d, tt.low, tt.top)
				}
				seen[d] = true
			}
			if jittered := len(seen) > 1; jittered != (tt.s.Jitter > 0) {
				t.Errorf("Delay(%d): %d distinct values in 200, jitter %v", tt.n, len(seen), tt.s.Jitter)
			}
		})
	}
}
