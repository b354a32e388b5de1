package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

func TestIDs(t *testing.T) {
	if got := api.PositionalKey(42); got != "item-0000000042" {
		t.Fatalf("PositionalKey(42) = %s", got)
	}
	if api.PositionalKey(9) >= api.PositionalKey(10) {
		t.Fatal("positional keys must sort in item order")
	}
	if first, again := RunID("b", "k"), RunID("b", "k"); first != again || first == RunID("b", "k2") || len(first) != 64 {
		t.Fatal("RunID must be a stable hex SHA-256")
	}
	if sum := sha256.Sum256([]byte("b/k")); RunID("b", "k") != hex.EncodeToString(sum[:]) {
		t.Fatal("RunID must be hex SHA-256 of {batch}/{key}")
	}
	for _, tt := range []struct {
		id string
		ok bool
	}{{"abc_-9", true}, {"", false}, {strings.Repeat("a", 128), true}, {strings.Repeat("a", 129), false}, {"a/b", false}, {"é", false}} {
		if api.ValidBatchID(tt.id) != tt.ok {
			t.Errorf("ValidBatchID(%q) = %v", tt.id, !tt.ok)
		}
	}
	if len(NewBatchID()) != 26 || !api.ValidBatchID(NewBatchID()) {
		t.Fatal("NewBatchID must be a valid ULID")
	}
	for _, tt := range []struct {
		key  string
		want string
	}{{"a", ""}, {"", "item key is empty"}, {strings.Repeat("k", 1024), ""}, {strings.Repeat("k", 1025), "item key is 1025 bytes, longer than 1024"}, {"\xff", "item key is not valid UTF-8"}} {
		if got := api.CheckKey(tt.key); got != tt.want {
			t.Errorf("CheckKey(%.10q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	for n := 1; n < 40; n += 7 {
		if s := Shard("some-key", n); s < 0 || s >= n {
			t.Fatalf("Shard out of range: %d of %d", s, n)
		}
	}
}

func TestMessageValidate(t *testing.T) {
	ok := ItemMessage("b1", 1, "m", source.Chunk{Count: 1}, source.ManifestLine{Key: "k", Input: json.RawMessage(`{}`)}, 0, 10)
	if err := ok.Validate(); err != nil || ok.Input == nil || ok.InputRef != nil {
		t.Fatalf("small input must travel inline: %+v %v", ok, err)
	}
	big := ItemMessage("b1", 1, "m", source.Chunk{Count: 1}, source.ManifestLine{Key: "k", Input: json.RawMessage(`"` + strings.Repeat("x", MaxInlineInputBytes) + `"`)}, 100, 200)
	if err := big.Validate(); err != nil || big.Input != nil || big.InputRef == nil || big.InputRef.Offset != 100 || big.ManifestKey != "m" {
		t.Fatalf("large input must travel as a pointer: %+v %v", big.InputRef, err)
	}
	for _, m := range []Message{{Kind: "x", BatchID: "b", Run: 1}, {Kind: KindItem, BatchID: "b/", Run: 1, Key: "k", Input: json.RawMessage(`1`)}, {Kind: KindItem, BatchID: "b", Run: 0}, {Kind: KindFanout, BatchID: "b", Run: 1}} {
		if m.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", m)
		}
	}
}

// An input that fits the inline limit but grows past the message limit
// when encoded travels as a pointer; HTML characters are not escaped.
func TestItemMessageBodySize(t *testing.T) {
	html := json.RawMessage(`"` + strings.Repeat("<p>a&b</p>", 15000) + `"`) // 150 KB
	body, err := ItemMessageBody("b", 1, "m", source.Chunk{Count: 1}, source.ManifestLine{Key: "k", Input: html}, 10, 20)
	if err != nil || len(body) > MaxMessageBytes || strings.Contains(string(body), `\u003c`) {
		t.Fatalf("body %d bytes, err %v", len(body), err)
	}
	var m Message
	if err := json.Unmarshal(body, &m); err != nil || string(m.Input) != string(html) || m.InputRef != nil {
		t.Fatalf("150 KB of HTML must stay inline unescaped: %v", err)
	}
	quotes := json.RawMessage(`"` + strings.Repeat(`\"\"\"\"`, 20000) + `"`) // 160 KB that encodes larger
	body, err = ItemMessageBody("b", 1, "m", source.Chunk{Count: 1}, source.ManifestLine{Key: "k", Input: json.RawMessage(`[` + string(quotes) + `,` + string(quotes) + `]`)}, 10, 20)
	_ = json.Unmarshal(body, &m)
	if err != nil || len(body) > MaxMessageBytes || m.InputRef == nil || m.InputRef.Offset != 10 {
		t.Fatalf("an oversize body must become a pointer: %d bytes, %+v, %v", len(body), m.InputRef, err)
	}
}

// No hot partition at any size (shard counts follow the stack's flow, not
// the item count): the item-row and counter partition counts derive from
// the item function's maximum concurrency × items per invocation, capped
// by what a small batch can write. Removing the flow term (sizing by item
// count alone) fails the 10^4 and 5·10^4 rows.
func TestNoHotPartitionShardCounts(t *testing.T) {
	flow := StackFlow(100, 10)
	if flow != DefaultItemsPerSecond {
		t.Fatalf("StackFlow(100, 10) = %d, want %d", flow, DefaultItemsPerSecond)
	}
	for _, tt := range []struct {
		name       string
		items      int64
		flow       int
		wantList   int
		wantCounts int
	}{
		{"one item", 1, flow, 1, 2},
		{"10^3 items: as many as its writes need", 1_000, flow, 8, 2},
		{"10^4 items: the flow's", 10_000, flow, 80, 2},
		{"5·10^4 items", 50_000, flow, 80, 2},
		{"10^7 items: the same", 10_000_000, flow, 80, 2},
		{"default flow when unknown", 10_000_000, 0, 80, 2},
		{"max concurrency 1000", 10_000_000, StackFlow(1000, 10), 800, MaxCounterShards},
		{"clamped at 1,024", 10_000_000, StackFlow(1000, 10) * 2, MaxListShards, MaxCounterShards},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ListShards(tt.items, tt.flow); got != tt.wantList {
				t.Errorf("ListShards(%d, %d) = %d, want %d", tt.items, tt.flow, got, tt.wantList)
			}
			if got := CounterShards(tt.flow); got != tt.wantCounts {
				t.Errorf("CounterShards(%d) = %d, want %d", tt.flow, got, tt.wantCounts)
			}
			// The planned units per second on one item partition stay
			// within the budget at the flow (the busiest of the batch's
			// own keys can take no more than all its items write).
			f := tt.flow
			if f <= 0 {
				f = DefaultItemsPerSecond
			}
			perKey := float64(min(int64(f), tt.items)) * ShardWriteUnitsPerItem / float64(ListShards(tt.items, tt.flow))
			if ListShards(tt.items, tt.flow) < MaxListShards && perKey > ShardWriteBudget {
				t.Errorf("%.0f write units/s per item partition, budget %d", perKey, ShardWriteBudget)
			}
		})
	}
	for n := 1; n < 40; n += 7 {
		if s := Shard("some-key", n); s < 0 || s >= n {
			t.Fatalf("Shard out of range: %d of %d", s, n)
		}
	}
}
