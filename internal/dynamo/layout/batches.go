package layout

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The batches index (config.IndexBatches) holds one entry per batch row:
//
//	bpk = BATCHES#{yyyy-mm}#{shard}   UTC month of created_at; shard = FNV-1a(id) mod BatchesShards
//	bsk = {created_at epoch ms:013}#{id}
//
// Its keys are written once, when the batch row is created, and never
// change; a later write of the row updates the entry's projected
// attributes (config.BatchesProjection) only when it changes one of them.
//
// Why no key of it passes DynamoDB's 1,000 write units/s per partition
// ("Partitions and data distribution", DynamoDB developer guide,
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.Partitions.html):
// all writes of batches being created now go to the current month, whatever
// the bucket's width, so the shards carry the rate and the month only
// bounds how much one key holds and lets `since` skip old months. A batch
// writes its entry at most ≈ 6 times per run (created, frozen or refused,
// finished; stop; forgetting; deleted), each ≤ 1 KB, one write unit, as
// only the listing's attributes are projected. The API stage allows
// APIRateLimit requests/s (default 50, burst 100), so API submits write at
// most 100 × 6 / BatchesShards = 75 units/s per key; a key reaches 1,000
// only past ≈ 1,300 batches created per second by API, uploads and
// schedules together.
const BatchesShards = 8

// Month is the first instant (UTC) of t's UTC month: the month of the
// batches index's partition keys.
func Month(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// BatchesPK is the batches index's partition key of a batch created at
// createdAt: "BATCHES#{yyyy-mm}#{FNV-1a(id) mod BatchesShards}".
func BatchesPK(id string, createdAt time.Time) string {
	return BatchesPKOf(Month(createdAt), ledger.Shard(id, BatchesShards))
}

// BatchesPKOf is the batches index's partition key of shard shard of the
// month starting at m (see Month): "BATCHES#{yyyy-mm}#{shard}".
func BatchesPKOf(m time.Time, shard int) string {
	return "BATCHES#" + m.Format("2006-01") + "#" + strconv.Itoa(shard)
}

// BatchesSK is the batches index's sort key: the creation time in epoch
// milliseconds, 13 digits (byte order is time order until the year 2286),
// "#" and the id.
func BatchesSK(id string, createdAt time.Time) string {
	return fmt.Sprintf("%013d#%s", createdAt.UnixMilli(), id)
}

// SourcesPK is the sources index's partition key of a batch whose source
// is described as source (api.SourceSpec.Describe): "SOURCE#" and the
// description for an S3 source ("s3://bucket/key", "s3://bucket/prefix/*"),
// "" (not indexed) for any other. At most 7 + 5 + 63 + 1 + 1,024 + 1 bytes,
// within DynamoDB's 2,048 bytes for a partition key (Amazon DynamoDB
// developer guide, "Service, account, and table quotas", "Partition key
// length").
func SourcesPK(source string) string {
	if !strings.HasPrefix(source, "s3://") {
		return ""
	}
	return "SOURCE#" + source
}

// MsKey is t in epoch milliseconds, 13 digits: the time part of a
// BatchesSK, and a bound of a listing's range of sort keys.
func MsKey(t time.Time) string { return fmt.Sprintf("%013d", t.UnixMilli()) }
