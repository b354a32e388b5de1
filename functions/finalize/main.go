// Command finalize is the finalize function: it writes a run's results and
// report once its items are terminal, and ticks on a schedule as the
// backstop for lost counters. Wiring only.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bulkrun/bulkrun/shared/handler"
)

func main() {
	ctx := context.Background()
	d, err := handler.Build(ctx)
	if err != nil {
		log.Fatalf("finalize: %v", err)
	}
	h := &handler.Finalize{Finalizer: d.Finalizer(), Log: d.Log}
	lambda.StartWithOptions(handler.Invoke(h.Handle), lambda.WithContext(ctx))
}
