package live

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestOf: every item not ended is in exactly one of in flight,
// waiting for a retry and not fanned out; the waiting items' most common
// cause is named; and the run needs attention exactly while an item
// failed, waits after a failure (not only out a throttling, which uses
// no attempt), was interrupted or timed out, or it is stalled: nothing
// ended for StallAttention, or, with items in flight, none waiting and
// no pause, for longer than the item function's timeout + ProgressSlack
// (6 min at the default timeout; 11 min at 10).
func TestOf(t *testing.T) {
	start := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	now := start.Add(10 * time.Minute)
	b := ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 10_000, FannedOut: true, RunStartedAt: start}}
	for _, tt := range []struct {
		name                             string
		b                                ledger.Batch
		p                                ledger.Progress
		now                              time.Time
		inFlight, waiting, notFanned, in int64
		throttled, held                  int64
		next, cause                      string
		attention                        []string
		timeout                          time.Duration // the item function's; 0: the default
		stalled                          bool
	}{
		{name: "fan-out not sent", b: ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 10_000, RunStartedAt: start}},
			now: now, notFanned: 10_000},
		{name: "one chunk fanned out, nothing ended yet", b: b, now: start.Add(time.Minute),
			p:        ledger.Progress{FannedOut: 5000, FanChunks: 1},
			inFlight: 5000, notFanned: 5000},
		{name: "receiver down: waiting items, retries due in two minutes", b: b, now: now,
			p: ledger.Progress{Done: 1000, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 1000}, FannedOut: 5000, FanChunks: 1, UpdatedAt: now.Add(-time.Minute),
				RetryDue: map[int64]int64{ledger.DueMinute(now.Add(-3 * time.Minute)): 50, ledger.DueMinute(now.Add(5*time.Minute + time.Second)): 900, ledger.DueMinute(now.Add(9 * time.Minute)): 80}},
			inFlight: 3020, waiting: 980, notFanned: 5000, next: "2026-12-01T19:16:00Z",
			attention: []string{"980 items waiting for a retry (next at 2026-12-01T19:16:00Z)"}},
		{name: "hanging receiver: attempts cut off, nothing ended for 31 minutes", b: b, now: start.Add(31 * time.Minute),
			p:        ledger.Progress{FannedOut: 10_000, FanChunks: 2, Interrupted: 20},
			inFlight: 10_000, in: 20,
			attention: []string{"20 attempts interrupted (outcome unknown)", "no item ended for 31 minutes"}, stalled: true},
		{name: "items in flight, none ended for 6 minutes: longer than a call can run", b: b, now: start.Add(8 * time.Minute),
			p:        ledger.Progress{Done: 10, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 10}, FannedOut: 10_000, FanChunks: 2, UpdatedAt: start.Add(2 * time.Minute)},
			inFlight: 9990, stalled: true,
			attention: []string{"no item ended for 6 minutes with 9990 items in flight, longer than a call can run (the item function's timeout is 5m0s)"}},
		{name: "the same under a 10-minute item timeout: a call may still run", b: b, now: start.Add(8 * time.Minute), timeout: 10 * time.Minute,
			p:        ledger.Progress{Done: 10, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 10}, FannedOut: 10_000, FanChunks: 2, UpdatedAt: start.Add(2 * time.Minute)},
			inFlight: 9990},
		{name: "items in flight, none ended for 6 minutes, some waiting for a retry", b: b, now: start.Add(8 * time.Minute),
			p: ledger.Progress{Done: 10, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 10}, FannedOut: 10_000, FanChunks: 2, UpdatedAt: start.Add(2 * time.Minute),
				RetryDue: map[int64]int64{ledger.DueMinute(start.Add(10 * time.Minute)): 30}},
			inFlight: 9960, waiting: 30, next: "2026-12-01T19:10:00Z",
			attention: []string{"30 items waiting for a retry (next at 2026-12-01T19:10:00Z)"}},
		{name: "slow receiver: calls timed out, items waiting for their retry", b: b, now: now,
			p: ledger.Progress{FannedOut: 10_000, FanChunks: 2, UpdatedAt: now, TimedOut: 40,
				RetryDue: map[int64]int64{ledger.DueMinute(now.Add(time.Minute)): 40}},
			inFlight: 9960, waiting: 40, next: "2026-12-01T19:11:00Z",
			attention: []string{"40 items waiting for a retry (next at 2026-12-01T19:11:00Z)",
				"40 attempts timed out (failure class timeout: the receiver may have finished them after bulkrun stopped waiting; each item's next call waits at least twice the timeout)"}},
		{name: "failures counted", b: b, now: now,
			p:        ledger.Progress{Done: 3, Failures: 3, ByOutcome: map[api.Outcome]int64{api.OutcomeFailed: 2, api.OutcomeQuarantined: 1}, FannedOut: 10_000, FanChunks: 2, UpdatedAt: now},
			inFlight: 9997, attention: []string{"3 items failed or quarantined"}},
		{name: "paused by an outage", b: ledger.Batch{
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
			p:        ledger.Progress{FannedOut: 10_000, FanChunks: 2, UpdatedAt: now},
			inFlight: 10_000, attention: []string{"paused by an outage since 2026-12-01T19:02:00Z"}},
		{name: "paused at its budget", b: ledger.Batch{
			Batch: api.Batch{
				ID:           "b",
				Status:       api.StatusRunning,
				Run:          1,
				ItemCount:    10_000,
				FannedOut:    true,
				RunStartedAt: start,
				BudgetUSD:    5,
				Pause: &api.Pause{By: api.PauseByBudget, Since: start.Add(2 * time.Minute), Class: "budget",
					Error: "budget $5 reached ($5 spent: pipeline $5, DynamoDB $0; Lambda and SQS not counted)"},
			},
		}, now: now,
			p:        ledger.Progress{FannedOut: 10_000, FanChunks: 2, UpdatedAt: now},
			inFlight: 10_000, attention: []string{"paused by its budget since 2026-12-01T19:02:00Z: budget $5 reached ($5 spent: pipeline $5, DynamoDB $0; Lambda and SQS not counted); raise it to resume (bulkrun budget ID --usd N)"}},
		{name: "a receiver's Retry-After: items only wait out its throttling, which uses no attempt", b: b, now: now,
			p: ledger.Progress{Done: 1000, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 1000}, FannedOut: 5000, FanChunks: 1, UpdatedAt: now,
				RetryDue:     map[int64]int64{ledger.DueMinute(now.Add(30 * time.Second)): 300},
				ThrottledDue: map[int64]int64{ledger.DueMinute(now.Add(30 * time.Second)): 300}},
			inFlight: 3700, waiting: 300, notFanned: 5000, next: "2026-12-01T19:11:00Z", throttled: 300},
		{name: "refused connections: the waiting items' cause", b: b, now: now,
			p: ledger.Progress{Done: 1000, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 1000}, FannedOut: 5000, FanChunks: 1, UpdatedAt: now,
				RetryDue:     map[int64]int64{ledger.DueMinute(now.Add(5 * time.Minute)): 1000},
				ThrottledDue: map[int64]int64{ledger.DueMinute(now.Add(5 * time.Minute)): 20},
				Causes: map[string]ledger.WaitCause{
					"connection refused": {Error: "webhook: dial tcp 10.0.0.1:443: connect: connection refused", Due: map[int64]int64{ledger.DueMinute(now.Add(5 * time.Minute)): 979}},
					"timeout":            {Error: "webhook: timeout", Due: map[int64]int64{ledger.DueMinute(now.Add(5 * time.Minute)): 1}},
				}},
			inFlight: 3000, waiting: 1000, notFanned: 5000, next: "2026-12-01T19:15:00Z", throttled: 20,
			cause:     "connection refused (979 items)",
			attention: []string{"980 items waiting for a retry, 979 of them after connection refused (next at 2026-12-01T19:15:00Z)"}},
		{name: "throttled items counted at every wait of a minute do not hide the refused ones", b: b, now: now,
			p: ledger.Progress{Done: 9987, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 9987}, FannedOut: 10_000, FanChunks: 2, UpdatedAt: now,
				RetryDue:     map[int64]int64{ledger.DueMinute(now.Add(30 * time.Second)): 400, ledger.DueMinute(now.Add(10 * time.Minute)): 3},
				ThrottledDue: map[int64]int64{ledger.DueMinute(now.Add(30 * time.Second)): 400},
				Causes:       map[string]ledger.WaitCause{"connection refused": {Error: "refused", Due: map[int64]int64{ledger.DueMinute(now.Add(10 * time.Minute)): 3}}}},
			waiting: 13, throttled: 10, next: "2026-12-01T19:11:00Z", cause: "connection refused (3 items)",
			attention: []string{"3 items waiting for a retry after connection refused (next at 2026-12-01T19:20:00Z)"}},
		{name: "one item waits", b: b, now: now,
			p: ledger.Progress{Done: 9999, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 9999}, FannedOut: 10_000, FanChunks: 2, UpdatedAt: now,
				RetryDue: map[int64]int64{ledger.DueMinute(now.Add(time.Minute)): 1},
				Causes:   map[string]ledger.WaitCause{"http 502": {Error: "webhook: k9: HTTP 502", Due: map[int64]int64{ledger.DueMinute(now.Add(time.Minute)): 1}}}},
			waiting: 1, next: "2026-12-01T19:11:00Z", cause: "http 502 (1 item)",
			attention: []string{"1 item waiting for a retry after http 502 (next at 2026-12-01T19:11:00Z)"}},
		{name: "sampling: the messages sent past the sample are held, not in flight", b: ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 200,
			FannedOut: true, RunStartedAt: start, Plan: api.Plan{ItemsPerMessage: 10, Sample: 25}, Approval: &api.Approval{Sample: 25, State: api.ApprovalSampling}}}, now: start.Add(10 * time.Second),
			// The first chunk of 100 fanned out; the sample's messages
			// hold at most 25 + 10 − 1 = 34 items, so 66 wait unstarted.
			p:        ledger.Progress{Done: 20, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 20}, FannedOut: 100, FanChunks: 1, UpdatedAt: start.Add(10 * time.Second)},
			inFlight: 14, held: 66, notFanned: 100},
		{name: "awaiting approval: every item not ended is held, none in flight", b: ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 200,
			FannedOut: true, RunStartedAt: start, Plan: api.Plan{ItemsPerMessage: 10, Sample: 25},
			Approval: api.ApprovalOf(25, "", "", time.Time{}, &api.SampleEstimate{MadeAt: start.Add(20 * time.Second), Items: 200, SampleItems: 30})}}, now: start.Add(30 * time.Second),
			// The sample's three messages ran 30 items, all ended: the
			// estimate is written; the lower bound of 34 would leave 4 of
			// the held in flight.
			p:        ledger.Progress{Done: 30, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 30}, FannedOut: 100, FanChunks: 1, UpdatedAt: start.Add(20 * time.Second)},
			inFlight: 0, held: 70, notFanned: 100,
			attention: []string{"awaiting approval since 2026-12-01T19:00:20Z: its sample of 30 items has ended; the rest runs once approved (bulkrun approve b, or reject b)"}},
		{name: "rejected after its estimate: the held items wait for the cancel, none in flight", b: ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 200,
			FannedOut: true, RunStartedAt: start, Stop: api.StatusCancelled, Plan: api.Plan{ItemsPerMessage: 10, Sample: 25},
			Approval: api.ApprovalOf(25, api.ApprovalRejected, api.DecidedByCaller, start.Add(25*time.Second), &api.SampleEstimate{MadeAt: start.Add(20 * time.Second), Items: 200, SampleItems: 30})}}, now: start.Add(30 * time.Second),
			p:        ledger.Progress{Done: 30, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 30}, FannedOut: 100, FanChunks: 1, UpdatedAt: start.Add(20 * time.Second)},
			inFlight: 0, held: 70, notFanned: 100},
		{name: "approved, before the approval reaches the rest: still held", b: ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 200,
			FannedOut: true, RunStartedAt: start, Plan: api.Plan{ItemsPerMessage: 10, Sample: 25},
			Approval: api.ApprovalOf(25, api.ApprovalApproved, api.DecidedByCaller, start.Add(25*time.Second), &api.SampleEstimate{MadeAt: start.Add(20 * time.Second), Items: 200, SampleItems: 30})}}, now: start.Add(29 * time.Second),
			// The next check after the decision is at +30 s; the rest
			// comes back by +34 s.
			p:        ledger.Progress{Done: 30, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 30}, FannedOut: 100, FanChunks: 1, UpdatedAt: start.Add(20 * time.Second)},
			inFlight: 0, held: 70, notFanned: 100},
		{name: "approved, the approval has reached the rest: in flight", b: ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 200,
			FannedOut: true, RunStartedAt: start, Plan: api.Plan{ItemsPerMessage: 10, Sample: 25},
			Approval: api.ApprovalOf(25, api.ApprovalApproved, api.DecidedByCaller, start.Add(25*time.Second), &api.SampleEstimate{MadeAt: start.Add(20 * time.Second), Items: 200, SampleItems: 30})}}, now: start.Add(35 * time.Second),
			p:        ledger.Progress{Done: 30, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 30}, FannedOut: 100, FanChunks: 1, UpdatedAt: start.Add(20 * time.Second)},
			inFlight: 70, notFanned: 100},
		{name: "a run fanned out before chunks were counted", b: b, now: now,
			p:        ledger.Progress{Done: 10, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: 10}, UpdatedAt: now},
			inFlight: 9990},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := Of(tt.b, tt.p, tt.now, tt.timeout)
			if l.InFlight != tt.inFlight || l.RetryWaiting != tt.waiting || l.NotFannedOut != tt.notFanned || l.Interrupted != tt.in {
				t.Errorf("in flight %d, waiting %d, not fanned out %d, interrupted %d; want %d, %d, %d, %d",
					l.InFlight, l.RetryWaiting, l.NotFannedOut, l.Interrupted, tt.inFlight, tt.waiting, tt.notFanned, tt.in)
			}
			if l.HeldForApproval != tt.held {
				t.Errorf("held for approval %d, want %d", l.HeldForApproval, tt.held)
			}
			if got := l.InFlight + l.RetryWaiting + l.NotFannedOut + l.HeldForApproval + tt.p.Done; got != tt.b.ItemCount {
				t.Errorf("the parts sum to %d of %d items", got, tt.b.ItemCount)
			}
			cause := ""
			if l.RetryCause != nil {
				cause = l.RetryCause.Text()
			}
			if l.Throttled != tt.throttled || cause != tt.cause {
				t.Errorf("throttled %d, cause %q; want %d, %q", l.Throttled, cause, tt.throttled, tt.cause)
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
			if l.Stalled != tt.stalled {
				t.Errorf("stalled %v, want %v", l.Stalled, tt.stalled)
			}
		})
	}
}

// TestOfAwaitingTrack guards the live view of a run with
// max_concurrency N: of the items fanned out and not ended, at most N ×
// items per message are in flight (the units its tracks hold); the rest
// wait for a track, unstarted, and the census counts them pending. A
// user saw "in flight 1499" at max_concurrency 150 while the receiver
// never had more than 147 calls open.
func TestOfAwaitingTrack(t *testing.T) {
	start := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name                       string
		limit, k                   int
		fanned, done               int64
		inFlight, awaiting, notFan int64
	}{
		{"150 tracks, 1 item per message", 150, 1, 3000, 1000, 150, 1850, 0},
		{"150 tracks, 10 items per message", 150, 10, 3000, 1000, 1500, 500, 0},
		{"fewer left than the tracks hold", 150, 10, 3000, 2000, 1000, 0, 0},
		{"a chunk not begun yet", 10, 1, 2000, 0, 10, 1990, 1000},
		{"no limit", 0, 1, 3000, 1000, 2000, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := ledger.Batch{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 3000, FannedOut: true, RunStartedAt: start,
				Plan: api.Plan{MaxConcurrency: tt.limit, ItemsPerMessage: tt.k}}}
			p := ledger.Progress{Done: tt.done, ByOutcome: map[api.Outcome]int64{api.OutcomeSucceeded: tt.done}, FannedOut: tt.fanned, FanChunks: 2, UpdatedAt: start}
			l := Of(b, p, start.Add(time.Second), 0)
			if l.InFlight != tt.inFlight || l.AwaitingTrack != tt.awaiting || l.NotFannedOut != tt.notFan {
				t.Errorf("in flight %d, awaiting a track %d, not fanned out %d; want %d, %d, %d", l.InFlight, l.AwaitingTrack, l.NotFannedOut, tt.inFlight, tt.awaiting, tt.notFan)
			}
		})
	}
}
