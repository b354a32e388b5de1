package live

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Of is b's running run's live view from its counters p at now.
// itemTimeout is the item function's timeout (0: api.DefaultItemTimeout),
// which decides when a run with items in flight is stalled.
func Of(b ledger.Batch, p ledger.Progress, now time.Time, itemTimeout time.Duration) api.LiveView {
	l := api.LiveView{RetryWaiting: p.Waiting(now), Interrupted: p.Interrupted, TimedOut: p.TimedOut, LastProgressAt: p.UpdatedAt}
	if l.LastProgressAt.Before(b.RunStartedAt) {
		l.LastProgressAt = b.RunStartedAt
	}
	if t := p.NextRetry(now); !t.IsZero() {
		l.NextRetryAt = &t
	}
	items := b.RunItems() // a correction run's own items; else the batch's
	fanned := p.FannedOut
	switch {
	case !b.FannedOut && p.Done == 0:
		fanned = 0 // the run's fan-out messages are not even sent
	case p.FanChunks == 0 && p.Done > 0, fanned < p.Done:
		// A run fanned out by a release that did not count its chunks:
		// taken as fanned out.
		fanned = items
	}
	fanned = min(fanned, items)
	l.NotFannedOut = max(0, items-fanned)
	notEnded := max(0, fanned-p.Done)
	l.RetryWaiting = min(l.RetryWaiting, notEnded)
	l.Withheld = min(p.Held[api.OutcomeWithheld], notEnded-l.RetryWaiting)
	l.InFlight = notEnded - l.RetryWaiting - max(0, l.Withheld)
	l.Withheld = max(0, l.Withheld)
	l.Exhausted = max(0, min(p.Held[api.OutcomeExhausted], l.InFlight))
	l.InFlight -= l.Exhausted
	l.Suspended = max(0, min(p.Held[api.OutcomeSuspended], l.InFlight))
	l.InFlight -= l.Suspended
	if b.Run == 1 && (b.Approval.Holds() || approvalOnItsWay(b, now)) {
		// The messages past the sample that were sent (the units of the
		// chunk the sample ends in) wait unstarted for the approval.
		// Once the estimate is written the sample has ended: every item
		// not ended, waiting or held is one of them (awaiting a decision,
		// or rejected and waiting for the cancel to end them).
		sampled := min(items, int64(b.Sample)+int64(b.Pack())-1)
		if b.Approval.Estimate != nil {
			sampled = min(sampled, p.Done)
		}
		l.HeldForApproval = max(0, min(fanned-sampled, l.InFlight))
		l.InFlight -= l.HeldForApproval
	}
	if b.MaxConcurrency > 0 {
		// A track holds one unit at a time: what is past the tracks' units
		// waits for one (api.LiveView.AwaitingTrack).
		if held := int64(b.MaxConcurrency) * int64(b.Pack()); l.InFlight > held {
			l.AwaitingTrack, l.InFlight = l.InFlight-held, held
		}
	}
	// A throttled item may wait many times a minute (Retry-After: 2), each
	// wait counted: the items waiting after a failure, whose waits are
	// long, are told apart first, and the throttled are the rest.
	failed := min(max(0, p.Waiting(now)-p.ThrottledWaiting(now)), l.RetryWaiting)
	l.Throttled = l.RetryWaiting - failed
	if class, text, n := p.Cause(now); n > 0 && failed > 0 {
		l.RetryCause = &api.RetryCause{Class: class, Error: text, Items: min(n, failed)}
	}
	switch {
	case b.Pause != nil && b.Pause.By == api.PauseByBudget:
		l.Attention = append(l.Attention, fmt.Sprintf("paused by its budget since %s: %s; raise it to resume (bulkrun budget ID --usd N)",
			b.Pause.Since.UTC().Format(time.RFC3339), b.Pause.Error))
	case b.Pause != nil:
		why := ""
		if b.Pause.Class != "" {
			why = " (" + b.Pause.Class + ")"
		}
		l.Attention = append(l.Attention, fmt.Sprintf("paused by %s%s since %s", b.Pause.By.Who(), why, b.Pause.Since.UTC().Format(time.RFC3339)))
	}
	awaiting := b.Run == 1 && b.Approval != nil && b.Approval.State == api.ApprovalAwaiting
	if awaiting {
		l.Attention = append(l.Attention, fmt.Sprintf("awaiting approval since %s: its sample of %s has ended; the rest runs once approved (bulkrun approve %s, or reject %s)",
			b.Approval.Estimate.MadeAt.UTC().Format(time.RFC3339), api.Count(b.Approval.Estimate.SampleItems, "item"), b.ID, b.ID))
	}
	for _, s := range slices.Sorted(maps.Keys(b.Halts)) {
		l.Attention = append(l.Attention, fmt.Sprintf("halted on %s since %s: its items are withheld; fix the credential's secret first, then lift the halt (bulkrun lift %s)",
			s, b.Halts[s].Since.UTC().Format(time.RFC3339), b.ID))
	}
	if l.Withheld > 0 {
		l.Attention = append(l.Attention, api.Count(l.Withheld, "item")+" withheld (bulkrun items "+b.ID+" --outcome withheld)")
	}
	if l.Exhausted > 0 {
		l.Attention = append(l.Attention, api.Count(l.Exhausted, "item")+" exhausted at a per-item ceiling (bulkrun items "+b.ID+" --outcome exhausted; raise it: bulkrun ceilings "+b.ID+")")
	}
	if l.Suspended > 0 {
		l.Attention = append(l.Attention, api.Count(l.Suspended, "item")+" suspended (bulkrun items "+b.ID+" --outcome suspended; bulkrun signal "+b.ID+" KEY)")
	}
	if f := p.ByOutcome[api.OutcomeFailed] + p.ByOutcome[api.OutcomeQuarantined]; f > 0 {
		l.Attention = append(l.Attention, api.Count(f, "item")+" failed or quarantined")
	}
	// Items that only wait out the downstream's own rate (a throttling:
	// its Retry-After) used no attempt: they alone need no look.
	if n := l.RetryWaiting - l.Throttled; n > 0 {
		after := ""
		if c := l.RetryCause; c != nil {
			after = " after " + c.Class
			if c.Items < n {
				after = fmt.Sprintf(", %d of them after %s", c.Items, c.Class)
			}
		}
		next := p.NextFailedRetry(now)
		if next.IsZero() && l.NextRetryAt != nil {
			next = *l.NextRetryAt
		}
		l.Attention = append(l.Attention, fmt.Sprintf("%s waiting for a retry%s (next at %s)", api.Count(n, "item"), after, next.Format(time.RFC3339)))
	}
	if l.Interrupted > 0 {
		l.Attention = append(l.Attention, api.Count(l.Interrupted, "attempt")+" interrupted (outcome unknown)")
	}
	if l.TimedOut > 0 {
		l.Attention = append(l.Attention, api.Count(l.TimedOut, "attempt")+" timed out (failure class timeout: the receiver may have finished them after bulkrun stopped waiting; each item's next call waits at least twice the timeout)")
	}
	if itemTimeout <= 0 {
		itemTimeout = api.DefaultItemTimeout
	}
	switch idle := now.Sub(l.LastProgressAt); {
	case awaiting:
		// Waiting for a person, not stalled: the line above says so.
	case idle >= api.StallAttention && p.Done < items:
		l.Stalled = true
		l.Attention = append(l.Attention, "no item ended for "+api.Count(int64(idle/time.Minute), "minute"))
	case idle >= itemTimeout+api.ProgressSlack && l.InFlight > 0 && l.RetryWaiting == 0 && b.Pause == nil:
		l.Stalled = true
		l.Attention = append(l.Attention, fmt.Sprintf("no item ended for %s with %s in flight, longer than a call can run (the item function's timeout is %s)",
			api.Count(int64(idle/time.Minute), "minute"), api.Count(l.InFlight, "item"), itemTimeout))
	}
	if !(b.Run == 1 && b.Approval.Holds()) {
		// Sampling or awaiting approval, the rest is held: the run has
		// no pace to project (the sample's estimate stands for it).
		l.Estimate = Estimate(b, p, now)
	}
	return l
}

// approvalOnItsWay reports whether b's first run was approved and the
// approval has not reached the held rest yet: the held messages come
// back at the hold's next check after the decision (api.ApprovalReachesBy),
// so until then they still wait unstarted.
func approvalOnItsWay(b ledger.Batch, now time.Time) bool {
	r := b.ApprovalReaches()
	return !r.IsZero() && now.Before(r)
}
