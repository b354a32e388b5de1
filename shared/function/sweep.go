package function

import (
	"context"
	"github.com/bulkrun/bulkrun/shared/api"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Sweep is the sweep function: each scheduled invocation runs sweep passes
// until a pass finds fewer expired markers than its limit, or the
// invocation's deadline is within a minute.
type Sweep struct {
	Sweeper *control.Sweeper
	Log     *slog.Logger
}

// Handle runs the passes and returns their summed counts. Errors of single
// batches are logged and left to the next invocation (their markers stay).
func (h *Sweep) Handle(ctx context.Context, _ any) (api.SweepResult, error) {
	var total api.SweepResult
	limit := h.Sweeper.Limit
	if limit <= 0 {
		limit = control.DefaultSweepLimit
	}
	for {
		res, err := h.Sweeper.RunOnce(ctx)
		total.Expired += res.Expired
		total.Deleted += res.Deleted
		total.Stale += res.Stale
		total.Malformed += res.Malformed
		total.Failed += res.Failed
		total.PendingDeletion += res.PendingDeletion
		if err != nil {
			h.Log.Error("sweep pass", "error", err.Error())
		}
		dl, ok := ctx.Deadline()
		if res.Expired < limit || res.Failed+res.PendingDeletion == res.Expired || ok && time.Until(dl) < time.Minute {
			break
		}
	}
	h.Log.Info("sweep", "expired", total.Expired, "deleted", total.Deleted, "stale", total.Stale, "malformed", total.Malformed, "failed", total.Failed, "pending_deletion", total.PendingDeletion)
	return total, nil
}

// Sweeper builds the retention sweep from d.
func (d *Deps) Sweeper() *control.Sweeper {
	return &control.Sweeper{Store: d.Store, Control: &control.Control{Store: d.Store, Blobs: d.Blobs, Log: d.Log, Clock: ledger.SystemClock{}}, Clock: ledger.SystemClock{}, Log: d.Log}
}
