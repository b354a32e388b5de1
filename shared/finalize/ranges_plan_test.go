package finalize

// The key ranges of a merge over keys of every shape, planned and merged
// (planRanges, mergeRunsIn).

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
)

// keysOfEveryShape are unique keys whose bytes sort unusually: a NUL byte,
// non-UTF-8 bytes, keys that are prefixes of others, 1024-byte keys
// differing only in their last byte, and random ones.
func keysOfEveryShape(rng *rand.Rand, n int) [][]byte {
	seen := map[string]bool{}
	var keys [][]byte
	add := func(k []byte) {
		if len(k) == 0 || seen[string(k)] {
			return
		}
		seen[string(k)] = true
		keys = append(keys, k)
	}
	for i := 1; i <= 12; i++ {
		add(bytes.Repeat([]byte("a"), i)) // prefixes of each other
		add(bytes.Repeat([]byte{0xff}, i))
		add(bytes.Repeat([]byte{0x00}, i))
	}
	add([]byte{0x80})
	add([]byte{0xc3, 0x28})
	add([]byte{0xed, 0xa0, 0x80})
	long := bytes.Repeat([]byte("z"), 1023)
	for b := range 40 {
		add(append(slices.Clone(long), byte(b*6)))
		add(append(bytes.Repeat([]byte{0xfe}, 1023), byte(b*6)))
	}
	for len(keys) < n {
		l := 1 + rng.IntN(20)
		if rng.IntN(20) == 0 {
			l = 1000 + rng.IntN(25)
		}
		k := make([]byte, l)
		for i := range k {
			k[i] = byte(rng.IntN(256))
			if rng.IntN(3) == 0 {
				k[i] = "aZ0\x00\xff"[rng.IntN(5)]
			}
		}
		add(k)
	}
	return keys
}

type planRec struct {
	key  []byte
	o    api.Outcome
	line []byte
}

// recSize is the bytes of rec in a sorted run.
func recSize(r planRec) int64 {
	return int64(binary.PutUvarint(make([]byte, 10), uint64(len(r.key))) + len(r.key) + 1 + binary.PutUvarint(make([]byte, 10), uint64(len(r.line))) + len(r.line))
}

// TestRangesCoverEveryKeyOnce splits random keys with unusual bytes
// among K runs (as parts do), writes each run with its index (marks every
// few bytes), plans ranges for many MergeRangeBytes (the plan and the
// marks round-tripped through JSON as the checkpoint and the part results
// are), merges every range from its From offsets and checks: the ranges'
// lines, one after the other, are the single merge's, each key in exactly
// one range, and every From at or before the run's first record >= Lo.
func TestRangesCoverEveryKeyOnce(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 7))
		keys := keysOfEveryShape(rng, 300+rng.IntN(900))
		K := 1 + rng.IntN(10)
		if seed == 0 {
			K = 1
		}
		recsOf := make([][]planRec, K)
		var all []planRec
		for i, k := range keys {
			o := api.TerminalOutcomes()[rng.IntN(4)]
			if seed%3 == 1 {
				o = api.OutcomeSucceeded // one outcome only
			}
			line := fmt.Appendf(nil, "{\"i\":%d,\"pad\":%q}\n", i, strings.Repeat("p", rng.IntN(200)))
			r := planRec{k, o, line}
			j := rng.IntN(K)
			if seed == 5 && j == 0 {
				j = K - 1 // a run with one record only below
			}
			recsOf[j] = append(recsOf[j], r)
			all = append(all, r)
		}
		if seed == 5 && K > 1 {
			recsOf[0] = []planRec{recsOf[K-1][0]}
			recsOf[K-1] = recsOf[K-1][1:]
		}
		slices.SortFunc(all, func(a, b planRec) int { return bytes.Compare(a.key, b.key) })
		blobs := memblobs.New()
		var runs []sortRun
		var marks [][]runMark
		var offs [][]int64 // offset of each record in its run
		var sorted [][]planRec
		markEvery := int64(64 + rng.IntN(2000))
		if seed == 3 {
			markEvery = 1 << 30 // one mark a run
		}
		for j, rs := range recsOf {
			if len(rs) == 0 {
				continue // a part without lines has no run
			}
			slices.SortFunc(rs, func(a, b planRec) int { return bytes.Compare(a.key, b.key) })
			w, err := newRunWriter(ctx, blobs, fmt.Sprintf("run-%d.run", j), nil)
			if err != nil {
				t.Fatal(err)
			}
			w.markEvery = markEvery
			var off int64
			var o []int64
			for _, r := range rs {
				o = append(o, off)
				off += recSize(r)
				if err := w.add(r.key, r.o, r.line); err != nil {
					t.Fatal(err)
				}
			}
			n, err := w.close()
			if err != nil || n != off {
				t.Fatalf("run %d: %d bytes, want %d: %v", j, n, off, err)
			}
			// The part result's JSON.
			body, _ := json.Marshal(finalPartResult{Index: w.marks})
			var pr finalPartResult
			if err := json.Unmarshal(body, &pr); err != nil {
				t.Fatal(err)
			}
			runs = append(runs, sortRun{Key: fmt.Sprintf("run-%d.run", j), Bytes: n})
			marks = append(marks, pr.Index)
			offs = append(offs, o)
			sorted = append(sorted, rs)
		}
		var total int64
		for _, r := range runs {
			total += r.Bytes
		}
		planned := 0
		for _, div := range []int64{1, 2, 3, 5, 8, 17, 64, 300, 1000, 5000} {
			mrb := max(total/div, 1)
			for _, m := range []int64{mrb, mrb + 1, max(mrb-1, 1)} {
				f := &Finalizer{MergeRangeBytes: m}
				ranges := f.planRanges(runs, marks)
				if ranges == nil {
					continue
				}
				planned++
				if len(ranges) > MaxMergeRanges {
					t.Fatalf("seed %d: %d ranges", seed, len(ranges))
				}
				// The checkpoint's JSON.
				body, _ := json.Marshal(ranges)
				var back []mergeRange
				if err := json.Unmarshal(body, &back); err != nil {
					t.Fatal(err)
				}
				ranges = back
				var got []planRec
				for g, rg := range ranges {
					if (g == 0) != (rg.Lo == nil) || (g == len(ranges)-1) != (rg.Hi == nil) {
						t.Fatalf("seed %d mrb %d: range %d of %d bounds %q %q", seed, m, g, len(ranges), rg.Lo, rg.Hi)
					}
					if g > 0 && !bytes.Equal(rg.Lo, ranges[g-1].Hi) {
						t.Fatalf("seed %d mrb %d: range %d starts at %q, the one before ends at %q", seed, m, g, rg.Lo, ranges[g-1].Hi)
					}
					if rg.Lo != nil && rg.Hi != nil && bytes.Compare(rg.Lo, rg.Hi) >= 0 {
						t.Fatalf("seed %d: empty range %d [%q, %q)", seed, g, rg.Lo, rg.Hi)
					}
					rs := make([]sortRun, len(runs))
					for j := range runs {
						rs[j] = sortRun{Key: runs[j].Key, Bytes: runs[j].Bytes, Merged: rg.From[j]}
						// From at or before the run's first record >= Lo.
						first := runs[j].Bytes
						for i, r := range sorted[j] {
							if rg.Lo == nil || bytes.Compare(r.key, rg.Lo) >= 0 {
								first = offs[j][i]
								break
							}
						}
						if rg.From[j] > first || !slices.Contains(append(offs[j], runs[j].Bytes), rg.From[j]) {
							t.Fatalf("seed %d: range %d run %d From %d, first record >= Lo at %d", seed, g, j, rg.From[j], first)
						}
					}
					before := len(got)
					_, err := mergeRunsIn(ctx, blobs, rs, int64(7+rng.IntN(4000)), keyRange{Lo: rg.Lo, Hi: rg.Hi}, func(key []byte, o api.Outcome, line []byte) error {
						got = append(got, planRec{slices.Clone(key), o, slices.Clone(line)})
						return nil
					}, func() bool { return false })
					if err != nil {
						t.Fatalf("seed %d range %d: %v", seed, g, err)
					}
					for _, r := range got[before:] {
						if rg.Lo != nil && bytes.Compare(r.key, rg.Lo) < 0 || rg.Hi != nil && bytes.Compare(r.key, rg.Hi) >= 0 {
							t.Fatalf("seed %d: key %q outside range %d", seed, r.key, g)
						}
					}
				}
				if len(got) != len(all) {
					t.Fatalf("seed %d K %d mrb %d: %d ranges gave %d lines, want %d", seed, K, m, len(ranges), len(got), len(all))
				}
				for i := range all {
					if !bytes.Equal(got[i].key, all[i].key) || got[i].o != all[i].o || !bytes.Equal(got[i].line, all[i].line) {
						t.Fatalf("seed %d mrb %d: line %d is %q, want %q", seed, m, i, got[i].key, all[i].key)
					}
				}
			}
		}
		if planned == 0 {
			t.Fatalf("seed %d: no plan split the runs", seed)
		}
		t.Logf("seed %d: K %d, %d keys, %d bytes, %d plans", seed, K, len(keys), total, planned)
	}
}

// TestPlanThreshold: runs of exactly twice MergeRangeBytes are split,
// one byte less is not; a single run with one mark cannot be split.
func TestPlanThreshold(t *testing.T) {
	runs := []sortRun{{Key: "a", Bytes: 100}, {Key: "b", Bytes: 100}}
	marks := [][]runMark{{{Key: []byte("a"), Off: 0}}, {{Key: []byte("b"), Off: 0}}}
	if r := (&Finalizer{MergeRangeBytes: 100}).planRanges(runs, marks); len(r) != 2 {
		t.Fatalf("200 bytes at 100 a range: %d ranges, want 2", len(r))
	}
	if r := (&Finalizer{MergeRangeBytes: 101}).planRanges(runs, marks); r != nil {
		t.Fatalf("200 bytes at 101 a range: %d ranges, want none", len(r))
	}
	one := []sortRun{{Key: "a", Bytes: 1000}}
	if r := (&Finalizer{MergeRangeBytes: 10}).planRanges(one, [][]runMark{{{Key: []byte("a"), Off: 0}}}); r != nil {
		t.Fatalf("one run with one mark: %d ranges", len(r))
	}
}

// TestRunIndexStaysBounded guards a part's run index with keys of every
// size: keys of 1 KiB, marked every 64 bytes, pass the index's bound
// many times over; the marks kept stay under it, in key order, each at a
// record's start with that record's key, the first at offset 0, and a
// plan over the run still gives every key to exactly one range.
func TestRunIndexStaysBounded(t *testing.T) {
	ctx := context.Background()
	blobs := memblobs.New()
	w, err := newRunWriter(ctx, blobs, "run", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.markEvery = 64
	var keys [][]byte
	offs := map[int64][]byte{}
	for i := range 3000 {
		key := []byte(fmt.Sprintf("%08d%s", i, strings.Repeat("k", api.MaxKeyBytes-8)))
		offs[w.size+int64(len(w.out))] = key
		keys = append(keys, key)
		if err := w.add(key, api.OutcomeSucceeded, []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
	}
	size, err := w.close()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, m := range w.marks {
		n += len(m.Key)
		if k, ok := offs[m.Off]; !ok || !bytes.Equal(k, m.Key) || i > 0 && bytes.Compare(w.marks[i-1].Key, m.Key) >= 0 {
			t.Fatalf("mark %d at %d: not a record's start with its key, or out of order", i, m.Off)
		}
	}
	if n > maxIndexKeyBytes || len(w.marks) < 64 || w.marks[0].Off != 0 {
		t.Fatalf("%d marks, %d bytes of keys (bound %d), the first at %d", len(w.marks), n, maxIndexKeyBytes, w.marks[0].Off)
	}
	f := &Finalizer{MergeRangeBytes: size / 8}
	ranges := f.planRanges([]sortRun{{Key: "run", Bytes: size}}, [][]runMark{w.marks})
	if len(ranges) < 4 {
		t.Fatalf("%d ranges over %d bytes, want ≥ 4", len(ranges), size)
	}
	got := 0
	for _, r := range ranges {
		runs := []sortRun{{Key: "run", Bytes: size, Merged: r.From[0]}}
		if _, err := mergeRunsIn(ctx, blobs, runs, 1<<20, keyRange{Lo: r.Lo, Hi: r.Hi}, func(key []byte, _ api.Outcome, _ []byte) error {
			if !bytes.Equal(key, keys[got]) {
				return fmt.Errorf("key %d: %.12q, want %.12q", got, key, keys[got])
			}
			got++
			return nil
		}, func() bool { return false }); err != nil {
			t.Fatal(err)
		}
	}
	if got != len(keys) {
		t.Fatalf("%d keys merged over %d ranges, want %d", got, len(ranges), len(keys))
	}
	t.Logf("%d marks, %d bytes of keys, %d ranges", len(w.marks), n, len(ranges))
}
