// Command item is the item function: it runs item messages from the items
// queue and records dead-lettered ones. Wiring only.
//
// Its pipelines are the one list in shared/pipeline/registered; add your
// own there (README "Write your own pipeline").
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/handler"
	"github.com/bulkrun/bulkrun/shared/pipeline/effects"
	"github.com/bulkrun/bulkrun/shared/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
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
	// An item's {bucket, key} may name only what a source may (batch.SourcePolicy).
	src := batch.GuardedSource{Source: d.Blobs, Policy: d.SourcePolicy()}
	reg, err := registered.Build(registered.Deps{Source: src, WebhookAllow: d.Config.WebhookAllow,
		Lambda: lambdafn.SDK{Client: awslambda.NewFromConfig(d.AWS)}, LambdaFunctions: d.Config.LambdaFunctions})
	if err != nil {
		log.Fatalf("item: %v", err)
	}
	h := &handler.Item{
		Worker: &batch.Worker{
			Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Trigger: d.Trigger, Clock: batch.SystemClock{},
			Log: d.Log, Pipelines: reg, Lease: d.Config.Lease, Metrics: d.Metrics, Secrets: secret.New(d.AWS, 0),
			Staging: effects.Staging(d.Config.EffectTables),
		},
		DeadLetterARN: d.Config.DeadLetterARN,
	}
	lambda.StartWithOptions(handler.Invoke(h.Handle), lambda.WithContext(ctx))
}
