// Command sweep is the retention sweep: on a schedule it deletes the
// batches whose retention has passed, oldest first. Wiring only.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	ctx := context.Background()
	d, err := function.Build(ctx, "sweep")
	if err != nil {
		log.Fatalf("sweep: %v", err)
	}
	h := &function.Sweep{Sweeper: d.Sweeper(), Log: d.Log}
	lambda.StartWithOptions(function.Invoke(h.Handle), lambda.WithContext(ctx))
}
