//go:build integration

package integration

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/shared/api"
)

// rateLog is a receiver's own log of when it was called, by batch.
type rateLog struct {
	mu    sync.Mutex
	calls map[string][]time.Time
}

func (l *rateLog) decide(id string) func(string, int) int {
	return func(string, int) int {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.calls[id] = append(l.calls[id], time.Now())
		return 200
	}
}

// TestRateSharedByTwoBatches guards a rate per downstream key
// (docs/adr/0031) by the receiver's own log: two batches of 600 items
// submitted together, sharing a key at 50 requests a second, are called
// at most 550 times (55/s) in every 10 s window, and every item succeeds
// with one call. The pace and each window's split between the batches
// are logged.
func TestRateSharedByTwoBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const items, rate = 600, 50.0
	a, b := newID(t)+"-a", newID(t)+"-b"
	key := "rate-test-" + newID(t)
	log := &rateLog{calls: map[string][]time.Time{}}
	for _, id := range []string{a, b} {
		req := webhookRequest(id, env.hook.route(id, log.decide(id)), inlineItems(items))
		req.Rate = &api.Rate{Key: key, RequestsPerSecond: rate}
		if v, err := env.api.Submit(ctx, req); err != nil || v.Rate == nil || v.Rate.Key != key {
			t.Fatalf("submit %s: %+v, %v", id, v, err)
		}
	}
	// While they wait behind the key's bookings, their views say how far
	// ahead it is booked (live.rate_booked: 1,200 calls at 50/s book the
	// key up to 24 s ahead).
	ahead := make(chan float64, 1)
	go func() {
		most := 0.0
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			v, err := env.api.Status(ctx, b)
			if err != nil || v.Status.Finished() {
				break
			}
			if r := v.Live; r != nil && r.RateBooked != nil && r.RateBooked.Key == key {
				most = max(most, r.RateBooked.AheadSeconds)
			}
		}
		ahead <- most
	}()
	for _, id := range []string{a, b} {
		v := wait(t, id)
		if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != items {
			t.Fatalf("%s: status %s, census %+v; want all %d succeeded", id, v.Status, v.Census, items)
		}
	}
	if most := <-ahead; most <= 0 {
		t.Errorf("no view of %s said its key was booked ahead (live.rate_booked)", b)
	} else {
		t.Logf("the views of %s said the key was booked up to %.1f s ahead", b, most)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	all := append(slices.Clone(log.calls[a]), log.calls[b]...)
	slices.SortFunc(all, func(x, y time.Time) int { return x.Compare(y) })
	if len(all) != 2*items {
		t.Fatalf("receiver logged %d calls, want %d", len(all), 2*items)
	}
	first, last := all[0], all[len(all)-1]
	most, j, at := 0, 0, time.Time{}
	for i := range all {
		for all[i].Sub(all[j]) >= 10*time.Second {
			j++
		}
		if i-j+1 > most {
			most, at = i-j+1, all[j]
		}
	}
	t.Logf("%d calls over %v (%.1f/s); busiest 10 s window %d calls from +%v", len(all), last.Sub(first).Round(time.Millisecond),
		float64(len(all)-1)/last.Sub(first).Seconds(), most, at.Sub(first).Round(time.Millisecond))
	if most > 550 {
		t.Errorf("%d calls in the 10 s window from +%v, want ≤ 550 (55/s)", most, at.Sub(first))
	}
	// Leases go first come, first served (docs/adr/0031): how the windows
	// split between the batches follows when each one's messages booked
	// (a loaded machine may fan one batch out seconds after the other,
	// which then waits behind its booked backlog), so the split is logged,
	// not held to a share.
	t.Logf("first calls: a +%v, b +%v", log.calls[a][0].Sub(first).Round(time.Millisecond), log.calls[b][0].Sub(first).Round(time.Millisecond))
	for w := first; w.Before(last); w = w.Add(10 * time.Second) {
		var split []string
		for _, id := range []string{a, b} {
			n := 0
			for _, c := range log.calls[id] {
				if !c.Before(w) && c.Before(w.Add(10*time.Second)) {
					n++
				}
			}
			split = append(split, fmt.Sprintf("%s %d", id[len(id)-1:], n))
		}
		t.Logf("window from +%v: %s", w.Sub(first), strings.Join(split, ", "))
	}
}

// TestTokenBudgetOnTheStack guards a token budget (docs/adr/0035) on the
// deployed stack, by the receiver's own log: a batch of 240 webhook items
// on a key of 6,000 tokens a minute (100 a second), each answer reporting
// `Bulkrun-Cost: tokens=N` of 20–80 (50 on average, which bulkrun learns
// only from the answers), one item a message. The pace from the 10th call
// (once the key's tokens per call is known) is at most the budget + 10 %.
// The tokens of the busiest minute, the budget's own period, are held at
// the budget + 15 %: a minute is a window of ≈ 120 calls booked at an
// estimate (a booking is moved by the debts settled before it starts, not
// by the calls still in flight), and the busiest of the run's ≈ 180
// overlapping minutes takes the upper tail of their error (calls of 20–80
// tokens: a standard deviation of ≈ 3 % of the budget a minute) and of
// the deliveries that came late — measured 107.0–110.9 % alone and
// beside other tests, 110.1 % in one run of the whole suite, which a
// bound of + 10 % failed. The busiest 30 s is logged, not held:
// a booking whose delivery came late is used late, so the calls of a
// stalled delivery bunch — measured: 107 % to 111 % of half the budget
// in 30 s alone, 110.4 % beside other tests, and 121.1 % in one run of
// the whole suite (whose pace from the 10th call was −6.1 %). Forfeiting
// a booking used over 2 s late was tried and rejected: where deliveries
// come late the forfeits cascade (the flow test bed: 51 % of the budget,
// 2,821 messages for 600 items). Pace measured: −4.0 % to +1.0 % alone,
// −0.3 % beside other tests; before bookings moved with the debts,
// +7.8 % to +120 %. Without the budget the 240 calls come in seconds. The pace is held to at least half the budget only, as the
// emulator may deliver late beside the suite's other tests; the flow test
// bed pins it at ≥ 90 % (TestTokenBudgetSharedByTwoBatches). Every item
// succeeds with one call.
func TestTokenBudgetOnTheStack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const items, perMinute = 240, 6000.0
	id := newID(t)
	type call struct {
		at     time.Time
		tokens float64
	}
	var mu sync.Mutex
	var calls []call
	u := env.hook.routeAnswer(id, func(w http.ResponseWriter, _ *http.Request, key string, _ []byte) int {
		h := fnv.New32a()
		h.Write([]byte(key))
		n := 20 + float64(h.Sum32()%61)
		w.Header().Set("Bulkrun-Cost", fmt.Sprintf("tokens=%v", n))
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{time.Now(), n})
		return 200
	})
	req := webhookRequest(id, u, inlineItems(items))
	req.Rate = &api.Rate{Key: "tokens-" + id, TokensPerMinute: perMinute}
	req.ItemsPerMessage = 1
	if v, err := env.api.Submit(ctx, req); err != nil || v.Rate == nil || v.Rate.TokensPerMinute != perMinute {
		t.Fatalf("submit: %+v, %v", v, err)
	}
	// The budget paces the batch by design: at most 80 tokens an item is
	// 240 × 80 / 6,000 = 3.2 minutes of calls (≈ 2 on average), beside
	// the suite's other tests; 3 minutes on top for a busy machine.
	v := waitWithin(t, id, time.Duration(items*80/perMinute*float64(time.Minute))+3*time.Minute)
	if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != items {
		t.Fatalf("status %s, census %+v; want all %d succeeded", v.Status, v.Census, items)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != items {
		t.Fatalf("%d calls for %d items, want one each", len(calls), items)
	}
	slices.SortFunc(calls, func(a, b call) int { return a.at.Compare(b.at) })
	total := 0.0
	for _, c := range calls {
		total += c.tokens
	}
	// busiest is the most tokens called in a window of d, and its start.
	busiest := func(d time.Duration) (float64, time.Time) {
		most, win, j, at := 0.0, 0.0, 0, time.Time{}
		for _, c := range calls {
			win += c.tokens
			for c.at.Sub(calls[j].at) >= d {
				win -= calls[j].tokens
				j++
			}
			if win > most {
				most, at = win, calls[j].at
			}
		}
		return most, at
	}
	most, at := busiest(time.Minute)
	half, halfAt := busiest(30 * time.Second)
	// The pace once the first units settled: from the 10th call on.
	rest := 0.0
	for _, c := range calls[10:] {
		rest += c.tokens
	}
	span := calls[len(calls)-1].at.Sub(calls[10].at)
	pace := rest / span.Minutes()
	t.Logf("%d calls, %.0f tokens over %v; from the 10th call %.0f tokens a minute (the budget %.0f); busiest minute %.0f tokens from +%v (%.1f %% of the budget); busiest 30 s %.0f tokens from +%v (%.1f %% of half the budget)",
		len(calls), total, calls[len(calls)-1].at.Sub(calls[0].at).Round(time.Second), pace, perMinute,
		most, at.Sub(calls[0].at).Round(time.Millisecond), 100*most/perMinute, half, halfAt.Sub(calls[0].at).Round(time.Millisecond), 100*half/(perMinute/2))
	if most > perMinute*1.15 {
		t.Errorf("%.0f tokens in the minute from +%v, want ≤ %.0f (the budget + 15 %%)", most, at.Sub(calls[0].at), perMinute*1.15)
	}
	if pace > perMinute*1.1 {
		t.Errorf("%.0f tokens a minute from the 10th call, want ≤ %.0f (the budget + 10 %%)", pace, perMinute*1.1)
	}
	if pace < perMinute*0.5 {
		t.Errorf("%.0f tokens a minute from the 10th call, want ≥ half the budget", pace)
	}
}

// TestRateConflictOnTheStack guards what two batches naming one rate key
// at different rates say, on the deployed stack: the later submit is
// warned in its answer, and the views of both batches name the other
// and its rate (live.rate_conflict) while both run; once the later one
// is cancelled, the earlier one's view drops it.
func TestRateConflictOnTheStack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := "rate-conflict-" + newID(t)
	early, later := newID(t)+"-early", newID(t)+"-later"
	log := &rateLog{calls: map[string][]time.Time{}}
	submit := func(id string, rps float64) handler.BatchView {
		t.Helper()
		req := webhookRequest(id, env.hook.route(id, log.decide(id)), inlineItems(60))
		req.Rate = &api.Rate{Key: key, RequestsPerSecond: rps}
		v, err := env.api.Submit(ctx, req)
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		t.Cleanup(func() { _, _ = env.api.Cancel(context.Background(), id) })
		return v
	}
	submit(early, 1)
	if v := submit(later, 2); len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], early) {
		t.Errorf("the later submit's warnings %q, want one naming %s", v.Warnings, early)
	}
	for _, c := range []struct {
		id, other string
		rps       float64
	}{{early, later, 2}, {later, early, 1}} {
		v, err := env.api.Status(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if v.Live == nil || v.Live.RateConflict == nil {
			t.Fatalf("%s's view: status %s, live %+v; want a rate conflict naming %s", c.id, v.Status, v.Live, c.other)
		}
		if got := v.Live.RateConflict; got.Key != key || got.BatchID != c.other || got.Rate.RequestsPerSecond != c.rps || got.Batches != 1 {
			t.Errorf("%s's view: rate conflict %+v, want %s at %v/s on %s, 1 noted", c.id, got, c.other, c.rps, key)
		}
	}
	if _, err := env.api.Cancel(ctx, later); err != nil {
		t.Fatal(err)
	}
	if v, err := env.api.Status(ctx, early); err != nil || v.Live != nil && v.Live.RateConflict != nil {
		t.Errorf("%s's view after %s was cancelled: %+v, %v; want no rate conflict", early, later, v.Live, err)
	}
}
