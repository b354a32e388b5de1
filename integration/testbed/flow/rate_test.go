package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// stepClock is a clock that moves only when told (a rate lease's sleep,
// the queue's next message).
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) to(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.t) {
		c.t = t
	}
}

// timedQueue delivers a message once its delay has passed on the clock,
// due messages in a random order (a standard queue's order is best
// effort); a message Handle failed comes back after its Delay (else 30 s,
// a visibility timeout).
type timedQueue struct {
	mu    sync.Mutex
	clock *stepClock
	n     int
	due   []timedMsg
	vis   map[string]time.Duration // receipt handle → its last Delay
	sends int
}

type timedMsg struct {
	at time.Time
	d  worker.Delivery
}

func (q *timedQueue) Send(_ context.Context, bodies [][]byte) error {
	for _, b := range bodies {
		if err := q.Requeue(context.Background(), b, 0); err != nil {
			return err
		}
	}
	return nil
}

func (q *timedQueue) Requeue(_ context.Context, body []byte, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n++
	q.sends++
	// SQS delays are whole seconds, rounded up as internal/queue does.
	d = (d + time.Second - 1) / time.Second * time.Second
	q.due = append(q.due, timedMsg{at: q.clock.Now().Add(d), d: worker.Delivery{MessageID: "m" + strconv.Itoa(q.n), Body: bytes.Clone(body), ReceiptHandle: "r" + strconv.Itoa(q.n), ReceiveCount: 1}})
	return nil
}

func (q *timedQueue) Delay(_ context.Context, h string, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.vis[h] = d
	return nil
}

// next takes the messages due now, or moves the clock to the earliest
// and takes those; none when the queue is empty.
func (q *timedQueue) next(rng *rand.Rand) []worker.Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.due) == 0 {
		return nil
	}
	first := slices.MinFunc(q.due, func(a, b timedMsg) int { return a.at.Compare(b.at) }).at
	q.clock.to(first)
	now := q.clock.Now()
	var ds []worker.Delivery
	q.due = slices.DeleteFunc(q.due, func(m timedMsg) bool {
		if m.at.After(now) {
			return false
		}
		ds = append(ds, m.d)
		return true
	})
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds
}

// back puts a failed delivery back after its Delay.
func (q *timedQueue) back(d worker.Delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wait, ok := q.vis[d.ReceiptHandle]
	if !ok {
		wait = 30 * time.Second
	}
	d.ReceiveCount++
	q.due = append(q.due, timedMsg{at: q.clock.Now().Add(wait), d: d})
}

// rateRun runs batches of n items each, sharing the key "shared" at rate
// requests a second (mod sets more), handing due messages to the worker
// 10 at a time in a random order, and returns each call's time by batch
// and the messages sent.
func rateRun(t *testing.T, ids []string, n int, rate float64, mod func(*api.SubmitRequest)) (map[string][]time.Time, int) {
	t.Helper()
	ctx := context.Background()
	clock := &stepClock{t: time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)}
	var mu sync.Mutex
	calls := map[string][]time.Time{}
	var wake time.Time // where the last lease's sleep ended
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		mu.Lock()
		at := clock.Now()
		if wake.After(at) {
			at = wake
		}
		wake = time.Time{}
		calls[req.BatchID] = append(calls[req.BatchID], at)
		mu.Unlock()
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	q := &timedQueue{clock: clock, vis: map[string]time.Duration{}}
	r.sub.Queue, r.sub.Clock, r.sub.ChunkItems = q, clock, 50
	r.worker.Queue, r.worker.Clock = q, clock
	// The messages due at one time are all taken at that time, as many
	// invocations would take them at once: the clock moves only to the
	// next message due, and a lease's sleep moves only the time its call
	// is made at (one message at a time, so that the call is the sleeper's).
	r.worker.Concurrency, r.worker.ItemConcurrency = 1, 1
	r.worker.Sleep = func(_ context.Context, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		wake = clock.Now().Add(d)
	}
	for _, id := range ids {
		submitK(t, r, id, 1, n, func(req *api.SubmitRequest) {
			req.Rate = &api.Rate{Key: "shared", RequestsPerSecond: rate}
			if mod != nil {
				mod(req)
			}
		})
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; ; round++ {
		if round > 20000 {
			t.Fatal("the batches did not end in 20,000 rounds")
		}
		ds := q.next(rng)
		if len(ds) == 0 {
			break
		}
		for len(ds) > 0 {
			group := ds[:min(10, len(ds))]
			ds = ds[len(group):]
			failed := r.worker.Handle(ctx, group)
			for _, d := range group {
				if slices.Contains(failed, d.MessageID) {
					q.back(d)
				}
			}
		}
	}
	for _, id := range ids {
		if c := len(calls[id]); c != n {
			t.Errorf("%s: %d calls, want %d", id, c, n)
		}
	}
	return calls, q.sends
}

// busiest is the most calls in any window of w, and where it starts.
func busiest(times []time.Time, w time.Duration) (int, time.Time) {
	times = slices.Clone(times)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most, j, at := 0, 0, time.Time{}
	for i := range times {
		for times[i].Sub(times[j]) >= w {
			j++
		}
		if i-j+1 > most {
			most, at = i-j+1, times[j]
		}
	}
	return most, at
}

// TestRateSharedByTwoBatches guards "a rate per downstream key holds
// across every batch on it" (docs/adr/0031): two batches of 400 items
// sharing a 50 requests/s key, their messages delivered in a random
// order, make at most 550 calls (55/s) in any 10 s window of the test's
// clock, both make calls in every full 10 s window while both run, the
// whole takes no longer than the rate allows plus 10 %, and the queue
// carries at most two messages per item (its own and one wait for its
// lease): waiting costs no poll.
func TestRateSharedByTwoBatches(t *testing.T) {
	const n, rate = 400, 50.0
	calls, sends := rateRun(t, []string{"rate-a", "rate-b"}, n, rate, nil)
	all := append(slices.Clone(calls["rate-a"]), calls["rate-b"]...)
	most, at := busiest(all, 10*time.Second)
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	span := all[len(all)-1].Sub(all[0])
	t.Logf("%d calls over %v (%.1f/s); busiest 10 s window %d calls from +%v; %d messages sent",
		len(all), span, float64(len(all)-1)/span.Seconds(), most, at.Sub(all[0]), sends)
	if most > 550 {
		t.Errorf("%d calls in the 10 s window from +%v, want ≤ 550 (55/s)", most, at.Sub(all[0]))
	}
	if want := time.Duration((2*n - 1) / rate * 1.1 * float64(time.Second)); span > want {
		t.Errorf("the calls took %v, want ≤ %v (the rate less 10 %%)", span, want)
	}
	last := func(ts []time.Time) time.Time {
		return slices.MaxFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	}
	end := last(calls["rate-a"])
	if e := last(calls["rate-b"]); e.Before(end) {
		end = e
	}
	for w := all[0]; w.Add(10 * time.Second).Before(end); w = w.Add(10 * time.Second) {
		for _, id := range []string{"rate-a", "rate-b"} {
			c := 0
			for _, c0 := range calls[id] {
				if !c0.Before(w) && c0.Before(w.Add(10*time.Second)) {
					c++
				}
			}
			if c < 100 {
				t.Errorf("%s: %d calls in the window from +%v, want ≥ 100 (both progress)", id, c, w.Sub(all[0]))
			}
		}
	}
	if sends > 2*2*n+2*n/50+4 {
		t.Errorf("%d messages sent for %d items, want at most 2 per item and the fan-out", sends, 2*n)
	}
}

// TestRateOnTracks guards a rate on a batch with max_concurrency: its
// units wait for their leases in their tracks, and the key's rate holds
// with another batch on it.
func TestRateOnTracks(t *testing.T) {
	const n, rate = 300, 20.0
	calls, sends := rateRun(t, []string{"rate-t"}, n, rate, func(req *api.SubmitRequest) { req.MaxConcurrency = 3 })
	most, at := busiest(calls["rate-t"], 10*time.Second)
	t.Logf("busiest 10 s window %d calls from %v; %d messages sent", most, at, sends)
	if bound := int(rate*10*1.1) + 1; most > bound {
		t.Errorf("%d calls in the 10 s window from %v, want ≤ %d", most, at, bound)
	}
	if most < int(rate*10*0.9) {
		t.Errorf("%d calls in the busiest 10 s window, want about %v", most, rate*10)
	}
}
