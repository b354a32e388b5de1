package control

import (
	"context"
	"errors"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// RateConflict is the note on b's row of the latest other batch naming
// its rate key at another rate (ledger.Batch.RateConflict, written by
// that batch's submit or by b's), while both run: one read of that
// batch's row (GetBatch, 0.5 read units under 4 KB), made only for a
// batch with a note. nil when b has none, when b or that batch has
// finished, was refused or is being stopped, or when that batch is gone;
// a failed read is logged and the view goes on without it.
func (c *Control) RateConflict(ctx context.Context, b ledger.Batch) *api.RateConflict {
	n := b.RateConflict
	if n == nil || b.Status.Finished() || b.Stop != "" {
		return nil
	}
	other, err := c.Store.GetBatch(ctx, n.BatchID)
	switch {
	case errors.Is(err, api.ErrNotFound):
		return nil
	case err != nil:
		if c.Log != nil {
			c.Log.WarnContext(ctx, "the batch of a rate conflict unread; the view goes on without it", "batch_id", b.ID, "other", n.BatchID, "error", err.Error())
		}
		return nil
	case other.Status.Finished() || other.Stop != "":
		return nil
	}
	v := *n
	return &v
}
