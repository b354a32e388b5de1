package pacer

import (
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// TestLagTracksHowLateUnitsComeBack guards the lead a unit waiting for
// its rate lease is sent with (Lead): pace.LeaseSleep/2 while its key's
// units come back on time; raised toward a lateness seen often (most
// returns then on time), not to one outlier's; lowered again once they
// come back on time; never past MaxLag; per key.
func TestLagTracksHowLateUnitsComeBack(t *testing.T) {
	t.Cleanup(Forget)
	Forget()
	if got := Lead("k"); got != pace.LeaseSleep/2 {
		t.Fatalf("lead before any return %v, want %v", got, pace.LeaseSleep/2)
	}
	for range 200 {
		Arrived("k", 4*time.Second)
	}
	if got := Lag("k"); got < 3900*time.Millisecond || got > 4*time.Second {
		t.Errorf("lag after returns 4 s late %v, want ≈ 4 s", got)
	}
	if got := Lag("other"); got != 0 {
		t.Errorf("another key's lag %v, want 0", got)
	}
	Arrived("k", time.Minute) // one outlier
	if got := Lag("k"); got > 20*time.Second {
		t.Errorf("lag after one return a minute late %v, want it moved a quarter of the way (≤ 20 s)", got)
	}
	for range 400 {
		Arrived("k", -500*time.Millisecond)
	}
	if got := Lag("k"); got != 0 {
		t.Errorf("lag after returns on time %v, want 0", got)
	}
	for range 200 {
		Arrived("k", time.Hour)
	}
	if got := Lag("k"); got != MaxLag {
		t.Errorf("lag after returns an hour late %v, want MaxLag %v", got, MaxLag)
	}
}
