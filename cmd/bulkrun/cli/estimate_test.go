package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// TestEstimateTextOverTheRecentWindow guards the line over the recent
// window: its rate and span, and the run's average beside it; and the
// watch's line, which tells the API's recent pace and finish in place of
// its own polls'.
func TestEstimateTextOverTheRecentWindow(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	e := api.Estimate{RateBasis: api.RateBasisRecent, Since: start.Add(60 * time.Second), Ended: 1200, RatePerSecond: 30, RunRatePerSecond: 25,
		Remaining: 7500, FinishAt: start.Add(350 * time.Second)}
	want := "estimate: 30.0 items/s over the last 60 s (1200 ended since 2026-12-02T10:01:00Z; run average 25.0 items/s); 7500 to go, finish ≈ 2026-12-02T10:05:50Z"
	if got := describe.EstimateText(e); got != want {
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
	// A projected cost is said to 4 significant digits, as status says it
	// (a new user read tokens=23723.076923077).
	v.Live.Estimate.ProjectedCost = pipeline.CostSum{"tokens": decimal.RequireFromString("23723.076923077"), "usd": decimal.RequireFromString("0.28461")}
	if got := watchLine(v, r); !strings.Contains(got, "; projected cost tokens=23720 usd=0.2846") {
		t.Errorf("watch line %q, want the projected cost to 4 significant digits", got)
	}
	// Paused, no item starts until the pause ends: no finish and no
	// projected cost from the pace before it (a new user read a finish
	// while the batch was paused by an outage).
	for _, p := range []api.Pause{{By: api.PauseByOutage, Since: start, Class: "timeout"}, {By: api.PauseByCaller, Since: start}} {
		v.Pause = &p
		if got := watchLine(v, r); strings.Contains(got, "finish") || strings.Contains(got, "items/s") || strings.Contains(got, "projected") || !strings.Contains(got, "paused") {
			t.Errorf("paused by %s: watch line %q", p.By, got)
		}
	}
	v.Pause = nil
	// While a cancel settles the run, its items not started never run:
	// no pace, no finish, no projected cost; the line says it stops.
	v.Stop = api.StatusCancelled
	v.Live.Estimate.ProjectedCost = pipeline.CostSum{"calls": decimal.NewFromInt(3000)}
	if got := watchLine(v, r); strings.Contains(got, "finish") || strings.Contains(got, "items/s") || strings.Contains(got, "projected") ||
		!strings.Contains(got, "; stopping (cancelled): the items not started settle without a call") {
		t.Errorf("stopping: watch line %q", got)
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
	// A run that paused: its pauses' time is left out of the pace, as
	// status leaves it out (a new user read 1.7 items/s for a run of
	// 2.5 items/s paused 1 m 31 s).
	v.Approval = nil
	v.FinishedAt, v.Paused = start.Add(302*time.Second), &api.PausedSummary{Pauses: 1, Seconds: 91.189}
	if got, want := finishedText(v, 500), "; 500 items in 5m2s (1m31s of it paused; 500 ran at 2.4 items/s)"; got != want {
		t.Errorf("paused: got %q, want %q", got, want)
	}
	v.Paused = nil
	v.Approval = api.ApprovalOf(100, api.ApprovalRejected, api.DecidedByCaller, start.Add(5*time.Second), &api.SampleEstimate{MadeAt: start.Add(4 * time.Second)})
	v.Status, v.FinishedAt, v.Census = api.StatusCancelled, start.Add(10*time.Second), &api.Census{Total: 400, Succeeded: 50, Cancelled: 350}
	if got, want := finishedText(v, 400), "; 400 items in 10s (350 cancelled; 50 ran at 5.0 items/s)"; got != want {
		t.Errorf("rejected: got %q, want %q", got, want)
	}
}
