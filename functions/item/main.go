// Command item is the item function: it runs item messages from the items
// queue and records dead-lettered ones. Wiring only.
//
// To run your own pipelines, copy this file into your module, register
// them in the registry next to the built-ins, and deploy your binary.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/handler"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/builtin"
	"github.com/bulkrun/bulkrun/shared/secret"
)

func main() {
	ctx := context.Background()
	d, err := handler.Build(ctx)
	if err != nil {
		log.Fatalf("item: %v", err)
	}
	if err := config.Require(config.EnvItemsQueueURL, d.Config.ItemsQueueURL, config.EnvFinalizeFunction, d.Config.FinalizeFunction); err != nil {
		log.Fatalf("item: %v", err)
	}
	reg := &pipeline.Registry{}
	// An item's {bucket, key} may name only what a source may (batch.SourcePolicy).
	src := batch.GuardedSource{Source: d.Blobs, Policy: d.SourcePolicy()}
	if err := builtin.Register(reg, src, nil, d.Config.WebhookAllow); err != nil {
		log.Fatalf("item: %v", err)
	}
	h := &handler.Item{
		Worker: &batch.Worker{
			Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Trigger: d.Trigger, Clock: batch.SystemClock{},
			Log: d.Log, Pipelines: reg, Lease: d.Config.Lease, Metrics: d.Metrics, Secrets: secret.New(d.AWS, 0),
		},
		DeadLetterARN: d.Config.DeadLetterARN,
	}
	lambda.StartWithOptions(handler.Invoke(h.Handle), lambda.WithContext(ctx))
}
