package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestEstimateText guards status's estimate line: the pace over the run
// so far, what is left and the finish, and each projection it has.
func TestEstimateText(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	e := api.Estimate{Since: start, Ended: 2500, RatePerSecond: 25, Remaining: 7500, FinishAt: start.Add(400 * time.Second),
		ProjectedCost:     pipeline.CostSum{"usd": decimal.RequireFromString("0.28"), "tokens": decimal.NewFromInt(5000)},
		ProjectedRunSpent: pipeline.CostSum{"usd": decimal.RequireFromString("0.4")},
		ProjectedUsage:    &api.Usage{DynamoDBWriteUnits: 21000, DynamoDBReadUnits: 50}}
	want := "estimate: 25.0 items/s over the run so far (2500 ended since 10:00:00Z); 7500 to go, finish ≈ 10:06:40Z; projected at the end: cost tokens=5000 usd=0.28, run_spent usd=0.4, 21000 DynamoDB write units, 50 read units"
	if got := EstimateText(e); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	e.ProjectedCost, e.ProjectedRunSpent, e.ProjectedUsage = nil, nil, nil
	if got := EstimateText(e); strings.Contains(got, "projected") {
		t.Errorf("no projections: %q", got)
	}
}
