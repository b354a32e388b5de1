// Command sweep is the retention sweep: on a schedule it deletes the
// batches whose retention has passed, oldest first. Wiring only.
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
		log.Fatalf("sweep: %v", err)
	}
	h := &handler.Sweep{Sweeper: d.Sweeper(), Log: d.Log}
	lambda.StartWithOptions(handler.Invoke(h.Handle), lambda.WithContext(ctx))
}
