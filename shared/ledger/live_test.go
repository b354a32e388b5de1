package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// TestLiveOf: every item not ended is in exactly one of in flight,
// waiting for a retry and not fanned out, and the run needs attention
// exactly while an item failed, waits, was interrupted or timed out, or
// nothing ended for StallAttention.
func TestLiveOf(t *testing.T) {
	start := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	now := start.Add(10 * time.Minute)
	b := Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 10_000, FannedOut: true, RunStartedAt: start}}
	for _, tt := range []struct {
		name                             string
		b                                Batch
		p                                Progress
		now                              time.Time
		inFlight, waiting, notFanned, in int64
		next                             string
		attention                        []string
	}{
		{name: "fan-out not sent", b: Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 10_000, RunStartedAt: start}},
			now: now, notFanned: 10_000},
		{name: "one chunk fanned out, nothing ended yet", b: b, now: now,
			p:        Progress{FannedOut: 5000, FanChunks: 1},
			inFlight: 5000, notFanned: 5000},
		{name: "receiver down: waiting items, retries due in two minutes", b: b, now: now,
			p: Progress{Done: 1000, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 1000}, FannedOut: 5000, FanChunks: 1, UpdatedAt: now.Add(-time.Minute),
				RetryDue: map[int64]int64{DueMinute(now.Add(-3 * time.Minute)): 50, DueMinute(now.Add(5*time.Minute + time.Second)): 900, DueMinute(now.Add(9 * time.Minute)): 80}},
			inFlight: 3020, waiting: 980, notFanned: 5000, next: "2026-12-01T19:16:00Z",
			attention: []string{"980 items waiting for a retry (next at 2026-12-01T19:16:00Z)"}},
		{name: "hanging receiver: attempts cut off, nothing ended for 31 minutes", b: b, now: start.Add(31 * time.Minute),
			p:        Progress{FannedOut: 10_000, FanChunks: 2, Interrupted: 20},
			inFlight: 10_000, in: 20,
			attention: []string{"20 attempts interrupted (outcome unknown)", "no item ended for 31m0s"}},
		{name: "slow receiver: calls timed out, items waiting for their retry", b: b, now: now,
			p: Progress{FannedOut: 10_000, FanChunks: 2, UpdatedAt: now, TimedOut: 40,
				RetryDue: map[int64]int64{DueMinute(now.Add(time.Minute)): 40}},
			inFlight: 9960, waiting: 40, next: "2026-12-01T19:11:00Z",
			attention: []string{"40 items waiting for a retry (next at 2026-12-01T19:11:00Z)",
				"40 attempts timed out (failure class timeout: the receiver may have finished them after bulkrun stopped waiting; each item's next call waits at least twice the timeout)"}},
		{name: "failures counted", b: b, now: now,
			p:        Progress{Done: 3, Failures: 3, ByOutcome: map[api.Outcome]int64{api.OutcomeFailed: 2, api.OutcomeQuarantined: 1}, FannedOut: 10_000, FanChunks: 2, UpdatedAt: now},
			inFlight: 9997, attention: []string{"3 items failed or quarantined"}},
		{name: "paused by an outage", b: Batch{
			Batch: api.Batch{
				ID:           "b",
				Status:       api.StatusRunning,
				Run:          1,
				ItemCount:    10_000,
				FannedOut:    true,
				RunStartedAt: start,
				Pause:        &api.Pause{By: api.PauseByOutage, Since: start.Add(2 * time.Minute)},
			},
		}, now: now,
			p:        Progress{FannedOut: 10_000, FanChunks: 2, UpdatedAt: now},
			inFlight: 10_000, attention: []string{"paused by outage since 2026-12-01T19:02:00Z"}},
		{name: "a run fanned out before chunks were counted", b: b, now: now,
			p:        Progress{Done: 10, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 10}, UpdatedAt: now},
			inFlight: 9990},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := LiveOf(tt.b, tt.p, tt.now)
			if l.InFlight != tt.inFlight || l.RetryWaiting != tt.waiting || l.NotFannedOut != tt.notFanned || l.Interrupted != tt.in {
				t.Errorf("in flight %d, waiting %d, not fanned out %d, interrupted %d; want %d, %d, %d, %d",
					l.InFlight, l.RetryWaiting, l.NotFannedOut, l.Interrupted, tt.inFlight, tt.waiting, tt.notFanned, tt.in)
			}
			if got := l.InFlight + l.RetryWaiting + l.NotFannedOut + tt.p.Done; got != tt.b.ItemCount {
				t.Errorf("the parts sum to %d of %d items", got, tt.b.ItemCount)
			}
			next := ""
			if l.NextRetryAt != nil {
				next = l.NextRetryAt.Format(time.RFC3339)
			}
			if next != tt.next {
				t.Errorf("next retry %q, want %q", next, tt.next)
			}
			if strings.Join(l.Attention, "; ") != strings.Join(tt.attention, "; ") || l.NeedsAttention() != (len(tt.attention) > 0) {
				t.Errorf("attention %q, want %q", l.Attention, tt.attention)
			}
		})
	}
}
