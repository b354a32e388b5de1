package finalize

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/integration/testbed/peak"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// BenchmarkFinalizeMemory feeds generated item rows through the real
// Finalize (shardmerge.Merge, census, results parts, checkpoints) from a store
// that makes each shard's rows as they are read, and a bucket that keeps
// only the sizes of the parts, so that what is measured is finalize's own
// memory. BULKRUN_FINALIZE_ROWS sets the rows (default 10^6; 10^7 for the
// figure in docs/design/measured.md), spread over 1,024 list shards (the most
// api.ListShards gives), each succeeded with a ~1 KB output. It reports
// rows/s, CPU seconds (user + system) per 10^6 rows, the peak of the Go
// heap's objects (sampled every 2 ms) and the process's peak RSS
// (getrusage). BULKRUN_FINALIZE_CHUNK_ROWS measures
// one call of a run's chain of chunks: the first that many rows of
// BULKRUN_FINALIZE_ROWS (a part of a run too large for one call), or
// fewer when the call's ChunkTime ends first; "rows" reports how many
// the call was handed.
//
//	BULKRUN_FINALIZE_ROWS=10000000 go test -run '^$' -bench FinalizeMemory -benchtime 1x -timeout 60m ./shared/finalize/
//	BULKRUN_FINALIZE_ROWS=100000000 BULKRUN_FINALIZE_CHUNK_ROWS=2000000 go test -run '^$' -bench FinalizeMemory -benchtime 1x -timeout 60m ./shared/finalize/
func BenchmarkFinalizeMemory(b *testing.B) {
	n := int64(1_000_000)
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_FINALIZE_ROWS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	// BULKRUN_FINALIZE_CHUNK_ROWS: measure only the first call of the
	// chain, a chunk of that many rows (a part of a larger run).
	chunkRows, _ := strconv.ParseInt(os.Getenv("BULKRUN_FINALIZE_CHUNK_ROWS"), 10, 64)
	counted := n
	// BULKRUN_FINALIZE_K: items per message (default 1); above 1 the rows
	// are pack items in manifest order whose keys are far from it, so that
	// finalize sorts them into key order.
	k := int64(1)
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_FINALIZE_K"), 10, 64); err == nil && v > 1 {
		k = v
	}
	const shards = 1024
	var generated atomic.Int64 // rows handed to finalize (read ahead included)
	gen := benchRows(n, k, shards, &generated)
	stopPeak := peak.Heap()
	b.ReportAllocs()
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	for b.Loop() {
		s := &rowStore{b: ledger.Batch{
			Batch: api.Batch{
				ID:            "bench",
				Run:           1,
				Status:        api.StatusRunning,
				ItemCount:     n,
				ListShards:    shards,
				CounterShards: 16,
				Plan:          api.Plan{ItemsPerMessage: int(k)},
			},
		}, gen: gen}
		blobs := memblobs.New()
		blobs.Discard, blobs.Spill = true, b.TempDir() // sort runs on disk, not in the measured heap
		f := &Finalizer{Store: s, Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Retention: time.Hour,
			ChunkRows: chunkRows, PartRows: n} // one chain of calls: BenchmarkFinalizeParts reads in parts
		for {
			r, err := f.Finalize(context.Background(), "bench", 1)
			if err != nil {
				b.Fatal(err)
			}
			if r.Continued && chunkRows > 0 {
				// One chunk measured: the rows it was handed (at most
				// chunkRows counted, plus what it read ahead; fewer when
				// the chunk's time ran out first).
				counted = generated.Load()
				break
			}
			if !r.Continued {
				if r.Report.Census.Succeeded != n {
					b.Fatalf("census %+v, want %d succeeded", r.Report.Census, n)
				}
				break
			}
		}
	}
	elapsed := time.Since(start)
	peakHeap := stopPeak()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(counted)*float64(b.N)/elapsed.Seconds(), "rows/s")
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(cpu.Seconds()/float64(b.N)/float64(counted)*1e6, "cpu-s/1e6-rows")
	b.ReportMetric(float64(counted), "rows")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MiB") // Linux: KiB
}

// benchRows makes the rows of a run of n items at k items per message
// over shards item shards as finalize reads them (rowStore.gen), each
// succeeded with a ~1 KB output, counting them in generated.
func benchRows(n, k, shards int64, generated *atomic.Int64) func(shard int, after string, limit int) ([]ledger.Item, bool) {
	output := []byte(`{"text":"` + strings.Repeat("o", 1000) + `"}`)
	// Item i is in the pack starting at i/k·k, in shard (i/k) mod shards:
	// each shard holds its packs in manifest order (K = 1: item i in shard
	// i mod shards).
	return func(shard int, after string, limit int) ([]ledger.Item, bool) {
		i := int64(shard) * k
		if after != "" {
			var last int64
			if k == 1 {
				last, _ = strconv.ParseInt(strings.TrimPrefix(after, "item-"), 10, 64)
			} else {
				first, j, _ := strings.Cut(after, ".")
				f, _ := strconv.ParseInt(first, 10, 64)
				jj, _ := strconv.ParseInt(j, 10, 64)
				last = f + jj
			}
			// The first item past last in this shard (a call that goes on
			// from a checkpoint reads every shard from the same position).
			i = last + 1
			if p := i / k; p%shards != int64(shard) {
				i = (p + (int64(shard)-p%shards+shards)%shards) * k
			}
		}
		rows := make([]ledger.Item, 0, limit)
		for i < n && len(rows) < limit {
			key := api.PositionalKey(i)
			it := ledger.Item{
				Item: api.Item{
					Run:         1,
					RunAttempts: 1,
					Attempt:     1,
					Outcome:     api.OutcomeSucceeded,
					Output:      slices.Clone(output),
					UpdatedAt:   time.Unix(1_800_000_000, 0).UTC(),
					Cost:        map[string]float64{"usd": 0.0001},
				},
			}
			if k > 1 {
				x := uint64(i) * 0x9E3779B97F4A7C15 // a bijection: keys unique, far from manifest order
				key = fmt.Sprintf("key-%016x", x^x>>29)
				first := i / k * k
				it.Pos, it.Packed, it.PackFirst = ledger.PackPos(first, int(i-first)), true, first
			}
			it.Key, it.RunID = key, ledger.RunID("bench", key)
			rows = append(rows, it)
			i++
			if i%k == 0 {
				i += (shards - 1) * k
			}
		}
		generated.Add(int64(len(rows)))
		return rows, i < n
	}
}

// nopParts records nothing and starts nothing: the benchmark runs each
// part itself.
type nopParts struct{}

func (nopParts) StartFinalizePart(context.Context, string, int, int, int, int) error { return nil }

func (nopParts) StartFinalizeRange(context.Context, string, int, int, int, int) error { return nil }

// BenchmarkFinalizeParts runs the real finalize of a run read in parts
// (the plan, each part's read of its item shards and its sorted run, the
// merge of the parts' runs into the results and the report, chained, or
// past 2 GiB of runs each key range of the merge and the composition;
// BULKRUN_FINALIZE_PART_ROWS=100000 at 10^7 rows gives ranges that each
// read from 100 runs, as at 10^8)
// over generated rows (rowStore, as BenchmarkFinalizeMemory: 1,024 item
// shards, ~1 KB outputs) and a local object store (partBlobs: sorted
// runs on disk, results parts counted), one call after the other, each
// measured as the invocation it is on Lambda (wall, CPU, peak heap,
// memory held) under finalize's Go memory limit (90 % of 1,024 MB).
// BULKRUN_FINALIZE_ROWS sets the rows (default 10^6), BULKRUN_FINALIZE_K
// the items per message, BULKRUN_FINALIZE_PART_ROWS the rows planned per
// part (default DefaultFinalizePartRows, or half the rows when they are
// fewer than twice that); BULKRUN_FINALIZE_PARTS_ONLY=m
// reads only the first m parts and no merge (a run too large for this
// machine, measured by parts).
//
//	BULKRUN_FINALIZE_ROWS=10000000 go test -run '^$' -bench FinalizeParts -benchtime 1x -timeout 90m -v ./shared/finalize/
//	BULKRUN_FINALIZE_ROWS=100000000 BULKRUN_FINALIZE_PARTS_ONLY=3 go test -run '^$' -bench FinalizeParts -benchtime 1x -timeout 60m -v ./shared/finalize/
func BenchmarkFinalizeParts(b *testing.B) {
	n := int64(1_000_000)
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_FINALIZE_ROWS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	k := int64(1)
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_FINALIZE_K"), 10, 64); err == nil && v > 1 {
		k = v
	}
	partRows, _ := strconv.ParseInt(os.Getenv("BULKRUN_FINALIZE_PART_ROWS"), 10, 64)
	if partRows <= 0 && n < 2*DefaultFinalizePartRows {
		// A run below the parts threshold (2 × the part rows) is read in
		// one call: the default 10^6 rows are read in two parts of half.
		partRows = max(1, n/2)
	}
	only, _ := strconv.Atoi(os.Getenv("BULKRUN_FINALIZE_PARTS_ONLY"))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1024 << 20 * 9 / 10))
	const shards = 1024
	ctx := context.Background()
	for b.Loop() {
		var generated atomic.Int64
		s := &rowStore{b: ledger.Batch{
			Batch: api.Batch{
				ID:            "bench",
				Run:           1,
				Status:        api.StatusRunning,
				ItemCount:     n,
				ListShards:    shards,
				CounterShards: 16,
				Plan:          api.Plan{ItemsPerMessage: int(k)},
			},
		}, gen: benchRows(n, k, shards, &generated)}
		blobs := memblobs.New()
		blobs.Discard, blobs.Spill = true, b.TempDir()
		f := &Finalizer{Store: s, Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Retention: time.Hour,
			Parts: nopParts{}, PartRows: partRows}
		m := peak.StartStep()
		r, err := f.Finalize(ctx, "bench", 1)
		plan := m.End()
		if err != nil || !r.Parted {
			b.Fatalf("the first call: %+v %v, want the run planned in parts", r, err)
		}
		p, err := f.loadPlan(ctx, "bench", 1)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("plan: %d rows in %d parts of %d item shards (K = %d); %s CPU", n, p.Parts, shards/p.Parts, k, plan.CPU.Round(time.Millisecond))
		parts := p.Parts
		if only > 0 {
			parts = min(parts, only)
		}
		var sum, most peak.StepFigures
		for i := range parts {
			before := generated.Load()
			m := peak.StartStep()
			if err := f.runPart(ctx, s.b, p, i); err != nil {
				b.Fatal(err)
			}
			fig := m.End()
			rows := generated.Load() - before
			b.Logf("part %d: %d rows, %s wall, %s CPU (%.1f CPU-s per 10^6 rows), peak heap %.1f MiB, held %.1f MiB",
				i, rows, fig.Wall.Round(time.Millisecond), fig.CPU.Round(time.Millisecond), fig.CPU.Seconds()/float64(rows)*1e6, fig.HeapMiB, fig.HeldMiB)
			sum.Add(fig)
			most.Max(fig)
			most.CPU = max(most.CPU, fig.CPU)
		}
		perPart := sum.CPU / time.Duration(parts)
		b.Logf("parts: %d of %d read, mean %s CPU (most %s), %.1f CPU-s per 10^6 rows; peak heap %.1f MiB, held %.1f MiB at most",
			parts, p.Parts, perPart.Round(time.Millisecond), most.CPU.Round(time.Millisecond), sum.CPU.Seconds()/float64(generated.Load())*1e6, most.HeapMiB, most.HeldMiB)
		b.ReportMetric(perPart.Seconds(), "part-cpu-s")
		b.ReportMetric(most.HeldMiB, "part-held-MiB")
		if only > 0 {
			b.Logf("EXTRAPOLATED: %d parts × %s ≈ %s CPU in all", p.Parts, perPart.Round(time.Millisecond), (perPart * time.Duration(p.Parts)).Round(time.Second))
			continue
		}
		var merge, mergeMost peak.StepFigures
		calls := 0
		for {
			m := peak.StartStep()
			r, err := f.Finalize(ctx, "bench", 1)
			fig := m.End()
			if err != nil {
				b.Fatal(err)
			}
			calls++
			b.Logf("merge call %d: %s wall, %s CPU, peak heap %.1f MiB, held %.1f MiB", calls, fig.Wall.Round(time.Millisecond), fig.CPU.Round(time.Millisecond), fig.HeapMiB, fig.HeldMiB)
			merge.Add(fig)
			mergeMost.Max(fig)
			if r.Parted {
				// The merge is split by key ranges: each range is a call.
				rangeFigures(b, f, s.b)
				continue
			}
			if !r.Continued {
				if r.Report.Census.Succeeded != n || !r.Wrote {
					b.Fatalf("census %+v (wrote %v), want %d succeeded", r.Report.Census, r.Wrote, n)
				}
				break
			}
		}
		b.Logf("merge: %d runs, %d call(s), %s CPU (%.1f CPU-s per 10^6 rows), peak heap %.1f MiB, held %.1f MiB",
			p.Parts, calls, merge.CPU.Round(time.Millisecond), merge.CPU.Seconds()/float64(n)*1e6, mergeMost.HeapMiB, mergeMost.HeldMiB)
		b.ReportMetric(merge.CPU.Seconds(), "merge-cpu-s")
		b.ReportMetric(mergeMost.HeldMiB, "merge-held-MiB")
	}
}

// rangeFigures runs each key range of the run's merge (the calls
// mergeInRanges started) one after the other, each measured as the
// invocation it is, and logs and reports them.
func rangeFigures(b *testing.B, f *Finalizer, batch ledger.Batch) {
	ctx := context.Background()
	cp, err := f.loadCheckpoint(ctx, "bench", 1)
	if err != nil || cp == nil || len(cp.Ranges) == 0 {
		b.Fatalf("the merge's ranges: %v %v", cp, err)
	}
	var sum, most peak.StepFigures
	for r, rng := range cp.Ranges {
		m := peak.StartStep()
		if err := f.runRange(ctx, batch, cp, r); err != nil {
			b.Fatal(err)
		}
		fig := m.End()
		b.Logf("range %d: ≤ %.1f MiB of runs, %s wall, %s CPU, peak heap %.1f MiB, held %.1f MiB",
			r, float64(rng.Bytes)/(1<<20), fig.Wall.Round(time.Millisecond), fig.CPU.Round(time.Millisecond), fig.HeapMiB, fig.HeldMiB)
		sum.Add(fig)
		most.Max(fig)
		most.CPU = max(most.CPU, fig.CPU)
	}
	mean := sum.CPU / time.Duration(len(cp.Ranges))
	b.Logf("ranges: %d, mean %s CPU (most %s), peak heap %.1f MiB, held %.1f MiB at most",
		len(cp.Ranges), mean.Round(time.Millisecond), most.CPU.Round(time.Millisecond), most.HeapMiB, most.HeldMiB)
	b.ReportMetric(float64(len(cp.Ranges)), "ranges")
	b.ReportMetric(most.CPU.Seconds(), "range-cpu-s-most")
	b.ReportMetric(most.HeldMiB, "range-held-MiB")
}
