// Command finalize is the finalize function: it writes a run's results and
// report once its items are terminal, and ticks on a schedule as the
// backstop for lost counters. Wiring only (package shared/function).
package main

import (
	"context"
	"log"

	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	if err := function.StartFinalize(context.Background()); err != nil {
		log.Fatal(err)
	}
}
