package batch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/batch/memstore"
)

// diskBlobs is a local object store for the parts benchmark: the source is
// genSource's lines made for any byte range (every line has the same
// length), the manifest parts are hashed and counted, not kept, and every
// other object (plans, keys, line lengths, results) is a file on disk.
type diskBlobs struct {
	batch.Blobs
	dir     string
	n       int64 // source lines
	pad     string
	lineLen int64
	mu      sync.Mutex
	sizes   map[string]int64 // manifest parts and composed objects: size only
}

func newDiskBlobs(dir string, n int64) *diskBlobs {
	pad := fmt.Sprintf("%0880d", 0)
	line, _ := io.ReadAll(&genSource{n: 1, pad: pad})
	return &diskBlobs{dir: dir, n: n, pad: pad, lineLen: int64(len(line)), sizes: map[string]int64{}}
}

func (d *diskBlobs) Bucket() string { return "batches" }

func (d *diskBlobs) size() int64 { return d.n * d.lineLen }

func (d *diskBlobs) HeadSource(context.Context, string, string) (batch.ObjectInfo, error) {
	return batch.ObjectInfo{Size: d.size(), ETag: "gen"}, nil
}

// rangeSource yields bytes [off, end) of the generated source.
type rangeSource struct {
	d        *diskBlobs
	off, end int64
	buf      []byte
}

func (r *rangeSource) Read(p []byte) (int, error) {
	if r.off >= r.end {
		return 0, io.EOF
	}
	if len(r.buf) == 0 {
		i := r.off / r.d.lineLen
		r.buf = fmt.Appendf(r.buf[:0], `{"key":"%0100d-%09d","text":"%s"}`+"\n", 0, i, r.d.pad)
		r.buf = r.buf[r.off%r.d.lineLen:]
	}
	n := copy(p, r.buf[:min(int64(len(r.buf)), r.end-r.off)])
	r.buf = r.buf[n:]
	r.off += int64(n)
	return n, nil
}

func (r *rangeSource) Close() error { return nil }

func (d *diskBlobs) OpenSourceRange(_ context.Context, _, _, _ string, offset, length int64) (io.ReadCloser, error) {
	end := d.size()
	if length >= 0 {
		end = min(end, offset+length)
	}
	return &rangeSource{d: d, off: offset, end: end}, nil
}

func (d *diskBlobs) path(key string) string {
	return filepath.Join(d.dir, strings.ReplaceAll(key, "/", "_"))
}

func (d *diskBlobs) Put(_ context.Context, key, _ string, body []byte) error {
	return os.WriteFile(d.path(key), body, 0o600)
}

func (d *diskBlobs) Get(_ context.Context, key string) ([]byte, error) {
	b, err := os.ReadFile(d.path(key))
	if os.IsNotExist(err) {
		return nil, batch.ErrNotFound
	}
	return b, err
}

func (d *diskBlobs) OpenRange(_ context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, offset, length), f}, nil
}

func (d *diskBlobs) List(_ context.Context, _, prefix string, fn func(batch.ObjectInfo) error) error {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	p := strings.ReplaceAll(prefix, "/", "_")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), p) {
			if err := fn(batch.ObjectInfo{Key: e.Name()}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *diskBlobs) DeletePrefix(_ context.Context, prefix string) (int, error) {
	n := 0
	err := d.List(context.Background(), "", prefix, func(o batch.ObjectInfo) error { n++; return os.Remove(filepath.Join(d.dir, o.Key)) })
	return n, err
}

func (d *diskBlobs) Delete(_ context.Context, key string) error { os.Remove(d.path(key)); return nil }

// Create keeps a manifest part's size only; other objects go to disk.
func (d *diskBlobs) Create(_ context.Context, key, _ string) (batch.BlobWriter, error) {
	if strings.Contains(key, "/manifest") {
		return &sizeWriter{d: d, key: key}, nil
	}
	f, err := os.Create(d.path(key))
	if err != nil {
		return nil, err
	}
	return &fileWriter{f}, nil
}

func (d *diskBlobs) Compose(_ context.Context, key, _ string, sources []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, s := range sources {
		n += d.sizes[s]
	}
	d.sizes[key] = n
	return nil
}

type sizeWriter struct {
	d   *diskBlobs
	key string
	n   int64
}

func (w *sizeWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
func (w *sizeWriter) Close() error {
	w.d.mu.Lock()
	w.d.sizes[w.key] = w.n
	w.d.mu.Unlock()
	return nil
}
func (w *sizeWriter) Abort() error { return nil }

type fileWriter struct{ f *os.File }

func (w *fileWriter) Write(p []byte) (int, error) { return w.f.Write(p) }
func (w *fileWriter) Close() error                { return w.f.Close() }
func (w *fileWriter) Abort() error                { w.f.Close(); return os.Remove(w.f.Name()) }

// BenchmarkSubmitParts runs the real read in parts (Complete, each part's
// read, each key partition's check, the assembly, the freeze and fan-out)
// over the in-memory store and a local object store (diskBlobs: a
// generated source of BULKRUN_SUBMIT_ROWS lines of ≈ 1 KB, default 10^6,
// read by byte ranges; keys, lengths and results on disk; manifest parts
// counted), one step after the other, each measured as the invocation it
// is on Lambda (wall, CPU, peak heap, memory held), under the Go memory
// limit of the submit function (1,024 MB). BULKRUN_SUBMIT_PART_BYTES sets
// the part size (default batch.DefaultPartBytes); BULKRUN_SUBMIT_PARTS_ONLY=k
// reads only the first k parts and stops (a source too large to read here
// whole: each part is the same work, so k parts measure it).
//
//	BULKRUN_SUBMIT_ROWS=10000000 go test -run '^$' -bench SubmitParts -benchtime 1x -timeout 60m -v ./shared/batch/
//	BULKRUN_SUBMIT_ROWS=100000000 BULKRUN_SUBMIT_PARTS_ONLY=3 go test -run '^$' -bench SubmitParts -benchtime 1x -timeout 60m -v ./shared/batch/
func BenchmarkSubmitParts(b *testing.B) {
	n := int64(1_000_000)
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_SUBMIT_ROWS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	var partBytes int64
	if v, err := strconv.ParseInt(os.Getenv("BULKRUN_SUBMIT_PART_BYTES"), 10, 64); err == nil && v > 0 {
		partBytes = v
	}
	only, _ := strconv.Atoi(os.Getenv("BULKRUN_SUBMIT_PARTS_ONLY"))
	shownPart := partBytes
	if shownPart == 0 {
		shownPart = batch.DefaultPartBytes
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1024 << 20 * 9 / 10))
	ctx := context.Background()
	for b.Loop() {
		dir := b.TempDir()
		blobs := newDiskBlobs(dir, n)
		steps := &partSteps{}
		store := memstore.New()
		queue := &countQueue{}
		s := &batch.Submitter{Store: store, Blobs: blobs, Queue: queue, Trigger: &memTrigger{}, Handoff: nopHandoff{},
			Clock: batch.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Pipelines: []string{"p"},
			MaxAttempts: 3, TempDir: filepath.Join(dir, "tmp"), Parts: &batch.PartsConfig{PartBytes: partBytes, Handoff: steps}}
		if err := os.Mkdir(s.TempDir, 0o700); err != nil {
			b.Fatal(err)
		}
		req := batch.SubmitRequest{BatchID: "gen", Pipeline: "p", KeyField: "key", Source: batch.SourceSpec{Object: "s3://source/items.jsonl"}}
		if _, err := s.Accept(ctx, req); err != nil {
			b.Fatal(err)
		}
		m := batch.StartStep()
		if _, err := s.Complete(ctx, "gen"); err != nil {
			b.Fatal(err)
		}
		f := m.End()
		reads := steps.take()
		b.Logf("source %d items, %.1f GB, %d parts of %d MiB; plan and hand-off: %s", n, float64(blobs.size())/1e9, len(reads), shownPart>>20, f.Wall.Round(time.Millisecond))
		var sumRead, maxRead batch.StepFigures
		ran := 0
		for i, ev := range reads {
			if only > 0 && i >= only {
				break
			}
			m := batch.StartStep()
			if _, err := s.Part(ctx, ev); err != nil {
				b.Fatal(err)
			}
			f := m.End()
			ran++
			b.Logf("part %d: %s wall, %s CPU, peak heap %.1f MiB, held %.1f MiB", ev.Index, f.Wall.Round(time.Millisecond), f.CPU.Round(time.Millisecond), f.HeapMiB, f.HeldMiB)
			sumRead.Add(f)
			maxRead.Max(f)
		}
		b.Logf("reads: %d parts, mean %s wall, %s CPU; peak heap %.1f MiB, held %.1f MiB at most",
			ran, (sumRead.Wall / time.Duration(ran)).Round(time.Millisecond), (sumRead.CPU / time.Duration(ran)).Round(time.Millisecond), maxRead.HeapMiB, maxRead.HeldMiB)
		b.ReportMetric(sumRead.CPU.Seconds()/float64(ran), "cpu-s/part")
		b.ReportMetric(sumRead.Wall.Seconds()/float64(ran), "wall-s/part")
		b.ReportMetric(maxRead.HeldMiB, "part-held-MiB")
		if only > 0 && only < len(reads) {
			continue
		}
		checks := steps.take()
		var sumCheck, maxCheck batch.StepFigures
		for i, ev := range checks {
			m := batch.StartStep()
			bt, err := s.Part(ctx, ev)
			if err != nil {
				b.Fatal(err)
			}
			f := m.End()
			what := "check"
			if i == len(checks)-1 {
				what = "check + assembly, freeze, fan-out"
				if bt.Status != batch.StatusRunning || bt.ItemCount != n {
					b.Fatalf("batch %s with %d items, want running with %d", bt.Status, bt.ItemCount, n)
				}
				b.Logf("%s %d: %s wall, %s CPU, peak heap %.1f MiB, held %.1f MiB; %d chunks, %d fan-out messages, manifest %.1f GB",
					what, ev.Index, f.Wall.Round(time.Millisecond), f.CPU.Round(time.Millisecond), f.HeapMiB, f.HeldMiB, bt.Chunks, queue.n.Load(), float64(bt.ManifestBytes)/1e9)
				b.ReportMetric(f.Wall.Seconds(), "last-check-wall-s")
				b.ReportMetric(f.HeldMiB, "last-check-held-MiB")
				break
			}
			sumCheck.Add(f)
			maxCheck.Max(f)
		}
		if k := len(checks) - 1; k > 0 {
			b.Logf("checks: %d, mean %s wall, %s CPU; peak heap %.1f MiB, held %.1f MiB at most",
				k, (sumCheck.Wall / time.Duration(k)).Round(time.Millisecond), (sumCheck.CPU / time.Duration(k)).Round(time.Millisecond), maxCheck.HeapMiB, maxCheck.HeldMiB)
			b.ReportMetric(sumCheck.CPU.Seconds()/float64(k), "cpu-s/check")
			b.ReportMetric(maxCheck.HeldMiB, "check-held-MiB")
		}
	}
}

// countQueue counts the fan-out messages and keeps none.
type countQueue struct{ n atomic.Int64 }

func (q *countQueue) Send(_ context.Context, bodies [][]byte) error {
	q.n.Add(int64(len(bodies)))
	return nil
}
func (q *countQueue) Requeue(context.Context, []byte, time.Duration) error { return nil }
func (q *countQueue) Delay(context.Context, string, time.Duration) error   { return nil }

func (d *diskBlobs) Open(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	if bucket == "source" {
		return d.OpenSourceRange(ctx, bucket, key, "", 0, -1)
	}
	f, err := os.Open(d.path(key))
	if os.IsNotExist(err) {
		return nil, batch.ErrNotFound
	}
	return f, err
}
