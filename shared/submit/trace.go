package submit

import (
	"context"

	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// traced sets the trace context b stores from ctx, the submit's
// (tracing.Carry: its span's, the caller's, or a new root): the parent of
// every item attempt's span.
func traced(ctx context.Context, b *ledger.Batch) {
	c := tracing.Carry(ctx)
	b.TraceParent, b.TraceState = c.Parent, c.State
}
