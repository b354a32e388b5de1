package api

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"
)

// Batch is a batch's row: its plan (Plan: the manifest's digest and the
// settings), its manifest and the state of its current run. JSON names
// are the API's.
type Batch struct {
	ID string `json:"batch_id"`
	// Plan is the batch's manifest digest and settings, the same in
	// every run (see Plan).
	Plan
	ManifestKey   string    `json:"manifest_key"` // S3 key of the manifest (normalized JSONL)
	ManifestBytes int64     `json:"manifest_bytes"`
	ItemCount     int64     `json:"item_count"`
	ListShards    int       `json:"list_shards"`    // item-row partition keys (see ListShards)
	CounterShards int       `json:"counter_shards"` // counter partition keys (see CounterShards; CounterLanes when set)
	Run           int       `json:"run"`            // current run, from 1
	Status        Status    `json:"status"`
	KeyField      string    `json:"key_field,omitempty"`
	Source        string    `json:"source"` // description: "inline", "s3://bucket/key", "s3://bucket/prefix/*"
	FannedOut     bool      `json:"fanned_out"`
	CreatedAt     time.Time `json:"created_at"`
	RunStartedAt  time.Time `json:"run_started_at"`
	FinishedAt    time.Time `json:"finished_at,omitzero"`
	ReportKey     string    `json:"report_key,omitempty"`
	FinalCensus   *Census   `json:"census,omitempty"` // the census of the last finished run
	// NeedsAttention is the last finished run's report's
	// (Report.NeedsAttention); lifting the last kept halt of a finished
	// batch sets it back to FinalCensus's.
	NeedsAttention bool `json:"needs_attention"`
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
	Pauses int `json:"pauses,omitempty"`
	// BudgetUSD is the most US dollars a run may spend before it pauses
	// (PauseByBudget; what counts: spend.RunSpend): > 0 and ≤ MaxBudgetUSD; 0
	// (the default) is no budget. Not in the Plan: a repeated submit with
	// another budget is the same batch, and the budget changes through
	// POST /batches/{id}/budget (Control.SetBudget).
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// Ceilings are the batch's per-item ceilings (see Ceilings); nil (the
	// default) is none. Not in the Plan, as BudgetUSD; they change through
	// POST /batches/{id}/ceilings.
	Ceilings *Ceilings `json:"ceilings,omitempty"`
	// Approval is a sampled batch's sample, estimate and decision (see
	// sample.go); nil on a batch without a sample.
	Approval  *Approval `json:"approval,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // end of the retention of the last finished run
	// SubmitAttempts counts the background reads of the source started so
	// far; SubmitDeadline is when the latest one must have ended (its
	// invocation's deadline). Zero for a batch submitted in one call.
	SubmitAttempts int `json:"submit_attempts,omitempty"`
	// Failure says why the run could not be finished
	// (StatusFinalizeFailed); FinalizeFailures counts the finalize calls
	// of the run that failed so far.
	Failure string `json:"failure,omitempty"`
	// Refusal says why a refused batch (StatusRefused) was refused.
	Refusal *SubmitRefusal `json:"refusal,omitempty"`
	// PendingDeletion is set once a forget (a caller's, or the sweep's at
	// the end of the retention) has started deleting the batch and until
	// its batch row, deleted last, is gone: a partly deleted batch.
	PendingDeletion bool `json:"pending_deletion,omitempty"`
	// Revisions are the batch's corrections, oldest first (see Revision,
	// Submitter.Correct); RunRevision is the revision the current run runs
	// (a correction run: exactly its corrected keys), 0 for a run of the
	// whole manifest.
	Revisions   []Revision `json:"revisions,omitempty"`
	RunRevision int        `json:"run_revision,omitempty"`
	// Halts are the batch's halts by subject (see Halt): items acting
	// under a halted subject are withheld without a call until a caller
	// lifts it. At most MaxHalts.
	Halts map[string]Halt `json:"halts,omitempty"`
	// SubmittedBy is who submitted the batch: the API caller's IAM
	// identity (its ARN, from the request context), "s3-upload:{principal
	// id}" for an upload under incoming/, or "schedule:{name}" for a
	// schedule's tick; "" when not known (a harness).
	SubmittedBy string `json:"submitted_by,omitempty"`
	// SourceFormat is the format the source was read in: jsonl, json or
	// csv for an object, "inline" for items in the request (a JSON array),
	// "prefix" for one item per object; "" on rows written before it was
	// kept.
	SourceFormat string `json:"source_format,omitempty"`
	// CSV is a CSV source's delimiter and header as the submit read them
	// (the delimiter given, or the one detected), for exports of the
	// items' inputs in the source's own format (GET
	// /batches/{id}/inputs); nil for any other source, and on rows
	// written before it was kept.
	CSV *CSVShape `json:"csv,omitempty"`
	// Checked is what the submit found wrong in the source and what became
	// of it (bad_rows fail: failed items, dropped duplicates; see
	// CheckSummary); nil when nothing was.
	Checked *CheckSummary `json:"checked,omitempty"`
}

// CSVShape is a CSV source's layout: its delimiter (one character: ","
// ";" "\t" "|" or another) and its header's columns in order. Header is
// omitted when its JSON would be over MaxCSVHeaderBytes (a table of
// thousands of columns); an export then names the columns in the order
// its rows first hold them.
type CSVShape struct {
	Delimiter string   `json:"delimiter"`
	Header    []string `json:"header,omitempty"`
}

// MaxCSVHeaderBytes bounds the JSON of a CSVShape's Header kept on a
// batch's row: 16 KiB (16,384 bytes), well within DynamoDB's 400 KB item.
const MaxCSVHeaderBytes = 16 << 10

// Expired reports whether the batch's retention has ended at now: a
// finished batch whose ExpiresAt is not after now. An expired batch is gone
// for every read and command (ErrExpired) even before the sweep deletes it,
// and its id may start a fresh batch.
func (b Batch) Expired(now time.Time) bool {
	return b.Status.Finished() && !b.ExpiresAt.IsZero() && !now.Before(b.ExpiresAt)
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
	ReasonCredential   Reason = "credential"    // withheld: its credential was refused, or is under a halt
	ReasonCeiling      Reason = "ceiling"       // exhausted: its attempts reached a per-item ceiling
	ReasonSuspend      Reason = "suspend"       // suspended: the pipeline answered suspend
)

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
		v.Detail = fmt.Sprintf("%s > %d tolerated", Count(failures, "failure"), *c)
		return v
	}
	if p := t.FailurePercent; p != nil && exceedsPercent(failures, total, *p) {
		v.Exceeded, v.Limit = true, "tolerated_failure_percent"
		v.Detail = fmt.Sprintf("%s of %s = %.4g%% > %.4g%% tolerated", Count(failures, "failure"), Count(total, "item"), float64(failures)*100/float64(total), *p)
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

// StopSummary is what a stopped run's report says of its stop: the status
// it stopped with and why, the items that had ended (succeeded, failed or
// quarantined) and failed when it was marked, and the items that were
// already in flight then and finished after it, and failed. So "stopping:
// threshold_exceeded (251 failures of 5000 items)" and a final census of
// 256 failed agree: 5 items in flight at the stop failed after it.
type StopSummary struct {
	Status            Status `json:"status"`
	Detail            string `json:"detail,omitempty"`
	RanAtStop         int64  `json:"ran_at_stop"`
	FailuresAtStop    int64  `json:"failures_at_stop"`
	FinishedAfterStop int64  `json:"finished_after_stop"`
	FailuresAfterStop int64  `json:"failures_after_stop"`
}

// StopSummaryOf is b's stop as the report tells it with the run's final
// census c; nil when the run was not stopped.
func StopSummaryOf(b Batch, c Census) *StopSummary {
	if b.Stop == "" {
		return nil
	}
	failures := c.Failed + c.Quarantined
	return &StopSummary{
		Status: b.Stop, Detail: b.StopDetail, RanAtStop: b.StopRan, FailuresAtStop: b.StopFailures,
		FinishedAfterStop: max(0, c.Succeeded+failures-b.StopRan),
		FailuresAfterStop: max(0, failures-b.StopFailures),
	}
}

// Text is the stop in one line, as the CLI and the console print it:
// "threshold_exceeded (251 failures of 5000 items); 5 items already in
// flight finished after the stop, 5 of them failed" ("1 item … finished
// after the stop and failed", "no item in flight at the stop finished after it").
func (s StopSummary) Text() string {
	return fmt.Sprintf("%s (%s); %s", s.Status, s.Detail, AfterStopText(s.FinishedAfterStop, s.FailuresAfterStop))
}

// AfterStopText is what the items in flight at a stop did after it, in
// words: finished of them finished after the stop, failed of those failed.
func AfterStopText(finished, failed int64) string {
	switch {
	case finished == 0:
		return "no item in flight at the stop finished after it"
	case finished == 1 && failed == 1:
		return "1 item already in flight finished after the stop and failed"
	case finished == 1:
		return "1 item already in flight finished after the stop and did not fail"
	}
	return fmt.Sprintf("%s already in flight finished after the stop, %d of them failed", Count(finished, "item"), failed)
}

// Tolerated is the most failures of total items t tolerates (Judge does
// not find them exceeding it); total when every failure is tolerated.
func (t Threshold) Tolerated(total int64) int64 {
	if total <= 0 || !t.Judge(total, total).Exceeded {
		return max(total, 0)
	}
	lo, hi := int64(0), total // Judge(hi) exceeds; find the least such
	if t.Judge(0, total).Exceeded {
		return 0
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if t.Judge(mid, total).Exceeded {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo
}
