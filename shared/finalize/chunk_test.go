package finalize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/source"
)

// TestMergeShardsOrderAndBudget guards finalize's bounded memory: the
// shards are merged in key byte order from any position whatever the
// budget, down to one row per shard (every read but a shard's first row
// cut off by the budget is read again later).
func TestMergeShardsOrderAndBudget(t *testing.T) {
	keys := []string{"a", "b/1", "b/2", "é", "z", "Z", "item-0000000001", "item-0000000002", "~", "\u00ff\u00fe", "0", "00"}
	for i := range 200 {
		keys = append(keys, api.PositionalKey(int64(i*7)))
	}
	tests := []struct {
		name    string
		shards  int
		budget  int64
		after   string
		readErr error
		wantErr error
	}{
		{name: "one shard, default budget", shards: 1},
		{name: "eight shards, default budget", shards: 8},
		{name: "five shards, one row each", shards: 5, budget: 1},
		{name: "three shards, a few rows each", shards: 3, budget: 4000},
		{name: "from a key", shards: 4, after: "item-0000000700"},
		{name: "past the last key", shards: 4, after: "\U0010ffff"},
		{name: "a read fails", shards: 4, readErr: memblobs.ErrInjected, wantErr: memblobs.ErrInjected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rows []ledger.Item
			for _, k := range keys {
				rows = append(rows, ledger.Item{Item: api.Item{Key: k, Outcome: api.OutcomeSucceeded}})
			}
			s := newRowStore(ledger.Batch{Batch: api.Batch{ID: "b", ListShards: tt.shards}}, rows)
			if tt.readErr != nil {
				s.scanErr = func(shard int) error {
					if shard == tt.shards-1 {
						return tt.readErr
					}
					return nil
				}
			}
			var got []string
			err := shardmerge.Merge(context.Background(), s, "b", tt.shards, tt.after, shardmerge.Options{BudgetBytes: tt.budget, Reads: 2}, func(it ledger.Item) error {
				got = append(got, it.Key)
				return nil
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			var want []string
			for _, k := range keys {
				if k > tt.after {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("merged %d keys %q…, want %d %q…", len(got), head(got), len(want), head(want))
			}
		})
	}
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// chunkRows returns n rows of run 1: every 9th failed, every 13th
// quarantined, the others succeeded with an output of outputBytes.
func chunkRows(n, outputBytes int) []ledger.Item {
	out := []byte(`"` + strings.Repeat("x", max(0, outputBytes-2)) + `"`)
	rows := make([]ledger.Item, 0, n)
	for i := range n {
		it := ledger.Item{
			Item: api.Item{
				Key:         api.PositionalKey(int64(i)),
				Run:         1,
				RunAttempts: 1,
				Outcome:     api.OutcomeSucceeded,
				Output:      out,
				UpdatedAt:   time.Unix(1_800_000_000, 0).UTC(),
				Cost:        map[string]float64{"usd": 0.001},
			},
		}
		switch {
		case i%9 == 4:
			it.Outcome, it.Output, it.Error, it.Reason = api.OutcomeFailed, nil, "bad "+it.Key, api.ReasonPermanent
		case i%13 == 6:
			it.Outcome, it.Output, it.Error, it.Reason = api.OutcomeQuarantined, nil, "interrupted", api.ReasonInterrupted
		}
		rows = append(rows, it)
	}
	return rows
}

func chunkFinalizer(s *rowStore, blobs *memblobs.Blobs, chunkRows int64) *Finalizer {
	return &Finalizer{Store: s, Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Retention: time.Hour, ChunkRows: chunkRows, Merge: shardmerge.Options{BudgetBytes: 256 << 10, Reads: 2}}
}

func runningBatch(n int64) ledger.Batch {
	return ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusRunning, ItemCount: n, ListShards: 6, CounterShards: 1, FannedOut: true}}
}

// finalizeUntilDone calls Finalize until it writes or finds the report,
// as the tick and retries would; it fails after 200 calls. A call that
// found the chunk claimed by another (ErrChunkClaimed) is
// not counted: it waits a millisecond, as the tick waits its interval.
func finalizeUntilDone(t *testing.T, f *Finalizer) FinalizeResult {
	t.Helper()
	for calls, busy := 0, 0; calls < 200 && busy < 100_000; {
		r, err := f.Finalize(context.Background(), "b1", 1)
		if err == nil && !r.Continued {
			return r
		}
		if errors.Is(err, ErrChunkClaimed) {
			busy++
			time.Sleep(time.Millisecond)
			continue
		}
		calls++
	}
	t.Fatal("finalize did not finish in 200 calls")
	return FinalizeResult{}
}

// onePass is the results of rows finalized in one call, as the
// reference of a run finalized in chunks.
func onePass(t *testing.T, n int64, rows []ledger.Item) resultsSnapshot {
	t.Helper()
	blobs := memblobs.New()
	r, err := chunkFinalizer(newRowStore(runningBatch(n), rows), blobs, 0).Finalize(context.Background(), "b1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return snapshot(t, r, blobs)
}

type resultsSnapshot struct {
	census api.Census
	files  map[api.Outcome]string
}

func snapshot(t *testing.T, r FinalizeResult, blobs *memblobs.Blobs) resultsSnapshot {
	t.Helper()
	s := resultsSnapshot{census: r.Report.Census, files: map[api.Outcome]string{}}
	for _, o := range api.TerminalOutcomes() {
		if b, ok := blobs.Object(api.ResultsKey("b1", 1, o)); ok {
			s.files[o] = string(b)
			if loc := r.Report.Results.Files[o]; loc.Bytes != int64(len(b)) {
				t.Errorf("%s: report says %d bytes, file has %d", o, loc.Bytes, len(b))
			}
		}
	}
	return s
}

func sameResults(t *testing.T, got, want resultsSnapshot, what string) {
	t.Helper()
	gc, wc := got.census, want.census
	if gc.Total != wc.Total || gc.Succeeded != wc.Succeeded || gc.Failed != wc.Failed || gc.Quarantined != wc.Quarantined ||
		gc.Pending != wc.Pending || gc.InFlight != wc.InFlight || gc.Cost.Text("usd") != wc.Cost.Text("usd") {
		t.Fatalf("%s: census %+v, want %+v", what, gc, wc)
	}
	for _, o := range api.TerminalOutcomes() {
		if got.files[o] != want.files[o] {
			t.Fatalf("%s: %s results differ: %d bytes, want %d", what, o, len(got.files[o]), len(want.files[o]))
		}
	}
}

// TestFinalizeChunkedKilledAnywhere guards "killed anywhere, it finishes
// on the next trigger with the same exact census and one report": a run
// whose results span several 8 MiB parts is finalized in chunks of 70 rows,
// and for every call finalize makes to the bucket, a run of calls where
// exactly that one fails (as a kill would leave it) still ends with one
// report, one move of the run, the census of a single pass and results
// byte for byte those of a single pass, and no checkpoint left behind.
func TestFinalizeChunkedKilledAnywhere(t *testing.T) {
	const n = 300
	rows := chunkRows(n, 60<<10) // ≈ 15 MiB of succeeded results: two parts and a tail
	refStore, refBlobs := newRowStore(runningBatch(n), rows), memblobs.New()
	ref, err := chunkFinalizer(refStore, refBlobs, 0).Finalize(context.Background(), "b1", 1)
	if err != nil || !ref.Wrote {
		t.Fatalf("single pass: %+v %v", ref, err)
	}
	want := snapshot(t, ref, refBlobs)
	if want.census.Succeeded+want.census.Failed+want.census.Quarantined != n || want.census.Pending != 0 {
		t.Fatalf("single pass census %+v", want.census)
	}

	// A clean chunked run, to count its calls.
	cleanStore, cleanBlobs := newRowStore(runningBatch(n), rows), memblobs.New()
	f := chunkFinalizer(cleanStore, cleanBlobs, 70)
	continued := 0
	for {
		r, err := f.Finalize(context.Background(), "b1", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Continued {
			sameResults(t, snapshot(t, r, cleanBlobs), want, "chunked")
			break
		}
		continued++
	}
	if continued != 4 {
		t.Fatalf("%d chunks ended with a checkpoint, want 4 (300 rows by 70)", continued)
	}
	calls := cleanBlobs.Calls()
	t.Logf("a clean chunked run makes %d bucket calls", calls)

	for k := 1; k <= calls; k++ {
		s, blobs := newRowStore(runningBatch(n), rows), memblobs.New()
		var op string
		blobs.Fail = func(call int, what string) error {
			if call == k {
				op = what
				return memblobs.ErrInjected
			}
			return nil
		}
		r := finalizeUntilDone(t, chunkFinalizer(s, blobs, 70))
		what := fmt.Sprintf("fault at call %d (%s)", k, op)
		sameResults(t, snapshot(t, r, blobs), want, what)
		if got := blobs.Puts(api.ReportKey("b1", 1)); got != 1 {
			t.Fatalf("%s: report written %d times", what, got)
		}
		if len(s.finished) != 1 {
			t.Fatalf("%s: run moved %d times", what, len(s.finished))
		}
		for _, key := range blobs.Objects("") {
			if strings.HasPrefix(key, FinalizePrefix("b1", 1)) && op != "delete_prefix" {
				t.Fatalf("%s: %s left behind", what, key)
			}
		}
	}
}

// TestFinalizeConcurrentChunkedCalls guards one report per run when
// several calls work on the same chunks at once (a trigger, the tick and
// a retry): each checkpoint is written by one of them, and the results are
// those of a single pass.
func TestFinalizeConcurrentChunkedCalls(t *testing.T) {
	const n = 250
	rows := chunkRows(n, 40<<10)
	want := onePass(t, n, rows)
	s, blobs := newRowStore(runningBatch(n), rows), memblobs.New()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrote int
	var last FinalizeResult
	for range 4 {
		wg.Go(func() {
			r := finalizeUntilDone(t, chunkFinalizer(s, blobs, 30))
			mu.Lock()
			defer mu.Unlock()
			if r.Wrote {
				wrote++
				last = r
			}
		})
	}
	wg.Wait()
	if wrote != 1 || len(s.finished) != 1 {
		t.Fatalf("%d calls wrote the report, the run moved %d times; want 1 and 1", wrote, len(s.finished))
	}
	sameResults(t, snapshot(t, last, blobs), want, "concurrent")
}

// TestFinalizeChainStartsOverWhenARowAppearsBehindIt guards the exact
// census across chunks: an item still pending when the chain passed its
// key gets its row later; the pass ends short of the item count, the
// chain starts over, and the next pass counts every row once.
func TestFinalizeChainStartsOverWhenARowAppearsBehindIt(t *testing.T) {
	const n = 60
	rows := chunkRows(n, 100)
	late := rows[3]
	s := newRowStore(runningBatch(n), slices.Delete(slices.Clone(rows), 3, 4))
	blobs := memblobs.New()
	f := chunkFinalizer(s, blobs, 20)
	r, err := f.Finalize(context.Background(), "b1", 1)
	if err != nil || !r.Continued {
		t.Fatalf("first chunk: %+v %v", r, err)
	}
	s.mu.Lock()
	sh := ledger.Shard(late.Key, len(s.shards))
	s.shards[sh] = append(s.shards[sh], late)
	slices.SortFunc(s.shards[sh], func(a, b ledger.Item) int { return strings.Compare(a.Key, b.Key) })
	s.mu.Unlock()
	var notFinished bool
	for range 10 {
		r, err = f.Finalize(context.Background(), "b1", 1)
		if errors.Is(err, api.ErrNotFinished) {
			notFinished = true
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !r.Continued {
			break
		}
	}
	if !notFinished {
		t.Fatal("the pass that missed a row was not refused")
	}
	if c := r.Report.Census; !r.Wrote || c.Pending != 0 || c.Succeeded+c.Failed+c.Quarantined != n {
		t.Fatalf("census %+v wrote %v, want all %d rows counted once", c, r.Wrote, n)
	}
}

// TestTickLeavesAChunkInProgressAlone guards one worker per chunk at a
// time: while a call holds the claim of a run's next checkpoint, the
// tick, which tries every running batch whose counters are done, does
// not start a second pass over the same rows (it reads no shard); once
// the claim has expired (its call died), the tick takes it over and
// finishes the run.
func TestTickLeavesAChunkInProgressAlone(t *testing.T) {
	const n = 40
	s, blobs := newRowStore(runningBatch(n), chunkRows(n, 100)), memblobs.New()
	f := chunkFinalizer(s, blobs, 0)
	ctx := context.Background()
	if _, err := f.claimChunk(ctx, "b1", 1, 1, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	scans := s.scans
	res, err := f.Tick(ctx)
	if err != nil || res.Checked != 1 || res.Finalized != 0 || s.scans != scans {
		t.Fatalf("tick during a chunk: %+v %v, %d shard reads; want the run checked, left alone, nothing read", res, err, s.scans-scans)
	}
	if err := blobs.Put(ctx, claimKey("b1", 1, 1, 1), "application/json", []byte(`{"until":"2000-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	res, err = f.Tick(ctx)
	if err != nil || res.Finalized != 1 {
		t.Fatalf("tick after the claim expired: %+v %v, want the run finalized", res, err)
	}
}

// staleFirstRead answers the first GetBatch with the batch as it was before
// another call finished the run: the read a losing finalize call made.
type staleFirstRead struct {
	*rowStore
	stale ledger.Batch
	reads int
}

func (s *staleFirstRead) GetBatch(ctx context.Context, id string) (ledger.Batch, error) {
	s.reads++
	if s.reads == 1 {
		return s.stale, nil
	}
	return s.rowStore.GetBatch(ctx, id)
}

// goneCheckpoint lists a checkpoint that the call which finished the run
// has deleted meanwhile: its Get finds nothing.
type goneCheckpoint struct{ *memblobs.Blobs }

func (g goneCheckpoint) List(ctx context.Context, bucket, prefix string, fn func(source.ObjectInfo) error) error {
	if prefix == FinalizePrefix("b1", 1) {
		return fn(source.ObjectInfo{Bucket: bucket, Key: prefix + "000003.json"})
	}
	return g.Blobs.List(ctx, bucket, prefix, fn)
}

// TestFinalizeLosingCallFindsItsObjectsGone guards the answer of a finalize
// call that read the batch as running while another call finished the run
// and deleted its checkpoints: the checkpoint it listed is gone when it
// reads it, and it answers with the finished run's report, not an error
// (which Lambda would retry and the error alarm count; four concurrent
// calls met it about once in 200 runs under the race detector).
func TestFinalizeLosingCallFindsItsObjectsGone(t *testing.T) {
	const n = 60
	s, blobs := newRowStore(runningBatch(n), chunkRows(n, 40)), memblobs.New()
	want := finalizeUntilDone(t, chunkFinalizer(s, blobs, 0))
	if !want.Wrote {
		t.Fatal("the first call did not write the report")
	}
	losing := chunkFinalizer(s, nil, 0)
	losing.Store = &staleFirstRead{rowStore: s, stale: runningBatch(n)}
	losing.Blobs = goneCheckpoint{blobs}
	got, err := losing.Finalize(context.Background(), "b1", 1)
	if err != nil {
		t.Fatalf("the losing call: %v, want the report", err)
	}
	gotJSON, _ := json.Marshal(got.Report)
	wantJSON, _ := json.Marshal(want.Report)
	if got.Wrote || string(gotJSON) != string(wantJSON) {
		t.Fatalf("the losing call answered %s (wrote %v), want the report %s", gotJSON, got.Wrote, wantJSON)
	}
}
