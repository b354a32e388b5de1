package finalize

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Chainer invokes finalize again for a run, as call chain of a chain of
// calls (ledger.FinalizeEvent.Chain), asynchronously. internal/trigger's
// Lambda does, the finalize function invoking itself.
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

// DefaultWaits are the pauses of Trigger between census attempts of a run
// not finished yet (Finalizer.Waits).
var DefaultWaits = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// TriggerResult is what one triggered call did, the finalize function's
// answer: the run's status (running while it goes on), and one of: the
// report written by this call or not (Wrote, a finished run), a chunk
// counted and the rest left to the chain's next call (Continued, Chain its
// place), the run's parts (or its merge's key ranges) started (Parts), one
// part read (Part, 0-based) or one key range merged (Range, 0-based).
// JSON, by that case: {"status", "wrote"}, {"status", "continued": true,
// "chain"}, {"status", "parts": true}, {"status", "part"}, {"status",
// "range"}, or {"status"} alone for a run not finished yet.
type TriggerResult struct {
	Status    api.Status `json:"status"`
	Wrote     *bool      `json:"wrote,omitempty"`
	Continued bool       `json:"continued,omitempty"`
	Chain     *int       `json:"chain,omitempty"`
	Parts     bool       `json:"parts,omitempty"`
	Part      *int       `json:"part,omitempty"`
	Range     *int       `json:"range,omitempty"`
}

// finished is the answer of a finished run.
func finished(res FinalizeResult) TriggerResult {
	return TriggerResult{Status: res.Report.Status, Wrote: &res.Wrote}
}

// continued is the answer of a call that counted a chunk of ev's run.
func continued(ev ledger.FinalizeEvent) TriggerResult {
	return TriggerResult{Status: api.StatusRunning, Continued: true, Chain: &ev.Chain}
}

// Trigger answers one finalize event other than the tick: a run to
// finalize (from the item function, submit for an empty batch, or this
// function's own chain) or one part of a run read in parts. A run still
// not finished after the waits (Waits; the item shards are read
// eventually consistent, so the last outcome may not show at once) is
// left to the tick, without an error: an asynchronous retry would only
// repeat the same wait. A call that counted a chunk of the rows invokes
// the next at once through Chain (up to MaxFinalizeChain calls in a
// chain; nil: the tick goes on). A malformed event is an error naming it.
func (f *Finalizer) Trigger(ctx context.Context, ev ledger.FinalizeEvent) (TriggerResult, error) {
	if !api.ValidBatchID(ev.BatchID) || ev.Run < 1 || ev.Part < 0 || ev.Part > MaxFinalizeParts || ev.Range < 0 || ev.Range > MaxMergeRanges ||
		ev.Part > 0 && ev.Range > 0 || (ev.Part > 0 || ev.Range > 0) && ev.Plan < 1 {
		return TriggerResult{}, fmt.Errorf("finalize: bad event: batch_id %q run %d part %d range %d plan %d", ev.BatchID, ev.Run, ev.Part, ev.Range, ev.Plan)
	}
	if ev.Part > 0 || ev.Range > 0 {
		return f.triggerPart(ctx, ev)
	}
	waits := f.Waits
	if waits == nil {
		waits = DefaultWaits
	}
	for i := 0; ; i++ {
		res, err := f.finalizeAt(ctx, ev.BatchID, ev.Run, ev.Chain)
		switch {
		case err == nil && res.Parted:
			// The run is read in parts, each its own call: the last merges.
			return TriggerResult{Status: api.StatusRunning, Parts: true}, nil
		case err == nil && res.Continued:
			// A chunk of the rows is counted and checkpointed: the next
			// call goes on from it at once, or the tick does.
			f.chain(ctx, ev, "go on with the next chunk")
			return continued(ev), nil
		case err == nil:
			return finished(res), nil
		case !errors.Is(err, api.ErrNotFinished):
			return TriggerResult{}, err
		case i >= len(waits):
			f.Log.InfoContext(ctx, "run not finished; left to the tick", "batch_id", ev.BatchID, "run", ev.Run, "error", err.Error())
			return TriggerResult{Status: api.StatusRunning}, nil
		}
		select {
		case <-ctx.Done():
			return TriggerResult{}, ctx.Err()
		case <-time.After(waits[i]):
		}
	}
}

// triggerPart reads one part of a run read in parts, or merges one key
// range of its merge (ev.Range); the part that finishes last merges (and
// chains the merge's next call when it takes more than one, or starts
// its ranges), the range that finishes last composes the results. A run
// not finished yet (an item in flight) is left to the run's next call,
// which starts the part again (no error: Lambda's retry would only find
// the same).
func (f *Finalizer) triggerPart(ctx context.Context, ev ledger.FinalizeEvent) (TriggerResult, error) {
	part := ev.Part - 1
	var (
		res FinalizeResult
		err error
	)
	if ev.Range > 0 {
		part = ev.Range - 1
		res, err = f.finalizeRange(ctx, ev.BatchID, ev.Run, ev.Plan, part, ev.Chain)
	} else {
		res, err = f.finalizePart(ctx, ev.BatchID, ev.Run, ev.Plan, part, ev.Chain)
	}
	res, err = f.answer(ctx, ev.BatchID, ev.Run, res, err)
	switch {
	case errors.Is(err, api.ErrNotFinished):
		f.Log.InfoContext(ctx, "part of a run not finished; left to the next call", "batch_id", ev.BatchID, "run", ev.Run, "part", part, "error", err.Error())
		return TriggerResult{Status: api.StatusRunning}, nil
	case err != nil:
		return TriggerResult{}, err
	case res.Continued && !res.Parted && f.Chain != nil && ev.Chain+1 < MaxFinalizeChain:
		f.chain(ctx, ev, "go on with the merge")
		return continued(ev), nil
	case res.Parted && ev.Range > 0:
		return TriggerResult{Status: api.StatusRunning, Range: &part}, nil
	case res.Parted:
		return TriggerResult{Status: api.StatusRunning, Part: &part}, nil
	}
	return finished(res), nil
}

// chain invokes the next call of ev's chain, if any may follow; a failed
// invocation is logged and left to the tick.
func (f *Finalizer) chain(ctx context.Context, ev ledger.FinalizeEvent, what string) {
	if f.Chain == nil || ev.Chain+1 >= MaxFinalizeChain {
		return
	}
	if err := f.Chain.Continue(ctx, ev.BatchID, ev.Run, ev.Chain+1); err != nil {
		f.Log.WarnContext(ctx, what+": left to the tick", "batch_id", ev.BatchID, "run", ev.Run, "error", err.Error())
	}
}
