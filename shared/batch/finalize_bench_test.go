package batch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/peak"
)

// BenchmarkFinalizeMemory feeds generated item rows through the real
// Finalize (MergeShards, census, results parts, checkpoints) from a store
// that makes each shard's rows as they are read, and a bucket that keeps
// only the sizes of the parts, so that what is measured is finalize's own
// memory. BULKRUN_FINALIZE_ROWS sets the rows (default 10^6; 10^7 for the
// figure in docs/design.md), spread over 1,024 list shards (the most
// batch.ListShards gives), each succeeded with a ~1 KB output. It reports
// rows/s, CPU seconds (user + system) per 10^6 rows, the peak of the Go
// heap's objects (sampled every 2 ms) and the process's peak RSS
// (getrusage). BULKRUN_FINALIZE_CHUNK_ROWS measures
// one call of a run's chain of chunks: the first that many rows of
// BULKRUN_FINALIZE_ROWS (a part of a run too large for one call), or
// fewer when the call's ChunkTime ends first; "rows" reports how many
// the call was handed.
//
//	BULKRUN_FINALIZE_ROWS=10000000 go test -run '^$' -bench FinalizeMemory -benchtime 1x -timeout 60m ./shared/batch/
//	BULKRUN_FINALIZE_ROWS=100000000 BULKRUN_FINALIZE_CHUNK_ROWS=2000000 go test -run '^$' -bench FinalizeMemory -benchtime 1x -timeout 60m ./shared/batch/
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
	output := []byte(`{"text":"` + strings.Repeat("o", 1000) + `"}`)
	// Item i is in the pack starting at i/k·k, in shard (i/k) mod shards:
	// each shard holds its packs in manifest order (K = 1: item i in shard
	// i mod shards).
	var generated atomic.Int64 // rows handed to finalize (read ahead included)
	gen := func(shard int, after string, limit int) ([]Item, bool) {
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
		rows := make([]Item, 0, limit)
		for i < n && len(rows) < limit {
			key := PositionalKey(i)
			it := Item{Run: 1, RunAttempts: 1, Attempt: 1,
				Outcome: OutcomeSucceeded, Output: slices.Clone(output), UpdatedAt: time.Unix(1_800_000_000, 0).UTC(),
				Cost: map[string]float64{"usd": 0.0001}}
			if k > 1 {
				x := uint64(i) * 0x9E3779B97F4A7C15 // a bijection: keys unique, far from manifest order
				key = fmt.Sprintf("key-%016x", x^x>>29)
				first := i / k * k
				it.Pos, it.Packed, it.PackFirst = PackPos(first, int(i-first)), true, first
			}
			it.Key, it.RunID = key, RunID("bench", key)
			rows = append(rows, it)
			i++
			if i%k == 0 {
				i += (shards - 1) * k
			}
		}
		generated.Add(int64(len(rows)))
		return rows, i < n
	}
	stopPeak := peak.Heap()
	b.ReportAllocs()
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	for b.Loop() {
		s := &rowStore{b: Batch{ID: "bench", Run: 1, Status: StatusRunning, ItemCount: n, ListShards: shards, CounterShards: 16,
			ItemsPerMessage: int(k)}, gen: gen}
		blobs := newPartBlobs()
		blobs.discard, blobs.spill = true, b.TempDir() // sort runs on disk, not in the measured heap
		f := &Finalizer{Store: s, Blobs: blobs, Clock: SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Retention: time.Hour,
			ChunkRows: chunkRows}
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
