// Package meter computes what AWS bills a bulkrun run for, from the requests
// it makes: DynamoDB read and write units by DynamoDB's own sizing rules,
// and billed requests of SQS, S3, EventBridge and Lambda. The emulator does
// not size capacity truthfully (MiniStack charges every read one unit
// whatever its size), so tests and `make bench` meter on the client side
// with an SDK middleware ([Meter.Attach]) instead of trusting the figures the
// emulator returns. On AWS the adapter's own ConsumedCapacity sums
// (dynamo.Store.Capacity) are the truth; the meter is for the emulator.
//
// Sizing rules, from the DynamoDB Developer Guide:
//   - "DynamoDB item sizes and formats" (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html):
//     an item's size is the sum of its attribute names' and values' sizes.
//   - "DynamoDB read and write operations"
//     (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html):
//     one write unit per started KB, one read unit per started 4 KB for a
//     strongly consistent read, half for an eventually consistent one,
//     double both for transactions.
//   - "Managing capacity for secondary indexes"
//     (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.ThroughputConsiderations.Writes):
//     a write that inserts, updates or deletes an index entry costs the
//     index one write by the entry's size; one that changes the index key
//     costs two (delete the old entry, put the new one).
//   - "Condition expressions" (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html):
//     a failed condition still consumes write units by the existing item's
//     size, at least 1, and writes no index.
package meter

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Sizing constants of DynamoDB capacity units, in bytes.
const (
	WriteUnitBytes = 1024 // one write unit covers a started KB
	ReadUnitBytes  = 4096 // one strongly consistent read unit covers a started 4 KB
)

// ItemBytes is the billed size in bytes of an item (or an index entry): the
// UTF-8 length of each attribute name plus the size of its value
// ([ValueBytes]). A nil or empty item is 0 bytes.
func ItemBytes(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + ValueBytes(v)
	}
	return n
}

// ValueBytes is the size in bytes of one attribute value by DynamoDB's
// rules: strings and binary their length in bytes (UTF-8 for strings);
// numbers 1 byte per two significant digits plus 1 ([NumberBytes]); null
// and boolean 1;
// a list or map 3 bytes of overhead plus, per element, 1 byte and the
// element's size (a map element's name counts too); a set the sum of its
// elements' sizes.
func ValueBytes(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return NumberBytes(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + ValueBytes(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for name, e := range v.Value {
			n += 1 + len(name) + ValueBytes(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range v.Value {
			n += NumberBytes(e)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	}
	return 0
}

// NumberBytes is the size of a DynamoDB number given as its decimal text
// ("-12.50", "1E+3"): ceil(significant digits / 2) + 1 bytes, leading and
// trailing zeros trimmed (zero counts as one digit: 2 bytes). DynamoDB calls
// this size approximate; the meter uses it as exact.
func NumberBytes(s string) int {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimLeft(s, "+-")
	s = strings.ReplaceAll(s, ".", "")
	s = strings.Trim(s, "0")
	d := utf8.RuneCountInString(s)
	if d == 0 {
		d = 1
	}
	return (d+1)/2 + 1
}

// WriteUnits is the write units of one write of an entry of the given size:
// one per started KB, at least 1 (a delete of a missing item costs 1).
func WriteUnits(bytes int) float64 {
	return math.Max(1, math.Ceil(float64(bytes)/WriteUnitBytes))
}

// ReadUnits is the read units of reading the given bytes in one go (one
// item of GetItem or BatchGetItem, or the summed page of a Query or Scan):
// one per started 4 KB, at least 1, half of that when eventually
// consistent.
func ReadUnits(bytes int, consistent bool) float64 {
	u := math.Max(1, math.Ceil(float64(bytes)/ReadUnitBytes))
	if !consistent {
		u /= 2
	}
	return u
}
