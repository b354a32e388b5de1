package api

import (
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// A sampled batch (Plan.Sample N) runs the first N items of its source
// first — rounded up to whole items-queue messages, so at most N +
// items_per_message − 1 — and holds every other item until a decision:
// approved (POST /batches/{id}/approve, or by itself under
// Plan.AutoApproveUSD), the rest runs, the sample's items are not run
// again; rejected (POST /batches/{id}/reject), the run is cancelled.
// Once the sample's items have ended (succeeded, failed or held), the
// item function writes an estimate of the whole run from them
// (SampleEstimate) and the batch awaits approval. The held items wait on
// the queue as a paused batch's do (PauseCheckAt: re-sent at the checks
// of a pause that began at the run's start, at most 12 times an hour),
// using no attempt and no call; an approval reaches them at their next
// check. Only a batch's first run samples: a resume or a correction runs
// at once. docs/api.md "Sample and approve".

// MaxSample is the largest sample a batch may ask: 100,000 items.
const MaxSample = 100_000

// ApprovalState is where a sampled batch stands (Approval.State).
type ApprovalState string

// The approval states.
const (
	// ApprovalSampling: the sample's items are running; the rest waits.
	ApprovalSampling ApprovalState = "sampling"
	// ApprovalAwaiting: the sample has ended and its estimate is written;
	// the rest waits for approve or reject.
	ApprovalAwaiting ApprovalState = "awaiting_approval"
	// ApprovalApproved: approved (by a caller, or by the estimate under
	// Plan.AutoApproveUSD); the rest runs.
	ApprovalApproved ApprovalState = "approved"
	// ApprovalRejected: rejected by a caller; the run is cancelled.
	ApprovalRejected ApprovalState = "rejected"
)

// Who decided an approval (Approval.DecidedBy).
const (
	DecidedByCaller = "caller"
	DecidedByAuto   = "auto_approve"
)

// Approval is a sampled batch's sample and decision (Batch.Approval;
// absent on a batch without a sample). JSON: {"state":
// "awaiting_approval", "sample": 200, "estimate": {…}}; once decided,
// "decided_at" and "decided_by" ("caller" or "auto_approve").
type Approval struct {
	State     ApprovalState   `json:"state"`
	Sample    int             `json:"sample"`
	DecidedAt time.Time       `json:"decided_at,omitzero"`
	DecidedBy string          `json:"decided_by,omitempty"`
	Estimate  *SampleEstimate `json:"estimate,omitempty"`
	// Decision is the stored decision (ApprovalApproved or
	// ApprovalRejected; "" while none), from which State is made
	// (ApprovalOf).
	Decision ApprovalState `json:"-"`
}

// ApprovalOf is the approval of a batch sampling sample items with the
// stored decision (by, at) and estimate: its State is the decision when
// there is one, else awaiting_approval once the estimate is written, else
// sampling. nil when sample is 0.
func ApprovalOf(sample int, decision ApprovalState, by string, at time.Time, est *SampleEstimate) *Approval {
	if sample <= 0 {
		return nil
	}
	a := &Approval{Sample: sample, Decision: decision, DecidedBy: by, DecidedAt: at, Estimate: est, State: ApprovalSampling}
	switch {
	case decision != "":
		a.State = decision
	case est != nil:
		a.State = ApprovalAwaiting
	}
	return a
}

// Holds reports whether a's batch still holds the items outside its
// sample: not approved. A rejected batch holds them too, until its
// cancel (written after the rejection) ends them: the rest never runs
// unapproved, whatever happens between the two writes.
func (a *Approval) Holds() bool { return a != nil && a.Decision != ApprovalApproved }

// The checks of the messages a sampled first run holds (the item
// function's holdForApproval, and a track's holdTrack): each held message
// comes back at every check, so a decision reaches the rest at the first
// check after it. The checks are dense while a person is likely watching
// (the minutes after the estimate) and thin out after, as a pause's do.
const (
	// ApprovalQuickEvery is the time between two checks during the first
	// ApprovalQuickFor of the hold: 10 s, so that an approval given then
	// reaches the rest within about 14 s (the next check, plus
	// ApprovalGrace and up to as much again).
	ApprovalQuickEvery = 10 * time.Second
	// ApprovalQuickFor is how long the checks come every
	// ApprovalQuickEvery: 10 minutes after the hold began (60 re-sends
	// per held message).
	ApprovalQuickFor = 10 * time.Minute
	// ApprovalCheckEvery is the time between two checks from
	// ApprovalQuickFor to ApprovalSlowAfter: 1 minute (an approval then
	// reaches the rest within about 64 s; 50 re-sends per held message).
	ApprovalCheckEvery = time.Minute
	// ApprovalSlowAfter is when the checks come every MaxCheckInterval
	// (5 minutes, 12 re-sends an hour), as for a pause: 1 hour after the
	// hold began. A batch left awaiting costs 110 re-sends per held
	// message in its first hour.
	ApprovalSlowAfter = time.Hour
	// ApprovalGrace is how long after a check the held messages come back
	// (plus up to as much again, at random, to spread them): 2 s, for
	// the clocks of the caller's write and the item function to differ.
	// An approval has no probe to wait for, unlike a pause (CheckGrace).
	ApprovalGrace = 2 * time.Second
)

// ApprovalCheckAt is the first check strictly after now of a hold that
// began at since (the sample's estimate's MadeAt; the run's start while
// the sample runs): since + 10 s, 20 s, … 10 m, then 11 m, 12 m, … 60 m,
// then every 5 minutes.
func ApprovalCheckAt(since, now time.Time) time.Time {
	e := max(now.Sub(since), 0)
	switch {
	case e < ApprovalQuickFor:
		return since.Add((e/ApprovalQuickEvery + 1) * ApprovalQuickEvery)
	case e < ApprovalSlowAfter:
		return since.Add(ApprovalQuickFor + ((e-ApprovalQuickFor)/ApprovalCheckEvery+1)*ApprovalCheckEvery)
	}
	return since.Add(ApprovalSlowAfter + ((e-ApprovalSlowAfter)/MaxCheckInterval+1)*MaxCheckInterval)
}

// ApprovalWait is how long a held message waits at now, for a hold that
// began at since: to the next check (ApprovalCheckAt), plus
// ApprovalGrace and jitter × ApprovalGrace more (jitter in 0–1, the
// caller's random draw, so that the held messages come back spread), at
// most MaxResendDelay.
func ApprovalWait(since, now time.Time, jitter float64) time.Duration {
	j := time.Duration(max(0, min(jitter, 1)) * float64(ApprovalGrace))
	return min(ApprovalCheckAt(since, now).Sub(now)+ApprovalGrace+j, MaxResendDelay)
}

// ApprovalHoldSince is when b's hold for its approval began, from which
// its checks count (ApprovalCheckAt): the sample's estimate's MadeAt once
// it is written, else the run's start.
func (b Batch) ApprovalHoldSince() time.Time {
	if b.Approval != nil && b.Approval.Estimate != nil {
		return b.Approval.Estimate.MadeAt
	}
	return b.RunStartedAt
}

// ApprovalReaches is when b's approval reaches its held rest at the
// latest (ApprovalReachesBy from ApprovalHoldSince, at the decision);
// zero when b is not approved.
func (b Batch) ApprovalReaches() time.Time {
	a := b.Approval
	if a == nil || a.State != ApprovalApproved || a.DecidedAt.IsZero() {
		return time.Time{}
	}
	return ApprovalReachesBy(b.ApprovalHoldSince(), a.DecidedAt)
}

// ApprovalReachesBy is when an approval given at now reaches the rest of
// a hold that began at since, at the latest: the next check, plus twice
// ApprovalGrace (the held messages come back by then; a track then
// starts its next unit at once, a held message when an item function
// receives it).
func ApprovalReachesBy(since, now time.Time) time.Time {
	return ApprovalCheckAt(since, now).Add(2 * ApprovalGrace)
}

// ApprovalRestStart is when an approval given at decided starts the
// rest of a run that began at runStarted and whose estimate was made at
// madeAt, as the held messages' checks have it. A held message comes
// back ApprovalGrace after a check, plus up to as much again at random,
// and waits for the next check if the batch still holds: so the first
// to see the approval is one of the last check's still on its way back
// (a check less than 2 × ApprovalGrace before decided), else one of the
// next check's, ApprovalGrace after it. The checks count from the run's
// start for the messages held while the sample ran, until they come
// back from the first of those checks after the estimate, and from the
// estimate after that (ApprovalHoldSince). The report's
// SampleCheck.ReachSeconds.
func ApprovalRestStart(runStarted, madeAt, decided time.Time) time.Time {
	since := madeAt
	if decided.Before(ApprovalCheckAt(runStarted, madeAt).Add(2 * ApprovalGrace)) {
		since = runStarted
	}
	c := ApprovalCheckAt(since, decided.Add(-2*ApprovalGrace)).Add(ApprovalGrace)
	if c.Before(decided) {
		return decided
	}
	return c
}

// SampleEstimate is what a sample projects for its whole run, made once,
// when the sample's items had ended (the item function, from the run's
// counters: shared/sample.Estimate). JSON names as tagged; dollars are
// US dollars to 6 places.
type SampleEstimate struct {
	// MadeAt is when it was made: the sample's end, as the counters
	// showed it.
	MadeAt time.Time `json:"made_at"`
	// Items is the run's items; SampleItems the sample's items that had
	// ended (succeeded, failed, quarantined or held) when it was made.
	Items       int64 `json:"items"`
	SampleItems int64 `json:"sample_items"`
	// Failed is the sample's items that failed or were quarantined;
	// FailureRate is Failed / SampleItems, and FailureLow–FailureHigh its
	// 95 % Wilson score interval (Wilson 1927; for the whole run's rate
	// if the sample is a fair one: the first items may not be);
	// ProjectedFailures is FailureRate × Items, rounded.
	Failed            int64   `json:"failed"`
	FailureRate       float64 `json:"failure_rate"`
	FailureLow        float64 `json:"failure_low"`
	FailureHigh       float64 `json:"failure_high"`
	ProjectedFailures int64   `json:"projected_failures"`
	// SampleUSD is what the sample spent as a budget counts it
	// (spend.RunSpend: the pipeline's reported "usd" plus the DynamoDB
	// request units' cost; Lambda, SQS and S3 not counted); CostUSD is
	// the whole run's projection, SampleUSD × Items / SampleItems, with
	// its parts PipelineUSD and InfraUSD.
	SampleUSD   float64 `json:"sample_usd"`
	CostUSD     float64 `json:"cost_usd"`
	PipelineUSD float64 `json:"pipeline_usd"`
	InfraUSD    float64 `json:"infra_usd"`
	// ProjectedCost is the pipeline's reported costs by name (Census.Cost)
	// scaled the same way.
	ProjectedCost pipeline.CostSum `json:"projected_cost,omitempty"`
	// SampleSeconds is the sample's time, from the run's start to its
	// counters' last update before MadeAt; ItemsPerSecond the pace the rest is projected at, and
	// Seconds the rest's time at it (Items − SampleItems items); Pace
	// says what set the pace (shared/sample.Estimate).
	SampleSeconds  float64 `json:"sample_seconds"`
	ItemsPerSecond float64 `json:"items_per_second"`
	Seconds        float64 `json:"seconds"`
	Pace           string  `json:"pace"`
}

// SampleCheck is a sampled first run's estimate set beside what the run
// did once approved: the report's "sample" (Report.Sample, written by
// finalize with shared/sample.Check), so that an estimate can be judged
// by the run it was made for. JSON:
//
//	{"estimate": {…}, "decided_by": "caller", "decided_at": "…",
//	 "cost_usd": 20.000478, "cost_diff": 0.000002,
//	 "ended": 2000, "failed": 80, "failure_rate": 0.04,
//	 "failure_in_interval": true,
//	 "rest_seconds": 40.2, "rest_diff": 19.1}
type SampleCheck struct {
	// Estimate is the sample's estimate as the approval was given on
	// it; DecidedBy and DecidedAt the approval's.
	Estimate  SampleEstimate `json:"estimate"`
	DecidedBy string         `json:"decided_by"`
	DecidedAt time.Time      `json:"decided_at"`
	// CostUSD is what the whole run spent as the estimate counts it
	// (spend.RunSpend of the report's census.run_spent and usage: the
	// pipeline's reported "usd" plus the DynamoDB request units' cost;
	// Lambda, SQS and S3 not counted), and CostDiff its difference from
	// Estimate.CostUSD as a share of it ((actual − estimate) ÷ estimate;
	// 0 when the estimate is 0).
	CostUSD  float64 `json:"cost_usd"`
	CostDiff float64 `json:"cost_diff"`
	// Ended is the run's items that succeeded, failed or were
	// quarantined, Failed those failed or quarantined, FailureRate
	// Failed ÷ Ended, and FailureInInterval whether it lies within the
	// estimate's 95 % interval (Estimate.FailureLow–FailureHigh).
	Ended             int64   `json:"ended"`
	Failed            int64   `json:"failed"`
	FailureRate       float64 `json:"failure_rate"`
	FailureInInterval bool    `json:"failure_in_interval"`
	// RestSeconds is the time from the approval to the run's end.
	// ReachSeconds is the approval's wait for the held messages' next
	// check (ApprovalRestStart − DecidedAt: known once approved, so the
	// estimate leaves it out), and RestDiff RestSeconds' difference from
	// Estimate.Seconds + ReachSeconds as a share of it.
	RestSeconds  float64 `json:"rest_seconds"`
	ReachSeconds float64 `json:"reach_seconds"`
	RestDiff     float64 `json:"rest_diff"`
}
