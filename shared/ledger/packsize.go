package ledger

// A pack row holds up to MaxItemsPerMessage items, each with its key
// (≤ 1,024 bytes), its cost and spent records (≤ 10 names each,
// pipeline.MaxCostNames), and an inline output (≤ MaxInlineOutputBytes)
// or an error text (≤ pipeline.MaxErrorTextBytes): 100 items × 64 KiB of
// output, or × 4 KiB of error, would pass DynamoDB's 400 KB item limit
// (Amazon DynamoDB developer guide, "Service, account, and table quotas",
// item size, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html),
// and the pack's write — every item's outcome — would fail on every
// delivery. So the worker bounds each pack write (boundPack): while the
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
