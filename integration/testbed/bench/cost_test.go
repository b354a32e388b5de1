package bench

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// No hot partition at any size (the partition table of `make bench`):
// with items flowing at 10,000/s, for batches of 10^3 to 10^8 items, no
// partition key of the table or of an index receives more than DynamoDB's
// 1,000 write units/s, nor the batch row more than 3,000 read units/s,
// computed from the real shard derivation (api.ListShards,
// ledger.CounterLanes, ledger.Shard) and units per item as runs measure
// them: item row 2 with small outputs, 3 with ~1 KB outputs; counter lanes
// 0.1 (one per message batch in any delivery order); with failures, an
// attention index entry per failed item and the early stop's run-row
// writes. Sizing the shards by the item count alone (8 for 5·10^4 items)
// puts 10,000 × 2 / 8 = 2,500 units/s on a key and fails here; so do
// chunk counters under shuffled delivery.
func TestNoHotPartitionAtAnySize(t *testing.T) {
	for _, tc := range []struct {
		itemUnits, attention float64 // per item
		permanent            int
	}{{2, 0, 0}, {3, 0, 0}, {2, 0.05, 5}, {2, 1, 100}} {
		r := Result{Scenario: Scenario{Items: 1000, PermanentPercent: tc.permanent, ThresholdPercent: 10}, Usage: meter.Usage{Write: map[meter.Target]float64{
			{Kind: "ITEM"}:                     1000 * tc.itemUnits,
			{Kind: "ITEM", Index: "attention"}: 1000 * tc.attention,
			{Kind: "COUNT LANE"}:               100,
			{Kind: "COUNT RUN"}:                2,
			{Kind: "BATCH"}:                    5,
		}, Read: map[meter.Target]float64{{Kind: "BATCH"}: 50}}}
		rows := r.Partitions()
		if len(rows) != len(PartitionSizes) || rows[len(rows)-1].BatchItems != 100_000_000 {
			t.Fatalf("%d rows, want %d up to 10^8 items", len(rows), len(PartitionSizes))
		}
		for _, row := range rows {
			if row.Max > PartitionLimitWCU || row.BatchRowRCUPerS > PartitionLimitRCU {
				t.Errorf("%+v: %d items: busiest key %.0f write units/s > %d, batch row %.0f read units/s: %v (%v)",
					tc, row.BatchItems, row.Max, PartitionLimitWCU, row.BatchRowRCUPerS, row.WCUPerS, row.Busiest)
			}
			if _, ok := row.WCUPerS["index attention"]; !ok {
				t.Errorf("%d items: no attention index column", row.BatchItems)
			}
			if row.Max < row.WCUPerS["table"] {
				t.Errorf("%d items: max %.0f below a column %v", row.BatchItems, row.Max, row.WCUPerS)
			}
		}
		// From 10^4 items on, the flow's 80 shards take 10,000 × units /
		// 80 each (the table's busiest key takes at least that).
		for _, row := range rows[1:] {
			want := ItemsPerSecond * tc.itemUnits / float64(row.ListShards)
			if row.ListShards != 80 || row.WCUPerS["table"] < want*0.9 {
				t.Errorf("%d items: %d shards, table %.0f WCU/s, want 80 and ≥ %.0f", row.BatchItems, row.ListShards, row.WCUPerS["table"], want)
			}
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
	}, LambdaRequests: 12, LambdaGBSeconds: 0.5, APIRequests: 1, LogBytes: 10_000, LogEvents: 20}
	f := r.Figures()
	// Logs: the lines' bytes, 26 more per line, and 12 invocations' two
	// platform lines, per item; $0.50 per 2^30 bytes.
	logBytes := (10_000 + 26*20 + 12*float64(PlatformLogBytesPerInvocation())) / 100
	want := map[string]float64{
		"DynamoDB writes": 2.5, "DynamoDB reads": 0.0125, "SQS": 0.12, "Lambda requests": 0.024,
		"Lambda duration": 0.5 / 100 * 1e6 * 0.0000133334, "S3": 0.05 + 0.04, "EventBridge": 0.01, "API Gateway": 0.035,
		"CloudWatch Logs": logBytes * 1e6 / (1 << 30) * 0.50,
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
	if p := PlatformLogBytesPerInvocation(); p < 300 || p > 600 {
		t.Errorf("Lambda's platform lines: %d bytes an invocation, want a start and a report line (300–600)", p)
	}
	if f.WriteUnitsPerItem != 4 || f.LambdaInvocationsPerItem != 0.12 || f.ItemsPerMessage != 1 || !near(f.LogBytesPerItem, logBytes, 1e-9) {
		t.Errorf("per item: %+v", f)
	}
}

// One batch of 10^6 items pays its fixed cost once: from a run of 1,000
// items at $3.00 per 10^6 (in S3 $1.00 fixed-looking) and a run of 100
// items, WithFixed finds what each item adds and what a batch costs, and
// the total for one batch of 10^6 is a + 10^6 × v; the run-size figures
// are kept.
func TestWithFixedSplitsPerBatchCost(t *testing.T) {
	fig := func(items int, writes, s3 float64) Figures {
		usd := map[string]float64{"DynamoDB writes": writes, "S3": s3}
		return Figures{Items: items, USDByComponentAtRunSize: usd, USDByComponent: usd, USDPerMillionItemsAtRunSize: writes + s3}
	}
	// Writes: $2 per 10^6 items, no fixed part. S3: $0.001 per batch, so
	// $1.00 per 10^6 at 1,000 items and $10 per 10^6 at 100 items.
	large, small := fig(1000, 2, 1), fig(100, 2, 10)
	large.WithFixed(small)
	if !near(large.USDByComponent["DynamoDB writes"], 2, 1e-9) || !near(large.USDByComponent["S3"], 0.001, 1e-9) {
		t.Fatalf("one batch of 10^6: %v, want writes 2 and S3 0.001", large.USDByComponent)
	}
	if !near(large.USDFixedPerBatch, 0.001, 1e-9) || !near(large.USDPerMillionItems, 2.001, 1e-9) || large.USDPerMillionItemsAtRunSize != 3 {
		t.Fatalf("fixed %v total %v at run size %v", large.USDFixedPerBatch, large.USDPerMillionItems, large.USDPerMillionItemsAtRunSize)
	}
	// A component that costs the same whatever the batch's size is all
	// per batch (S3: 11 PUTs and 2 GETs per batch, $0.0000558), also when
	// the smaller run cost a little more or rounding makes the two totals
	// differ by a hair: counting it per item put $0.028 of S3 into "one
	// batch of 10^6 items" and fails here.
	for _, s3Small := range []float64{0.0279 * 2000 / 40, 0.0279 * 2000 / 40 * (1 + 1e-15), 0.0279 * 2000 / 40 * 12 / 11} {
		big, probe := fig(2000, 2, 0.0279), fig(40, 2, s3Small)
		big.WithFixed(probe)
		if !near(big.USDByComponent["S3"], 0.0000558, 1e-9) || !near(big.USDByComponent["DynamoDB writes"], 2, 1e-9) {
			t.Errorf("S3 %v per 10^6 in a 40-item run: one batch of 10^6 %v, want S3 0.0000558 and writes 2", s3Small, big.USDByComponent)
		}
		if !near(big.USDFixedPerBatch, 0.0000558, 1e-12) {
			t.Errorf("S3 %v per 10^6 in a 40-item run: fixed %v per batch, want 0.0000558", s3Small, big.USDFixedPerBatch)
		}
	}
	// Noise that makes a fixed part negative counts the component per item.
	noisy, probe := fig(1000, 2, 1), fig(100, 1, 0)
	noisy.WithFixed(probe)
	if !near(noisy.USDByComponent["DynamoDB writes"], 2, 1e-9) || !near(noisy.USDByComponent["S3"], 1, 1e-9) {
		t.Fatalf("noisy: %v", noisy.USDByComponent)
	}
}

// The per-batch cost is printed to the digit that carries it (the product
// line "make bench prints what a batch costs whatever its size"): about
// $0.00008 per batch printed with four decimals read "$0.0000 per batch",
// which said a batch costs nothing; that fails here.
func TestPrintFixedPerBatchDigits(t *testing.T) {
	f := Figures{Name: "small outputs", Items: 2000, USDFixedPerBatch: 0.0000767, FixedFromItems: 40,
		USDByComponent: map[string]float64{"DynamoDB writes": 1.3}, USDPerMillionItems: 1.3,
		PartitionTable: []PartitionRow{{BatchItems: 1000, ListShards: 8, CounterLanes: 1, WCUPerS: map[string]float64{"table": 252}, Max: 252}}}
	var out strings.Builder
	Print(&out, []Figures{f})
	if want := "one batch: $0.0000767 per batch whatever its size (from a 40-item run)"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
}

// TestMeterCountsTakesByTheRowsAttribute: the meter tells a retried
// unit's writes by the attribute the product counts a row's takes in.
func TestMeterCountsTakesByTheRowsAttribute(t *testing.T) {
	if meter.AttemptAttr != layout.AttrAttempt {
		t.Fatalf("meter.AttemptAttr %q, the rows count their takes in %q", meter.AttemptAttr, layout.AttrAttempt)
	}
}

// TestCompareCountsRetriedWorkAsMetered: a failing run's retried work is
// the meter's retried writes beyond the clean run's and the WAIT marks;
// the excess is what is left after them and the attention entries.
func TestCompareCountsRetriedWorkAsMetered(t *testing.T) {
	clean := Figures{Name: "clean", ItemsPerMessage: 100, Delivery: DeliveryShuffled, WriteUnitsPerItem: 0.161,
		WriteUnitsByTarget: map[string]float64{"table PACK": 0.14}}
	failing := Figures{Name: "failing", ItemsPerMessage: 100, Delivery: DeliveryShuffled, TransientPercent: 5, PermanentPercent: 5,
		Items: 2000, Failed: 100, RedeliveriesPerItem: 0.01, WriteUnitsPerItem: 0.376, RetriedWriteUnits: 0.16,
		WriteUnitsByTarget: map[string]float64{"table PACK": 0.3, "table COUNT WAIT": 0.0015, "table ATTN": 0.05}}
	cs := Compare([]Figures{clean, failing})
	if len(cs) != 1 {
		t.Fatalf("%d comparisons, want 1", len(cs))
	}
	c := cs[0]
	if math.Abs(c.RetriedWork-0.1615) > 1e-9 || math.Abs(c.Attention-0.05) > 1e-9 {
		t.Errorf("retried %v, attention %v; want 0.1615 and 0.05", c.RetriedWork, c.Attention)
	}
	if want := 0.376 - 0.161 - 0.1615 - 0.05; math.Abs(c.Excess-want) > 1e-9 || math.Abs(c.ExcessPercent-100*want/0.161) > 1e-9 {
		t.Errorf("excess %v (%v %%), want %v", c.Excess, c.ExcessPercent, want)
	}
}

// A run on tracks writes its claim counter once per slice and a track's
// fence once per delivery, so the partition table takes their units per
// slice of the measured run (200 items at K = 10 and max_concurrency 10:
// 20 slices of one unit over the bench's 200-item chunk) per slice of each
// size over the product's 5,000-item chunks (slices of up to 100 units):
// at 10^8 items 10^5 slices in 10^4 s on one counter, 10 a second and
// 25 in its busiest (BusiestSecond); at 10^4 items 40 slices in one
// second. Taken per item instead (the model before), the 200-item run's
// 0.1 claim units an item put 1,000 write units/s on the counter at 10^4
// items and more.
func TestTrackRowsPerSlice(t *testing.T) {
	want := map[int64][2]float64{ // claim counter, busiest fence (write units/s)
		1_000:       {34, 1.5 * 4},               // slices of 30 items: 34 in one second on 10 tracks
		10_000:      {40, 1.5 * 4},               // slices of 250 items: 2 chunks of 20
		100_000:     {15, 1.5 * 10 / 10},         // 100 claims over 10 s: 10 a second, 15 at the busiest
		100_000_000: {25, 1.5 * 10_000 / 10_000}, // 10^5 over 10^4 s: 10 a second, 25 at the busiest
	}
	for i, kind := range []string{"SLOT CLAIM", "SLOT TRACK"} {
		units := map[string]float64{"SLOT CLAIM": 20, "SLOT TRACK": 30}[kind] // 1 and 1.5 a slice
		r := Result{Scenario: Scenario{Items: 200, ItemsPerMessage: 10, MaxConcurrency: 10},
			Usage: meter.Usage{Write: map[meter.Target]float64{{Kind: kind}: units}}}
		for _, row := range r.Partitions() {
			w, ok := want[row.BatchItems]
			if !ok {
				continue
			}
			if !near(row.WCUPerS["table"], w[i], 1e-9) {
				t.Errorf("%s, %d items: %.3f write units/s on %q, want %.3f", kind, row.BatchItems, row.WCUPerS["table"], row.Busiest["table"], w[i])
			}
			if want := []string{"a claim counter (1 of 1), its busiest second", "a track's fence (1 of 10)"}[i]; row.Busiest["table"] != want {
				t.Errorf("%s, %d items: busiest %q, want %q", kind, row.BatchItems, row.Busiest["table"], want)
			}
		}
	}
}

// BusiestSecond against a played run: 10^6 items at 10,000 a second, each
// to one of 80 shards at random (shuffled delivery over hashed keys), and
// packs of 10 and of 100 likewise; the busiest shard-second played lies
// within 15 % of the model (169 items at one item per arrival, 800 in
// packs of 100), well above the mean of 125 the partition table used to
// take. (The normal tail, mean + z·√mean, gave 599 items for the packs
// of 100 where 800 were played.)
func TestBusiestSecondAgainstAPlayedRun(t *testing.T) {
	const n, perSecond, shards = 1_000_000, 10_000, 80
	for _, per := range []int{1, 10, 100} {
		rng := rand.New(rand.NewPCG(7, uint64(per)))
		counts := map[[2]int]int{} // {second, shard}: items
		for i := 0; i < n; i += per {
			counts[[2]int{i / perSecond, rng.IntN(shards)}] += per
		}
		most := 0
		for _, c := range counts {
			most = max(most, c)
		}
		model := BusiestSecond(n/shards, per, n/perSecond, shards)
		t.Logf("%d items an arrival: the busiest shard-second played %d items, modelled %.0f (mean %d)", per, most, model, perSecond/shards)
		if math.Abs(float64(most)-model) > 0.15*model {
			t.Errorf("%d items an arrival: busiest shard-second %d items, model %.0f: more than 15 %% apart", per, most, model)
		}
	}
	if got := BusiestSecond(1000, 1, 0.1, 8); got != 1000 {
		t.Errorf("a batch shorter than a second: %.0f, want all its 1,000 items", got)
	}
}
