package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// partItems are n items whose keys (field "id") are far from their
// manifest order, so that a pack batch's lines must be sorted.
func partItems(n int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		h := fnv.New64a()
		fmt.Fprint(h, i)
		fmt.Fprintf(&b, `{"id":"k-%016x","n":%d,"pad":%q}`, h.Sum64(), i, strings.Repeat("p", i%97))
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

// partsPipeline fails every item whose key ends in 3 permanently, and
// answers the others with their input and a cost in tenths.
func partsPipeline(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
	if strings.HasSuffix(req.Key, "3") {
		return pipeline.Result{}, pipeline.Permanent(errors.New("bad item " + req.Key))
	}
	return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"calls": 1, "usd": 0.1}}, nil
}

// ranRun submits n items at k items per message to a new rig and runs
// every item; the rig's finalizer has not run.
func ranRun(t *testing.T, n, k int) *rig {
	t.Helper()
	return ranItems(t, partItems(n), k)
}

// partsRun is ranRun with a finalizer that reads the run in parts of 100
// rows (900 rows: several parts), sorts them in runs of 2 KiB and merges
// the runs three at a time (in several levels).
func partsRun(t *testing.T, n, k int) *rig {
	t.Helper()
	r := ranRun(t, n, k)
	r.fin.PartRows = 100
	r.fin.SortRunBytes = 2 << 10
	r.fin.MergeFanIn = 3
	return r
}

// ranItems submits items at k items per message to a new rig and runs
// every item; the rig's finalizer has not run.
func ranItems(t *testing.T, items json.RawMessage, k int) *rig {
	t.Helper()
	r := newRig(t, partsPipeline)
	r.sub.ChunkItems = 50
	if _, err := r.sub.Submit(context.Background(), api.SubmitRequest{BatchID: "b", Pipeline: "counted", KeyField: "id",
		Source: api.SourceSpec{Items: items}, ItemsPerMessage: k}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, context.Background(), 1)
	return r
}

// finished is what a finalized run leaves: its report's census, status
// and results, and each results file's bytes.
type finished struct {
	census  api.Census
	status  api.Status
	results api.Results
	files   map[api.Outcome][]byte
	left    []string // objects left under the finalize prefix
}

func finishedRun(t *testing.T, r *rig, rep api.Report) finished {
	t.Helper()
	got := finished{census: rep.Census, status: rep.Status, results: rep.Results, files: map[api.Outcome][]byte{}}
	for _, o := range api.TerminalOutcomes() {
		if body, err := r.blobs.Get(context.Background(), api.ResultsKey("b", 1, o)); err == nil {
			got.files[o] = body
		}
	}
	got.left = r.blobs.Keys(finalize.FinalizePrefix("b", 1))
	return got
}

func sameFinish(t *testing.T, got, want finished, what string) {
	t.Helper()
	gc, _ := json.Marshal(got.census)
	wc, _ := json.Marshal(want.census)
	if !bytes.Equal(gc, wc) || got.status != want.status {
		t.Fatalf("%s: census %s %s, want %s %s", what, gc, got.status, wc, want.status)
	}
	gr, _ := json.Marshal(got.results)
	wr, _ := json.Marshal(want.results)
	if !bytes.Equal(gr, wr) {
		t.Fatalf("%s: results %s, want %s", what, gr, wr)
	}
	for _, o := range api.TerminalOutcomes() {
		if !bytes.Equal(got.files[o], want.files[o]) {
			t.Fatalf("%s: results of %s differ: %d bytes, want %d", what, o, len(got.files[o]), len(want.files[o]))
		}
	}
	if len(got.left) > 0 {
		t.Fatalf("%s: %d objects left under the finalize prefix: %v", what, len(got.left), got.left[:min(5, len(got.left))])
	}
}

// singlePass is what a run of n items at k items per message leaves
// when finalized in one pass: the reference the parts and the ranges
// must give byte for byte.
func singlePass(t *testing.T, n, k int) finished {
	t.Helper()
	ref := ranRun(t, n, k)
	return finishedRun(t, ref, finalizeAll(t, ref.fin).Report)
}

// finalizeAll calls Finalize until the run is finished.
func finalizeAll(t *testing.T, f *finalize.Finalizer) finalize.FinalizeResult {
	t.Helper()
	for range 200 {
		res, err := f.Finalize(context.Background(), "b", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Continued {
			return res
		}
	}
	t.Fatal("finalize does not end")
	return finalize.FinalizeResult{}
}

// TestFinalizeInPartsIsTheSinglePass guards the parallel finalize's
// promise at one and ten items per message on the in-memory store: a run
// read in parts (item shards split among the parts, each part's lines in
// key order, a pack batch's through sorted runs merged in two levels,
// then the parts merged) gives byte for byte the results files of a
// single pass and the same census, status and results, and leaves none of
// its objects; a run under twice the part rows is one pass.
func TestFinalizeInPartsIsTheSinglePass(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ref := ranRun(t, n, k)
			refRes := finalizeAll(t, ref.fin)
			want := finishedRun(t, ref, refRes.Report)
			if want.census.Succeeded+want.census.Failed != n || want.census.Failed == 0 || want.census.Pending != 0 {
				t.Fatalf("single pass census %+v", want.census)
			}

			r := ranRun(t, n, k)
			b, err := r.store.GetBatch(context.Background(), "b")
			if err != nil || b.ListShards < 4 {
				t.Fatalf("batch %d shards %v, want ≥ 4", b.ListShards, err)
			}
			r.fin.PartRows = 100 // 900 rows: min(shards, 9) parts
			r.fin.SortRunBytes = 2 << 10
			r.fin.MergeFanIn = 3 // the sort runs merged in several levels
			var mu sync.Mutex
			streams, sorted := map[string]bool{}, map[string]bool{}
			memblobs.FailBlobs(r.blobs, func(op, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if rest, ok := strings.CutPrefix(key, finalize.FinalizePrefix("b", 1)+"parts/000001/"); ok && op == "put_part" {
					if strings.Contains(rest, "/") {
						sorted[rest] = true
					} else {
						streams[rest] = true
					}
				}
				return nil
			})
			res, err := r.fin.Finalize(context.Background(), "b", 1)
			if err != nil || !res.Wrote || res.Continued {
				t.Fatalf("finalize in parts, read by the call itself: %+v %v", res, err)
			}
			sameFinish(t, finishedRun(t, r, res.Report), want, "in parts")
			// Each part wrote its lines as one run; a pack batch's parts
			// sorted them first, in more runs than one merge reads (3).
			if parts := min(b.ListShards, 9); len(streams) != parts || k > 1 && len(sorted) < 4*parts || k == 1 && len(sorted) > 0 {
				t.Fatalf("%d parts' runs (want %d), %d sorted runs", len(streams), parts, len(sorted))
			}
			t.Logf("%d shards, %d parts, %d sorted runs", b.ListShards, len(streams), len(sorted))

			// A run under twice the part rows is one pass: no plan.
			small := ranRun(t, 150, k)
			small.fin.PartRows = 100
			small.fin.MergeFanIn = 3
			var planned bool
			memblobs.FailBlobs(small.blobs, func(op, key string) error {
				planned = planned || strings.Contains(key, "/plan-") || strings.Contains(key, "/parts/")
				return nil
			})
			if res := finalizeAll(t, small.fin); !res.Wrote || planned {
				t.Fatalf("150 rows with parts of 100: wrote %v, planned parts %v", res.Wrote, planned)
			}
		})
	}
}

// partCalls is the finalize function invoking itself for parts,
// recorded: run runs the started parts, each in a goroutine of its own
// (Lambda's asynchronous invocations); lost parts are never run.
type partCalls struct {
	mu      sync.Mutex
	started []int
	lost    map[int]bool
	run     func(part, plan int)
	wg      sync.WaitGroup
}

func (p *partCalls) StartFinalizePart(_ context.Context, _ string, _, plan, part, _ int) error {
	p.mu.Lock()
	p.started = append(p.started, part)
	lost := p.lost[part]
	p.mu.Unlock()
	if !lost && p.run != nil {
		p.wg.Go(func() { p.run(part, plan) })
	}
	return nil
}

func (p *partCalls) take() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.started
	p.started = nil
	return s
}

// TestFinalizePartsConcurrentKilledAndLost guards the parts' invocations:
// the first call plans the run and starts every part at once; the parts
// run concurrently, one of them killed half-way through its run (its
// call fails, Lambda's retry runs it again) and one lost for good; the
// tick leaves the lost part alone while its mark holds and starts it
// again once the mark has passed; the part that finishes last merges
// (exactly one merge, one report), and the results are the single
// pass's, at one and ten items per message.
func TestFinalizePartsConcurrentKilledAndLost(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)

			r := partsRun(t, n, k)
			killed := false
			memblobs.FailBlobs(r.blobs, func(op, key string) error {
				if op == "put_part" && strings.Contains(key, "/parts/000001/0001-") && !killed {
					killed = true
					return errors.New("killed")
				}
				return nil
			})
			var mu sync.Mutex
			var wrote, failed int
			calls := &partCalls{lost: map[int]bool{2: true}}
			calls.run = func(part, plan int) {
				for attempt := range 3 { // Lambda: the call and two retries
					res, err := r.fin.FinalizePart(context.Background(), "b", 1, plan, part)
					mu.Lock()
					if err != nil {
						failed++
					}
					if res.Wrote {
						wrote++
					}
					mu.Unlock()
					if err == nil || attempt == 2 {
						return
					}
				}
			}
			r.fin.Parts = calls
			res, err := r.fin.Finalize(context.Background(), "b", 1)
			if err != nil || !res.Parted || !res.Continued || res.Wrote {
				t.Fatalf("the first call: %+v %v, want the parts started", res, err)
			}
			started := calls.take()
			calls.wg.Wait()
			if len(started) < 4 || failed != 1 || wrote != 0 {
				t.Fatalf("%d parts started, %d calls failed (want 1: the killed one), wrote %d", len(started), failed, wrote)
			}
			calls.lost = nil
			if _, err := r.fin.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			if again := calls.take(); len(again) != 0 {
				t.Fatalf("the tick started %v while the lost part's mark held", again)
			}
			r.clock.T = r.clock.T.Add(finalize.DefaultChunkTime + finalize.DefaultChunkMargin + time.Second) // the mark has passed
			if _, err := r.fin.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			calls.wg.Wait()
			if again := calls.take(); len(again) != 1 || again[0] != 2 {
				t.Fatalf("the tick started %v, want the lost part 2 again", again)
			}
			if wrote != 1 {
				t.Fatalf("%d calls wrote the report, want 1 (the last part's merge)", wrote)
			}
			b, _ := r.store.GetBatch(context.Background(), "b")
			rep, err := r.fin.Finalize(context.Background(), "b", 1)
			if err != nil || rep.Wrote || b.Status != want.status {
				t.Fatalf("after the parts: status %s, %+v %v", b.Status, rep, err)
			}
			sameFinish(t, finishedRun(t, r, rep.Report), want, "parts at once")
		})
	}
}
