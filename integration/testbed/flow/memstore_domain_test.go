package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/live"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
	"github.com/bulkrun/bulkrun/shared/submit"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// The domain's main paths (Submit, Worker, Finalize, Control, Sweep) on
// the in-memory store (integration/testbed/memstore), which passes the same
// ledger.Store conformance suite as the DynamoDB adapter: the storage
// conditions these tests lean on are DynamoDB's. The same paths run on
// the emulator in integration/harness_test.go.

// memQueue is an in-memory Queue: what was sent waits until take.
type memQueue struct {
	mu    sync.Mutex
	msgs  []worker.Delivery
	n     int
	waits []time.Duration // each Delay's and Requeue's wait
}

func (q *memQueue) add(body []byte) {
	q.n++
	q.msgs = append(q.msgs, worker.Delivery{MessageID: "m" + strconv.Itoa(q.n), Body: bytes.Clone(body), ReceiptHandle: "r" + strconv.Itoa(q.n), ReceiveCount: 1})
}

func (q *memQueue) Send(_ context.Context, bodies [][]byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range bodies {
		q.add(b)
	}
	return nil
}

func (q *memQueue) Requeue(_ context.Context, body []byte, d time.Duration) error {
	q.mu.Lock()
	q.waits = append(q.waits, d)
	q.mu.Unlock()
	return q.Send(context.Background(), [][]byte{body})
}

func (q *memQueue) Delay(_ context.Context, _ string, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waits = append(q.waits, d)
	return nil
}

// delays returns the waits asked for so far (Delay, Requeue).
func (q *memQueue) delays() []time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.waits)
}

func (q *memQueue) take() []worker.Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	ds := q.msgs
	q.msgs = nil
	return ds
}

func (q *memQueue) put(ds []worker.Delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, ds...)
}

// memTrigger counts finalize triggers.
type memTrigger struct{ n atomic.Int64 }

func (t *memTrigger) Finalize(context.Context, string, int) error { t.n.Add(1); return nil }

type rig struct {
	store   *memstore.Store
	blobs   *memblobs.Blobs
	queue   *memQueue
	trigger *memTrigger
	clock   *memstore.FixedClock
	sub     *submit.Submitter
	worker  *worker.Worker
	fin     *finalize.Finalizer
	ctl     *control.Control
	sweep   *control.Sweeper
	calls   sync.Map // key → *atomic.Int64
}

func newRig(t testing.TB, run pipeline.Func) *rig {
	t.Helper()
	// A rig is a fresh process: none of another test's pacing hints, lags
	// or take times (the tests of this package run one at a time).
	pacer.Forget()
	r := &rig{store: memstore.NewStore(), blobs: memblobs.New(), queue: &memQueue{}, trigger: &memTrigger{},
		clock: &memstore.FixedClock{T: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)}}
	log := slog.New(slog.NewTextHandler(testLogOut(), nil))
	reg := &pipeline.Registry{}
	counted := pipeline.Func(func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		c, _ := r.calls.LoadOrStore(req.Key, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		return run(ctx, req)
	})
	if err := reg.Register("counted", counted); err != nil {
		t.Fatal(err)
	}
	r.sub = &submit.Submitter{Store: r.store, Blobs: r.blobs, Queue: r.queue, Trigger: r.trigger, Clock: r.clock,
		Log: log, Pipelines: []string{"counted"}, MaxAttempts: 3, ChunkItems: 7, TempDir: t.TempDir()}
	r.worker = &worker.Worker{Store: r.store, Blobs: r.blobs, Queue: r.queue, Trigger: r.trigger, Clock: r.clock,
		Log: log, Pipelines: reg, Lease: time.Minute, Retry: &api.RetryPolicy{},
		// The rig's clock moves when a test moves it: a pace's sleep
		// (at most pace.LeaseSleep) ends at once, as no time would pass
		// on it by sleeping (tests of the pace's own waits set their own).
		Sleep: func(context.Context, time.Duration) {}}
	r.fin = &finalize.Finalizer{Store: r.store, Blobs: r.blobs, Clock: r.clock, Log: log, Retention: time.Hour}
	r.ctl = &control.Control{Store: r.store, Blobs: r.blobs, Log: log, Clock: r.clock}
	r.sweep = &control.Sweeper{Store: r.store, Control: r.ctl, Clock: r.clock, Log: log}
	return r
}

// wakeHeld gives the rig's worker and control one held.Waker over its
// store, blobs, queue and clock, as the functions' wiring does: the wakes
// of lifts, raises, signals, timers, cancels and threshold stops.
func (r *rig) wakeHeld() {
	waker := &held.Waker{Store: r.store, Blobs: r.blobs, Queue: r.queue, Clock: r.clock, Log: slog.New(slog.NewTextHandler(testLogOut(), nil))}
	r.worker.Wake, r.ctl.Wake = waker, waker
	r.fin.Settle = func(ctx context.Context, b ledger.Batch) error {
		_, err := waker.Settle(ctx, b, control.WakeTime)
		return err
	}
}

func (r *rig) callsOf(key string) int64 {
	c, ok := r.calls.Load(key)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// drain hands every queued message to the worker, each `copies` times in
// one call (duplicate deliveries), and hands back the ones it failed until
// the queue is empty.
func (r *rig) drain(t *testing.T, ctx context.Context, copies int) {
	t.Helper()
	r.drainBy(t, ctx, copies, 0)
}

// drainBy is drain handing at most per messages to each call (0: all).
func (r *rig) drainBy(t *testing.T, ctx context.Context, copies, per int) {
	t.Helper()
	for range 1000 {
		ds := r.queue.take()
		if len(ds) == 0 {
			return
		}
		if per > 0 && len(ds) > per {
			r.queue.put(ds[per:])
			ds = ds[:per]
		}
		var all []worker.Delivery
		for range copies {
			all = append(all, ds...)
		}
		asked := len(r.queue.delays())
		failed := r.worker.Handle(ctx, all)
		var again []worker.Delivery
		seen := map[string]bool{}
		for _, d := range ds {
			for _, f := range failed {
				if d.MessageID == f && !seen[f] {
					seen[f] = true
					d.ReceiveCount++
					again = append(again, d)
				}
			}
		}
		r.queue.put(again)
		if _, real := r.worker.Clock.(ledger.SystemClock); real && len(again) > 0 {
			// On the machine's clock the messages come back no sooner than
			// they asked, as SQS brings them back (a scheduled retry is not
			// due before; the worker leaves it).
			if waits := r.queue.delays()[asked:]; len(waits) > 0 {
				time.Sleep(min(slices.Max(waits), 10*time.Second))
			}
		}
	}
	t.Fatal("the queue did not drain in 1,000 rounds")
}

// finalizeFour runs four Finalize calls of run 1 of id at once, checks
// each report's census with check, and fails unless exactly one wrote it.
// A call that finds the chunk claimed by another (finalize.ErrChunkClaimed)
// calls again, as a trigger does after a
// wait (finalize.Finalizer.Trigger), until it gets the report.
func (r *rig) finalizeFour(t *testing.T, ctx context.Context, id string, check func(api.Census)) {
	t.Helper()
	var wg sync.WaitGroup
	var wrote atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.fin.Finalize(ctx, id, 1)
			for tries := 0; errors.Is(err, finalize.ErrChunkClaimed) && tries < 10_000; tries++ {
				time.Sleep(time.Millisecond)
				res, err = r.fin.Finalize(ctx, id, 1)
			}
			if err != nil {
				t.Error(err)
				return
			}
			if res.Wrote {
				wrote.Add(1)
			}
			check(res.Report.Census)
		}()
	}
	wg.Wait()
	if wrote.Load() != 1 {
		t.Fatalf("%d finalize calls wrote the report, want 1", wrote.Load())
	}
}

func items(n int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"n":%d}`, i)
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

func failOn3(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
	if strings.HasSuffix(req.Key, "3") {
		return pipeline.Result{}, pipeline.Permanent(errors.New("bad item"))
	}
	return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"calls": 1}}, nil
}

// Every message delivered three times at once: one pipeline call per item,
// the last item triggers finalize, four concurrent finalizes write one
// report with the exact census.
func TestMemDuplicatesRunOnceAndFinalizeOnce(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "dup", Pipeline: "counted", Source: api.SourceSpec{Items: items(20)}}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 3)
	for i := range 20 {
		if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
			t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
		}
	}
	if r.trigger.n.Load() < 1 {
		t.Fatal("the last item did not trigger finalize")
	}
	r.finalizeFour(t, ctx, "dup", func(c api.Census) {
		if c.Total != 20 || c.Succeeded != 18 || c.Failed != 2 || c.Cost.Text("calls") != "18" {
			t.Errorf("census %+v", c)
		}
	})
	b, err := r.store.GetBatch(ctx, "dup")
	if err != nil || b.Status != api.StatusCompleted || !b.NeedsAttention {
		t.Fatalf("batch %+v %v", b, err)
	}
	if ids, _ := r.store.RunningBatches(ctx); len(ids) != 0 {
		t.Fatalf("running after finish: %v", ids)
	}
}

// A crashed attempt's lease expires; the redelivery takes the item over
// under attempt 2 and the crashed attempt's late write is fenced off.
func TestMemFencedTakeover(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: json.RawMessage(`{"attempt":` + strconv.Itoa(req.Attempt) + `}`)}, nil
	})
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "crash", Pipeline: "counted", Source: api.SourceSpec{Items: items(1)}}); err != nil {
		t.Fatal(err)
	}
	b, _ := r.store.GetBatch(ctx, "crash")
	key := api.PositionalKey(0)
	first, err := r.store.Reserve(ctx, ledger.Reservation{BatchID: "crash", Key: key, RunID: ledger.RunID("crash", key), Run: 1,
		ListShards: b.ListShards, Now: r.clock.T, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.clock.T = r.clock.T.Add(2 * time.Second)
	r.drain(t, ctx, 1)
	err = r.store.Record(ctx, ledger.Record{BatchID: "crash", Key: key, RunID: first.RunID, Run: 1, ListShards: b.ListShards,
		Attempt: first.Attempt, Outcome: api.OutcomeFailed, Error: "late", Now: r.clock.T})
	if !errors.Is(err, api.ErrConflict) {
		t.Fatalf("late write of attempt 1: %v, want ErrConflict", err)
	}
	res, err := r.fin.Finalize(ctx, "crash", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Census.Succeeded != 1 || r.callsOf(key) != 1 {
		t.Fatalf("census %+v, calls %d", res.Report.Census, r.callsOf(key))
	}
	var row ledger.Item
	_ = r.store.ScanItems(ctx, "crash", b.ListShards, func(it ledger.Item) error { row = it; return nil })
	if row.Attempt != 2 || string(row.Output) != `{"attempt":2}` {
		t.Fatalf("row after takeover: %+v", row)
	}
}

// Failures past the threshold stop the run: the items not started end
// cancelled and the run ends threshold_exceeded.
func TestMemThresholdStop(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Permanent(errors.New("no"))
	})
	zero := int64(0)
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "th", Pipeline: "counted", Source: api.SourceSpec{Items: items(20)},
		Threshold: api.Threshold{FailureCount: &zero}}); err != nil {
		t.Fatal(err)
	}
	r.drainBy(t, ctx, 1, 1) // one message per invocation: the stop is seen by the next

	b, _ := r.store.GetBatch(ctx, "th")
	if b.Stop != api.StatusThresholdExceeded {
		t.Fatalf("stop = %q, want threshold_exceeded", b.Stop)
	}
	res, err := r.fin.Finalize(ctx, "th", 1)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Report.Census
	if res.Report.Status != api.StatusThresholdExceeded || c.Failed < 1 || c.Cancelled < 1 || c.Failed+c.Cancelled != 20 {
		t.Fatalf("status %s, census %+v", res.Report.Status, c)
	}
	var calls int64
	for i := range 20 {
		calls += r.callsOf(api.PositionalKey(int64(i)))
	}
	if calls != c.Failed {
		t.Fatalf("%d pipeline calls for %d failed items: cancelled items ran", calls, c.Failed)
	}
}

// A cancel before the items run: none runs, every item ends cancelled.
func TestMemCancel(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "cx", Pipeline: "counted", Source: api.SourceSpec{Items: items(10)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.Cancel(ctx, "cx"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, "cx", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Status != api.StatusCancelled || res.Report.Census.Cancelled != 10 {
		t.Fatalf("status %s, census %+v", res.Report.Status, res.Report.Census)
	}
	for i := range 10 {
		if c := r.callsOf(api.PositionalKey(int64(i))); c != 0 {
			t.Errorf("%s ran %d times after the cancel", api.PositionalKey(int64(i)), c)
		}
	}
}

// Resume runs only what did not succeed: run 2 retries the failed items,
// succeeded ones are counted from their rows without running again.
func TestMemResume(t *testing.T) {
	ctx := context.Background()
	var fixed atomic.Bool
	r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if fixed.Load() {
			return pipeline.Result{Output: req.Input}, nil
		}
		return failOn3(ctx, req)
	})
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "rs", Pipeline: "counted", Source: api.SourceSpec{Items: items(20)}}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if _, err := r.fin.Finalize(ctx, "rs", 1); err != nil {
		t.Fatal(err)
	}
	fixed.Store(true)
	r.clock.T = r.clock.T.Add(time.Minute)
	b, err := r.sub.Resume(ctx, "rs")
	if err != nil {
		t.Fatal(err)
	}
	if b.Run != 2 || b.Status != api.StatusRunning {
		t.Fatalf("resumed %+v", b)
	}
	r.drain(t, ctx, 2)
	res, err := r.fin.Finalize(ctx, "rs", 2)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Census; c.Total != 20 || c.Succeeded != 20 || res.Report.Status != api.StatusCompleted {
		t.Fatalf("run 2: status %s, census %+v", res.Report.Status, c)
	}
	for i := range 20 {
		key := api.PositionalKey(int64(i))
		want := int64(1)
		if strings.HasSuffix(key, "3") {
			want = 2
		}
		if c := r.callsOf(key); c != want {
			t.Errorf("%s: %d calls, want %d", key, c, want)
		}
	}
	// Run 2's results hold every item once, each line naming the run that
	// produced its outcome: run 1 for the items it answered from their
	// rows, run 2 for the ones it ran again (docs/cli.md "Results lines").
	body, err := r.blobs.Get(ctx, api.ResultsKey("rs", 2, api.OutcomeSucceeded))
	if err != nil {
		t.Fatal(err)
	}
	runs := map[int]int{}
	err = api.ReadResults(bytes.NewReader(body), func(l api.ResultLine) error {
		want := 1
		if strings.HasSuffix(l.Key, "3") {
			want = 2
		}
		if l.Run != want || l.Attempts != 1 {
			t.Errorf("%s: run %d, %d attempts; want run %d, 1 attempt", l.Key, l.Run, l.Attempts, want)
		}
		runs[l.Run]++
		return nil
	})
	if err != nil || runs[1] != 18 || runs[2] != 2 {
		t.Fatalf("run 2's results: lines by run %v (%v), want 18 of run 1 and 2 of run 2", runs, err)
	}
}

// The sweep forgets a batch whose retention ended: its rows and objects go.
func TestMemSweepForgetsExpiredBatches(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	for _, id := range []string{"old", "young"} {
		if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(5)}}); err != nil {
			t.Fatal(err)
		}
		r.drain(t, ctx, 1)
		if _, err := r.fin.Finalize(ctx, id, 1); err != nil {
			t.Fatal(err)
		}
		r.clock.T = r.clock.T.Add(30 * time.Minute)
	}
	// old's retention (1 h) ends, young's not.
	r.clock.T = r.clock.T.Add(time.Minute)
	res, err := r.sweep.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 1 || res.Deleted != 1 || res.Failed != 0 {
		t.Fatalf("sweep %+v, want 1 expired and deleted", res)
	}
	if _, err := r.store.GetBatch(ctx, "old"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("old after the sweep: %v, want ErrNotFound", err)
	}
	if keys := r.blobs.Objects("batches/old/"); len(keys) != 0 {
		t.Fatalf("objects of old left: %v", keys)
	}
	if _, err := r.store.GetBatch(ctx, "young"); err != nil {
		t.Fatalf("young: %v", err)
	}
	if keys := r.blobs.Objects("batches/young/"); len(keys) == 0 {
		t.Fatal("young's objects went too")
	}
}

// nopHandoff accepts every hand-off; the test runs Complete itself.
type nopHandoff struct{}

func (nopHandoff) StartSubmit(context.Context, string) error { return nil }

// A refused batch does not hold its id: a source with a duplicate key is
// refused by the background read (naming the line and the key), and the
// corrected source submitted under the same id is accepted and runs, as
// when a bad source was refused within the submit call. Submitting the
// same bad source again is refused again, by the same rule.
func TestMemRefusedBatchFreesItsID(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	r.sub.Handoff = nopHandoff{}
	put := func(body string) api.SourceSpec {
		if err := r.blobs.Put(ctx, "in/orders.jsonl", "", []byte(body)); err != nil {
			t.Fatal(err)
		}
		return api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/in/orders.jsonl"}
	}
	req := api.SubmitRequest{BatchID: "fix-me", Pipeline: "counted", KeyField: "k", Source: put("{\"k\":\"a\"}\n{\"k\":\"a\"}\n")}
	for range 2 {
		if _, err := r.sub.Accept(ctx, req); err != nil {
			t.Fatal(err)
		}
		b, err := r.sub.Complete(ctx, "fix-me")
		if err != nil || b.Status != api.StatusRefused || b.Refusal == nil || b.Refusal.Line != 2 || b.Refusal.Key != "a" {
			t.Fatalf("bad source: %s %+v %v, want refused naming line 2, key a", b.Status, b.Refusal, err)
		}
	}
	req.Source = put("{\"k\":\"a\"}\n{\"k\":\"b\"}\n")
	res, err := r.sub.Accept(ctx, req)
	if err != nil || !res.Created || res.Batch.Status != api.StatusSubmitting {
		t.Fatalf("corrected source under the refused id: %+v %v, want accepted afresh", res, err)
	}
	b, err := r.sub.Complete(ctx, "fix-me")
	if err != nil || b.Status != api.StatusRunning || b.ItemCount != 2 || b.Refusal != nil {
		t.Fatalf("corrected source: %s %d items %+v %v, want running with 2 items", b.Status, b.ItemCount, b.Refusal, err)
	}
}

// RecordRefused makes a refusal that happened before any batch existed (a
// bad upload) a refused batch row, idempotently; an id held by a live
// batch is left alone.
func TestMemRecordRefused(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	refusal := api.SubmitRefusal{Code: api.RefusalInvalid, Message: "line 3: not JSON", Line: 3}
	req := api.SubmitRequest{BatchID: "up-1", Pipeline: "counted", Source: api.SourceSpec{Object: "s3://b/incoming/x.jsonl"}}
	for range 2 {
		b, err := r.sub.RecordRefused(ctx, req, refusal)
		if err != nil || b.Status != api.StatusRefused || *b.Refusal != refusal {
			t.Fatalf("RecordRefused: %+v %v", b, err)
		}
	}
	listed, _, err := r.store.ListBatches(ctx, ledger.BatchQuery{Statuses: []api.Status{api.StatusRefused}, Limit: 10})
	if err != nil || len(listed) != 1 || listed[0].ID != "up-1" || listed[0].Refusal == nil {
		t.Fatalf("listed refused: %+v %v, want up-1", listed, err)
	}
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "live-1", Pipeline: "counted", Source: api.SourceSpec{Items: items(2)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.RecordRefused(ctx, api.SubmitRequest{BatchID: "live-1", Pipeline: "counted"}, refusal); !errors.Is(err, api.ErrBatchExists) {
		t.Fatalf("RecordRefused over a live batch: %v, want ErrBatchExists", err)
	}
	if b, _ := r.store.GetBatch(ctx, "live-1"); b.Status != api.StatusRunning {
		t.Fatalf("live batch %s after a refusal under its id, want running", b.Status)
	}
}

// rotatingSecrets is a FreshSecrets whose cached value is stale: Resolve
// answers the value read before the rotation, ResolveFresh the current
// one (and caches it), as secret.Store does once its TTL has not ended.
type rotatingSecrets struct {
	mu             sync.Mutex
	cached, latest string
	fresh          int
}

func (s *rotatingSecrets) Resolve(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cached, nil
}

func (s *rotatingSecrets) ResolveFresh(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fresh++
	s.cached = s.latest
	return s.latest, nil
}

// A secret rotated while a batch runs fails no item, at K = 1 and 10, and
// the receiver gets one call per attempt: the receiver rejects the cached
// old value (401, a *pipeline.CredentialRejectedError), the worker reads
// the reference again bypassing the cache, and the attempt ends there; its
// retry, which uses no attempt, sends the new value. Every call carries
// its own attempt number, every item succeeds with 1 attempt in its run,
// and run_spent counts every call (a credential that is simply wrong:
// TestMemWrongSecretWithholdsItems).
func TestMemSecretRotatedMidBatchFailsNoItem(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { secretRotatedMidBatch(t, k) })
	}
}

func secretRotatedMidBatch(t *testing.T, k int) {
	ctx := context.Background()
	const arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hook-token"
	var accept atomic.Value
	accept.Store("Bearer v2")
	var mu sync.Mutex
	attempts := map[string][]int{} // the attempt numbers each key's calls carried
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		mu.Lock()
		attempts[req.BatchID+"/"+req.Key] = append(attempts[req.BatchID+"/"+req.Key], req.Attempt)
		mu.Unlock()
		if req.Headers["Authorization"] != accept.Load().(string) {
			return pipeline.Result{Cost: pipeline.Cost{"calls": 1}}, pipeline.CredentialRejected(fmt.Errorf("HTTP 401: token %q rejected", req.Headers["Authorization"]))
		}
		return pipeline.Result{Cost: pipeline.Cost{"calls": 1}}, nil
	})
	r.worker.Clock = &tickClock{t: r.clock.T} // a released lease ends as time goes on
	secrets := &rotatingSecrets{cached: "Bearer v1", latest: "Bearer v2"}
	r.worker.Secrets = secrets
	r.sub.SecretPrefixes = []string{arn}
	submit := func(id string) api.Census {
		t.Helper()
		if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(5)}, ItemsPerMessage: k,
			Headers: map[string]string{"Authorization": secretref.Prefix + arn}}); err != nil {
			t.Fatal(err)
		}
		r.drain(t, ctx, 1)
		res, err := r.fin.Finalize(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		return res.Report.Census
	}
	c := submit("rotated")
	calls := 0
	for i := range 5 {
		key := api.PositionalKey(int64(i))
		it := memItem(t, r, "rotated", key)
		mu.Lock()
		seen := attempts["rotated/"+key]
		mu.Unlock()
		calls += len(seen)
		if it.Outcome != api.OutcomeSucceeded || it.RunAttempts != 1 || len(seen) > 2 || len(seen) == 2 && seen[0] == seen[1] {
			t.Errorf("%s: %s after %d attempts of the run, calls with attempts %v; want succeeded, 1 attempt, one call per attempt", key, it.Outcome, it.RunAttempts, seen)
		}
	}
	if secrets.fresh == 0 || secrets.fresh > 5 || c.RunSpent.Text("calls") != fmt.Sprint(calls) {
		t.Fatalf("fresh reads %d, run_spent %v, %d calls: want at most one fresh read per item, every call spent", secrets.fresh, c.RunSpent, calls)
	}
}

// A credential that is simply wrong (its secret read again is the same)
// withholds the batch's items instead of failing them, at K = 1 and 10:
// the first refusal puts a halt on the credential, the items that had not
// called yet are withheld without a call, and the run stays running with
// every item withheld, counted so in the live census and listed with its
// next move. Once the secret is fixed (the process's cache still holding
// the refused value), the lift of the halt wakes every item, and each is
// called exactly once more (duplicate deliveries included), with the new
// value (the first woken item reads the secret again, bypassing the
// cache), and succeeds; a cancel instead settles every withheld item
// cancelled.
func TestMemWrongSecretWithholdsItems(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { wrongSecretWithholds(t, k) })
	}
}

func wrongSecretWithholds(t *testing.T, k int) {
	ctx := context.Background()
	const arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hook-token"
	const n = 20
	subject := ledger.SecretSubjectPrefix + arn
	var refused atomic.Int64
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Headers["Authorization"] != "Bearer right" {
			refused.Add(1)
			return pipeline.Result{}, pipeline.CredentialRejected(fmt.Errorf("HTTP 401: token %q rejected", req.Headers["Authorization"]))
		}
		return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
	})
	r.wakeHeld()
	secrets := &rotatingSecrets{cached: "Bearer wrong", latest: "Bearer wrong"}
	r.worker.Secrets = secrets
	r.sub.SecretPrefixes = []string{arn}
	submit := func(id string) {
		t.Helper()
		if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k,
			Headers: map[string]string{"Authorization": secretref.Prefix + arn}}); err != nil {
			t.Fatal(err)
		}
		r.drain(t, ctx, 1)
	}
	calls := func() map[string]int64 {
		m := map[string]int64{}
		for i := range n {
			m[api.PositionalKey(int64(i))] = r.callsOf(api.PositionalKey(int64(i)))
		}
		return m
	}

	submit("wrong")
	before := calls()
	var called int64
	for key, c := range before {
		it := memItem(t, r, "wrong", key)
		if it.Outcome != api.OutcomeWithheld || it.Hold == nil || it.Hold.Subject != subject || it.Reason != api.ReasonCredential || c > 1 {
			t.Errorf("%s: %s (reason %s, hold %+v) after %d calls; want withheld under %s after at most 1", key, it.Outcome, it.Reason, it.Hold, c, subject)
		}
		// Withheld once: no unit woke it as if the halt had been lifted
		// (its halt not yet on the batch when a unit read it).
		if it.Attempt != 1 || it.Hold != nil && it.Hold.Woken != "" {
			t.Errorf("%s: attempt %d, hold %+v; want withheld at its first attempt, not woken", key, it.Attempt, it.Hold)
		}
		called += c
	}
	if called == 0 {
		t.Error("no item called the receiver: the halt came from nowhere")
	}
	// One process (the rig's worker): its first call under the credential
	// goes alone, and the units waiting for it are withheld without a
	// call once it is refused (credential.Gates).
	if got := refused.Load(); got != 1 {
		t.Errorf("%d calls refused before the halt, want 1 (the process's first call under the credential)", got)
	}
	b, err := r.ctl.Get(ctx, "wrong")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Halts[subject]; !ok || b.Status != api.StatusRunning {
		t.Fatalf("batch %s, halts %v; want running with a halt on %s", b.Status, b.Halts, subject)
	}
	if _, err := r.fin.Finalize(ctx, "wrong", 1); err == nil {
		t.Fatal("finalize finished a run whose items are withheld")
	}
	p, err := r.store.Progress(ctx, "wrong", 1, max(1, b.CounterShards))
	if err != nil {
		t.Fatal(err)
	}
	if lv := live.Of(b, p, r.clock.T, 0); lv.Withheld != n || lv.InFlight != 0 || !lv.NeedsAttention() {
		t.Errorf("live view %+v; want %d withheld, none in flight, needing attention", lv, n)
	}
	page, err := r.ctl.Items(ctx, "wrong", api.NeedsAttention, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != n || !strings.Contains(page.Items[0].Next, "bulkrun lift") {
		t.Fatalf("needs attention: %d items, first %+v; want %d, each with its next move", len(page.Items), page.Items[0], n)
	}

	// The secret is fixed; the process's cache still holds the refused
	// value (its life is minutes). The lift wakes every item withheld
	// under it, and the first woken item a process runs reads the secret
	// again bypassing the cache: no woken item sends the refused value.
	secrets.mu.Lock()
	secrets.latest = "Bearer right"
	fresh := secrets.fresh
	secrets.mu.Unlock()
	refusedBefore := refused.Load()
	r.clock.T = r.clock.T.Add(time.Minute) // the fix comes later
	res, err := r.ctl.Lift(ctx, "wrong", subject)
	if err != nil || !res.Lifted || res.Woken != n || res.AlreadyWoken != 0 || !res.Done {
		t.Fatalf("lift: %+v %v; want lifted, %d woken, done", res, err, n)
	}
	if again, err := r.ctl.Lift(ctx, "wrong", subject); err != nil || again.Lifted || again.Woken != n || again.AlreadyWoken != n || !again.Done {
		t.Fatalf("lift again: %+v %v; want no halt lifted and the %d woken items found woken (already_woken)", again, err, n)
	}
	r.drain(t, ctx, 2) // duplicate deliveries: each woken item still runs once
	after := calls()
	for key := range after {
		if after[key] != before[key]+1 {
			t.Errorf("%s: %d calls after the lift, %d before; want exactly one more", key, after[key], before[key])
		}
	}
	secrets.mu.Lock()
	freshAfter := secrets.fresh - fresh
	secrets.mu.Unlock()
	if got := refused.Load() - refusedBefore; got != 0 || freshAfter != 1 {
		t.Errorf("after the lift: %d calls refused, %d fresh reads of the secret; want none refused, one read (one process)", got, freshAfter)
	}
	fin, err := r.fin.Finalize(ctx, "wrong", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := fin.Report.Census; c.Succeeded != n || c.Failed != 0 || c.Withheld != 0 || fin.Report.Status != api.StatusCompleted {
		t.Fatalf("after the lift: %s %+v; want completed, %d succeeded", fin.Report.Status, c, n)
	}

	// Withheld again, then cancelled: every item settles cancelled.
	secrets.mu.Lock()
	secrets.cached, secrets.latest = "Bearer wrong", "Bearer wrong"
	secrets.mu.Unlock()
	submit("cancelled")
	if _, err := r.ctl.Cancel(ctx, "cancelled"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	fin, err = r.fin.Finalize(ctx, "cancelled", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := fin.Report.Census; c.Cancelled != n || c.Withheld != 0 || fin.Report.Status != api.StatusCancelled {
		t.Fatalf("cancelled: %s %+v; want cancelled, %d cancelled", fin.Report.Status, c, n)
	}
	if hs := fin.Report.Halts; len(hs) != 1 || hs[0].Subject != subject || hs[0].Since.IsZero() || hs[0].Reason == "" {
		t.Errorf("cancelled run's report halts %+v, want the halt kept on %s with its reason", hs, subject)
	}
	if !fin.Report.NeedsAttention {
		t.Errorf("cancelled run keeping a halt: report needs_attention false; want true (lift before a resume)")
	}

	// The cancelled batch keeps its halt; its lift removes it and wakes
	// nothing (no item waits in a finished run), so that a resume, once
	// the secret is fixed, runs every item instead of withholding it.
	if b, err = r.ctl.Get(ctx, "cancelled"); err != nil || b.Status != api.StatusCancelled || b.Halts[subject].Since.IsZero() {
		t.Fatalf("cancelled batch %s, halts %v, %v; want cancelled, the halt on %s kept", b.Status, b.Halts, err, subject)
	}
	r.clock.T = r.clock.T.Add(time.Minute) // the fix comes later
	res, err = r.ctl.Lift(ctx, "cancelled", subject)
	if err != nil || !res.Lifted || res.Woken != 0 || !res.Done {
		t.Fatalf("lift of the cancelled batch: %+v %v; want lifted, nothing woken, done", res, err)
	}
	if b, err = r.ctl.Get(ctx, "cancelled"); err != nil || b.NeedsAttention {
		t.Errorf("cancelled batch after its last halt's lift: needs_attention %v, %v; want false (its census needs no look)", b.NeedsAttention, err)
	}
	if _, err := r.ctl.Lift(ctx, "cancelled", subject); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("lift of the cancelled batch again: %v; want not found (no halt stands)", err)
	}
	// The process still caches the refused value, read before the lift:
	// the batch's lift time has its first unit read the secret past the
	// cache, so no call of the resumed run sends the refused value.
	secrets.mu.Lock()
	secrets.cached, secrets.latest = "Bearer wrong", "Bearer right"
	secrets.mu.Unlock()
	r.worker.Clock = &tickClock{t: r.clock.T}
	if b, err = r.sub.Resume(ctx, "cancelled"); err != nil || b.Run != 2 {
		t.Fatalf("resume: %+v %v", b, err)
	}
	refusedBefore, before = refused.Load(), calls()
	r.drain(t, ctx, 1)
	if got := refused.Load() - refusedBefore; got != 0 {
		t.Errorf("the run resumed after the lift: %d calls refused; want none (the value cached before the lift not sent)", got)
	}
	for key, c := range calls() {
		if c != before[key]+1 {
			t.Errorf("%s: %d calls after the resume, %d before; want exactly one more", key, c, before[key])
		}
	}
	if fin, err = r.fin.Finalize(ctx, "cancelled", 2); err != nil {
		t.Fatal(err)
	}
	if c := fin.Report.Census; c.Succeeded != n || c.Withheld != 0 || fin.Report.Status != api.StatusCompleted {
		t.Fatalf("resumed after the lift: %s %+v; want completed, %d succeeded", fin.Report.Status, c, n)
	}
	if fin.Report.Halts != nil {
		t.Errorf("report after the lift and resume: halts %+v, want none", fin.Report.Halts)
	}
}

// The stop line and the census agree: items already in flight when the
// threshold stop is marked finish after it, and the report says how many
// (and how many of them failed), so "1 failure" at the stop and 4 failed
// in the census are explained: 3 items in flight failed after the stop.
func TestMemStopCountsItemsInFlight(t *testing.T) {
	ctx := context.Background()
	var r *rig
	var started atomic.Int32 // items 1 to 3 whose pipeline runs: reserved
	r = newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		deadline := time.Now().Add(5 * time.Second)
		if req.Key == api.PositionalKey(0) {
			// The first failure, once the three others are in flight (on
			// a loaded machine the other invocation may start late).
			for started.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			return pipeline.Result{}, pipeline.Permanent(errors.New("no"))
		}
		// In flight while the first failure stops the run.
		started.Add(1)
		for time.Now().Before(deadline) {
			if b, _ := r.store.GetBatch(ctx, "fl"); b.Stop != "" {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return pipeline.Result{}, pipeline.Permanent(errors.New("no"))
	})
	zero := int64(0)
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "fl", Pipeline: "counted", Source: api.SourceSpec{Items: items(4)},
		Threshold: api.Threshold{FailureCount: &zero}}); err != nil {
		t.Fatal(err)
	}
	r.worker.Handle(ctx, r.queue.take()) // the fan-out: four item messages
	ds := r.queue.take()
	if len(ds) != 4 {
		t.Fatalf("%d item messages, want 4", len(ds))
	}
	var wg sync.WaitGroup
	for _, part := range [][]worker.Delivery{ds[:1], ds[1:]} { // two invocations at once
		wg.Add(1)
		go func() { defer wg.Done(); r.worker.Handle(ctx, part) }()
	}
	wg.Wait()
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, "fl", 1)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Report.Stop
	want := api.StopSummary{Status: api.StatusThresholdExceeded, Detail: res.Report.StopDetail,
		RanAtStop: 1, FailuresAtStop: 1, FinishedAfterStop: 3, FailuresAfterStop: 3}
	if s == nil || *s != want || res.Report.Census.Failed != 4 {
		t.Fatalf("stop %+v, census %+v: want %+v", s, res.Report.Census, want)
	}
	if txt := s.Text(); !strings.Contains(txt, "3 items already in flight finished after the stop, 3 of them failed") {
		t.Errorf("stop line %q", txt)
	}
}

// eventSizes records the completion event each finished run would put on
// the bus, sized by EventBridge's rule (event.EntryBytes).
type eventSizes struct {
	mu      sync.Mutex
	details []string
	bytes   []int
}

func (e *eventSizes) Publish(_ context.Context, r api.Report) error {
	d, err := event.CompletionDetail(r, "bucket")
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.details = append(e.details, d)
	e.bytes = append(e.bytes, event.EntryBytes(api.EventSource, event.DetailType(r.Status), d, nil))
	return nil
}

// Every aggregate within its service's limit, whatever the items report,
// at K = 1 and 10: 150 items naming 100 costs each all succeed, each
// item's record folded to pipeline.MaxCostNames names (8 kept, the other
// 92 summed under pipeline.FoldedCost and counted in FoldedCostNames),
// and the batch finishes with its event; 150 items naming 10 costs of
// their own (1,500 distinct names in the batch) finish with every name in
// the report, at most api.MaxCensusCostNames per rollup on the batch row
// and in the event, and the event within EventBridge's 256 KB.
func TestMemAggregatesStayWithinLimits(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		names        int  // cost names per item
		distinct     bool // each item its own names
		wantInReport int
	}{
		{"100 names per item", 100, false, pipeline.MaxCostNames},
		{"10 names per item, 1500 in the batch", 10, true, 1500},
	} {
		for _, k := range []int{1, 10} {
			t.Run(fmt.Sprintf("%s K%d", tc.name, k), func(t *testing.T) {
				r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
					c := pipeline.Cost{}
					for i := range tc.names {
						name := fmt.Sprintf("cost-name-%03d-%s", i, strings.Repeat("x", 20))
						if tc.distinct {
							name = fmt.Sprintf("%s-%03d-%s", req.Key, i, strings.Repeat("y", 10))
						}
						c[name] = 0.5
					}
					return pipeline.Result{Cost: c}, nil
				})
				ev := &eventSizes{}
				r.fin.Events = ev
				if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "agg", Pipeline: "counted", ItemsPerMessage: k, Source: api.SourceSpec{Items: items(150)}}); err != nil {
					t.Fatal(err)
				}
				r.drain(t, ctx, 1)
				res, err := r.fin.Finalize(ctx, "agg", 1)
				if err != nil {
					t.Fatalf("finalize: %v", err)
				}
				c := res.Report.Census
				if c.Total != 150 || c.Succeeded != 150 || len(c.Cost) != tc.wantInReport {
					t.Fatalf("report census: %d total, %d succeeded, %d cost names; want 150, 150, %d", c.Total, c.Succeeded, len(c.Cost), tc.wantInReport)
				}
				if tc.names > pipeline.MaxCostNames {
					it := memItem(t, r, "agg", api.PositionalKey(7))
					if it.Outcome != api.OutcomeSucceeded || len(it.Cost) != pipeline.MaxCostNames || it.Cost[pipeline.FoldedCostNames] != 92 ||
						it.Cost[pipeline.FoldedCost] != 46 || len(it.Spent) != pipeline.MaxCostNames {
						t.Fatalf("item 7: %s, cost %v, spent %v; want succeeded with 8 names and 92 folded (46 under %s)", it.Outcome, it.Cost, it.Spent, pipeline.FoldedCost)
					}
					if c.Cost.Text(pipeline.FoldedCostNames) != "13800" || c.RunSpent.Text(pipeline.FoldedCost) != "6900" {
						t.Fatalf("census cost %v, run_spent %v; want 150 × 92 names folded", c.Cost, c.RunSpent)
					}
				}
				b, _ := r.store.GetBatch(ctx, "agg")
				if !b.Status.Finished() || b.FinalCensus == nil || len(b.FinalCensus.Cost) > api.MaxCensusCostNames || len(b.FinalCensus.RunSpent) > api.MaxCensusCostNames {
					t.Fatalf("batch row: %s, census on the row %v", b.Status, b.FinalCensus != nil)
				}
				if want := max(0, 2*(tc.wantInReport-api.MaxCensusCostNames)); b.FinalCensus.CostNamesOmitted != want {
					t.Errorf("row: cost_names_omitted %d, want %d", b.FinalCensus.CostNamesOmitted, want)
				}
				if len(ev.bytes) != 1 || ev.bytes[0] > event.MaxEntryBytes || !strings.Contains(ev.details[0], `"report":"s3://bucket/`) {
					t.Fatalf("events %v bytes, want one within %d with the report's URI", ev.bytes, event.MaxEntryBytes)
				}
				t.Logf("event entry %d bytes; report census %d cost names, row %d (+%d omitted)", ev.bytes[0], len(c.Cost), len(b.FinalCensus.Cost), b.FinalCensus.CostNamesOmitted)
			})
		}
	}
}

// What a run's attempts of an item spent stays within the cost record's
// limits too, at K = 1 and 10: an item's first attempt names 10 costs and
// fails transiently, its second names 10 others and succeeds; its spent
// (20 names) is folded to pipeline.MaxCostNames, its cost is the second
// attempt's, and the census's run_spent still counts every amount.
func TestMemSpentOfAttemptsStaysWithinLimits(t *testing.T) {
	ctx := context.Background()
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				c := pipeline.Cost{}
				for i := range pipeline.MaxCostNames {
					c[fmt.Sprintf("attempt-%d-cost-%02d", req.Attempt, i)] = 1
				}
				if req.Attempt == 1 {
					return pipeline.Result{Cost: c}, errors.New("transient")
				}
				return pipeline.Result{Cost: c}, nil
			})
			r.worker.Clock = &tickClock{t: r.clock.T} // a released lease ends as time goes on
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "spent", Pipeline: "counted", ItemsPerMessage: k, Source: api.SourceSpec{Items: items(20)}}); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 1)
			res, err := r.fin.Finalize(ctx, "spent", 1)
			if err != nil {
				t.Fatal(err)
			}
			it := memItem(t, r, "spent", api.PositionalKey(3))
			if it.Outcome != api.OutcomeSucceeded || len(it.Cost) != pipeline.MaxCostNames || len(it.Spent) != pipeline.MaxCostNames ||
				it.Spent[pipeline.FoldedCostNames] != 12 || it.Spent[pipeline.FoldedCost] != 12 {
				t.Fatalf("item 3: %s, cost %v, spent %v; want succeeded, spent folded to %d names (12 folded)", it.Outcome, it.Cost, it.Spent, pipeline.MaxCostNames)
			}
			c := res.Report.Census
			var total float64
			for _, name := range c.RunSpent.Names() {
				if name != pipeline.FoldedCostNames {
					total += c.RunSpent[name].InexactFloat64()
				}
			}
			if c.Succeeded != 20 || total != 400 {
				t.Fatalf("census %d succeeded, run_spent %v (amounts %v); want 20, every amount of 40 attempts (400)", c.Succeeded, c.RunSpent, total)
			}
		})
	}
}

// memItem is item key of batch id as its unit (item row or pack row)
// holds it.
func memItem(t *testing.T, r *rig, id, key string) ledger.Item {
	t.Helper()
	ctx := context.Background()
	b, err := r.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var found ledger.Item
	if err := shardmerge.Merge(ctx, r.store, id, b.ListShards, "", shardmerge.Options{Packed: b.Pack() > 1}, func(it ledger.Item) error {
		if it.Key == key {
			found = it
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if found.Key == "" {
		t.Fatalf("no item %q in %s", key, id)
	}
	return found
}

// The running batch's cost comes from its counters (docs/console.md: the
// console and `bulkrun status` show it while the run goes): every message
// delivered three times, the counters' cost and spent equal the census's
// that finalize counts from the rows — each item counted once.
func TestMemCountersCarryCost(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	b, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "cc", Pipeline: "counted", Source: api.SourceSpec{Items: items(20)}})
	if err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 3)
	p, err := r.store.Progress(ctx, "cc", 1, max(1, b.Batch.CounterShards))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.fin.Finalize(ctx, "cc", 1)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Report.Census
	if p.Cost.String() != c.Cost.String() || p.Spent.String() != c.RunSpent.String() || c.Cost.Text("calls") != "18" {
		t.Fatalf("counters: cost %v spent %v; census: cost %v spent %v (want calls=18)", p.Cost, p.Spent, c.Cost, c.RunSpent)
	}
}

func testLogOut() io.Writer {
	if os.Getenv("DBGLOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// secretRig is a rig whose pipeline refuses, as a receiver's 401 does,
// every call that does not carry "Bearer right" (counted in refused) and
// answers the others (counted in answered); its worker reads the batch's
// Authorization from secret hookSecretARN, which holds "Bearer wrong",
// and lifts wake its held items.
type secretRig struct {
	*rig
	secrets           *rotatingSecrets
	refused, answered *atomic.Int64
}

const hookSecretARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hook-token"

func newSecretRig(t *testing.T) secretRig {
	var refused, answered atomic.Int64
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Headers["Authorization"] != "Bearer right" {
			refused.Add(1)
			return pipeline.Result{}, pipeline.CredentialRejected(fmt.Errorf("HTTP 401: token %q rejected", req.Headers["Authorization"]))
		}
		answered.Add(1)
		return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
	})
	r.wakeHeld()
	secrets := &rotatingSecrets{cached: "Bearer wrong", latest: "Bearer wrong"}
	r.worker.Secrets = secrets
	r.sub.SecretPrefixes = []string{hookSecretARN}
	return secretRig{rig: r, secrets: secrets, refused: &refused, answered: &answered}
}

// submit submits batch id of n items, k a message, acting under the
// secret, and drains its queue once.
func (s secretRig) submit(t *testing.T, ctx context.Context, id string, n, k int) {
	t.Helper()
	if _, err := s.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k,
		Headers: map[string]string{"Authorization": secretref.Prefix + hookSecretARN}}); err != nil {
		t.Fatal(err)
	}
	s.drain(t, ctx, 1)
}

// liftingStore is the worker's store with a caller who fixes the secret
// and lifts the halt right after the worker puts it, before the refused
// item's write: the window between the halt and the item's record.
type liftingStore struct {
	worker.Store
	once sync.Once
	lift func(subject string)
}

func (s *liftingStore) Halt(ctx context.Context, m ledger.HaltMark) error {
	err := s.Store.Halt(ctx, m)
	if err == nil {
		s.once.Do(func() { s.lift(m.Subject) })
	}
	return err
}

// TestMemLiftBeforeTheRefusedItemIsRecorded: a caller fixes the secret
// and lifts the halt after the worker put it but before the refused item
// and the items withheld behind it were written, so the lift's wake finds
// none of them; the worker, finding the halt gone when it reads the batch
// after its write, wakes them itself. Every item succeeds with one call
// on the fixed secret; none stays withheld under a halt that is gone.
func TestMemLiftBeforeTheRefusedItemIsRecorded(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			const n = 20
			r := newSecretRig(t)
			var lifted atomic.Bool
			r.worker.Store = &liftingStore{Store: r.worker.Store, lift: func(subject string) {
				r.secrets.mu.Lock()
				r.secrets.latest = "Bearer right"
				r.secrets.mu.Unlock()
				res, err := r.ctl.Lift(ctx, "early", subject)
				if err != nil || !res.Lifted {
					t.Errorf("lift in the window: %+v %v", res, err)
				}
				lifted.Store(true)
			}}
			r.submit(t, ctx, "early", n, k)
			if !lifted.Load() {
				t.Fatal("no halt was put: the window was never reached")
			}
			fin, err := r.fin.Finalize(ctx, "early", 1)
			if err != nil {
				t.Fatalf("finalize: %v (an item still withheld under a lifted halt?)", err)
			}
			if c := fin.Report.Census; c.Succeeded != n || c.Withheld != 0 || r.answered.Load() != n {
				t.Fatalf("census %+v, %d answered; want %d succeeded, each answered once", c, r.answered.Load(), n)
			}
		})
	}
}

// failingHaltStore is the worker's store whose first fails Halt writes
// fail as an unavailable table would.
type failingHaltStore struct {
	worker.Store
	fails atomic.Int64
}

func (s *failingHaltStore) Halt(ctx context.Context, m ledger.HaltMark) error {
	if s.fails.Add(-1) >= 0 {
		return fmt.Errorf("halt: %w", ledger.ErrUnavailable)
	}
	return s.Store.Halt(ctx, m)
}

// TestMemHaltWriteFailsOnce: the halt on a refused credential could not
// be written at the refusal. The units waiting at the process's gate are
// then not withheld under a halt that is not there (one would wake them
// "by lift" with no lift): the next one calls itself, is refused, and
// its halt is written (unless the first's unit write put it first).
// Every item ends withheld at its first attempt, none woken, the halt on
// the batch.
func TestMemHaltWriteFailsOnce(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			const n = 20
			subject := ledger.SecretSubjectPrefix + hookSecretARN
			r := newSecretRig(t)
			fs := &failingHaltStore{Store: r.worker.Store}
			fs.fails.Store(1)
			r.worker.Store = fs
			r.submit(t, ctx, "halt", n, k)
			for i := range n {
				key := api.PositionalKey(int64(i))
				it := memItem(t, r.rig, "halt", key)
				if it.Outcome != api.OutcomeWithheld || it.Attempt != 1 || it.Hold == nil || it.Hold.Woken != "" {
					t.Errorf("%s: %s at attempt %d, hold %+v; want withheld at its first attempt, not woken", key, it.Outcome, it.Attempt, it.Hold)
				}
			}
			b, err := r.ctl.Get(ctx, "halt")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := b.Halts[subject]; !ok {
				t.Errorf("halts %v, want one on %s", b.Halts, subject)
			}
			// The first, whose halt failed; and the next unit's, when it
			// came to call before the first's unit write put the halt.
			if got := r.refused.Load(); got < 1 || got > 2 {
				t.Errorf("%d calls refused, want 1 or 2", got)
			}
		})
	}
}

// TestMemFirstCallReleasedByUnitsThatNeverCall: items of a pipeline the
// item function does not have end failed without a call; each unit that
// took its process's first call of the downstream releases it, so the
// others never wait out pacer.FirstWait for an answer that cannot come.
func TestMemFirstCallReleasedByUnitsThatNeverCall(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			const n = 30
			r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: []byte(`{}`)}, nil
			})
			r.sub.Pipelines = []string{"counted", "ghost"} // "ghost" is not in the worker's registry
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "ghost", Pipeline: "ghost", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r.drain(t, ctx, 1)
			took := time.Since(start)
			fin, err := r.fin.Finalize(ctx, "ghost", 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := fin.Report.Census; c.Failed != n {
				t.Fatalf("census %+v, want %d failed", c, n)
			}
			// Waiting out the claim of a unit that never called took
			// FirstWait a wave (6 s here); released, milliseconds.
			if took >= pacer.FirstWait {
				t.Errorf("%d items that never call took %v to drain: units waited for a first call that was never made", n, took)
			}
		})
	}
}
