package worker

import (
	"context"
	"fmt"
	"slices"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// boundPack keeps the pack row that writes leave (items: the row's items
// as held, writes applied) within PackRowBudget, shrinking only what this
// write writes: outputs go to S3, then error texts are cut. It changes
// writes in place and returns how many outputs it moved and texts it cut.
func (w *Worker) boundPack(ctx context.Context, b ledger.Batch, items []ledger.ItemState, writes []ledger.PackItemWrite) (moved, cut int, err error) {
	after := slices.Clone(items)
	for _, iw := range writes {
		after[iw.Index] = iw.Item
	}
	total := 0
	for _, s := range after {
		total += ledger.StateBytes(s)
	}
	for total > ledger.PackRowBudget {
		best, size := -1, 0
		for i, iw := range writes {
			if n := len(iw.Item.Output) + max(len(iw.Item.Error)-ledger.MinPackErrorBytes, 0); n > size {
				best, size = i, n
			}
		}
		if best < 0 {
			return moved, cut, nil // nothing written now can shrink (the rest is bounded by construction)
		}
		s := &writes[best].Item
		was := ledger.StateBytes(*s)
		if len(s.Output) > 0 {
			key := fmt.Sprintf("batches/%s/item-outputs/%s.json", b.ID, ledger.RunID(b.ID, s.Key))
			if err := w.Blobs.Put(ctx, key, "application/json", s.Output); err != nil {
				return moved, cut, fmt.Errorf("store an output of pack item %q: %w", s.Key, err)
			}
			s.Output, s.OutputRef = nil, "s3://"+w.Blobs.Bucket()+"/"+key
			moved++
		} else {
			s.Error = pipeline.CutText(s.Error, max(len(s.Error)/2, ledger.MinPackErrorBytes))
			cut++
		}
		total += ledger.StateBytes(*s) - was
	}
	return moved, cut, nil
}
