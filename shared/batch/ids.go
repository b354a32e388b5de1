package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"regexp"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
)

// MaxKeyBytes is the longest item key: 1,024 bytes of UTF-8 (DESIGN.md §1).
const MaxKeyBytes = 1024

var batchIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidBatchID reports whether id is 1–128 bytes of [A-Za-z0-9_-].
func ValidBatchID(id string) bool { return batchIDRE.MatchString(id) }

// NewBatchID returns a new ULID (26 characters, time-ordered).
func NewBatchID() string { return ulid.Make().String() }

// CheckKey returns a reason when key is not a valid item key (1–1024 bytes
// of valid UTF-8), or "".
func CheckKey(key string) string {
	switch {
	case key == "":
		return "item key is empty"
	case len(key) > MaxKeyBytes:
		return fmt.Sprintf("item key is %d bytes, longer than %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return "item key is not valid UTF-8"
	}
	return ""
}

// PositionalKey is the key of the item at 0-based index i when the source
// names none: "item-" and ten zero-padded digits, so byte order is item
// order (item-0000000042).
func PositionalKey(i int64) string { return fmt.Sprintf("item-%010d", i) }

// RunID is the hex SHA-256 of "{batch id}/{key}": stable across attempts,
// reruns and resumes of the item.
func RunID(batchID, key string) string {
	sum := sha256.Sum256([]byte(batchID + "/" + key))
	return hex.EncodeToString(sum[:])
}

// Shard is FNV-1a(key) mod n: the item's list-index shard (n ≥ 1).
func Shard(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// Shard counts. The list index spreads a batch's item rows over
// ListShards(items) partition keys so that none receives a write per item of
// the batch (DynamoDB caps one partition key at 1,000 write units/s); the
// run counters are spread over CounterShards(items) rows.
const (
	MinListShards    = 8
	MaxListShards    = 1024
	ItemsPerShard    = 10_000
	MaxCounterShards = 16
)

// ListShards is the number of list-index shards for a batch of n items:
// ceil(n / ItemsPerShard) clamped to [MinListShards, MaxListShards].
func ListShards(n int64) int {
	s := int((n + ItemsPerShard - 1) / ItemsPerShard)
	return max(MinListShards, min(MaxListShards, s))
}

// CounterShards is the number of counter rows for a run of n items:
// ceil(n / 100,000) clamped to [1, MaxCounterShards]. A counter row takes
// one write per message batch (≤ 10 items), so one row carries ~10,000
// items/s before the partition limit.
func CounterShards(n int64) int {
	s := int((n + 99_999) / 100_000)
	return max(1, min(MaxCounterShards, s))
}
