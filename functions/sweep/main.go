// Command sweep is the retention sweep: on a schedule it deletes the
// batches whose retention has passed, oldest first. Wiring only (package
// shared/function).
package main

import (
	"context"
	"log"

	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	if err := function.StartSweep(context.Background()); err != nil {
		log.Fatal(err)
	}
}
