package ledger

import (
	"fmt"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// ForgetMark is a forget's mark on the batch row (Store.MarkForgetting).
type ForgetMark struct {
	BatchID string
	// CreatedAt is the creation time of the batch the forget read: a row
	// of another batch of the id (the id submitted again meanwhile) is
	// not marked. Zero: any.
	CreatedAt time.Time
	// Now stamps the mark (Batch.ForgettingAt).
	Now time.Time
	// Token is the forget's own (NewTakeToken): the batch row is deleted
	// by the forget whose token the row holds (Batch.ForgettingBy).
	Token string
	// Quiet > 0 refuses the mark (ErrForgetGoing) while another forget
	// marked the batch less than Quiet before Now: that forget may still
	// be deleting (ForgetQuiet).
	Quiet time.Duration
}

// ErrForgetGoing says another forget of the batch may still be deleting
// its rows and objects: a forget that must be the only one
// (lifecycle.ForgetStale) was refused its mark, or a forget's batch row
// was marked since by another, which deletes it. It wraps
// api.ErrConflict.
var ErrForgetGoing = fmt.Errorf("another forget of the batch is going: %w", api.ErrConflict)

// ForgetQuiet is how long after another forget's mark a forget that must
// be the only one (lifecycle.ForgetStale) is refused: a forget runs within one
// function invocation (the control API's, the sweep's, submit's), which
// Lambda ends at its timeout, at most 900 s ("Lambda quotas", Lambda
// developer guide: function timeout), plus a minute for a request sent
// at its end.
const ForgetQuiet = 16 * time.Minute
