//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/internal/bench"
)

// Budgets of TestCostUnitsPerItem: the ledger's cost targets
// (docs/design.md, "Cost"). A change that raises a figure past its target
// fails here.
const (
	budgetWriteUnitsPerItem     = 2.2 // small outputs, every index included
	budgetWriteUnitsPerItem1KB  = 3.2 // ~1 KB outputs: the output billed once
	budgetReadUnitsPerItem      = 0.15
	budgetCounterReadsPerItem   = 0.01 // completion detection
	budgetSQSRequestsPerItem    = 0.35
	budgetIndexWriteUnitsPerRow = 0 // a clean run writes no index entry of an item row
)

// Capacity metering and `make bench` (cost per item), at the ledger's
// targets: a clean run of 500 items of 1 KB, metered by DynamoDB's sizing
// rules, stays within 2.2 write units per item with small outputs and 3.2
// with ~1 KB outputs (the output written once: no index copies it, no
// later write of its row bills it again), 0.15 read units per item
// (completion detection ≤ 0.01) and 0.35 SQS requests per item, with no
// partition key above 1,000 write units/s at 10,000 items/s. It also
// checks that the run report's usage block carries the units the adapter
// was told by DynamoDB (ReturnConsumedCapacity).
func TestCostUnitsPerItem(t *testing.T) {
	for _, sc := range []struct {
		outputBytes int
		writeBudget float64
	}{{0, budgetWriteUnitsPerItem}, {1024, budgetWriteUnitsPerItem1KB}} {
		r, err := bench.Run(context.Background(), env.aws, bench.Scenario{Name: "budget " + newID(t), Items: 500, OutputBytes: sc.outputBytes})
		if err != nil {
			t.Fatal(err)
		}
		f := r.Figures()
		f.WithPartitions(r)
		t.Logf("%d-byte outputs: write units %.3f, read units %.3f, SQS requests %.3f, Lambda requests %.3f per item; $%.2f per 10^6 items",
			r.OutputBytes, f.WriteUnitsPerItem, f.ReadUnitsPerItem, f.SQSRequestsPerItem, f.LambdaInvocationsPerItem, f.USDPerMillionItems)
		for k, v := range f.WriteUnitsByTarget {
			t.Logf("  write %-24s %.3f", k, v)
		}
		for k, v := range f.ReadUnitsByTarget {
			t.Logf("  read  %-24s %.3f", k, v)
		}
		if f.WriteUnitsPerItem > sc.writeBudget {
			t.Errorf("%d-byte outputs: %.3f write units per item, budget %.2f", r.OutputBytes, f.WriteUnitsPerItem, sc.writeBudget)
		}
		if f.ReadUnitsPerItem > budgetReadUnitsPerItem && sc.outputBytes == 0 {
			t.Errorf("%.3f read units per item, budget %.2f", f.ReadUnitsPerItem, budgetReadUnitsPerItem)
		}
		if got := f.ReadUnitsByTarget["table COUNT"]; got > budgetCounterReadsPerItem {
			t.Errorf("%.4f counter read units per item, budget %.2f", got, budgetCounterReadsPerItem)
		}
		if f.SQSRequestsPerItem > budgetSQSRequestsPerItem {
			t.Errorf("%.3f SQS requests per item, budget %.2f", f.SQSRequestsPerItem, budgetSQSRequestsPerItem)
		}
		// Every item's row is written at least twice (reservation and
		// outcome): less means the meter misses writes.
		if got := f.WriteUnitsByTarget["table ITEM"]; got < 2 {
			t.Errorf("%.3f item-row write units per item, want ≥ 2 (reservation and outcome)", got)
		}
		for k, v := range f.WriteUnitsByTarget {
			if strings.HasPrefix(k, "index ") && strings.HasSuffix(k, " ITEM") && v > budgetIndexWriteUnitsPerRow {
				t.Errorf("%s: %.3f write units per item in a clean run, want none", k, v)
			}
		}
		for _, row := range f.PartitionTable {
			if row.Max > bench.PartitionLimitWCU {
				t.Errorf("%d items: busiest key %.0f write units/s at %d items/s: %v", row.BatchItems, row.Max, bench.ItemsPerSecond, row.WCUPerS)
			}
		}
		if r.ReportUsage.DynamoDBWriteUnits <= 0 || r.ReportUsage.DynamoDBWriteUnits > r.Reported.WriteUnits {
			t.Errorf("report usage %+v, want > 0 and ≤ the adapter's total %.1f write units", r.ReportUsage, r.Reported.WriteUnits)
		}
	}
}

// TestCostUnitsPerItemPacked guards the item-packing target (docs/design.md,
// "Cost"): a clean run of 1 KB inputs with small outputs at 10 items per
// message writes at most 0.5 DynamoDB write units per item and costs at
// most $0.50 of infrastructure per 10^6 items (here in 500-item batches,
// each paying its fixed cost), with no index entry written.
func TestCostUnitsPerItemPacked(t *testing.T) {
	r, err := bench.Run(context.Background(), env.aws, bench.Scenario{Name: "packed " + newID(t), Items: 500, ItemsPerMessage: 10})
	if err != nil {
		t.Fatal(err)
	}
	f := r.Figures()
	t.Logf("10 items per message: write units %.3f, read units %.3f, SQS requests %.3f, Lambda requests %.3f per item; $%.2f per 10^6 items",
		f.WriteUnitsPerItem, f.ReadUnitsPerItem, f.SQSRequestsPerItem, f.LambdaInvocationsPerItem, f.USDPerMillionItems)
	if f.WriteUnitsPerItem > 0.5 {
		t.Errorf("%.3f write units per item, target 0.5", f.WriteUnitsPerItem)
	}
	if f.USDPerMillionItems > 0.50 {
		t.Errorf("$%.3f per 10^6 items, target 0.50", f.USDPerMillionItems)
	}
	// Each pack row is written at least twice (take and outcomes): less
	// means the meter misses writes.
	if got := f.WriteUnitsByTarget["table PACK"]; got < 0.2 {
		t.Errorf("%.3f pack-row write units per item, want ≥ 0.2 (two writes per 10 items)", got)
	}
	for k, v := range f.WriteUnitsByTarget {
		if strings.HasPrefix(k, "index ") && !strings.HasSuffix(k, " BATCH") && v > 0 {
			t.Errorf("%s: %.3f write units per item in a clean run, want none", k, v)
		}
	}
}
