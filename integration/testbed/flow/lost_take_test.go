package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// lostTakeStore simulates the AWS SDK resending a take whose answer was
// lost (a reset connection after DynamoDB applied it; awsfault.Retryer
// resends UpdateItem up to 6 times): the first Reserve / pack take is
// applied, then sent again, and the delivery sees the second answer.
type lostTakeStore struct {
	worker.Store
	mu   sync.Mutex
	done bool
}

func (s *lostTakeStore) once() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false
	}
	s.done = true
	return true
}

func (s *lostTakeStore) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Item, error) {
	if !s.once() {
		return s.Store.Reserve(ctx, r)
	}
	if _, err := s.Store.Reserve(ctx, r); err != nil {
		return ledger.Item{}, err
	}
	return s.Store.Reserve(ctx, r) // the SDK's resend; its answer is the one seen
}

func (s *lostTakeStore) WritePack(ctx context.Context, w ledger.PackWrite) error {
	if !w.Take || !s.once() {
		return s.Store.WritePack(ctx, w)
	}
	if err := s.Store.WritePack(ctx, w); err != nil {
		return err
	}
	return s.Store.WritePack(ctx, w)
}

// TestLostAnswerOfTheTake: "Throttling, 5xx and lost answers never use an
// attempt, fail an item or dead-letter it" (docs/design.md). A take whose
// answer was lost is answered, on the SDK's resend, with the delivery's own
// reservation as "held by another delivery": the delivery held itself off
// until its own lease ended, and the next take found the item
// interrupted (quarantined or failed with max_attempts 1, never called).
func TestLostAnswerOfTheTake(t *testing.T) {
	for _, k := range packKs {
		for _, policy := range []api.InterruptPolicy{api.InterruptRetry, api.InterruptQuarantine} {
			t.Run(fmt.Sprintf("K=%d/%s", k, policy), func(t *testing.T) {
				ctx := context.Background()
				r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
					return pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"attempt":%d}`, req.Attempt))}, nil
				})
				submitK(t, r, "lost", k, 1, func(q *api.SubmitRequest) { q.OnInterrupt = policy; q.MaxAttempts = 1 })
				r.worker.Handle(ctx, r.queue.take()) // fan-out
				r.worker.Store = &lostTakeStore{Store: r.store}
				r.drain(t, ctx, 1) // without the take's token: held off by its own take until the 1,000th round
				key := api.PositionalKey(0)
				it := memItem(t, r, "lost", key)
				if it.Outcome != api.OutcomeSucceeded || r.callsOf(key) != 1 {
					t.Fatalf("item %s: outcome %s reason %q error %q attempt %d, pipeline calls %d; want succeeded after 1 call",
						key, it.Outcome, it.Reason, it.Error, it.Attempt, r.callsOf(key))
				}
			})
		}
	}
}
