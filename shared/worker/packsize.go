package worker

import (
	"context"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// boundPack keeps b's pack row within ledger.PackRowBudget
// (ledger.BoundPack), its outputs moved to the batch's bucket.
func (w *Worker) boundPack(ctx context.Context, b ledger.Batch, items []ledger.ItemState, writes []ledger.PackItemWrite) (moved, cut int, err error) {
	return ledger.BoundPack(b.ID, items, writes, func(key string, output []byte) (string, error) {
		return "s3://" + w.Blobs.Bucket() + "/" + key, w.Blobs.Put(ctx, key, "application/json", output)
	})
}
