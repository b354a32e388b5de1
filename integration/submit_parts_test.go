//go:build integration

package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// asyncParts runs each handed-off part step in its own goroutine, as
// Lambda runs each asynchronous invocation in its own environment, and
// runs a failed step once more (Lambda retries an asynchronous invocation
// twice). sub gives the submitter of a step's run (attempt 0 or 1).
type asyncParts struct {
	sub  func(ev ledger.PartEvent, attempt int) *submit.Submitter
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	runs map[ledger.PartEvent]int
}

func (a *asyncParts) StartPart(_ context.Context, ev ledger.PartEvent) error {
	a.wg.Go(func() {
		for attempt := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			a.mu.Lock()
			a.runs[ev]++
			a.mu.Unlock()
			_, err := a.sub(ev, attempt).Part(ctx, ev)
			cancel()
			if err == nil {
				return
			}
			if attempt == 1 {
				a.mu.Lock()
				a.errs = append(a.errs, fmt.Errorf("%+v: %w", ev, err))
				a.mu.Unlock()
			}
		}
	})
	return nil
}

// killedBlobs fails the write of a part's result: the part dies after
// its manifest part, keys and lengths are written.
type killedBlobs struct {
	*blob.Store
}

func (k killedBlobs) Put(ctx context.Context, key, contentType string, body []byte) error {
	if strings.Contains(key, "/parts/") && strings.Contains(key, "/part-") {
		return errors.New("killed before its result was written")
	}
	return k.Store.Put(ctx, key, contentType, body)
}

type nopSubmitHandoff struct{}

func (nopSubmitHandoff) StartSubmit(context.Context, string) error { return nil }

// hashObject returns the hex SHA-256 and size of an object of the
// harness's bucket.
func hashObject(t *testing.T, h *harness, key string) (string, int64) {
	t.Helper()
	rc, err := h.blobs.Open(context.Background(), h.blobs.Bucket(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, rc)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(sum.Sum(nil)), n
}

// TestSubmitInParts reads a JSON Lines object of BULKRUN_SUBMIT_PART_ITEMS
// items of ~1 KB (default 24,000, ≈ 25 MB) in parts of 6 MiB on the
// emulator's S3 through the real S3 adapter (ranged GETs with If-Match,
// streaming multipart writes, the manifest assembled by UploadPartCopy),
// each part and key check a goroutine of its own, the first run of part 1
// killed before it writes its result and run again. The batch is frozen with the
// manifest a whole read of the object writes, byte for byte, the same
// item count and chunks; the parts' objects are deleted; all the steps
// together, in this process, hold less than 256 MiB. Under the IAM lane
// every call is checked against the submit function's role.
func TestSubmitInParts(t *testing.T) {
	n := envCount("BULKRUN_SUBMIT_PART_ITEMS", 24_000)
	h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	id := newID(t)
	pad := strings.Repeat("p", 900)
	src := putSource(t, h, id, n, func(bw *bufio.Writer, i int64) {
		if i%1000 == 999 {
			bw.WriteString("\n") // blank lines keep their numbers
		}
		fmt.Fprintf(bw, `{"id":"order-%010d","customer":"c-%06d","note":"%s"}`+"\n", (i*7919)%n, i%7919, pad)
	})

	got := partsOnEmulator(t, h, id, src, "id", n, func(ev ledger.PartEvent) bool { return ev.Index == 1 })
	// Every step ran at once in this one process, so one invocation held
	// less than this.
	if got.heldMiB >= 256 {
		t.Fatalf("the steps held %.1f MiB together, want < 256 MiB", got.heldMiB)
	}
}

// TestSubmitCSVInParts reads a CSV object of 20,000 rows of ~1 KB (≈ 21
// MB; a byte-order mark, CRLF, a note in quotes over 16 lines with
// doubled quotes) in parts of 6 MiB on the emulator's S3 through the real
// S3 adapter, keyed by its id column and then by position. Keyed, almost
// every boundary falls inside a quoted note, after one of its newlines:
// the part guesses a record starts there, the assembly finds from the
// quote parities of the parts before it that it does not, and the part is
// read again from inside the quotes (the first run of each such read
// killed before its result and run again). By position, every part is
// counted first and read once, knowing its start and first index (the
// first run of part 1's read killed). Each batch is frozen with the
// manifest a whole read writes, byte for byte, the same items and chunks,
// and the parts' objects are deleted.
func TestSubmitCSVInParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20_000
	h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	id := newID(t)
	srcKey := "incoming/" + id + ".csv"
	w, err := h.blobs.Create(ctx, srcKey, "text/csv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.blobs.Delete(context.Background(), srcKey)
		h.blobs.DeletePrefix(context.Background(), "batches/"+id)
	})
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.WriteString("\xEF\xBB\xBFid,customer,note\r\n")
	line := strings.Repeat("n", 50) + ` ""q"", ` + "\n"
	for i := range n {
		fmt.Fprintf(bw, "order-%010d,c-%06d,\"%s%d\"\r\n", (i*7919)%n, i%7919, strings.Repeat(line, 16), i)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	src := api.SourceSpec{Object: "s3://" + h.blobs.Bucket() + "/" + srcKey}
	t.Run("key_field", func(t *testing.T) {
		got := partsOnEmulator(t, h, id+"-k", src, "id", n, func(ev ledger.PartEvent) bool { return ev.Start != source.PartStartUnknown })
		if got.known == 0 {
			t.Fatal("no part was read again from inside a quoted field")
		}
	})
	t.Run("positional", func(t *testing.T) {
		partsOnEmulator(t, h, id+"-p", src, "", n, func(ev ledger.PartEvent) bool { return ev.Index == 1 })
	})
}

// partsRun is what partsOnEmulator saw: the reads that knew their start
// (re-reads, or a positional source's reads), and the peak Go heap and
// memory held by the process while every step ran.
type partsRun struct {
	known            int
	heapMiB, heldMiB float64
}

// partsOnEmulator submits src in parts of 6 MiB as batch id, each step a
// goroutine, the first run of each read that kill names killed before its
// result and run again, and compares the batch with a whole read's.
func partsOnEmulator(t *testing.T, h *harness, id string, src api.SourceSpec, keyField string, n int64, kill func(ledger.PartEvent) bool) partsRun {
	ctx := context.Background()
	whole := *h.submitter
	whole.ChunkItems = 0
	ref, err := whole.Submit(ctx, api.SubmitRequest{BatchID: id + "-whole", Pipeline: "counted", KeyField: keyField, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	runner := &asyncParts{runs: map[ledger.PartEvent]int{}}
	s := *h.submitter
	s.ChunkItems = 0
	s.Handoff = nopSubmitHandoff{}
	s.Parts = &submit.PartsConfig{PartBytes: 6 << 20, Handoff: runner}
	killed := s
	killed.Blobs = killedBlobs{h.fn["submit"].blobs}
	runner.sub = func(ev ledger.PartEvent, attempt int) *submit.Submitter {
		if ev.Step == ledger.PartStepRead && kill(ev) && attempt == 0 {
			return &killed
		}
		return &s
	}
	if _, err := s.Accept(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: keyField, Source: src}); err != nil {
		t.Fatal(err)
	}
	peak := startMemoryPeak()
	start := time.Now()
	if b, err := s.Complete(ctx, id); err != nil || b.Status != api.StatusSubmitting {
		t.Fatalf("Complete: %s %v, want submitting with its parts handed off", b.Status, err)
	}
	runner.wg.Wait()
	took := time.Since(start)
	var got partsRun
	got.heapMiB, got.heldMiB = peak.end()
	if err := errors.Join(runner.errs...); err != nil {
		t.Fatal(err)
	}
	b, err := h.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != api.StatusRunning || b.ItemCount != n || !b.FannedOut {
		t.Fatalf("after the parts: %s, %d items, fanned out %v (refusal %+v); want running, %d", b.Status, b.ItemCount, b.FannedOut, b.Refusal, n)
	}
	gotSum, gotLen := hashObject(t, h, b.ManifestKey)
	wantSum, wantLen := hashObject(t, h, ref.Batch.ManifestKey)
	if gotSum != wantSum || gotLen != wantLen || b.Chunks != ref.Batch.Chunks || b.ManifestBytes != ref.Batch.ManifestBytes {
		t.Fatalf("manifest by parts: %d bytes, %d chunks, sha256 %s; whole read: %d bytes, %d chunks, sha256 %s", gotLen, b.Chunks, gotSum, wantLen, ref.Batch.Chunks, wantSum)
	}
	if fmt.Sprint(b.CSV) != fmt.Sprint(ref.Batch.CSV) || strings.HasSuffix(src.Object, ".csv") && (b.CSV == nil || len(b.CSV.Header) == 0) {
		t.Errorf("CSV shape by parts %+v, whole read %+v: want the same, kept", b.CSV, ref.Batch.CSV)
	}
	var parts, killedRuns int
	for ev, runs := range runner.runs {
		switch {
		case ev.Step != ledger.PartStepRead:
		case ev.Start == source.PartStartUnknown:
			parts++
		default:
			got.known++
		}
		if ev.Step == ledger.PartStepRead && kill(ev) {
			killedRuns++
			if runs != 2 {
				t.Fatalf("read %+v ran %d times, want 2 (killed, then run again)", ev, runs)
			}
		}
	}
	if killedRuns == 0 {
		t.Fatal("no read was killed")
	}
	left := 0
	_ = h.blobs.List(ctx, h.blobs.Bucket(), "batches/"+id+"/parts/", func(source.ObjectInfo) error { left++; return nil })
	if left != 0 {
		t.Fatalf("%d objects of the parts left", left)
	}
	t.Logf("%d items, %d MB: %d parts read guessing their start, %d reads knowing it (%d killed once): running after %s; manifest %s, %d chunks; every step at once in this process: peak heap %.1f MiB, held %.1f MiB",
		n, gotLen>>20, parts, got.known, killedRuns, took.Round(time.Millisecond), gotSum[:12], b.Chunks, got.heapMiB, got.heldMiB)
	return got
}
