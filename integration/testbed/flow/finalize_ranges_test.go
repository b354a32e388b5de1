package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/finalize"
)

// rangesOf runs a run of n items at k items per message read in parts of
// 100 rows whose merge is split by key ranges of about 12 KiB of the
// parts' runs (marks every 512 bytes): the ranges written are recorded by
// their index, from their pieces' part writes.
func rangesOf(t *testing.T, n, k int) (*rig, *sync.Mutex, map[string]bool) {
	t.Helper()
	r := partsRun(t, n, k)
	r.fin.MergeRangeBytes = 12 << 10
	r.fin.RunMarkBytes = 512
	var mu sync.Mutex
	ranges := map[string]bool{}
	memblobs.FailBlobs(r.blobs, func(op, key string) error {
		mu.Lock()
		defer mu.Unlock()
		if rest, ok := strings.CutPrefix(key, finalize.FinalizePrefix("b", 1)+"ranges/000001/"); ok && op == "put_part" {
			ranges[rest[:4]] = true
		}
		return nil
	})
	return r, &mu, ranges
}

// TestFinalizeInRangesIsTheSinglePass guards the merge split by key
// ranges at one and ten items per message on the in-memory store: a run
// read in parts whose merge is split into key ranges (each range's lines
// from every part's run, the pieces composed into one results file per
// outcome) gives byte for byte the results files of a single pass and
// the same census, status and results, and leaves none of its objects.
func TestFinalizeInRangesIsTheSinglePass(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)
			if want.census.Failed == 0 || want.census.Succeeded == 0 {
				t.Fatalf("single pass census %+v: want both outcomes", want.census)
			}
			r, _, ranges := rangesOf(t, n, k)
			res, err := r.fin.Finalize(context.Background(), "b", 1)
			if err != nil || !res.Wrote || res.Continued {
				t.Fatalf("finalize in parts and ranges, read by the call itself: %+v %v", res, err)
			}
			sameFinish(t, finishedRun(t, r, res.Report), want, "in ranges")
			if len(ranges) < 4 {
				t.Fatalf("%d ranges wrote pieces, want ≥ 4", len(ranges))
			}
			t.Logf("%d ranges", len(ranges))
		})
	}
}

// rangeCalls is the finalize function invoking itself for parts and
// ranges, recorded: each started call runs in a goroutine of its own
// (Lambda's asynchronous invocations), tried up to three times (the call
// and Lambda's two retries); lost ranges are never run.
type rangeCalls struct {
	fin    *finalize.Finalizer
	mu     sync.Mutex
	ranges []int
	lost   map[int]bool
	wg     sync.WaitGroup
	wrote  int
	failed int
}

func (c *rangeCalls) try(call func() (finalize.FinalizeResult, error)) {
	for attempt := range 3 {
		res, err := call()
		c.mu.Lock()
		if err != nil {
			c.failed++
		}
		if res.Wrote {
			c.wrote++
		}
		c.mu.Unlock()
		if err == nil || attempt == 2 {
			return
		}
	}
}

func (c *rangeCalls) StartFinalizePart(_ context.Context, id string, run, plan, part, _ int) error {
	c.wg.Go(func() {
		c.try(func() (finalize.FinalizeResult, error) {
			return c.fin.FinalizePart(context.Background(), id, run, plan, part)
		})
	})
	return nil
}

func (c *rangeCalls) StartFinalizeRange(_ context.Context, id string, run, cp, rng, _ int) error {
	c.mu.Lock()
	c.ranges = append(c.ranges, rng)
	lost := c.lost[rng]
	c.mu.Unlock()
	if !lost {
		c.wg.Go(func() {
			c.try(func() (finalize.FinalizeResult, error) {
				return c.fin.FinalizeRange(context.Background(), id, run, cp, rng)
			})
		})
	}
	return nil
}

func (c *rangeCalls) take() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.ranges
	c.ranges = nil
	return s
}

// TestFinalizeRangesConcurrentKilledAndLost guards the ranges'
// invocations: the parts run at once, the last to finish plans the
// ranges and starts every one; they run concurrently, one killed
// half-way through its pieces (its call fails, Lambda's retry runs it
// again) and one lost for good; the tick leaves the lost range alone
// while its mark holds and starts it again once the mark has passed; the
// range that finishes last composes the results (one report), and they
// are the single pass's, at one and ten items per message.
func TestFinalizeRangesConcurrentKilledAndLost(t *testing.T) {
	const n = 900
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			want := singlePass(t, n, k)

			r, mu, _ := rangesOf(t, n, k)
			killed := false
			memblobs.FailBlobs(r.blobs, func(op, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if op == "put_part" && strings.Contains(key, "/ranges/000001/0001-") && !killed {
					killed = true
					return errors.New("killed")
				}
				return nil
			})
			calls := &rangeCalls{fin: r.fin, lost: map[int]bool{2: true}}
			r.fin.Parts = calls
			res, err := r.fin.Finalize(context.Background(), "b", 1)
			if err != nil || !res.Parted || res.Wrote {
				t.Fatalf("the first call: %+v %v, want the parts started", res, err)
			}
			calls.wg.Wait()
			started := calls.take()
			if len(started) < 4 || calls.failed != 1 || calls.wrote != 0 || !killed {
				t.Fatalf("%d ranges started, %d calls failed (want 1: the killed one), wrote %d", len(started), calls.failed, calls.wrote)
			}
			calls.lost = nil
			if _, err := r.fin.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			if again := calls.take(); len(again) != 0 {
				t.Fatalf("the tick started ranges %v while the lost range's mark held", again)
			}
			r.clock.T = r.clock.T.Add(finalize.DefaultChunkTime + finalize.DefaultChunkMargin + time.Second) // the mark has passed
			if _, err := r.fin.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			calls.wg.Wait()
			if again := calls.take(); len(again) != 1 || again[0] != 2 {
				t.Fatalf("the tick started ranges %v, want the lost range 2 again", again)
			}
			if calls.wrote != 1 {
				t.Fatalf("%d calls wrote the report, want 1 (the last range's)", calls.wrote)
			}
			b, _ := r.store.GetBatch(context.Background(), "b")
			rep, err := r.fin.Finalize(context.Background(), "b", 1)
			if err != nil || rep.Wrote || b.Status != want.status {
				t.Fatalf("after the ranges: status %s, %+v %v", b.Status, rep, err)
			}
			sameFinish(t, finishedRun(t, r, rep.Report), want, "ranges at once")
			t.Logf("%d ranges started", len(started))
		})
	}
}
