package live

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestEstimateOfARun guards the live view's estimate: 2,500 of 10,000
// items ended in the 100 s since the run started is 25 items a second,
// 7,500 remaining, finishing 300 s after the read; the pipeline's
// reported cost and run_spent and the DynamoDB units so far scaled ×4 to
// the whole run, exactly in decimal.
func TestEstimateOfARun(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := start.Add(100 * time.Second)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 10000, RunStartedAt: start}}
	p := ledger.Progress{Done: 2500,
		Cost:  pipeline.CostSum{"usd": decimal.RequireFromString("0.07"), "tokens": decimal.NewFromInt(1250)},
		Spent: pipeline.CostSum{"usd": decimal.RequireFromString("0.1")},
		Usage: api.Usage{DynamoDBWriteUnits: 5250, DynamoDBReadUnits: 12.5}}
	e := Estimate(b, p, now)
	if e == nil {
		t.Fatal("no estimate")
	}
	if e.Ended != 2500 || e.RatePerSecond != 25 || e.Remaining != 7500 || !e.FinishAt.Equal(now.Add(300*time.Second)) || !e.Since.Equal(start) {
		t.Fatalf("estimate %+v", e)
	}
	got, _ := json.Marshal(struct {
		C, S pipeline.CostSum
		U    *api.Usage
	}{e.ProjectedCost, e.ProjectedRunSpent, e.ProjectedUsage})
	if want := `{"C":{"tokens":5000,"usd":0.28},"S":{"usd":0.4},"U":{"dynamodb_write_units":21000,"dynamodb_read_units":50}}`; string(got) != want {
		t.Fatalf("projected %s, want %s", got, want)
	}
}

// TestEstimateLeavesHeldItemsOut guards an estimate with items that wait:
// 2,500 of 10,000 ended in 100 s (25 a second) and 1,500 held (1,000
// suspended, 500 withheld) leave 6,000 to go at the pace, finishing 240 s
// after the read (not 300 s: the held items wait for a signal or a lift,
// not for the pace), with the held count given beside them; the
// projected cost still counts every item (×4), as the held ones run once
// moved on.
func TestEstimateLeavesHeldItemsOut(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := start.Add(100 * time.Second)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 10000, RunStartedAt: start}}
	p := ledger.Progress{Done: 2500, Cost: pipeline.CostSum{"usd": decimal.RequireFromString("0.07")},
		Held: map[api.Outcome]int64{api.OutcomeSuspended: 1000, api.OutcomeWithheld: 500}}
	e := Estimate(b, p, now)
	if e == nil || e.Remaining != 6000 || e.Held != 1500 || !e.FinishAt.Equal(now.Add(240*time.Second)) {
		t.Fatalf("estimate %+v; want 6000 to go, 1500 held, finish 240 s after the read", e)
	}
	if got := e.ProjectedCost.String(); got != "usd=0.28" {
		t.Fatalf("projected cost %s, want usd=0.28 (every item, held ones too)", got)
	}
}

// TestEstimateOnlyWithAPace guards when there is none: no item ended,
// paused, or no start; and that a correction run projects over its own
// items (Revision.RunItems), and a run whose items all ended finishes at
// the read.
func TestEstimateOnlyWithAPace(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := start.Add(10 * time.Second)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 100, RunStartedAt: start}}
	if e := Estimate(b, ledger.Progress{}, now); e != nil {
		t.Errorf("nothing ended: %+v", e)
	}
	paused := b
	paused.Pause = &api.Pause{Since: start}
	if e := Estimate(paused, ledger.Progress{Done: 5}, now); e != nil {
		t.Errorf("paused: %+v", e)
	}
	stopping := b
	stopping.Stop = api.StatusCancelled
	if e := Estimate(stopping, ledger.Progress{Done: 5}, now); e != nil {
		t.Errorf("a cancel settling: %+v", e)
	}
	if e := Estimate(ledger.Batch{Batch: api.Batch{ItemCount: 100}}, ledger.Progress{Done: 5}, now); e != nil {
		t.Errorf("no start: %+v", e)
	}
	corr := b
	corr.Revisions = []api.Revision{{N: 2, RunItems: 20}}
	corr.RunRevision = 2
	if e := Estimate(corr, ledger.Progress{Done: 5}, now); e == nil || e.Remaining != 15 || !e.FinishAt.Equal(now.Add(30*time.Second)) {
		t.Errorf("correction run of 20 items, 5 ended in 10 s: %+v", e)
	}
	if e := Estimate(b, ledger.Progress{Done: 100}, now); e == nil || e.Remaining != 0 || !e.FinishAt.Equal(now) {
		t.Errorf("every item ended: %+v", e)
	}
}

// TestEstimateOverTheRecentWindow guards the recent pace: 2,500 items
// ended in the run's 100 s (25 a second on average), 1,200 of them in
// the last 40 s (30 a second) by the ring's sample: the estimate says
// recent_60s, finishes the 7,500 left at 30 a second (250 s), and
// projects the cost and run_spent as what they are so far plus the
// window's cost and spend per item for the items left (a window sample
// without them: the run's average); units stay on the run's average.
// Without a sample of the window it is the run's average, and says so.
func TestEstimateOverTheRecentWindow(t *testing.T) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := start.Add(100 * time.Second)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 10000, RunStartedAt: start}}
	p := ledger.Progress{Done: 2500,
		Cost:  pipeline.CostSum{"usd": decimal.RequireFromString("0.07")},
		Spent: pipeline.CostSum{"usd": decimal.RequireFromString("0.1")},
		Pace: []eta.Sample{
			{AtMs: start.Add(60 * time.Second).UnixMilli(), Done: 1300, Cost: pipeline.CostSum{"usd": decimal.RequireFromString("0.034")},
				Spent: pipeline.CostSum{"usd": decimal.RequireFromString("0.085")}},
			{AtMs: start.Add(75 * time.Second).UnixMilli(), Done: 1800},
			{AtMs: start.Add(90 * time.Second).UnixMilli(), Done: 2300}}}
	e := Estimate(b, p, now)
	if e == nil {
		t.Fatal("no estimate")
	}
	if e.RateBasis != api.RateBasisRecent || !e.Since.Equal(start.Add(60*time.Second)) || e.Ended != 1200 || e.RatePerSecond != 30 || e.RunRatePerSecond != 25 {
		t.Fatalf("estimate %+v", e)
	}
	if e.Remaining != 7500 || !e.FinishAt.Equal(now.Add(250*time.Second)) {
		t.Errorf("remaining %d, finish %s, want 7500 at +250 s", e.Remaining, e.FinishAt)
	}
	// 0.07 + 7500 × (0.07 − 0.034) / 1200 = 0.07 + 0.225
	if got := e.ProjectedCost["usd"].String(); got != "0.295" {
		t.Errorf("projected cost %s, want 0.295", got)
	}
	// 0.1 + 7500 × (0.1 − 0.085) / 1200 = 0.1 + 0.09375: the early
	// spend (0.085 for 1,300 items, retries) is not scaled to the rest.
	if got := e.ProjectedRunSpent["usd"].String(); got != "0.19375" {
		t.Errorf("projected run_spent %s, want 0.19375 (spent + the window's spend per item for the items left)", got)
	}
	noCost := p
	noCost.Pace = slices.Clone(p.Pace)
	noCost.Pace[0].Cost, noCost.Pace[0].Spent, noCost.Pace[0].NoCost = nil, nil, true
	if e := Estimate(b, noCost, now); e.ProjectedRunSpent["usd"].String() != "0.4" {
		t.Errorf("window without costs: projected run_spent %s, want 0.4 (the run's average)", e.ProjectedRunSpent["usd"])
	}
	old := p
	old.Pace = p.Pace[2:] // 10 s old: too young to measure a pace over
	if e := Estimate(b, old, now); e.RateBasis != api.RateBasisRunAverage || e.RatePerSecond != 25 || !e.Since.Equal(start) || e.ProjectedCost["usd"].String() != "0.28" {
		t.Errorf("without a sample of the window: %+v", e)
	}
	if want := "recent_" + strconv.Itoa(int(eta.Window.Seconds())) + "s"; string(api.RateBasisRecent) != want {
		t.Errorf("RateBasisRecent %q names another window than eta.Window (%q)", api.RateBasisRecent, want)
	}
}

// TestEstimateOfAnApprovedSampleStartsAtTheApproval: a sampled run of
// 300 items whose 30 sample items ended in its first 2 s, approved 40 s
// later, has no live estimate until a ring sample taken after the
// approval is old enough to measure a pace over (the run's average,
// 30 items in 42 s, would say 0.7 items/s); then it is the rest's own
// pace, from that sample.
func TestEstimateOfAnApprovedSampleStartsAtTheApproval(t *testing.T) {
	start := time.Date(2026, 12, 4, 20, 44, 0, 0, time.UTC)
	decided := start.Add(42 * time.Second)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 300, Run: 1, RunStartedAt: start}}
	b.Sample = 30
	b.Approval = api.ApprovalOf(30, api.ApprovalApproved, api.DecidedByCaller, decided, &api.SampleEstimate{SampleItems: 30})
	b.Approval.Decision = api.ApprovalApproved
	p := ledger.Progress{Done: 30, Pace: []eta.Sample{{AtMs: start.Add(2 * time.Second).UnixMilli(), Done: 30}}}
	if e := Estimate(b, p, decided.Add(5*time.Second)); e != nil {
		t.Fatalf("just after the approval: %+v, want none (the sample's estimate stands)", e)
	}
	p.Done = 150
	p.Pace = append(p.Pace, eta.Sample{AtMs: decided.Add(10 * time.Second).UnixMilli(), Done: 60})
	now := decided.Add(45 * time.Second)
	e := Estimate(b, p, now)
	if e == nil || e.RateBasis != api.RateBasisRecent || !e.Since.Equal(decided.Add(10*time.Second)) || e.Ended != 90 || e.RatePerSecond != 90.0/35 {
		t.Fatalf("after the approval: %+v, want the recent pace since the sample 10 s after the approval: 90 items in 35 s", e)
	}
	// Not sampled: just after the same moment, the run's average (30
	// items in 47 s), as before.
	b.Approval = nil
	first := ledger.Progress{Done: 30, Pace: []eta.Sample{{AtMs: start.Add(2 * time.Second).UnixMilli(), Done: 30}}}
	if e := Estimate(b, first, decided.Add(5*time.Second)); e == nil || e.RateBasis != api.RateBasisRunAverage || e.RatePerSecond != 30.0/47 {
		t.Errorf("without a sample: %+v, want the run's average, 30 items in 47 s", e)
	}
}

// TestEstimateWaitsToScaleSpend guards the first items' waste: 10 of 300
// items ended 11 s into a run that spent 109 calls and 105 write units
// (a receiver throttled its first calls; every item in flight was
// taken) project no run_spent and no units from the run's average —
// scaled they read 3,270 calls and 3,150 units for a run that spent 399
// and 219 — while the cost of the ending attempts is projected; from a
// tenth of the items on, both are.
func TestEstimateWaitsToScaleSpend(t *testing.T) {
	start := time.Date(2026, 12, 5, 22, 32, 57, 0, time.UTC)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 300, RunStartedAt: start}}
	calls := func(n int64) pipeline.CostSum { return pipeline.CostSum{"calls": decimal.NewFromInt(n)} }
	p := ledger.Progress{Done: 10, Cost: calls(10), Spent: calls(109), Usage: api.Usage{DynamoDBWriteUnits: 105, DynamoDBReadUnits: 37}}
	e := Estimate(b, p, start.Add(11*time.Second))
	if e == nil || e.ProjectedCost.Text("calls") != "300" || e.ProjectedRunSpent != nil || e.ProjectedUsage != nil {
		t.Fatalf("10 of 300 ended: %+v; want cost calls=300 projected, no run_spent, no units", e)
	}
	p.Done, p.Cost = 30, calls(30)
	if e := Estimate(b, p, start.Add(20*time.Second)); e.ProjectedRunSpent == nil || e.ProjectedUsage == nil {
		t.Errorf("30 of 300 ended: %+v; want run_spent and units projected", e)
	}
}

// TestEstimateLeavesPausesOut guards the pace after a pause: a run of
// 1,000 items that ended 200 in its first 100 s, stood paused 200 s and
// ended 100 more in the 50 s since: the recent pace is measured from the
// pause's end (2 a second, from the sample taken 40 s after it), not over
// a window that holds the standstill, and with no sample since the end
// the run's average leaves the 200 s out (300 in 150 s: 2 a second, not
// 300 in 350 s).
func TestEstimateLeavesPausesOut(t *testing.T) {
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	unpaused := start.Add(300 * time.Second)
	now := unpaused.Add(50 * time.Second)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 1000, RunStartedAt: start, Pauses: 1}, PausedMs: 200_000,
		LastPause: &api.PauseSpan{By: api.PauseByCaller, Since: start.Add(100 * time.Second), Until: unpaused, EndedBy: api.PauseByCaller}}
	at := func(d time.Duration, done int64) eta.Sample {
		return eta.Sample{AtMs: start.Add(d).UnixMilli(), Done: done}
	}
	// Samples 40 s before the read: one inside the pause, one just after it.
	p := ledger.Progress{Done: 300, Pace: []eta.Sample{at(295*time.Second, 200), at(310*time.Second, 220)}}
	e := Estimate(b, p, now)
	if e == nil || e.RateBasis != api.RateBasisRecent || !e.Since.Equal(start.Add(310*time.Second)) || e.RatePerSecond != 2 {
		t.Fatalf("estimate %+v; want the recent pace from the sample after the pause: 80 in 40 s, 2 a second", e)
	}
	p.Pace = p.Pace[:1]
	e = Estimate(b, p, now)
	if e == nil || e.RateBasis != api.RateBasisRunAverage || e.RatePerSecond != 2 || !e.FinishAt.Equal(now.Add(350*time.Second)) {
		t.Fatalf("estimate %+v; want the run's average without the pause: 300 in 150 s, 700 left in 350 s", e)
	}
	b.PausedMs, b.LastPause = 0, nil
	if e = Estimate(b, p, now); e == nil || e.RateBasis != api.RateBasisRecent || e.RatePerSecond >= 2 {
		t.Fatalf("without the pause kept: %+v; want the window across the standstill (100 in 55 s)", e)
	}
}

// TestEstimateOfAnApprovedRunAfterAPause guards the two rules together:
// a sampled run approved an hour after its start, paused 30 s and read
// 20 s after the unpause, its ring's samples all before the pause, has
// no recent pace to show (nil, as before any sample after the approval),
// never the run's average, which holds the approval's hour.
func TestEstimateOfAnApprovedRunAfterAPause(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	decided := start.Add(time.Hour)
	b := ledger.Batch{Batch: api.Batch{ItemCount: 3000, Run: 1, RunStartedAt: start}}
	b.Sample = 30
	b.Approval = api.ApprovalOf(30, api.ApprovalApproved, api.DecidedByCaller, decided, &api.SampleEstimate{SampleItems: 30})
	pausedAt := decided.Add(100 * time.Second)
	until := pausedAt.Add(30 * time.Second)
	b.Pauses, b.PausedMs = 1, 30_000
	b.LastPause = &api.PauseSpan{By: api.PauseByCaller, Since: pausedAt, Until: until, EndedBy: api.PauseByCaller}
	at := func(t time.Time, d int64) eta.Sample { return eta.Sample{AtMs: t.UnixMilli(), Done: d} }
	p := ledger.Progress{Done: 270, Pace: []eta.Sample{at(start.Add(2*time.Second), 30), at(pausedAt.Add(-40*time.Second), 150),
		at(pausedAt.Add(-20*time.Second), 190), at(pausedAt, 230)}}
	if e := Estimate(b, p, until.Add(20*time.Second)); e != nil {
		t.Errorf("estimate %+v (%s, %.3f items/s); want none until a sample after the unpause", e, e.RateBasis, e.RatePerSecond)
	}
	p.Done, p.Pace = 330, append(p.Pace, at(until.Add(5*time.Second), 240))
	if e := Estimate(b, p, until.Add(50*time.Second)); e == nil || e.RateBasis != api.RateBasisRecent || e.RatePerSecond != 2 {
		t.Errorf("estimate %+v; want the recent pace since the unpause: 90 in 45 s, 2 a second", e)
	}
}
