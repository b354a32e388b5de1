package ledger

import (
	"errors"
	"fmt"
)

// FaultClass is what bulkrun does with an error an AWS service answered
// (or the lack of an answer): internal/awsfault classifies every error of
// every call bulkrun makes from one table (awsfault.Table; the same table
// is docs/design/errors.md). The classes, and what each means to the
// item worker:
type FaultClass string

const (
	// FaultRetry: a fault of the moment (a 5xx, no answer, a transaction
	// cancelled for a concurrent one, a clock skew the SDK corrects). The
	// SDK's retryer sends the call again in place (awsfault.MaxAttempts
	// tries, backoff at most awsfault.MaxBackoff); past the tries it is
	// ErrUnavailable, handled as FaultBackoff.
	FaultRetry FaultClass = "retry"
	// FaultBackoff: the service asks its caller to slow down (throttling,
	// S3's SlowDown). Retried in place by the SDK with backoff; past the
	// tries it is ErrUnavailable: the item worker sends the message again
	// later and counts no attempt, a write after the pipeline ran is tried
	// again within the invocation, a pipeline's own call is a
	// *pipeline.ThrottledError (no attempt).
	FaultBackoff FaultClass = "backoff"
	// FaultPause: the service refuses every call until someone acts on
	// its side (a KMS key disabled, pending deletion or denied to the
	// role; credentials that expired). Not retried in place; it is
	// ErrUnavailable, so nothing fails and no attempt is used, and the
	// item worker pauses the batch (an outage pause whose class names the
	// service and code, ended by its probes once the call succeeds).
	FaultPause FaultClass = "pause"
	// FaultPermanent: the call fails the same way every time (a missing
	// grant, a table or function that does not exist, a request AWS
	// refuses as written). Not retried; the caller reports it with its
	// reason.
	FaultPermanent FaultClass = "permanent"
	// FaultConflict: a condition bulkrun wrote did not hold (a
	// conditional write lost to another writer, an S3 precondition): the
	// adapters answer api.ErrConflict, and the caller decides from the
	// stored state.
	FaultConflict FaultClass = "conflict"
)

// FaultClasses lists every FaultClass.
func FaultClasses() []FaultClass {
	return []FaultClass{FaultRetry, FaultBackoff, FaultPause, FaultPermanent, FaultConflict}
}

// Unavailable reports whether the class makes an error ErrUnavailable
// once the SDK's tries are spent: retry, backoff and pause.
func (c FaultClass) Unavailable() bool {
	return c == FaultRetry || c == FaultBackoff || c == FaultPause
}

// FaultError is an AWS error as bulkrun classified it: the call (Service,
// the SigV4 signing name such as "dynamodb"; Operation, such as
// "TransactWriteItems"), the error's Code ("" when no answer came; for a
// cancelled transaction, the code and its deciding reason, such as
// "TransactionCanceledException[TransactionConflict]") and its Class. The
// adapters wrap every error whose class is retry, backoff or pause in
// one (awsfault.Tag), so errors.Is(err, ErrUnavailable) holds for them;
// the SDK's error stays in the chain (errors.As still finds it).
type FaultError struct {
	Service, Operation, Code string
	Class                    FaultClass
	Err                      error
}

func (e *FaultError) Error() string {
	code := e.Code
	if code == "" {
		code = "no answer"
	}
	return fmt.Sprintf("%s %s: %s (%s): %v", e.Service, e.Operation, code, e.Class, e.Err)
}

func (e *FaultError) Unwrap() error { return e.Err }

// Is makes a FaultError of class retry, backoff or pause ErrUnavailable.
func (e *FaultError) Is(target error) bool {
	return target == ErrUnavailable && e.Class.Unavailable()
}

// FaultOf returns the first *FaultError in err's chain.
func FaultOf(err error) (*FaultError, bool) {
	var f *FaultError
	if errors.As(err, &f) {
		return f, true
	}
	return nil, false
}

// PauseFault returns the first *FaultError of class pause in err's
// chain: an AWS service that refuses every call until someone acts on
// its side.
func PauseFault(err error) (*FaultError, bool) {
	f, ok := FaultOf(err)
	if !ok || f.Class != FaultPause {
		return nil, false
	}
	return f, true
}
