package bench

import (
	"math"
	"testing"

	"github.com/bulkrun/bulkrun/internal/meter"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// The partition table of `make bench` (no hot partition at 10,000 items/s):
// computed from the real shard derivation and the measured units per item.
// With today's shard counts a 50,000-item batch has 8 list shards, so its
// busiest list-index key takes about an eighth of 10,000 items/s × the
// index units per item, and its single counter row one write per message
// batch: 1,000 write units/s.
func TestPartitionTable(t *testing.T) {
	r := Result{Scenario: Scenario{Items: 1000}, Usage: meter.Usage{Write: map[meter.Target]float64{
		{Kind: "ITEM"}:                2000, // 2 per item
		{Index: "list", Kind: "ITEM"}: 2000, // 2 per item
		{Kind: "COUNT"}:               100,  // one per message batch of 10
		{Kind: "BATCH"}:               5,
	}}}
	rows := r.Partitions()
	if len(rows) != len(PartitionSizes) {
		t.Fatalf("%d rows, want %d", len(rows), len(PartitionSizes))
	}
	tests := []struct {
		items                     int64
		listShards, counterShards int
		wantList, wantTable, tol  float64
	}{
		// 8 shards: 10,000 × 2 / 8 = 2,500, plus the hash's unevenness.
		{50_000, 8, 1, 2500, 1000, 60},
		{100_000, 10, 1, 2000, 1000, 60},
		// 1000 shards of 10^7 keys; 16 counter rows share 1,000 writes/s.
		{10_000_000, 1000, 16, 20, 1000.0 / 16, 5},
	}
	for _, tt := range tests {
		var row PartitionRow
		for _, r := range rows {
			if r.BatchItems == tt.items {
				row = r
			}
		}
		if row.ListShards != tt.listShards || row.CounterShards != tt.counterShards {
			t.Errorf("%d items: %d list and %d counter shards, want %d and %d", tt.items, row.ListShards, row.CounterShards, tt.listShards, tt.counterShards)
		}
		if got := row.WCUPerS["index list"]; !near(got, tt.wantList, tt.tol) {
			t.Errorf("%d items: list index %.0f WCU/s, want ≈ %.0f", tt.items, got, tt.wantList)
		}
		if got := row.WCUPerS["table"]; !near(got, tt.wantTable, tt.tol) {
			t.Errorf("%d items: table %.0f WCU/s, want ≈ %.0f", tt.items, got, tt.wantTable)
		}
		if _, ok := row.WCUPerS["index attention"]; !ok {
			t.Errorf("%d items: no attention index column", tt.items)
		}
		if row.Max < row.WCUPerS["index list"] || row.Max < row.WCUPerS["table"] {
			t.Errorf("%d items: max %.0f below a column %v", tt.items, row.Max, row.WCUPerS)
		}
	}
}

// The dollars of `make bench`, at the prices of the pricing pages: 4 write
// units per item are $2.50 per 10^6 items, 0.3 SQS requests $0.12.
func TestFiguresPrices(t *testing.T) {
	r := Result{Scenario: Scenario{Items: 100}, Usage: meter.Usage{
		Write:       map[meter.Target]float64{{Kind: "ITEM"}: 400},
		Read:        map[meter.Target]float64{{Kind: "COUNT"}: 10},
		SQSRequests: 30, S3Put: 1, S3Get: 10, EventBridgeEvents: 1,
	}, LambdaRequests: 12, LambdaGBSeconds: 0.5, APIRequests: 1}
	f := r.Figures()
	want := map[string]float64{
		"DynamoDB writes": 2.5, "DynamoDB reads": 0.0125, "SQS": 0.12, "Lambda requests": 0.024,
		"Lambda duration": 0.5 / 100 * 1e6 * 0.0000133334, "S3": 0.05 + 0.04, "EventBridge": 0.01, "API Gateway": 0.035,
	}
	var total float64
	for c, w := range want {
		if got := f.USDByComponent[c]; !near(got, w, 1e-9) {
			t.Errorf("%s: $%.4f, want $%.4f", c, got, w)
		}
		total += w
	}
	if !near(f.USDPerMillionItems, total, 1e-9) {
		t.Errorf("total $%.4f, want $%.4f", f.USDPerMillionItems, total)
	}
	if f.WriteUnitsPerItem != 4 || f.LambdaInvocationsPerItem != 0.12 || f.ItemsPerMessage != 1 {
		t.Errorf("per item: %+v", f)
	}
}
