package ledger

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// LiveOf is b's running run's live view from its counters p at now.
// failures is the failed and quarantined items counted so far.
func LiveOf(b Batch, p Progress, now time.Time) api.LiveView {
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
	if b.Pause != nil {
		l.Attention = append(l.Attention, fmt.Sprintf("paused by %s since %s", b.Pause.By, b.Pause.Since.UTC().Format(time.RFC3339)))
	}
	for _, s := range slices.Sorted(maps.Keys(b.Halts)) {
		l.Attention = append(l.Attention, fmt.Sprintf("halted on %s since %s: its items are withheld; fix the credential, then lift the halt (bulkrun lift)",
			s, b.Halts[s].Since.UTC().Format(time.RFC3339)))
	}
	if l.Withheld > 0 {
		l.Attention = append(l.Attention, fmt.Sprintf("%d items withheld (bulkrun items --outcome withheld)", l.Withheld))
	}
	if f := p.ByOutcome[api.OutcomeFailed] + p.ByOutcome[api.OutcomeQuarantined]; f > 0 {
		l.Attention = append(l.Attention, fmt.Sprintf("%d items failed or quarantined", f))
	}
	if l.RetryWaiting > 0 {
		l.Attention = append(l.Attention, fmt.Sprintf("%d items waiting for a retry (next at %s)", l.RetryWaiting, l.NextRetryAt.Format(time.RFC3339)))
	}
	if l.Interrupted > 0 {
		l.Attention = append(l.Attention, fmt.Sprintf("%d attempts interrupted (outcome unknown)", l.Interrupted))
	}
	if l.TimedOut > 0 {
		l.Attention = append(l.Attention, fmt.Sprintf("%d attempts timed out (failure class timeout: the receiver may have finished them after bulkrun stopped waiting; each item's next call waits at least twice the timeout)", l.TimedOut))
	}
	if idle := now.Sub(l.LastProgressAt); idle >= api.StallAttention && p.Done < items {
		l.Attention = append(l.Attention, fmt.Sprintf("no item ended for %s", idle.Round(time.Minute)))
	}
	return l
}
