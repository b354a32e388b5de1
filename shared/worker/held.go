package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// heldEnding reports whether r's attempt ended its item held (withheld,
// exhausted),
// to be written by the unit's write.
func heldEnding(r *itemRun) bool {
	return r.started && !r.lost && !r.committed && r.state.Outcome.Held()
}

// unitName is the name of m's unit in b (held.Unit).
func unitName(b ledger.Batch, m *unitMessage) string {
	if m.Packed {
		return held.PackUnit(m.PackFirst)
	}
	return held.ItemUnit(b.ID, m.Items[0].Key)
}

// keepMessage keeps m for the wakes of its held items (held.Save).
func (w *Worker) keepMessage(ctx context.Context, b ledger.Batch, m *unitMessage) error {
	// A wake sends the kept message to run its unit, not as a timer hop.
	var hop int64
	if m.hopAt != nil {
		hop, *m.hopAt = *m.hopAt, 0
		defer func() { *m.hopAt = hop }()
	}
	body, err := m.body()
	if err != nil {
		return err
	}
	return held.Save(ctx, w.Blobs, b, unitName(b, m), body)
}

// heldEnded counts and logs the items the unit's write recorded held,
// and acts on those withheld: an item whose credential was refused puts
// the batch's halt on it (and its event); an item withheld without a call
// under a halt that a caller lifted meanwhile is woken at once, and so is
// every item withheld in a run a caller stopped meanwhile (its cancel's
// wake may have passed it), to settle cancelled.
func (w *Worker) heldEnded(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, runs []*itemRun, dns []done) []done {
	var refused *itemRun
	var withheld, exhausted []*itemRun
	for _, r := range runs {
		if !heldEnding(r) {
			continue
		}
		d := ranDone(b, r)
		d.heldAs, d.heldBy = r.state.Outcome, 1
		dns = append(dns, d)
		w.Metrics.ItemsRecorded(b.Pipeline, string(r.state.Outcome), 1, b.ID, b.Run)
		itemLog(log, b, m, r.state).WarnContext(ctx, "item held", "outcome", string(r.state.Outcome), "reason", string(r.state.Reason),
			"subject", r.state.Hold.Subject, "error", r.state.Error)
		if r.state.Outcome == api.OutcomeExhausted {
			exhausted = append(exhausted, r)
		}
		if r.state.Outcome == api.OutcomeSuspended {
			withheld = append(withheld, r) // a cancel's wake may have passed it
			continue
		}
		if r.state.Outcome != api.OutcomeWithheld {
			continue
		}
		withheld = append(withheld, r)
		if !r.ending.Unrun && refused == nil {
			refused = r
		}
	}
	if refused != nil && !refused.halted {
		w.halt(ctx, log, b, refused.state.Hold.Subject, refused.state.Error)
	}
	if len(withheld) > 0 {
		w.wakeIfMoved(ctx, log, b, m, withheld)
	}
	if len(exhausted) > 0 {
		w.exhaustedEnded(ctx, log, b, m, exhausted)
	}
	return dns
}

// exhaustedEnded announces the items runs ended exhausted (one Items
// Exhausted event) and wakes those a caller moved on since the batch row
// the calls started under was read, as its wake may have passed them:
// every item of a stopped run (to settle cancelled), and an item whose
// totals are under the ceilings raised meanwhile (held.Below).
func (w *Worker) exhaustedEnded(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, runs []*itemRun) {
	e := held.ExhaustedEvent{BatchID: b.ID, Run: b.Run, Items: len(runs), Ceilings: b.Ceilings, At: w.Clock.Now()}
	for _, r := range runs {
		if !slices.Contains(e.Subjects, r.state.Hold.Subject) {
			e.Subjects = append(e.Subjects, r.state.Hold.Subject)
		}
		if len(e.Keys) < 10 {
			e.Keys = append(e.Keys, r.state.Key)
		}
	}
	slices.Sort(e.Subjects)
	e.EventID = fmt.Sprintf("%s:%d:exhausted:%s:%d", b.ID, b.Run, unitName(b, m), runs[0].state.Hold.Since.UnixMilli())
	held.AnnounceExhausted(ctx, w.Bus, log, e)
	if w.Wake == nil {
		return
	}
	nb, err := w.Store.GetBatch(ctx, b.ID)
	if err != nil || nb.Run != b.Run {
		return
	}
	for _, r := range runs {
		f := held.Filter{Outcome: api.OutcomeExhausted, By: api.WakeCancel}
		if nb.Stop == "" {
			if nb.Ceilings == nil || !held.Below(*nb.Ceilings, held.RunSpent(r.state.Spent, r.state.SpentRun, b.Run)) {
				continue
			}
			f.By = api.WakeRaise
		}
		// Fenced to the attempt judged here: another wake may have moved
		// the item on meanwhile, and it may have run and been held again.
		if _, err := w.Wake.WakeOne(ctx, nb, r.state.Key, r.state.Attempt, f); err != nil {
			itemLog(log, b, m, r.state).WarnContext(ctx, "wake an exhausted item", "by", string(f.By), "error", err.Error())
		}
	}
}

// halt puts the batch's halt on subject, for reason (the refused item's
// error text), and reports whether a halt on it stands (put now, or
// already there: ErrConflict). A failed write is logged: the item's
// unit write tries again (heldEnded).
func (w *Worker) halt(ctx context.Context, log *slog.Logger, b ledger.Batch, subject, reason string) bool {
	now := w.Clock.Now()
	err := w.Store.Halt(ctx, ledger.HaltMark{BatchID: b.ID, Run: b.Run, Subject: subject, Reason: reason, Now: now})
	switch {
	case err == nil:
		log.WarnContext(ctx, "batch halted: a credential was refused; its items are withheld until the halt is lifted", "subject", subject, "error", reason)
		ledger.AnnounceHalt(ctx, w.Bus, log, ledger.HaltEvent{BatchID: b.ID, Run: b.Run, Halted: true, Subject: subject, Since: now,
			Reason: ledger.CutError(reason), At: now})
		return true
	case errors.Is(err, api.ErrConflict):
		return true
	}
	log.WarnContext(ctx, "halt", "subject", subject, "error", err.Error())
	return false
}

// wakeIfMoved reads the batch row again now and wakes the items runs
// withheld when a caller moved on since the row the calls started under
// was read, as its wake may have passed them: every item of a stopped
// run (to settle cancelled), and an item withheld under a halt since
// lifted (one withheld without a call, or the refused one whose halt was
// put before its write).
func (w *Worker) wakeIfMoved(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, runs []*itemRun) {
	if w.Wake == nil {
		return
	}
	nb, err := w.Store.GetBatch(ctx, b.ID)
	if err != nil || nb.Run != b.Run {
		return
	}
	for _, r := range runs {
		f := held.Filter{Outcome: r.state.Outcome, Subject: r.state.Hold.Subject, By: api.WakeLift}
		// An item withheld without a call, or the refused one whose halt
		// this process put (or found) before its write, was withheld under
		// a halt that stood: none on the batch now means a caller lifted
		// it meanwhile, and the lift's wake may have passed the item.
		switch _, on := ledger.HaltOn(nb, r.state.Hold.Subject); {
		case nb.Stop != "":
			f.By = api.WakeCancel
		case on || !r.ending.Unrun && !r.halted:
			continue
		}
		// Fenced to the attempt judged here: another wake may have moved
		// the item on meanwhile, and it may have run and been held again.
		if _, err := w.Wake.WakeOne(ctx, nb, r.state.Key, r.state.Attempt, f); err != nil {
			itemLog(log, b, m, r.state).WarnContext(ctx, "wake a withheld item", "by", string(f.By), "error", err.Error())
		}
	}
}
