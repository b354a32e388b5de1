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
	want := "estimate: 25.0 items/s over the run so far (2500 ended since 2026-12-02T10:00:00Z); 7500 to go, finish ≈ 2026-12-02T10:06:40Z; projected at the end: cost tokens=5000 usd=0.28, run_spent usd=0.4, 21000 DynamoDB write units, 50 read units"
	if got := EstimateText(e); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// A projection is said to 4 significant digits (a user saw
	// "run_spent calls=3487.218045113").
	e.ProjectedRunSpent = pipeline.CostSum{"calls": decimal.RequireFromString("3487.218045113"), "usd": decimal.RequireFromString("12.34567")}
	if got, want := EstimateText(e), "run_spent calls=3487 usd=12.35,"; !strings.Contains(got, want) {
		t.Errorf("got %q, want it to hold %q", got, want)
	}
	e.ProjectedCost, e.ProjectedRunSpent, e.ProjectedUsage = nil, nil, nil
	if got := EstimateText(e); strings.Contains(got, "projected") {
		t.Errorf("no projections: %q", got)
	}
	e.Held = 1500
	if got, want := EstimateText(e), "7500 to go, finish ≈ 2026-12-02T10:06:40Z (1500 items held, not in it: the run ends once they are moved on)"; !strings.HasSuffix(got, want) {
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
	want := "estimate: 30.0 items/s over the last 60 s (1200 ended since 2026-12-02T10:01:00Z; run average 25.0 items/s); 7500 to go, finish ≈ 2026-12-02T10:05:50Z"
	if got := EstimateText(e); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	v := wire.BatchView{Batch: api.Batch{ID: "b", Run: 1, ItemCount: 10000, Status: api.StatusRunning},
		Progress: &wire.Progress{Done: 2500}, Live: &api.LiveView{Estimate: &e}}
	var r rateMeter
	r.add(start, 0)
	r.add(start.Add(10*time.Second), 50) // the polls' own 5.0 items/s
	got := watchLine(v, r)
	if !strings.Contains(got, "; 30.0 items/s over the last 60 s, finish ≈ 2026-12-02T10:05:50Z") || strings.Contains(got, "5.0 items/s") {
		t.Errorf("watch line %q", got)
	}
	e.RateBasis = api.RateBasisRunAverage
	if got := watchLine(v, r); !strings.Contains(got, "; 5.0 items/s") || strings.Contains(got, "last 60 s") {
		t.Errorf("watch line without a recent pace %q", got)
	}
	// Holding the rest for an approval (read as a client reads it: the
	// state, not the stored decision), the watch projects no finish: the
	// rest waits for a person, not for the pace.
	for _, st := range []api.ApprovalState{api.ApprovalSampling, api.ApprovalAwaiting} {
		v.Approval = &api.Approval{State: st, Sample: 200}
		if got := watchLine(v, r); strings.Contains(got, "finish") || strings.Contains(got, "items/s") {
			t.Errorf("%s: watch line %q projects a finish", st, got)
		}
	}
	v.Approval = &api.Approval{State: api.ApprovalApproved, Sample: 200}
	if got := watchLine(v, r); !strings.Contains(got, "finish ≈") {
		t.Errorf("approved: watch line %q, want the finish projected", got)
	}
	// While a cancel settles the run, its items not started never run:
	// no pace, no finish, no projected cost; the line says it stops.
	v.Stop = api.StatusCancelled
	v.Live.Estimate.ProjectedCost = pipeline.CostSum{"calls": decimal.NewFromInt(3000)}
	if got := watchLine(v, r); strings.Contains(got, "finish") || strings.Contains(got, "items/s") || strings.Contains(got, "projected") ||
		!strings.Contains(got, "; stopping (cancelled): the items not started settle without a call") {
		t.Errorf("stopping: watch line %q", got)
	}
}

// TestRestStartsText: approve says when the held rest starts — the
// hold's next check after the decision, from the estimate — and nothing
// once that time has passed, or for a batch not approved or not running.
func TestRestStartsText(t *testing.T) {
	made := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	b := api.Batch{ID: "b", Run: 1, Status: api.StatusRunning, RunStartedAt: made.Add(-time.Minute)}
	b.Approval = api.ApprovalOf(200, api.ApprovalApproved, api.DecidedByCaller, made.Add(3*time.Second), &api.SampleEstimate{MadeAt: made})
	if got, want := RestStartsText(b, made.Add(4*time.Second)), "the rest starts by 2026-12-04T10:00:14Z (in 10s): the held units come back at the hold's next check"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := RestStartsText(b, made.Add(15*time.Second)); got != "" {
		t.Errorf("past the check: %q, want nothing", got)
	}
	b.Approval.DecidedAt = made.Add(11 * time.Minute) // past the quick checks: the next whole minute
	if got, want := RestStartsText(b, made.Add(11*time.Minute)), "the rest starts by 2026-12-04T10:12:04Z (in 1m4s)"; !strings.HasPrefix(got, want) {
		t.Errorf("got  %q\nwant it to start %q", got, want)
	}
	b.Approval = api.ApprovalOf(200, api.ApprovalRejected, api.DecidedByCaller, made.Add(3*time.Second), &api.SampleEstimate{MadeAt: made})
	if got := RestStartsText(b, made.Add(4*time.Second)); got != "" {
		t.Errorf("rejected: %q, want nothing", got)
	}
}

// TestFinishedTextLeavesOutTheWaitAndTheCancelled: a finished run's pace
// counts the items that ran over the time they ran: a sampled run's wait
// for its approval and its cancelled items are said and left out.
func TestFinishedTextLeavesOutTheWaitAndTheCancelled(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	v := wire.BatchView{Batch: api.Batch{ID: "b", Run: 1, Status: api.StatusCompleted, ItemCount: 3000, RunStartedAt: start, FinishedAt: start.Add(40 * time.Second)}}
	if got, want := finishedText(v, 3000), "; 3000 items in 40s (75.0 items/s)"; got != want {
		t.Errorf("plain: got %q, want %q", got, want)
	}
	v.Approval = api.ApprovalOf(100, api.ApprovalApproved, api.DecidedByCaller, start.Add(35*time.Second), &api.SampleEstimate{MadeAt: start.Add(5 * time.Second)})
	if got, want := finishedText(v, 3000), "; 3000 items in 40s (30s of it awaiting approval; 3000 ran at 300 items/s)"; got != want {
		t.Errorf("approved after 30 s: got %q, want %q", got, want)
	}
	v.Approval = api.ApprovalOf(100, api.ApprovalRejected, api.DecidedByCaller, start.Add(5*time.Second), &api.SampleEstimate{MadeAt: start.Add(4 * time.Second)})
	v.Status, v.FinishedAt, v.Census = api.StatusCancelled, start.Add(10*time.Second), &api.Census{Total: 400, Succeeded: 50, Cancelled: 350}
	if got, want := finishedText(v, 400), "; 400 items in 10s (350 cancelled; 50 ran at 5.0 items/s)"; got != want {
		t.Errorf("rejected: got %q, want %q", got, want)
	}
}

// TestApprovedRestText: right after an approval, before the live
// estimate has the rest's own pace, status projects the rest from the
// sample's estimate, counted from when the approval reaches it.
func TestApprovedRestText(t *testing.T) {
	made := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	b := api.Batch{ID: "b", Run: 1, Status: api.StatusRunning}
	b.Approval = api.ApprovalOf(100, api.ApprovalApproved, api.DecidedByCaller, made.Add(3*time.Second), &api.SampleEstimate{MadeAt: made, Seconds: 30, ItemsPerSecond: 99})
	if got, want := ApprovedRestText(b), "estimate: the sample's: the rest ≈ 30s at 99.0 items/s from 2026-12-04T10:00:14Z, finish ≈ 2026-12-04T10:00:44Z"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	b.Approval = api.ApprovalOf(100, "", "", time.Time{}, &api.SampleEstimate{MadeAt: made, Seconds: 30, ItemsPerSecond: 99})
	if got := ApprovedRestText(b); got != "" {
		t.Errorf("awaiting: %q, want nothing", got)
	}
}
