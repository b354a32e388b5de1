package worker

import (
	"testing"
	"time"
)

// TestDefaultUnavailableDelay: the delay before a message hit by an AWS
// fault is handled again is short, grows with each requeue, is jittered
// within [d/2, d] and never exceeds 2 minutes.
func TestDefaultUnavailableDelay(t *testing.T) {
	tests := []struct {
		n        int
		low, top time.Duration
	}{
		{1, 500 * time.Millisecond, time.Second},
		{2, time.Second, 2 * time.Second},
		{4, 4 * time.Second, 8 * time.Second},
		{8, time.Minute, 2 * time.Minute},
		{50, time.Minute, 2 * time.Minute},
		{0, 500 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := DefaultUnavailableDelay(tt.n)
			if d < tt.low || d > tt.top {
				t.Fatalf("DefaultUnavailableDelay(%d) = %s, want within [%s, %s]", tt.n, d, tt.low, tt.top)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("DefaultUnavailableDelay(%d) is not jittered", tt.n)
		}
	}
}
