package api

import (
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Census is the count of a run's items by outcome, plus the cost rollup. It
// is computed from the item rows, never from counters.
type Census struct {
	Total       int64 `json:"total"`
	Succeeded   int64 `json:"succeeded"`
	Failed      int64 `json:"failed"`
	Quarantined int64 `json:"quarantined"`
	Cancelled   int64 `json:"cancelled"`
	// Withheld counts the held items (see HeldOutcomes): never in a
	// finished run's census, whose items all ended (a run with a held
	// item stays running); a running batch's live census counts them
	// from its counters.
	Withheld int64 `json:"withheld"`
	// Exhausted counts the items held at a per-item ceiling
	// (OutcomeExhausted), as Withheld.
	Exhausted int64 `json:"exhausted"`
	// Suspended counts the suspended items (held, as Withheld).
	Suspended int64 `json:"suspended"`
	InFlight  int64 `json:"in_flight"`
	Pending   int64 `json:"pending"`
	// Cost is the exact decimal sum of each cost name over the counted
	// items, each item counting the attempt that ended it (JSON numbers in
	// plain decimal: ten items of 0.1 usd give "usd": 1). An item answered
	// from an earlier run counts that run's ending attempt.
	Cost pipeline.CostSum `json:"cost"`
	// RunSpent is what this run spent: every attempt of this run, retried
	// and ending ones alike, summed per name the same way (an item retried
	// twice before it succeeded counts three calls here, one in Cost),
	// those that failed, timed out or were cut off at the deadline margin
	// included, as far as their pipeline reported a cost (the webhook
	// counts every call that reached its receiver). An attempt whose
	// process died before it could write (a crash) is not in it.
	RunSpent pipeline.CostSum `json:"run_spent"`
	// CostNamesOmitted is how many cost names Bounded left out of Cost
	// and RunSpent together (0 when none was): the batch row and the
	// completion event carry at most MaxCensusCostNames per rollup, the
	// report every one.
	CostNamesOmitted int `json:"cost_names_omitted,omitempty"`
}

// MaxCensusCostNames is the most cost names per rollup (Cost, RunSpent)
// that the census on the batch row and in the completion event carries:
// 100, ≈ 6.5 KB per rollup at pipeline.MaxCostNameBytes, so that however
// many distinct names a batch's items report, the batch row stays far
// under DynamoDB's 400 KB item limit and the event under EventBridge's
// 256 KB entry limit. The report (S3) has every name.
const MaxCensusCostNames = 100

// Bounded returns c with each cost rollup cut to its first
// MaxCensusCostNames names in byte order, CostNamesOmitted counting what
// was left out (see the report for them). c is not changed.
func (c Census) Bounded() Census {
	cut := func(s pipeline.CostSum) pipeline.CostSum {
		if len(s) <= MaxCensusCostNames {
			return s
		}
		out := make(pipeline.CostSum, MaxCensusCostNames)
		for _, name := range s.Names()[:MaxCensusCostNames] {
			out[name] = s[name]
		}
		c.CostNamesOmitted += len(s) - MaxCensusCostNames
		return out
	}
	c.Cost, c.RunSpent = cut(c.Cost), cut(c.RunSpent)
	return c
}

// Add counts one item of outcome o with cost c.
func (c *Census) Add(o Outcome, cost pipeline.Cost) {
	switch o {
	case OutcomeSucceeded:
		c.Succeeded++
	case OutcomeFailed:
		c.Failed++
	case OutcomeQuarantined:
		c.Quarantined++
	case OutcomeCancelled:
		c.Cancelled++
	case OutcomeWithheld:
		c.Withheld++
	case OutcomeExhausted:
		c.Exhausted++
	case OutcomeSuspended:
		c.Suspended++
	case OutcomeInFlight:
		c.InFlight++
	default:
		c.Pending++
	}
	if c.Cost == nil {
		c.Cost = pipeline.CostSum{}
	}
	c.Cost.Add(cost)
}

// Count returns the number of items of outcome o.
func (c Census) Count(o Outcome) int64 {
	switch o {
	case OutcomeSucceeded:
		return c.Succeeded
	case OutcomeFailed:
		return c.Failed
	case OutcomeQuarantined:
		return c.Quarantined
	case OutcomeCancelled:
		return c.Cancelled
	case OutcomeWithheld:
		return c.Withheld
	case OutcomeExhausted:
		return c.Exhausted
	case OutcomeSuspended:
		return c.Suspended
	case OutcomeInFlight:
		return c.InFlight
	}
	return c.Pending
}

// Held is the number of held items (withheld, exhausted, suspended).
func (c Census) Held() int64 {
	return c.Withheld +
		c.Exhausted +
		c.Suspended
}

// Done reports whether every item is terminal: none in flight, pending
// or held.
func (c Census) Done() bool { return c.InFlight == 0 && c.Pending == 0 && c.Held() == 0 }

// NeedsAttention reports whether any item is failed, quarantined, held
// or in flight.
func (c Census) NeedsAttention() bool { return c.Failed+c.Quarantined+c.InFlight+c.Held() > 0 }

// Report is what finalize writes once per run to
// batches/{id}/runs/{run}/report.json.
type Report struct {
	BatchID     string `json:"batch_id"`
	Run         int    `json:"run"`
	Pipeline    string `json:"pipeline"`
	SubmittedBy string `json:"submitted_by,omitempty"` // Batch.SubmittedBy
	Status      Status `json:"status"`
	StopDetail  string `json:"stop_detail,omitempty"` // why a stopped run stopped
	// Stop is a stopped run's stop: why, and how many items already in
	// flight finished after it (so the stop line and the census agree).
	Stop *StopSummary `json:"stop,omitempty"`
	// NeedsAttention is the census's (Census.NeedsAttention), or true
	// when the run ended keeping a halt (Halts): its items would be
	// withheld again by a resume until the halt is lifted.
	NeedsAttention bool      `json:"needs_attention"`
	Census         Census    `json:"census"`
	Threshold      Threshold `json:"threshold"`
	Verdict        Verdict   `json:"verdict"`
	Manifest       Location  `json:"manifest"`
	// Revision is the correction a correction run ran (Batch.Revisions);
	// nil for a run of the whole manifest.
	Revision     *Revision `json:"revision,omitempty"`
	Results      Results   `json:"results"`
	Outputs      string    `json:"outputs"` // s3:// prefix of the pipeline's output objects
	CreatedAt    time.Time `json:"created_at"`
	RunStartedAt time.Time `json:"run_started_at"`
	FinishedAt   time.Time `json:"finished_at"`
	Usage        Usage     `json:"usage"`
	// Sample is a sampled first run's estimate beside what the run did,
	// when it was approved on one (SampleCheck); absent otherwise.
	Sample *SampleCheck `json:"sample,omitempty"`
	// Retries counts the run's attempts that did not end their item
	// (RetryCounts); absent when there was none.
	Retries *RetryCounts `json:"retries,omitempty"`
	// Paused is what the run's pauses took (by an outage, a caller or its
	// budget): their number, their time in all and the last one; absent
	// when the run never paused.
	Paused *PausedSummary `json:"paused,omitempty"`
	// Halts are the halts the batch held when the run ended, by subject
	// (Batch.Halts): a credential refused with its secret re-read, under
	// which the run's items were withheld (a cancel ended them), kept
	// until a caller lifts it. Absent when none stood.
	Halts []Halt `json:"halts,omitempty"`
	// Lifted is what callers lifted of the batch's halts by the run's
	// end: how many, and the last (its subject, since when, why, when
	// lifted); absent when none was.
	Lifted *LiftedSummary `json:"lifted,omitempty"`
}

// RetryCounts is what a report says of the run's attempts that did not
// end their item, summed from the run's counters as they were written
// (each attempt's count rides on its message batch's counter write, so
// one that a crash lost is missing: lower bounds; the census is exact).
type RetryCounts struct {
	// Scheduled is how many retries the run scheduled: attempts answered
	// with a transient failure, or throttled.
	Scheduled int64 `json:"scheduled"`
	// Throttled is those of Scheduled whose call the downstream throttled
	// (an HTTP 429 or 503, Lambda's TooManyRequestsException): each one a
	// call it refused, which used no attempt.
	Throttled int64 `json:"throttled"`
	// Interrupted is attempts whose outcome is unknown: cut off at the
	// invocation's deadline or a lease's end, or taken over after their
	// holder died; TimedOut attempts whose call reached the downstream
	// and was given up without an answer (the downstream may have done
	// the work).
	Interrupted int64 `json:"interrupted"`
	TimedOut    int64 `json:"timed_out"`
	// Causes is the other scheduled retries by failure class, each with
	// one failure's text, most first (a store keeps a few classes and
	// merges the others into them); a cause's Items counts its retries
	// over the run (an item retried twice counts twice).
	Causes []RetryCause `json:"causes,omitempty"`
}

// Usage is what a run consumed of billed services, as far as bulkrun can
// attribute it to the run: the DynamoDB request units the item function's
// message batches consumed, as DynamoDB reported them
// (ReturnConsumedCapacity; the billed figure on AWS, rough on the
// emulator). Submit's and finalize's own calls, SQS, S3, EventBridge and
// Lambda are not attributed per run; `make bench` meters them all (see
// "Cost" in docs/design/cost.md). JSON:
// {"dynamodb_write_units": 4123.5, "dynamodb_read_units": 240}.
type Usage struct {
	DynamoDBWriteUnits float64 `json:"dynamodb_write_units"`
	DynamoDBReadUnits  float64 `json:"dynamodb_read_units"`
}

// Location is an S3 object and what identifies its content.
type Location struct {
	URI    string `json:"uri"`
	Digest string `json:"digest,omitempty"`
	Bytes  int64  `json:"bytes"`
}

// Results names the run's result files: one JSONL per outcome with at least
// one item, and a manifest.json in the shape of Step Functions Distributed
// Map's ResultWriter manifest.
type Results struct {
	Manifest string               `json:"manifest"` // s3:// URI of manifest.json
	Files    map[Outcome]Location `json:"files"`
}
