package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The live view says why items wait for a retry: items a receiver
// throttles (an HTTP 429 with Retry-After: 2) wait it out without using
// an attempt and, alone, do not make the run need attention; items whose
// call was refused wait after a transient failure, are named by its class
// ("connection refused", one of their errors) and do. One item per
// message and ten per pack row.
func TestWaitingItemsTellTheirCause(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			refused := &pipelineNetError{err: fmt.Errorf("webhook: dial tcp 127.0.0.1:9: connect: %w", syscall.ECONNREFUSED)}
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				switch {
				case strings.HasPrefix(req.Key, "item-000000000"): // items 0–9: throttled
					return pipeline.Result{}, pipeline.Throttled("http", "429", 2*time.Second, errors.New("webhook: HTTP 429 Too Many Requests"))
				case strings.HasPrefix(req.Key, "item-000000001"): // items 10–12: refused
					return pipeline.Result{}, refused
				}
				return pipeline.Result{Output: []byte(`{}`)}, nil
			})
			r.clock.T = time.Now().UTC() // the pipeline's context ends at the lease, by the clock
			live := func(id string, n int) api.LiveView {
				t.Helper()
				if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", ItemsPerMessage: k,
					Retry: &api.RetryPolicy{IntervalSeconds: 600, BackoffRate: 1, MaxDelaySeconds: 600}, Source: api.SourceSpec{Items: items(n)}}); err != nil {
					t.Fatal(err)
				}
				for round := 0; round < 2; round++ { // fan-out, then the items' first attempts (the queue here keeps no delay)
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
				return ledger.LiveOf(b, p, r.clock.Now(), 0)
			}

			l := live(fmt.Sprintf("throttled-k%d", k), 10)
			if l.RetryWaiting != 10 || l.Throttled != 10 || l.RetryCause != nil || l.NeedsAttention() {
				t.Errorf("10 items throttled (Retry-After: 2): waiting %d, throttled %d, cause %+v, attention %q; want 10 waiting out the throttling, no cause, no attention",
					l.RetryWaiting, l.Throttled, l.RetryCause, l.Attention)
			}

			l = live(fmt.Sprintf("refused-k%d", k), 13)
			c := l.RetryCause
			if l.RetryWaiting != 13 || l.Throttled != 10 || c == nil || c.Class != "connection refused" || c.Items != 3 || !strings.Contains(c.Error, "connection refused") {
				t.Fatalf("10 throttled, 3 refused: waiting %d, throttled %d, cause %+v", l.RetryWaiting, l.Throttled, c)
			}
			if want := "3 items waiting for a retry after connection refused"; !l.NeedsAttention() || !strings.Contains(strings.Join(l.Attention, "; "), want) {
				t.Errorf("attention %q, want %q", l.Attention, want)
			}
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
