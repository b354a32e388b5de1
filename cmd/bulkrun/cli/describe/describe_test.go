package describe

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
	// A finish held to the rate key's bookings says so.
	booked := e
	booked.FinishBooked = true
	if got := EstimateText(booked); !strings.Contains(got, "finish ≈ 2026-12-02T10:06:40Z (no earlier: the rate key is booked until then);") {
		t.Errorf("a booked finish: %q", got)
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

// Guards docs/cli.md "Correcting items": a newcomer's first correction
// output speaks of items (not of packs, the storage's word) and counts
// in words: "corrects 1 item", "1 corrected item", "1 failure of 3 items".
func TestCorrectionWordsAreTheUsers(t *testing.T) {
	created := true
	v := wire.CorrectionView{Batch: wire.BatchView{Batch: api.Batch{ID: "texts-1", Run: 2, RunRevision: 2}, Created: &created},
		Revision: api.Revision{N: 2, Items: 1, Run: 2, RunItems: 3, Source: "s3://bkt/uploads/x/fixed.jsonl", CreatedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}}
	line := CorrectionText(v)
	if strings.Contains(line, "pack") || !strings.Contains(line, "corrects 1 item;") || !strings.Contains(line, "2 other items") {
		t.Errorf("correction line %q: want items, not packs, counted in words", line)
	}
	// "run 2 runs it" is never followed by words that read as if the
	// corrected item were not run: the others are the ones not run again.
	if want := "run 2 runs it; the 2 other items stored with it keep their outcome (counted, not run again)"; !strings.HasSuffix(line, want) {
		t.Errorf("correction line %q, want it to end %q", line, want)
	}
	v.Revision.RunItems = 2
	if want := "run 2 runs it; the other item stored with it keeps its outcome (counted, not run again)"; !strings.HasSuffix(CorrectionText(v), want) {
		t.Errorf("correction line %q, want it to end %q", CorrectionText(v), want)
	}
	v.Revision.RunItems = 3
	if rev := RevisionText(v.Batch.Batch, v.Revision); !strings.Contains(rev, "1 corrected item,") {
		t.Errorf("revision line %q: want \"1 corrected item\"", rev)
	}
	pct := 50.0
	if got := VerdictText(api.Threshold{FailurePercent: &pct}, api.Threshold{FailurePercent: &pct}.Judge(1, 3), false); !strings.Contains(got, "1 failure of 3 items") {
		t.Errorf("verdict %q: want \"1 failure of 3 items\"", got)
	}
	if got := (&api.MismatchError{BatchID: "b", Field: "headers", Stored: "a", Given: "b"}).Error(); strings.Contains(got, "another headers") {
		t.Errorf("mismatch %q", got)
	}
}

// A batch without a threshold is never "within the threshold": its
// verdict says it has none, and that every item failed when every one did.
func TestVerdictWithoutAThreshold(t *testing.T) {
	none := api.Threshold{}
	for _, tc := range []struct {
		failures, total int64
		sofar           bool
		want            string
	}{
		{0, 2000, false, "verdict: no threshold (0 failures of 2000 items)"},
		{3000, 3000, false, "verdict: no threshold; every item failed (3000 failures of 3000 items)"},
		{5, 5, true, "verdict so far: no threshold (5 failures of 5 items)"},
	} {
		if got := VerdictText(none, none.Judge(tc.failures, tc.total), tc.sofar); got != tc.want {
			t.Errorf("VerdictText(none, %d of %d, %v) = %q, want %q", tc.failures, tc.total, tc.sofar, got, tc.want)
		}
	}
	five := int64(5)
	count := api.Threshold{FailureCount: &five}
	if got, want := VerdictText(count, count.Judge(3, 10), false), "verdict: within the threshold (3 failures of 10 items)"; got != want {
		t.Errorf("VerdictText(count 5, 3 of 10) = %q, want %q", got, want)
	}
}

// Guards status's adaptive pace line (AdaptivePaceText): the key, the
// limit and how it climbs back (its step, or doubling in slow start), a
// Retry-After's hold, and the calls booked ahead with when the last is
// due.
func TestAdaptivePaceText(t *testing.T) {
	cut := time.Date(2026, 12, 5, 10, 0, 3, 0, time.UTC)
	hold, clear := cut.Add(2*time.Second), cut.Add(37*time.Second)
	got := AdaptivePaceText(api.AdaptivePace{Key: "api.example.com", LimitPerSecond: 14.24, CutAt: cut, StepPerSecond: 1.42, BookedAhead: 312, ClearAt: &clear})
	want := "adaptive pace: api.example.com throttled bulkrun's calls; every batch with no rate calling it is held to 14.2 requests/s (cut 2026-12-05T10:00:03Z, +1.4 requests/s each second no call is throttled); 312 calls booked ahead, the last due by 2026-12-05T10:00:40Z at this limit"
	if got != want {
		t.Errorf("growing by its step:\n got %q\nwant %q", got, want)
	}
	got = AdaptivePaceText(api.AdaptivePace{Key: "lambda:enrich", LimitPerSecond: 140, CutAt: cut, SlowStart: true, HoldUntil: &hold})
	want = "adaptive pace: lambda:enrich throttled bulkrun's calls; every batch with no rate calling it is held to 140 requests/s (cut 2026-12-05T10:00:03Z, doubling every 2 s while no call is throttled); no call before 2026-12-05T10:00:05Z (its Retry-After)"
	if got != want {
		t.Errorf("in slow start, held:\n got %q\nwant %q", got, want)
	}
	got = AdaptivePaceText(api.AdaptivePace{Key: "api.example.com", LimitPerSecond: 16.8, CutAt: cut, SlowStart: true, SlowStartTo: 24})
	want = "adaptive pace: api.example.com throttled bulkrun's calls; every batch with no rate calling it is held to 16.8 requests/s (cut 2026-12-05T10:00:03Z, doubling every 2 s up to 24.0 requests/s while no call is throttled)"
	if got != want {
		t.Errorf("in slow start up to a threshold:\n got %q\nwant %q", got, want)
	}
	got = AdaptivePaceText(api.AdaptivePace{Key: "api.example.com", LimitPerSecond: 10, CutAt: cut, SlowStart: true, Cause: api.AdaptCauseResumed})
	want = "adaptive pace: api.example.com restarted as a batch calling it resumed from a pause; every batch with no rate calling it is held to 10.0 requests/s (since 2026-12-05T10:00:03Z, doubling every 2 s while no call is throttled)"
	if got != want {
		t.Errorf("restarted by a resume:\n got %q\nwant %q", got, want)
	}
}

// TestPausedText guards the report's pause line: the count and the time
// in all, then the last pause, who ended it, or that it stood at the
// run's end.
func TestPausedText(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 1, 2, 0, time.UTC)
	tests := []struct {
		ps   api.PausedSummary
		want string
	}{
		{api.PausedSummary{Pauses: 1, Seconds: 0.25}, "paused 1 time, 250ms in all"},
		{api.PausedSummary{Pauses: 1, Seconds: 91.189}, "paused 1 time, 1m31.2s in all"},
		{api.PausedSummary{Pauses: 2, Seconds: 95.5, Last: &api.PauseSpan{By: api.PauseByOutage, Since: t0, Until: t0.Add(58 * time.Second), Class: "http 502", Probes: 3, EndedBy: api.PauseByOutage}},
			"paused 2 times, 1m35.5s in all; the last by an outage (http 502, 3 probes) from 2026-12-06T10:01:02Z to 2026-12-06T10:02:00Z, ended by its probe answered"},
		{api.PausedSummary{Pauses: 1, Seconds: 60, Last: &api.PauseSpan{By: api.PauseByOutage, Since: t0, Until: t0.Add(time.Minute), EndedBy: api.PauseByCaller}},
			"paused 1 time, 1m0s in all; the last by an outage from 2026-12-06T10:01:02Z to 2026-12-06T10:02:02Z, ended by a caller's unpause"},
		{api.PausedSummary{Pauses: 1, Seconds: 60, Last: &api.PauseSpan{By: api.PauseByBudget, Since: t0, Until: t0.Add(time.Minute), Class: "budget", EndedBy: api.PauseByBudget}},
			"paused 1 time, 1m0s in all; the last by its budget from 2026-12-06T10:01:02Z to 2026-12-06T10:02:02Z, ended by a raise of the budget"},
		{api.PausedSummary{Pauses: 1, Seconds: 60, Last: &api.PauseSpan{By: api.PauseByCaller, Since: t0, Until: t0.Add(time.Minute)}},
			"paused 1 time, 1m0s in all; the last by a caller from 2026-12-06T10:01:02Z to the run's end at 2026-12-06T10:02:02Z"},
	}
	for _, tt := range tests {
		if got := PausedText(tt.ps); got != tt.want {
			t.Errorf("PausedText:\n got  %s\n want %s", got, tt.want)
		}
	}
}

// TestRateBookedText guards status's line for a batch waiting behind its
// rate key's bookings: the key, its rate, until when and how far ahead.
func TestRateBookedText(t *testing.T) {
	r := api.RateBooked{Key: "api.example.com", RequestsPerSecond: 20, Until: time.Date(2026, 12, 6, 10, 15, 30, 0, time.UTC), AheadSeconds: 14.2}
	want := "rate key api.example.com (this batch: 20 requests/s): calls booked until 2026-12-06T10:15:30Z, 14.2 s ahead, by this batch or others naming the key; a unit that leases now starts after them (first come, first served)"
	if got := RateBookedText(r); got != want {
		t.Errorf("RateBookedText:\n got  %s\n want %s", got, want)
	}
	// A token budget booked further than the calls.
	r.TokensPerSecond, r.By = 150, api.BookedByTokens
	want = "rate key api.example.com (this batch: 20 requests/s, 150 tokens/s): its token budget booked until 2026-12-06T10:15:30Z, 14.2 s ahead, by this batch or others naming the key; a unit that leases now starts after them (first come, first served)"
	if got := RateBookedText(r); got != want {
		t.Errorf("RateBookedText, by tokens:\n got  %s\n want %s", got, want)
	}
}

// TestRateConflictText guards status's line and watch's clause for
// another batch naming the batch's rate key at another rate: the key,
// the other batch and both rates, and how many were noted.
func TestRateConflictText(t *testing.T) {
	c := api.RateConflict{Key: "api.example.com", BatchID: "B", Rate: api.Rate{Key: "api.example.com", RequestsPerSecond: 20}, NotedAt: time.Date(2026, 12, 7, 10, 5, 0, 0, time.UTC), Batches: 1}
	own := api.Rate{Key: "api.example.com", RequestsPerSecond: 5, TokensPerMinute: 90000}
	want := "rate key api.example.com: batch B also names it, at 20/s (this batch: 5/s, 90000 tokens/min; noted 2026-12-07T10:05:00Z); each lease is spaced at its own batch's rate, so the downstream gets B's calls at 20/s while both run; give every batch on the key the same rate"
	if got := RateConflictText(c, own); got != want {
		t.Errorf("RateConflictText:\n got  %s\n want %s", got, want)
	}
	c.Batches = 3
	if got, want := RateConflictText(c, own), "batch B (the latest of 3 batches noted at other rates) also names it"; !strings.Contains(got, want) {
		t.Errorf("RateConflictText of 3 noted: %s, want %q in it", got, want)
	}
	if got, want := RateConflictClause(c), "rate key api.example.com also named at 20/s by B"; got != want {
		t.Errorf("RateConflictClause: %q, want %q", got, want)
	}
}

// TestLiftedText guards a report's line for its lifted halts: the count,
// and the last one's subject, since when and why it stood, when lifted.
func TestLiftedText(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 40, 0, time.UTC)
	l := api.LiftedSummary{Lifts: 2, Last: &api.LiftedHalt{Halt: api.Halt{Subject: "secret:hook", Since: t0, Reason: "webhook: HTTP 401"}, LiftedAt: t0.Add(50 * time.Second)}}
	want := "halts lifted: 2; the last on secret:hook (halted 2026-12-06T10:00:40Z: webhook: HTTP 401), lifted 2026-12-06T10:01:30Z"
	if got := LiftedText(l); got != want {
		t.Errorf("LiftedText:\n got  %s\n want %s", got, want)
	}
	if got := LiftedText(api.LiftedSummary{Lifts: 1}); got != "halts lifted: 1" {
		t.Errorf("no last: %q", got)
	}
}
