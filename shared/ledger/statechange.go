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
