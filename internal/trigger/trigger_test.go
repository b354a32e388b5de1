package trigger

import (
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// The adapter implements the engines' ports (compile-time checks, kept
// in a test so that the adapter imports no engine).
var (
	_ submit.Handoff          = (*Lambda)(nil)
	_ finalize.FinalizeParts  = (*Lambda)(nil)
	_ finalize.FinalizeRanges = (*Lambda)(nil)
)
