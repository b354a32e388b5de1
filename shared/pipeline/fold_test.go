package pipeline_test

import (
	"fmt"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestFoldKeepsTheSpend: a census counter write folding a message batch's cost
// names keeps the spend a budget reads (pipeline.SpendCostName, which
// sorts late), whatever the other names and however few may stay — the
// refused write's fold of every name included — and stays within its
// bound of names.
func TestFoldKeepsTheSpend(t *testing.T) {
	if pipeline.SpendCostName != api.SpendCostName {
		t.Fatalf("pipeline.SpendCostName %q, api.SpendCostName %q: budgets read one name", pipeline.SpendCostName, api.SpendCostName)
	}
	s := pipeline.CostSum{pipeline.SpendCostName: decimal.NewFromInt(7)}
	for i := range 100 {
		s[fmt.Sprintf("tokens.m%03d", i)] = decimal.NewFromInt(1)
	}
	for _, n := range []int{100, 50, 3, 2, 0} {
		out := s.Fold(n)
		if got := out[pipeline.SpendCostName]; !got.Equal(decimal.NewFromInt(7)) {
			t.Errorf("Fold to %d names: usd %s, want 7", n, got)
		}
		if len(out) > max(n, 3) {
			t.Errorf("Fold to %d names: %d names", n, len(out))
		}
		total := out[pipeline.FoldedCost]
		for name, v := range out {
			if name != pipeline.FoldedCost && name != pipeline.FoldedCostNames && name != pipeline.SpendCostName {
				total = total.Add(v)
			}
		}
		if !total.Equal(decimal.NewFromInt(100)) {
			t.Errorf("Fold to %d names: the other names sum to %s, want 100", n, total)
		}
	}
}
