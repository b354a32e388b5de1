package ledger

import (
	"errors"
	"slices"
	"testing"
	"time"

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

// TestKeyPacedThrottleWaitsTheRetryAfter guards Attempt.KeyPaced: a
// batch with no rate, throttled by its downstream naming a Retry-After,
// waits exactly that however long the streak (the key's hold spaces the
// calls: docs/adr/0036), never past the streak's end; without one, or
// for a batch whose key is not paced, the streak's doubling stands.
func TestKeyPacedThrottleWaitsTheRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	asked := 2 * time.Second
	end := func(keyPaced bool, delay, streak time.Duration) Ending {
		return Conclude(Attempt{Number: 3, RunAttempts: 1, MaxAttempts: 3, Ran: true, KeyPaced: keyPaced,
			Err: pipeline.Throttled("webhook", "429", delay, errors.New("429")), ThrottledSince: now.Add(-streak), Now: now})
	}
	for _, streak := range []time.Duration{0, 20 * time.Second, 5 * time.Minute} {
		if e := end(true, asked, streak); !e.Throttled || e.Wait != asked {
			t.Errorf("key paced, %v into the streak: throttled %v, wait %v, want %v", streak, e.Throttled, e.Wait, asked)
		}
		floor := min(streak, MaxThrottleDelay)
		if e := end(false, asked, streak); streak > 0 && e.Wait < floor {
			t.Errorf("not key paced, %v into the streak: wait %v, want the streak's doubling (≥ %v)", streak, e.Wait, floor)
		}
		if e := end(true, 0, streak); streak > 0 && e.Wait < floor {
			t.Errorf("key paced, no Retry-After, %v into the streak: wait %v, want the streak's doubling (≥ %v)", streak, e.Wait, floor)
		}
	}
	if e := end(true, 10*time.Minute, pipeline.MaxThrottleWait-5*time.Second); e.Wait != 5*time.Second {
		t.Errorf("a Retry-After past the streak's end: wait %v, want the 5 s left", e.Wait)
	}
}
