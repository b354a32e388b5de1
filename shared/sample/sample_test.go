package sample

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The Wilson interval against values worked by hand from Wilson's
// formula (z = 1.96): 0 of 10 is 0–27.8 %, 3 of 28 is 3.7–27.2 %, 50 of
// 100 is 40.4–59.6 %, 10 of 10 is 72.2–100 %; no trials is 0–100 %.
func TestWilson(t *testing.T) {
	for _, tc := range []struct {
		failed, n int64
		low, high float64
	}{
		{0, 10, 0, 0.2775},
		{3, 28, 0.0371, 0.2720},
		{50, 100, 0.4038, 0.5962},
		{10, 10, 0.7225, 1},
		{0, 0, 0, 1},
	} {
		low, high := Wilson(tc.failed, tc.n)
		if math.Abs(low-tc.low) > 1e-3 || math.Abs(high-tc.high) > 1e-3 {
			t.Errorf("Wilson(%d, %d) = %.4f–%.4f, want %.4f–%.4f", tc.failed, tc.n, low, high, tc.low, tc.high)
		}
	}
}

// A sample of 200 items of 20,000 (10 a message: 20 messages) that took
// 20 s and spent $1 of the pipeline's and $0.01 of DynamoDB's projects
// $101 (pipeline $100, DynamoDB $1) and, on a stack running 1,000
// messages at once, a pace 50 times the sample's (1,000 messages against
// its 20): 10 × 50 = 500 items a second, 19,800 / 500 = 40 s; with a
// rate of 100 a second, 198 s; with the stack unknown, the sample's own
// pace, 1,980 s. The rest's messages (1,980) set the gain, not all of
// the batch's.
func TestEstimateScalesCostAndPace(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	r := Run{Items: 20000, Ended: 200, Failed: 4, StartedAt: start, Now: start.Add(20 * time.Second),
		PipelineUSD: decimal.NewFromInt(1), InfraUSD: decimal.RequireFromString("0.01"),
		Cost: pipeline.CostSum{"usd": decimal.NewFromInt(1), "tokens": decimal.NewFromInt(3000)}, PerMessage: 10, Parallel: 1000}
	e := Estimate(r)
	if e.CostUSD != 101 || e.PipelineUSD != 100 || e.InfraUSD != 1 || e.SampleUSD != 1.01 {
		t.Errorf("costs %v %v %v %v: want 101 = 100 + 1 from 1.01", e.CostUSD, e.PipelineUSD, e.InfraUSD, e.SampleUSD)
	}
	if !e.ProjectedCost["tokens"].Equal(decimal.NewFromInt(300000)) {
		t.Errorf("projected tokens %s, want 300000", e.ProjectedCost["tokens"])
	}
	if e.FailureRate != 0.02 || e.ProjectedFailures != 400 {
		t.Errorf("failures %v, %d: want 0.02 and 400", e.FailureRate, e.ProjectedFailures)
	}
	if e.ItemsPerSecond != 500 || e.Seconds != 40 || e.SampleSeconds != 20 || !strings.Contains(e.Pace, "× 50") {
		t.Errorf("pace %v items/s, %v s (%q): want 500 and 40", e.ItemsPerSecond, e.Seconds, e.Pace)
	}
	r.RequestsPerSecond = 100
	if e := Estimate(r); e.ItemsPerSecond != 100 || e.Seconds != 198 || !strings.Contains(e.Pace, "rate") {
		t.Errorf("with a rate of 100/s: %v items/s, %v s (%q): want 100 and 198", e.ItemsPerSecond, e.Seconds, e.Pace)
	}
	r.RequestsPerSecond, r.Parallel = 0, 0
	if e := Estimate(r); e.ItemsPerSecond != 10 || e.Seconds != 1980 {
		t.Errorf("with the stack unknown: %v items/s, %v s: want 10 and 1980", e.ItemsPerSecond, e.Seconds)
	}
	// Made 40 s after the sample's counters last moved: its pace is its
	// own, to its end.
	r.Now, r.EndedAt = start.Add(60*time.Second), start.Add(20*time.Second)
	if e := Estimate(r); e.ItemsPerSecond != 10 || e.SampleSeconds != 20 || !e.MadeAt.Equal(r.Now) {
		t.Errorf("made after the sample's end: %v items/s over %v s, made %v: want 10 over 20, made at %v", e.ItemsPerSecond, e.SampleSeconds, e.MadeAt, r.Now)
	}
	// A rest of one message runs no faster than the sample's one did.
	small := Run{Items: 20, Ended: 10, StartedAt: start, Now: start.Add(10 * time.Second), PerMessage: 10, Parallel: 100}
	if e := Estimate(small); e.ItemsPerSecond != 1 || e.Seconds != 10 {
		t.Errorf("a rest of one message: %v items/s, %v s (%q): want the sample's 1, 10 s", e.ItemsPerSecond, e.Seconds, e.Pace)
	}
	if e := Estimate(Run{Items: 10}); e != nil {
		t.Errorf("no item ended: %+v, want nil", e)
	}
}

// TestEstimateFollowsTheEventSourcesRamp guards the rest's start as an
// SQS event source scales (RampStart invocations, RampPerMinute more a
// minute; in provisioned mode its ready pollers' invocations, 1,000 more): at 10 messages an invocation, 50 messages run at first, 50
// more each second, up to Parallel; each at the sample's pace per
// message it ran at once.
func TestEstimateFollowsTheEventSourcesRamp(t *testing.T) {
	start := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	near := func(a, b float64) bool { return math.Abs(a-b) < 0.01 }
	// 20 messages of 10 in 20 s: 0.5 items/s a message. The rest, 1,980
	// messages, reaches 1,000 at once 19 s in, after 4,987.5 items:
	// 19 + (19,800 − 4,987.5) / 500 = 48.625 s.
	r := Run{Items: 20000, Ended: 200, StartedAt: start, Now: start.Add(20 * time.Second), PerMessage: 10, Parallel: 1000, PerInvocation: 10}
	if e := Estimate(r); e.Seconds != 49 || !near(e.ItemsPerSecond, 19800/48.625) || !strings.Contains(e.Pace, "300 invocations") {
		t.Errorf("the ramp to 1,000 messages: %v s at %v items/s (%q), want 49 s at %.3f", e.Seconds, e.ItemsPerSecond, e.Pace, 19800/48.625)
	}
	// One item a message, 200 in 2 s, 50 of them at once (the ramp's
	// start): 2 items/s a message. The rest, 2,000, ends on the ramp:
	// 2 × (50 t + 25 t²) = 2,000 at t = (−50 + √102,500) / 50.
	r = Run{Items: 2200, Ended: 200, StartedAt: start, Now: start.Add(2 * time.Second), PerMessage: 1, Parallel: 1000, PerInvocation: 10}
	want := (-50 + math.Sqrt(102500)) / 50
	if e := Estimate(r); e.Seconds != math.Ceil(want) || !near(e.ItemsPerSecond, 2000/want) {
		t.Errorf("a rest that ends on the ramp: %v s at %v items/s (%q), want %.3f s", e.Seconds, e.ItemsPerSecond, e.Pace, want)
	}
	// Provisioned mode, 20 pollers of up to 10 invocations ready: the
	// rest starts at 200 invocations (2,000 messages at once, all it
	// needs) and needs no ramp: 19,800 / (0.5 × 1,980) = 20 s.
	r = Run{Items: 20000, Ended: 200, StartedAt: start, Now: start.Add(20 * time.Second), PerMessage: 10, Parallel: 20000, PerInvocation: 10, Ramp: ProvisionedRamp(20, 10)}
	if e := Estimate(r); e.Seconds != 20 || !near(e.ItemsPerSecond, 990) {
		t.Errorf("provisioned, 200 invocations ready: %v s at %v items/s (%q), want 20 s at 990", e.Seconds, e.ItemsPerSecond, e.Pace)
	}
	// Provisioned, 2 pollers (20 invocations, 200 messages) ready and
	// 1,000 invocations (10,000 messages) more a minute towards 1,980:
	// 0.5 × (200 t + 83.3 t²) = 19,800 ends on the ramp.
	r.Ramp = ProvisionedRamp(2, 10)
	grow := 10000.0 / 60
	want = (-200 + math.Sqrt(200*200+2*grow*19800/0.5)) / grow
	if tc := (1980 - 200) / grow; want > tc {
		want = tc + (19800-0.5*(200*tc+grow*tc*tc/2))/(0.5*1980)
	}
	if e := Estimate(r); e.Seconds != math.Ceil(want) || !strings.Contains(e.Pace, "1000 invocations") {
		t.Errorf("provisioned, 2 pollers: %v s (%q), want %.3f s", e.Seconds, e.Pace, want)
	}
	// Under the ramp's start: no ramp.
	r = Run{Items: 400, Ended: 200, StartedAt: start, Now: start.Add(20 * time.Second), PerMessage: 10, Parallel: 1000, PerInvocation: 10}
	if e := Estimate(r); e.ItemsPerSecond != 10 || e.Seconds != 20 {
		t.Errorf("20 messages after 20: %v items/s, %v s (%q), want 10 and 20", e.ItemsPerSecond, e.Seconds, e.Pace)
	}
}

// TestCheckSetsTheEstimateBesideTheRun guards the report's comparison:
// cost against what the run spent, the failure rate against the
// estimate's interval, the rest's time from the approval to the end;
// and none for a run not approved on an estimate.
func TestCheckSetsTheEstimateBesideTheRun(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	est := &api.SampleEstimate{MadeAt: at, Items: 2000, SampleItems: 100, Failed: 4, FailureRate: 0.04, FailureLow: 0.0157, FailureHigh: 0.0984,
		CostUSD: 20, Seconds: 20}
	a := api.ApprovalOf(100, api.ApprovalApproved, api.DecidedByCaller, at.Add(10*time.Second), est)
	d := Done{Census: api.Census{Succeeded: 1880, Failed: 100, Quarantined: 20}, SpentUSD: decimal.RequireFromString("21.000478"),
		StartedAt: at.Add(-7 * time.Second), FinishedAt: at.Add(40 * time.Second)}
	c := Check(a, d)
	if c == nil {
		t.Fatal("an approved run with an estimate has no check")
	}
	if c.CostUSD != 21.000478 || c.CostDiff != 0.05 {
		t.Errorf("cost %v (diff %v), want 21.000478 (+0.05)", c.CostUSD, c.CostDiff)
	}
	if c.Ended != 2000 || c.Failed != 120 || c.FailureRate != 0.06 || !c.FailureInInterval {
		t.Errorf("failures %d of %d (%v, in interval %v), want 120 of 2000 (0.06, within 1.57–9.84 %%)", c.Failed, c.Ended, c.FailureRate, c.FailureInInterval)
	}
	// The run started 7 s before the estimate: the messages held while
	// the sample ran were next checked 3 s after it (back 5–7 s after
	// it), then every 10 s from the estimate. Approved 10 s after the
	// estimate, at its first check: the first held items are back 2 s
	// later; 30 s against 20 + 2.
	if c.RestSeconds != 30 || c.ReachSeconds != 2 || c.RestDiff != 0.3636 || c.DecidedBy != api.DecidedByCaller {
		t.Errorf("rest %v s, reach %v s (diff %v) decided by %q, want 30 s, 2 s (+0.3636) by caller", c.RestSeconds, c.ReachSeconds, c.RestDiff, c.DecidedBy)
	}
	for _, tc := range []struct{ decided, reach time.Duration }{
		{2 * time.Second, 3 * time.Second},  // before the check counted from the run's start: back 2 s after it
		{6 * time.Second, 0},                // that check's messages are still coming back
		{13 * time.Second, 0},               // so are the estimate's first check's
		{15 * time.Second, 7 * time.Second}, // they are all back: the next check, 20 s after the estimate, + 2 s
	} {
		a := api.ApprovalOf(100, api.ApprovalApproved, api.DecidedByCaller, at.Add(tc.decided), est)
		if c := Check(a, d); c.ReachSeconds != tc.reach.Seconds() {
			t.Errorf("approved %s after the estimate: reach %v s, want %v", tc.decided, c.ReachSeconds, tc.reach.Seconds())
		}
	}
	d.Census.Failed = 300
	if c := Check(a, d); c.FailureInInterval {
		t.Errorf("failure rate %v outside 1.57–9.84 %% read as within", c.FailureRate)
	}
	for name, a := range map[string]*api.Approval{
		"no sample":   nil,
		"rejected":    api.ApprovalOf(100, api.ApprovalRejected, api.DecidedByCaller, at, est),
		"undecided":   api.ApprovalOf(100, "", "", time.Time{}, est),
		"no estimate": api.ApprovalOf(100, api.ApprovalApproved, api.DecidedByCaller, at, nil),
	} {
		if c := Check(a, d); c != nil {
			t.Errorf("%s: a check %+v, want none", name, c)
		}
	}
}

// With the sample's item-slot time measured (Busy), the pace is the
// sample's items over it, not over its wall time: 200 items whose
// invocations' 10 item slots ran 8 s in all are 25 items a second per
// item running; a stack of 3 invocations of 10 messages (30 messages, 10
// items at once each; the ramp's 5 invocations are more) runs 30 at
// once: the rest's 19,800 at 750 a second, 27 s — where the wall time
// (20 s, most of it the run's start) over the sample's 20 messages at
// once gives 15 a second, 1,320 s. A batch rate below that still bounds
// it.
func TestEstimateTakesThePaceFromTheItemSlotTime(t *testing.T) {
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	r := Run{Items: 20000, Ended: 200, StartedAt: start, Now: start.Add(20 * time.Second), PerMessage: 10, Parallel: 30, PerInvocation: 10,
		Busy: 8 * time.Second, Slots: 10}
	e := Estimate(r)
	if e.ItemsPerSecond != 750 || e.Seconds != 27 || !strings.Contains(e.Pace, "over 8 s of its invocations' item slots") {
		t.Errorf("pace %v items/s, %v s (%q): want 750 and 27 from the 8 s of item slots", e.ItemsPerSecond, e.Seconds, e.Pace)
	}
	r.Busy = 0
	if e := Estimate(r); e.ItemsPerSecond != 15 || e.Seconds != 1320 {
		t.Errorf("without Busy: pace %v items/s, %v s (%q): want 15 and 1,320", e.ItemsPerSecond, e.Seconds, e.Pace)
	}
	r.Busy, r.RequestsPerSecond = 8*time.Second, 100
	if e := Estimate(r); e.ItemsPerSecond != 100 || e.Seconds != 198 {
		t.Errorf("with a rate of 100/s: pace %v items/s, %v s: want 100 and 198", e.ItemsPerSecond, e.Seconds)
	}
}
