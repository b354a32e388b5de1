// Command submit is the submit function: the REST API and S3 uploads under
// incoming/. Wiring only; the logic is in shared/handler and shared/batch.
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
		log.Fatalf("submit: %v", err)
	}
	s, err := d.Submitter()
	if err != nil {
		log.Fatalf("submit: %v", err)
	}
	h := &handler.Submit{
		API:             handler.NewAPI(s, d.Store, d.Blobs, d.Log),
		Submitter:       s,
		Heads:           d.Blobs,
		Blobs:           d.Blobs,
		Events:          d.Bus(),
		DefaultPipeline: d.Config.DefaultPipeline,
		Log:             d.Log,
	}
	lambda.StartWithOptions(handler.Invoke(h.Handle), lambda.WithContext(ctx))
}
