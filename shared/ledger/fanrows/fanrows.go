// Package fanrows sizes the fan rows a batch's counter partitions count
// its fanned-out chunks in (the live view's "fanned"; fanout.CountOf):
// fixed when the batch's manifest is (ledger.Batch.FanRows), so that
// every writer of a batch agrees whatever release it runs.
package fanrows

// ChunksPerRow is the most chunks a fan row is planned to hold on
// average (Of): its set of chunk firsts (up to ≈ 10 bytes each) stays
// near 0.5 KB, one write unit a write, at any batch size. One row per
// partition grew with the batch: at 10^8 items (20,000 chunks over 4
// partitions) ≈ 40 KB, ≈ 40 write units a write, thousands a second on
// the partition while the chunks fan out ("Working with items: DynamoDB
// item sizes", Amazon DynamoDB developer guide).
const ChunksPerRow = 50

// Of is how many fan rows each of a batch's counter partitions has:
// ⌈chunks / shards / ChunksPerRow⌉, at least 1 (1 up to 1,000,000 items
// at 4 partitions).
func Of(chunks, shards int) int {
	per := ChunksPerRow * max(1, shards)
	return max(1, (chunks+per-1)/per)
}
