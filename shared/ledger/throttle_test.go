package ledger

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestThrottleDelayFollowsTheStreak pins what docs/pipelines.md says of
// throttled waits: each is the longer of the time the item has been
// throttled so far (at least 1 s, at most 2 minutes, plus up to 50 %
// jitter) and the Retry-After asked for. A receiver answering
// "Retry-After: 2" to every call is called again 2 s after the first 429,
// then after as long as it has throttled the item: a minute into the
// streak, about a minute later (a measured item's next calls came a
// median 63 s apart), and never beyond the streak's 15 minutes.
func TestThrottleDelayFollowsTheStreak(t *testing.T) {
	const asked = 2 * time.Second
	if d := ThrottleDelay(0, asked); d != asked {
		t.Errorf("first wait %s, want the Retry-After asked for (%s): longer than 1 s + jitter", d, asked)
	}
	var waited time.Duration
	var gaps []time.Duration
	for waited < pipeline.MaxThrottleWait {
		d := ThrottleDelay(waited, asked)
		lo := max(asked, min(max(waited, MinThrottleDelay), MaxThrottleDelay))
		hi := max(asked, min(max(waited, MinThrottleDelay), MaxThrottleDelay)*3/2)
		if left := pipeline.MaxThrottleWait - waited; hi > left {
			lo, hi = min(lo, max(left, MinThrottleDelay)), max(left, MinThrottleDelay)
		}
		if d < lo || d > hi {
			t.Fatalf("after %s throttled: wait %s, want %s–%s", waited, d, lo, hi)
		}
		gaps = append(gaps, d)
		waited += d
	}
	// Over the first 3 minutes of a streak the calls are mostly far more
	// than the 2 s the receiver asked for apart: the waits' floors double
	// (2, 2, 4, 8, 16, 32, 64 s), so their median is at least 8 s whatever
	// the jitter adds.
	var first []time.Duration
	var at time.Duration
	for _, g := range gaps {
		if at >= 3*time.Minute {
			break
		}
		first = append(first, g)
		at += g
	}
	slices.Sort(first)
	if m := first[len(first)/2]; m < 8*time.Second {
		t.Errorf("median wait over the first 3 minutes %s: want the streak's doubling, well above the 2 s asked", m)
	}
	if len(gaps) > 40 {
		t.Errorf("%d throttled calls in a 15-minute streak: the waits do not grow", len(gaps))
	}
}

// TestPacedThrottleWaitsItsFirstDelay guards that a throttled call made
// at a place leased in its key's adaptive line (Attempt.Paced) waits the
// streak's first delay, however long the streak: its next call leases a
// new place in the line, which spaces it; an unpaced one's wait follows
// the streak. Both count no attempt, and the streak's 15 minutes still
// end it.
func TestPacedThrottleWaitsItsFirstDelay(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	throttled := pipeline.Throttled("http", "429", 0, errors.New("429"))
	a := Attempt{RunAttempts: 1, MaxAttempts: 1, Ran: true, Err: throttled, ThrottledSince: now.Add(-40 * time.Second), Now: now}
	for range 50 {
		a.Paced = true
		e := Conclude(a)
		if !e.Throttled || e.Outcome != api.OutcomeInFlight || e.Wait < MinThrottleDelay || e.Wait > MinThrottleDelay*3/2 {
			t.Fatalf("a paced call throttled 40 s into its streak: %+v, want a retry after 1–1.5 s counting no attempt", e)
		}
		a.Paced = false
		if e := Conclude(a); e.Wait < 40*time.Second {
			t.Fatalf("an unpaced call throttled 40 s into its streak waits %s, want ≥ 40 s (the streak's doubling)", e.Wait)
		}
	}
	a.Paced, a.ThrottledSince = true, now.Add(-pipeline.MaxThrottleWait)
	if e := Conclude(a); e.Throttled || e.Outcome != api.OutcomeFailed {
		t.Errorf("a paced call throttled past the streak's %s: %+v, want it counted (failed at max attempts 1)", pipeline.MaxThrottleWait, e)
	}
}
