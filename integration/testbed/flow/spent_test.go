package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/live"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// countingReceiver is a webhook receiver that counts the calls that reach
// it and holds the first call of every even item until the caller goes
// away (it finishes it then, answering no one); every other call is
// answered 200 at once (a call of a key not named item-… is answered and
// not counted).
type countingReceiver struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, _ := url.PathUnescape(r.Header.Get("Bulkrun-Item-Key"))
	if !strings.HasPrefix(key, "item-") { // a warm-up call: answered, not counted
		_, _ = io.Copy(io.Discard, r.Body)
		return
	}
	c.mu.Lock()
	c.calls[key]++
	first := c.calls[key] == 1
	c.mu.Unlock()
	i, _ := strconv.Atoi(strings.TrimPrefix(key, "item-"))
	if first && i%2 == 0 {
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the caller go
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (c *countingReceiver) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.calls {
		n += v
	}
	return n
}

// run_spent is what the receiver counted (api.Census.RunSpent: every
// attempt of the run), at K = 1 and 10, through the webhook pipeline: a
// receiver holds the first call of every other item past the call's end —
// the webhook's timeout_ms (50 ms), or the worker's deadline margin that
// cuts the call off (an interruption, retried) — then answers every
// later call at once. Every item succeeds on its second attempt, and the
// report's run_spent calls equal the calls the receiver counted, the
// calls that ended without an answer included.
func TestMemRunSpentIsWhatTheReceiverCounted(t *testing.T) {
	for _, end := range []string{"timeout_ms", "deadline margin"} {
		for _, k := range packKs {
			t.Run(fmt.Sprintf("%s K%d", end, k), func(t *testing.T) {
				ctx := context.Background()
				rcv := &countingReceiver{calls: map[string]int{}}
				srv := httptest.NewServer(rcv)
				defer srv.Close()
				timeoutMS := 50
				if end != "timeout_ms" {
					timeoutMS = 60000
				}
				r := newRig(t, webhook.New(nil, egress.MustParse("127.0.0.1")).Run)
				r.worker.Clock = ledger.SystemClock{} // real leases: the calls run under them
				r.worker.Margin = 50 * time.Millisecond
				// One call answered first, so that the process calls the
				// receiver at once from then on (pacer.Pacer.First) and
				// every item makes its first call in the delivery below.
				submitK(t, r, "warm", 1, 1, func(q *api.SubmitRequest) {
					q.Options = json.RawMessage(fmt.Sprintf(`{"url":%q,"timeout_ms":%d}`, srv.URL, timeoutMS))
					q.KeyField, q.Source = "k", api.SourceSpec{Items: json.RawMessage(`[{"k":"warm"}]`)}
				})
				r.drain(t, ctx, 1)
				submitK(t, r, "spent", k, 20, func(q *api.SubmitRequest) {
					q.Options = json.RawMessage(fmt.Sprintf(`{"url":%q,"timeout_ms":%d}`, srv.URL, timeoutMS))
				})
				if end != "timeout_ms" {
					// The fan-out, then one delivery of every message
					// with 300 ms to go before the margin: the held calls
					// are cut off there.
					r.worker.Handle(ctx, r.queue.take())
					dctx, cancel := context.WithTimeout(ctx, r.worker.Margin+300*time.Millisecond)
					ds := r.queue.take()
					failed := r.worker.Handle(dctx, ds)
					cancel()
					for _, d := range ds {
						for _, f := range failed {
							if d.MessageID == f {
								r.queue.put([]worker.Delivery{d})
							}
						}
					}
				}
				r.drain(t, ctx, 1)
				res, err := r.fin.Finalize(ctx, "spent", 1)
				if err != nil {
					t.Fatal(err)
				}
				c := res.Report.Census
				t.Logf("%d succeeded; run_spent %v, cost %v; the receiver counted %d calls", c.Succeeded, c.RunSpent, c.Cost, rcv.total())
				if c.Succeeded != 20 || c.RunSpent.Text("calls") != strconv.Itoa(rcv.total()) || rcv.total() != 30 {
					t.Fatalf("census %d succeeded, run_spent calls %s; the receiver counted %d calls; want 20 succeeded, 30 calls in both",
						c.Succeeded, c.RunSpent.Text("calls"), rcv.total())
				}
			})
		}
	}
}

// A receiver that is slow but finishes shows in the live view and slows
// its items down rather than doubling their calls, at K = 1 and 10: it
// holds the first call of every even item past the webhook's timeout_ms
// (600 ms). After one delivery of every message the live view counts 10
// attempts timed out, with their failure class in its attention; each
// message comes back no sooner than twice timeout_ms (ledger.TimeoutWait:
// the receiver may still be working on the call), longer than the
// batch's retry policy would wait; then every item succeeds, run_spent
// counting the 30 calls the receiver got.
func TestMemSlowReceiverShowsAndWaits(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			rcv := &countingReceiver{calls: map[string]int{}}
			srv := httptest.NewServer(rcv)
			defer srv.Close()
			r := newRig(t, webhook.New(nil, egress.MustParse("127.0.0.1")).Run)
			r.worker.Clock = ledger.SystemClock{} // real leases: the calls run under them
			b := submitK(t, r, "slow", k, 20, func(q *api.SubmitRequest) {
				q.Options = json.RawMessage(fmt.Sprintf(`{"url":%q,"timeout_ms":600}`, srv.URL))
			})
			r.worker.Handle(ctx, r.queue.take()) // the fan-out
			ds := r.queue.take()
			failed := r.worker.Handle(ctx, ds)
			p, err := r.store.Progress(ctx, "slow", 1, max(1, b.CounterShards))
			if err != nil {
				t.Fatal(err)
			}
			l := live.Of(b, p, time.Now(), 0)
			if l.TimedOut != 10 || !strings.Contains(strings.Join(l.Attention, "; "), "10 attempts timed out (failure class timeout") {
				t.Fatalf("live view: timed out %d, attention %q; want 10 attempts timed out, saying so", l.TimedOut, l.Attention)
			}
			waits := r.queue.delays()
			if len(waits) == 0 || len(failed) == 0 {
				t.Fatalf("%d messages came back, with waits %v; want the held items' messages back after a wait", len(failed), waits)
			}
			for _, w := range waits {
				if w < 1200*time.Millisecond {
					t.Fatalf("waits %v: a message came back sooner than twice timeout_ms (1.2 s)", waits)
				}
			}
			for _, d := range ds {
				if slices.Contains(failed, d.MessageID) {
					r.queue.put([]worker.Delivery{d})
				}
			}
			r.drain(t, ctx, 1)
			res, err := r.fin.Finalize(ctx, "slow", 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Report.Census; c.Succeeded != 20 || c.RunSpent.Text("calls") != "30" || rcv.total() != 30 {
				t.Fatalf("census %d succeeded, run_spent %v; the receiver counted %d calls; want 20, 30 calls in both", c.Succeeded, c.RunSpent, rcv.total())
			}
		})
	}
}
