package function

import (
	"context"
	"fmt"

	"github.com/bulkrun/bulkrun/internal/handler"
)

// StartFinalize serves the finalize function: triggers, chains, parts and
// the tick. A large run's parts and the chain's next calls are the
// function invoking itself (Deps.Self).
func StartFinalize(ctx context.Context) error {
	d, err := Build(ctx, "finalize")
	if err != nil {
		return fmt.Errorf("finalize: %w", err)
	}
	f := d.Finalizer()
	if self := d.Self(); self != nil {
		f.Parts, f.Chain = self, self
	}
	return serve(ctx, (&handler.Finalize{Finalizer: f, Log: d.Log}).Router(), nil) // no spans of its own
}
