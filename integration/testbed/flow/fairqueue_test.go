package flow

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// fairQueue receives from a memQueue as an SQS standard queue with fair
// queues does ("How Amazon SQS fair queues work", SQS developer guide),
// as the emulator's launcher does too (localstack/delivery.py; MiniStack
// itself ignores a standard queue's MessageGroupId), here by rounds:
//
//   - a message's tenant is its MessageGroupId, here the group the SQS
//     adapter sends it in (ledger.MessageGroup); a message with none is a
//     tenant of its own;
//   - a tenant is noisy when it holds more than 10 % of the messages in
//     flight and at least 30 of them, and stays noisy until its backlog
//     is drained;
//   - consumers get the quiet tenants' messages first whenever there are
//     any; then the noisy tenants', the one with the fewest in flight
//     first.
//
// Each receive is one round of the consumers: at most capacity messages
// in flight, all handled before the next receive (so the round's
// messages are the ones in flight when the next is chosen). The
// processing-time share, the guide's other measure, is not modelled: in
// these tests every message of a tenant takes as long. groupless: every
// message is sent with no group (a tenant of its own), as before bulkrun
// set one.
type fairQueue struct {
	q         *memQueue
	capacity  int
	groupless bool

	mu       sync.Mutex
	inFlight map[string]int // tenant → its messages of the last round
	noisy    map[string]bool
}

func (f *fairQueue) tenant(d worker.Delivery) string {
	if g := ledger.MessageGroup(d.Body); g != "" && !f.groupless {
		return g
	}
	return "message:" + d.MessageID
}

// receive takes the next round's messages off the queue.
func (f *fairQueue) receive() []worker.Delivery {
	all := f.q.take()
	f.mu.Lock()
	defer f.mu.Unlock()
	total, backlog := 0, map[string]int{}
	for _, n := range f.inFlight {
		total += n
	}
	tenants := make([]string, len(all))
	for i, d := range all {
		tenants[i] = f.tenant(d)
		backlog[tenants[i]]++
	}
	if f.noisy == nil {
		f.noisy = map[string]bool{}
	}
	for t := range backlog {
		n := f.inFlight[t]
		f.noisy[t] = n >= 30 && float64(n) > 0.1*float64(total) || f.noisy[t]
	}
	for t := range f.noisy {
		if backlog[t] == 0 {
			delete(f.noisy, t) // its backlog drained
		}
	}
	taken := make([]bool, len(all))
	var out []worker.Delivery
	now := map[string]int{}
	for i, d := range all { // the quiet tenants' first, in the queue's order
		if len(out) == f.capacity {
			break
		}
		if t := tenants[i]; !f.noisy[t] {
			out, taken[i] = append(out, d), true
			now[t]++
		}
	}
	for len(out) < f.capacity { // then the noisy one with the fewest in flight
		pick := -1
		for i := range all {
			if !taken[i] && (pick < 0 || now[tenants[i]] < now[tenants[pick]]) {
				pick = i
			}
		}
		if pick < 0 {
			break
		}
		out, taken[pick] = append(out, all[pick]), true
		now[tenants[pick]]++
	}
	var rest []worker.Delivery
	for i, d := range all {
		if !taken[i] {
			rest = append(rest, d)
		}
	}
	f.q.put(rest)
	f.inFlight = now
	return out
}

// TestFairQueueLetsASmallBatchPass guards the fair share between
// batches (issue 30's "50 items behind 20,000"): a batch of 50 items
// submitted while one of 6,000 items has its whole backlog on the queue,
// consumers taking 60 messages a round, one item a message. Each message
// is sent in its batch's message group, so the queue's fair queues
// deliver the small batch's messages first: it ends within 4 rounds of
// its submit, where without groups (every message a tenant of its own:
// the queue's order) it waits behind the backlog, about 100 rounds. The
// large batch ends either way, every item of both called once.
func TestFairQueueLetsASmallBatchPass(t *testing.T) {
	const large, small, capacity = 6000, 50, 60
	rounds := map[bool]int{}
	for _, groupless := range []bool{false, true} {
		t.Run(fmt.Sprintf("groupless=%v", groupless), func(t *testing.T) {
			ctx := context.Background()
			var mu sync.Mutex
			calls := map[string]int{}
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				mu.Lock()
				calls[req.BatchID+"/"+req.Key]++
				mu.Unlock()
				return pipeline.Result{Output: []byte(`{}`)}, nil
			})
			r.sub.ChunkItems = 1000
			fq := &fairQueue{q: r.queue, capacity: capacity, groupless: groupless}
			submitK(t, r, "large", 1, large, nil)
			done := func(id string) int64 {
				b, err := r.store.GetBatch(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				p, err := r.store.Progress(ctx, id, 1, max(1, b.CounterShards))
				if err != nil {
					t.Fatal(err)
				}
				return p.Done
			}
			submittedAt, smallAt, largeAt := -1, -1, -1
			for round := 0; smallAt < 0 || largeAt < 0; round++ {
				if round > 1000 {
					t.Fatalf("not done in 1,000 rounds: small %d, large %d", done("small"), done("large"))
				}
				if round == 3 { // the large batch's items fill the queue by now
					submitK(t, r, "small", 1, small, nil)
					submittedAt = round
				}
				ds := fq.receive()
				if len(ds) > capacity {
					t.Fatalf("round %d: %d messages in flight, capacity %d", round, len(ds), capacity)
				}
				if failed := r.worker.Handle(ctx, ds); len(failed) > 0 {
					t.Fatalf("round %d: %d deliveries failed", round, len(failed))
				}
				if smallAt < 0 && submittedAt >= 0 && done("small") == small {
					smallAt = round
				}
				if largeAt < 0 && done("large") == large {
					largeAt = round
				}
			}
			for id, n := range map[string]int{"large": large, "small": small} {
				for i := range n {
					if c := calls[id+"/"+api.PositionalKey(int64(i))]; c != 1 {
						t.Fatalf("%s item %d called %d times, want once", id, i, c)
					}
				}
			}
			rounds[groupless] = smallAt - submittedAt
			t.Logf("consumers of %d messages a round: the %d-item batch ended %d rounds after its submit (round %d); the %d-item batch at round %d",
				capacity, small, smallAt-submittedAt, submittedAt, large, largeAt)
		})
	}
	if rounds[false] > 4 {
		t.Errorf("with message groups the small batch took %d rounds, want ≤ 4", rounds[false])
	}
	if rounds[true] < 50 {
		t.Errorf("without message groups the small batch took %d rounds: the model no longer keeps the queue's order?", rounds[true])
	}
}

// TestFairQueueGivesPriorityItsShare guards a batch's priority (issue
// 30's "a high-priority batch's share of calls while both run"): two
// batches of 3,000 items, one item a message, submitted together on
// the fair queue model, consumers taking capacity messages a round. At
// priorities 1 and 1 each batch makes 40–60 % of the calls until one of
// them ends. At 3 and 1 the first batch is sent in 3 message groups
// (ledger.MessageGroup) and makes at least 65 % of them: at 240
// messages a round every group is busy enough to be a noisy tenant and
// the groups share about equally (72 % measured; 3 shares of 4 are
// 75 %); at 60 a round the first batch's groups hold 20 messages each,
// too few to be noisy, and go first until its backlog is drained (98 %
// measured: a strict precedence, the second batch waiting). Every item of both is called
// once either way.
func TestFairQueueGivesPriorityItsShare(t *testing.T) {
	const n = 3000
	for _, capacity := range []int{60, 240} {
		for _, high := range []int{1, 3} {
			t.Run(fmt.Sprintf("capacity=%d/priority=%d", capacity, high), func(t *testing.T) {
				ctx := context.Background()
				var mu sync.Mutex
				calls := map[string]int{}
				round := map[string]int{} // this round's calls per batch
				r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
					mu.Lock()
					calls[req.BatchID+"/"+req.Key]++
					round[req.BatchID]++
					mu.Unlock()
					return pipeline.Result{Output: []byte(`{}`)}, nil
				})
				r.sub.ChunkItems = 1000
				fq := &fairQueue{q: r.queue, capacity: capacity}
				submitK(t, r, "high", 1, n, func(req *api.SubmitRequest) { req.Priority = high })
				submitK(t, r, "low", 1, n, nil)
				done := func(id string) int64 {
					b, err := r.store.GetBatch(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					p, err := r.store.Progress(ctx, id, 1, max(1, b.CounterShards))
					if err != nil {
						t.Fatal(err)
					}
					return p.Done
				}
				var both, highBoth, rounds int // until one of them ends
				for i := 0; done("high") < n || done("low") < n; i++ {
					if i > 1000 {
						t.Fatalf("not done in 1,000 rounds: high %d, low %d", done("high"), done("low"))
					}
					clear(round)
					if failed := r.worker.Handle(ctx, fq.receive()); len(failed) > 0 {
						t.Fatalf("round %d: %d deliveries failed", i, len(failed))
					}
					if done("high") < n && done("low") < n {
						both, highBoth, rounds = both+round["high"]+round["low"], highBoth+round["high"], rounds+1
					}
				}
				for _, id := range []string{"high", "low"} {
					for i := range n {
						if c := calls[id+"/"+api.PositionalKey(int64(i))]; c != 1 {
							t.Fatalf("%s item %d called %d times, want once", id, i, c)
						}
					}
				}
				share := float64(highBoth) / float64(max(1, both))
				t.Logf("priorities %d and 1, consumers of %d messages a round: until one ended (%d rounds, %d calls) the first batch made %.1f %% of the calls", high, capacity, rounds, both, 100*share)
				lo, hi := 0.40, 0.60
				if high == 3 {
					lo, hi = 0.65, 1.0
				}
				if rounds < 5 || share < lo || share > hi {
					t.Errorf("priority %d against 1: the first batch's share %.1f %% over %d rounds, want %.0f–%.0f %% over ≥ 5", high, 100*share, rounds, 100*lo, 100*hi)
				}
			})
		}
	}
}
