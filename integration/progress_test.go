//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// answering is a webhook receiver that answers every call after a while
// and keeps the time of each answer; hold, when set, keeps the first
// call of one key until release is closed.
type answering struct {
	after   time.Duration
	hold    string
	release chan struct{}

	mu       sync.Mutex
	answered []time.Time // when each call was answered, in order
	calls    int
	held     bool
}

func (a *answering) serve(r *http.Request) int {
	key := r.Header.Get("Bulkrun-Item-Key")
	a.mu.Lock()
	a.calls++
	hold := key == a.hold && !a.held
	a.held = a.held || hold
	a.mu.Unlock()
	if hold {
		select {
		case <-a.release:
		case <-r.Context().Done():
		}
	}
	time.Sleep(a.after)
	a.mu.Lock()
	a.answered = append(a.answered, time.Now())
	a.mu.Unlock()
	return http.StatusOK
}

// count is how many calls were answered, and when the oldest of those
// after the first shown ones was (zero when none).
func (a *answering) count(shown int64) (int64, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := int64(len(a.answered))
	if shown < n {
		return n, a.answered[shown]
	}
	return n, time.Time{}
}

func endedOf(v wire.BatchView) int64 {
	if v.Census == nil {
		return 0
	}
	c := v.Census
	return c.Succeeded + c.Failed + c.Quarantined + c.Cancelled
}

func submitWebhook(t *testing.T, id, url string, n, k, timeoutMS int) {
	t.Helper()
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"k":"k%04d"}`, i)
	}
	b.WriteByte(']')
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", Source: api.SourceSpec{Items: json.RawMessage(b.String())},
		ItemsPerMessage: k, Options: json.RawMessage(fmt.Sprintf(`{"url": %q, "timeout_ms": %d}`, url, timeoutMS))}
	if _, err := env.api.Submit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// TestProgressWhileAnInvocationRuns: the running batch's census shows
// the items an invocation ended while that invocation still runs
// (worker.Worker.ProgressEvery), on the deployed stack at K = 1 and 10.
// 30 items; the receiver answers every call at once but holds k0005's
// until the census shows every item of the other messages succeeded (29
// at K = 1; 20 at K = 10, a pack's items being recorded and counted with
// its last) or 2 minutes pass: without the count while an invocation
// runs, k0005's invocation would count the other messages it took only
// when it ends, after the hold (an event source may hand it few of them:
// TestMemProgressWhileAnInvocationRuns is the flush's own test). Never
// more items ended than the receiver answered, and the report is exact.
func TestProgressWhileAnInvocationRuns(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			id := newID(t)
			const n = 30
			rcv := &answering{hold: "k0005", release: make(chan struct{})}
			defer func() {
				select {
				case <-rcv.release:
				default:
					close(rcv.release)
				}
			}()
			submitWebhook(t, id, env.hook.routeRequest(id, rcv.serve), n, k, 150000)
			deadline := time.Now().Add(2 * time.Minute)
			var v wire.BatchView
			for {
				var err error
				if v, err = env.api.Status(ctx, id); err != nil {
					t.Fatal(err)
				}
				answered, _ := rcv.count(0)
				if e := endedOf(v); e > answered {
					t.Fatalf("the census shows %d items ended, the receiver answered %d", e, answered)
				}
				if endedOf(v) >= int64(n-k) || time.Now().After(deadline) {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			t.Logf("while k0005 is held: %s", liveLine(v))
			if endedOf(v) != int64(n-k) || v.Status != api.StatusRunning {
				t.Errorf("while k0005 is held the %s batch's census shows %d items ended; want %d (every item of the other messages)", v.Status, endedOf(v), n-k)
			}
			// The estimate from the same counters: the ended items, the k to
			// go, and one call per ended item scaled to all n.
			if v.Live == nil || v.Live.Estimate == nil {
				t.Errorf("while k0005 is held: no live estimate in %+v", v.Live)
			} else if e := v.Live.Estimate; e.Ended != int64(n-k) || e.Remaining != int64(k) || e.RatePerSecond <= 0 || e.FinishAt.Before(e.Since) || e.ProjectedRunSpent.Text("calls") != strconv.Itoa(n) {
				t.Errorf("while k0005 is held: estimate %+v (run_spent %s); want %d ended, %d to go, calls=%d projected", e, e.ProjectedRunSpent, n-k, k, n)
			}
			close(rcv.release)
			final, err := env.api.Wait(ctx, id, time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			if final.Status != api.StatusCompleted || final.Census.Succeeded != n {
				t.Fatalf("finished %s %+v; want completed, %d succeeded", final.Status, final.Census, n)
			}
		})
	}
}

// TestProgressLagWithSlowCalls measures how far a running batch's census
// is behind what its receiver answered, with 5 s calls (400 items, K =
// 1 and 10): every second it reads the census and notes the age of the
// oldest answer the census does not show yet. It logs the lag (items
// and seconds, at most and where the receiver had answered 45 %); it
// asserts only that the census never shows more items ended than the
// receiver answered, and that the report is exact with run_spent's
// calls the receiver's.
func TestProgressLagWithSlowCalls(t *testing.T) {
	// Serial beside the other tests (the lag it logs is the stack's, not
	// other tests'), its two runs at once: each has its own batch and
	// receiver, and what it asserts holds under any load.
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			id := newID(t)
			n := 400
			if v, err := strconv.Atoi(os.Getenv("BULKRUN_LAG_ITEMS")); err == nil && v > 0 {
				n = v
			}
			rcv := &answering{after: 5 * time.Second}
			start := time.Now()
			submitWebhook(t, id, env.hook.routeRequest(id, rcv.serve), n, k, 10000)
			var maxAge time.Duration
			var maxBehind int64
			at45 := ""
			var samples []string
			for {
				v, err := env.api.Status(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				shown := endedOf(v)
				answered, oldest := rcv.count(shown)
				if shown > answered {
					t.Fatalf("the census shows %d items ended, the receiver answered %d", shown, answered)
				}
				if v.Status.Finished() {
					break
				}
				age := time.Duration(0)
				if !oldest.IsZero() {
					age = time.Since(oldest)
				}
				maxAge, maxBehind = max(maxAge, age), max(maxBehind, answered-shown)
				if at45 == "" && answered*100 >= 45*int64(n) {
					at45 = fmt.Sprintf("the receiver had answered %d (%d %%), the census showed %d (%d %%), the oldest answer not shown %s old",
						answered, answered*100/int64(n), shown, shown*100/int64(n), age.Round(100*time.Millisecond))
				}
				samples = append(samples, fmt.Sprintf("t+%3.0fs answered %3d shown %3d (%s behind)", time.Since(start).Seconds(), answered, shown, age.Round(100*time.Millisecond)))
				if time.Since(start) > 10*time.Minute {
					t.Fatalf("%s not finished after 10 minutes", id)
				}
				time.Sleep(time.Second)
			}
			if at45 == "" {
				at45 = "not sampled (the run ended between two samples)"
			}
			final, err := env.api.Wait(ctx, id, time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			rcv.mu.Lock()
			calls := rcv.calls
			rcv.mu.Unlock()
			t.Logf("K=%d, %d items of 5 s calls in %s:\n  %s", k, n, time.Since(start).Round(time.Second), strings.Join(samples, "\n  "))
			t.Logf("K=%d: at most %d answered items not shown, the oldest %s old; at 45 %%: %s", k, maxBehind, maxAge.Round(100*time.Millisecond), at45)
			if final.Status != api.StatusCompleted || final.Census.Succeeded != int64(n) || final.Census.RunSpent.Text("calls") != strconv.Itoa(calls) {
				t.Fatalf("finished %s %+v, run_spent %v, the receiver counted %d calls; want completed, %d succeeded, run_spent its calls",
					final.Status, final.Census, final.Census.RunSpent, calls, n)
			}
		})
	}
}
