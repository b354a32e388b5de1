package live

import (
	"slices"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Estimate is the running run's pace and projection (api.Estimate) at
// now from its counters p, by eta.Estimate's rules: nil while it has
// ended no item, before its start, while b is paused, or while its run
// is being stopped (b.Stop: a cancel or a threshold stop settles the
// items not started, which are never run, so no finish or cost at the
// end is projected for them). The run's items
// are b.RunItems(): a correction run's own, else the batch's.
//
// A sampled first run that was approved is paced from the approval
// only: before it the run's pace is the sample's and the hold's, which
// say nothing of the rest. Its estimate is nil until the ring holds a
// sample taken after the approval that a recent pace can be measured
// from (eta.Recent); until then the sample's own estimate
// (api.Approval.Estimate) stands for it. After a pause the pace is
// measured from its end, and the run's average leaves out the time its
// pauses took (Batch.PausedMs, LastPause).
func Estimate(b ledger.Batch, p ledger.Progress, now time.Time) *api.Estimate {
	if b.Stop != "" {
		return nil
	}
	ring := p.Pace
	if lp := b.LastPause; lp != nil && lp.Until.After(b.RunStartedAt) {
		// A pace measured across the last pause counts its standstill:
		// the recent window starts at its end (until the ring holds a
		// sample since, the run's average without its pauses' time).
		ring = slices.DeleteFunc(slices.Clone(ring), func(s eta.Sample) bool { return s.At().Before(lp.Until) })
	}
	if a := b.Approval; b.Run == 1 && a != nil && a.Decision == api.ApprovalApproved && a.DecidedAt.After(b.RunStartedAt) {
		// The run's average holds the approval's hold: only a recent pace
		// (after the approval, and after the last pause) says anything.
		ring = slices.DeleteFunc(slices.Clone(ring), func(s eta.Sample) bool { return s.At().Before(a.DecidedAt) })
		if _, ok := eta.Recent(ring, now, p.Done, p.Cost, p.Spent); !ok {
			return nil
		}
	}
	return eta.Estimate(eta.Run{Items: b.RunItems(), StartedAt: b.RunStartedAt, Paused: b.Pause != nil,
		PausedFor: time.Duration(b.PausedMs) * time.Millisecond,
		Done:      p.Done, Held: p.HeldItems(), Cost: p.Cost, Spent: p.Spent, Usage: p.Usage, Ring: ring}, now)
}
