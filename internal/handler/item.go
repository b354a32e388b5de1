package handler

import (
	"context"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/worker"
)

// Item is the item function: SQS batches from the items queue and its
// dead-letter queue, with partial batch responses (ReportBatchItemFailures).
type Item struct {
	Worker *worker.Worker
	// DeadLetterARN is the dead-letter queue's ARN: its messages are
	// recorded as dead-lettered instead of run.
	DeadLetterARN string
}

// Router is the item function's one route: SQS batches.
func (h *Item) Router() Router {
	return Router{function: "item", routes: []route{
		{"sqs", func(e envelope) bool { return len(e.Records) > 0 }, decode("sqs", h.Handle)},
	}}
}

// Handle runs one SQS batch. It always returns a non-nil failure list: an
// emulator's poller reads {"batchItemFailures": null} as "retry all".
func (h *Item) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ds := make([]worker.Delivery, 0, len(ev.Records))
	for _, r := range ev.Records {
		n, _ := strconv.Atoi(r.Attributes["ApproximateReceiveCount"])
		ds = append(ds, worker.Delivery{
			MessageID: r.MessageId, Body: []byte(r.Body), ReceiptHandle: r.ReceiptHandle, ReceiveCount: n,
			DeadLetter: h.DeadLetterARN != "" && r.EventSourceARN == h.DeadLetterARN,
		})
	}
	failed := h.Worker.Handle(ctx, ds)
	resp := events.SQSEventResponse{BatchItemFailures: make([]events.SQSBatchItemFailure, 0, len(failed))}
	for _, id := range failed {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
	}
	return resp, nil
}
