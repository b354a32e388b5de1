// Package queue is the SQS adapter of ledger.Queue. It is the only importer
// of the SQS SDK.
package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/internal/retry"
	"github.com/bulkrun/bulkrun/shared/ledger"
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
	// DefaultSendConcurrency is how many SendMessageBatch calls Send has
	// in flight at once: as many as the SDK's HTTP client keeps idle
	// connections per host (aws-sdk-go-v2 aws/transport/http,
	// DefaultHTTPTransportMaxIdleConnsPerHost = 10), so that every call
	// reuses a connection. A standard queue takes "a nearly unlimited
	// number of API calls per second" (Amazon SQS developer guide,
	// "Amazon SQS standard queues").
	DefaultSendConcurrency = 10
)

// resendRetry spaces the sends of entries SQS failed: 100 ms × 2^(n−1)
// before send n+1.
var resendRetry = retry.Schedule{Interval: 100 * time.Millisecond}

// Queue implements ledger.Queue on one SQS queue. Safe for concurrent use.
type Queue struct {
	sqs *sqs.Client
	url string
	// SendConcurrency is how many SendMessageBatch calls Send has in
	// flight at once; 0 means DefaultSendConcurrency, 1 one call after
	// another (below 0: as 0). Set it before the first Send.
	SendConcurrency int
}

var _ ledger.Queue = (*Queue)(nil)

// MaxDelay is the longest delay of Requeue: SQS's DelaySeconds is 0–900 s
// (Amazon SQS API reference, "SendMessage").
const MaxDelay = 15 * time.Minute

// New returns a Queue on the queue at url. It uses a copy of client with
// bulkrun's retryer (no client-side retry quota) and AWS's transient faults
// tagged ledger.ErrUnavailable (internal/awsfault); client is not changed.
func New(client *sqs.Client, url string) *Queue {
	client = sqs.New(client.Options(), func(o *sqs.Options) {
		o.Retryer = awsfault.Retryer()
		o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("sqs"))
	})
	return &Queue{sqs: client, url: url}
}

// Send delivers every body in SendMessageBatch calls of ≤ 10 entries and
// ≤ 256 KiB, SendConcurrency calls at a time, checking every entry's
// result. Entries that failed on SQS's side (SenderFault false) are sent
// again, alone — never the entries SQS already accepted — with
// exponential backoff (resendRetry) up to MaxSendTries. Entries SQS
// refused as the sender's fault (SenderFault true: a character outside
// SQS's allowed set, a body too large) are never retried: Send goes on
// with the other bodies and returns a *ledger.RefusedError listing them.
// Bodies still unsent after the tries give a *ledger.UnsentError naming
// exactly them (and the refused ones), wrapping ledger.ErrUnavailable:
// once a call fails no new call starts (its bodies are unsent too), and
// the calls in flight then finish, so that what they sent is known and a
// caller sends again only the unsent bodies. A body larger than 256 KiB
// is refused without a call. No body is ever dropped silently. The calls
// run concurrently, so bodies reach the queue in no particular order (a
// standard queue keeps none either).
func (q *Queue) Send(ctx context.Context, bodies [][]byte) error {
	var refused []ledger.Refusal
	var calls [][]int // indexes in bodies of each call's entries
	idx := make([]int, 0, MaxBatchEntries)
	size := 0
	for i, b := range bodies {
		if len(b) > MaxBatchBytes {
			refused = append(refused, ledger.Refusal{Index: i, Code: "MessageTooLong", Message: fmt.Sprintf("message is %d bytes, more than %d", len(b), MaxBatchBytes)})
			continue
		}
		if len(idx) == MaxBatchEntries || len(idx) > 0 && size+len(b) > MaxBatchBytes {
			calls, idx, size = append(calls, idx), make([]int, 0, MaxBatchEntries), 0
		}
		idx = append(idx, i)
		size += len(b)
	}
	if len(idx) > 0 {
		calls = append(calls, idx)
	}
	var g errgroup.Group
	if q.SendConcurrency > 0 {
		g.SetLimit(q.SendConcurrency)
	} else {
		g.SetLimit(DefaultSendConcurrency)
	}
	var (
		mu      sync.Mutex
		unsent  []int
		lastErr error
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lastErr != nil
	}
	skip := func(idx []int) bool {
		if !failed() && ctx.Err() == nil {
			return false
		}
		// A call failed (or the caller gave up): the rest stay unsent.
		mu.Lock()
		defer mu.Unlock()
		unsent = append(unsent, idx...)
		if lastErr == nil {
			lastErr = ctx.Err()
		}
		return true
	}
	for _, idx := range calls {
		if skip(idx) {
			continue
		}
		g.Go(func() error {
			if skip(idx) { // another call failed while this one waited for its turn
				return nil
			}
			r, left, err := q.sendBatch(ctx, bodies, idx)
			mu.Lock()
			defer mu.Unlock()
			refused = append(refused, r...)
			unsent = append(unsent, left...)
			if err != nil && lastErr == nil {
				lastErr = err
			}
			return nil
		})
	}
	_ = g.Wait()
	slices.SortFunc(refused, func(a, b ledger.Refusal) int { return a.Index - b.Index })
	if len(unsent) > 0 {
		slices.Sort(unsent)
		if ctx.Err() != nil {
			lastErr = fmt.Errorf("send: %w", ctx.Err())
		}
		return &ledger.UnsentError{Unsent: unsent, Refused: refused, Err: lastErr}
	}
	if len(refused) > 0 {
		return &ledger.RefusedError{Refused: refused}
	}
	return nil
}

// sendBatch sends bodies[i] for every i of idx in one SendMessageBatch,
// then only the entries that failed transiently, and returns the entries
// refused as the sender's fault and the indexes still unsent, with why.
func (q *Queue) sendBatch(ctx context.Context, bodies [][]byte, idx []int) ([]ledger.Refusal, []int, error) {
	pending := make(map[string]int, len(idx)) // entry id → index in bodies
	for _, i := range idx {
		pending[strconv.Itoa(i)] = i
	}
	left := func() []int {
		out := make([]int, 0, len(pending))
		for _, i := range pending {
			out = append(out, i)
		}
		return out
	}
	var refused []ledger.Refusal
	var lastErr error
	entries := false // the last try ended with entries SQS failed on its side
	for try := 0; try < MaxSendTries && len(pending) > 0; try++ {
		if try > 0 {
			t := time.NewTimer(resendRetry.Delay(try))
			select {
			case <-ctx.Done():
				t.Stop()
				return refused, left(), fmt.Errorf("send: %d messages unsent: %w", len(pending), ctx.Err())
			case <-t.C:
			}
		}
		batch := make([]types.SendMessageBatchRequestEntry, 0, len(pending))
		for id, i := range pending {
			batch = append(batch, types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(string(bodies[i])), MessageGroupId: group(bodies[i])})
		}
		slices.SortFunc(batch, func(a, b types.SendMessageBatchRequestEntry) int { return pending[*a.Id] - pending[*b.Id] })
		out, err := q.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &q.url, Entries: batch})
		if err != nil {
			lastErr, entries = err, false
			if ctx.Err() != nil || !errors.Is(err, ledger.ErrUnavailable) {
				break // the caller gave up, or SQS refuses the call as such
			}
			continue
		}
		for _, ok := range out.Successful {
			delete(pending, aws.ToString(ok.Id))
		}
		for _, f := range out.Failed {
			id := aws.ToString(f.Id)
			i, known := pending[id]
			if !known {
				continue
			}
			if f.SenderFault {
				refused = append(refused, ledger.Refusal{Index: i, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)})
				delete(pending, id)
				continue
			}
			lastErr, entries = fmt.Errorf("entry %s: %s: %s", id, aws.ToString(f.Code), aws.ToString(f.Message)), true
		}
	}
	if len(pending) > 0 {
		if entries {
			// Entries SQS failed on its side (SenderFault false): its fault
			// of the moment, unavailable. A failed call says for itself.
			lastErr = fmt.Errorf("%w: %w", ledger.ErrUnavailable, lastErr)
		}
		return refused, left(), fmt.Errorf("send: %d messages unsent: %w", len(pending), lastErr)
	}
	return refused, nil, nil
}

// group is the MessageGroupId body is sent with: its batch's
// (ledger.MessageGroup), so that the standard queue's fair queues deliver
// the batches' messages fairly; nil (no group) when it names none.
func group(body []byte) *string {
	if g := ledger.MessageGroup(body); g != "" {
		return &g
	}
	return nil
}

// Requeue sends body as a new message that becomes visible after delay
// (whole seconds, clamped to 0–MaxDelay). A new message starts with a
// receive count of 0, so requeueing does not bring it closer to the
// dead-letter queue. A refused body is a *ledger.RefusedError.
func (q *Queue) Requeue(ctx context.Context, body []byte, delay time.Duration) error {
	delay = min(max(delay, 0), MaxDelay)
	_, err := q.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.url, MessageBody: aws.String(string(body)), MessageGroupId: group(body),
		DelaySeconds: int32((delay + time.Second - 1) / time.Second)})
	if err != nil {
		return fmt.Errorf("requeue: %w", err)
	}
	return nil
}

// Delay sets a received message's visibility timeout to d from now
// (clamped to 0–12 h, rounded up to whole seconds), so that it comes back
// no sooner than d.
func (q *Queue) Delay(ctx context.Context, receiptHandle string, d time.Duration) error {
	d = min(max(d, 0), MaxVisibility)
	_, err := q.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &q.url, ReceiptHandle: &receiptHandle, VisibilityTimeout: int32((d + time.Second - 1) / time.Second),
	})
	if err != nil {
		return fmt.Errorf("change visibility: %w", err)
	}
	return nil
}
