package flow

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// receiverLog is a receiver's own log of the calls it answered: each
// call's item, time and whether it was refused (429).
type receiverLog struct {
	mu      sync.Mutex
	calls   []receiverCall
	perSec  map[int64]int // accepted calls by whole second
	refused int
}

type receiverCall struct {
	key     string
	at      time.Time
	refused bool
}

// limitAbove answers 429 (no Retry-After) to a call once perSecond calls
// were accepted in its whole second (a fixed-window limit, as many APIs
// count a quota).
func (l *receiverLog) limitAbove(perSecond int) func(pipeline.Request, time.Time) error {
	return l.limitAboveAfter(perSecond, 0)
}

// limitAboveAfter is limitAbove answering its 429s with Retry-After:
// after, as most APIs with a quota do.
func (l *receiverLog) limitAboveAfter(perSecond int, after time.Duration) func(pipeline.Request, time.Time) error {
	return func(req pipeline.Request, at time.Time) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.perSec == nil {
			l.perSec = map[int64]int{}
		}
		s := at.Unix()
		refused := l.perSec[s] >= perSecond
		if !refused {
			l.perSec[s]++
		}
		return l.answer(req, at, refused, after)
	}
}

// refuseFirst answers 429 with Retry-After: after to every call in the
// first window from the first call, then accepts every call.
func (l *receiverLog) refuseFirst(window, after time.Duration) func(pipeline.Request, time.Time) error {
	var first time.Time
	return func(req pipeline.Request, at time.Time) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if first.IsZero() || at.Before(first) {
			first = at
		}
		return l.answer(req, at, at.Sub(first) < window, after)
	}
}

func (l *receiverLog) answer(req pipeline.Request, at time.Time, refused bool, after time.Duration) error {
	l.calls = append(l.calls, receiverCall{key: req.BatchID + "/" + req.Key, at: at, refused: refused})
	if !refused {
		return nil
	}
	l.refused++
	return pipeline.Throttled("http", "429", after, errors.New("429 Too Many Requests"))
}

// sorted is the log in time order.
func (l *receiverLog) sorted() []receiverCall {
	cs := slices.Clone(l.calls)
	slices.SortStableFunc(cs, func(a, b receiverCall) int { return a.at.Compare(b.at) })
	return cs
}

// settled is the log in time order, the time from its first call to its
// last, the busiest 10 s window from 60 s after the first call on (its
// calls and its start after the first call) and the share of the calls
// refused.
func (l *receiverLog) settled() (cs []receiverCall, span time.Duration, most int, from time.Duration, share float64) {
	cs = l.sorted()
	t0 := cs[0].at
	span = cs[len(cs)-1].at.Sub(t0)
	var after []time.Time
	for _, c := range cs {
		if c.at.Sub(t0) >= time.Minute {
			after = append(after, c.at)
		}
	}
	most, at := busiest(after, 10*time.Second)
	return cs, span, most, at.Sub(t0), float64(l.refused) / float64(len(cs))
}

// accepted is how many distinct items had a call accepted.
func (l *receiverLog) accepted() int {
	seen := map[string]bool{}
	for _, c := range l.calls {
		if !c.refused {
			seen[c.key] = true
		}
	}
	return len(seen)
}

// TestAdaptivePaceFindsTheReceiversLimit guards slowing down on the
// downstream's own signals with no rate set (docs/adr/0036): two batches
// of 6,000 items on one downstream that answers 429 above 100 calls a
// second settle at most at 110 calls a second (every 10 s window from
// 60 s after the first call on), at most 5 % of the calls are refused,
// every item ends with an accepted call (a throttled call uses no
// attempt), the whole runs at least at 60 % of the receiver's pace, and
// the queue carries at most 6 messages per unit (its own, and its waits
// for its turn, worked out again after the cuts made meanwhile).
func TestAdaptivePaceFindsTheReceiversLimit(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run("K"+strconv.Itoa(k), func(t *testing.T) {
			const n, limit = 6000, 100
			var rl receiverLog
			_, sends := pacedRun(t, []string{"ad-a", "ad-b"}, n, func(req *api.SubmitRequest) {
				req.ItemsPerMessage = k
			}, nil, rl.limitAbove(limit))
			cs, span, most, from, share := rl.settled()
			t.Logf("K = %d: %d calls for %d items over %v (%.1f a second), %d refused (%.2f %%); from +60 s the busiest 10 s window %d calls (%.1f/s) from +%v; %d messages sent",
				k, len(cs), 2*n, span.Round(time.Second), float64(2*n)/span.Seconds(), rl.refused, 100*share, most, float64(most)/10, from.Round(time.Second), sends)
			if got := rl.accepted(); got != 2*n {
				t.Errorf("%d items had a call accepted, want %d", got, 2*n)
			}
			if share > 0.05 {
				t.Errorf("%.2f %% of calls refused, want ≤ 5 %%", 100*share)
			}
			if most > 110*10 {
				t.Errorf("%d calls in the 10 s from +%v, want ≤ 1,100 (110/s)", most, from)
			}
			if want := time.Duration(float64(2*n) / (0.6 * limit) * float64(time.Second)); span > want {
				t.Errorf("the calls took %v, want ≤ %v (60 %% of %d/s)", span, want, limit)
			}
			if units := 2 * n / k; sends > 6*units {
				t.Errorf("%d messages sent for %d units, want at most 6 per unit", sends, units)
			}
		})
	}
}

// TestAdaptivePaceHoldsForRetryAfter guards a receiver that answers
// every call in its first 30 s with 429 and Retry-After: 2, then takes
// every call, with no rate set, at 1 and 10 items a message: the key is
// held until each Retry-After and cut, so the window sees at most 2
// calls per Retry-After asked (30); once it takes calls, the key's slow
// start finds its pace, so that the 5,000 items end within 30 s of the
// window; every item ends with an accepted call. It logs how long after
// a refused call its item's next call came, against its Retry-After: a
// paced unit whose refusal cut the key keeps its place in line
// (pacer.Lease.KeepPlace) and calls again at the hold's end, so that at
// one item a message at least half the refused items call again within
// 2 × Retry-After (before, each leased again behind the units in line:
// 0 of 11, a median 41.6 s), and at 10 a message too: a unit's
// throttled item runs first and alone (worker's throttledLead), so the
// same item calls again first (before that rule, 6–12 of 14 items in
// six runs, by the order the pack's items started in). The first
// refused calls, made before the key was paced, have no place to keep.
func TestAdaptivePaceHoldsForRetryAfter(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run("K"+strconv.Itoa(k), func(t *testing.T) {
			const n = 5000
			const window, after = 30 * time.Second, 2 * time.Second
			var rl receiverLog
			_, sends := pacedRun(t, []string{"ra"}, n, func(req *api.SubmitRequest) {
				req.ItemsPerMessage = k
			}, nil, rl.refuseFirst(window, after))
			cs := rl.sorted()
			t0, span := cs[0].at, cs[len(cs)-1].at.Sub(cs[0].at)
			inWindow := 0
			last := map[string]time.Time{}
			var gaps []time.Duration
			for _, c := range cs {
				if c.at.Sub(t0) < window {
					inWindow++
				}
				if was, ok := last[c.key]; ok {
					gaps = append(gaps, c.at.Sub(was))
				}
				if c.refused {
					last[c.key] = c.at
				} else {
					delete(last, c.key)
				}
			}
			slices.Sort(gaps)
			q := func(p float64) time.Duration {
				if len(gaps) == 0 {
					return 0
				}
				return gaps[min(len(gaps)-1, int(p*float64(len(gaps))))].Round(100 * time.Millisecond)
			}
			within := 0
			for _, g := range gaps {
				if g <= 2*after {
					within++
				}
			}
			t.Logf("K = %d: %d calls for %d items over %v; %d in the first %v (%d refused); a refused item's next call after: median %v, p90 %v, max %v (%d of %d within 2 × Retry-After); %d messages sent",
				k, len(cs), n, span.Round(time.Second), inWindow, window, rl.refused, q(0.5), q(0.9), q(1), within, len(gaps), sends)
			if got := rl.accepted(); got != n {
				t.Errorf("%d items had a call accepted, want %d", got, n)
			}
			if limit := 2 * int(window/after); inWindow > limit {
				t.Errorf("%d calls in the first %v, want ≤ %d (2 per Retry-After)", inWindow, window, limit)
			}
			if span > window+30*time.Second {
				t.Errorf("the calls took %v, want ≤ %v (the window + 30 s)", span, window+30*time.Second)
			}
			if 2*within < len(gaps) {
				t.Errorf("%d of %d refused items called again within 2 × Retry-After, want at least half", within, len(gaps))
			}
		})
	}
}

// TestAdaptivePaceAtAQuotaWithRetryAfter guards a downstream with a
// quota that answers each call over it with 429 and Retry-After: 1 (as
// most APIs do), 20 calls a second, no rate set: a cut made while the
// downstream took some of the process's calls since the last one is a
// quota's, and grows back by its step, not in slow start
// (pace.Adapt.Throttled), so that the pace settles under the quota. From
// 60 s after the first call on, every 10 s window has at most 22 calls a
// second (110 %); at most 5 % of the calls are refused; every item ends
// with an accepted call; the whole runs at least at half the quota; the
// queue carries at most 7 messages per unit (with a slow start after
// every cut, 3.9 % were refused and the queue carried 19 a unit at one
// item a message).
func TestAdaptivePaceAtAQuotaWithRetryAfter(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run("K"+strconv.Itoa(k), func(t *testing.T) {
			const n, limit = 2000, 20
			var rl receiverLog
			_, sends := pacedRun(t, []string{"rq"}, n, func(req *api.SubmitRequest) {
				req.ItemsPerMessage = k
			}, nil, rl.limitAboveAfter(limit, time.Second))
			cs, span, most, from, share := rl.settled()
			t.Logf("K = %d: %d calls for %d items over %v (%.1f a second), %d refused (%.2f %%); from +60 s the busiest 10 s window %d calls (%.1f/s) from +%v; %d messages sent",
				k, len(cs), n, span.Round(time.Second), float64(n)/span.Seconds(), rl.refused, 100*share, most, float64(most)/10, from.Round(time.Second), sends)
			if got := rl.accepted(); got != n {
				t.Errorf("%d items had a call accepted, want %d", got, n)
			}
			if share > 0.05 {
				t.Errorf("%.2f %% of calls refused, want ≤ 5 %%", 100*share)
			}
			if most > 22*10 {
				t.Errorf("%d calls in the 10 s from +%v, want ≤ 220 (22/s)", most, from)
			}
			if want := time.Duration(float64(n) / (0.5 * limit) * float64(time.Second)); span > want {
				t.Errorf("the calls took %v, want ≤ %v (half of %d/s)", span, want, limit)
			}
			if units := n / k; sends > 7*units {
				t.Errorf("%d messages sent for %d units, want at most 7 per unit", sends, units)
			}
		})
	}
}
