package function

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/internal/trigger"
	"github.com/bulkrun/bulkrun/shared/batch"
)

// Finalize is the finalize function: a trigger {"batch_id", "run"} from the
// item function (or submit, for an empty batch), or the scheduled tick
// {"tick": true}.
type Finalize struct {
	Finalizer *batch.Finalizer
	Log       *slog.Logger
	// Waits are the pauses between census attempts when a triggered run is
	// not finished yet: the item shards are read eventually consistent, so the
	// last outcome may not show at once. Default 1, 2, 4, 8 s.
	Waits []time.Duration
}

// Handle finalizes one run or ticks. A run still not finished after the
// waits is left to the tick (no error: an asynchronous retry would only
// repeat the same wait).
func (h *Finalize) Handle(ctx context.Context, ev trigger.Event) (any, error) {
	if ev.Tick {
		res, err := h.Finalizer.Tick(ctx)
		h.Log.Info("tick", "running", res.Running, "checked", res.Checked, "finalized", res.Finalized, "fanned_out", res.FannedOut, "published", res.Published)
		return res, err
	}
	if !batch.ValidBatchID(ev.BatchID) || ev.Run < 1 {
		return nil, fmt.Errorf("finalize: bad event: batch_id %q run %d", ev.BatchID, ev.Run)
	}
	waits := h.Waits
	if waits == nil {
		waits = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	}
	for i := 0; ; i++ {
		res, err := h.Finalizer.Finalize(ctx, ev.BatchID, ev.Run)
		if err == nil && res.Continued {
			// A chunk of the rows is counted and checkpointed; the tick
			// (or the next trigger) goes on from it.
			return map[string]any{"status": batch.StatusRunning, "continued": true}, nil
		}
		if err == nil {
			return map[string]any{"status": res.Report.Status, "wrote": res.Wrote}, nil
		}
		if !errors.Is(err, batch.ErrNotFinished) {
			return nil, err
		}
		if i >= len(waits) {
			h.Log.Info("run not finished; left to the tick", "batch_id", ev.BatchID, "run", ev.Run, "error", err.Error())
			return map[string]any{"status": batch.StatusRunning}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(waits[i]):
		}
	}
}
