package live

import (
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Estimate is the running run's pace and projection (api.Estimate) at
// now from its counters p, by eta.Estimate's rules: nil while it has
// ended no item, before its start, or while b is paused. The run's items
// are b.RunItems(): a correction run's own, else the batch's.
func Estimate(b ledger.Batch, p ledger.Progress, now time.Time) *api.Estimate {
	return eta.Estimate(eta.Run{Items: b.RunItems(), StartedAt: b.RunStartedAt, Paused: b.Pause != nil,
		Done: p.Done, Held: heldOf(p), Cost: p.Cost, Spent: p.Spent, Usage: p.Usage, Ring: p.Pace}, now)
}

// heldOf is the run's items held, by its counters (Progress.Held).
func heldOf(p ledger.Progress) int64 {
	var n int64
	for _, c := range p.Held {
		n += c
	}
	return n
}
