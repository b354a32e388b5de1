package ledger

import (
	"math"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// projectionPlaces is the decimal places a projected cost keeps: an
// estimate, not a sum, so its last digits carry no meaning (a cost of
// 10^-9 of its unit and less per run shows as 0).
const projectionPlaces = 9

// EstimateOf is the running run's pace and projection (api.Estimate) at
// now from its counters p: nil while it has ended no item, before its
// start, or while b is paused (a paused run has no pace to project). The
// run's items are b.RunItems(): a correction run's own, else the batch's.
// The pace is the recent one (eta.Recent over p.Pace) when the ring
// holds a sample of the window, else the run's average.
func EstimateOf(b Batch, p Progress, now time.Time) *api.Estimate {
	items := b.RunItems()
	secs := now.Sub(b.RunStartedAt).Seconds()
	if p.Done <= 0 || b.RunStartedAt.IsZero() || secs <= 0 || b.Pause != nil {
		return nil
	}
	done := min(p.Done, items)
	e := &api.Estimate{RateBasis: api.RateBasisRunAverage, Since: b.RunStartedAt, Ended: done, RatePerSecond: float64(done) / secs, Remaining: max(0, items-done)}
	e.RunRatePerSecond = e.RatePerSecond
	e.ProjectedCost = project(p.Cost, items, done)
	if w, ok := eta.Recent(p.Pace, now, done, p.Cost); ok {
		e.RateBasis, e.Since, e.Ended, e.RatePerSecond = api.RateBasisRecent, w.Since, w.Ended, w.RatePerSecond
		if !w.NoCost && len(p.Cost) > 0 {
			e.ProjectedCost = projectAhead(p.Cost, w.Cost, e.Remaining, w.Ended)
		}
	}
	e.FinishAt = now.Add(ahead(e.Remaining, e.RatePerSecond)).Truncate(time.Second)
	e.ProjectedRunSpent = project(p.Spent, items, done)
	if p.Usage.DynamoDBWriteUnits > 0 || p.Usage.DynamoDBReadUnits > 0 {
		f := float64(items) / float64(done)
		e.ProjectedUsage = &api.Usage{DynamoDBWriteUnits: math.Round(p.Usage.DynamoDBWriteUnits*f*10) / 10, DynamoDBReadUnits: math.Round(p.Usage.DynamoDBReadUnits*f*10) / 10}
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
