package bench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Figures is one scenario's cost per item and per 10^6 items, in the shape
// of build/bench/cost.json.
type Figures struct {
	Name                     string  `json:"name"`
	Items                    int     `json:"items"`
	ItemsPerMessage          int     `json:"items_per_message"`
	Delivery                 string  `json:"delivery"` // DeliveryChunkOrdered or DeliveryShuffled
	TransientPercent         int     `json:"transient_failure_percent"`
	PermanentPercent         int     `json:"permanent_failure_percent"`
	ThresholdPercent         float64 `json:"tolerated_failure_percent,omitempty"`
	MaxConcurrency           int     `json:"max_concurrency,omitempty"` // the batch's; 0: none
	ChunkItems               int     `json:"chunk_items,omitempty"`     // the run's fan-out chunk; 0: the bench's ChunkItems
	Scale                    int     `json:"scale,omitempty"`           // > 1: run at Scale × the bench's items (Scenario.Scale)
	Succeeded                int64   `json:"succeeded"`
	Failed                   int64   `json:"failed"`
	Cancelled                int64   `json:"cancelled"`
	RedeliveriesPerItem      float64 `json:"redeliveries_per_item"`
	ChunksPerMessageBatch    float64 `json:"chunks_per_message_batch"`
	InputBytes               int     `json:"input_bytes"`
	OutputBytes              int     `json:"output_bytes"`
	WriteUnitsPerItem        float64 `json:"write_units_per_item"`
	ReadUnitsPerItem         float64 `json:"read_units_per_item"`
	SQSRequestsPerItem       float64 `json:"sqs_requests_per_item"`
	LambdaInvocationsPerItem float64 `json:"lambda_invocations_per_item"`
	LambdaGBSecondsPerItem   float64 `json:"lambda_gb_seconds_per_item"`
	S3PutPerItem             float64 `json:"s3_put_requests_per_item"`
	S3GetPerItem             float64 `json:"s3_get_requests_per_item"`
	EventsPerItem            float64 `json:"eventbridge_events_per_item"`
	APIRequestsPerItem       float64 `json:"api_requests_per_item"`
	// LogBytesPerItem is what CloudWatch Logs ingests per item: the
	// functions' log and metric lines (each + LogEventOverheadBytes) and
	// Lambda's platform lines of each invocation; LogEventsPerItem the
	// functions' lines alone.
	LogBytesPerItem    float64            `json:"log_bytes_per_item"`
	LogEventsPerItem   float64            `json:"log_events_per_item"`
	WriteUnitsByTarget map[string]float64 `json:"write_units_per_item_by_target"` // "table ITEM", "index list ITEM", ...
	ReadUnitsByTarget  map[string]float64 `json:"read_units_per_item_by_target"`
	ReportedWriteUnits float64            `json:"emulator_reported_write_units_per_item"`
	ReportedReadUnits  float64            `json:"emulator_reported_read_units_per_item"`
	// RetriedWriteUnits is the part of WriteUnitsPerItem made by units
	// taken again (meter.Usage.Retried): a redelivered unit's take of its
	// row and every write of that row after it.
	RetriedWriteUnits float64 `json:"retried_write_units_per_item"`
	// USDByComponent and USDPerMillionItems are the dollars of one batch
	// of 10^6 items: what each item adds × 10^6, plus once what a batch
	// costs whatever its size (WithFixed). Without WithFixed they equal
	// the run-size figures.
	USDByComponent     map[string]float64 `json:"usd_per_million_items_by_component"`
	USDPerMillionItems float64            `json:"usd_per_million_items"`
	// USDFixedPerBatch is what a batch costs whatever its size (submit,
	// the batch's own rows and markers, manifest, report and results
	// objects, finalize's invocation), from WithFixed; 0 without it.
	USDFixedPerBatch float64 `json:"usd_fixed_per_batch"`
	// FixedFromItems is the size of the small run WithFixed compared with.
	FixedFromItems int `json:"fixed_cost_from_run_of_items,omitempty"`
	// USDByComponentAtRunSize and USDPerMillionItemsAtRunSize are the run's
	// own dollars × 10^6 / Items: 10^6 items in batches of Items items,
	// each batch paying its fixed cost.
	USDByComponentAtRunSize     map[string]float64 `json:"usd_per_million_items_by_component_at_run_size"`
	USDPerMillionItemsAtRunSize float64            `json:"usd_per_million_items_at_run_size"`
	// MaxPartitionWCUPerS is, per batch size (items, as a decimal string),
	// the busiest partition key's write units/s over the table and every
	// index at ItemsPerSecond; PartitionTable has the rows in full.
	MaxPartitionWCUPerS map[string]float64 `json:"max_partition_wcu_per_s"`
	PartitionTable      []PartitionRow     `json:"partition_table"`
}

// Components of the price, in print order.
var Components = []string{"DynamoDB writes", "DynamoDB reads", "SQS", "Lambda requests", "Lambda duration", "S3", "EventBridge", "API Gateway", "CloudWatch Logs"}

// NoRowKind names the units of no row: an empty Query page, a condition
// failed on a missing row (the meter's Target with no Kind).
const NoRowKind = "(no row)"

func targetName(t meter.Target) string {
	if t.Kind == "" {
		t.Kind = NoRowKind
	}
	if t.Index == "" {
		return "table " + t.Kind
	}
	return "index " + t.Index + " " + t.Kind
}

// Figures prices r per item and per 10^6 items.
func (r Result) Figures() Figures {
	n := float64(r.Items)
	f := Figures{
		Name: r.Name, Items: r.Items, ItemsPerMessage: max(1, r.ItemsPerMessage), InputBytes: r.InputBytes, OutputBytes: r.OutputBytes,
		Delivery: r.Delivery, TransientPercent: r.TransientPercent, PermanentPercent: r.PermanentPercent, ThresholdPercent: r.ThresholdPercent,
		MaxConcurrency: r.MaxConcurrency, ChunkItems: r.ChunkItems, Scale: r.Scale,
		Succeeded: r.Census.Succeeded, Failed: r.Census.Failed, Cancelled: r.Census.Cancelled,
		RedeliveriesPerItem: float64(r.Redeliveries) / n, ChunksPerMessageBatch: r.ChunksPerMessageBatch,
		WriteUnitsPerItem:        r.Usage.WriteUnits(nil) / n,
		ReadUnitsPerItem:         r.Usage.ReadUnits(nil) / n,
		SQSRequestsPerItem:       r.Usage.SQSRequests / n,
		LambdaInvocationsPerItem: (r.LambdaRequests + r.Usage.LambdaRequests) / n,
		LambdaGBSecondsPerItem:   r.LambdaGBSeconds / n,
		S3PutPerItem:             r.Usage.S3Put / n,
		S3GetPerItem:             r.Usage.S3Get / n,
		EventsPerItem:            r.Usage.EventBridgeEvents / n,
		APIRequestsPerItem:       r.APIRequests / n,
		LogBytesPerItem: (float64(r.LogBytes+LogEventOverheadBytes*r.LogEvents) +
			(r.LambdaRequests+r.Usage.LambdaRequests)*float64(PlatformLogBytesPerInvocation())) / n,
		LogEventsPerItem:   float64(r.LogEvents) / n,
		WriteUnitsByTarget: map[string]float64{},
		ReadUnitsByTarget:  map[string]float64{},
		ReportedWriteUnits: r.Reported.WriteUnits / n,
		RetriedWriteUnits:  r.Usage.RetriedWriteUnits() / n,
		ReportedReadUnits:  r.Reported.ReadUnits / n,
	}
	for t, v := range r.Usage.Write {
		f.WriteUnitsByTarget[targetName(t)] += v / n
	}
	for t, v := range r.Usage.Read {
		f.ReadUnitsByTarget[targetName(t)] += v / n
	}
	const M = 1e6
	f.USDByComponent = map[string]float64{
		"DynamoDB writes": M * f.WriteUnitsPerItem * USDPerWriteUnit,
		"DynamoDB reads":  M * f.ReadUnitsPerItem * USDPerReadUnit,
		"SQS":             M * f.SQSRequestsPerItem * USDPerSQSRequest,
		"Lambda requests": M * f.LambdaInvocationsPerItem * USDPerLambdaRequest,
		"Lambda duration": M * f.LambdaGBSecondsPerItem * USDPerLambdaGBSecond,
		"S3":              M * (f.S3PutPerItem*USDPerS3Put + f.S3GetPerItem*USDPerS3Get),
		"EventBridge":     M * f.EventsPerItem * USDPerEvent,
		"API Gateway":     M * f.APIRequestsPerItem * USDPerAPIRequest,
		"CloudWatch Logs": M * f.LogBytesPerItem / (1 << 30) * USDPerLogGB,
	}
	for _, v := range f.USDByComponent {
		f.USDPerMillionItems += v
	}
	f.USDByComponentAtRunSize = maps.Clone(f.USDByComponent)
	f.USDPerMillionItemsAtRunSize = f.USDPerMillionItems
	return f
}

// WithFixed splits f's dollars into what a batch costs whatever its size
// and what each item adds, from small, the same scenario run with fewer
// items: per component, with T(n) the run's dollars at n items, each
// item adds v = (T(f.Items) − T(small.Items)) / (f.Items − small.Items)
// and a batch costs a = T(small.Items) − v × small.Items. (A component
// the smaller run cost as much as or more than the larger — v ≤ 0, as S3's
// 11 PUTs and 2 GETs per batch whatever its size, where rounding alone
// can make v a hair below 0 — is taken as all per batch: a = T(f.Items),
// v = 0. One whose a comes out negative — emulator noise — is taken as
// all per item: a = 0, v = T(f.Items) / f.Items.) f's USDByComponent and
// USDPerMillionItems become one batch of 10^6 items, a + 10^6 × v; the
// run-size figures stay in the *AtRunSize fields. small must have fewer
// items than f; otherwise f is left as it is.
func (f *Figures) WithFixed(small Figures) {
	nL, nS := float64(f.Items), float64(small.Items)
	if small.Items <= 0 || nS >= nL {
		return
	}
	const M = 1e6
	f.USDByComponent = map[string]float64{}
	f.USDPerMillionItems, f.USDFixedPerBatch, f.FixedFromItems = 0, 0, small.Items
	for _, c := range Components {
		tL := f.USDByComponentAtRunSize[c] * nL / M
		tS := small.USDByComponentAtRunSize[c] * nS / M
		v := (tL - tS) / (nL - nS)
		a := tS - v*nS
		switch {
		case v <= 0:
			a, v = tL, 0
		case a < 0:
			a, v = 0, tL/nL
		}
		f.USDByComponent[c] = a + M*v
		f.USDFixedPerBatch += a
		f.USDPerMillionItems += a + M*v
	}
}

// FixedProbeItems is the size of the run that WithFixed compares a
// scenario with: one fan-out chunk and a few message batches, so nearly
// all of its cost is what any batch costs.
const FixedProbeItems = 40

// ItemsPerSecond is the flow the partition table assumes.
const ItemsPerSecond = 10_000

// PartitionSizes are the batch sizes of the partition table.
var PartitionSizes = []int64{1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000}

// PartitionLimitWCU is DynamoDB's write throughput of one partition:
// 1,000 write units/s ("Best practices for designing and using partition
// keys effectively",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html).
const PartitionLimitWCU = 1000

// PartitionLimitRCU is DynamoDB's read throughput of one partition: 3,000
// read units/s (same page).
const PartitionLimitRCU = 3000

// LaneEndGame is how far above its share a counter lane's writes rise in
// its busiest second, where a lane takes LaneEndGameFrom writes a second
// or more: TestLanesStayUnderTheLimit (shared/worker) plays runs at
// 10,000 and 100,000 items/s and finds at most 1.21 × the mean at one
// item per message on 4 lanes (250 writes a second a lane) and 1.38 × on
// 40, in about 60 plays, and lanebook's TestWeighedPicksFillLanesTogether
// 1.19–1.28 × at 10^7 and 10^8 items. The lanes fill together (a write picks a lane
// weighed by its room left, lanebook.Room.Pick); picked evenly (before
// this rule) the lane furthest behind took every write of the run's end
// alone: 2.32 × at 10^6 items, the whole flow (4 ×) at 10^8 in a played
// run. Where a lane takes fewer, few writes a second make the spike
// larger (up to 3.16 × of 4 lanes at 10 items per message, 25 a second
// a lane; 4.00 × at 100, the whole second's 10 writes on one lane), so
// the model takes every lane write of that second on one lane there.
const LaneEndGame = 1.6

// LaneEndGameFrom is the writes a second a lane takes at least for
// LaneEndGame to bound its end (below it: all the lanes' writes of a
// second on one).
const LaneEndGameFrom = 100

// PartitionRow is the busiest partition key's write units per second of
// the table and of each index for a batch of BatchItems at ItemsPerSecond,
// and the batch row's read units per second.
type PartitionRow struct {
	BatchItems   int64              `json:"batch_items"`
	ListShards   int                `json:"list_shards"`
	CounterLanes int                `json:"counter_lanes"`
	WCUPerS      map[string]float64 `json:"wcu_per_s"` // "table", "index <name>"
	Busiest      map[string]string  `json:"busiest"`   // which key: "an item shard (1 of 80)", "a counter lane (1 of 4)", ...
	Max          float64            `json:"max"`
	// BatchRowRCUPerS is the batch row's read units per second: every
	// message batch reads it once, eventually consistent.
	BatchRowRCUPerS float64 `json:"batch_row_rcu_per_s"`
}

// Partitions computes the partition table from the write units per item
// that r measured, split by row kind, and the real shard derivation at the
// stack's default flow (ledger.StackFlow(100, 10) = ItemsPerSecond):
// api.ListShards, ledger.Shard and ledger.PackShard over the positional
// keys (and pack firsts) of each batch size, ledger.CounterLanes. Units per
// second on a key are its units over the batch's duration, n /
// ItemsPerSecond but at least one second (a batch shorter than a second
// puts all its units into that second). Per row kind:
//   - item rows, count marks, pack rows, attention rows and their index
//     entries (the attention index is keyed by the same shards): units
//     per item × the items of the busiest shard in its busiest second
//     (BusiestSecond);
//   - a counter partition (one per lane): its lane row's units per item
//     × the items / lanes / duration × LaneEndGame (each message batch
//     writes one lane chosen at random), or × lanes where that mean is
//     under LaneEndGameFrom, plus the busiest second of the wait and
//     fan-out rows that share its key (each written to a partition
//     chosen by a hash or at random), plus every pace-row write (all in
//     partition 0); a track's fence rows are written per slice in a clean
//     run (a woken unit's hand-over writes them too: not modelled);
//   - a run on tracks: its claim counters' writes (SLOT CLAIM) and its
//     tracks' fence writes (SLOT TRACK) are made per slice (a claim, a
//     delivery of the track), not per item, so each kind's units per
//     slice of the measured run (its slices by pace.NewLayout over the
//     bench's chunks) are taken per slice of a batch of n items (over the
//     product's 5,000-item chunks, source.DefaultChunkItems), the claims
//     spread over pace.Counters counters, each at its busiest second
//     (BusiestSecond), the fences over the tracks (the busiest:
//     ⌈slices / tracks⌉ over the run); a slot row (SLOT) as if every
//     unit of the batch took it;
//   - the run row (COUNT RUN): lanes writes (lanes done), and with the
//     early stop armed and failures lanes × (8 × lanes + 2) more at most
//     (Worker.count), all in one second, or what the run measured if more;
//   - the batch row and markers: their units per batch, all in one
//     second — a bounded number of writes per run, whatever its size;
//
// The batch row's reads: read units per item × the items / duration.
func (r Result) Partitions() []PartitionRow {
	per := map[meter.Target]float64{}
	for t, v := range r.Usage.Write {
		per[t] = v / float64(r.Items)
	}
	readsPerItem := 0.0
	for t, v := range r.Usage.Read {
		if t.Index == "" && t.Kind == "BATCH" {
			readsPerItem += v / float64(r.Items)
		}
	}
	k := max(1, r.ItemsPerMessage)
	flow := ledger.StackFlow(100, 10)
	chunk := r.ChunkItems
	if chunk <= 0 {
		chunk = ChunkItems
	}
	measured := trackLayout(int64(r.Items), chunk, k, r.MaxConcurrency)
	var rows []PartitionRow
	for _, n := range PartitionSizes {
		ls, lanes := ledger.ListShards(n, flow), ledger.CounterLanes(n, flow)
		busiestShard, busiestPackShard := busiestShards(n, ls, k)
		seconds := max(1, float64(n)/ItemsPerSecond)
		row := PartitionRow{BatchItems: n, ListShards: ls, CounterLanes: lanes, WCUPerS: map[string]float64{}, Busiest: map[string]string{},
			BatchRowRCUPerS: readsPerItem * float64(n) / seconds}
		consider := func(target string, v float64, what string) {
			if _, ok := row.WCUPerS[target]; !ok || v > row.WCUPerS[target] {
				row.WCUPerS[target], row.Busiest[target] = v, what
			}
			row.Max = max(row.Max, v)
		}
		consider("table", 0, "")
		for _, ix := range dynamo.TableInput("").GlobalSecondaryIndexes {
			consider("index "+aws.ToString(ix.IndexName), 0, "")
		}
		// Units of one row kind on one key add up over the targets
		// (table and index) only within a target.
		lane, beside, paceRow := map[string]float64{}, map[string]float64{}, map[string]float64{}
		for t, u := range per {
			target := "table"
			if t.Index != "" {
				target = "index " + t.Index
			}
			switch t.Kind {
			case "ITEM", "MARK", "ATTN":
				consider(target, u*BusiestSecond(busiestShard, 1, seconds, ls), fmt.Sprintf("an item shard (1 of %d), its busiest second", ls))
			case "PACK":
				consider(target, u*BusiestSecond(busiestPackShard, k, seconds, ls), fmt.Sprintf("a pack shard (1 of %d), its busiest second", ls))
			case "COUNT LANE":
				// One partition key per lane (COUNT#{id}#{run}#{lane}):
				// its lane row, and the wait, fan-out and pace rows
				// written beside it, added up below.
				lane[target] += u
			case "COUNT WAIT", "COUNT FAN":
				beside[target] += u
			case "COUNT PACE":
				// Partition 0's alone (internal/dynamo/pace.go): all of
				// the run's, on the lane there.
				paceRow[target] += u
			case "SLOT CLAIM", "SLOT TRACK":
				// A run on tracks: units per slice measured, taken per
				// slice of a batch of n items.
				perSlice := u * float64(r.Items) / float64(max(1, measured.Slices()))
				at := trackLayout(n, source.DefaultChunkItems, k, r.MaxConcurrency)
				tracks := pace.Tracks(r.MaxConcurrency, at.Slices())
				if t.Kind == "SLOT CLAIM" {
					// Each counter's claims at their busiest second, as
					// a shard's items (the tracks claim as their slices
					// end, not on a clock).
					counters := pace.Counters(tracks)
					claims := BusiestSecond(float64(at.Slices())/float64(counters), 1, seconds, counters)
					consider(target, perSlice*claims, fmt.Sprintf("a claim counter (1 of %d), its busiest second", counters))
				} else {
					busiest := (at.Slices() + int64(tracks) - 1) / int64(max(tracks, 1))
					consider(target, perSlice*float64(busiest)/seconds, fmt.Sprintf("a track's fence (1 of %d)", tracks))
				}
			case "SLOT":
				consider(target, u*float64(n)/seconds, "a slot row")
			case "COUNT RUN":
				// Lanes done, and failures for the early stop: at most
				// lanes × (8 × lanes + 2) writes of one unit (Worker.count).
				bound := float64(lanes)
				if r.ThresholdPercent > 0 && r.PermanentPercent > 0 {
					bound += float64(lanes * (8*lanes + 2))
				}
				consider(target, max(u*float64(r.Items), bound), "the run row")
			default:
				consider(target, u*float64(r.Items), "the "+strings.ToLower(t.Kind)+" row")
			}
		}
		targets := maps.Clone(lane)
		maps.Copy(targets, beside)
		maps.Copy(targets, paceRow)
		for target := range targets {
			// The lane rows' writes rise at the lanes' end (LaneEndGame);
			// the wait, fan-out and pace rows, each written to a
			// partition chosen at random, add their busiest second.
			mean := lane[target] * float64(n) / float64(lanes) / seconds
			what := fmt.Sprintf("a counter partition (1 of %d), at the lanes' end", lanes)
			if mean >= LaneEndGameFrom {
				mean *= LaneEndGame
			} else {
				mean *= float64(lanes)
				what = fmt.Sprintf("a counter partition (1 of %d), the lanes' writes of a second on it at their end", lanes)
			}
			consider(target, mean+BusiestSecond(beside[target]*float64(n)/float64(lanes), 1, seconds, lanes)+paceRow[target]*float64(n)/seconds, what)
		}
		rows = append(rows, row)
	}
	return rows
}

// BusiestSecond is the items a shard takes in its busiest second, of
// items over seconds, arriving in units of per items (1, or a pack's k)
// at random (shuffled delivery; keys hashed over the keys shards): per ×
// the smallest m with seconds × keys × P(X ≥ m) ≤ 1 for X Poisson of the
// mean λ (units a second) — the count that about one of the run's
// shard-seconds reaches; all the items when the batch is shorter than a
// second. At 10^6 items, 80 shards and 10,000 items a second, λ = 125
// and the busiest second 169 items (an independent meter measured
// 166–172 on the attention shards of a run failing every item, against
// the 127–139 of the mean); in packs of 100, λ = 1.25 packs and the
// busiest second 8 packs, 800 items.
func BusiestSecond(items float64, per int, seconds float64, keys int) float64 {
	if seconds <= 1 {
		return items
	}
	lambda := items / float64(max(per, 1)) / seconds
	return float64(poissonPeak(lambda, seconds*float64(max(keys, 1))) * max(per, 1))
}

// poissonPeak is the smallest m with n × P(X ≥ m) ≤ 1, X Poisson of
// mean lambda: the tail summed from well past the mean down.
func poissonPeak(lambda, n float64) int {
	if lambda <= 0 {
		return 0
	}
	top := int(math.Ceil(lambda + 12*math.Sqrt(lambda) + 20))
	tail := 0.0
	for m := top; m >= 0; m-- {
		lg, _ := math.Lgamma(float64(m) + 1)
		tail += math.Exp(-lambda + float64(m)*math.Log(lambda) - lg)
		if n*tail > 1 {
			return m + 1
		}
	}
	return 0
}

// trackLayout is the slices of a run on tracks of n items in fan-out
// chunks of chunk items at k items per message and limit maxConcurrency
// (pace.NewLayout, as submit lays a run out).
func trackLayout(n int64, chunk, k, maxConcurrency int) pace.Layout {
	spans := make([]pace.Span, 0, (n+int64(chunk)-1)/int64(chunk))
	for first := int64(0); first < n; first += int64(chunk) {
		spans = append(spans, pace.Span{First: first, Count: min(int64(chunk), n-first)})
	}
	return pace.NewLayout(spans, k, maxConcurrency)
}

// busiestShards is the items of the busiest of ls item shards of a batch
// of n positional keys, and of its busiest pack shard at k items per
// message (k × the packs there). Above 10^6 items the counts of the first
// 10^6 are scaled up (FNV-1a spreads positional keys evenly).
func busiestShards(n int64, ls, k int) (items, packItems float64) {
	const sample = 1_000_000
	m := min(n, sample)
	shard := make([]int64, ls)
	for i := range m {
		shard[ledger.Shard(api.PositionalKey(i), ls)]++
	}
	packs := make([]int64, ls)
	for first := int64(0); first < m; first += int64(k) {
		packs[ledger.PackShard(first, ls)] += min(int64(k), m-first)
	}
	scale := float64(n) / float64(m)
	return float64(slicesMax(shard)) * scale, float64(slicesMax(packs)) * scale
}

func slicesMax(s []int64) int64 {
	var m int64
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// Print writes the figures of each scenario, the anchors and the
// partition table as text.
func Print(w io.Writer, fs []Figures) {
	fmt.Fprintf(w, "\nbulkrun cost per 10^6 items (us-east-1 on-demand prices; metered by DynamoDB's sizing rules)\n")
	for _, f := range fs {
		fmt.Fprintf(w, "\n== %s: %d items, %d-byte inputs, %d-byte outputs, %d item(s) per message\n", f.Name, f.Items, f.InputBytes, f.OutputBytes, f.ItemsPerMessage)
		fmt.Fprintf(w, "  delivery %s (%.2f chunks per message batch), failures %d %% transient + %d %% permanent", f.Delivery, f.ChunksPerMessageBatch, f.TransientPercent, f.PermanentPercent)
		if f.ThresholdPercent > 0 {
			fmt.Fprintf(w, ", early stop at %g %%", f.ThresholdPercent)
		}
		fmt.Fprintf(w, "; census succeeded %d failed %d cancelled %d; %.3f redeliveries per item\n", f.Succeeded, f.Failed, f.Cancelled, f.RedeliveriesPerItem)
		fmt.Fprintf(w, "  %-34s %12s %14s\n", "units and requests", "per item", "per 10^6 items")
		line := func(name string, v float64) { fmt.Fprintf(w, "  %-34s %12.4f %14.0f\n", name, v, v*1e6) }
		line("DynamoDB write units", f.WriteUnitsPerItem)
		for _, k := range sortedKeys(f.WriteUnitsByTarget) {
			line("  "+k, f.WriteUnitsByTarget[k])
		}
		line("DynamoDB read units", f.ReadUnitsPerItem)
		for _, k := range sortedKeys(f.ReadUnitsByTarget) {
			line("  "+k, f.ReadUnitsByTarget[k])
		}
		line("SQS requests (64 KB chunks)", f.SQSRequestsPerItem)
		line("Lambda requests", f.LambdaInvocationsPerItem)
		line("Lambda GB-s (emulator wall time)", f.LambdaGBSecondsPerItem)
		line("S3 PUT-tier requests", f.S3PutPerItem)
		line("S3 GET-tier requests", f.S3GetPerItem)
		line("EventBridge events", f.EventsPerItem)
		line("API Gateway requests", f.APIRequestsPerItem)
		line("CloudWatch Logs bytes ingested", f.LogBytesPerItem)
		line("  the functions' log lines", f.LogEventsPerItem)
		fmt.Fprintf(w, "  (the emulator itself reported %.3f write and %.3f read units per item)\n", f.ReportedWriteUnits, f.ReportedReadUnits)
		fmt.Fprintf(w, "  %-34s %12s %14s\n", "dollars per 10^6 items, USD", "one batch", fmt.Sprintf("%d-item batches", f.Items))
		top, topV := "", 0.0
		for _, c := range Components {
			v := f.USDByComponent[c]
			fmt.Fprintf(w, "  %-34s %12.3f %14.3f\n", c, v, f.USDByComponentAtRunSize[c])
			if v > topV {
				top, topV = c, v
			}
		}
		fmt.Fprintf(w, "  %-34s %12.3f %14.3f\n", "total (infrastructure overhead)", f.USDPerMillionItems, f.USDPerMillionItemsAtRunSize)
		if f.FixedFromItems > 0 {
			fmt.Fprintf(w, "  one batch: $%.7f per batch whatever its size (from a %d-item run) + what each item adds, × 10^6\n", f.USDFixedPerBatch, f.FixedFromItems)
		}
		fmt.Fprintf(w, "  dominated by %s: %.0f %% of the total\n", top, 100*topV/f.USDPerMillionItems)
	}
	fmt.Fprintf(w, "\nanchors, Step Functions Distributed Map, overhead per 10^6 items (pipeline compute excluded):\n")
	for _, a := range Anchors {
		fmt.Fprintf(w, "  %-50s %8.2f  (%s)\n", a.Name, a.USD, a.Assumptions)
	}
	for _, f := range fs {
		fmt.Fprintf(w, "  %-50s %8.2f  (measured above: one batch of 10^6 items; %.2f in %d-item batches)\n", "bulkrun, "+f.Name, f.USDPerMillionItems, f.USDPerMillionItemsAtRunSize, f.Items)
	}
	PrintPartitions(w, fs)
}

// Comparison sets a run with failures beside the clean run of the same
// items per message, outputs and delivery order: write units per item
// in each, and what the failures add by DynamoDB's sizing rules.
type Comparison struct {
	Failing, Clean string
	// CleanUnits and FailingUnits are write units per item of all kinds.
	CleanUnits, FailingUnits float64
	// RetriedWork is the retried units' own writes per item, as the meter
	// billed them (Figures.RetriedWriteUnits beyond the clean run's): a
	// redelivered unit's take and its writes after it, each by its row as
	// it stood (a retried 100-item pack's take rewrites a ≈ 7.2 KB row, 8
	// units, where a first take writes ≈ 5.7 KB, 6), and the live view's
	// WAIT mark of each retry.
	RetriedWork float64
	// Attention is the attention entries' write units per item (item rows'
	// attention index entries, pack items' ATTN rows and their index
	// entries); AttentionPerFailed the same per failed or quarantined item.
	Attention, AttentionPerFailed float64
	// Excess is FailingUnits − CleanUnits − RetriedWork − Attention, and
	// ExcessPercent it as a percentage of CleanUnits: what failures cost
	// beyond their own writes (failed conditions, counters, stop checks).
	Excess, ExcessPercent float64
}

// Compare finds, for each run with failures in fs, the clean run of the
// same items per message, output size, delivery order and max_concurrency, and compares
// their write units per item.
func Compare(fs []Figures) []Comparison {
	var cs []Comparison
	for _, f := range fs {
		if f.TransientPercent+f.PermanentPercent == 0 {
			continue
		}
		for _, c := range fs {
			if c.TransientPercent+c.PermanentPercent != 0 || c.ItemsPerMessage != f.ItemsPerMessage || c.OutputBytes != f.OutputBytes || c.Delivery != f.Delivery ||
				c.MaxConcurrency != f.MaxConcurrency || max(c.Scale, 1) != max(f.Scale, 1) {
				continue
			}
			// A retry also marks its wait in the run's WAIT counter row
			// (the live view's retry-waiting count; docs/design/control.md,
			// "Live status"), a write that only retries make: it is the
			// retried work's too.
			cmp := Comparison{Failing: f.Name, Clean: c.Name, CleanUnits: c.WriteUnitsPerItem, FailingUnits: f.WriteUnitsPerItem,
				RetriedWork: max(0, f.RetriedWriteUnits-c.RetriedWriteUnits) +
					max(0, f.WriteUnitsByTarget["table COUNT WAIT"]-c.WriteUnitsByTarget["table COUNT WAIT"])}
			for t, v := range f.WriteUnitsByTarget {
				if strings.HasPrefix(t, "index attention ") || t == "table ATTN" {
					cmp.Attention += v
				}
			}
			if failed := float64(f.Failed) / float64(f.Items); failed > 0 {
				cmp.AttentionPerFailed = cmp.Attention / failed
			}
			cmp.Excess = cmp.FailingUnits - cmp.CleanUnits - cmp.RetriedWork - cmp.Attention
			cmp.ExcessPercent = 100 * cmp.Excess / cmp.CleanUnits
			cs = append(cs, cmp)
			break
		}
	}
	return cs
}

// PrintComparisons writes Compare's result as text.
func PrintComparisons(w io.Writer, cs []Comparison) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nruns with failures beside their clean runs (write units per item)\n")
	fmt.Fprintf(w, "  %-62s %7s %7s %8s %9s %10s %8s\n", "run", "clean", "failing", "retried", "attention", "per failed", "excess")
	for _, c := range cs {
		fmt.Fprintf(w, "  %-62s %7.3f %7.3f %8.3f %9.3f %10.2f %7.1f%%\n", c.Failing, c.CleanUnits, c.FailingUnits, c.RetriedWork, c.Attention, c.AttentionPerFailed, c.ExcessPercent)
	}
	fmt.Fprintf(w, "  excess = failing − clean − retried work's own writes − attention entries, as %% of clean\n")
}

// PrintPartitions writes the partition table of the shuffled scenarios
// (SQS standard queues' order): for each, per batch size, the busiest
// partition key's write units/s of the table and of each index, and the
// batch row's read units/s, at ItemsPerSecond.
func PrintPartitions(w io.Writer, fs []Figures) {
	fmt.Fprintf(w, "\npartition table, shuffled delivery: busiest partition key's write units/s at %d items/s (limit %d per key), batch row read units/s (limit %d)\n",
		ItemsPerSecond, PartitionLimitWCU, PartitionLimitRCU)
	for _, f := range fs {
		if f.Delivery != DeliveryShuffled || len(f.PartitionTable) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n  %s\n", f.Name)
		targets := sortedKeys(f.PartitionTable[0].WCUPerS)
		fmt.Fprintf(w, "  %11s %7s %6s", "items", "shards", "lanes")
		for _, t := range targets {
			fmt.Fprintf(w, " %18s", t)
		}
		fmt.Fprintf(w, " %9s %15s\n", "max", "batch row reads")
		for _, row := range f.PartitionTable {
			fmt.Fprintf(w, "  %11d %7d %6d", row.BatchItems, row.ListShards, row.CounterLanes)
			for _, t := range targets {
				fmt.Fprintf(w, " %18.0f", row.WCUPerS[t])
			}
			flag := ""
			if row.Max > PartitionLimitWCU || row.BatchRowRCUPerS > PartitionLimitRCU {
				flag = "  over the limit"
			}
			fmt.Fprintf(w, " %9.0f %15.0f%s\n", row.Max, row.BatchRowRCUPerS, flag)
		}
		last := f.PartitionTable[len(f.PartitionTable)-1]
		for _, t := range targets {
			if b := last.Busiest[t]; b != "" {
				fmt.Fprintf(w, "  busiest key of %s at %d items: %s\n", t, last.BatchItems, b)
			}
		}
	}
}

// WithPartitions fills f's partition fields from r.
func (f *Figures) WithPartitions(r Result) {
	f.PartitionTable = r.Partitions()
	f.MaxPartitionWCUPerS = map[string]float64{}
	for _, row := range f.PartitionTable {
		f.MaxPartitionWCUPerS[strconv.FormatInt(row.BatchItems, 10)] = row.Max
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
