package worker

import (
	"fmt"
	"testing"
	"time"
)

// TestRateHintsForgetPassedRows holds the process's rate hints to the
// rows leased from within the horizon: after many keys whose leases have
// passed, a sweep leaves only the hints still ahead of now.
func TestRateHintsForgetPassedRows(t *testing.T) {
	t.Cleanup(func() { rateHints.Clear() })
	rateHints.Clear()
	now := time.Unix(1_800_000_000, 0)
	ahead := rateHint{key: "live", shard: 0}
	storeRateHint(ahead, now.Add(time.Hour), now)
	for i := range 3 * rateHintSweepEvery {
		storeRateHint(rateHint{key: fmt.Sprint("gone-", i)}, now.Add(-time.Second), now)
	}
	n := 0
	rateHints.Range(func(any, any) bool { n++; return true })
	if n > rateHintSweepEvery {
		t.Fatalf("%d hints kept after %d stores of passed leases; want at most %d", n, 3*rateHintSweepEvery, rateHintSweepEvery)
	}
	if _, ok := rateHints.Load(ahead); !ok {
		t.Fatal("the hint of a lease still ahead was swept")
	}
}
