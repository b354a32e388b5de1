package meter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Write billing by before and after image: the figures `make bench` and
// the write-unit budget test of the integration suite rest on ("Cost" in
// docs/design/cost.md). Rules from "Managing capacity for secondary indexes"
// and "Condition expressions" in the DynamoDB Developer Guide.
func TestBill(t *testing.T) {
	sc := &schema{pk: "pk", sk: "sk", indexes: []index{
		{name: "all", pk: "lpk", sk: "lsk", projection: types.ProjectionTypeAll},
		{name: "keys", pk: "apk", sk: "ask", projection: types.ProjectionTypeKeysOnly},
	}}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	row := func(kv ...string) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{"pk": s("ITEM#b#k"), "sk": s("ITEM")}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = s(kv[i+1])
		}
		return m
	}
	big := strings.Repeat("x", 1500) // makes the row 2 KB
	tests := []struct {
		name          string
		before, after map[string]types.AttributeValue
		failed        bool
		factor        float64
		want          map[Target]float64
	}{
		{"insert without index keys: table only", nil, row("state", "r"), false, 1,
			map[Target]float64{{Kind: "ITEM"}: 1}},
		{"insert with list key: table + index insert", nil, row("lpk", "b#1", "lsk", "k"), false, 1,
			map[Target]float64{{Kind: "ITEM"}: 1, {Index: "all", Kind: "ITEM"}: 1}},
		{"update of a projected attribute: index updated in place", row("lpk", "b#1", "lsk", "k", "state", "r"), row("lpk", "b#1", "lsk", "k", "state", "s"), false, 1,
			map[Target]float64{{Kind: "ITEM"}: 1, {Index: "all", Kind: "ITEM"}: 1}},
		{"large output: by the larger image, table and ALL index", row("lpk", "b#1", "lsk", "k"), row("lpk", "b#1", "lsk", "k", "output", big), false, 1,
			map[Target]float64{{Kind: "ITEM"}: 2, {Index: "all", Kind: "ITEM"}: 2}},
		{"keys-only index unchanged when only other attributes change", row("apk", "b#1", "ask", "k"), row("apk", "b#1", "ask", "k", "output", big), false, 1,
			map[Target]float64{{Kind: "ITEM"}: 2}},
		{"index key changes: delete + insert", row("lpk", "b#1", "lsk", "k"), row("lpk", "b#2", "lsk", "k"), false, 1,
			map[Target]float64{{Kind: "ITEM"}: 1, {Index: "all", Kind: "ITEM"}: 2}},
		{"index entry removed", row("apk", "b#1", "ask", "k"), row(), false, 1,
			map[Target]float64{{Kind: "ITEM"}: 1, {Index: "keys", Kind: "ITEM"}: 1}},
		{"delete: table and each index entry", row("lpk", "b#1", "lsk", "k", "output", big), nil, false, 1,
			map[Target]float64{{Kind: "ITEM"}: 2, {Index: "all", Kind: "ITEM"}: 2}},
		{"failed condition on a missing item: 1 unit, no index", nil, nil, true, 1,
			map[Target]float64{{Kind: ""}: 1}},
		{"failed condition: by the existing item's size, no index", row("lpk", "b#1", "lsk", "k", "output", big), nil, true, 1,
			map[Target]float64{{Kind: "ITEM"}: 2}},
		{"transaction doubles", nil, row("lpk", "b#1", "lsk", "k"), false, 2,
			map[Target]float64{{Kind: "ITEM"}: 2, {Index: "all", Kind: "ITEM"}: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u Usage
			u.init()
			after := tt.after
			if tt.failed {
				after = tt.before
			}
			sc.bill(&u, tt.before, after, tt.failed, tt.factor)
			if len(u.Write) != len(tt.want) {
				t.Errorf("billed %v, want %v", u.Write, tt.want)
			}
			for k, v := range tt.want {
				if u.Write[k] != v {
					t.Errorf("%+v: %v units, want %v (all: %v)", k, u.Write[k], v, u.Write)
				}
			}
		})
	}
}

func TestChunks(t *testing.T) {
	for _, tt := range []struct {
		bytes int
		want  float64
	}{{0, 1}, {1, 1}, {64 * 1024, 1}, {64*1024 + 1, 2}, {256 * 1024, 4}} {
		if got := chunks(tt.bytes); got != tt.want {
			t.Errorf("chunks(%d) = %v, want %v", tt.bytes, got, tt.want)
		}
	}
}

// TestBillRetried: the writes of a unit taken again (its row's takes 2 or
// more after the write) are in Retried as billed, by the larger image;
// a first take, a refused write and other rows are not.
func TestBillRetried(t *testing.T) {
	sc := &schema{pk: "pk", sk: "sk"}
	row := func(kind string, takes int, extra string) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: kind + "#b#0"}, "sk": &types.AttributeValueMemberS{Value: "0"},
			"out": &types.AttributeValueMemberS{Value: extra}}
		if takes > 0 {
			m[AttemptAttr] = &types.AttributeValueMemberN{Value: strconv.Itoa(takes)}
		}
		return m
	}
	big := strings.Repeat("x", 7000) // with the keys ≈ 6.9 KB: 7 units
	tests := []struct {
		name          string
		before, after map[string]types.AttributeValue
		failed        bool
		want          float64
	}{
		{"first take of a pack", nil, row("PACK", 1, ""), false, 0},
		{"first pass's outcome write", row("PACK", 1, ""), row("PACK", 1, big), false, 0},
		{"a retried pack's take, by the row as it stands", row("PACK", 1, big), row("PACK", 2, big), false, 7},
		{"a retried item's outcome write", row("ITEM", 2, ""), row("ITEM", 2, "done"), false, 1},
		{"a take refused", row("PACK", 2, big), row("PACK", 2, big), true, 0},
		{"another row kind", row("COUNT", 3, ""), row("COUNT", 4, ""), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u Usage
			u.init()
			sc.bill(&u, tt.before, tt.after, tt.failed, 1)
			if got := sum(u.Retried, nil); got != tt.want {
				t.Errorf("retried %v units (%v), want %v; all writes %v", got, u.Retried, tt.want, u.Write)
			}
		})
	}
}

// TestKind guards the row kinds the bench splits units by: a counter's
// and a run on tracks' rows by their sort key, the rest by the partition
// key's prefix.
func TestKind(t *testing.T) {
	sc := &schema{pk: "pk", sk: "sk"}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	for _, c := range []struct{ pk, sk, want string }{
		{"ITEM#b#3", "k1", "ITEM"},
		{"COUNT#b", "LANE#2", "COUNT LANE"},
		{"SLOT#b#r0", "CLAIM", "SLOT CLAIM"},
		{"SLOT#b#r0#t3", "TRACK", "SLOT TRACK"},
		{"SLOT#b#4", "SLOT", "SLOT"},
		{"BATCH#b", "BATCH", "BATCH"},
	} {
		if got := sc.kind(map[string]types.AttributeValue{"pk": s(c.pk), "sk": s(c.sk)}); got != c.want {
			t.Errorf("kind of %s / %s: %q, want %q", c.pk, c.sk, got, c.want)
		}
	}
}
