package meter

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The sizing rules are what every cost figure of bulkrun rests on (the
// "Cost" section of docs/design/cost.md and `make bench`): examples from
// "DynamoDB item sizes and formats" and "DynamoDB read and write
// operations" in the DynamoDB Developer Guide.
func TestItemBytes(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	tests := []struct {
		name string
		item map[string]types.AttributeValue
		want int
	}{
		{"empty item", nil, 0},
		// Strings: name bytes + UTF-8 bytes.
		{"string", map[string]types.AttributeValue{"pk": s("ITEM#b#k")}, 2 + 8},
		{"utf-8 string", map[string]types.AttributeValue{"é": s("ü€")}, 2 + 5},
		// Numbers: name + 1 byte per two significant digits + 1.
		{"number 1 digit", map[string]types.AttributeValue{"n": n("7")}, 1 + 2},
		{"number 4 digits", map[string]types.AttributeValue{"n": n("1234")}, 1 + 3},
		{"number 5 digits", map[string]types.AttributeValue{"n": n("-12345")}, 1 + 4},
		{"zeros trimmed", map[string]types.AttributeValue{"n": n("001200.00")}, 1 + 2},
		{"zero", map[string]types.AttributeValue{"n": n("0")}, 1 + 2},
		{"exponent ignored", map[string]types.AttributeValue{"n": n("1.5E+10")}, 1 + 2},
		// Binary: raw bytes; null and boolean: 1 byte.
		{"binary", map[string]types.AttributeValue{"b": &types.AttributeValueMemberB{Value: make([]byte, 10)}}, 1 + 10},
		{"bool and null", map[string]types.AttributeValue{"t": &types.AttributeValueMemberBOOL{Value: true}, "z": &types.AttributeValueMemberNULL{Value: true}}, 2 + 2},
		// List and map: 3 bytes of overhead, 1 byte per element.
		{"empty list", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{}}, 1 + 3},
		{"empty map", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{}}, 1 + 3},
		{"list of two", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("ab"), n("1")}}}, 1 + 3 + (1 + 2) + (1 + 2)},
		{"map with names", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"ab": s("xyz")}}}, 1 + 3 + 1 + 2 + 3},
		{"string set", map[string]types.AttributeValue{"ss": &types.AttributeValueMemberSS{Value: []string{"a", "bc"}}}, 2 + 3},
		{"1 KB string", map[string]types.AttributeValue{"output": s(strings.Repeat("x", 1024))}, 6 + 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ItemBytes(tt.item); got != tt.want {
				t.Errorf("ItemBytes = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestUnits(t *testing.T) {
	const kb = 1024
	tests := []struct {
		name       string
		bytes      int
		consistent bool
		wantWrite  float64
		wantRead   float64
	}{
		{"empty still costs one", 0, true, 1, 1},
		{"exactly 1 KB", kb, true, 1, 1},
		{"1.5 KB: 2 write units", 3 * kb / 2, true, 2, 1},
		// "reading a 3,500-byte item consumes the same throughput as reading a 4 KB item"
		{"3,500 bytes", 3500, true, 4, 1},
		// "if your item size is 8 KB, you require 2 read units ... 1 if eventually consistent"
		{"8 KB strongly consistent", 8 * kb, true, 8, 2},
		{"8 KB eventually consistent", 8 * kb, false, 8, 1},
		// "If you read a 10 KB item, DynamoDB rounds the item size to 12 KB."
		{"10 KB", 10 * kb, true, 10, 3},
		// Query: "returns 10 items whose combined size is 40.8 KB ... rounds to 44 KB"
		{"query page 40.8 KB", 41779, true, 41, 11},
		{"eventually consistent 1 byte", 1, false, 1, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WriteUnits(tt.bytes); got != tt.wantWrite {
				t.Errorf("WriteUnits(%d) = %v, want %v", tt.bytes, got, tt.wantWrite)
			}
			if got := ReadUnits(tt.bytes, tt.consistent); got != tt.wantRead {
				t.Errorf("ReadUnits(%d, %v) = %v, want %v", tt.bytes, tt.consistent, got, tt.wantRead)
			}
		})
	}
}
