//go:build integration

package integration

import (
	"context"
	"testing"

	"github.com/bulkrun/bulkrun/internal/bench"
	"github.com/bulkrun/bulkrun/shared/config"
)

// Budgets of TestCostUnitsPerItem: today's measured figures (docs/design.md,
// "Cost") plus a margin. Lower them when the ledger gets cheaper.
const (
	budgetWriteUnitsPerItem  = 4.12 + 0.2
	budgetReadUnitsPerItem   = 0.25 + 0.05
	budgetSQSRequestsPerItem = 0.31 + 0.04
)

// Capacity metering and `make bench` (cost per item): a clean run of 500
// items of 1 KB with small outputs, metered by DynamoDB's sizing rules,
// stays within today's write units, read units and SQS requests per item
// plus a margin, so a change that makes the ledger dearer fails here. It
// also checks that the run report's usage block carries the units the
// adapter was told by DynamoDB (ReturnConsumedCapacity).
func TestCostUnitsPerItem(t *testing.T) {
	r, err := bench.Run(context.Background(), env.aws, bench.Scenario{Name: "budget " + newID(t), Items: 500})
	if err != nil {
		t.Fatal(err)
	}
	f := r.Figures()
	t.Logf("write units %.3f, read units %.3f, SQS requests %.3f, Lambda requests %.3f per item; $%.2f per 10^6 items",
		f.WriteUnitsPerItem, f.ReadUnitsPerItem, f.SQSRequestsPerItem, f.LambdaInvocationsPerItem, f.USDPerMillionItems)
	for k, v := range f.WriteUnitsByTarget {
		t.Logf("  write %-24s %.3f", k, v)
	}
	if f.WriteUnitsPerItem > budgetWriteUnitsPerItem {
		t.Errorf("%.3f write units per item, budget %.2f", f.WriteUnitsPerItem, budgetWriteUnitsPerItem)
	}
	if f.ReadUnitsPerItem > budgetReadUnitsPerItem {
		t.Errorf("%.3f read units per item, budget %.2f", f.ReadUnitsPerItem, budgetReadUnitsPerItem)
	}
	if f.SQSRequestsPerItem > budgetSQSRequestsPerItem {
		t.Errorf("%.3f SQS requests per item, budget %.2f", f.SQSRequestsPerItem, budgetSQSRequestsPerItem)
	}
	// Every item's row is written at least twice and enters the list index
	// at least once: less means the meter misses writes.
	if got := f.WriteUnitsByTarget["table ITEM"]; got < 2 {
		t.Errorf("%.3f item-row write units per item, want ≥ 2 (reservation and outcome)", got)
	}
	if got := f.WriteUnitsByTarget["index "+config.IndexList+" ITEM"]; got < 1 {
		t.Errorf("%.3f list-index write units per item, want ≥ 1 (each item's entry is inserted)", got)
	}
	if r.ReportUsage.DynamoDBWriteUnits <= 0 || r.ReportUsage.DynamoDBWriteUnits > r.Reported.WriteUnits {
		t.Errorf("report usage %+v, want > 0 and ≤ the adapter's total %.1f write units", r.ReportUsage, r.Reported.WriteUnits)
	}
}
