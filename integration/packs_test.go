//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// The guarantees of docs/design.md with items packed into messages and
// ledger rows (items_per_message), on the emulator's DynamoDB, S3 and SQS:
// each test runs for K = 1 (item rows) and K = 10 (pack rows).

var packedKs = []int{1, 10}

// handleUntilDone hands ds to the worker and the failed ones again (as
// the queue would redeliver them) until none fails; a failure under a
// live lease comes back after it, so it gives up after twice the lease.
func (h *harness) handleUntilDone(t *testing.T, ctx context.Context, ds []worker.Delivery) {
	t.Helper()
	deadline := time.Now().Add(2 * h.worker.Lease)
	for len(ds) > 0 {
		failed := h.worker.Handle(ctx, ds)
		var again []worker.Delivery
		for _, d := range ds {
			for _, f := range failed {
				if d.MessageID == f {
					d.ReceiveCount++
					again = append(again, d)
					break
				}
			}
		}
		if len(again) > 0 && time.Now().After(deadline) {
			t.Fatalf("%d deliveries still failing", len(again))
		}
		if len(again) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		ds = again
	}
}

// itemsIn counts the items of item and pack messages.
func itemsIn(ds []worker.Delivery) map[string]int {
	seen := map[string]int{}
	for _, d := range ds {
		var m ledger.PackMessage
		if json.Unmarshal(d.Body, &m) == nil && m.Kind == ledger.KindPack {
			for _, it := range m.Items {
				seen[it.Key]++
			}
			continue
		}
		var im ledger.Message
		_ = json.Unmarshal(d.Body, &im)
		seen[im.Key]++
	}
	return seen
}

// TestPackedDuplicateDeliveriesAndFinalizeOnce guards "duplicate delivery
// runs an item once; finalize writes one report with the exact census",
// K = 1 and K = 10: every item or pack message delivered three times at
// once, one pipeline call per item, four concurrent finalizes, one wrote.
func TestPackedDuplicateDeliveriesAndFinalizeOnce(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if strings.HasSuffix(req.Key, "3") {
					return pipeline.Result{}, pipeline.Permanent(errors.New("bad item"))
				}
				time.Sleep(10 * time.Millisecond)
				return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"calls": 1}}, nil
			})
			h.submitter.ChunkItems = 20
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(40)}, ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			h.handleUntilDone(t, ctx, h.receive(t, 2))
			msgs := h.receive(t, 40/k)
			if seen := itemsIn(msgs); len(msgs) != 40/k || len(seen) != 40 {
				t.Fatalf("%d messages for %d keys, want %d for 40", len(msgs), len(seen), 40/k)
			}
			h.handleUntilDone(t, ctx, append(append(append([]worker.Delivery{}, msgs...), msgs...), msgs...))
			for i := range 40 {
				if c := h.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
			if h.triggered.Load() != 1 {
				t.Fatalf("finalize triggered %d times, want 1", h.triggered.Load())
			}
			h.finalizeFour(t, ctx, id, func(c api.Census) {
				if c.Succeeded != 36 || c.Failed != 4 || c.Cost.Text("calls") != "36" {
					t.Errorf("census %+v", c)
				}
			})
			p, err := h.control().Items(ctx, id, api.OutcomeFailed, "", 100)
			if err != nil || len(p.Items) != 4 || p.Items[0].Key != api.PositionalKey(3) || p.Items[0].Error != "bad item" {
				t.Fatalf("failed listing %+v %v", p, err)
			}
		})
	}
}

// TestPackedCrashTakeoverIsFenced guards "a crash after the reservation:
// the lease expires, a redelivery takes over under the next attempt, the
// crashed holder's late write is fenced off", K = 1 and K = 10.
func TestPackedCrashTakeoverIsFenced(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"attempt":%d}`, req.Attempt))}, nil
			})
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(3)}, ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			b, _ := h.store.GetBatch(ctx, id)
			key := api.PositionalKey(1)
			now := time.Now()
			var late func() error
			if k == 1 {
				first, err := h.store.Reserve(ctx, ledger.Reservation{BatchID: id, Key: key, RunID: ledger.RunID(id, key), Run: 1, ListShards: b.ListShards, Now: now, Lease: 300 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				late = func() error {
					return h.store.Record(ctx, ledger.Record{BatchID: id, Key: key, RunID: first.RunID, Run: 1, ListShards: b.ListShards, Attempt: 1,
						Outcome: api.OutcomeFailed, Error: "late", Now: time.Now()})
				}
			} else {
				ref := ledger.PackRef{BatchID: id, ListShards: b.ListShards, First: 0}
				running := ledger.ItemState{Key: key, Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, UpdatedAt: now}
				if err := h.store.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: now.Add(300 * time.Millisecond),
					Items: []ledger.PackItemWrite{{Index: 1, Item: running}}, InFlight: 1, Now: now}); err != nil {
					t.Fatal(err)
				}
				late = func() error {
					failed := running
					failed.Outcome, failed.Error = api.OutcomeFailed, "late"
					return h.store.WritePack(ctx, ledger.PackWrite{Ref: ref, Attempt: 1, Run: 1,
						Items: []ledger.PackItemWrite{{Index: 1, Item: failed, Was: api.OutcomeInFlight}}, Now: time.Now()})
				}
			}
			time.Sleep(400 * time.Millisecond)
			h.handleUntilDone(t, ctx, h.receive(t, 1))
			h.handleUntilDone(t, ctx, h.receive(t, 3/k+3%k))
			if err := late(); !errors.Is(err, api.ErrConflict) {
				t.Fatalf("late write of the crashed holder: %v, want ErrConflict", err)
			}
			r, err := h.finalizer.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Report.Census.Succeeded != 3 || h.callsOf(key) != 1 {
				t.Fatalf("census %+v, calls %d", r.Report.Census, h.callsOf(key))
			}
			var row ledger.Item
			err = shardmerge.Merge(ctx, h.store, id, b.ListShards, "", shardmerge.Options{Packed: k > 1}, func(it ledger.Item) error {
				if it.Key == key {
					row = it
				}
				return nil
			})
			if err != nil || row.Attempt != 2 || row.RunAttempts != 2 || string(row.Output) != `{"attempt":2}` {
				t.Fatalf("row after takeover: %+v %v", row, err)
			}
		})
	}
}

// TestPackedRerunAndRelease guards "resume runs only what did not
// succeed, answered items counted once, one released quarantined item
// runs again", K = 1 and K = 10: every message of run 2 delivered twice.
func TestPackedRerunAndRelease(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			var fixed atomic.Bool
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				switch {
				case fixed.Load():
				case strings.HasSuffix(req.Key, "3"):
					return pipeline.Result{}, pipeline.Permanent(errors.New("bad item"))
				case strings.HasSuffix(req.Key, "5"):
					return pipeline.Result{}, pipeline.Quarantine(errors.New("check me"))
				}
				return pipeline.Result{Output: req.Input}, nil
			})
			h.submitter.ChunkItems = 20
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(20)}, ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			h.drain(t, ctx)
			if r, err := h.finalizer.Finalize(ctx, id, 1); err != nil || r.Report.Census.Failed != 2 || r.Report.Census.Quarantined != 2 {
				t.Fatalf("run 1: %+v %v", r.Report.Census, err)
			}
			if err := h.control().Release(ctx, id, api.PositionalKey(15)); err != nil {
				t.Fatal(err)
			}
			// The same answers at every K (docs/api.md): a succeeded or
			// failed item is not quarantined, 409; a key the batch does
			// not have, 404.
			for key, want := range map[string]error{
				api.PositionalKey(14): api.ErrConflict, api.PositionalKey(0): api.ErrConflict,
				api.PositionalKey(13): api.ErrConflict, api.PositionalKey(20): api.ErrNotFound,
			} {
				if err := h.control().Release(ctx, id, key); !errors.Is(err, want) {
					t.Errorf("release of %s: %v, want %v", key, err, want)
				}
			}
			fixed.Store(true)
			b, err := h.submitter.Resume(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			h.handleUntilDone(t, ctx, h.receive(t, 1))
			msgs := h.receive(t, 20/k)
			h.handleUntilDone(t, ctx, append(append([]worker.Delivery{}, msgs...), msgs...))
			p, _ := h.store.Progress(ctx, id, 2, b.CounterShards)
			if p.Done != 20 || p.Failures != 1 {
				t.Fatalf("run 2 progress %+v, want done 20 (answered items counted once), failures 1", p)
			}
			r, err := h.finalizer.Finalize(ctx, id, 2)
			if err != nil || r.Report.Census.Succeeded != 19 || r.Report.Census.Quarantined != 1 {
				t.Fatalf("run 2: %+v %v", r.Report.Census, err)
			}
			for i := range 20 {
				key := api.PositionalKey(int64(i))
				want := int64(1)
				if strings.HasSuffix(key, "3") || i == 15 {
					want = 2
				}
				if c := h.callsOf(key); c != want {
					t.Errorf("%s: %d calls, want %d", key, c, want)
				}
			}
		})
	}
}

// TestPackedDeadLetters guards "a dead-lettered item or pack message
// records its items failed (dead-lettered) without running them; a
// dead-lettered fan-out message records its chunk's unstarted items
// failed", K = 1 and K = 10.
func TestPackedDeadLetters(t *testing.T) {
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: req.Input}, nil
			})
			h.submitter.ChunkItems = 20
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(40)}, ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			fan := h.receive(t, 2)
			if len(fan) != 2 {
				t.Fatalf("%d fan-out messages, want 2", len(fan))
			}
			h.handleUntilDone(t, ctx, fan[:1])
			fan[1].DeadLetter, fan[1].ReceiveCount = true, 10
			h.handleUntilDone(t, ctx, fan[1:])
			msgs := h.receive(t, 20/k)
			msgs[0].DeadLetter, msgs[0].ReceiveCount = true, 10
			h.handleUntilDone(t, ctx, msgs[:1])
			h.handleUntilDone(t, ctx, msgs[1:])
			r, err := h.finalizer.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := r.Report.Census; c.Failed != int64(20+k) || c.Succeeded != int64(20-k) {
				t.Fatalf("census %+v, want %d failed", c, 20+k)
			}
			p, err := h.control().Items(ctx, id, api.OutcomeFailed, "", 100)
			if err != nil || len(p.Items) != 20+k {
				t.Fatalf("failed listing: %d items %v", len(p.Items), err)
			}
			for _, it := range p.Items {
				if it.Reason != api.ReasonDeadLettered || !strings.Contains(it.Error, "10 receives") || h.callsOf(it.Key) != 0 {
					t.Errorf("%s: reason %s error %q, %d calls", it.Key, it.Reason, it.Error, h.callsOf(it.Key))
				}
			}
		})
	}
}

// TestPackedThroughTheStack guards "items_per_message through the API and
// the deployed functions: every item with its own outcome, whatever K",
// K = 1 and K = 10: 30 webhook items, three refused (422, permanent), one
// answered 503 once (its retry runs it alone), every item or pack message
// sent twice more straight to the queue; one call per item (two for the
// retried one), the census from the rows, the failed listing and the
// report's results per item.
func TestPackedThroughTheStack(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			id := newID(t)
			bad := map[string]bool{api.PositionalKey(3): true, api.PositionalKey(17): true, api.PositionalKey(28): true}
			flaky := api.PositionalKey(12)
			url := env.hook.routeOwn(t, id, func(key string, attempt int) int {
				switch {
				case bad[key]:
					return 422
				case key == flaky && attempt == 1:
					return 503
				}
				return 200
			})
			const n = 30
			items := inlineItems(n)
			req := webhookRequest(id, url, items)
			req.ItemsPerMessage = k
			b, err := env.api.Submit(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if b.ItemsPerMessage != k {
				t.Fatalf("batch view items_per_message %d, want %d", b.ItemsPerMessage, k)
			}
			var lines []json.RawMessage
			if err := json.Unmarshal(items, &lines); err != nil {
				t.Fatal(err)
			}
			var bodies []string
			p, err := ledger.NewPacker(id, 1, b.ManifestKey, source.Chunk{Count: n}, k, func(body []byte, _ []string) error {
				bodies = append(bodies, string(body), string(body))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, in := range lines {
				if err := p.Add(source.ManifestLine{Key: api.PositionalKey(int64(i)), Input: in}, 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			sendRaw(t, bodies)
			v := wait(t, id)
			if v.Status != api.StatusCompleted || v.Census.Succeeded != n-3 || v.Census.Failed != 3 {
				t.Fatalf("batch: %s %+v", v.Status, v.Census)
			}
			calls := env.hook.counts(id)
			for i := range n {
				key := api.PositionalKey(int64(i))
				want := 1
				if key == flaky {
					want = 2
				}
				if calls[key] != want {
					t.Errorf("%s: %d calls, want %d", key, calls[key], want)
				}
			}
			if rc := rowsCensus(t, id); !sameCounts(rc, *v.Census) {
				t.Fatalf("census %+v != rows %+v", *v.Census, rc)
			}
			page, err := env.api.Items(ctx, id, api.OutcomeFailed, "", 10)
			if err != nil || len(page.Items) != 3 || page.Items[0].Key != api.PositionalKey(3) || page.Items[0].Reason != api.ReasonPermanent {
				t.Fatalf("failed listing %+v %v", page, err)
			}
			rep, err := env.api.Report(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got := readResults(t, rep.Results.Files[api.OutcomeSucceeded].URI); len(got) != n-3 {
				t.Fatalf("%d succeeded results, want %d", len(got), n-3)
			}
		})
	}
}

// TestPackedResultsInKeyOrder guards "a run's results come in key byte
// order at every items per message", K = 1 and K = 10, on the emulator:
// 40 items keyed by a field in an order far from key order, some failing,
// finalized in calls of 6 rows with sort runs of 400 bytes (so that a pack
// batch's lines go through sorted runs in S3, read back in ranges); each
// outcome's results are in ledger.KeyOrder and the same bytes at both K.
func TestPackedResultsInKeyOrder(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	var src strings.Builder
	src.WriteByte('[')
	for i := range 40 {
		if i > 0 {
			src.WriteByte(',')
		}
		fmt.Fprintf(&src, `{"id":"key-%02d","n":%d}`, (40-7*i%40)%40, i)
	}
	src.WriteByte(']')
	files := map[int]map[api.Outcome][]byte{}
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if strings.HasSuffix(req.Key, "3") {
					return pipeline.Result{}, pipeline.Permanent(errors.New("bad item"))
				}
				return pipeline.Result{Output: req.Input}, nil
			})
			h.submitter.ChunkItems = 20
			h.finalizer.ChunkRows, h.finalizer.SortRunBytes = 6, 400
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted",
				Source: api.SourceSpec{Items: json.RawMessage(src.String())}, KeyField: "id", ItemsPerMessage: k}); err != nil {
				t.Fatal(err)
			}
			h.drain(t, ctx)
			for calls := 1; ; calls++ {
				r, err := h.finalizer.Finalize(ctx, id, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !r.Continued {
					if c := r.Report.Census; c.Succeeded != 36 || c.Failed != 4 {
						t.Fatalf("census %+v", c)
					}
					break
				}
				if calls > 50 {
					t.Fatal("finalize does not end")
				}
			}
			files[k] = map[api.Outcome][]byte{}
			for _, o := range []api.Outcome{api.OutcomeSucceeded, api.OutcomeFailed} {
				body, err := h.blobs.Get(ctx, api.ResultsKey(id, 1, o))
				if err != nil {
					t.Fatal(err)
				}
				files[k][o] = body
				var keys []string
				if err := api.ReadResults(strings.NewReader(string(body)), func(l api.ResultLine) error {
					keys = append(keys, l.Key)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if !slices.IsSortedFunc(keys, ledger.KeyOrder) {
					t.Errorf("%s results not in key order: %q", o, keys)
				}
			}
		})
	}
	for o, body := range files[1] {
		if string(files[10][o]) != string(body) {
			t.Errorf("%s results differ between K=1 and K=10:\n%s\n%s", o, body, files[10][o])
		}
	}
}
