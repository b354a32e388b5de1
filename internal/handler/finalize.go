package handler

import (
	"context"
	"log/slog"

	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Finalize is the finalize function: a trigger {"batch_id", "run"} from the
// item function (or submit, for an empty batch), the next call of a chain
// or a part of a run read in parts (the function invoking itself), or the
// scheduled tick {"tick": true}. The waits, the chaining and the parts are
// the engine's (finalize.Finalizer.Trigger).
type Finalize struct {
	Finalizer *finalize.Finalizer
	Log       *slog.Logger
}

// Handle answers one finalize event: the tick, or a trigger.
func (h *Finalize) Handle(ctx context.Context, ev ledger.FinalizeEvent) (any, error) {
	if ev.Tick {
		res, err := h.Finalizer.Tick(ctx)
		h.Log.InfoContext(ctx, "tick", "running", res.Running, "checked", res.Checked, "finalized", res.Finalized, "fanned_out", res.FannedOut, "published", res.Published)
		return res, err
	}
	return h.Finalizer.Trigger(ctx, ev)
}

// Router is the finalize function's one route: every event is a
// ledger.FinalizeEvent.
func (h *Finalize) Router() Router {
	return Router{function: "finalize", routes: []route{
		{"finalize", func(envelope) bool { return true }, decode("finalize", h.Handle)},
	}}
}
