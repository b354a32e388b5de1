// Package queue is the SQS adapter of batch.Queue. It is the only importer
// of the SQS SDK.
package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/shared/batch"
)

// SQS limits (Amazon SQS developer guide, "Amazon SQS message quotas"): at
// most 10 entries per SendMessageBatch, and a batch's payload at most
// 256 KiB in the older limit that emulators keep (1 MiB on AWS since 2025).
// MaxVisibility is SQS's 12-hour ceiling for ChangeMessageVisibility.
const (
	MaxBatchEntries = 10
	MaxBatchBytes   = 256 << 10
	MaxVisibility   = 12 * time.Hour
	// MaxSendTries is how many times an entry that SQS failed is sent.
	MaxSendTries = 8
)

// Queue implements batch.Queue on one SQS queue. Safe for concurrent use.
type Queue struct {
	sqs *sqs.Client
	url string
}

var _ batch.Queue = (*Queue)(nil)

// New returns a Queue on the queue at url.
func New(client *sqs.Client, url string) *Queue { return &Queue{sqs: client, url: url} }

// Send delivers every body in SendMessageBatch calls of ≤ 10 entries and
// ≤ 256 KiB, checking every entry's result and re-sending failed entries
// with exponential backoff (50 ms × 2^try) up to MaxSendTries. It returns an
// error naming how many bodies could not be sent; none is ever dropped
// silently. A body larger than 256 KiB is an error (the caller sends
// pointers for large inputs).
func (q *Queue) Send(ctx context.Context, bodies [][]byte) error {
	for i, b := range bodies {
		if len(b) > MaxBatchBytes {
			return fmt.Errorf("send: message %d is %d bytes, more than %d", i, len(b), MaxBatchBytes)
		}
	}
	start := 0
	for start < len(bodies) {
		end, size := start, 0
		for end < len(bodies) && end-start < MaxBatchEntries && size+len(bodies[end]) <= MaxBatchBytes {
			size += len(bodies[end])
			end++
		}
		if err := q.sendBatch(ctx, bodies[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

func (q *Queue) sendBatch(ctx context.Context, bodies [][]byte) error {
	pending := map[string]string{}
	for i, b := range bodies {
		pending[strconv.Itoa(i)] = string(b)
	}
	var lastErr error
	for try := 0; try < MaxSendTries && len(pending) > 0; try++ {
		if try > 0 {
			t := time.NewTimer(time.Duration(50<<try) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("send: %d messages unsent: %w", len(pending), ctx.Err())
			case <-t.C:
			}
		}
		entries := make([]types.SendMessageBatchRequestEntry, 0, len(pending))
		for id, body := range pending {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(body)})
		}
		out, err := q.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil {
			lastErr = err
			continue
		}
		for _, ok := range out.Successful {
			delete(pending, aws.ToString(ok.Id))
		}
		for _, f := range out.Failed {
			lastErr = fmt.Errorf("entry %s: %s: %s", aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message))
			if f.SenderFault {
				return fmt.Errorf("send: message refused: %w", lastErr)
			}
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("send: %d messages unsent after %d tries: %w", len(pending), MaxSendTries, lastErr)
	}
	return nil
}

// Delay sets a received message's visibility timeout to d from now
// (clamped to 0–12 h), so that it comes back after d.
func (q *Queue) Delay(ctx context.Context, receiptHandle string, d time.Duration) error {
	d = min(max(d, 0), MaxVisibility)
	_, err := q.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &q.url, ReceiptHandle: &receiptHandle, VisibilityTimeout: int32(d / time.Second),
	})
	if err != nil {
		return fmt.Errorf("change visibility: %w", err)
	}
	return nil
}
