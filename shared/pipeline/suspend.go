package pipeline

import (
	"errors"
	"time"
)

// SuspendError is a pipeline's answer that its item must wait: not a
// failure and not a result. The item ends `suspended` (a held outcome:
// neither terminal nor failed, its attempt not counted), at no compute
// cost, until a caller signals it (POST /batches/{id}/items/{key}/signal,
// `bulkrun signal`), its wake time comes, or the batch is cancelled.
// The next attempt after a signal gets the signal's payload
// (Request.Signal). docs/pipelines.md, "Suspend", has the webhook's and
// the Lambda function's forms of the same answer.
type SuspendError struct {
	// Reason says why the item waits (the item's error text; cut to
	// MaxErrorTextBytes).
	Reason string
	// WakeAt, when not zero, is when the item's timer wakes it (at most
	// 24 hours after the attempt: a later time is taken as that; a time
	// past wakes it at once).
	WakeAt time.Time
	// Token, when not empty, is a callback token the pipeline chose (at
	// most 256 bytes): a signal that names a token must name this one.
	Token string
}

// Error returns "suspended: {reason}".
func (e *SuspendError) Error() string { return "suspended: " + e.Reason }

// Suspend returns a *SuspendError: the item waits, with reason, until a
// signal or, when wakeAt is not zero, its wake time.
func Suspend(reason string, wakeAt time.Time) error {
	return &SuspendError{Reason: reason, WakeAt: wakeAt}
}

// SuspendOf returns the first *SuspendError in err's chain.
func SuspendOf(err error) (*SuspendError, bool) {
	var s *SuspendError
	if errors.As(err, &s) {
		return s, true
	}
	return nil, false
}
