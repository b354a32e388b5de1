package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pacer"
)

// Pause pauses the batch's run by hand: no item starts until Unpause,
// items running finish, waiting items use no attempt. It replaces an
// outage pause. Idempotent: a batch already paused by a caller, or one
// whose run has finished, is answered as it is. Errors: ErrNotFound
// (ErrExpired past the retention); ErrConflict while the source is still
// being read (submitting), and for a batch paused at its budget (a raise
// would end a caller's pause written under it; the store keeps one pause).
func (c *Control) Pause(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := c.Get(ctx, id)
	if err != nil {
		return ledger.Batch{}, err
	}
	switch {
	case b.Status.Finished(), b.Stop != "", b.Pause != nil && b.Pause.By == api.PauseByCaller:
		return b, nil
	case b.Pause != nil && b.Pause.By == api.PauseByBudget:
		return b, fmt.Errorf("pause %s: paused at its budget of $%s already; a raise of the budget would resume it, so pause it after the raise, or cancel it: %w",
			id, api.USDText(b.BudgetUSD), api.ErrConflict)
	case b.Status != api.StatusRunning:
		return b, fmt.Errorf("pause %s: no run is going yet (status %s): %w", id, b.Status, api.ErrConflict)
	}
	// A caller's pause replaces an outage pause (which its probe would
	// end), the outage's time kept; a pause begun or ended between the
	// read and the write is read again once and paused over as it stands.
	for try := 0; ; try++ {
		now := c.now()
		err = c.Store.Pause(ctx, ledger.PauseMark{BatchID: id, Run: b.Run, By: api.PauseByCaller, Now: now, Replaces: b.Pause})
		if err == nil {
			c.Log.WarnContext(ctx, "batch paused by a caller", "batch_id", id, "run", b.Run)
			ledger.AnnouncePause(ctx, c.Bus, c.Log, b, api.Pause{By: api.PauseByCaller, Since: now}, true, api.PauseByCaller, now)
			break
		}
		if !errors.Is(err, api.ErrConflict) {
			return ledger.Batch{}, err
		}
		nb, rerr := c.Store.GetBatch(ctx, id)
		if rerr != nil || try > 0 || nb.Run != b.Run || nb.Status != api.StatusRunning || nb.Stop != "" ||
			nb.Pause != nil && nb.Pause.By != api.PauseByOutage {
			break // paused by a caller or its budget meanwhile, stopping or ended: as it stands
		}
		b = nb
	}
	nb, err := c.Store.GetBatch(ctx, id)
	if err == nil && nb.Pause != nil && nb.Pause.By == api.PauseByBudget {
		// The budget paused the run between the read and the write.
		return nb, fmt.Errorf("pause %s: paused at its budget meanwhile: %w", id, api.ErrConflict)
	}
	return nb, err
}

// Unpause ends the batch's pause, whoever paused it but its budget:
// waiting items start again at the pause's next check (within
// MaxCheckInterval + 2 × CheckGrace). Idempotent: a batch that is not
// paused is answered as it is. Errors: ErrNotFound (ErrExpired past the
// retention); ErrConflict for a budget pause (api.PauseByBudget): only
// raising the budget above the spend ends it (SetBudget), so that an
// unpause cannot spend past the budget unseen.
func (c *Control) Unpause(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := c.Get(ctx, id)
	if err != nil {
		return ledger.Batch{}, err
	}
	if b.Pause == nil {
		return b, nil
	}
	if b.Pause.By == api.PauseByBudget {
		return b, fmt.Errorf("unpause %s: paused at its budget of $%s; raise the budget above the spend to resume (POST /batches/%s/budget, bulkrun budget %s --usd N): %w",
			id, api.USDText(b.BudgetUSD), id, id, api.ErrConflict)
	}
	if err := c.endPause(ctx, b, api.PauseByCaller, "batch unpaused by a caller"); err != nil {
		return ledger.Batch{}, err
	}
	nb, err := c.Store.GetBatch(ctx, id)
	if err == nil && nb.Pause != nil && nb.Pause.By == api.PauseByBudget {
		// The budget paused the run between the read and the write: the
		// store kept that pause.
		return nb, fmt.Errorf("unpause %s: paused at its budget meanwhile; raise the budget above the spend to resume: %w", id, api.ErrConflict)
	}
	return nb, err
}

// endPause removes b's pause (as read: b.Pause) on by's behalf
// (Store.Unpause), then logs msg, announces the end and, for a batch with
// no rate, starts its downstream's adaptive pace again (pace.Adapt.
// Resumed); a pause the store
// no longer holds as read (ErrConflict) is left as it is, without error.
func (c *Control) endPause(ctx context.Context, b ledger.Batch, by api.PauseBy, msg string) error {
	p := *b.Pause
	now := c.now()
	err := c.Store.Unpause(ctx, ledger.UnpauseMark{BatchID: b.ID, Run: b.Run, By: by, Since: p.Since, Now: now, Pause: p})
	switch {
	case err == nil:
		c.Log.WarnContext(ctx, msg, "batch_id", b.ID, "run", b.Run, "paused_ms", now.Sub(p.Since).Milliseconds())
		ledger.AnnouncePause(ctx, c.Bus, c.Log, b, p, false, by, now)
		if b.Rate == nil {
			// Its downstream is paced from pace.AdaptResume again, so that
			// the units that waited come back spread (pacer.Adapts.Resume);
			// a failed write leaves them unpaced, the unpause standing.
			key := pacer.DownstreamKey(b)
			if _, _, err := (&pacer.Adapts{}).Resume(ctx, c.Store, key, now); err != nil {
				c.Log.WarnContext(ctx, "adaptive pace not restarted; the resumed units run unpaced", "batch_id", b.ID, "downstream_key", key, "error", err.Error())
			}
		}
	case !errors.Is(err, api.ErrConflict):
		return err
	}
	return nil
}
