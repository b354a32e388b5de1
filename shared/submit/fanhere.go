package submit

import (
	"context"
	"errors"
	"time"

	"github.com/bulkrun/bulkrun/shared/fanout"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// DefaultFanOutHere is the stack's Submitter.FanOutHere: 100 item
// messages, ten SendMessageBatch calls of SQS's 10 entries each ("Amazon
// SQS message quotas": at most 10 messages and 256 KiB a call; large
// packs take more calls, up to one a message), about what one fan-out
// message's delivery costs the item function before its first item runs
// (a read of the chunk, then those calls). Inline sources are small; an
// S3 source is read, and fanned out, in submit's own background
// invocation (Submitter.Handoff).
const DefaultFanOutHere = 100

// FanOutHereTime bounds submit's own sends (fanOutHere): what is not on
// the queue by then goes in the chunk's fan-out message, sent after, so
// that a queue throttling or failing submit's sends does not hold the
// submit call through two rounds of the queue adapter's retries (8 tries
// an entry with 12.7 s of waits between them, internal/queue, on top of
// the SDK's own) against API Gateway's 29 s integration timeout
// ("Amazon API Gateway quotas"). The count of a chunk sent in time is not
// bounded by it.
const FanOutHereTime = 3 * time.Second

// boundedQueue is a queue whose sends end by until (their context's
// deadline), reporting what is unsent then (ledger.UnsentError).
type boundedQueue struct {
	ledger.Queue
	until time.Time
}

func (q boundedQueue) Send(ctx context.Context, bodies [][]byte) error {
	ctx, cancel := context.WithDeadline(ctx, q.until)
	defer cancel()
	return q.Queue.Send(ctx, bodies)
}

// errRefusedHere makes fanout.Expander stop at a message the queue
// refused as the sender's fault: recording its items failed is the item
// function's (fanout.Expander.Settle), which the chunk's fan-out message
// then reaches.
var errRefusedHere = errors.New("a message refused by the queue is left to the item function")

// fanOutHere sends the item messages of m's chunk (b's only one) from
// submit itself, with fanout.Expander as the item function does for a
// fan-out message, when b is small enough: at most s.FanOutHere
// messages, no max_concurrency (its tracks start the run), no sample
// (its approval). Its first items are then on the items queue one delivery
// sooner: a small batch does not wait for a fan-out message to be
// received, behind a large batch's backlog on a busy stack too.
//
// It reports whether the whole chunk is on the queue and counted as
// fanned out. When not (an error, a message the queue refused, a sample
// held, sends not done within FanOutHereTime), m.Sent holds the messages
// already on the queue and the caller sends m as the chunk's fan-out
// message, whose delivery sends only the others
// (fanout.Expander.Expand); a message sent twice runs once (its unit's
// reservation). What stopped it is logged.
func (s *Submitter) fanOutHere(ctx context.Context, b ledger.Batch, m *ledger.Message) bool {
	// A sampled batch's approval is made from its row's sample when the
	// row is read (the b of a new batch has none yet): its first run's
	// fan-out is the item function's, which holds the rest of the chunk
	// (fanout.Expander.Expand, Result.Held).
	if s.FanOutHere <= 0 || m.Chunk == nil || b.MaxConcurrency > 0 || b.Sample > 0 || b.Stop != "" {
		return false
	}
	pack := int64(b.Pack())
	if (m.Chunk.Count+pack-1)/pack > int64(s.FanOutHere) {
		return false
	}
	log := s.Log.With("batch_id", b.ID, "run", b.Run)
	e := fanout.Expander{Queue: boundedQueue{Queue: s.Queue, until: time.Now().Add(FanOutHereTime)}, Blobs: s.Blobs, Store: s.Store, Clock: s.Clock,
		Settle: func(context.Context, source.Chunk, int64, []string, string) (int64, error) {
			return 0, errRefusedHere
		}}
	res, err := e.Expand(ctx, log, b, m)
	switch {
	case err != nil:
		log.WarnContext(ctx, "fan-out in submit stopped; the chunk's fan-out message sends the rest", "error", err.Error(), "sent", res.Sent)
		return false
	case res.Held || res.Refused > 0:
		return false
	}
	s.Metrics.FanOut(res.Sent, b.ID, b.Run)
	return true
}
