package ledger

import (
	"errors"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

var (
	// ErrUnavailable: an AWS service throttled the call or failed
	// transiently (HTTP 429 or 5xx, a timeout, a connection error) after the
	// SDK's own retries. Never the item's fault: the item worker sends the
	// message again after a short jittered delay and counts no attempt.
	// Adapters wrap the SDK error with it (internal/awsfault).
	ErrUnavailable = errors.New("AWS service unavailable")
	// ErrCountUnknown: a counter write's answer was lost and whether it
	// took effect cannot be told (another write to the row came in
	// between), so it is not sent again: its items may be counted or not.
	// The run's progress is then finished by the finalize tick, which
	// counts the item rows once the counters stand still (Store.CountLane).
	ErrCountUnknown = errors.New("counter write's effect unknown")
)

// EffectsError is a commit of an attempt's staged writes
// (Record.Effects) that DynamoDB refused while the attempt still held the
// item: nothing of the transaction was applied, the outcome included.
//   - Permanent: DynamoDB refused the transaction as written
//     (ValidationException: over 4 MB, two writes on one item, a bad
//     expression…). No retry can fix it; the worker records the item
//     failed, without its writes, with this error's text.
//   - otherwise a staged write's own condition did not hold (Index names
//     it): the attempt ends like a transient pipeline error, and the next
//     attempt runs the pipeline again, which stages from what it reads then.
type EffectsError struct {
	Index     int    // the staged write, from 0 in staging order; -1 for the transaction as a whole
	Table     string // its table, when Index ≥ 0
	Permanent bool
	Err       error
}

func (e *EffectsError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("staged writes refused: %v", e.Err)
	}
	return fmt.Sprintf("staged write %d on table %q: %v", e.Index, e.Table, e.Err)
}

func (e *EffectsError) Unwrap() error { return e.Err }

// CutError is text cut to pipeline.MaxErrorTextBytes on a rune boundary:
// the error text an item's row keeps.
func CutError(text string) string { return pipeline.CutText(text, pipeline.MaxErrorTextBytes) }

// Throttled wraps err, a call an AWS service refused for its rate
// (ThrottlingException) after the SDK's own tries, as the throttled
// failure Conclude waits on without counting an attempt: a
// *pipeline.ThrottledError of service and code that asks for no delay of
// its own (ThrottleDelay sets the wait). The secret references' resolver
// (internal/secret) returns it, so that an adapter speaks the core's terms
// and imports no pipeline package. nil stays nil.
func Throttled(service, code string, err error) error {
	return pipeline.Throttled(service, code, 0, err)
}

// Refused reports a store error that is neither a conflict
// (api.ErrConflict), nor AWS being unavailable (ErrUnavailable), nor a
// write whose effect is unknown (ErrCountUnknown): the write was refused
// as written (DynamoDB's ValidationException: a row past 400 KB, an
// update expression past 4 KB), and the same write made again is
// refused again.
func Refused(err error) bool {
	return err != nil && !errors.Is(err, api.ErrConflict) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrCountUnknown)
}
