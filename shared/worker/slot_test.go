package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// TestSlotsToTry: the slots an item tries are distinct, within [0, n), at
// most SlotTries, and every slot of a small batch is tried.
func TestSlotsToTry(t *testing.T) {
	for _, n := range []int{1, 2, SlotTries, 10, api.MaxBatchConcurrency} {
		got := slotsToTry(n)
		if len(got) != min(n, SlotTries) {
			t.Fatalf("slotsToTry(%d) = %v, want %d slots", n, got, min(n, SlotTries))
		}
		seen := map[int]bool{}
		for _, i := range got {
			if i < 0 || i >= n || seen[i] {
				t.Fatalf("slotsToTry(%d) = %v: out of range or repeated", n, got)
			}
			seen[i] = true
		}
	}
	for range 100 {
		if w := slotWait(); w < SlotWait || w > 4*SlotWait {
			t.Fatalf("slotWait() = %s, want within [%s, %s]", w, SlotWait, 4*SlotWait)
		}
	}
}

// slotStore has every slot taken and counts reservations.
type slotStore struct {
	ledger.Store
	tried    []int
	reserves int
}

// ReadAdapt answers no adaptive row: the downstream never throttled.
func (s *slotStore) ReadAdapt(context.Context, string) (pace.Adapt, error) { return pace.Adapt{}, nil }

func (s *slotStore) AcquireSlot(_ context.Context, _ string, slot int, _ string, _ time.Time, _ time.Duration) error {
	s.tried = append(s.tried, slot)
	return api.ErrConflict
}

func (s *slotStore) Reserve(context.Context, ledger.Reservation) (ledger.Item, error) {
	s.reserves++
	return ledger.Item{}, errors.New("reserved")
}

type requeueQueue struct {
	ledger.Queue
	requeued [][]byte
	delays   []time.Duration
}

func (q *requeueQueue) Requeue(_ context.Context, body []byte, d time.Duration) error {
	q.requeued = append(q.requeued, body)
	q.delays = append(q.delays, d)
	return nil
}

// TestMaxConcurrencyWaitCountsNoAttempt guards that an item of a batch
// with max_concurrency that finds its slots taken is never reserved (no
// attempt toward max_attempts) and is sent again as a new message (its
// receive count starts again, never nearing the dead-letter queue).
func TestMaxConcurrencyWaitCountsNoAttempt(t *testing.T) {
	st, q := &slotStore{}, &requeueQueue{}
	w := &Worker{Store: st, Queue: q, Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Lease: time.Minute}
	b := ledger.Batch{Batch: api.Batch{ID: "b", Plan: api.Plan{Pipeline: "webhook", MaxAttempts: 3, MaxConcurrency: 5}, Run: 1, Status: api.StatusRunning}}
	m := ledger.Message{Kind: ledger.KindItem, BatchID: "b", Run: 1, Key: "k", Input: json.RawMessage(`{}`)}
	ack, dn := w.runUnit(context.Background(), w.Log, b, itemUnitMessage(&m), Delivery{MessageID: "m1", ReceiveCount: 4}, &invocation{items: make(chan struct{}, 1), margin: time.Second})
	if !ack || dn != nil {
		t.Fatalf("item = %v, %v; want acknowledged (sent again) and nothing counted", ack, dn)
	}
	if st.reserves != 0 {
		t.Fatalf("%d reservations; a wait for a slot must not take an attempt", st.reserves)
	}
	if len(st.tried) != SlotTries || len(q.requeued) != 1 {
		t.Fatalf("tried slots %v, requeued %d; want %d slots tried and one new message", st.tried, len(q.requeued), SlotTries)
	}
	var again ledger.Message
	if err := json.Unmarshal(q.requeued[0], &again); err != nil || again.Key != "k" || again.Requeued != 0 {
		t.Fatalf("requeued message %s (%v): want the same item, its requeue count untouched", q.requeued[0], err)
	}
	if q.delays[0] < SlotWait {
		t.Fatalf("sent again after %s, want at least %s", q.delays[0], SlotWait)
	}
}

// delayQueue records the delays of received messages.
type delayQueue struct {
	requeueQueue
	delayed []string
}

func (q *delayQueue) Delay(_ context.Context, receiptHandle string, d time.Duration) error {
	q.delayed = append(q.delayed, receiptHandle)
	return nil
}

// TestSlotWaitsBounded guards the loop's own bound (MaxResends): each
// slot wait sends the message again with SlotWaits + 1; at MaxResends the
// message is no longer sent again but delayed on the queue, and the
// delivery is not acknowledged (its receive counts toward the redrive).
func TestSlotWaitsBounded(t *testing.T) {
	st, q := &slotStore{}, &delayQueue{}
	w := &Worker{Store: st, Queue: q, Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Lease: time.Minute}
	b := ledger.Batch{Batch: api.Batch{ID: "b", Plan: api.Plan{Pipeline: "webhook", MaxAttempts: 3, MaxConcurrency: 5}, Run: 1, Status: api.StatusRunning}}
	m := ledger.Message{Kind: ledger.KindItem, BatchID: "b", Run: 1, Key: "k", Input: json.RawMessage(`{}`), SlotWaits: 41}
	if ack, _ := w.runUnit(context.Background(), w.Log, b, itemUnitMessage(&m), Delivery{MessageID: "m1", ReceiptHandle: "r1"}, &invocation{items: make(chan struct{}, 1), margin: time.Second}); !ack {
		t.Fatal("a wait below the bound: not acknowledged")
	}
	var again ledger.Message
	if err := json.Unmarshal(q.requeued[0], &again); err != nil || again.SlotWaits != 42 {
		t.Fatalf("sent again with slot_waits %d (%v), want 42", again.SlotWaits, err)
	}
	m.SlotWaits = ledger.MaxResends
	if ack, _ := w.runUnit(context.Background(), w.Log, b, itemUnitMessage(&m), Delivery{MessageID: "m2", ReceiptHandle: "r2"}, &invocation{items: make(chan struct{}, 1), margin: time.Second}); ack {
		t.Fatal("a wait at the bound was acknowledged: the message would be lost")
	}
	if len(q.requeued) != 1 || len(q.delayed) != 1 || q.delayed[0] != "r2" {
		t.Fatalf("at the bound: %d sent again, delayed %v; want none sent, r2 delayed", len(q.requeued)-1, q.delayed)
	}
}
