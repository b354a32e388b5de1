package function

import (
	"context"
	"fmt"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Sweeper builds the retention sweep from d.
func (d *Deps) Sweeper() *control.Sweeper {
	return &control.Sweeper{Store: d.Store, Control: &control.Control{Store: d.Store, Blobs: d.Blobs, Log: d.Log, Clock: ledger.SystemClock{}}, Clock: ledger.SystemClock{}, Log: d.Log}
}

// StartSweep serves the sweep function: each scheduled invocation runs
// the sweep's passes (control.Sweeper.Run) and answers their counts.
func StartSweep(ctx context.Context) error {
	d, err := Build(ctx, "sweep")
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	return serve(ctx, handler.Sweep(d.Sweeper()), nil) // no spans of its own
}
