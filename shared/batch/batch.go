package batch

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Batch is a batch's row: its plan (manifest and digest), its options and the
// state of its current run. JSON names are the API's.
type Batch struct {
	ID            string `json:"batch_id"`
	Pipeline      string `json:"pipeline"`
	Digest        string `json:"manifest_digest"` // hex SHA-256 of the manifest bytes
	ManifestKey   string `json:"manifest_key"`    // S3 key of the manifest (normalized JSONL)
	ManifestBytes int64  `json:"manifest_bytes"`
	ItemCount     int64  `json:"item_count"`
	ListShards    int    `json:"list_shards"`    // item-row partition keys (see ListShards)
	CounterShards int    `json:"counter_shards"` // counter partition keys (see CounterShards; CounterLanes when set)
	// CounterLanes is the run's counter lanes (see CounterLanes), the same
	// in every run; 0 on rows written before lanes, whose runs count per
	// fan-out chunk (Store.CountChunk).
	CounterLanes int `json:"-"`
	// Chunks is the number of fan-out chunks of the manifest (the same in
	// every run): a run is done when this many chunk counters reached
	// their item counts (Store.CountChunk). 0 on rows written before
	// chunk counters: their runs end by the finalize tick.
	Chunks      int       `json:"-"`
	Run         int       `json:"run"` // current run, from 1
	Status      Status    `json:"status"`
	Threshold   Threshold `json:"threshold"`
	MaxAttempts int       `json:"max_attempts"`
	// Retry is the batch's retry policy (with MaxAttempts); nil on rows
	// written before policies existed, which take the worker's default.
	// Read it with RetryPolicyOf.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// MaxConcurrency is the most items of the batch whose pipeline runs at
	// once, across every invocation (see Worker); 0 is unlimited.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// ItemsPerMessage is how many consecutive manifest items share one
	// items-queue message and one ledger row (a pack; see Pack), 1–
	// MaxItemsPerMessage; part of the plan, the same in every run. 0 on
	// rows written before the option: 1. Read it with Pack.
	ItemsPerMessage int               `json:"items_per_message,omitempty"`
	OnInterrupt     InterruptPolicy   `json:"on_interrupt"`
	Headers         map[string]string `json:"headers,omitempty"`
	Options         json.RawMessage   `json:"pipeline_options,omitempty"`
	KeyField        string            `json:"key_field,omitempty"`
	Source          string            `json:"source"` // description: "inline", "s3://bucket/key", "s3://bucket/prefix/*"
	FannedOut       bool              `json:"fanned_out"`
	CreatedAt       time.Time         `json:"created_at"`
	RunStartedAt    time.Time         `json:"run_started_at"`
	FinishedAt      time.Time         `json:"finished_at,omitzero"`
	ReportKey       string            `json:"report_key,omitempty"`
	FinalCensus     *Census           `json:"census,omitempty"` // the census of the last finished run
	NeedsAttention  bool              `json:"needs_attention"`
	// Stop is set while a run is being stopped: StatusCancelled (a caller
	// cancelled) or StatusThresholdExceeded (failures passed the
	// threshold). Items not yet started end cancelled; finalize gives the
	// run this status.
	Stop       Status `json:"stop,omitempty"`
	StopDetail string `json:"stop_detail,omitempty"`
	// StopRan and StopFailures are this run's items that had ended
	// (succeeded, failed or quarantined) and, among them, failed or were
	// quarantined, by the counters when the stop was marked: items
	// already in flight then finish after it (StopSummary).
	StopRan      int64 `json:"stop_ran,omitempty"`
	StopFailures int64 `json:"stop_failures,omitempty"`
	// Pause is set while the run is paused (see Pause): by an outage or a
	// caller. No item starts; items running finish. Removed when the
	// pause ends and when a run finishes or starts.
	Pause *Pause `json:"pause,omitempty"`
	// Pauses counts the pauses of the current run so far.
	Pauses    int       `json:"pauses,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // end of the retention of the last finished run

	// Request is the accepted submit request (JSON, defaults filled) of a
	// batch whose source is read in the background; the read and a
	// repeated submit use it. Empty for a batch submitted in one call.
	Request json.RawMessage `json:"-"`
	// SubmitAttempts counts the background reads of the source started so
	// far; SubmitDeadline is when the latest one must have ended (its
	// invocation's deadline). Zero for a batch submitted in one call.
	SubmitAttempts int       `json:"submit_attempts,omitempty"`
	SubmitDeadline time.Time `json:"-"`
	// Failure says why the run could not be finished
	// (StatusFinalizeFailed); FinalizeFailures counts the finalize calls
	// of the run that failed so far.
	Failure          string `json:"failure,omitempty"`
	FinalizeFailures int    `json:"-"`
	// Refusal says why a refused batch (StatusRefused) was refused.
	Refusal *SubmitRefusal `json:"refusal,omitempty"`
	// PendingDeletion is set once a forget (a caller's, or the sweep's at
	// the end of the retention) has started deleting the batch and until
	// its batch row, deleted last, is gone: a partly deleted batch.
	PendingDeletion bool `json:"pending_deletion,omitempty"`
	// PublishedRun is the last run whose completion event was put (set
	// after PutEvents answered); finalize and its tick publish a finished
	// run's event until it is marked, so it is delivered at least once.
	PublishedRun int `json:"-"`

	// StopOnThreshold: see SubmitRequest.StopOnThreshold; nil (rows
	// written before the option existed) means true. Read it with EarlyStop.
	StopOnThreshold *bool `json:"stop_on_threshold,omitempty"`
	// Revisions are the batch's corrections, oldest first (see Revision,
	// Submitter.Correct); RunRevision is the revision the current run runs
	// (a correction run: exactly its corrected keys), 0 for a run of the
	// whole manifest.
	Revisions   []Revision `json:"revisions,omitempty"`
	RunRevision int        `json:"run_revision,omitempty"`

	// SubmittedBy is who submitted the batch: the API caller's IAM
	// identity (its ARN, from the request context), "s3-upload:{principal
	// id}" for an upload under incoming/, or "schedule:{name}" for a
	// schedule's tick; "" when not known (a harness).
	SubmittedBy string `json:"submitted_by,omitempty"`
}

// Expired reports whether the batch's retention has ended at now: a
// finished batch whose ExpiresAt is not after now. An expired batch is gone
// for every read and command (ErrExpired) even before the sweep deletes it,
// and its id may start a fresh batch.
func (b Batch) Expired(now time.Time) bool {
	return b.Status.Finished() && !b.ExpiresAt.IsZero() && !now.Before(b.ExpiresAt)
}

// Live returns b, or an error wrapping ErrExpired (HTTP 404 expired) when
// its retention has ended at now.
func Live(b Batch, now time.Time) (Batch, error) {
	if b.Expired(now) {
		return Batch{}, fmt.Errorf("batch %s: retention ended at %s: %w", b.ID, b.ExpiresAt.Format(time.RFC3339), ErrExpired)
	}
	return b, nil
}

// TTLGrace is how long after a finished batch's retention ends its rows
// carry DynamoDB's TTL (config.AttrExpiresAt, epoch seconds): the sweep
// deletes the batch first; TTL removes what a failing sweep leaves behind.
// DynamoDB deletes expired items "typically within a few days" (DynamoDB
// developer guide, "Using time to live (TTL) in DynamoDB",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TTL.html),
// never before their TTL.
const TTLGrace = 24 * time.Hour

// EarlyStop reports whether the run stops as soon as its failures exceed
// the threshold (the default, as Distributed Map does), rather than running
// every item and judging at the end.
func (b Batch) EarlyStop() bool { return b.StopOnThreshold == nil || *b.StopOnThreshold }

// Chunk is a byte range of the manifest holding Count whole lines, the
// first of which is item number FirstIndex (0-based). Fan-out sends one
// message per chunk; the item function expands it into item messages, so a
// batch of any size is fanned out in parallel, resumable pieces.
type Chunk struct {
	Offset     int64 `json:"offset"`
	Length     int64 `json:"length"`
	FirstIndex int64 `json:"first_index"`
	Count      int64 `json:"count"`
}

// Item is an item's row. Rows exist from the item's first reservation on;
// an item without a row is pending.
type Item struct {
	BatchID     string  `json:"-"`
	Key         string  `json:"key"`
	RunID       string  `json:"run_id"`
	Run         int     `json:"run"`
	Outcome     Outcome `json:"outcome"`
	Attempt     int     `json:"attempt"`            // the fence: counts every attempt, across runs
	RunAttempts int     `json:"attempts"`           // attempts in the item's last run (0: settled without running)
	Released    bool    `json:"released,omitempty"` // a quarantined item released for the next run
	// Revision is the manifest revision of the item's input: 0 (absent)
	// for the batch's own manifest, n ≥ 2 once a correction (Batch.Revisions)
	// gave it a new input.
	Revision int `json:"revision,omitempty"`
	// Interrupted is set by Store.Reserve when it took the item over from
	// an attempt whose lease expired without an outcome or a scheduled
	// retry (a crash or a timeout): that attempt's effect is unknown.
	Interrupted bool            `json:"-"`
	LeaseUntil  time.Time       `json:"lease_until,omitzero"`
	Output      json.RawMessage `json:"output,omitempty"`
	OutputRef   string          `json:"output_ref,omitempty"` // s3:// URI when the output is too large for the row
	Error       string          `json:"error,omitempty"`
	Reason      Reason          `json:"reason,omitempty"`
	Cost        pipeline.Cost   `json:"cost,omitempty"` // what the attempt that ended the item spent
	// Spent is what every attempt of run SpentRun spent (the ending one
	// included): the sum of each attempt's cost records, written with each
	// outcome and each release. Census.RunSpent sums it over the rows of
	// the current run.
	Spent     pipeline.Cost `json:"spent,omitempty"`
	SpentRun  int           `json:"-"`
	UpdatedAt time.Time     `json:"updated_at,omitzero"`
	// ThrottledSince is when the item's current streak of throttled
	// attempts began (a service called on its behalf refused it for its
	// rate or capacity; those attempts count no attempt, see Conclude);
	// zero when its last attempt was not throttled.
	ThrottledSince time.Time `json:"throttled_since,omitzero"`
	// ExpiresAt is the row's TTL (when DynamoDB may delete it); zero when
	// it has none.
	ExpiresAt time.Time `json:"-"`
	// Pos is the item's position in a scan of its batch's rows
	// (MergeShards): its key for an item row, PackPos for an item of a
	// pack row (Packed, in the pack starting at manifest index PackFirst).
	Pos       string `json:"-"`
	Packed    bool   `json:"-"`
	PackFirst int64  `json:"-"`
}

// ScanPos is the item's position in a scan: Pos, or its key when Pos is unset.
func (it Item) ScanPos() string {
	if it.Pos != "" {
		return it.Pos
	}
	return it.Key
}

// InterruptPolicy says what happens to an item whose attempt was
// interrupted (lease expired, outcome unknown).
type InterruptPolicy string

// The interrupt policies.
const (
	// InterruptRetry runs the item again: same run id, attempt + 1. The
	// default; right for idempotent pipelines.
	InterruptRetry InterruptPolicy = "retry"
	// InterruptQuarantine sets the item aside (quarantined, reason
	// "interrupted") for a person to check: for pipelines that are not
	// idempotent (a payment, an e-mail).
	InterruptQuarantine InterruptPolicy = "quarantine"
)

// Reason says why an item is failed, quarantined or cancelled.
type Reason string

// The reasons.
const (
	ReasonPermanent    Reason = "permanent"     // the pipeline returned a permanent error
	ReasonMaxAttempts  Reason = "max-attempts"  // transient errors or interruptions used every attempt
	ReasonDeadLettered Reason = "dead-lettered" // the message exceeded the queue's receive limit
	ReasonQuarantine   Reason = "quarantine"    // the pipeline set the item aside
	ReasonInterrupted  Reason = "interrupted"   // quarantined: an attempt was interrupted and the batch's policy is quarantine
	ReasonThreshold    Reason = "threshold"     // cancelled: the batch exceeded its threshold
	ReasonCancel       Reason = "cancel"        // cancelled: a caller cancelled the batch
)

// Census is the count of a run's items by outcome, plus the cost rollup. It
// is computed from the item rows, never from counters.
type Census struct {
	Total       int64 `json:"total"`
	Succeeded   int64 `json:"succeeded"`
	Failed      int64 `json:"failed"`
	Quarantined int64 `json:"quarantined"`
	Cancelled   int64 `json:"cancelled"`
	InFlight    int64 `json:"in_flight"`
	Pending     int64 `json:"pending"`
	// Cost is the exact decimal sum of each cost name over the counted
	// items, each item counting the attempt that ended it (JSON numbers in
	// plain decimal: ten items of 0.1 usd give "usd": 1). An item answered
	// from an earlier run counts that run's ending attempt.
	Cost pipeline.CostSum `json:"cost"`
	// RunSpent is what this run spent: every attempt of this run, retried
	// and ending ones alike, summed per name the same way (an item retried
	// twice before it succeeded counts three calls here, one in Cost). An
	// attempt cut off before it could write (a crash) is not in it.
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
	case OutcomeInFlight:
		return c.InFlight
	}
	return c.Pending
}

// Done reports whether every item is terminal.
func (c Census) Done() bool { return c.InFlight == 0 && c.Pending == 0 }

// NeedsAttention reports whether any item is failed, quarantined or in flight.
func (c Census) NeedsAttention() bool { return c.Failed+c.Quarantined+c.InFlight > 0 }

// Threshold is the tolerated failures of a run, with the semantics of Step
// Functions Distributed Map's ToleratedFailurePercentage and
// ToleratedFailureCount: the run fails (threshold_exceeded) when the failed
// items are MORE than the tolerated count, or their share of all items is
// MORE than the tolerated percent. Failures are failed + quarantined items.
// Exactly at the threshold is tolerated. With neither set, any number of
// failures is tolerated (unlike Distributed Map, whose default is zero):
// the batch completes and needs_attention tells.
type Threshold struct {
	// FailurePercent is 0–100 (fractions allowed); nil means unset.
	FailurePercent *float64 `json:"tolerated_failure_percent,omitempty"`
	// FailureCount is ≥ 0; nil means unset.
	FailureCount *int64 `json:"tolerated_failure_count,omitempty"`
}

// Limited reports whether t tolerates fewer than every failure (a count
// or a percent is set): only then can failures exceed it.
func (t Threshold) Limited() bool { return t.FailurePercent != nil || t.FailureCount != nil }

// Validate names the field at fault.
func (t Threshold) Validate() error {
	if p := t.FailurePercent; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 100) {
		return &InputError{Field: "threshold.tolerated_failure_percent", Reason: fmt.Sprintf("%v is not within 0–100", *p)}
	}
	if c := t.FailureCount; c != nil && *c < 0 {
		return &InputError{Field: "threshold.tolerated_failure_count", Reason: fmt.Sprintf("%d is negative", *c)}
	}
	return nil
}

// Verdict is a threshold's judgement of a run.
type Verdict struct {
	Exceeded bool   `json:"exceeded"`
	Limit    string `json:"limit,omitempty"`  // "tolerated_failure_count" or "tolerated_failure_percent"
	Detail   string `json:"detail,omitempty"` // e.g. "3 failures > 2 tolerated"
	Failures int64  `json:"failures"`
	Total    int64  `json:"total"`
}

// Judge applies the threshold to failures out of total items. The percent
// comparison is exact (failures × 100 > percent × total, no rounding), so
// 1 failure of 20 items against 5 % is tolerated and 2 are not. A run of 0
// items never exceeds.
func (t Threshold) Judge(failures, total int64) Verdict {
	v := Verdict{Failures: failures, Total: total}
	if total <= 0 {
		return v
	}
	if c := t.FailureCount; c != nil && failures > *c {
		v.Exceeded, v.Limit = true, "tolerated_failure_count"
		v.Detail = fmt.Sprintf("%d failures > %d tolerated", failures, *c)
		return v
	}
	if p := t.FailurePercent; p != nil && exceedsPercent(failures, total, *p) {
		v.Exceeded, v.Limit = true, "tolerated_failure_percent"
		v.Detail = fmt.Sprintf("%d failures of %d items = %.4g%% > %.4g%% tolerated", failures, total, float64(failures)*100/float64(total), *p)
	}
	return v
}

// exceedsPercent reports failures × 100 > percent × total exactly: percent
// is taken as the shortest decimal that prints it (what the user wrote,
// e.g. 0.57, not the binary float 0.5699…), in rational arithmetic.
func exceedsPercent(failures, total int64, percent float64) bool {
	p, ok := new(big.Rat).SetString(strconv.FormatFloat(percent, 'g', -1, 64))
	if !ok {
		return float64(failures)*100 > percent*float64(total)
	}
	lhs := new(big.Rat).SetInt64(failures * 100)
	rhs := new(big.Rat).Mul(p, new(big.Rat).SetInt64(total))
	return lhs.Cmp(rhs) > 0
}

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
	Stop           *StopSummary `json:"stop,omitempty"`
	NeedsAttention bool         `json:"needs_attention"`
	Census         Census       `json:"census"`
	Threshold      Threshold    `json:"threshold"`
	Verdict        Verdict      `json:"verdict"`
	Manifest       Location     `json:"manifest"`
	// Revision is the correction a correction run ran (Batch.Revisions);
	// nil for a run of the whole manifest.
	Revision     *Revision `json:"revision,omitempty"`
	Results      Results   `json:"results"`
	Outputs      string    `json:"outputs"` // s3:// prefix of the pipeline's output objects
	CreatedAt    time.Time `json:"created_at"`
	RunStartedAt time.Time `json:"run_started_at"`
	FinishedAt   time.Time `json:"finished_at"`
	Usage        Usage     `json:"usage"`
}

// Usage is what a run consumed of billed services, as far as bulkrun can
// attribute it to the run: the DynamoDB request units the item function's
// message batches consumed, as DynamoDB reported them
// (ReturnConsumedCapacity; the billed figure on AWS, rough on the
// emulator). Submit's and finalize's own calls, SQS, S3, EventBridge and
// Lambda are not attributed per run; `make bench` meters them all (see
// "Cost" in docs/design.md). JSON:
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

// ResultLine is one line of a results file: one item of the batch, with
// the outcome it has at the end of the run the file belongs to. A run's
// results hold every item once, the ones it did not run with the outcome
// an earlier run gave them (a resumed run answers succeeded items from
// their rows): Run says which run produced the line's outcome, Attempts
// how many attempts that run made (0: settled without running, such as an
// item cancelled before it started).
type ResultLine struct {
	Key     string  `json:"key"`
	Outcome Outcome `json:"outcome"`
	Run     int     `json:"run"`
	// Revision is the manifest revision whose input produced the outcome:
	// 1 for the batch's own manifest, n ≥ 2 for a correction's
	// (Batch.Revisions).
	Revision  int             `json:"revision"`
	Output    json.RawMessage `json:"output,omitempty"`
	OutputRef string          `json:"output_ref,omitempty"`
	Error     string          `json:"error,omitempty"`
	Reason    Reason          `json:"reason,omitempty"`
	Attempts  int             `json:"attempts"`
	Cost      pipeline.Cost   `json:"cost,omitempty"`
}
