package api

import (
	"time"
)

// StallAttention is how long a running run may end no item before it
// needs attention (LiveView.Attention): longer than the default retry
// policy's longest wait (DefaultRetryPolicy: 900 s × 1.5), so that a run
// whose items all wait for their last retry is not called stalled for
// that alone. The stack's stall alarm has the same default (infra,
// RunnerProps.StallAlarm).
const StallAttention = 30 * time.Minute

// LiveView is a running run's live view, from its counter partitions only
// (Store.Progress: one Query per counter partition, whatever the batch's
// size; counters may lag the item rows by a message batch, and a lost
// counter write loses its share until the report's exact census).
//
// Every item of the run is in exactly one of: ended (Progress.Done, by
// outcome in the census), NotFannedOut (its chunk's item messages are not
// all sent: the fan-out is queued, running, or waiting after a failed or
// timed-out invocation), RetryWaiting (its last attempt failed
// transiently or was interrupted and its message comes back at the
// latest by NextRetryAt's minute), or InFlight (its message was sent and
// it has not ended: queued, running now, or due for its retry).
type LiveView struct {
	InFlight     int64 `json:"in_flight"`
	RetryWaiting int64 `json:"retry_waiting"`
	// NextRetryAt is the start of the minute after which the earliest
	// waiting item's retry is due (retries are counted by the minute,
	// rounded up). Absent when none waits.
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	// Interrupted counts this run's attempts whose outcome is unknown: cut
	// off at the invocation's deadline margin, or taken over after their
	// holder died or timed out (each one may have reached the pipeline's
	// receiver).
	Interrupted int64 `json:"interrupted"`
	// TimedOut counts this run's attempts whose call reached the
	// downstream and was given up without an answer (a webhook call past
	// its timeout_ms, a call cut off at the deadline margin): the
	// downstream may still have finished them. Absent when none.
	TimedOut int64 `json:"timed_out,omitempty"`
	// Withheld counts this run's items withheld under a halt (a refused
	// credential), from the counters: they wait, without a call, for the
	// halt to be lifted (Batch.Halts, POST /batches/{id}/halts/lift).
	// Not in InFlight. Absent when none.
	Withheld     int64 `json:"withheld,omitempty"`
	NotFannedOut int64 `json:"not_fanned_out"`
	// LastProgressAt is when the run last counted an item ended (its
	// start when none).
	LastProgressAt time.Time `json:"last_progress_at"`
	// Attention says why the run needs attention now; empty when it does
	// not (see NeedsAttention).
	Attention []string `json:"attention,omitempty"`
}

// NeedsAttention reports whether the running run needs a look now: it
// is paused or halted, an item failed, was quarantined or is withheld,
// an item waits for a retry, an attempt was interrupted or timed out, or
// no item ended for StallAttention.
func (l LiveView) NeedsAttention() bool { return len(l.Attention) > 0 }
