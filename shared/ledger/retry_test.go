package ledger

import (
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// TestDefaultRetryPolicySpansAnOutage guards the promise of the defaults:
// with the default 3 attempts an item's attempts span at least 15 minutes
// whatever the jitter draws (jitter only lengthens a wait), so a
// downstream outage of 5 (or up to 15) minutes fails no item, and the
// stated bound on waiting holds.
func TestDefaultRetryPolicySpansAnOutage(t *testing.T) {
	p := api.DefaultRetryPolicy
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := RetrySpan(p, 3); got != 15*time.Minute {
		t.Fatalf("nominal span of 3 attempts %s, want 15m", got)
	}
	if got := RetryMaxWait(p, 3); got != 22*time.Minute+30*time.Second {
		t.Fatalf("max wait of 3 attempts %s, want 22m30s", got)
	}
	for range 1000 {
		span := RetryDelay(p, 1) + RetryDelay(p, 2)
		if span < 15*time.Minute || span > RetryMaxWait(p, 3) {
			t.Fatalf("a drawn span %s outside [15m, %s]", span, RetryMaxWait(p, 3))
		}
	}
}

// TestRetryPolicyDelay guards the nominal schedule: interval ×
// rate^(n−1), capped at max_delay_seconds; no jitter, no wait.
func TestRetryPolicyDelay(t *testing.T) {
	p := api.RetryPolicy{IntervalSeconds: 2, BackoffRate: 3, MaxDelaySeconds: 30}
	for n, want := range map[int]time.Duration{1: 2 * time.Second, 2: 6 * time.Second, 3: 18 * time.Second, 4: 30 * time.Second, 9: 30 * time.Second} {
		if got := RetryDelay(p, n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	if got := RetryDelay(api.RetryPolicy{IntervalSeconds: 5, BackoffRate: 1, MaxDelaySeconds: 5}, 4); got != 5*time.Second {
		t.Errorf("rate 1: Delay(4) = %s, want 5s", got)
	}
	if got := RetryDelay(api.RetryPolicy{BackoffRate: 1}, 3); got != 0 {
		t.Errorf("zero interval: %s", got)
	}
}
