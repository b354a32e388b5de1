// Package layout is the single-table design of bulkrun's DynamoDB table
// (package dynamo's): every row's keys (pk, sk and the indexes' keys),
// the attribute names that condition and update expressions name, the
// rows' stored shapes (their images, as attributevalue marshals them)
// and their codecs to and from the ledger's types (shared/ledger,
// shared/api). It makes no call: package dynamo reads and writes the rows
// (the rest of the module uses it in tests only). A row written today carries AttrFormat =
// ledger.FormatVersion; its readers refuse a newer one
// (*ledger.NewerFormatError). The golden rows of every format version
// (integration/testbed/formats/testdata) are read here by TestGoldenRows.
//
// Rows (pk, sk → attributes):
//
//	BATCH#{id}, BATCH                      the batch row (one per batch)
//	                                       bpk=BATCHES#{yyyy-mm}#{shard}, bsk={created ms:013}#{id}: batches index (see BatchesPK)
//	ITEM#{id}#{shard}, {key}               an item row (one per item, from its first reservation); the
//	                                       table lists a batch's items per shard in key order (shard =
//	                                       FNV-1a(key) mod list_shards)
//	                                       apk={id}#{shard}, ask={key}: attention index, only while failed or quarantined
//	COUNT#{id}#{run}#{p}, LANE             counter lane p of the run (done, failures, items = its target,
//	                                       token slots t0…t15), one write per message batch in any order
//	COUNT#{id}#{run}#{p}, CHUNK#{first:012} (batches before lanes) the counter of the fan-out chunk
//	                                       starting at item first; p = chunk number mod counter_shards
//	COUNT#{id}#{run}, RUN                  the run's lanes done (older runs: chunks done) and, under the
//	                                       early stop, failures pushed by the lanes; a few writes per run
//	MARK#{id}#{run}#{shard}, {key}         an item answered from an earlier run's row, counted in run
//	SLOT#{id}#{i}, SLOT                    concurrency slot i of a batch with max_concurrency (holder, lease_until_ms)
//	RATE#{key}#{shard}, RATE               a rate key's bucket row (next_us), one write per lease; the key's, not a batch's
//	TOKENS#{key}, TOKENS                   a key's token row (next_us, tok_used, tok_calls), a booking and a settle per unit; the key's
//	ADAPT#{key}, ADAPT                     a downstream key's adaptive row (ad_limit, ad_base, ad_booked …), a lease per unit, a cut per throttled second; the key's
//	RUNNING, {id}                          running marker (one per batch run)
//	RETENTION, {expires_at_ms:020}#{id}    retention marker of a finished batch
//	PUBLISH, {id}#{run:010}                a finished run whose completion event is not marked published
//
// The pack, attention, wait, fan, claim, track, rate and upload rows are
// described beside their keys (packs.go, counters.go, tracks.go,
// rates.go, uploads.go).
package layout

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Fixed keys: the sort keys of the batch, run-counter and slot rows, and
// the partition keys of the running, retention and publish markers.
const (
	SKBatch     = "BATCH"
	SKRun       = "RUN"
	SKSlot      = "SLOT"
	PKRunning   = "RUNNING"
	PKRetention = "RETENTION"
	PKPublish   = "PUBLISH"
)

// PublishSK is the sort key of run run's publish marker (pk PKPublish):
// "{id}#{run:010}", the run zero-padded to 10 digits.
func PublishSK(id string, run int) string { return fmt.Sprintf("%s#%010d", id, run) }

// BatchPK is the partition key of batch id's batch row: "BATCH#{id}".
func BatchPK(id string) string { return "BATCH#" + id }

// ShardKey is "{id}#{shard}", the batch-and-shard part of the item,
// pack and attention rows' partition keys.
func ShardKey(id string, shard int) string { return id + "#" + strconv.Itoa(shard) }

// ItemPK is the partition key of the item rows of one shard.
func ItemPK(id string, shard int) string { return "ITEM#" + ShardKey(id, shard) }

// ItemKey is the key (pk, sk) of item itemKey's row in a batch of shards
// list shards (the shard is ledger.Shard(itemKey, shards)).
func ItemKey(id string, shards int, itemKey string) map[string]types.AttributeValue {
	return ItemKeyAt(id, ledger.Shard(itemKey, shards), itemKey)
}

// ItemKeyAt is the key (pk, sk) of item itemKey's row in item shard `shard`.
func ItemKeyAt(id string, shard int, itemKey string) map[string]types.AttributeValue {
	return Key(ItemPK(id, shard), itemKey)
}

// CountPK is the partition key of the chunk counters of one counter shard.
func CountPK(id string, run, shard int) string {
	return "COUNT#" + id + "#" + strconv.Itoa(run) + "#" + strconv.Itoa(shard)
}

// RunPK is the partition key of the run's chunks-done row.
func RunPK(id string, run int) string { return "COUNT#" + id + "#" + strconv.Itoa(run) }

// SKLane is the sort key of a counter lane (in counter partition = lane).
const SKLane = "LANE"

// ChunkSK is the sort key of the counter of the chunk starting at first.
func ChunkSK(first int64) string { return fmt.Sprintf("CHUNK#%012d", first) }

// MarkPK is the partition key of the rerun count marks of one item shard.
func MarkPK(id string, run, shard int) string {
	return "MARK#" + id + "#" + strconv.Itoa(run) + "#" + strconv.Itoa(shard)
}

// SlotPK is the partition key of concurrency slot slot of batch id:
// "SLOT#{id}#{slot}" (config.PKSlot), sort key SKSlot.
func SlotPK(id string, slot int) string { return config.PKSlot + id + "#" + strconv.Itoa(slot) }

// RetentionSK is the sort key of a retention marker: the expiry in epoch
// milliseconds, zero-padded to 20 digits so that byte order is time order.
func RetentionSK(expiresAt time.Time, id string) string {
	return fmt.Sprintf("%020d#%s", expiresAt.UnixMilli(), id)
}

// Key is the primary key of the row (pk, sk) as GetItem, UpdateItem and
// DeleteItem take it: two string attributes, config.AttrPK and
// config.AttrSK.
func Key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		config.AttrPK: &types.AttributeValueMemberS{Value: pk},
		config.AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

// Ms is t in epoch milliseconds, as the rows' *_ms attributes hold a
// time; 0 for the zero time.
func Ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMs is the UTC time of v epoch milliseconds; the zero time for 0
// (an absent *_ms attribute).
func FromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}
