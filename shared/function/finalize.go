package function

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/internal/trigger"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
)

// Finalize is the finalize function: a trigger {"batch_id", "run"} from the
// item function (or submit, for an empty batch), or the scheduled tick
// {"tick": true}.
type Finalize struct {
	Finalizer *finalize.Finalizer
	Log       *slog.Logger
	// Waits are the pauses between census attempts when a triggered run is
	// not finished yet: the item shards are read eventually consistent, so the
	// last outcome may not show at once. Default 1, 2, 4, 8 s.
	Waits []time.Duration
	// Chain, when set, is the finalize function itself: a call that ends a
	// chunk of a run's rows (Continued) invokes the next call at once,
	// up to MaxFinalizeChain calls in a chain, instead of leaving it to
	// the next tick. nil: the tick goes on.
	Chain Chainer
}

// Chainer invokes finalize again for a run, as call chain of a chain.
type Chainer interface {
	Continue(ctx context.Context, batchID string, run, chain int) error
}

// MaxFinalizeChain is the most finalize calls one chain of chunks makes
// (the triggered call and the ones it invokes, one after another); the
// tick goes on from a longer run's checkpoint and starts a new chain.
// Lambda's recursive loop detection stops a function invoked more than 16
// times in one chain of requests (Lambda developer guide, "Use Lambda
// recursive loop detection to prevent infinite loops"): 15 stays below
// it whether or not a direct invocation counts. A chain of 15 ten-minute
// chunks reads ≈ 10^8 rows at the measured ≈ 24,000 rows/s of one call.
const MaxFinalizeChain = 15

// Handle finalizes one run or ticks. A run still not finished after the
// waits is left to the tick (no error: an asynchronous retry would only
// repeat the same wait).
func (h *Finalize) Handle(ctx context.Context, ev trigger.Event) (any, error) {
	if ev.Tick {
		res, err := h.Finalizer.Tick(ctx)
		h.Log.Info("tick", "running", res.Running, "checked", res.Checked, "finalized", res.Finalized, "fanned_out", res.FannedOut, "published", res.Published)
		return res, err
	}
	if !api.ValidBatchID(ev.BatchID) || ev.Run < 1 || ev.Part < 0 || ev.Part > finalize.MaxFinalizeParts || ev.Part > 0 && ev.Plan < 1 {
		return nil, fmt.Errorf("finalize: bad event: batch_id %q run %d part %d plan %d", ev.BatchID, ev.Run, ev.Part, ev.Plan)
	}
	if ev.Part > 0 {
		return h.part(ctx, ev)
	}
	waits := h.Waits
	if waits == nil {
		waits = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	}
	for i := 0; ; i++ {
		res, err := h.Finalizer.Finalize(ctx, ev.BatchID, ev.Run)
		if err == nil && res.Parted {
			// The run is read in parts, each its own call: the last merges.
			return map[string]any{"status": api.StatusRunning, "parts": true}, nil
		}
		if err == nil && res.Continued {
			// A chunk of the rows is counted and checkpointed: the next
			// call goes on from it at once, or the tick does.
			if h.Chain != nil && ev.Chain+1 < MaxFinalizeChain {
				if cerr := h.Chain.Continue(ctx, ev.BatchID, ev.Run, ev.Chain+1); cerr != nil {
					h.Log.Warn("go on with the next chunk: left to the tick", "batch_id", ev.BatchID, "run", ev.Run, "error", cerr.Error())
				}
			}
			return map[string]any{"status": api.StatusRunning, "continued": true, "chain": ev.Chain}, nil
		}
		if err == nil {
			return map[string]any{"status": res.Report.Status, "wrote": res.Wrote}, nil
		}
		if !errors.Is(err, api.ErrNotFinished) {
			return nil, err
		}
		if i >= len(waits) {
			h.Log.Info("run not finished; left to the tick", "batch_id", ev.BatchID, "run", ev.Run, "error", err.Error())
			return map[string]any{"status": api.StatusRunning}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(waits[i]):
		}
	}
}

// part reads one part of a run read in parts; the part that finishes last
// merges, and chains the merge's next call when it takes more than one.
// A run not finished yet (an item in flight) is left to the run's next
// call, which starts the part again (no error: Lambda's retry would only
// find the same).
func (h *Finalize) part(ctx context.Context, ev trigger.Event) (any, error) {
	res, err := h.Finalizer.FinalizePart(ctx, ev.BatchID, ev.Run, ev.Plan, ev.Part-1)
	switch {
	case errors.Is(err, api.ErrNotFinished):
		h.Log.Info("part of a run not finished; left to the next call", "batch_id", ev.BatchID, "run", ev.Run, "part", ev.Part-1, "error", err.Error())
		return map[string]any{"status": api.StatusRunning}, nil
	case err != nil:
		return nil, err
	case res.Continued && !res.Parted && h.Chain != nil && ev.Chain+1 < MaxFinalizeChain:
		if cerr := h.Chain.Continue(ctx, ev.BatchID, ev.Run, ev.Chain+1); cerr != nil {
			h.Log.Warn("go on with the merge: left to the tick", "batch_id", ev.BatchID, "run", ev.Run, "error", cerr.Error())
		}
		return map[string]any{"status": api.StatusRunning, "continued": true, "chain": ev.Chain}, nil
	case res.Parted:
		return map[string]any{"status": api.StatusRunning, "part": ev.Part - 1}, nil
	}
	return map[string]any{"status": res.Report.Status, "wrote": res.Wrote}, nil
}
