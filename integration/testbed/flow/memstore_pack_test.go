package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// packKs are the items per message every pack domain test runs with: one
// item per message (the item rows) and ten (pack rows), so that each
// guarantee is shown to hold the same way for both.
var packKs = []int{1, 10}

func submitK(t *testing.T, r *rig, id string, k, n int, mod func(*api.SubmitRequest)) ledger.Batch {
	t.Helper()
	req := api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k}
	if mod != nil {
		mod(&req)
	}
	res, err := r.sub.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Batch
}

// messagesOf counts the queued messages and their items.
func messagesOf(r *rig) (msgs, itemsIn int) {
	r.queue.mu.Lock()
	defer r.queue.mu.Unlock()
	for _, d := range r.queue.msgs {
		msgs++
		var m ledger.PackMessage
		if json.Unmarshal(d.Body, &m) == nil && m.Kind == ledger.KindPack {
			itemsIn += len(m.Items)
		} else {
			itemsIn++
		}
	}
	return msgs, itemsIn
}

// TestPackDuplicatesRunOnceAndFinalizeOnce guards "duplicate delivery runs
// an item once and finalize writes one report" for K = 1 and K = 10: every
// message delivered three times at once, one pipeline call per item, the
// exact census from the rows, four concurrent finalizes write one report,
// and the fan-out sends ceil(chunk items / K) messages per chunk.
func TestPackDuplicatesRunOnceAndFinalizeOnce(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, failOn3)
			r.sub.ChunkItems = 25
			submitK(t, r, "dup", k, 60, nil)
			r.worker.Handle(ctx, r.queue.take()) // the fan-out messages (3 chunks) expand
			msgs, n := messagesOf(r)
			// chunks of 25, 25, 10: with K = 10, packs of 10,10,5 / 10,10,5 / 10
			if want := map[int]int{1: 60, 10: 7}[k]; msgs != want || n != 60 {
				t.Fatalf("%d messages holding %d items, want %d holding 60", msgs, n, want)
			}
			r.drain(t, ctx, 3)
			for i := range 60 {
				if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
			if r.trigger.n.Load() != 1 {
				t.Fatalf("finalize triggered %d times, want 1 (counters crossed once)", r.trigger.n.Load())
			}
			r.finalizeFour(t, ctx, "dup", func(c api.Census) {
				if c.Total != 60 || c.Succeeded != 54 || c.Failed != 6 || c.Cost.Text("calls") != "54" {
					t.Errorf("census %+v", c)
				}
			})
			lines := resultLines(t, r, "dup", 1, api.OutcomeSucceeded)
			if len(lines) != 54 {
				t.Fatalf("%d succeeded results, want 54", len(lines))
			}
		})
	}
}

// TestPackMaxConcurrency guards "max_concurrency bounds the items running
// at once at every K": 40 items, limit 3, every message of a round handed
// to the worker at once; a pack holds one slot and runs its items one at
// a time, so no more than 3 pipelines ever run together, and every item
// runs once and succeeds.
func TestPackMaxConcurrency(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			var running, most atomic.Int64
			r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				running.Add(-1)
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			submitK(t, r, "limited", k, 40, func(req *api.SubmitRequest) { req.MaxConcurrency = 3 })
			r.drain(t, ctx, 1)
			if m := most.Load(); m > 3 || m < 1 {
				t.Fatalf("%d pipelines ran at once, want 1–3", m)
			}
			for i := range 40 {
				if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
			r.finalizeFour(t, ctx, "limited", func(c api.Census) {
				if c.Total != 40 || c.Succeeded != 40 {
					t.Errorf("census %+v", c)
				}
			})
		})
	}
}

// TestItemConcurrencyAcrossMessages guards that packs do not multiply
// what an invocation runs at once: with ItemConcurrency 4, three pack
// messages of 10 items handed to the worker in one call never have more
// than 4 pipelines running, and every item runs once.
func TestItemConcurrencyAcrossMessages(t *testing.T) {
	ctx := context.Background()
	var running, most atomic.Int64
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		running.Add(-1)
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	r.worker.ItemConcurrency = 4
	r.sub.ChunkItems = 30
	submitK(t, r, "shared", 10, 30, nil)
	r.drain(t, ctx, 1)
	if m := most.Load(); m > 4 || m < 2 {
		t.Fatalf("%d pipelines ran at once, want 2–4", m)
	}
	for i := range 30 {
		if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
			t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
		}
	}
}

// resultLines reads a run's results JSONL of outcome.
func resultLines(t *testing.T, r *rig, id string, run int, o api.Outcome) []ledger.Item {
	t.Helper()
	body, err := r.blobs.Get(context.Background(), api.ResultsKey(id, run, o))
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []ledger.Item
	for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		if l == "" {
			continue
		}
		var it ledger.Item
		if err := json.Unmarshal([]byte(l), &it); err != nil {
			t.Fatalf("result line %q: %v", l, err)
		}
		out = append(out, it)
	}
	return out
}

// TestPackPartialSuccess guards "when some items of a pack fail
// transiently, only they run again; succeeded items are answered from the
// row": items 2 and 7 fail transiently twice, then succeed; every other
// item runs once, and the retried ones run three times with 3 attempts.
func TestPackPartialSuccess(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			var mu sync.Mutex
			tries := map[string]int{}
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				tries[req.Key]++
				if (strings.HasSuffix(req.Key, "2") || strings.HasSuffix(req.Key, "7")) && tries[req.Key] < 3 {
					return pipeline.Result{Cost: pipeline.Cost{"calls": 1}}, errors.New("busy")
				}
				return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"calls": 1}}, nil
			})
			r.worker.Clock = &tickClock{t: r.clock.T} // a released lease ends as time goes on
			r.sub.ChunkItems = 10
			submitK(t, r, "part", k, 10, func(q *api.SubmitRequest) { q.MaxAttempts = 3 })
			r.drain(t, ctx, 1)
			for i := range 10 {
				key := api.PositionalKey(int64(i))
				want := int64(1)
				if i == 2 || i == 7 {
					want = 3
				}
				if c := r.callsOf(key); c != want {
					t.Errorf("%s: %d calls, want %d", key, c, want)
				}
			}
			res, err := r.fin.Finalize(ctx, "part", 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Report.Census; c.Succeeded != 10 || c.RunSpent.Text("calls") != "14" {
				t.Fatalf("census %+v", c)
			}
			for _, it := range resultLines(t, r, "part", 1, api.OutcomeSucceeded) {
				want := 1
				if strings.HasSuffix(it.Key, "2") || strings.HasSuffix(it.Key, "7") {
					want = 3
				}
				if it.RunAttempts != want {
					t.Errorf("%s: %d attempts, want %d", it.Key, it.RunAttempts, want)
				}
			}
		})
	}
}

// TestPackCrashTakeover guards "a crashed holder's lease expires; the next
// delivery takes over, the interrupt policy decides, and the crashed
// holder's late write is fenced off", for K = 1 and K = 10, with policy
// retry (runs again under attempt 2) and quarantine (quarantined,
// reason interrupted, never run again).
func TestPackCrashTakeover(t *testing.T) {
	for _, k := range packKs {
		for _, policy := range []api.InterruptPolicy{api.InterruptRetry, api.InterruptQuarantine} {
			t.Run(fmt.Sprintf("K=%d/%s", k, policy), func(t *testing.T) {
				ctx := context.Background()
				r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
					return pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"attempt":%d}`, req.Attempt))}, nil
				})
				b := submitK(t, r, "crash", k, 3, func(q *api.SubmitRequest) { q.OnInterrupt = policy })
				key := api.PositionalKey(1)
				// A holder reserves and crashes: the reservation, no outcome.
				late := crashHolder(t, r, b, k, key)
				r.clock.T = r.clock.T.Add(2 * time.Minute)
				r.drain(t, ctx, 1)
				if err := late(); !errors.Is(err, api.ErrConflict) {
					t.Fatalf("late write of the crashed holder: %v, want ErrConflict", err)
				}
				res, err := r.fin.Finalize(ctx, "crash", 1)
				if err != nil {
					t.Fatal(err)
				}
				c := res.Report.Census
				if policy == api.InterruptRetry {
					got := resultLines(t, r, "crash", 1, api.OutcomeSucceeded)
					if c.Succeeded != 3 || r.callsOf(key) != 1 || len(got) != 3 || string(got[1].Output) != `{"attempt":2}` {
						t.Fatalf("census %+v, calls %d, results %+v", c, r.callsOf(key), got)
					}
					return
				}
				q := resultLines(t, r, "crash", 1, api.OutcomeQuarantined)
				if c.Succeeded != 2 || c.Quarantined != 1 || r.callsOf(key) != 0 || len(q) != 1 || q[0].Reason != api.ReasonInterrupted {
					t.Fatalf("census %+v, calls %d, quarantined %+v", c, r.callsOf(key), q)
				}
				page, err := r.ctl.Items(ctx, "crash", api.OutcomeQuarantined, "", 10)
				if err != nil || len(page.Items) != 1 || page.Items[0].Key != key {
					t.Fatalf("quarantined listing %+v %v", page, err)
				}
			})
		}
	}
}

// crashHolder reserves key (K = 1) or its pack (K > 1) as a delivery that
// then dies, and returns that holder's late outcome write.
func crashHolder(t *testing.T, r *rig, b ledger.Batch, k int, key string) func() error {
	t.Helper()
	ctx := context.Background()
	if k == 1 {
		it, err := r.store.Reserve(ctx, ledger.Reservation{BatchID: b.ID, Key: key, RunID: ledger.RunID(b.ID, key), Run: 1,
			ListShards: b.ListShards, Now: r.clock.T, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return func() error {
			return r.store.Record(ctx, ledger.Record{BatchID: b.ID, Key: key, RunID: it.RunID, Run: 1, ListShards: b.ListShards,
				Attempt: it.Attempt, Outcome: api.OutcomeFailed, Error: "late", Now: r.clock.T})
		}
	}
	ref := ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: 0}
	running := ledger.ItemState{Key: key, Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, UpdatedAt: r.clock.T}
	err := r.store.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: r.clock.T.Add(time.Minute),
		Items: []ledger.PackItemWrite{{Index: 1, Item: running}}, InFlight: 1, Now: r.clock.T})
	if err != nil {
		t.Fatal(err)
	}
	return func() error {
		failed := running
		failed.Outcome, failed.Error = api.OutcomeFailed, "late"
		return r.store.WritePack(ctx, ledger.PackWrite{Ref: ref, Attempt: 1, Run: 1,
			Items: []ledger.PackItemWrite{{Index: 1, Item: failed, Was: api.OutcomeInFlight}}, Now: r.clock.T})
	}
}

// TestPackStopsPerItem guards "cancel and the threshold's early stop
// behave per item as with K = 1": a cancel before any delivery settles
// every item cancelled without a call; failures past a zero threshold stop
// the run and the items not started end cancelled, none of them called.
func TestPackStopsPerItem(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d/cancel", k), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, failOn3)
			submitK(t, r, "cx", k, 30, nil)
			if _, err := r.ctl.Cancel(ctx, "cx"); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 2)
			res, err := r.fin.Finalize(ctx, "cx", 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Report.Status != api.StatusCancelled || res.Report.Census.Cancelled != 30 {
				t.Fatalf("status %s, census %+v", res.Report.Status, res.Report.Census)
			}
			for i := range 30 {
				if c := r.callsOf(api.PositionalKey(int64(i))); c != 0 {
					t.Errorf("%s ran %d times after the cancel", api.PositionalKey(int64(i)), c)
				}
			}
		})
		t.Run(fmt.Sprintf("K=%d/threshold", k), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{}, pipeline.Permanent(errors.New("no"))
			})
			r.sub.ChunkItems = 10
			zero := int64(0)
			submitK(t, r, "th", k, 40, func(q *api.SubmitRequest) { q.Threshold = api.Threshold{FailureCount: &zero} })
			r.drainBy(t, ctx, 1, 1)
			res, err := r.fin.Finalize(ctx, "th", 1)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Report.Census
			if res.Report.Status != api.StatusThresholdExceeded || c.Failed < 1 || c.Cancelled < 1 || c.Failed+c.Cancelled != 40 {
				t.Fatalf("status %s, census %+v", res.Report.Status, c)
			}
			var calls int64
			for i := range 40 {
				calls += r.callsOf(api.PositionalKey(int64(i)))
			}
			if calls != c.Failed {
				t.Fatalf("%d pipeline calls for %d failed items: cancelled items ran", calls, c.Failed)
			}
		})
	}
}

// TestPackViewsReleaseResume guards "every view is per item whatever K":
// failed and quarantined items are listed one by one in key order, paged,
// from their attention entries; one quarantined item of a pack is
// released and resume runs it and the failed ones only, the succeeded
// items of the same packs answered from their rows and counted once.
func TestPackViewsReleaseResume(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			var fixed atomic.Bool
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				switch {
				case fixed.Load():
				case strings.HasSuffix(req.Key, "3"):
					return pipeline.Result{}, pipeline.Permanent(errors.New("bad item"))
				case strings.HasSuffix(req.Key, "5"):
					return pipeline.Result{}, pipeline.Quarantine(errors.New("look at it"))
				}
				return pipeline.Result{Output: req.Input}, nil
			})
			r.sub.ChunkItems = 20
			submitK(t, r, "vw", k, 40, nil)
			r.drain(t, ctx, 1)
			if _, err := r.fin.Finalize(ctx, "vw", 1); err != nil {
				t.Fatal(err)
			}
			var failed []string
			cursor := ""
			for {
				page, err := r.ctl.Items(ctx, "vw", api.OutcomeFailed, cursor, 3)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range page.Items {
					if it.Outcome != api.OutcomeFailed || it.Reason != api.ReasonPermanent || it.Error == "" || it.RunAttempts != 1 {
						t.Errorf("listed %+v", it)
					}
					failed = append(failed, it.Key)
				}
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			if want := []string{api.PositionalKey(3), api.PositionalKey(13), api.PositionalKey(23), api.PositionalKey(33)}; fmt.Sprint(failed) != fmt.Sprint(want) {
				t.Fatalf("failed listing %v, want %v", failed, want)
			}
			q, err := r.ctl.Items(ctx, "vw", api.OutcomeQuarantined, "", 100)
			if err != nil || len(q.Items) != 4 {
				t.Fatalf("quarantined listing %+v %v", q, err)
			}
			if err := r.ctl.Release(ctx, "vw", api.PositionalKey(15)); err != nil {
				t.Fatal(err)
			}
			// The same answers at every K: a succeeded or failed item is
			// not quarantined (409; a pack item found in the run's
			// results), a key the batch does not have is not found (404).
			for key, want := range map[string]error{
				api.PositionalKey(14): api.ErrConflict, api.PositionalKey(0): api.ErrConflict,
				api.PositionalKey(39): api.ErrConflict, api.PositionalKey(13): api.ErrConflict,
				api.PositionalKey(40): api.ErrNotFound, "a": api.ErrNotFound, "zzz": api.ErrNotFound,
			} {
				if err := r.ctl.Release(ctx, "vw", key); !errors.Is(err, want) {
					t.Errorf("release of %s: %v, want %v", key, err, want)
				}
			}
			fixed.Store(true)
			r.clock.T = r.clock.T.Add(time.Minute)
			if _, err := r.sub.Resume(ctx, "vw"); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 2)
			res, err := r.fin.Finalize(ctx, "vw", 2)
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Report.Census; c.Total != 40 || c.Succeeded != 37 || c.Quarantined != 3 || c.Failed != 0 {
				t.Fatalf("run 2 census %+v", c)
			}
			for i := range 40 {
				key := api.PositionalKey(int64(i))
				want := int64(1)
				if strings.HasSuffix(key, "3") || key == api.PositionalKey(15) {
					want = 2
				}
				if c := r.callsOf(key); c != want {
					t.Errorf("%s: %d calls, want %d", key, c, want)
				}
			}
			if left, err := r.ctl.Items(ctx, "vw", api.OutcomeFailed, "", 100); err != nil || len(left.Items) != 0 {
				t.Fatalf("failed after run 2: %+v %v", left, err)
			}
		})
	}
}

// TestPackDeadLetters guards "dead-lettered messages record their items
// failed (dead-lettered), items reserved in the run left to their own
// message", for an item or pack message and for a fan-out message, K = 1
// and K = 10.
func TestPackDeadLetters(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, failOn3)
			r.sub.ChunkItems = 20
			submitK(t, r, "dl", k, 40, nil)
			fan := r.queue.take() // two fan-out messages
			if len(fan) != 2 {
				t.Fatalf("%d fan-out messages, want 2", len(fan))
			}
			// Chunk 2's fan-out is dead-lettered; chunk 1 expands and its
			// first message is dead-lettered too.
			r.worker.Handle(ctx, fan[:1])
			fan[1].DeadLetter = true
			r.worker.Handle(ctx, fan[1:])
			msgs := r.queue.take()
			first := msgs[0]
			first.DeadLetter = true
			r.worker.Handle(ctx, []worker.Delivery{first})
			r.queue.put(msgs[1:])
			r.drain(t, ctx, 1)
			res, err := r.fin.Finalize(ctx, "dl", 1)
			if err != nil {
				t.Fatal(err)
			}
			dead := 20 + k // chunk 2, and the first message's items
			bad := 0       // items of chunk 1 that ran and failed (failOn3)
			for i := k; i < 20; i++ {
				if i%10 == 3 {
					bad++
				}
			}
			c := res.Report.Census
			if c.Failed != int64(dead+bad) || c.Succeeded != int64(20-k-bad) {
				t.Fatalf("census %+v, want %d dead-lettered", c, dead)
			}
			var n int
			for _, it := range resultLines(t, r, "dl", 1, api.OutcomeFailed) {
				if it.Reason == api.ReasonDeadLettered {
					n++
					if r.callsOf(it.Key) != 0 {
						t.Errorf("%s dead-lettered after running", it.Key)
					}
				}
			}
			if n != dead {
				t.Fatalf("%d dead-lettered results, want %d", n, dead)
			}
		})
	}
}

// tickClock moves a second on from every reading.
type tickClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tickClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// TestPackDeadlineLeavesItemsUnstarted guards "the pipeline runs per item
// inside the invocation, deadline-aware": items of a pack that cannot
// start before the invocation's deadline margin are given back without
// using an attempt, the message comes back, and the next delivery runs
// them: every item ends with one call and one attempt.
func TestPackDeadlineLeavesItemsUnstarted(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		time.Sleep(120 * time.Millisecond) // past the whole deadline below
		return pipeline.Result{Output: json.RawMessage(`{"ok":true}`)}, nil
	})
	r.worker.Margin, r.worker.ItemConcurrency = 50*time.Millisecond, 1
	r.sub.ChunkItems = 10
	submitK(t, r, "dl", 10, 10, nil)
	r.worker.Handle(ctx, r.queue.take()) // fan-out
	msgs := r.queue.take()
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1 pack", len(msgs))
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	failed := r.worker.Handle(short, msgs)
	cancel()
	if len(failed) != 1 {
		t.Fatal("a pack with items left unstarted was acknowledged")
	}
	var ran int64
	for i := range 10 {
		ran += r.callsOf(api.PositionalKey(int64(i)))
	}
	if ran > 1 {
		t.Fatalf("%d items ran with 100 ms left and a 50 ms margin, want at most 1", ran)
	}
	r.worker.Handle(ctx, msgs)
	res, err := r.fin.Finalize(ctx, "dl", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Census.Succeeded != 10 {
		t.Fatalf("census %+v", res.Report.Census)
	}
	for _, it := range resultLines(t, r, "dl", 1, api.OutcomeSucceeded) {
		if it.RunAttempts != 1 || r.callsOf(it.Key) != 1 {
			t.Errorf("%s: %d attempts, %d calls, want 1 and 1", it.Key, it.RunAttempts, r.callsOf(it.Key))
		}
	}
}

// TestNewerFormatMessageLeftOnQueue guards the upgrade rule for messages:
// one of a format version above this code's (a newer release sent it) is
// neither run nor acknowledged as poison; it stays on the queue.
func TestNewerFormatMessageLeftOnQueue(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	submitK(t, r, "newer", 1, 1, nil)
	body := fmt.Sprintf(`{"v":%d,"kind":"item","batch_id":"newer","run":1,"key":"%s","input":{}}`, ledger.FormatVersion+1, api.PositionalKey(0))
	failed := r.worker.Handle(ctx, []worker.Delivery{{MessageID: "m1", Body: []byte(body), ReceiveCount: 1}})
	if len(failed) != 1 || failed[0] != "m1" {
		t.Fatalf("failed = %v, want the message left on the queue", failed)
	}
	if c := r.callsOf(api.PositionalKey(0)); c != 0 {
		t.Fatalf("%d pipeline calls, want none", c)
	}
}

// TestMessageOfTheOtherUnitIsNotRun guards against running an item twice
// through two units: an item message for a batch of packs (or a pack
// message for a batch of one item per message) is acknowledged as poison,
// never run; the item runs once, through its own unit.
func TestMessageOfTheOtherUnitIsNotRun(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			submitK(t, r, "other", k, 3, nil)
			key := api.PositionalKey(0)
			body := fmt.Sprintf(`{"v":1,"kind":"item","batch_id":"other","run":1,"key":"%s","input":{}}`, key)
			if k == 1 {
				body = fmt.Sprintf(`{"v":1,"kind":"pack","batch_id":"other","run":1,"manifest_key":"m","pack_first":0,"items":[{"key":"%s","input":{}}]}`, key)
			}
			failed := r.worker.Handle(ctx, []worker.Delivery{{MessageID: "x", Body: []byte(body), ReceiveCount: 1}})
			if len(failed) != 0 || r.callsOf(key) != 0 {
				t.Fatalf("failed %v, %d calls: want acknowledged without a call", failed, r.callsOf(key))
			}
			r.drain(t, ctx, 1)
			if c := r.callsOf(key); c != 1 {
				t.Fatalf("%d calls, want 1 through the batch's own unit", c)
			}
		})
	}
}

// finalizeChain calls Finalize for run 1 of id until a call finishes the
// run (as the chain of finalize calls does) and returns its census.
func (r *rig) finalizeChain(t *testing.T, id string) api.Census {
	t.Helper()
	for range 100 {
		res, err := r.fin.Finalize(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Continued {
			return res.Report.Census
		}
	}
	t.Fatalf("finalize of %s does not end in 100 calls", id)
	return api.Census{}
}

// TestResultsInKeyOrderAtEveryK guards "a run's results come in key byte
// order at every items per message": 60 items keyed by a field, in an
// order far from key order, some failing; at K = 1 and K = 10 each
// outcome's results file is in ledger.KeyOrder and byte for byte the same
// — whether a pack batch's lines are sorted in memory (the default), or
// in runs of 300 bytes merged across finalize calls of 4 rows each.
func TestResultsInKeyOrderAtEveryK(t *testing.T) {
	var src strings.Builder
	src.WriteByte('[')
	for i := range 60 {
		if i > 0 {
			src.WriteByte(',')
		}
		// keys run backwards in steps of 7 (mod 60): far from manifest order
		fmt.Fprintf(&src, `{"id":"key-%02d","n":%d}`, (60-7*i%60)%60, i)
	}
	src.WriteByte(']')
	for _, sorted := range []struct {
		name      string
		runBytes  int
		chunkRows int64
	}{{"in memory", 0, 0}, {"runs across calls", 300, 4}} {
		t.Run(sorted.name, func(t *testing.T) {
			files := map[int]map[api.Outcome]string{}
			for _, k := range packKs {
				ctx := context.Background()
				r := newRig(t, failOn3)
				r.fin.SortRunBytes, r.fin.ChunkRows = sorted.runBytes, sorted.chunkRows
				submitK(t, r, "ordered", k, 0, func(req *api.SubmitRequest) {
					req.Source.Items, req.KeyField = json.RawMessage(src.String()), "id"
				})
				r.drain(t, ctx, 1)
				if c := r.finalizeChain(t, "ordered"); c.Succeeded != 54 || c.Failed != 6 {
					t.Fatalf("K=%d: census %+v", k, c)
				}
				files[k] = map[api.Outcome]string{}
				for _, o := range []api.Outcome{api.OutcomeSucceeded, api.OutcomeFailed} {
					body, err := r.blobs.Get(ctx, api.ResultsKey("ordered", 1, o))
					if err != nil {
						t.Fatal(err)
					}
					files[k][o] = string(body)
					var keys []string
					for _, it := range resultLines(t, r, "ordered", 1, o) {
						keys = append(keys, it.Key)
					}
					if !slices.IsSortedFunc(keys, ledger.KeyOrder) {
						t.Errorf("K=%d: %s results not in key order: %q", k, o, keys)
					}
				}
				if n, _ := r.blobs.DeletePrefix(ctx, finalize.FinalizePrefix("ordered", 1)); n != 0 {
					t.Errorf("K=%d: %d finalize objects (sort runs, checkpoints) left", k, n)
				}
			}
			for o, body := range files[1] {
				if files[10][o] != body {
					t.Errorf("%s results differ between K=1 and K=10:\n%s\n%s", o, body, files[10][o])
				}
			}
		})
	}
}

// TestFinalizeStartsOverAnOldPackChain guards an upgrade in the middle of
// a pack batch's finalize chain: a checkpoint the release before wrote
// (its results in manifest order: no key_order, no sorted runs) is not
// gone on from, since the rows it counted are in no run; the chain starts
// over, and the results hold every item once, in key order.
func TestFinalizeStartsOverAnOldPackChain(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	r.fin.ChunkRows, r.fin.SortRunBytes = 7, 300
	var src strings.Builder
	src.WriteByte('[')
	for i := range 40 {
		if i > 0 {
			src.WriteByte(',')
		}
		fmt.Fprintf(&src, `{"id":"key-%02d"}`, (40-7*i%40)%40)
	}
	src.WriteByte(']')
	submitK(t, r, "old", 10, 0, func(req *api.SubmitRequest) {
		req.Source.Items, req.KeyField = json.RawMessage(src.String()), "id"
	})
	r.drain(t, ctx, 1)
	if res, err := r.fin.Finalize(ctx, "old", 1); err != nil || !res.Continued {
		t.Fatalf("first chunk: %+v %v", res, err)
	}
	// The checkpoint as the release before would have left it.
	key := finalize.FinalizePrefix("old", 1) + "000001.json"
	body, err := r.blobs.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var cp map[string]any
	if err := json.Unmarshal(body, &cp); err != nil {
		t.Fatal(err)
	}
	if cp["key_order"] != true || cp["runs"] == nil {
		t.Fatalf("checkpoint %s: want key_order and runs", body)
	}
	delete(cp, "key_order")
	delete(cp, "runs")
	delete(cp, "counted")
	old, _ := json.Marshal(cp)
	if err := r.blobs.Put(ctx, key, "application/json", old); err != nil {
		t.Fatal(err)
	}
	if c := r.finalizeChain(t, "old"); c.Succeeded != 36 || c.Failed != 4 {
		t.Fatalf("census %+v", c)
	}
	var keys []string
	for _, o := range []api.Outcome{api.OutcomeSucceeded, api.OutcomeFailed} {
		lines := resultLines(t, r, "old", 1, o)
		var ok []string
		for _, it := range lines {
			ok = append(ok, it.Key)
		}
		if !slices.IsSortedFunc(ok, ledger.KeyOrder) {
			t.Errorf("%s results not in key order: %q", o, ok)
		}
		keys = append(keys, ok...)
	}
	if len(keys) != 40 {
		t.Fatalf("%d result lines, want 40 (the rows the old checkpoint counted were lost)", len(keys))
	}
}

// TestInFlightListingAtEveryK guards "items?outcome=in_flight lists the
// items being run, one by one, in key order, paged, whatever K": 12 items
// keyed out of manifest order whose pipelines wait until released; while
// they run, the listing pages through exactly their keys in key order,
// and once they end it is empty.
func TestInFlightListingAtEveryK(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			var started sync.WaitGroup
			started.Add(12)
			release := make(chan struct{})
			r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
				started.Done()
				<-release
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			r.worker.ItemConcurrency, r.worker.Concurrency = 12, 12 // every item runs at once
			r.sub.ChunkItems = 12
			var src strings.Builder
			src.WriteByte('[')
			var want []string
			for i := range 12 {
				if i > 0 {
					src.WriteByte(',')
				}
				key := fmt.Sprintf("key-%02d", (12-5*i%12)%12)
				want = append(want, key)
				fmt.Fprintf(&src, `{"id":%q}`, key)
			}
			src.WriteByte(']')
			slices.SortFunc(want, ledger.KeyOrder)
			submitK(t, r, "running", k, 0, func(req *api.SubmitRequest) {
				req.Source.Items, req.KeyField = json.RawMessage(src.String()), "id"
			})
			r.worker.Handle(ctx, r.queue.take()) // the fan-out
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.worker.Handle(ctx, r.queue.take())
			}()
			started.Wait()
			var got []string
			for cursor := ""; ; {
				page, err := r.ctl.Items(ctx, "running", api.OutcomeInFlight, cursor, 5)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range page.Items {
					got = append(got, it.Key)
				}
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("in flight %q, want %q", got, want)
			}
			close(release)
			<-done
			page, err := r.ctl.Items(ctx, "running", api.OutcomeInFlight, "", 100)
			if err != nil || len(page.Items) != 0 {
				t.Fatalf("in flight after the run: %+v %v", page, err)
			}
		})
	}
}

// TestCancelStopsTakenItems guards "cancel stops the work" at every K: a
// cancel recorded while the worker holds taken messages (item messages
// of one message batch, or the rest of a pack) lets no pipeline call
// start after it; the items not called end cancelled, their attempt not
// counted, and a resume runs exactly them, once each. The worker reads
// the batch row before every call here (StopCheck -1, items one at a
// time).
func TestCancelStopsTakenItems(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			var r *rig
			var calls, afterCancel atomic.Int64
			var cancelled atomic.Bool
			r = newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if cancelled.Load() {
					afterCancel.Add(1)
				}
				if calls.Add(1) == 3 {
					if _, err := r.ctl.Cancel(ctx, "cx"); err != nil {
						t.Error(err)
					}
					cancelled.Store(true)
				}
				return pipeline.Result{Output: req.Input}, nil
			})
			r.worker.ItemConcurrency, r.worker.StopCheck = 1, -1
			r.sub.ChunkItems = 30
			submitK(t, r, "cx", k, 30, nil)
			r.drain(t, ctx, 1)
			if calls.Load() != 3 || afterCancel.Load() != 0 {
				t.Fatalf("%d calls, %d of them after the cancel; want 3, none after", calls.Load(), afterCancel.Load())
			}
			res, err := r.fin.Finalize(ctx, "cx", 1)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Report.Census
			if res.Report.Status != api.StatusCancelled || c.Succeeded != 3 || c.Cancelled != 27 {
				t.Fatalf("status %s, census %+v; want cancelled, 3 succeeded, 27 cancelled", res.Report.Status, c)
			}
			for _, l := range resultLines(t, r, "cx", 1, api.OutcomeCancelled) {
				if l.RunAttempts != 0 || l.Reason != api.ReasonCancel {
					t.Fatalf("cancelled line %+v: want 0 attempts, reason cancel", l)
				}
			}
			r.clock.T = r.clock.T.Add(time.Minute)
			if _, err := r.sub.Resume(ctx, "cx"); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 1)
			if res, err := r.fin.Finalize(ctx, "cx", 2); err != nil || res.Report.Census.Succeeded != 30 {
				t.Fatalf("resume: %+v, %v; want 30 succeeded", res.Report.Census, err)
			}
			for i := range 30 {
				if n := r.callsOf(api.PositionalKey(int64(i))); n != 1 {
					t.Errorf("%s: %d calls over both runs, want 1", api.PositionalKey(int64(i)), n)
				}
			}
		})
	}
}

// TestCancelStopsSlowCallsOfALaterInvocation guards "once the batch's
// calls take a second or more, none starts after the stop" across
// invocations, at the worker's own StopCheck: an invocation whose calls
// took 5 s each is followed by another whose read of the batch row (the
// message batch's) comes just before a cancel. That invocation must read
// the row again before its first call, and start none.
func TestCancelStopsSlowCallsOfALaterInvocation(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			var r *rig
			clock := &steppingClock{t: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)}
			var calls, afterCancel atomic.Int64
			var cancelled atomic.Bool
			r = newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if cancelled.Load() {
					afterCancel.Add(1)
				}
				calls.Add(1)
				clock.add(5 * time.Second)
				return pipeline.Result{Output: req.Input}, nil
			})
			store := &cancelOnRead{Store: r.store, cancel: func(ctx context.Context, id string) {
				if _, err := r.ctl.Cancel(ctx, id); err != nil {
					t.Error(err)
				}
				cancelled.Store(true)
			}}
			r.worker.Store, r.worker.Clock, r.worker.ItemConcurrency = store, clock, 1
			submitK(t, r, "sl", k, 30, nil)
			// Invocation 1: one message at a time until calls were made
			// (a fan-out message may come first).
			for calls.Load() == 0 {
				ds := r.queue.take()
				if len(ds) == 0 {
					t.Fatal("the queue emptied before any call")
				}
				r.queue.put(ds[1:])
				r.worker.Handle(ctx, ds[:1])
			}
			// Invocation 2: the cancel is recorded right after its read.
			store.armed.Store(true)
			ds := r.queue.take()
			if len(ds) == 0 {
				t.Fatal("no message left for a second invocation")
			}
			r.worker.Handle(ctx, ds)
			if !cancelled.Load() {
				t.Fatal("the second invocation read no batch row")
			}
			if n := afterCancel.Load(); n != 0 {
				t.Fatalf("%d calls started after the cancel (%d before it); want none", n, calls.Load()-n)
			}
			res, err := r.fin.Finalize(ctx, "sl", 1)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Report.Census
			if res.Report.Status != api.StatusCancelled || c.Succeeded != calls.Load() || c.Succeeded+c.Cancelled != 30 {
				t.Fatalf("status %s, census %+v after %d calls; want cancelled, the rest cancelled", res.Report.Status, c, calls.Load())
			}
		})
	}
}

// steppingClock is a clock the test moves forward (a call's duration),
// safe for concurrent use.
type steppingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *steppingClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// cancelOnRead is the worker's store whose next read of a batch row,
// once armed, is followed by a cancel: the stop is recorded just after
// the row the reader holds was read.
type cancelOnRead struct {
	*memstore.Store
	armed  atomic.Bool
	cancel func(ctx context.Context, id string)
}

func (s *cancelOnRead) GetBatch(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := s.Store.GetBatch(ctx, id)
	if err == nil && s.armed.CompareAndSwap(true, false) {
		s.cancel(ctx, id)
	}
	return b, err
}

func (s *cancelOnRead) GetBatchEventually(ctx context.Context, id string) (ledger.Batch, error) {
	return s.GetBatch(ctx, id)
}
