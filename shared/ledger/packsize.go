package ledger

import (
	"fmt"
	"slices"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// A pack row holds up to MaxItemsPerMessage items, each with its key
// (≤ 1,024 bytes), its cost and spent records (≤ 10 names each,
// pipeline.MaxCostNames), and an inline output (≤ MaxInlineOutputBytes)
// or an error text (≤ pipeline.MaxErrorTextBytes): 100 items × 64 KiB of
// output, or × 4 KiB of error, would pass DynamoDB's 400 KB item limit
// (Amazon DynamoDB developer guide, "Service, account, and table quotas",
// item size, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html),
// and the pack's write — every item's outcome — would fail on every
// delivery. So the worker bounds each pack write (BoundPack): while the
// row's items, as StateBytes sizes them, pass PackRowBudget, the largest
// inline output written now goes to S3 (item-outputs/{run id}.json, with
// OutputRef, as an output over MaxInlineOutputBytes always does), or the
// longest error text written now is cut (to half, at least
// MinPackErrorBytes). Keys, costs and a pointer per item take at most
// ≈ 100 × 2.6 KB = 260 KB, so the bound can always be met.

// PackRowBudget is what a pack row's items may take by StateBytes: 300
// KiB, leaving 100 KB of DynamoDB's 400 KB for the row's own attributes
// and the encoding (attribute names, map overhead) StateBytes leaves out.
const PackRowBudget = 300 << 10

// MinPackErrorBytes is the least of an error text a pack keeps when it
// cuts texts to stay within PackRowBudget.
const MinPackErrorBytes = 256

// StateBytes is an upper estimate of what item s takes in a pack row:
// its key, output, output pointer, error and reason, each cost and spent
// name with a 21-byte number, and 128 bytes for the other fields and
// their names.
func StateBytes(s ItemState) int {
	n := 128 + len(s.Key) + len(s.Output) + len(s.OutputRef) + len(s.Error) + len(s.Reason)
	for name := range s.Cost {
		n += len(name) + 21
	}
	for name := range s.Spent {
		n += len(name) + 21
	}
	return n
}

// BoundPack keeps the pack row that writes leave (items: the row's items
// as held, writes applied) within PackRowBudget, shrinking only what this
// write writes: the largest inline output goes to S3 first — put stores
// it under batches/{batch id}/item-outputs/{run id}.json (as an output
// over MaxInlineOutputBytes always goes) and returns its s3:// URI — then
// the longest error text is cut. It changes writes in place and returns
// how many outputs it moved and texts it cut; the error is put's,
// naming the item's key.
func BoundPack(batchID string, items []ItemState, writes []PackItemWrite, put func(key string, output []byte) (string, error)) (moved, cut int, err error) {
	after := slices.Clone(items)
	for _, iw := range writes {
		after[iw.Index] = iw.Item
	}
	total := 0
	for _, s := range after {
		total += StateBytes(s)
	}
	for total > PackRowBudget {
		best, size := -1, 0
		for i, iw := range writes {
			if n := len(iw.Item.Output) + max(len(iw.Item.Error)-MinPackErrorBytes, 0); n > size {
				best, size = i, n
			}
		}
		if best < 0 {
			return moved, cut, nil // nothing written now can shrink (the rest is bounded by construction)
		}
		s := &writes[best].Item
		was := StateBytes(*s)
		if len(s.Output) > 0 {
			uri, err := put(fmt.Sprintf("batches/%s/item-outputs/%s.json", batchID, RunID(batchID, s.Key)), s.Output)
			if err != nil {
				return moved, cut, fmt.Errorf("store an output of pack item %q: %w", s.Key, err)
			}
			s.Output, s.OutputRef = nil, uri
			moved++
		} else {
			s.Error = pipeline.CutText(s.Error, max(len(s.Error)/2, MinPackErrorBytes))
			cut++
		}
		total += StateBytes(*s) - was
	}
	return moved, cut, nil
}
