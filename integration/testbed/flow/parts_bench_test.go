package flow

import (
	"context"
	"errors"
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

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/integration/testbed/peak"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// diskBlobs is a local object store for the parts benchmark: the source is
// genSource's lines made for any byte range (every line has the same
// length), or, in CSV, a header and rows of one length each holding a
// quoted newline and doubled quotes; the manifest parts are hashed and
// counted, not kept, and every other object (plans, keys, line lengths,
// results) is a file on disk.
type diskBlobs struct {
	ledger.Blobs
	dir     string
	n       int64 // source items
	pad     string
	head    string // CSV: the header line
	csv     bool
	lineLen int64
	mu      sync.Mutex
	sizes   map[string]int64 // manifest parts and composed objects: size only
}

func newDiskBlobs(dir string, n int64, csv bool) *diskBlobs {
	pad := fmt.Sprintf("%0880d", 0)
	d := &diskBlobs{dir: dir, n: n, pad: pad, csv: csv, sizes: map[string]int64{}}
	if csv {
		d.head = "key,text\r\n"
	}
	d.lineLen = int64(len(d.line(nil, 0)))
	return d
}

// line appends item i of the source to buf.
func (d *diskBlobs) line(buf []byte, i int64) []byte {
	if d.csv {
		return fmt.Appendf(buf, "%0100d-%09d,\"%s\n\"\"q\"\" %s\"\r\n", 0, i, d.pad[:440], d.pad[:430])
	}
	return fmt.Appendf(buf, `{"key":"%0100d-%09d","text":"%s"}`+"\n", 0, i, d.pad)
}

func (d *diskBlobs) Bucket() string { return "batches" }

func (d *diskBlobs) size() int64 { return int64(len(d.head)) + d.n*d.lineLen }

func (d *diskBlobs) HeadSource(context.Context, string, string) (source.ObjectInfo, error) {
	return source.ObjectInfo{Size: d.size(), ETag: "gen"}, nil
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
	if h := int64(len(r.d.head)); len(r.buf) == 0 && r.off < h {
		r.buf = append(r.buf[:0], r.d.head[r.off:]...)
	} else if len(r.buf) == 0 {
		i := (r.off - h) / r.d.lineLen
		r.buf = r.d.line(r.buf[:0], i)
		r.buf = r.buf[(r.off-h)%r.d.lineLen:]
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

func (d *diskBlobs) PutIfAbsent(_ context.Context, key, _ string, body []byte) error {
	f, err := os.OpenFile(d.path(key), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if os.IsExist(err) {
		return api.ErrConflict
	}
	if err != nil {
		return err
	}
	_, err = f.Write(body)
	return errors.Join(err, f.Close())
}

func (d *diskBlobs) Get(_ context.Context, key string) ([]byte, error) {
	b, err := os.ReadFile(d.path(key))
	if os.IsNotExist(err) {
		return nil, api.ErrNotFound
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

func (d *diskBlobs) List(_ context.Context, _, prefix string, fn func(source.ObjectInfo) error) error {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	p := strings.ReplaceAll(prefix, "/", "_")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), p) {
			// The stack's keys hold no '_': the file name's are its '/'.
			if err := fn(source.ObjectInfo{Key: strings.ReplaceAll(e.Name(), "_", "/")}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *diskBlobs) DeletePrefix(_ context.Context, prefix string) (int, error) {
	n := 0
	err := d.List(context.Background(), "", prefix, func(o source.ObjectInfo) error { n++; return os.Remove(d.path(o.Key)) })
	return n, err
}

func (d *diskBlobs) Delete(_ context.Context, key string) error { os.Remove(d.path(key)); return nil }

// Create keeps a manifest part's size only; other objects go to disk.
func (d *diskBlobs) Create(_ context.Context, key, _ string) (ledger.BlobWriter, error) {
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

func (w *fileWriter) Close() error { return w.f.Close() }

func (w *fileWriter) Abort() error { w.f.Close(); return os.Remove(w.f.Name()) }

// BenchmarkSubmitParts runs the real read in parts (Complete, each part's
// count (positional keys), read and re-read (CSV), each key partition's
// check, the assembly, the freeze and fan-out) over the in-memory store
// and a local object store (diskBlobs: a generated source of
// BULKRUN_SUBMIT_ROWS items of ≈ 1 KB, default 10^6, read by byte ranges;
// keys, lengths and results on disk; manifest parts counted), one step
// after the other, each measured as the invocation it is on Lambda (wall,
// CPU, peak heap, memory held), under the Go memory limit of the submit
// function (1,024 MB). BULKRUN_SUBMIT_FORMAT=csv reads CSV rows (a quoted
// newline and doubled quotes in each) instead of JSON Lines;
// BULKRUN_SUBMIT_POSITIONAL=1 reads without key field.
// BULKRUN_SUBMIT_PART_BYTES sets the part size (default
// submit.DefaultPartBytes); BULKRUN_SUBMIT_PARTS_ONLY=k runs only the
// first k steps handed off first and stops (a source too large to read
// here whole: each part is the same work, so k parts measure it).
//
//	BULKRUN_SUBMIT_ROWS=10000000 go test -run '^$' -bench SubmitParts -benchtime 1x -timeout 60m -v ./integration/testbed/flow/
//	BULKRUN_SUBMIT_ROWS=100000000 BULKRUN_SUBMIT_PARTS_ONLY=3 go test -run '^$' -bench SubmitParts -benchtime 1x -timeout 60m -v ./integration/testbed/flow/
//	BULKRUN_SUBMIT_FORMAT=csv BULKRUN_SUBMIT_ROWS=1500000 go test -run '^$' -bench SubmitParts -benchtime 1x -timeout 60m -v ./integration/testbed/flow/
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
	csv := os.Getenv("BULKRUN_SUBMIT_FORMAT") == "csv"
	keyField := "key"
	if os.Getenv("BULKRUN_SUBMIT_POSITIONAL") == "1" {
		keyField = ""
	}
	shownPart := partBytes
	if shownPart == 0 {
		shownPart = submit.DefaultPartBytes
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1024 << 20 * 9 / 10))
	ctx := context.Background()
	for b.Loop() {
		dir := b.TempDir()
		blobs := newDiskBlobs(dir, n, csv)
		steps := &partSteps{}
		store := memstore.NewStore()
		queue := &countQueue{}
		s := &submit.Submitter{Store: store, Blobs: blobs, Queue: queue, Trigger: &memTrigger{}, Handoff: nopHandoff{},
			Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Pipelines: []string{"p"},
			MaxAttempts: 3, TempDir: filepath.Join(dir, "tmp"), Parts: &submit.PartsConfig{PartBytes: partBytes, Handoff: steps}}
		if err := os.Mkdir(s.TempDir, 0o700); err != nil {
			b.Fatal(err)
		}
		object := "s3://source/items.jsonl"
		if csv {
			object = "s3://source/items.csv"
		}
		req := api.SubmitRequest{BatchID: "gen", Pipeline: "p", KeyField: keyField, Source: api.SourceSpec{Object: object}}
		if _, err := s.Accept(ctx, req); err != nil {
			b.Fatal(err)
		}
		m := peak.StartStep()
		if _, err := s.Complete(ctx, "gen"); err != nil {
			b.Fatal(err)
		}
		f := m.End()
		b.Logf("source %d items, %.1f GB, csv %v, key field %q, parts of %d MiB; plan and hand-off: %s, %s CPU",
			n, float64(blobs.size())/1e9, csv, keyField, shownPart>>20, f.Wall.Round(time.Millisecond), f.CPU.Round(time.Millisecond))
		var last ledger.Batch
		for round := 0; ; round++ {
			evs := steps.take()
			if len(evs) == 0 {
				break
			}
			var sum, most peak.StepFigures
			ran := 0
			kind := evs[0].Step
			if kind == ledger.PartStepRead && evs[0].Start != source.PartStartUnknown {
				kind = "read knowing its start"
			}
			for i, ev := range evs {
				if only > 0 && i >= only {
					break
				}
				m := peak.StartStep()
				bt, err := s.Part(ctx, ev)
				if err != nil {
					b.Fatal(err)
				}
				f := m.End()
				if bt.Status == api.StatusRunning {
					last = bt
					b.Logf("%s %d, then the assembly, freeze and fan-out: %s wall, %s CPU, peak heap %.1f MiB, held %.1f MiB; %d chunks, %d fan-out messages, manifest %.1f GB",
						kind, ev.Index, f.Wall.Round(time.Millisecond), f.CPU.Round(time.Millisecond), f.HeapMiB, f.HeldMiB, bt.Chunks, queue.n.Load(), float64(bt.ManifestBytes)/1e9)
					b.ReportMetric(f.Wall.Seconds(), "last-step-wall-s")
					b.ReportMetric(f.HeldMiB, "last-step-held-MiB")
					continue
				}
				ran++
				if kind != ledger.PartStepKeys {
					b.Logf("%s %d: %s wall, %s CPU, peak heap %.1f MiB, held %.1f MiB", kind, ev.Index, f.Wall.Round(time.Millisecond), f.CPU.Round(time.Millisecond), f.HeapMiB, f.HeldMiB)
				}
				sum.Add(f)
				most.Max(f)
			}
			if ran > 0 {
				b.Logf("%s: %d steps, mean %s wall, %s CPU; peak heap %.1f MiB, held %.1f MiB at most",
					kind, ran, (sum.Wall / time.Duration(ran)).Round(time.Millisecond), (sum.CPU / time.Duration(ran)).Round(time.Millisecond), most.HeapMiB, most.HeldMiB)
				unit := strings.ReplaceAll(kind, " ", "-")
				b.ReportMetric(sum.CPU.Seconds()/float64(ran), "cpu-s/"+unit)
				b.ReportMetric(most.HeldMiB, unit+"-held-MiB")
			}
			if only > 0 && only < len(evs) {
				break
			}
		}
		if only == 0 && (last.Status != api.StatusRunning || last.ItemCount != n) {
			bt, err := store.GetBatch(ctx, "gen")
			b.Fatalf("batch %s with %d items (refusal %+v, %v), want running with %d", bt.Status, bt.ItemCount, bt.Refusal, err, n)
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

func (q *countQueue) Delay(context.Context, string, time.Duration) error { return nil }

func (d *diskBlobs) Open(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	if bucket == "source" {
		return d.OpenSourceRange(ctx, bucket, key, "", 0, -1)
	}
	f, err := os.Open(d.path(key))
	if os.IsNotExist(err) {
		return nil, api.ErrNotFound
	}
	return f, err
}
