package ledger

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"strings"

	"github.com/oklog/ulid/v2"
)

// NewBatchID returns a new ULID (26 characters, time-ordered).
func NewBatchID() string { return ulid.Make().String() }

// NewTakeToken returns a take's token (Reservation.Token,
// PackWrite.Token): 8 random bytes, base64url without padding (11
// characters), so two takes of one row share one with a chance of
// 2^-64.
func NewTakeToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// RunID is the hex SHA-256 of "{batch id}/{key}": stable across attempts,
// reruns and resumes of the item.
func RunID(batchID, key string) string {
	sum := sha256.Sum256([]byte(batchID + "/" + key))
	return hex.EncodeToString(sum[:])
}

// Shard is FNV-1a(key) mod n: the item's shard (n ≥ 1): its row lives under ITEM#{batch}#{shard}.
func Shard(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// Shard counts. A batch's item rows live under ListShards partition keys
// (ITEM#{batch}#{shard}, sort key the item key) and its run counters under
// CounterShards partition keys, both derived from the flow the stack
// allows (ItemsPerSecond), not from the item count alone: DynamoDB allows
// one partition key at most 1,000 write units per second ("Partitions and
// data distribution", DynamoDB developer guide,
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.Partitions.html;
// "Best practices for designing and using partition keys effectively",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html).
const (
	MinListShards = 1
	MaxListShards = 1024
	// ShardWriteUnitsPerItem is the item-row write units one item is
	// planned at: the reservation (1) and the outcome with an output of up
	// to ≈ 2 KB (≤ 3). Larger inline outputs (up to MaxInlineOutputBytes)
	// cost more per item and lower the flow one shard takes.
	ShardWriteUnitsPerItem = 4
	// ShardWriteBudget is the write units per second planned per partition
	// key: half of DynamoDB's 1,000, leaving room for the uneven spread of
	// keys over shards, retries and takeovers.
	ShardWriteBudget = 500
	// DefaultItemsPerSecond is the flow of the stack's defaults:
	// StackFlow(100, 10).
	DefaultItemsPerSecond = 10_000
	// InvocationsPerSecondPerSlot bounds how many message batches one
	// concurrent item-function instance finishes per second: each
	// invocation makes at least the event source's receive and delete, a
	// reservation, an outcome write and a counter write in sequence, over
	// 100 ms in all.
	InvocationsPerSecondPerSlot = 10
	MaxCounterShards            = 16
)

// StackFlow is the most items per second the stack's item function can
// finish: maxConcurrency instances (the SQS event source's maximum
// concurrency) × perInvocation items per message batch ×
// InvocationsPerSecondPerSlot. At the defaults (100, 10) it is
// DefaultItemsPerSecond.
func StackFlow(maxConcurrency, perInvocation int) int {
	return max(1, maxConcurrency) * max(1, perInvocation) * InvocationsPerSecondPerSlot
}

// ListShards is the number of item-row partition keys of a batch of n
// items at a flow of itemsPerSecond (≤ 0: DefaultItemsPerSecond): enough
// that the flow's item-row writes stay within ShardWriteBudget per key,
// ceil(itemsPerSecond × ShardWriteUnitsPerItem / ShardWriteBudget), and no
// more than a batch of n items needs, ceil(n × ShardWriteUnitsPerItem /
// ShardWriteBudget) (a key whose items write fewer units in all than the
// budget cannot exceed it in any second); clamped to [MinListShards,
// MaxListShards]. Every reader of a batch's items (finalize, listings,
// forget) reads this many partitions.
func ListShards(n int64, itemsPerSecond int) int {
	if itemsPerSecond <= 0 {
		itemsPerSecond = DefaultItemsPerSecond
	}
	byFlow := (int64(itemsPerSecond)*ShardWriteUnitsPerItem + ShardWriteBudget - 1) / ShardWriteBudget
	bySize := (n*ShardWriteUnitsPerItem + ShardWriteBudget - 1) / ShardWriteBudget
	return int(max(MinListShards, min(MaxListShards, byFlow, bySize)))
}

// CounterShards is the number of partition keys the run's chunk counters
// are spread over (counter of chunk c under key c mod CounterShards): each
// message batch writes one counter (one write unit), so the counters take
// at most itemsPerSecond / ItemsPerMessageBatch units per second in all;
// ceil of that over ShardWriteBudget, clamped to [1, MaxCounterShards].
// Live status and the finalize tick read this many partitions.
func CounterShards(itemsPerSecond int) int {
	if itemsPerSecond <= 0 {
		itemsPerSecond = DefaultItemsPerSecond
	}
	perSecond := (itemsPerSecond + ItemsPerMessageBatch - 1) / ItemsPerMessageBatch
	return max(1, min(MaxCounterShards, (perSecond+ShardWriteBudget-1)/ShardWriteBudget))
}

// Counter lanes. A run's terminal items are counted in CounterLanes lane
// rows (COUNT#{batch}#{run}#{lane}, LANE), lane p filled up to its
// LaneTarget: each message batch adds its items of the run to one lane
// chosen at random among those not yet full, weighed by the room left
// its process knows (Worker.count, lanebook.Room.Pick), whatever
// fan-out chunks its messages came from, so the counter writes are one per
// message batch in any delivery order; the write that fills a lane to its
// target counts the lane done on the run row, and the write that counts
// the last lane done completes the run. Lane targets add up to the run's
// items.
const (
	// LaneWriteBudget is the counter writes per second planned per lane:
	// a quarter of DynamoDB's 1,000 write units/s per partition key, so
	// that when lanes fill one after another the last ones take the
	// others' writes and stay under the limit (TestLanesStayUnderTheLimit).
	LaneWriteBudget = 250
	// MaxCounterLanes bounds the lanes (and the counter partitions live
	// status and the finalize tick read): 40 serve the largest flow the
	// event source allows (StackFlow(1000, 10) = 100,000 items/s).
	MaxCounterLanes = 64
)

// CounterLanes is the number of counter lanes of a batch of n items at a
// flow of itemsPerSecond (≤ 0: DefaultItemsPerSecond): the counter writes
// per second, one per message batch of ItemsPerMessageBatch items at the
// flow (or n items in all, whichever is less), over LaneWriteBudget,
// clamped to [1, MaxCounterLanes]. 4 at the defaults, 40 at the largest
// flow; 1 for a batch of up to 2,500 items.
func CounterLanes(n int64, itemsPerSecond int) int {
	if itemsPerSecond <= 0 {
		itemsPerSecond = DefaultItemsPerSecond
	}
	items := min(int64(itemsPerSecond), max(n, 1))
	perSecond := (items + ItemsPerMessageBatch - 1) / ItemsPerMessageBatch
	return int(max(1, min(MaxCounterLanes, (perSecond+LaneWriteBudget-1)/LaneWriteBudget)))
}

// LaneTarget is how many of a run's n items lane p of lanes counts: n
// split evenly, the first n mod lanes lanes one more.
func LaneTarget(n int64, lanes, p int) int64 {
	lanes = max(1, lanes)
	t := n / int64(lanes)
	if int64(p) < n%int64(lanes) {
		t++
	}
	return t
}

// ItemsPerMessageBatch is the items queue's batch size: the most item
// messages one invocation of the item function receives (the stack's SQS
// event source BatchSize, config.DefaultItemBatchSize).
const ItemsPerMessageBatch = 10

// NewToken returns a random token of 12 hex digits that tells one write from
// every other (see LaneCount.Token).
func NewToken() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// KeyOrder compares two item keys in the order of a run's results and of
// every listing of items: byte order of their UTF-8 bytes, the order
// DynamoDB gives a string sort key ("Query", DynamoDB API reference:
// string values are ordered by their UTF-8 bytes). Keys of one batch are
// unique, so no two items compare equal.
func KeyOrder(a, b string) int { return strings.Compare(a, b) }

// UploadContent identifies what an upload asks to run: hex SHA-256 of the
// manifest digest of its items (which holds every key and input as read:
// the same file under another name, or re-exported with another line
// ending or compression, gives the same digest), the pipeline and its
// options as compact JSON, each on its own line. Deterministic.
func UploadContent(digest, pipeline string, options json.RawMessage) string {
	var compact bytes.Buffer
	if len(options) == 0 || json.Compact(&compact, options) != nil {
		compact.Reset()
		compact.Write(options)
	}
	if compact.String() == "null" {
		compact.Reset() // no options, as {} would be another plan
	}
	h := sha256.New()
	h.Write([]byte(digest + "\n" + pipeline + "\n"))
	h.Write(compact.Bytes())
	return hex.EncodeToString(h.Sum(nil))
}
