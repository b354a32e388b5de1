package ledger

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// StateChangeOf is the Batch State Change event of b's change at now
// (api.StateChangeEvent): the batch's id, run, status, pipeline, item
// count and submitter as b holds them after the change, the event id
// from at (the change's own time: see api.StateChangeEvent). The caller
// adds what the change carries (verdict, census, pause, refusal).
func StateChangeOf(b Batch, change api.StateChange, at, now time.Time) api.StateChangeEvent {
	return api.StateChangeEvent{
		SchemaVersion: api.StateChangeSchemaVersion,
		EventID:       api.StateChangeEventID(b.ID, b.Run, change, at),
		Change:        change, BatchID: b.ID, Run: b.Run, Status: b.Status,
		Pipeline: b.Pipeline, ItemCount: b.ItemCount, SubmittedBy: b.SubmittedBy,
		At: now.UTC(),
	}
}

// PauseChangeOf is the Batch State Change event of b's pause p beginning
// (paused) or ending at now, by by: the same change PauseEventOf
// describes with the Batch Paused and Batch Unpaused detail types.
func PauseChangeOf(b Batch, p api.Pause, paused bool, by api.PauseBy, now time.Time) api.StateChangeEvent {
	change := api.ChangeUnpaused
	if paused {
		change = api.ChangePaused
	}
	e := StateChangeOf(b, change, p.Since, now)
	p.NextCheckAt = time.Time{}
	p.Error = pipeline.CutText(p.Error, pipeline.MaxErrorTextBytes)
	e.Pause = &p
	if !paused {
		e.UnpausedBy = by
	}
	return e
}

// ApprovalChangeOf is the Batch State Change event of b's sample at now,
// a being b's approval (api.Approval) as the write left it: its estimate
// written (a.State awaiting_approval: awaiting_approval, the event id
// from a.Estimate.MadeAt) or its approval (a.State approved: approved,
// by a.DecidedBy, the event id from a.DecidedAt, the ApprovalMark.Now
// written). Both times are the ones on the batch row, so every delivery
// of one change has one id; a.DecidedAt is carried to the millisecond,
// as the row holds it, and a.Estimate's projected costs cut to their
// first api.MaxCensusCostNames names in byte order, as the census's. A
// rejection has no change of its own: the run's finished event
// (cancelled) tells it.
func ApprovalChangeOf(b Batch, a api.Approval, now time.Time) api.StateChangeEvent {
	change, at := api.ChangeAwaitingApproval, now
	if a.Estimate != nil {
		at = a.Estimate.MadeAt
	}
	if a.State == api.ApprovalApproved {
		change, at = api.ChangeApproved, a.DecidedAt
		a.DecidedAt = a.DecidedAt.Truncate(time.Millisecond).UTC()
	}
	e := StateChangeOf(b, change, at, now)
	if est := a.Estimate; est != nil && len(est.ProjectedCost) > api.MaxCensusCostNames {
		c := *est
		c.ProjectedCost = make(pipeline.CostSum, api.MaxCensusCostNames)
		for _, name := range est.ProjectedCost.Names()[:api.MaxCensusCostNames] {
			c.ProjectedCost[name] = est.ProjectedCost[name]
		}
		a.Estimate = &c
	}
	e.Approval = &a
	return e
}

// AnnounceChange puts e as a Batch State Change event; a failure is
// logged, not returned (the batch's own state, which the API answers, is
// the record; delivery of these events is best effort, but for finished
// runs, which finalize puts at least once through Events).
func AnnounceChange(ctx context.Context, bus EventBus, log interface {
	Warn(string, ...any)
}, e api.StateChangeEvent) {
	if bus == nil {
		return
	}
	if err := bus.Put(ctx, api.DetailStateChange, e); err != nil {
		log.Warn("put state change event", "batch_id", e.BatchID, "change", string(e.Change), "error", err.Error())
	}
}

// AnnouncePause puts the events of b's pause p beginning (paused) or
// ending at now, by by: Batch Paused or Batch Unpaused (PauseEventOf), then
// Batch State Change (PauseChangeOf). Failures are logged.
func AnnouncePause(ctx context.Context, bus EventBus, log interface {
	Warn(string, ...any)
}, b Batch, p api.Pause, paused bool, by api.PauseBy, now time.Time) {
	Announce(ctx, bus, log, PauseEventOf(b, p, paused, by, now))
	AnnounceChange(ctx, bus, log, PauseChangeOf(b, p, paused, by, now))
}
