package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// ceilingTries is how often SetCeilings reads and merges again when
// another raise changed the ceilings between its read and its write.
const ceilingTries = 5

// SetCeilings sets the per-item ceilings that raise sets (each non-zero
// field; api.Ceilings.Check) on the batch (Batch.Ceilings), the others
// kept, and, on a running batch, wakes every item exhausted in its run
// whose totals are now under every ceiling (held.Waker.Raise): each runs
// exactly once more, keeping its run's attempts and spend; an item still
// at a ceiling stays exhausted (CeilingsResult.Still). Within WakeTime;
// Done false leaves items for another call, which goes on (idempotent: a
// woken item is not woken twice, its message sent again is harmless). A
// lowered ceiling holds from the next attempt that ends. On a finished
// batch the ceilings are those of its next run. Errors: an
// *api.InputError naming ceilings.spend_usd or ceilings.tokens (or
// "ceilings" when raise sets none); ErrNotFound (ErrExpired past the
// retention); ErrConflict (wrapped) when other raises changed the
// ceilings ceilingTries times in a row between a read and a write.
func (c *Control) SetCeilings(ctx context.Context, id string, raise api.Ceilings) (api.CeilingsResult, error) {
	var res api.CeilingsResult
	if raise.IsZero() {
		return res, &api.InputError{Field: "ceilings", Reason: "set spend_usd or tokens (or both), each > 0"}
	}
	if err := raise.Check("ceilings"); err != nil {
		return res, err
	}
	var b ledger.Batch
	var now api.Ceilings
	// The merge is written under a condition on the ceilings it read
	// (Limits.CeilingsWas): a raise that another changed meanwhile reads
	// again and merges into that one, so neither undoes the other.
	for try := 1; ; try++ {
		var err error
		if b, err = c.Get(ctx, id); err != nil {
			return res, err
		}
		now = api.Ceilings{}
		if b.Ceilings != nil {
			now = *b.Ceilings
		}
		now = now.Merge(raise)
		err = c.Store.SetLimits(ctx, id, ledger.Limits{Ceilings: &now, CeilingsWas: b.Ceilings})
		if err == nil {
			break
		}
		if !errors.Is(err, api.ErrConflict) || try == ceilingTries {
			return res, err
		}
	}
	res.Ceilings = now
	c.Log.InfoContext(ctx, "ceilings set", "batch_id", id, "run", b.Run, "spend_usd", now.SpendUSD, "tokens", now.Tokens)
	// Read again: the wake judges each item against the row as written.
	b, err := c.Store.GetBatch(ctx, id)
	if err != nil {
		return res, err
	}
	if b.Status != api.StatusRunning {
		res.Done = true
		return res, nil
	}
	if c.Wake == nil {
		return res, fmt.Errorf("ceilings of %s: this function wakes no held items", id)
	}
	w, err := c.Wake.Raise(ctx, b, WakeTime)
	res.Woken, res.AlreadyWoken, res.Still, res.Done = w.Woken, w.Again, w.Skipped, w.Done && err == nil
	c.Log.InfoContext(ctx, "exhausted items woken", "batch_id", id, "woken", w.Woken, "still_exhausted", w.Skipped, "units", w.Units, "done", res.Done)
	return res, err
}
