package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/wire"
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
	e.Held = 1500
	if got, want := EstimateText(e), "7500 to go, finish ≈ 10:06:40Z (1500 items held, not in it: the run ends once they are moved on)"; !strings.HasSuffix(got, want) {
		t.Errorf("with held items: %q, want it to end %q", got, want)
	}
}

// TestEstimateTextOverTheRecentWindow guards the line over the recent
// window: its rate and span, and the run's average beside it; and the
// watch's line, which tells the API's recent pace and finish in place of
// its own polls'.
func TestEstimateTextOverTheRecentWindow(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	e := api.Estimate{RateBasis: api.RateBasisRecent, Since: start.Add(60 * time.Second), Ended: 1200, RatePerSecond: 30, RunRatePerSecond: 25,
		Remaining: 7500, FinishAt: start.Add(350 * time.Second)}
	want := "estimate: 30.0 items/s over the last 60 s (1200 ended since 10:01:00Z; run average 25.0 items/s); 7500 to go, finish ≈ 10:05:50Z"
	if got := EstimateText(e); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	v := wire.BatchView{Batch: api.Batch{ID: "b", Run: 1, ItemCount: 10000, Status: api.StatusRunning},
		Progress: &wire.Progress{Done: 2500}, Live: &api.LiveView{Estimate: &e}}
	var r rateMeter
	r.add(start, 0)
	r.add(start.Add(10*time.Second), 50) // the polls' own 5.0 items/s
	got := watchLine(v, r)
	if !strings.Contains(got, "; 30.0 items/s over the last 60 s, finish ≈ 10:05:50Z") || strings.Contains(got, "5.0 items/s") {
		t.Errorf("watch line %q", got)
	}
	e.RateBasis = api.RateBasisRunAverage
	if got := watchLine(v, r); !strings.Contains(got, "; 5.0 items/s") || strings.Contains(got, "last 60 s") {
		t.Errorf("watch line without a recent pace %q", got)
	}
}
