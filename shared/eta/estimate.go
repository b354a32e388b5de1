package eta

import (
	"math"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// projectionPlaces is the decimal places a projected cost keeps: an
// estimate, not a sum, so its last digits carry no meaning (a cost of
// 10^-9 of its unit and less per run shows as 0).
const projectionPlaces = 9

// Run is what an estimate reads of a running run: its items (a
// correction run's own, else the batch's), when it started, whether it is
// paused, and from its counters the items ended (Done), the items held
// (Held: suspended, withheld or exhausted, waiting for a signal, a lift
// or a raise rather than for the pace), their cost and this run's spent
// by name, the DynamoDB units attributed so far, and the ring of samples
// (Ring, oldest first; empty when none). PausedFor is the time its
// ended pauses took (ledger.Batch.PausedMs), left out of its average: a
// run paused for an hour has not been running slowly.
type Run struct {
	Items       int64
	StartedAt   time.Time
	Paused      bool
	PausedFor   time.Duration
	Done        int64
	Held        int64
	Cost, Spent pipeline.CostSum
	Usage       api.Usage
	Ring        []Sample
}

// MinAveragedShare is the share of a run's items (1 in it) that must have
// ended before its run_spent and DynamoDB units are projected by scaling
// the run's average: 10. A run's first items carry its early waste — the
// calls a downstream throttled before its pace was found, the takes of
// every item in flight — and scaled from them to the whole run it read,
// for a new user's 300 items after 10 s of 429s, 3,270 calls and 3,150
// write units where the run spent 399 and 219.
const MinAveragedShare = 10

// Estimate is r's pace and projection (api.Estimate) at now: nil while
// it has ended no item, before its start, or while it is paused (a paused
// run has no pace to project). The pace is the recent one (Recent over
// r.Ring) when the ring holds a sample of the window, else the run's
// average; the cost and run_spent are projected from the window's cost
// and spend per item ended when the window has them (a sample without
// them: the run's average) — so that a burst of throttled or retried
// calls early in the run is not scaled to the whole run once it has
// passed — and units from the run's average; run_spent and units by the
// run's average only once a MinAveragedShare-th of its items ended (else
// none: absent). Held items are not
// Remaining and not in FinishAt (nothing says when they are moved on),
// but are in the projected cost, as items that run once moved on. Pure.
func Estimate(r Run, now time.Time) *api.Estimate {
	secs := (now.Sub(r.StartedAt) - max(r.PausedFor, 0)).Seconds()
	if r.Done <= 0 || r.StartedAt.IsZero() || secs <= 0 || r.Paused {
		return nil
	}
	done := min(r.Done, r.Items)
	held := min(max(r.Held, 0), r.Items-done)
	e := &api.Estimate{RateBasis: api.RateBasisRunAverage, Since: r.StartedAt, Ended: done, RatePerSecond: float64(done) / secs,
		Remaining: max(0, r.Items-done-held), Held: held}
	e.RunRatePerSecond = e.RatePerSecond
	e.ProjectedCost = project(r.Cost, r.Items, done)
	averaged := done*MinAveragedShare >= r.Items // enough ended to scale the run's average from
	if averaged {
		e.ProjectedRunSpent = project(r.Spent, r.Items, done)
	}
	if w, ok := Recent(r.Ring, now, done, r.Cost, r.Spent); ok {
		e.RateBasis, e.Since, e.Ended, e.RatePerSecond = api.RateBasisRecent, w.Since, w.Ended, w.RatePerSecond
		if !w.NoCost && len(r.Cost) > 0 {
			e.ProjectedCost = projectAhead(r.Cost, w.Cost, e.Remaining+held, w.Ended)
		}
		if !w.NoCost && len(r.Spent) > 0 {
			e.ProjectedRunSpent = projectAhead(r.Spent, w.Spent, e.Remaining+held, w.Ended)
		}
	}
	e.FinishAt = now.Add(ahead(e.Remaining, e.RatePerSecond)).Truncate(time.Second)
	if averaged && (r.Usage.DynamoDBWriteUnits > 0 || r.Usage.DynamoDBReadUnits > 0) {
		f := float64(r.Items) / float64(done)
		e.ProjectedUsage = &api.Usage{DynamoDBWriteUnits: math.Round(r.Usage.DynamoDBWriteUnits*f*10) / 10, DynamoDBReadUnits: math.Round(r.Usage.DynamoDBReadUnits*f*10) / 10}
	}
	return e
}

// maxAhead bounds a projected wait so that a very slow pace cannot
// overflow time.Duration (≈ 292 years): 100 years.
const maxAhead = 100 * 365 * 24 * time.Hour

// ahead is how long left items take at per items a second (per > 0),
// whole seconds rounded up, at most maxAhead.
func ahead(left int64, per float64) time.Duration {
	return time.Duration(min(math.Ceil(float64(left)/per), maxAhead.Seconds())) * time.Second
}

// project is sum × items / done per name, to projectionPlaces places; nil
// when sum is empty.
func project(sum pipeline.CostSum, items, done int64) pipeline.CostSum {
	if len(sum) == 0 {
		return nil
	}
	out := pipeline.CostSum{}
	for name, v := range sum {
		out[name] = v.Mul(decimal.NewFromInt(items)).DivRound(decimal.NewFromInt(done), projectionPlaces)
	}
	return out
}

// projectAhead is sum + left × window / ended per name (the cost so far
// and the items still to end at the window's cost per item), to
// projectionPlaces places.
func projectAhead(sum, window pipeline.CostSum, left, ended int64) pipeline.CostSum {
	out := pipeline.CostSum{}
	for name, v := range sum {
		out[name] = v.Add(window[name].Mul(decimal.NewFromInt(left)).DivRound(decimal.NewFromInt(ended), projectionPlaces)).Round(projectionPlaces)
	}
	return out
}
