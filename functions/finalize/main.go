// Command finalize is the finalize function: it writes a run's results and
// report once its items are terminal, and ticks on a schedule as the
// backstop for lost counters. Wiring only.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	ctx := context.Background()
	d, err := function.Build(ctx, "finalize")
	if err != nil {
		log.Fatalf("finalize: %v", err)
	}
	f, self := d.Finalizer(), d.Self()
	if self != nil {
		f.Parts = self // a large run's parts: finalize invoking itself, at once
	}
	h := &function.Finalize{Finalizer: f, Log: d.Log, Chain: self}
	lambda.StartWithOptions(function.Invoke(h.Handle), lambda.WithContext(ctx))
}
