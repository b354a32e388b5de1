//go:build integration

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/integration/testbed/heldtest"
	"github.com/bulkrun/bulkrun/integration/testbed/ledgertest"
	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/integration/testbed/pacetest"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestStoreConformance runs the ledger.Store conformance suite
// (integration/testbed/ledgertest: every condition, transition and listing order of
// the contract) on the DynamoDB adapter, a table of its own per case made
// by dynamo.CreateTable as the harness makes it. The in-memory store the
// domain's unit tests use passes the same suite, so what those tests see
// is what DynamoDB does.
func TestStoreConformance(t *testing.T) {
	ledgertest.Run(t, conformanceStore)
}

// TestHeldStoreConformance runs the exhausted outcome's conformance
// (integration/testbed/heldtest) on the DynamoDB adapter as
// TestStoreConformance does.
func TestHeldStoreConformance(t *testing.T) {
	heldtest.Run(t, conformanceStore)
}

// TestPaceStoreConformance runs the pacing rows' conformance
// (integration/testbed/pacetest: rate leases, token bookings and settles)
// on the DynamoDB adapter as TestStoreConformance does.
func TestPaceStoreConformance(t *testing.T) {
	pacetest.Run(t, conformanceStore)
}

// conformanceStore is the DynamoDB adapter on a table of its own.
func conformanceStore(t *testing.T) ledger.Store {
	ctx := context.Background()
	name := strings.Trim(strings.ToLower(newID(t)), "-")
	if len(name) > 60 {
		name = strings.Trim(name[len(name)-60:], "-")
	}
	if err := dynamo.CreateTable(ctx, env.ddb, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	return dynamo.New(env.ddb, name)
}

// TestPackRowLeavesErrorTextsToAttentionRows guards where the DynamoDB
// adapter keeps a failed pack item's error text (internal/dynamo,
// packerrors.go): on its attention row alone, so that a pack of 10 items
// that all failed with 200-byte texts stays one write unit (under 1 KB)
// as a clean pack does; ScanPacks (the results), ListItems and LocateItem
// still give each item its own text.
func TestPackRowLeavesErrorTextsToAttentionRows(t *testing.T) {
	ctx := context.Background()
	s := conformanceStore(t).(*dynamo.Store)
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	b := ledger.Batch{Batch: api.Batch{ID: "packerr", Plan: api.Plan{Pipeline: "echo", Digest: "d1", MaxAttempts: 1, ItemsPerMessage: 10},
		ManifestKey: "batches/packerr/manifest.jsonl", ManifestBytes: 10, ItemCount: 10, ListShards: 4, CounterShards: 1, Run: 1,
		Status: api.StatusRunning, Source: "inline", CreatedAt: now, RunStartedAt: now}, Chunks: 1}
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	ref := ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: 0}
	text := func(j int) string { return fmt.Sprintf("item %d: %s", j, strings.Repeat("x", 190)) }
	var start, end []ledger.PackItemWrite
	for j := range 10 {
		key := fmt.Sprintf("k%d", j)
		start = append(start, ledger.PackItemWrite{Index: j, Item: ledger.ItemState{Key: key, Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, UpdatedAt: now}})
		end = append(end, ledger.PackItemWrite{Index: j, Was: api.OutcomeInFlight, Item: ledger.ItemState{Key: key, Run: 1, Outcome: api.OutcomeFailed,
			Attempt: 1, FirstAttempt: 1, Error: text(j), Reason: api.ReasonPermanent, UpdatedAt: now}})
	}
	if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: now.Add(time.Minute), Items: start, InFlight: 10, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Attempt: 1, Run: 1, Items: end, InFlight: 0, Now: now}); err != nil {
		t.Fatal(err)
	}
	out, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table()), Key: layout.PackKey(ref), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if size := meter.ItemBytes(out.Item); size >= 1024 {
		t.Errorf("the pack row of 10 failed items is %d bytes, want < 1,024 (one write unit)", size)
	}
	p, err := s.GetPack(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for j, it := range p.Items {
		if it.Outcome != api.OutcomeFailed || it.Reason != api.ReasonPermanent || it.Error != "" {
			t.Errorf("pack entry %d: %s (%s) %q, want failed (permanent) with its text on the attention row", j, it.Outcome, it.Reason, it.Error)
		}
	}
	var scanned []ledger.Item
	for shard := range b.ListShards {
		items, _, err := s.ScanPacks(ctx, b.ID, shard, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		scanned = append(scanned, items...)
	}
	if len(scanned) != 10 {
		t.Fatalf("scanned %d items, want 10", len(scanned))
	}
	for _, it := range scanned {
		j, _ := strconv.Atoi(strings.TrimPrefix(it.Key, "k"))
		if it.Error != text(j) {
			t.Errorf("scanned %s: error %q, want %q", it.Key, it.Error, text(j))
		}
	}
	it, err := s.LocateItem(ctx, b.ID, b.ListShards, "k3")
	if err != nil || it.Error != text(3) {
		t.Errorf("locate k3: %q, %v; want %q", it.Error, err, text(3))
	}
	listed, _, err := s.ListItems(ctx, b.ID, b.ListShards, api.OutcomeFailed, "", 100)
	if err != nil || len(listed) != 10 {
		t.Fatalf("failed listing: %d items, %v; want 10", len(listed), err)
	}
	for _, it := range listed {
		j, _ := strconv.Atoi(strings.TrimPrefix(it.Key, "k"))
		if it.Error != text(j) {
			t.Errorf("listed %s: error %q, want %q", it.Key, it.Error, text(j))
		}
	}
}

// TestLaneRowSizeWithCostNames measures a counter lane row on DynamoDB
// (emulator) by DynamoDB's sizing rules (meter.ItemBytes) once writes
// have filled its 16 token slots: with no cost names, with the
// three an LLM pipeline reports (input_tokens, output_tokens, usd) and
// with pipeline.MaxCostNames names of pipeline.MaxCostNameBytes bytes,
// the most one item reports. Each lane write is billed for the row
// (ledger.LaneWriteBudget plans one unit a write): the row with three
// names stays under 1 KB; the largest is logged (docs/design/storage.md,
// the counter lanes' cost names).
func TestLaneRowSizeWithCostNames(t *testing.T) {
	ctx := context.Background()
	s := conformanceStore(t).(*dynamo.Store)
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	long := pipeline.CostSum{}
	for i := range pipeline.MaxCostNames {
		long[fmt.Sprintf("%02d-%s", i, strings.Repeat("n", pipeline.MaxCostNameBytes-3))] = decimal.RequireFromString("123.456")
	}
	llm := pipeline.CostSum{"input_tokens": decimal.NewFromInt(1200), "output_tokens": decimal.NewFromInt(350), "usd": decimal.RequireFromString("0.004125")}
	for _, tc := range []struct {
		name string
		cost pipeline.CostSum
		max  int // bytes; 0: logged only
	}{{"no cost names", nil, 1023}, {"input_tokens, output_tokens, usd", llm, 1023}, {"10 names of 40 bytes", long, 0}} {
		id := "lane" + strconv.Itoa(len(tc.cost))
		// One write into each of the 16 token slots (layout.TokenSlot),
		// as a busy lane's row holds them.
		for w := 0; w < 16; w++ {
			token := ledger.NewToken()
			for layout.TokenSlot(token) != "t"+strconv.Itoa(w) {
				token = ledger.NewToken()
			}
			c := ledger.LaneCount{BatchID: id, Run: 1, Lane: 0, Target: 1_000_000, Outcomes: map[api.Outcome]int64{api.OutcomeSucceeded: 9, api.OutcomeFailed: 1},
				Failures: 1, Cost: tc.cost, Spent: tc.cost, Token: token, Now: now.Add(time.Duration(w) * time.Second)}
			if _, err := s.CountLane(ctx, c); err != nil {
				t.Fatalf("%s: write %d: %v", tc.name, w, err)
			}
		}
		out, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table()),
			Key: layout.Key(layout.CountPK(id, 1, 0), layout.SKLane), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		size := meter.ItemBytes(out.Item)
		t.Logf("lane row, %s: %d bytes, %.0f write units a write", tc.name, size, meter.WriteUnits(size))
		if tc.max > 0 && size > tc.max {
			t.Errorf("lane row with %s: %d bytes, want ≤ %d (one write unit a write)", tc.name, size, tc.max)
		}
	}
}
