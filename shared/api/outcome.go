package api

// Outcome is an item's state. Terminal outcomes are final for a run:
// succeeded, failed, quarantined, cancelled. Non-terminal: pending (no row
// yet in this run), in_flight (reserved under a lease), and the held
// outcomes (HeldOutcomes): withheld, exhausted, suspended. A held item is neither settled nor
// failed: it waits, at no compute cost, for the next move its hold names
// (Item.Hold, Item.Next), and its run stays running until it moves.
type Outcome string

// The outcomes, and who moves an item into each.
const (
	// OutcomePending: the item has no reservation in the current run. Never
	// stored: an item without a row (or with a row of an earlier run that is
	// not succeeded) counts as pending.
	OutcomePending Outcome = "pending"
	// OutcomeInFlight: the item function reserved the item (attempt, lease)
	// and its pipeline is running, or a transient error released the lease
	// and a retry is scheduled.
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeSucceeded: the pipeline returned a result; recorded by the item
	// function under the attempt's fence. Never runs again.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: a permanent error, max attempts exhausted, or the
	// message was dead-lettered. A rerun runs it again.
	OutcomeFailed Outcome = "failed"
	// OutcomeQuarantined: the pipeline set the item aside
	// (pipeline.Quarantine). A rerun does not touch it until released.
	OutcomeQuarantined Outcome = "quarantined"
	// OutcomeCancelled: the batch was cancelled or exceeded its threshold
	// before the item started. A rerun runs it again.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeWithheld: an authority the item acts under was withdrawn: its
	// credential was refused after its secret was read again and found
	// unchanged, or the batch holds a halt on that credential
	// (Batch.Halts). Hold.Subject names the subject of the halt. Recorded
	// by the item function; moved on when a caller lifts the halt on the
	// subject (POST /batches/{id}/halts/lift), which resumes every item
	// withheld under it, or by a cancel.
	OutcomeWithheld Outcome = "withheld"
	// OutcomeExhausted: the item's attempts of this run reached one of
	// the batch's per-item ceilings (Batch.Ceilings) with an attempt that
	// would have been retried. Hold.Subject names the ceiling
	// ("ceiling:spend_usd", "ceiling:tokens"). Recorded by the item
	// function; moved on when a caller raises the ceilings above the
	// item's totals (POST /batches/{id}/ceilings), which resumes exactly
	// those items, or by a cancel.
	OutcomeExhausted Outcome = "exhausted"
	// OutcomeSuspended: the pipeline answered suspend (pipeline.Suspend,
	// a webhook's 202 with Bulkrun-Suspend, a Lambda answer's "suspend"):
	// the item waits, at no compute cost, with its reason (Item.Error),
	// the pipeline's token (Hold.Subject) and wake time (Hold.WakeAt) if
	// any. Recorded by the item function; moved on by a signal (POST
	// /batches/{id}/items/{key}/signal, whose payload the next attempt
	// gets), by its wake time, or by a cancel.
	OutcomeSuspended Outcome = "suspended"
)

// Outcomes lists every outcome in census order.
func Outcomes() []Outcome {
	return []Outcome{OutcomeSucceeded, OutcomeFailed, OutcomeQuarantined, OutcomeCancelled,
		OutcomeWithheld,
		OutcomeExhausted,
		OutcomeSuspended,
		OutcomeInFlight, OutcomePending}
}

// HeldOutcomes lists the held outcomes, in census order: not terminal and
// not failures; each waits for a next move of its own (NextMove).
func HeldOutcomes() []Outcome {
	return []Outcome{OutcomeWithheld,
		OutcomeExhausted,
		OutcomeSuspended,
	}
}

// Held reports whether o is one of HeldOutcomes().
func (o Outcome) Held() bool {
	switch o {
	case OutcomeWithheld,
		OutcomeExhausted,
		OutcomeSuspended:
		return true
	}
	return false
}

// TerminalOutcomes lists the terminal outcomes, in census order.
func TerminalOutcomes() []Outcome {
	return []Outcome{OutcomeSucceeded, OutcomeFailed, OutcomeQuarantined, OutcomeCancelled}
}

// Terminal reports whether o ends an item's run.
func (o Outcome) Terminal() bool {
	switch o {
	case OutcomeSucceeded, OutcomeFailed, OutcomeQuarantined, OutcomeCancelled:
		return true
	}
	return false
}

// Valid reports whether o is one of Outcomes().
func (o Outcome) Valid() bool {
	for _, x := range Outcomes() {
		if o == x {
			return true
		}
	}
	return false
}

// Status is a batch's state. There is no "succeeded" status: a finished
// batch is completed (read its counts), threshold_exceeded or cancelled.
type Status string

// The batch statuses.
const (
	// StatusSubmitting: the batch was accepted and its source is being read
	// in the background; its manifest is not frozen yet (no item count, no
	// digest). It becomes running, or refused.
	StatusSubmitting Status = "submitting"
	// StatusRefused: reading the source in the background failed for good
	// (a malformed line, a duplicate key, a full temporary disk, or every
	// attempt died); Batch.Refusal says why. Nothing ran. Final.
	StatusRefused Status = "refused"
	// StatusRunning: submit created the batch (or resume started a new run);
	// items are being fanned out and run. A run with a held item
	// (withheld, suspended) stays running until the item moves on: finalize never
	// finishes it.
	StatusRunning Status = "running"
	// StatusCompleted: finalize found every item of the run terminal and the
	// failures within the threshold. Read the census: failures may be > 0.
	StatusCompleted Status = "completed"
	// StatusThresholdExceeded: failures exceeded the threshold; items not
	// yet started were cancelled.
	StatusThresholdExceeded Status = "threshold_exceeded"
	// StatusCancelled: a caller cancelled the batch; items not yet started
	// were cancelled.
	StatusCancelled Status = "cancelled"
	// StatusFinalizeFailed: the run's items ended, but finishing the run
	// (the census, results, report or the batch row's last write) failed
	// FinalizeFailureLimit times for a reason other than AWS being
	// unavailable; Batch.Failure says why. Nothing is lost: every item's
	// outcome is on its row. A resume starts a new run (items that
	// succeeded are answered from their rows) once the cause is fixed.
	StatusFinalizeFailed Status = "finalize_failed"
)

// Statuses lists every batch status.
func Statuses() []Status {
	return []Status{StatusSubmitting, StatusRefused, StatusRunning, StatusCompleted, StatusThresholdExceeded, StatusCancelled, StatusFinalizeFailed}
}

// StatusNames is Statuses as strings, in the same order (for messages
// and flag help that list the valid values).
func StatusNames() []string {
	var out []string
	for _, s := range Statuses() {
		out = append(out, string(s))
	}
	return out
}

// Finished reports whether s is final: neither submitting nor running.
// A refused batch is finished without a run.
func (s Status) Finished() bool { return s != StatusRunning && s != StatusSubmitting && s != "" }
