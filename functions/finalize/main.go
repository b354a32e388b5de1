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
	h := &function.Finalize{Finalizer: d.Finalizer(), Log: d.Log, Chain: d.Self()}
	lambda.StartWithOptions(function.Invoke(h.Handle), lambda.WithContext(ctx))
}
