// Package sample makes a sampled batch's estimate of its whole run from
// the sample's counters (api.SampleEstimate): cost, failure rate with its
// interval, and time at the batch's pace. Pure: the item function
// (shared/worker) reads the counters and writes the estimate once, when
// the sample's items have ended. docs/api.md "Sample and approve",
// docs/adr/0038.
package sample

import (
	"fmt"
	"math"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Run is what an estimate reads of a sampled run when its sample has
// ended.
type Run struct {
	// Items is the run's items; Ended the sample's items ended (succeeded,
	// failed, quarantined or held) and Failed those failed or
	// quarantined.
	Items, Ended, Failed int64
	// StartedAt is the run's start (api.Batch.RunStartedAt), Now the
	// estimate's time, and EndedAt the sample's end as its counters tell
	// it (their last update, ledger.Progress.UpdatedAt): the estimate may
	// be made later than that (zero: Now).
	StartedAt, Now, EndedAt time.Time
	// PipelineUSD and InfraUSD are what the sample spent (spend.Spend:
	// the pipeline's reported "usd", the DynamoDB units' cost); Cost the
	// pipeline's reported costs by name.
	PipelineUSD, InfraUSD decimal.Decimal
	Cost                  pipeline.CostSum
	// PerMessage is the batch's items per message (K ≥ 1); Parallel the
	// messages the stack's item function runs at once (the items event
	// source's maximum concurrency × the messages it hands one
	// invocation), 0 when unknown. A batch with max_concurrency N gives 1
	// and N: its tracks run N items at once, one at a time each.
	PerMessage, Parallel int
	// PerInvocation is how many messages the items event sources hand
	// one invocation (config.DefaultItemBatchSize, 10), so that the
	// rest's start follows their scaling (Ramp); 0: the rest runs at its
	// full parallelism from its start.
	PerInvocation int
	// Ramp is how the items event source scales from an idle queue; the
	// zero value is StandardRamp.
	Ramp Ramp
	// RequestsPerSecond is the batch's rate (api.Rate.RequestsPerSecond),
	// 0 for none.
	RequestsPerSecond float64
	// Busy is the item-slot time the sample's items took: the time of
	// the invocations that ran them × the items each ran at once
	// (ledger.Progress.BusyMs); Slots the items one invocation of the
	// rest runs at once (the item function's ItemConcurrency, at most
	// PerInvocation × PerMessage). Either 0 (a batch counted without
	// lanes, tracks, an unknown stack): the pace per message is taken
	// from the sample's time over the messages it ran at once.
	Busy  time.Duration
	Slots int
}

// z95 is the standard normal quantile for a two-sided 95 % interval.
const z95 = 1.959964

// Wilson is the 95 % Wilson score interval of a proportion of failed in
// n trials (E. B. Wilson, "Probable inference, the law of succession, and
// statistical inference", JASA 22, 1927): unlike p ± z·√(p(1−p)/n) it
// stays within [0, 1] and is not empty at 0 or n failures. n ≤ 0: [0, 1].
func Wilson(failed, n int64) (low, high float64) {
	if n <= 0 {
		return 0, 1
	}
	nf, p := float64(n), float64(failed)/float64(n)
	z2 := z95 * z95
	den := 1 + z2/nf
	mid := (p + z2/(2*nf)) / den
	half := z95 / den * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return math.Max(0, mid-half), math.Min(1, mid+half)
}

// Ramp is how an SQS event source scales from an idle queue: Start
// invocations at once, PerMinute more a minute, up to its concurrency.
// The zero Ramp is StandardRamp.
type Ramp struct {
	Start, PerMinute int
}

// RampStart and RampPerMinute are how an SQS event source scales on a
// standard queue in its default (standard) mode: "Lambda starts
// processing five batches at a time with five concurrent invocations of
// your function. If messages are still available, Lambda increases the
// number of processes that are reading batches by up to 300 more
// instances per minute", up to its maximum concurrency (AWS Lambda
// developer guide, "Configuring scaling behavior for SQS event source
// mappings"). After a sample's hold the queue was idle, so the rest
// starts from RampStart again.
const (
	RampStart     = 5
	RampPerMinute = 300
)

// StandardRamp is the event source's default scaling (RampStart,
// RampPerMinute).
var StandardRamp = Ramp{Start: RampStart, PerMinute: RampPerMinute}

// ProvisionedRampPerMinute is how fast an event source in provisioned
// mode adds concurrency: "quickly adding up to 1,000 concurrency per
// minute" (AWS Lambda developer guide, "Configuring scaling behavior for
// SQS event source mappings").
const ProvisionedRampPerMinute = 1000

// ProvisionedRamp is the scaling of an event source in provisioned mode
// with minimumPollers pollers kept ready, each driving up to
// perPoller invocations at once ("each event poller can handle … up to
// 10 concurrent invokes", the same guide): it starts at minimumPollers ×
// perPoller — an inference, the guide saying only that the pollers
// "remain ready" — and adds ProvisionedRampPerMinute a minute.
func ProvisionedRamp(minimumPollers, perPoller int) Ramp {
	return Ramp{Start: max(1, minimumPollers*perPoller), PerMinute: ProvisionedRampPerMinute}
}

func (r Ramp) orStandard() Ramp {
	if r.Start <= 0 || r.PerMinute <= 0 {
		return StandardRamp
	}
	return r
}

// Estimate is r's estimate of its whole run. Costs scale linearly:
// the sample's spend × Items / Ended. The rest's pace per message at
// once is the sample's items per item-slot second (Ended over Busy) ×
// the Slots of an invocation over its PerInvocation messages — or, with
// those unknown, its own pace (Ended over the seconds
// from StartedAt to EndedAt) over the messages it ran at once: min(its
// messages, Parallel, Ramp.Start × PerInvocation) — and the rest runs
// min(its messages, Parallel) at once — reached as the event source scales
// (Ramp.Start invocations of PerInvocation messages, Ramp.PerMinute more
// a minute) when PerInvocation is set — and no faster than the batch's
// rate. What it leaves out, said in the docs: a downstream that slows
// under the larger load, and a stack that cannot run the parallelism
// its settings allow (the emulator, on two cores). nil when no sample
// item has ended.
func Estimate(r Run) *api.SampleEstimate {
	if r.Ended <= 0 || r.Items <= 0 {
		return nil
	}
	ended := min(r.Ended, r.Items)
	scale := decimal.NewFromInt(r.Items).Div(decimal.NewFromInt(ended))
	e := &api.SampleEstimate{MadeAt: r.Now.UTC().Truncate(time.Millisecond), Items: r.Items, SampleItems: ended, Failed: min(r.Failed, ended)}
	e.FailureRate = float64(e.Failed) / float64(ended)
	e.FailureLow, e.FailureHigh = Wilson(e.Failed, ended)
	e.ProjectedFailures = int64(math.Round(e.FailureRate * float64(r.Items)))
	e.SampleUSD = usd(r.PipelineUSD.Add(r.InfraUSD))
	e.PipelineUSD = usd(r.PipelineUSD.Mul(scale))
	e.InfraUSD = usd(r.InfraUSD.Mul(scale))
	e.CostUSD = usd(r.PipelineUSD.Add(r.InfraUSD).Mul(scale))
	if len(r.Cost) > 0 {
		e.ProjectedCost = pipeline.CostSum{}
		for name, v := range r.Cost {
			e.ProjectedCost[name] = v.Mul(scale).Round(9)
		}
	}
	end := r.Now
	if !r.EndedAt.IsZero() && r.EndedAt.Before(end) && r.EndedAt.After(r.StartedAt) {
		end = r.EndedAt
	}
	secs := end.Sub(r.StartedAt).Seconds()
	e.SampleSeconds = math.Round(secs*1000) / 1000
	if secs <= 0 {
		e.Pace = "no pace: the sample took no measurable time"
		return e
	}
	own := float64(ended) / secs
	k := int64(max(1, r.PerMessage))
	units := (ended + k - 1) / k
	rest := (r.Items - ended + k - 1) / k
	left := float64(r.Items - ended)
	pace, why := own, "the sample's pace" // the pace itself is ItemsPerSecond
	ramp := r.Ramp.orStandard()
	if p := int64(r.Parallel); p > 0 && units > 0 {
		was := min(units, p)
		if r.PerInvocation > 0 {
			was = min(was, int64(ramp.Start*r.PerInvocation))
		}
		at := min(rest, p)
		switch busy := r.Busy.Seconds(); {
		case busy > 0 && at > 0 && r.Slots > 0 && r.PerInvocation > 0:
			slot := float64(ended) / busy
			per := slot * float64(r.Slots) / float64(r.PerInvocation) // a message's share of an invocation's
			pace = left / rampSeconds(left, per, float64(at), r.PerInvocation, ramp)
			why = fmt.Sprintf("the sample's %.3g items a second per item running (its %d items over %.3g s of its invocations' item slots) × %.4g, the rest's average of items at once, up to %.3g invocations of %d", slot, ended, busy, pace/slot, float64(at)/float64(r.PerInvocation), r.Slots)
		case at > was:
			pace = left / rampSeconds(left, own/float64(was), float64(at), r.PerInvocation, ramp)
			why = fmt.Sprintf("the sample's pace (%.3g items/s) × %.3g, the rest's average gain from the sample's %d messages at once to %d", own, pace/own, was, at)
		}
		if pace != own {
			if r.PerInvocation > 0 {
				why += fmt.Sprintf(", reached as the event source adds %d invocations of %d messages a minute from %d (the ramp counted in the average)", ramp.PerMinute, r.PerInvocation, ramp.Start)
			}
		}
	}
	if rps := r.RequestsPerSecond; rps > 0 && rps < pace {
		pace, why = rps, fmt.Sprintf("the batch's rate (%.3g requests/s), under the sample's pace", rps)
	}
	e.ItemsPerSecond = math.Round(pace*1000) / 1000
	e.Seconds = math.Ceil(left / pace)
	e.Pace = why
	return e
}

// rampSeconds is how long items take at per items a second for each
// message running, with up to at messages running: from ramp.Start
// invocations of perInvocation messages, ramp.PerMinute more a minute
// (a linear ramp, then at; perInvocation 0: at from the start).
func rampSeconds(items, per, at float64, perInvocation int, ramp Ramp) float64 {
	if perInvocation <= 0 {
		return items / (per * at)
	}
	r0 := float64(ramp.Start * perInvocation)
	if at <= r0 {
		return items / (per * at)
	}
	grow := float64(ramp.PerMinute*perInvocation) / 60 // messages at once gained a second
	tc := (at - r0) / grow                             // when the ramp reaches at
	if ramp := per * (r0*tc + grow*tc*tc/2); items > ramp {
		return tc + (items-ramp)/(per*at)
	}
	// per × (r0 t + grow t²/2) = items
	return (-r0 + math.Sqrt(r0*r0+2*grow*items/per)) / grow
}

// usd is d in US dollars to 6 places, as a float.
func usd(d decimal.Decimal) float64 {
	f, _ := d.Round(6).Float64()
	return f
}

// Done is what a sampled run did, as its report counts it: the census
// (Failed and Quarantined of Succeeded, Failed and Quarantined ended),
// what it spent as a budget counts it (spend.Spend.USD), when it started
// (api.Batch.RunStartedAt) and when it finished.
type Done struct {
	Census                api.Census
	SpentUSD              decimal.Decimal
	StartedAt, FinishedAt time.Time
}

// Check sets a's estimate beside what its run did (d): the report's
// api.SampleCheck. nil unless a was approved on an estimate: a rejected
// or undecided run did not run its rest, and its estimate stays on the
// batch's approval.
func Check(a *api.Approval, d Done) *api.SampleCheck {
	if a == nil || a.Decision != api.ApprovalApproved || a.Estimate == nil {
		return nil
	}
	e := *a.Estimate
	c := &api.SampleCheck{Estimate: e, DecidedBy: a.DecidedBy, DecidedAt: a.DecidedAt, CostUSD: usd(d.SpentUSD)}
	c.CostDiff = diff(c.CostUSD, e.CostUSD)
	c.Ended = d.Census.Succeeded + d.Census.Failed + d.Census.Quarantined
	c.Failed = d.Census.Failed + d.Census.Quarantined
	if c.Ended > 0 {
		c.FailureRate = float64(c.Failed) / float64(c.Ended)
	}
	c.FailureInInterval = c.Ended > 0 && c.FailureRate >= e.FailureLow && c.FailureRate <= e.FailureHigh
	if !a.DecidedAt.IsZero() {
		if d.FinishedAt.After(a.DecidedAt) {
			c.RestSeconds = math.Round(d.FinishedAt.Sub(a.DecidedAt).Seconds()*1000) / 1000
		}
		c.ReachSeconds = math.Round(max(0, api.ApprovalRestStart(d.StartedAt, e.MadeAt, a.DecidedAt).Sub(a.DecidedAt).Seconds())*1000) / 1000
	}
	c.RestDiff = diff(c.RestSeconds, e.Seconds+c.ReachSeconds)
	return c
}

// diff is (actual − estimate) ÷ estimate to 4 places; 0 when the
// estimate is 0.
func diff(actual, estimate float64) float64 {
	if estimate == 0 {
		return 0
	}
	return math.Round((actual-estimate)/estimate*10000) / 10000
}
