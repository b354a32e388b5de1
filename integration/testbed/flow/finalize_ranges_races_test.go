package flow

// Races and failures of the merge split by key ranges: calls slower than
// the run's finish, duplicated, killed anywhere or stale, and pieces over
// S3's least part copied (finalize_ranges.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// gateBlobs is the rig's in-memory store with a hook called before some
// operations, outside the store's lock (so it may block).
type gateBlobs struct {
	*memblobs.Blobs
	gate func(op, key string)
	fail func(op, key string) error // a call killed there
}

func (g *gateBlobs) hook(op, key string) {
	if g.gate != nil {
		g.gate(op, key)
	}
}

func (g *gateBlobs) StartParts(ctx context.Context, key, ct string) (string, error) {
	g.hook("start_parts", key)
	return g.Blobs.StartParts(ctx, key, ct)
}

func (g *gateBlobs) List(ctx context.Context, bucket, prefix string, fn func(source.ObjectInfo) error) error {
	g.hook("list", prefix)
	return g.Blobs.List(ctx, bucket, prefix, fn)
}

func (g *gateBlobs) Put(ctx context.Context, key, ct string, body []byte) error {
	g.hook("put", key)
	return g.Blobs.Put(ctx, key, ct, body)
}

func (g *gateBlobs) PutIfAbsent(ctx context.Context, key, ct string, body []byte) error {
	g.hook("put_if_absent", key)
	if g.fail != nil {
		if err := g.fail("put_if_absent", key); err != nil {
			return err
		}
	}
	return g.Blobs.PutIfAbsent(ctx, key, ct, body)
}

// allLost is a rangeCalls whose ranges are all lost (recorded, never run).
func allLost(fin *finalize.Finalizer) *rangeCalls {
	lost := map[int]bool{}
	for i := range finalize.MaxMergeRanges {
		lost[i] = true
	}
	return &rangeCalls{fin: fin, lost: lost}
}

// plannedRig is a rangesOf rig of n items at k items per message whose
// parts have run and whose ranges are planned, all lost: its calls, and
// how many ranges were planned.
func plannedRig(t *testing.T, n, k int) (*rig, *rangeCalls, int) {
	t.Helper()
	r, _, _ := rangesOf(t, n, k)
	calls := allLost(r.fin)
	return r, calls, plannedRanges(t, r, calls)
}

// plannedRanges runs the parts of a rangesOf rig whose ranges are all
// lost, and returns how many ranges were planned.
func plannedRanges(t *testing.T, r *rig, calls *rangeCalls) int {
	t.Helper()
	r.fin.Parts = calls
	if _, err := r.fin.Finalize(context.Background(), "b", 1); err != nil {
		t.Fatal(err)
	}
	calls.wg.Wait()
	seen := map[int]bool{}
	for _, g := range calls.take() {
		seen[g] = true
	}
	if len(seen) < 3 {
		t.Fatalf("%d ranges planned, want ≥ 3", len(seen))
	}
	return len(seen)
}

// TestDuplicateRangeOutlivesTheFinish: a range invoked twice (a
// Lambda duplicate, or the tick's restart of a slow range) — the second
// copy passes finalizeRange's checks and starts merging; the first copy
// finishes the range, composes and finishes the run (DeletePrefix); the
// second copy then completes its pieces and writes its result under the
// finalize prefix of the finished run. Promise: nothing left under the
// finalize prefix at the end. The copy is held before its first piece,
// or before it writes its mark (then its mark too comes after the
// finish).
func TestDuplicateRangeOutlivesTheFinish(t *testing.T) {
	const n = 900
	for _, c := range []struct {
		held string
		op   string
		key  func(last int) string
	}{
		{"before its pieces", "start_parts", func(last int) string { return fmt.Sprintf("/ranges/000001/%04d-", last) }},
		{"before its mark", "put", func(last int) string { return fmt.Sprintf("/ranges/000001/%04d.active", last) }},
	} {
		for _, k := range packKs {
			t.Run(fmt.Sprintf("%s K=%d", c.held, k), func(t *testing.T) {
				want := singlePass(t, n, k)
				r, _, R := plannedRig(t, n, k)
				ctx := context.Background()
				for g := range R - 1 {
					if res, err := r.fin.FinalizeRange(ctx, "b", 1, 1, g); err != nil || res.Wrote {
						t.Fatalf("range %d: %+v %v", g, res, err)
					}
				}
				last := R - 1
				gb := &gateBlobs{Blobs: r.blobs}
				var seen atomic.Int64
				blocked, release := make(chan struct{}), make(chan struct{})
				gb.gate = func(op, key string) {
					if op == c.op && strings.Contains(key, c.key(last)) && seen.Add(1) == 1 {
						close(blocked)
						<-release
					}
				}
				r.fin.Blobs = gb
				var dup sync.WaitGroup
				var dupRes finalize.FinalizeResult
				var dupErr error
				dup.Go(func() { dupRes, dupErr = r.fin.FinalizeRange(ctx, "b", 1, 1, last) })
				<-blocked
				res, err := r.fin.FinalizeRange(ctx, "b", 1, 1, last)
				if err != nil || !res.Wrote {
					t.Fatalf("the last range: %+v %v, want the report written", res, err)
				}
				close(release)
				dup.Wait()
				t.Logf("duplicate: %+v %v", dupRes, dupErr)
				sameFinish(t, finishedRun(t, r, res.Report), want, "a duplicate range outlives the finish")
			})
		}
	}
}

// TestTickStartOutlivesTheFinish: the tick lists the ranges (one
// without result, its mark passed) and marks it to start it again; the
// range's own call meanwhile finishes it, composes and finishes the run;
// the tick's mark (and its start) come after the finish's DeletePrefix.
func TestTickStartOutlivesTheFinish(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r, _, R := plannedRig(t, n, k)
			ctx := context.Background()
			mergeRanges(t, r, 0, R-1)
			last := R - 1
			r.clock.T = r.clock.T.Add(finalize.DefaultChunkTime + finalize.DefaultChunkMargin + time.Second) // marks passed
			gb := &gateBlobs{Blobs: r.blobs}
			var seen atomic.Int64
			blocked, release := make(chan struct{}), make(chan struct{})
			gb.gate = func(op, key string) {
				if op == "put" && strings.HasSuffix(key, fmt.Sprintf("/ranges/000001/%04d.active", last)) && seen.Add(1) == 1 {
					close(blocked)
					<-release
				}
			}
			r.fin.Blobs = gb
			var tick sync.WaitGroup
			tick.Go(func() {
				if _, err := r.fin.Tick(ctx); err != nil {
					t.Errorf("tick: %v", err)
				}
			})
			<-blocked
			res, err := r.fin.FinalizeRange(ctx, "b", 1, 1, last)
			if err != nil || !res.Wrote {
				t.Fatalf("the last range: %+v %v", res, err)
			}
			close(release)
			tick.Wait()
			sameFinish(t, finishedRun(t, r, res.Report), want, "the tick's restart outlives the finish")
		})
	}
}

// mergeRanges runs the calls of ranges from … to−1 of the rig's planned
// merge, one after another; a call that fails fails the test.
func mergeRanges(t *testing.T, r *rig, from, to int) {
	t.Helper()
	for g := from; g < to; g++ {
		if _, err := r.fin.FinalizeRange(context.Background(), "b", 1, 1, g); err != nil {
			t.Fatalf("range %d: %v", g, err)
		}
	}
}

// TestTwoComposersRaceTheFinish: every range has its result; two
// calls compose at once, the slower one held just before it writes its
// done checkpoint until the faster one has finished the run; then the
// slower one goes on and is killed at its report's completion of the
// results. Nothing may be left under the finalize prefix, the results are
// the single pass's.
func TestTwoComposersRaceTheFinish(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r, _, R := plannedRig(t, n, k)
			ctx := context.Background()
			// Every range but the last, then the last one's result written
			// by a call killed right after it (before it could compose):
			// its next put (a results part) fails.
			mergeRanges(t, r, 0, R-1)
			var killNext atomic.Bool
			memblobs.FailBlobs(r.blobs, func(op, key string) error {
				if op == "put_part" && strings.HasPrefix(key, "batches/b/runs/1/results/") && killNext.Load() {
					return errors.New("killed")
				}
				return nil
			})
			killNext.Store(true)
			if _, err := r.fin.FinalizeRange(ctx, "b", 1, 1, R-1); err == nil {
				t.Fatal("the last range's composition was not killed")
			}
			killNext.Store(false)
			memblobs.FailBlobs(r.blobs, nil)
			if keys := r.blobs.Keys(finalize.FinalizePrefix("b", 1) + "000002.json"); len(keys) != 0 {
				t.Fatal("a done checkpoint exists already")
			}
			gb := &gateBlobs{Blobs: r.blobs}
			var seen atomic.Int64
			blocked, release := make(chan struct{}), make(chan struct{})
			gb.gate = func(op, key string) {
				if op == "put_if_absent" && strings.HasSuffix(key, "/000002.json") && seen.Add(1) == 1 {
					close(blocked)
					<-release
				}
			}
			r.fin.Blobs = gb
			var slow sync.WaitGroup
			var slowErr error
			slow.Go(func() { _, slowErr = r.fin.Finalize(ctx, "b", 1) })
			<-blocked
			res, err := r.fin.Finalize(ctx, "b", 1)
			if err != nil || !res.Wrote {
				t.Fatalf("the fast composer: %+v %v", res, err)
			}
			// The slow one is killed at its report: its completion of the
			// results fails.
			memblobs.FailBlobs(r.blobs, func(op, key string) error { return nil })
			gb.gate = nil
			failComplete := &failCompleteBlobs{gateBlobs: gb}
			r.fin.Blobs = failComplete
			close(release)
			slow.Wait()
			t.Logf("slow composer: %v", slowErr)
			sameFinish(t, finishedRun(t, r, res.Report), want, "two composers")
		})
	}
}

// failCompleteBlobs fails every CompleteParts of a results file (a call
// killed there).
type failCompleteBlobs struct{ *gateBlobs }

func (f *failCompleteBlobs) CompleteParts(ctx context.Context, key, id string, n int, size int64) error {
	if strings.HasPrefix(key, "batches/b/runs/1/results/") {
		return errors.New("killed")
	}
	return f.gateBlobs.CompleteParts(ctx, key, id, n, size)
}

// TestKilledMidCompositionThenRetried: the composition is killed at
// each of its results part writes in turn; the next call composes again;
// the results are the single pass's and nothing is left.
func TestKilledMidCompositionThenRetried(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r, _, _ := rangesOf(t, n, k)
			var mu sync.Mutex
			kills := 0
			memblobs.FailBlobs(r.blobs, func(op, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if op == "put_part" && strings.HasPrefix(key, "batches/b/runs/1/results/") && kills < 3 {
					kills++
					return errors.New("killed")
				}
				return nil
			})
			var res finalize.FinalizeResult
			for range 10 {
				var err error
				res, err = r.fin.Finalize(context.Background(), "b", 1)
				if err == nil && !res.Continued {
					break
				}
			}
			if !res.Wrote || kills != 3 {
				t.Fatalf("%+v, %d kills", res, kills)
			}
			sameFinish(t, finishedRun(t, r, res.Report), want, "killed mid-composition")
		})
	}
}

// TestStaleRangeCalls: range calls of a stale checkpoint, an index
// out of the plan or negative do nothing and write nothing.
func TestStaleRangeCalls(t *testing.T) {
	const n = 900
	ref := ranRun(t, n, 1)
	want := finishedRun(t, ref, finalizeAll(t, ref.fin).Report)
	r, calls, R := plannedRig(t, n, 1)
	ctx := context.Background()
	before := len(r.blobs.Keys(finalize.FinalizePrefix("b", 1)))
	for _, c := range [][2]int{{2, 0}, {0, 0}, {1, -1}, {1, R}, {1, finalize.MaxMergeRanges}} {
		res, err := r.fin.FinalizeRange(ctx, "b", 1, c[0], c[1])
		if err != nil || res.Wrote || !res.Parted {
			t.Fatalf("seq %d range %d: %+v %v", c[0], c[1], res, err)
		}
	}
	if after := len(r.blobs.Keys(finalize.FinalizePrefix("b", 1))); after != before {
		t.Fatalf("stale calls wrote %d objects", after-before)
	}
	calls.lost = nil
	r.clock.T = r.clock.T.Add(finalize.DefaultChunkTime + finalize.DefaultChunkMargin + time.Second)
	if _, err := r.fin.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	calls.wg.Wait()
	res, err := r.fin.Finalize(ctx, "b", 1)
	if err != nil {
		t.Fatal(err)
	}
	sameFinish(t, finishedRun(t, r, res.Report), want, "after stale calls")
}

// triggerCalls starts parts and ranges as the finalize function's
// asynchronous invocations do: each an event handed to Trigger, in a
// goroutine of its own.
type triggerCalls struct {
	fin    *finalize.Finalizer
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	ranges map[int]bool
}

func (c *triggerCalls) run(ev ledger.FinalizeEvent) {
	c.wg.Go(func() {
		if _, err := c.fin.Trigger(context.Background(), ev); err != nil {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
		}
	})
}

func (c *triggerCalls) StartFinalizePart(_ context.Context, id string, run, plan, part, chain int) error {
	c.run(ledger.FinalizeEvent{BatchID: id, Run: run, Plan: plan, Part: part + 1, Chain: chain})
	return nil
}

func (c *triggerCalls) StartFinalizeRange(_ context.Context, id string, run, cp, rng, chain int) error {
	c.mu.Lock()
	c.ranges[rng] = true
	c.mu.Unlock()
	c.run(ledger.FinalizeEvent{BatchID: id, Run: run, Plan: cp, Range: rng + 1, Chain: chain})
	return nil
}

// TestManyRangesThroughTrigger: ranges of one byte and a mark at
// every record give the most ranges (256); every part and range is an
// event handed to Trigger at once; the results are the single pass's.
func TestManyRangesThroughTrigger(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r, _, _ := rangesOf(t, n, k)
			r.fin.MergeRangeBytes = 1
			r.fin.RunMarkBytes = 1
			calls := &triggerCalls{fin: r.fin, ranges: map[int]bool{}}
			r.fin.Parts = calls
			if _, err := r.fin.Trigger(context.Background(), ledger.FinalizeEvent{BatchID: "b", Run: 1}); err != nil {
				t.Fatal(err)
			}
			calls.wg.Wait()
			if len(calls.errs) > 0 {
				t.Fatalf("%d calls failed: %v", len(calls.errs), calls.errs[0])
			}
			if len(calls.ranges) != finalize.MaxMergeRanges {
				t.Fatalf("%d ranges, want %d", len(calls.ranges), finalize.MaxMergeRanges)
			}
			res, err := r.fin.Finalize(context.Background(), "b", 1)
			if err != nil || res.Continued {
				t.Fatalf("%+v %v", res, err)
			}
			sameFinish(t, finishedRun(t, r, res.Report), want, "256 ranges")
		})
	}
}

// TestKilledBeforeRangeResult: every range is killed once after its
// pieces are completed, just before its result is written; the next
// calls run it again (new pieces, the old ones unnamed); the results are
// the single pass's and nothing is left.
func TestKilledBeforeRangeResult(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r, _, _ := rangesOf(t, n, k)
			var mu sync.Mutex
			killed := map[string]bool{}
			var kill context.CancelFunc // the call's end (a kill: its context ends, no failure counted)
			r.fin.Blobs = &gateBlobs{Blobs: r.blobs, fail: func(op, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if strings.Contains(key, "/ranges/") && strings.HasSuffix(key, ".json") && !killed[key] {
					killed[key] = true
					kill()
					return context.Canceled
				}
				return nil
			}}
			var res finalize.FinalizeResult
			for range 300 {
				ctx, cancel := context.WithCancel(context.Background())
				mu.Lock()
				kill = cancel
				mu.Unlock()
				var err error
				res, err = r.fin.Finalize(ctx, "b", 1)
				cancel()
				if err == nil && !res.Continued {
					break
				}
			}
			if !res.Wrote || len(killed) < 3 {
				t.Fatalf("%+v, %d kills", res, len(killed))
			}
			sameFinish(t, finishedRun(t, r, res.Report), want, "killed before the range results")
		})
	}
}

// recParts records the parts started and runs none.
type recParts struct {
	mu    sync.Mutex
	parts map[int]bool
}

func (p *recParts) StartFinalizePart(_ context.Context, _ string, _, _, part, _ int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parts[part] = true
	return nil
}

// TestDuplicatePartOutlivesTheFinish is the same race for a part of
// the parallel read (no ranges): is the leftover new with the ranges, or
// inherited from the parts?
func TestDuplicatePartOutlivesTheFinish(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r := partsRun(t, n, k)
			parts := &recParts{parts: map[int]bool{}}
			r.fin.Parts = parts
			ctx := context.Background()
			if _, err := r.fin.Finalize(ctx, "b", 1); err != nil {
				t.Fatal(err)
			}
			P := len(parts.parts)
			if P < 3 {
				t.Fatalf("%d parts", P)
			}
			for i := range P - 1 {
				if _, err := r.fin.FinalizePart(ctx, "b", 1, 1, i); err != nil {
					t.Fatal(err)
				}
			}
			last := P - 1
			gb := &gateBlobs{Blobs: r.blobs}
			var seen atomic.Int64
			blocked, release := make(chan struct{}), make(chan struct{})
			gb.gate = func(op, key string) {
				if op == "start_parts" && strings.Contains(key, fmt.Sprintf("/parts/000001/%04d-", last)) && seen.Add(1) == 1 {
					close(blocked)
					<-release
				}
			}
			r.fin.Blobs = gb
			var dup sync.WaitGroup
			dup.Go(func() { _, _ = r.fin.FinalizePart(ctx, "b", 1, 1, last) })
			<-blocked
			res, err := r.fin.FinalizePart(ctx, "b", 1, 1, last)
			if err != nil || !res.Wrote {
				t.Fatalf("the last part: %+v %v", res, err)
			}
			close(release)
			dup.Wait()
			sameFinish(t, finishedRun(t, r, res.Report), want, "a duplicate part outlives the finish")
		})
	}
}

// completeCounted records the uploads completed into results files.
type completeCounted struct {
	*gateBlobs
	mu      sync.Mutex
	uploads map[string]map[string]bool // results key → upload ids completed
}

func (c *completeCounted) CompleteParts(ctx context.Context, key, id string, n int, size int64) error {
	if strings.HasPrefix(key, "batches/b/runs/1/results/") {
		c.mu.Lock()
		if c.uploads[key] == nil {
			c.uploads[key] = map[string]bool{}
		}
		c.uploads[key][id] = true
		c.mu.Unlock()
	}
	return c.gateBlobs.CompleteParts(ctx, key, id, n, size)
}

// TestLosingComposerCompletesItsUpload: ADR 0039 says of two calls
// that compose at once "one writes the checkpoint, the other's upload is
// never completed". The slower composer, held before its done checkpoint
// until the faster one has finished the run (which deletes the
// checkpoints), then writes its own done checkpoint (nothing stops it)
// and completes its own uploads over the reported results files.
func TestLosingComposerCompletesItsUpload(t *testing.T) {
	const n = 900
	k := 1
	want := singlePass(t, n, k)
	r, _, R := plannedRig(t, n, k)
	ctx := context.Background()
	mergeRanges(t, r, 0, R-1)
	// The last range's result, its composition killed (a results part).
	memblobs.FailBlobs(r.blobs, func(op, key string) error {
		if op == "put_part" && strings.HasPrefix(key, "batches/b/runs/1/results/") {
			return errors.New("killed")
		}
		return nil
	})
	if _, err := r.fin.FinalizeRange(ctx, "b", 1, 1, R-1); err == nil {
		t.Fatal("not killed")
	}
	memblobs.FailBlobs(r.blobs, nil)
	gb := &gateBlobs{Blobs: r.blobs}
	cc := &completeCounted{gateBlobs: gb, uploads: map[string]map[string]bool{}}
	var seen atomic.Int64
	blocked, release := make(chan struct{}), make(chan struct{})
	gb.gate = func(op, key string) {
		if op == "put_if_absent" && strings.HasSuffix(key, "/000002.json") && seen.Add(1) == 1 {
			close(blocked)
			<-release
		}
	}
	r.fin.Blobs = cc
	var slow sync.WaitGroup
	var slowRes finalize.FinalizeResult
	var slowErr error
	slow.Go(func() { slowRes, slowErr = r.fin.Finalize(ctx, "b", 1) })
	<-blocked
	res, err := r.fin.Finalize(ctx, "b", 1)
	if err != nil || !res.Wrote {
		t.Fatalf("the fast composer: %+v %v", res, err)
	}
	close(release)
	slow.Wait()
	t.Logf("slow composer: wrote %v, err %v", slowRes.Wrote, slowErr)
	sameFinish(t, finishedRun(t, r, res.Report), want, "two composers")
	for key, ids := range cc.uploads {
		if len(ids) != 1 {
			t.Errorf("%s: %d uploads completed into it, want 1 (the loser's upload was completed after the report)", key, len(ids))
		}
	}
}

// bigItems are n items of ~40 KB inputs (outputs are the inputs).
func bigItems(n int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		h := fnv.New64a()
		fmt.Fprint(h, i)
		fmt.Fprintf(&b, `{"id":"k-%016x","n":%d,"pad":%q}`, h.Sum64(), i, strings.Repeat(string(rune('a'+i%26)), 40000+i%97))
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

func ranBig(t *testing.T, n, k int) *rig {
	t.Helper()
	return ranItems(t, bigItems(n), k)
}

// copyCount counts CopyPart calls into results files, and can kill one.
type copyCount struct {
	*memblobs.Blobs
	copies atomic.Int64
	killAt int64
}

func (c *copyCount) CopyPart(ctx context.Context, key, id string, n int, src string, offset, length int64) error {
	if c.copies.Add(1) == c.killAt {
		return errors.New("killed mid-copy")
	}
	return c.Blobs.CopyPart(ctx, key, id, n, src, offset, length)
}

// TestRangesWithCopiedPieces: outputs large enough that the ranges'
// pieces pass 5 MiB and are copied inside the store (the other flow tests
// only ever read and send pieces); a copy killed mid-composition, then the
// next call composes again: the single pass's results, nothing left.
func TestRangesWithCopiedPieces(t *testing.T) {
	const n = 600
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ref := ranBig(t, n, k)
			want := finishedRun(t, ref, finalizeAll(t, ref.fin).Report)
			r := ranBig(t, n, k)
			r.fin.PartRows = 100
			r.fin.SortRunBytes = 1 << 20
			r.fin.MergeFanIn = 3
			r.fin.MergeRangeBytes = 6 << 20
			r.fin.RunMarkBytes = 64 << 10
			cc := &copyCount{Blobs: r.blobs, killAt: 2}
			r.fin.Blobs = cc
			var res finalize.FinalizeResult
			fails := 0
			for range 20 {
				var err error
				res, err = r.fin.Finalize(context.Background(), "b", 1)
				if err != nil {
					fails++
					continue
				}
				if !res.Continued {
					break
				}
			}
			if !res.Wrote || cc.copies.Load() < 3 || fails != 1 {
				t.Fatalf("%+v: %d copies, %d failed calls", res, cc.copies.Load(), fails)
			}
			t.Logf("%d copies, results %d bytes", cc.copies.Load(), len(want.files["succeeded"]))
			sameFinish(t, finishedRun(t, r, res.Report), want, "copied pieces")
		})
	}
}

// TestRangesChainStartsOver: ranges planned, half of them merged,
// then the chain is too old to go on from (TTLGrace/2): the next call
// starts over; late range calls of the old plan do nothing; the results
// are the single pass's and nothing is left.
func TestRangesChainStartsOver(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r, calls, R := plannedRig(t, n, k)
			ctx := context.Background()
			mergeRanges(t, r, 0, R/2)
			r.clock.T = r.clock.T.Add(ledger.TTLGrace/2 + time.Hour)
			res, err := r.fin.Finalize(ctx, "b", 1)
			if err != nil {
				t.Fatal(err)
			}
			// Late calls of the old plan.
			for g := range R {
				if _, err := r.fin.FinalizeRange(ctx, "b", 1, 1, g); err != nil {
					t.Fatalf("late range %d: %v", g, err)
				}
			}
			for i := 0; res.Continued && i < 200; i++ {
				if res, err = r.fin.Finalize(ctx, "b", 1); err != nil {
					t.Fatal(err)
				}
			}
			calls.wg.Wait()
			sameFinish(t, finishedRun(t, r, res.Report), want, "chain started over")
		})
	}
}

// dupCalls starts every part and range twice at once, each copy killed
// (its context ended) at a random blob write with probability 1/40.
type dupCalls struct {
	fin   *finalize.Finalizer
	wg    sync.WaitGroup
	mu    sync.Mutex
	wrote int
	errs  []error
}

func (c *dupCalls) twice(call func(ctx context.Context) (finalize.FinalizeResult, error)) {
	for range 2 {
		c.wg.Go(func() {
			res, err := call(context.Background())
			c.mu.Lock()
			defer c.mu.Unlock()
			if res.Wrote {
				c.wrote++
			}
			if err != nil {
				c.errs = append(c.errs, err)
			}
		})
	}
}

func (c *dupCalls) StartFinalizePart(_ context.Context, id string, run, plan, part, _ int) error {
	c.twice(func(ctx context.Context) (finalize.FinalizeResult, error) {
		return c.fin.FinalizePart(ctx, id, run, plan, part)
	})
	return nil
}

func (c *dupCalls) StartFinalizeRange(_ context.Context, id string, run, cp, rng, _ int) error {
	c.twice(func(ctx context.Context) (finalize.FinalizeResult, error) {
		return c.fin.FinalizeRange(ctx, id, run, cp, rng)
	})
	return nil
}

// TestRangesDuplicatedEverywhere: every part and range call runs
// twice at once, some killed by injected write failures, ticks between;
// one report, the single pass's census and results (leftovers are
// reported by the deterministic tests above, not checked here).
func TestRangesDuplicatedEverywhere(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		want := singlePass(t, n, k)
		for seed := range 4 {
			t.Run(fmt.Sprintf("K=%d/%d", k, seed), func(t *testing.T) {
				r, _, _ := rangesOf(t, n, k)
				var fails atomic.Int64
				var cnt atomic.Int64
				memblobs.FailBlobs(r.blobs, func(op, key string) error {
					if cnt.Add(1)%int64(37+seed*11) == 0 && fails.Add(1) <= 3 {
						return ledger.ErrUnavailable // not counted as a finalize failure
					}
					return nil
				})
				calls := &dupCalls{fin: r.fin}
				r.fin.Parts = calls
				ctx := context.Background()
				var res finalize.FinalizeResult
				for i := range 30 {
					var err error
					res, err = r.fin.Finalize(ctx, "b", 1)
					calls.wg.Wait()
					if err == nil && !res.Continued && !res.Parted {
						break
					}
					r.clock.T = r.clock.T.Add(finalize.DefaultChunkTime + finalize.DefaultChunkMargin + time.Second)
					if _, err := r.fin.Tick(ctx); err != nil {
						t.Logf("tick %d: %v", i, err)
					}
					calls.wg.Wait()
				}
				if res.Report.BatchID == "" {
					t.Fatalf("not finished: %+v", res)
				}
				got := finishedRun(t, r, res.Report)
				left := got.left
				got.left = nil
				sameFinish(t, got, want, "duplicated everywhere")
				calls.mu.Lock()
				wrote := calls.wrote
				calls.mu.Unlock()
				t.Logf("%d wrote, %d injected failures, %d call errors, %d left: %v", wrote, fails.Load(), len(calls.errs), len(left), left)
			})
		}
	}
}

// TestStaleListingRestartsEveryRange: a call (here a Finalize: the
// tick, a trigger, a duplicate of the last range) loads the counted
// checkpoint and lists the ranges' results just after the run finished
// (the finish deleted them): it finds none, marks every range and starts
// every one again (up to 256 invocations for nothing), and the marks stay.
func TestStaleListingRestartsEveryRange(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			r, calls, R := plannedRig(t, n, k)
			ctx := context.Background()
			mergeRanges(t, r, 0, R-1)
			gb := &gateBlobs{Blobs: r.blobs}
			var seen atomic.Int64
			blocked, release := make(chan struct{}), make(chan struct{})
			gb.gate = func(op, key string) {
				if op == "list" && strings.HasSuffix(key, "/ranges/000001/") && seen.Add(1) == 1 {
					close(blocked)
					<-release
				}
			}
			r.fin.Blobs = gb
			var stale sync.WaitGroup
			var staleRes finalize.FinalizeResult
			var staleErr error
			stale.Go(func() { staleRes, staleErr = r.fin.Finalize(ctx, "b", 1) })
			<-blocked
			res, err := r.fin.FinalizeRange(ctx, "b", 1, 1, R-1)
			if err != nil || !res.Wrote {
				t.Fatalf("the last range: %+v %v", res, err)
			}
			calls.take()
			close(release)
			stale.Wait()
			again := calls.take()
			t.Logf("stale call: %+v %v; ranges started after the finish: %d of %d", staleRes.Continued, staleErr, len(again), R)
			if len(again) > 0 {
				t.Errorf("%d ranges started again after the run finished", len(again))
			}
			sameFinish(t, finishedRun(t, r, res.Report), want, "a stale listing")
		})
	}
}

// TestStaleCheckpointReplansTheParts: a call that read the batch
// (running) just before the finish and lists the checkpoints just after
// it finds none, and plans the run's parts anew: a plan and every part
// started again after the run finished (pre-existing path, reached here
// by a duplicate of the last range).
func TestStaleCheckpointReplansTheParts(t *testing.T) {
	const n = 900
	k := 1
	want := singlePass(t, n, k)
	r, _, R := plannedRig(t, n, k)
	ctx := context.Background()
	mergeRanges(t, r, 0, R-1)
	rp := &recParts{parts: map[int]bool{}}
	gb := &gateBlobs{Blobs: r.blobs}
	var seen atomic.Int64
	blocked, release := make(chan struct{}), make(chan struct{})
	gb.gate = func(op, key string) {
		if op == "list" && key == finalize.FinalizePrefix("b", 1) && seen.Add(1) == 1 {
			close(blocked)
			<-release
		}
	}
	r.fin.Blobs = gb
	var stale sync.WaitGroup
	var staleErr error
	stale.Go(func() { _, staleErr = r.fin.Finalize(ctx, "b", 1) })
	<-blocked
	res, err := r.fin.FinalizeRange(ctx, "b", 1, 1, R-1)
	if err != nil || !res.Wrote {
		t.Fatalf("the last range: %+v %v", res, err)
	}
	r.fin.Parts = rp
	close(release)
	stale.Wait()
	t.Logf("stale call: %v; parts started after the finish: %d", staleErr, len(rp.parts))
	if len(rp.parts) > 0 {
		t.Errorf("%d parts started again after the run finished", len(rp.parts))
	}
	sameFinish(t, finishedRun(t, r, res.Report), want, "a stale checkpoint listing")
}
