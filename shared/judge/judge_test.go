package judge

import (
	"testing"
	"time"
)

// The budget's reads of a run's counters: the first at once, then at
// most one per DefaultBudgetEvery per run in a process (another run has
// its own); a negative every reads each time.
func TestBudgetReadsAreThrottled(t *testing.T) {
	var k Reads
	t0 := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		id   string
		run  int
		at   time.Duration
		want bool
	}{
		{"b", 1, 0, true},
		{"b", 1, time.Second, false},
		{"b", 2, time.Second, true}, // another run
		{"c", 1, time.Second, true}, // another batch
		{"b", 1, DefaultBudgetEvery - time.Millisecond, false},
		{"b", 1, DefaultBudgetEvery, true},
		{"b", 1, DefaultBudgetEvery + time.Second, false},
	} {
		if got := k.due(tc.id, tc.run, t0.Add(tc.at), 0); got != tc.want {
			t.Errorf("%s run %d at +%s: due %v, want %v", tc.id, tc.run, tc.at, got, tc.want)
		}
	}
	for range 3 {
		if !k.due("b", 1, t0, -1) {
			t.Fatal("every < 0: want every read due")
		}
	}
}
