package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/live"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The live view says why items wait for a retry: items a receiver
// throttles (an HTTP 429 with Retry-After: 2) wait it out without using
// an attempt and, alone, do not make the run need attention; items whose
// call was refused wait after a transient failure, are named by its class
// ("connection refused", one of their errors) and do. The first throttle
// paces the downstream (docs/adr/0036): the items after it are not
// called while it throttles — they stay in flight, waiting for their
// place in its pace — so every item is either waiting for a retry after
// its one call or in flight without one. One item per message and ten
// per pack row; each run on a store of its own (the pace is the
// downstream's, shared by every batch on it), its units taken one at a
// time, the first three calls refused (whichever items they are: a
// pack's items run in no fixed order) and every later one throttled.
func TestWaitingItemsTellTheirCause(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			refused := &pipelineNetError{err: fmt.Errorf("webhook: dial tcp 127.0.0.1:9: connect: %w", syscall.ECONNREFUSED)}
			// viewAfter runs n items, the first nRefused calls refused and the
			// rest throttled, and returns the live view after the fan-out and
			// the items' first deliveries, with the calls made.
			viewAfter := func(id string, n, nRefused int) (api.LiveView, int64) {
				t.Helper()
				var calls atomic.Int64
				r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
					if calls.Add(1) <= int64(nRefused) {
						return pipeline.Result{}, refused
					}
					return pipeline.Result{}, pipeline.Throttled("http", "429", 2*time.Second, errors.New("webhook: HTTP 429 Too Many Requests"))
				})
				r.clock.T = time.Now().UTC() // the pipeline's context ends at the lease, by the clock
				r.worker.Concurrency, r.worker.ItemConcurrency = 1, 1
				if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", ItemsPerMessage: k,
					Retry: &api.RetryPolicy{IntervalSeconds: 600, BackoffRate: 1, MaxDelaySeconds: 600}, Source: api.SourceSpec{Items: items(n)}}); err != nil {
					t.Fatal(err)
				}
				for round := 0; round < 2; round++ { // fan-out, then the items' first deliveries (the queue here keeps no delay)
					ds := r.queue.take()
					if len(ds) == 0 {
						break
					}
					r.worker.Handle(ctx, ds)
				}
				b, err := r.store.GetBatch(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				p, err := r.store.Progress(ctx, id, b.Run, max(1, b.CounterShards))
				if err != nil {
					t.Fatal(err)
				}
				return live.Of(b, p, r.clock.Now(), 0), calls.Load()
			}

			l, calls := viewAfter(fmt.Sprintf("throttled-k%d", k), 10, 0)
			if l.Throttled < 1 || l.RetryWaiting != l.Throttled || l.RetryWaiting+l.InFlight != 10 || int64(calls) != l.RetryWaiting ||
				l.RetryCause != nil || l.NeedsAttention() {
				t.Errorf("10 items throttled (Retry-After: 2): %d calls, waiting %d, throttled %d, in flight %d, cause %+v, attention %q; "+
					"want each called item waiting out the throttling, the rest in flight uncalled, no cause, no attention",
					calls, l.RetryWaiting, l.Throttled, l.InFlight, l.RetryCause, l.Attention)
			}

			l, calls = viewAfter(fmt.Sprintf("refused-k%d", k), 13, 3)
			c := l.RetryCause
			if l.Throttled < 1 || l.RetryWaiting != l.Throttled+3 || l.RetryWaiting+l.InFlight != 13 || int64(calls) != l.RetryWaiting ||
				c == nil || c.Class != "connection refused" || c.Items != 3 || !strings.Contains(c.Error, "connection refused") {
				t.Fatalf("3 refused, then 10 throttled: %d calls, waiting %d, throttled %d, in flight %d, cause %+v",
					calls, l.RetryWaiting, l.Throttled, l.InFlight, c)
			}
			if want := "3 items waiting for a retry after connection refused"; !l.NeedsAttention() || !strings.Contains(strings.Join(l.Attention, "; "), want) {
				t.Errorf("attention %q, want %q", l.Attention, want)
			}
			t.Logf("3 refused, then 10 throttled: %d calls, %d waiting (%d throttled), %d in flight", calls, l.RetryWaiting, l.Throttled, l.InFlight)
		})
	}
}

// pipelineNetError is a refused connection as the net package returns it:
// a net.Error wrapping ECONNREFUSED, transient.
type pipelineNetError struct{ err error }

func (e *pipelineNetError) Error() string   { return e.err.Error() }
func (e *pipelineNetError) Unwrap() error   { return e.err }
func (e *pipelineNetError) Timeout() bool   { return false }
func (e *pipelineNetError) Temporary() bool { return true }
