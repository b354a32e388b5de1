package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The hooks of suspended items (shared/held, docs/adr/0034): a delivery
// that finds a suspended item whose wake time came wakes it and runs it;
// one that leaves a suspended item waiting for its wake time sends the
// unit's message again, delayed to that time (at most api.MaxWakeHop per
// hop); a resumed attempt gets its signal's payload.

// timerOf is at, or the time s (suspended in run, waiting for its wake
// time) wants its timer message when earlier.
func timerOf(at time.Time, s ledger.ItemState, run int, now time.Time) time.Time {
	d, ok := held.TimerDelay(s, run, now)
	if !ok {
		return at
	}
	if t := now.Add(d); at.IsZero() || t.Before(at) {
		return t
	}
	return at
}

// suspendTimer is when the items runs recorded suspended with a wake
// time, or those the take left waiting for theirs (at), want their
// unit's timer message (zero: none). A delivery that runs some items of
// a pack may be its timer's: the timer goes on.
func suspendTimer(b ledger.Batch, runs []*itemRun, at, now time.Time) time.Time {
	for _, r := range runs {
		if heldEnding(r) {
			at = timerOf(at, r.state, b.Run, now)
		}
	}
	return at
}

// sendTimer sends m again, delayed until at (nothing when at is zero):
// the timer of its suspended items. A delivery that finds them due wakes
// them (wakeDueRow, held.WakeDue); one that comes early sends the next
// hop. A duplicate timer message is harmless: the wake is a conditional
// write (an item row) or part of the pack's fenced take.
//
// Each send counts on the message's Requeued, as every loop of messages
// the item function sends to its own queue does, and the chain is bounded
// by ledger.MaxResends: past it no hop goes (logged as an error), and
// the item waits for a signal or a cancel. Each send counts in the
// MessagesResent metric (reason "timer").
func (w *Worker) sendTimer(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, at time.Time) error {
	if at.IsZero() {
		return nil
	}
	if *m.requeued >= ledger.MaxResends {
		log.ErrorContext(ctx, "timer of a suspended item not sent: its message was sent again as often as any loop may (a signal or a cancel still moves it)",
			"requeued", *m.requeued, "wake_at", at.UTC().Format(time.RFC3339Nano))
		return nil
	}
	*m.requeued++
	var hop int64
	if m.hopAt != nil {
		hop, *m.hopAt = *m.hopAt, at.UnixMilli()
	}
	body, err := m.body()
	if err == nil {
		err = w.Queue.Requeue(ctx, body, min(max(at.Sub(w.Clock.Now()), 0), api.MaxWakeHop))
	}
	if m.hopAt != nil {
		*m.hopAt = hop
	}
	if err != nil {
		*m.requeued--
		log.ErrorContext(ctx, "send the timer of a suspended item", "error", pipeline.ErrorText(err))
		return err
	}
	w.Metrics.Resent(b.Pipeline, "timer", b.ID, b.Run)
	log.InfoContext(ctx, "timer of a suspended item sent", "wake_at", at.UTC().Format(time.RFC3339Nano), "requeued", *m.requeued)
	return nil
}

// wakeDueRow acts on item row it, whose reservation was refused: a
// suspended item whose wake time came is woken by its timer (a
// conditional write: still suspended in this run under its attempt, not
// woken), and again reports that the reservation may be tried again; one
// still waiting sets h's timer.
func (w *Worker) wakeDueRow(ctx context.Context, b ledger.Batch, it ledger.Item, h *hold) (again bool, err error) {
	if it.Hold == nil {
		return false, nil
	}
	s := ledger.ItemState{Key: it.Key, Run: it.Run, Outcome: it.Outcome, Attempt: it.Attempt, Hold: *it.Hold}
	now := w.Clock.Now()
	if !held.Due(s, b.Run, now) {
		h.timerAt = timerOf(h.timerAt, s, b.Run, now)
		return false, nil
	}
	got, err := w.Store.WakeItem(ctx, ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: it.Key, Run: b.Run,
		Outcome: api.OutcomeSuspended, Attempt: it.Attempt, By: api.WakeTimer, Now: now})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, api.ErrConflict):
		// Woken by a signal or a cancel meanwhile, or taken: try again.
		return got.Run == b.Run && got.Outcome.Held() && got.Hold != nil && got.Hold.Woken != "", nil
	}
	return false, err
}

// signalOf is the payload of the signal that resumed s (nil: none), and
// p, or, when the payload cannot be read, a pipeline that fails the
// attempt transiently with that error without calling p: the attempt
// never runs without its payload, and its retry reads it again
// (ItemState.Signalled stays until an outcome is recorded).
func (w *Worker) signalOf(ctx context.Context, b ledger.Batch, s ledger.ItemState, p pipeline.Pipeline) (json.RawMessage, pipeline.Pipeline) {
	sig, err := held.ReadSignal(ctx, w.Blobs, b, s)
	if err != nil {
		return nil, pipeline.Func(func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, err })
	}
	return sig, p
}
