package flow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/integration/testbed/peak"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// genSource is an S3 source object of n JSONL lines of ≈ 1 KB (keys of
// 110 bytes, as TestSubmitPeakMemory's), made as it is read.
type genSource struct {
	n, i int64
	buf  []byte
	pad  string
}

func (g *genSource) Read(p []byte) (int, error) {
	for len(g.buf) == 0 {
		if g.i >= g.n {
			return 0, io.EOF
		}
		g.buf = fmt.Appendf(g.buf[:0], `{"key":"%0100d-%09d","text":"%s"}`+"\n", 0, g.i, g.pad)
		g.i++
	}
	n := copy(p, g.buf)
	g.buf = g.buf[n:]
	return n, nil
}

func (g *genSource) Close() error { return nil }

// genBlobs serves genSource as the source and keeps only the size of what
// submit writes (the manifest), so that what is measured is submit's own
// CPU and memory.
type genBlobs struct {
	*memblobs.Blobs
	n       int64
	written atomic.Int64
}

func (b *genBlobs) Open(context.Context, string, string) (io.ReadCloser, error) {
	return &genSource{n: b.n, pad: fmt.Sprintf("%0880d", 0)}, nil
}

func (b *genBlobs) OpenMatch(ctx context.Context, bucket, key, _ string) (io.ReadCloser, error) {
	return b.Open(ctx, bucket, key)
}

func (b *genBlobs) Create(context.Context, string, string) (ledger.BlobWriter, error) {
	return &countWriter{n: &b.written}, nil
}

type countWriter struct{ n *atomic.Int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

func (w *countWriter) Close() error { return nil }

func (w *countWriter) Abort() error { return nil }

// BenchmarkSubmitSource runs the real Submitter.Submit (read the source,
// normalize and hash the manifest, detect duplicate keys, cut chunks,
// create the batch row, fan out) over the in-memory store, reading
// BULKRUN_SUBMIT_ROWS (default 10^6) JSONL items of ≈ 1 KB generated as
// they are read and writing the manifest to nowhere. It reports CPU
// seconds per 10^6 items (user + system, getrusage), source MB/s, and the
// peak Go heap (sampled every 2 ms) and process RSS.
//
//	BULKRUN_SUBMIT_ROWS=10000000 go test -run '^$' -bench SubmitSource -benchtime 1x -timeout 60m ./integration/testbed/flow/
func BenchmarkSubmitSource(b *testing.B) {
	n := int64(1_000_000)
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_SUBMIT_ROWS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	stopPeak := peak.Heap()
	cpu0 := cpuTime()
	var written int64
	for i := 0; b.Loop(); i++ {
		blobs := &genBlobs{Blobs: memblobs.New(), n: n}
		s := &submit.Submitter{Store: memstore.NewStore(), Blobs: blobs, Queue: &memQueue{}, Trigger: &memTrigger{},
			Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Pipelines: []string{"p"},
			MaxAttempts: 3, TempDir: b.TempDir()}
		res, err := s.Submit(context.Background(), api.SubmitRequest{BatchID: fmt.Sprintf("gen-%d", i), Pipeline: "p", KeyField: "key",
			Source: api.SourceSpec{Object: "s3://source/items.jsonl"}})
		if err != nil {
			b.Fatal(err)
		}
		if res.Batch.ItemCount != n {
			b.Fatalf("%d items, want %d", res.Batch.ItemCount, n)
		}
		written = blobs.written.Load()
	}
	cpu := cpuTime() - cpu0
	peakHeap := stopPeak()
	runs := float64(b.N)
	b.ReportMetric(cpu.Seconds()/runs/float64(n)*1e6, "cpu-s/1e6-items")
	b.ReportMetric(float64(n)*1030/1e6*runs/b.Elapsed().Seconds(), "source-MB/s")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MiB") // Linux: KiB
	b.ReportMetric(float64(written)/(1<<20), "manifest-MiB")
	runtime.KeepAlive(written)
}
