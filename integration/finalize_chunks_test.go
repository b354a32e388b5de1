//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/peak"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// killBlobs wraps the harness bucket and "kills" the finalize call in
// progress at the first call kill accepts: that call fails before reaching
// S3 and the context of the call is cancelled, so whatever the call had in
// flight dies with it, as in an invocation that timed out or crashed.
type killBlobs struct {
	ledger.Blobs
	mu     sync.Mutex
	cancel context.CancelFunc
	kill   func(op, key string) bool
	killed []string
}

var errKilled = errors.New("killed")

func (k *killBlobs) check(op, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kill != nil && k.cancel != nil && k.kill(op, key) {
		k.killed = append(k.killed, op+" "+key)
		k.kill = nil
		k.cancel()
		return errKilled
	}
	return nil
}

func (k *killBlobs) Put(ctx context.Context, key, ct string, body []byte) error {
	if err := k.check("put", key); err != nil {
		return err
	}
	return k.Blobs.Put(ctx, key, ct, body)
}

func (k *killBlobs) PutIfAbsent(ctx context.Context, key, ct string, body []byte) error {
	if err := k.check("put_if_absent", key); err != nil {
		return err
	}
	return k.Blobs.PutIfAbsent(ctx, key, ct, body)
}

func (k *killBlobs) PutPart(ctx context.Context, key, id string, n int, body []byte) error {
	if err := k.check("put_part", key); err != nil {
		return err
	}
	return k.Blobs.PutPart(ctx, key, id, n, body)
}

func (k *killBlobs) CompleteParts(ctx context.Context, key, id string, n int, size int64) error {
	if err := k.check("complete_parts", key); err != nil {
		return err
	}
	return k.Blobs.CompleteParts(ctx, key, id, n, size)
}

// TestFinalizeChunkedKilledMidway guards the product line "finalize over
// any number of items, in chunks across invocations: killed anywhere, it
// finishes on the next trigger with the same exact census and one report"
// on the emulator's DynamoDB and S3: a run of 120 items is finalized in
// chunks of 25 rows through a read budget of one row per shard; one call
// is killed as it writes its second checkpoint, another as it completes
// the results of the last outcome (after the other outcome's upload was
// completed); the next calls finish it. One report, the census of the rows,
// every key once in key order in the results, no checkpoint left.
func TestFinalizeChunkedKilledMidway(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if strings.HasSuffix(req.Key, "3") {
			return pipeline.Result{}, pipeline.Permanent(errors.New("bad item"))
		}
		return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"usd": 0.1}}, nil
	})
	const n = 120
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(n)}}); err != nil {
		t.Fatal(err)
	}
	h.drain(t, ctx)
	b := mustBatch(t, h, id)
	rows, err := finalize.CensusOf(ctx, h.store, b, nil)
	if err != nil || !rows.Done() {
		t.Fatalf("census from rows before finalize: %+v %v", rows, err)
	}

	kb := &killBlobs{Blobs: h.fn["finalize"].blobs}
	f := *h.finalizer
	f.Blobs = kb
	f.ChunkRows = 25
	f.Merge = shardmerge.Options{BudgetBytes: 1, Reads: 3}
	kills := []func(op, key string) bool{
		func(op, key string) bool {
			return op == "put_if_absent" && strings.HasSuffix(key, "/finalize/1/000002.json")
		},
		func(op, key string) bool {
			return op == "complete_parts" && strings.HasSuffix(key, "/results/failed.jsonl")
		},
	}
	var wrote, continued, killedCalls int
	var rep api.Report
	for call := 0; ; call++ {
		if call > 30 {
			t.Fatalf("not finished after 30 calls (%d continued, %d killed)", continued, killedCalls)
		}
		cctx, cancel := context.WithCancel(ctx)
		kb.mu.Lock()
		kb.cancel = cancel
		if kb.kill == nil && len(kills) > 0 && len(kb.killed) < 2 {
			kb.kill, kills = kills[0], kills[1:]
		}
		kb.mu.Unlock()
		r, err := f.Finalize(cctx, id, 1)
		cancel()
		if err != nil {
			if !errors.Is(err, errKilled) && !errors.Is(err, context.Canceled) {
				t.Fatalf("call %d: %v", call, err)
			}
			killedCalls++
			continue
		}
		if r.Continued {
			continued++
			continue
		}
		if r.Wrote {
			wrote++
		}
		rep = r.Report
		break
	}
	if len(kb.killed) != 2 {
		t.Fatalf("killed at %q, want both kill points reached", kb.killed)
	}
	if wrote != 1 || continued < 3 {
		t.Fatalf("report written by %d calls, %d chunks continued; want 1 and ≥ 3", wrote, continued)
	}
	// Any later call answers the same report.
	again, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil || again.Wrote || again.Report.Census.Succeeded != rep.Census.Succeeded {
		t.Fatalf("finalize again: %+v %v", again, err)
	}
	c := rep.Census
	if c.Total != n || c.Succeeded != rows.Succeeded || c.Failed != rows.Failed || c.Pending != 0 || c.Cost.Text("usd") != rows.Cost.Text("usd") {
		t.Fatalf("report census %+v, rows say %+v", c, rows)
	}
	if c.Failed != 12 || c.Succeeded != 108 {
		t.Fatalf("census %+v, want 108 succeeded and 12 failed", c)
	}
	for _, o := range []api.Outcome{api.OutcomeSucceeded, api.OutcomeFailed} {
		body, err := h.blobs.Get(ctx, api.ResultsKey(id, 1, o))
		if err != nil {
			t.Fatal(err)
		}
		if loc := rep.Results.Files[o]; loc.Bytes != int64(len(body)) {
			t.Fatalf("%s: report says %d bytes, object has %d", o, loc.Bytes, len(body))
		}
		var keys []string
		if err := api.ReadResults(strings.NewReader(string(body)), func(l api.ResultLine) error {
			keys = append(keys, l.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if int64(len(keys)) != c.Count(o) || !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
			t.Fatalf("%s results: %d keys (sorted %v), want %d, each once in key order", o, len(keys), slices.IsSorted(keys), c.Count(o))
		}
	}
	left := 0
	if err := h.blobs.List(ctx, h.blobs.Bucket(), finalize.FinalizePrefix(id, 1), func(source.ObjectInfo) error { left++; return nil }); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d checkpoint objects left after the run finished", left)
	}
}

// TestFinalizePeakMemoryOnEmulator measures finalize's peak heap over rows
// on the emulator's DynamoDB: BULKRUN_FINALIZE_EMULATOR_ROWS item rows
// (default 2,000) of ~1 KB outputs, written with Store.Settle (one
// conditional write each; MiniStack takes ≈ 150 a second) into a batch laid
// out as one of 10^7 items (api.ListShards(10^7, 0) item shards), then one
// finalize. It checks the census and that the heap stayed below 256 MiB,
// and logs the peak.
//
//	BULKRUN_FINALIZE_EMULATOR_ROWS=20000 go test -tags integration -run TestFinalizePeakMemoryOnEmulator -v ./integration/
func TestFinalizePeakMemoryOnEmulator(t *testing.T) {
	ctx := context.Background()
	n := int64(2000)
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_FINALIZE_EMULATOR_ROWS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	id := newID(t)
	now := time.Now().UTC()
	b := ledger.Batch{
		Batch: api.Batch{
			ID:            id,
			Run:           1,
			Status:        api.StatusRunning,
			Plan:          api.Plan{Pipeline: "counted", Digest: "sha256:0"},
			ItemCount:     n,
			ListShards:    ledger.ListShards(10_000_000, 0),
			CounterShards: 1,
			CreatedAt:     now,
			RunStartedAt:  now,
			FannedOut:     true,
			ManifestKey:   "batches/" + id + "/manifests/x.jsonl",
		},
	}
	if _, err := h.store.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	output := []byte(`{"text":"` + strings.Repeat("o", 1000) + `"}`)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				key := api.PositionalKey(i)
				_, err := h.store.Settle(ctx, ledger.Record{BatchID: id, Key: key, RunID: ledger.RunID(id, key), Run: 1, ListShards: b.ListShards,
					Outcome: api.OutcomeSucceeded, Output: output, Now: time.Now().UTC()})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows written in %s", n, time.Since(start).Round(time.Second))

	runtime.GC()
	stopPeak := peak.Heap()
	start = time.Now()
	r, err := h.finalizer.Finalize(ctx, id, 1)
	elapsed := time.Since(start)
	peakHeap := stopPeak()
	if err != nil || r.Continued || r.Report.Census.Succeeded != n {
		t.Fatalf("finalize: %+v %v", r.Report.Census, err)
	}
	peakMiB := float64(peakHeap) / (1 << 20)
	t.Logf("finalize of %d rows over %d item shards: %s (%.0f rows/s), peak heap %.1f MiB", n, b.ListShards, elapsed.Round(time.Millisecond),
		float64(n)/elapsed.Seconds(), peakMiB)
	if peakMiB >= 256 {
		t.Fatalf("peak heap %.1f MiB, want < 256", peakMiB)
	}
}
