//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// quotaReceiver is a webhook receiver with a quota: it takes at most
// perSecond calls in each wall-clock second (a fixed window, as many
// APIs count a quota; 0: no quota) and answers 429 without Retry-After
// to the rest. Its own log is the test's evidence.
type quotaReceiver struct {
	perSecond int
	// retryAfter is the Retry-After header its 429s carry ("": none).
	retryAfter string

	mu       sync.Mutex
	accepted map[int64]int // accepted calls by Unix second
	calls    []quotaCall
}

type quotaCall struct {
	key     string
	at      time.Time
	refused bool
	attempt int // the call's Bulkrun-Attempt
}

func (r *quotaReceiver) decide(key string, attempt int) int {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.accepted == nil {
		r.accepted = map[int64]int{}
	}
	s := now.Unix()
	refused := r.perSecond > 0 && r.accepted[s] >= r.perSecond
	if !refused {
		r.accepted[s]++
	}
	r.calls = append(r.calls, quotaCall{key: key, at: now, refused: refused, attempt: attempt})
	if refused {
		return http.StatusTooManyRequests
	}
	return http.StatusOK
}

// quotaSecond is one wall-clock second of a receiver's log.
type quotaSecond struct {
	at                int64 // Unix second
	accepted, refused int
}

// seconds is the receiver's log per wall-clock second, from the first
// call's second to the last's (seconds with no call included).
func (r *quotaReceiver) seconds() []quotaSecond {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil
	}
	lo, hi := r.calls[0].at.Unix(), r.calls[0].at.Unix()
	for _, c := range r.calls {
		lo, hi = min(lo, c.at.Unix()), max(hi, c.at.Unix())
	}
	out := make([]quotaSecond, hi-lo+1)
	for i := range out {
		out[i].at = lo + int64(i)
	}
	for _, c := range r.calls {
		if c.refused {
			out[c.at.Unix()-lo].refused++
		} else {
			out[c.at.Unix()-lo].accepted++
		}
	}
	return out
}

// quotaRun submits n webhook items (max_attempts 1, no rate, k items a
// message; 0: the stack's default) to rec on a listener of its own, so that its downstream key is
// its own, waits for the batch to end and checks what every run must
// show by the receiver's log and the batch's own record: the batch
// completed with every item succeeded (a throttled answer that used an
// attempt would fail its item: max-attempts), each item answered 2xx
// exactly once and never called after that, each results line at 1
// attempt. It answers the key's adaptive row after the run and the
// time from submit to end.
func quotaRun(t *testing.T, rec *quotaReceiver, n, k int) (pace.Adapt, string, time.Duration, *api.AdaptivePace) {
	t.Helper()
	ctx := context.Background()
	id := newID(t)
	u := env.hook.routeOwn(t, id, rec.decide) // its own port: its own downstream key
	if rec.retryAfter != "" {
		env.hook.mu.Lock()
		env.hook.byAnswer[id] = func(w http.ResponseWriter, r *http.Request, key string, _ []byte) int {
			attempt, _ := strconv.Atoi(r.Header.Get("Bulkrun-Attempt"))
			status := rec.decide(key, attempt)
			if status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", rec.retryAfter)
			}
			return status
		}
		env.hook.mu.Unlock()
	}
	req := webhookRequest(id, u, inlineItems(n))
	req.MaxAttempts = 1
	req.ItemsPerMessage = k
	begin := time.Now()
	if v, err := env.api.Submit(ctx, req); err != nil || v.Rate != nil {
		t.Fatalf("submit %s: %+v, %v", id, v, err)
	}
	finished := false
	t.Cleanup(func() {
		if !finished { // wait gave up: the receiver's log so far, and the batch stopped
			logSeconds(t, rec.seconds())
			_, _ = env.api.Cancel(context.Background(), id)
		}
	})
	// The status views while it runs: the first that shows the key's
	// adaptive pace (api.LiveView.AdaptivePace).
	var shown *api.AdaptivePace
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	v, err := env.api.Wait(wctx, id, 500*time.Millisecond, func(v wire.BatchView) {
		if shown == nil && v.Live != nil && v.Live.AdaptivePace != nil {
			shown = v.Live.AdaptivePace
			t.Logf("status at +%v: %s", time.Since(begin).Round(100*time.Millisecond), describe.AdaptivePaceText(*shown))
		}
	})
	cancel()
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	finished = true
	took := time.Since(begin)
	if v.Status != api.StatusCompleted || v.Census == nil {
		t.Fatalf("status %s, census %+v; want completed", v.Status, v.Census)
	}
	if v.Census.Succeeded != int64(n) || v.Census.Failed != 0 {
		t.Errorf("census %+v; want all %d succeeded (max_attempts 1: a throttled answer uses no attempt)", v.Census, n)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	lines := readResults(t, rep.Results.Files[api.OutcomeSucceeded].URI)
	if f, ok := rep.Results.Files[api.OutcomeFailed]; ok && f.URI != "" {
		failed := readResults(t, f.URI)
		for i, l := range failed {
			if i < 5 {
				t.Errorf("item %s failed: %s (%s, %d attempts)", l.Key, l.Error, l.Reason, l.Attempts)
			}
		}
		lines = append(lines, failed...)
	}
	if len(lines) != n {
		t.Errorf("%d results lines, want %d", len(lines), n)
	}
	wrong := 0
	for _, l := range lines {
		if l.Outcome == api.OutcomeSucceeded && l.Attempts != 1 {
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("%d succeeded results lines at other than 1 attempt, want none (throttled answers count none)", wrong)
	}

	rec.mu.Lock()
	refused := 0
	for _, c := range rec.calls {
		if c.refused {
			refused++
		}
	}
	// The report counts the throttled calls from the run's counters: no
	// more than the receiver refused (a counter write lost to a crash
	// only lowers it), none when it refused none.
	if rc := rep.Retries; refused > 0 && (rc == nil || rc.Throttled <= 0 || rc.Throttled > int64(refused) || rc.Scheduled < rc.Throttled) ||
		refused == 0 && rc != nil && rc.Throttled != 0 {
		t.Errorf("report retries %+v; the receiver refused %d calls", rc, refused)
	} else if rc != nil {
		t.Logf("report retries: %d scheduled, %d throttled; the receiver refused %d calls", rc.Scheduled, rc.Throttled, refused)
	}
	ok, refusedBefore, calls, skipped := map[string]int{}, map[string]int{}, len(rec.calls), 0
	for _, c := range rec.calls {
		switch {
		case ok[c.key] > 0:
			t.Errorf("item %s called again at attempt %d after its 2xx", c.key, c.attempt)
		case c.refused:
			refusedBefore[c.key]++
		case c.attempt != refusedBefore[c.key]+1:
			skipped++ // a number used by no call that reached the receiver
		}
		if !c.refused {
			ok[c.key]++
		}
	}
	rec.mu.Unlock()
	if got := env.hook.counts(id); len(got) != n {
		t.Errorf("the receiver saw %d item keys, want %d", len(got), n)
	}
	for _, l := range lines {
		if ok[l.Key] > 1 || ok[l.Key] == 0 && l.Outcome == api.OutcomeSucceeded {
			t.Errorf("item %s (%s) answered 2xx %d times, want exactly 1", l.Key, l.Outcome, ok[l.Key])
		}
	}
	if len(ok) != n {
		t.Errorf("%d items answered 2xx, want %d", len(ok), n)
	}

	b, err := env.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	key := pacer.DownstreamKey(b)
	a, err := env.store.ReadAdapt(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d items, %d calls, %v from submit to end; key %s: adaptive row %+v; run_spent %v; %d items answered 2xx at a Bulkrun-Attempt other than 1 + their refused calls",
		n, calls, took.Round(100*time.Millisecond), key, a, v.Census.RunSpent, skipped)
	return a, key, took, shown
}

// logSeconds logs a receiver's table per wall-clock second.
func logSeconds(t *testing.T, secs []quotaSecond) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "the receiver's log per second:\n   s  2xx  429")
	for i, s := range secs {
		fmt.Fprintf(&b, "\n%4d %4d %4d", i, s.accepted, s.refused)
	}
	t.Log(b.String())
}

// TestAdaptivePaceOnTheStack guards the adaptive pace of a batch with no
// rate (docs/adr/0036) on the deployed stack, by the receiver's own log.
// The receiver takes 20 calls in each wall-clock second and answers 429
// (no Retry-After) to the others; 400 items, max_attempts 1, at the
// stack's items per message (10, K0) and at one item a message (K1).
// Every item succeeds with one counted attempt and exactly one 2xx answer
// (a throttled answer, or a call given back unstarted, uses no attempt:
// at max_attempts 1 one that did would fail its item); the first
// throttled answers cut the key's ADAPT row; after the first 3 seconds
// with calls from the first refusal on, at most 25 % of the calls are
// refused and at most half the share refused in those first 3 s, when
// the calls came unpaced; in some
// 10 s after those 3 s the receiver takes at least half its quota (the
// limit climbs back while no call is refused: AIMD's additive increase);
// and the items are taken at least at a quarter of the quota over the
// receiver's log, first call to last (the pace is not held far below
// what the receiver takes, nor do the throttled items' waits drag on).
// 429-RetryAfter-K1 is the same receiver answering each 429 with
// Retry-After: 1, as most APIs with a quota do, at one item a message:
// the same bounds hold (a cut while the receiver took calls grows back
// by its step, not in slow start, and a unit sleeping for its place
// feels a hold made meanwhile; with neither, 35.9 % of the calls after
// the first 3 s were refused). The same 400 items on a receiver
// that always answers 200 are not paced: their key gets no ADAPT row and the receiver's busiest second
// is above the quota. The test stays serial: it measures calls per
// wall-clock second.
func TestAdaptivePaceOnTheStack(t *testing.T) {
	const n, quota = 400, 20
	var unpaced int // the unthrottled run's busiest second
	t.Run("unthrottled", func(t *testing.T) {
		rec := &quotaReceiver{}
		a, key, took, shown := quotaRun(t, rec, n, 0)
		if shown != nil {
			t.Errorf("status showed an adaptive pace %+v for key %s, never throttled", *shown, key)
		}
		secs := rec.seconds()
		logSeconds(t, secs)
		for _, s := range secs {
			unpaced = max(unpaced, s.accepted)
		}
		t.Logf("%d calls in %d s, the busiest second %d calls (%.1f items a second from submit to end)", len(rec.calls), len(secs), unpaced, float64(n)/took.Seconds())
		if a.Paced(time.Now()) || !a.Cut.IsZero() {
			t.Errorf("key %s never throttled has an adaptive row %+v, want none", key, a)
		}
		if unpaced <= quota {
			t.Errorf("the busiest second of an unpaced run had %d calls, want > %d (else the stack never outruns the quota and the throttled runs show nothing)", unpaced, quota)
		}
	})
	for _, c := range []struct {
		name       string
		k          int
		retryAfter string
	}{{"429-K0", 0, ""}, {"429-K1", 1, ""}, {"429-RetryAfter-K1", 1, "1"}} {
		t.Run(c.name, func(t *testing.T) {
			k := c.k
			rec := &quotaReceiver{perSecond: quota, retryAfter: c.retryAfter}
			a, key, took, shown := quotaRun(t, rec, n, k)
			switch {
			case shown == nil:
				t.Errorf("no status view while the batch ran showed the adaptive pace of key %s (cut: %+v)", key, a)
			case shown.Key != key || shown.LimitPerSecond <= 0 || shown.CutAt.IsZero():
				t.Errorf("status showed adaptive pace %+v, want key %s with a limit and its cut", *shown, key)
			}
			secs := rec.seconds()
			logSeconds(t, secs)
			first := -1
			var calls, refused int
			for i, s := range secs {
				if s.refused > 0 && first < 0 {
					first = i
				}
				calls += s.accepted + s.refused
				refused += s.refused
			}
			if first < 0 {
				t.Fatalf("the receiver refused no call in %d s (busiest second of the unthrottled run: %d); nothing to pace", len(secs), unpaced)
			}
			if a.Cut.IsZero() || a.Limit <= 0 {
				t.Errorf("key %s was throttled, its adaptive row %+v: want it cut", key, a)
			}
			share := func(from, to int) (int, int, float64) {
				var c, r int
				for _, s := range secs[min(from, len(secs)):min(to, len(secs))] {
					c += s.accepted + s.refused
					r += s.refused
				}
				if c == 0 {
					return 0, 0, 0
				}
				return c, r, float64(r) / float64(c)
			}
			// The first 3 s of refusals are the first 3 seconds the
			// receiver was called in, from the first refusal on: a pace
			// moves on answers, and a second in which the emulator ran
			// no call (its functions stalled, 2 of the first 7 seconds
			// once) gave it none.
			settled, active := first, 0
			for ; settled < len(secs) && active < 3; settled++ {
				if secs[settled].accepted+secs[settled].refused > 0 {
					active++
				}
			}
			ec, er, early := share(first, settled)
			lc, lr, late := share(settled, len(secs))
			busiest, window, from := 0, 0, 0 // the busiest second after the first 3 s; the most 2xx in 10 s after them
			for i := settled; i < len(secs); i++ {
				busiest = max(busiest, secs[i].accepted+secs[i].refused)
				took := 0
				for _, s := range secs[i:min(i+10, len(secs))] {
					took += s.accepted
				}
				if took > window {
					window, from = took, i
				}
			}
			t.Logf("%d calls for %d items in %d s (%v from submit to end), %d refused (%.1f %%); first refusal at +%d s; in its first 3 s with calls (to +%d s) %d of %d calls refused (%.1f %%); after them %d of %d (%.1f %%, %.1f calls a second, at most %d in a second)",
				calls, n, len(secs), took.Round(100*time.Millisecond), refused, 100*float64(refused)/float64(calls), first, settled, er, ec, 100*early, lr, lc, 100*late,
				float64(lc)/float64(max(1, len(secs)-settled)), busiest)
			rec.mu.Lock()
			span := rec.calls[len(rec.calls)-1].at.Sub(rec.calls[0].at)
			rec.mu.Unlock()
			taken := float64(n) / span.Seconds()
			t.Logf("%d items over the receiver's %v: %.1f a second, %.0f %% of its quota", n, span.Round(100*time.Millisecond), taken, 100*taken/quota)
			if taken < quota/4 {
				t.Errorf("%d items over %v, %.1f a second: want ≥ a quarter of the receiver's %d a second", n, span.Round(100*time.Millisecond), taken, quota)
			}
			t.Logf("after the first 3 s, the busiest 10 s took %d calls (from +%d s): %.1f a second", window, from, float64(window)/10)
			if window < 10*quota/2 {
				t.Errorf("after the first 3 s, at most %d calls taken in 10 s (%.1f a second), want ≥ %d: half the receiver's quota (the limit grows while no call is refused)", window, float64(window)/10, 10*quota/2)
			}
			if late > 0.25 {
				t.Errorf("%.1f %% of the calls after the first 3 s of refusals refused, want ≤ 25 %%", 100*late)
			}
			if late > early/2 {
				t.Errorf("%.1f %% of the calls after the first 3 s of refusals refused, want ≤ half of those 3 s' %.1f %%", 100*late, 100*early)
			}
		})
	}
}
