package finalize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// The merge of a run read in parts, split by key ranges. The parts' sorted
// runs hold every result line of the run; merging them all in one call
// streams every line through one function (≈ 110 GB for 10^8 items of
// ~1 KB outputs, ≈ 18 minutes at an assumed 100 MB/s). Instead, when the
// runs hold more than Finalizer.MergeRangeBytes (1 GiB), the call that
// wrote the counted checkpoint (mergeParts) splits the keys into ranges
// of about that many bytes and each range is merged by a call of its
// own, all at once:
//
//  1. The plan. Each part's run carries an index: the key and offset of
//     its first record at or past every RunMarkBytes (1 MiB). The
//     counted checkpoint names the ranges: for range r its first key
//     (Lo), the key it stops before (Hi; "" for none) and, per run, the
//     offset of its last mark at or before Lo — where the range's read of
//     that run starts (it skips the few records below Lo).
//  2. A range (FinalizeRange, started like a part, or read by the
//     planning call itself when Finalizer.Parts is nil) merges the runs'
//     records in [Lo, Hi) and writes each outcome's lines as one object
//     of its own (a piece, named by a token), then its result
//     (ranges/{checkpoint}/{r}.json: its pieces and its line count),
//     If-None-Match. A range killed or run twice leaves at most an
//     unnamed piece; a range whose result exists is not read again; a
//     range lost for good is started again by the run's next call once
//     its mark has passed, as a part is.
//  3. The call that finds every range's result (the last range, or any
//     later call of the run) composes each outcome's results file from
//     the pieces in range order, copied inside S3 (UploadPartCopy, up to
//     5 GiB a part); a piece under S3's 5 MiB least part is read and sent
//     with its neighbours, so every part but the last holds at least
//     5 MiB. The lines of the ranges must add up to the rows counted. It
//     then writes the checkpoint marked done with those uploads
//     (If-None-Match; of two calls that compose at once one wins, the
//     other's upload is never completed and the bucket's lifecycle rule
//     removes it after a day), and the report follows as for any run.
//
// Same lines in the same key order: the results files are byte for byte
// those of a single pass (TestFinalizeInRangesIsTheSinglePass).

// Bounds of the merge split by key ranges.
const (
	// DefaultMergeRangeBytes is how many bytes of the parts' sorted runs
	// one range of the merge is planned to read: 1 GiB, ≈ 11 s at an
	// assumed 100 MB/s of S3 to one function (docs/design/cost.md, "Time
	// to result"). Runs of fewer than twice as many bytes are merged by
	// one call.
	DefaultMergeRangeBytes = 1 << 30
	// MaxMergeRanges bounds a merge's ranges (and so its calls at once
	// and the pieces of a results file): 256.
	MaxMergeRanges = 256
	// RunMarkBytes is how far apart a part's run index marks its
	// records: 1 MiB, so that a range's read of a run starts on average
	// half a MiB before its first key (≈ 5 % more than its ≈ 10 MiB of
	// each of 100 runs at 10^8 items), for ≈ 10^5 marks (≈ 60 KB of JSON
	// per part, 10 MB held by the planning call) at 10^8 items of ~1 KB
	// outputs.
	RunMarkBytes = 1 << 20
	// minPartBytes is S3's least part of a multipart upload but the last
	// (S3 user guide, "Amazon S3 multipart upload limits").
	minPartBytes = 5 << 20
	// maxCopyPartBytes is the most one UploadPartCopy copies: 5 GiB (the
	// same limits).
	maxCopyPartBytes = 5 << 30
)

// copyPartBytes is the most composeFile copies in one part:
// maxCopyPartBytes (tests lower it, never under twice minPartBytes: a
// piece's last two copies are split so that both keep a part's least).
var copyPartBytes int64 = maxCopyPartBytes

// FinalizeRanges starts the call of one key range of a run's merge: the
// finalize function invoking itself asynchronously (trigger.Lambda), as
// a part is started. chain is the range's call's place in its chain.
type FinalizeRanges interface {
	StartFinalizeRange(ctx context.Context, batchID string, run, checkpoint, rng, chain int) error
}

// mergeRange is one key range of a merge split by key ranges.
type mergeRange struct {
	Lo []byte `json:"lo,omitempty"` // its first key; none: from the first
	Hi []byte `json:"hi,omitempty"` // the key it stops before; none: to the last
	// From is, per run of the checkpoint, the offset its read starts at.
	From []int64 `json:"from"`
	// Bytes is at most how many bytes of the runs it reads.
	Bytes int64 `json:"bytes"`
}

// rangeResult is what one range of the merge wrote.
type rangeResult struct {
	Range  int                        `json:"range"`
	Lines  int64                      `json:"lines"`
	Pieces map[api.Outcome]rangePiece `json:"pieces"`
}

// rangePiece is one outcome's lines of one range: an object of its own.
type rangePiece struct {
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"`
}

func rangesPrefix(id string, run, seq int) string {
	return FinalizePrefix(id, run) + fmt.Sprintf("ranges/%06d/", seq)
}

func rangeResultKey(id string, run, seq, r int) string {
	return rangesPrefix(id, run, seq) + fmt.Sprintf("%04d.json", r)
}

func rangeMarkKey(id string, run, seq, r int) string {
	return rangesPrefix(id, run, seq) + fmt.Sprintf("%04d.active", r)
}

func rangePieceKey(id string, run, seq, r int, token string, o api.Outcome) string {
	return rangesPrefix(id, run, seq) + fmt.Sprintf("%04d-%s.%s.piece", r, token, o)
}

func (f *Finalizer) mergeRangeBytes() int64 {
	if f.MergeRangeBytes > 0 {
		return f.MergeRangeBytes
	}
	return DefaultMergeRangeBytes
}

func (f *Finalizer) runMarkBytes() int64 {
	if f.RunMarkBytes > 0 {
		return f.RunMarkBytes
	}
	return RunMarkBytes
}

// planRanges splits the keys of runs (each with its index in marks) into
// ranges of about mergeRangeBytes of the runs each; nil when the runs are
// fewer than twice as many bytes, or a run has no index (written by a
// release without one): one call merges them.
func (f *Finalizer) planRanges(runs []sortRun, marks [][]runMark) []mergeRange {
	var total int64
	for j, r := range runs {
		if len(marks[j]) == 0 {
			return nil
		}
		total += r.Bytes
	}
	n := int(min(int64(MaxMergeRanges), total/f.mergeRangeBytes()))
	if n < 2 {
		return nil
	}
	type weighted struct {
		key []byte
		w   int64 // bytes from the mark to the run's next mark
	}
	var all []weighted
	for j, ms := range marks {
		for i, m := range ms {
			end := runs[j].Bytes
			if i+1 < len(ms) {
				end = ms[i+1].Off
			}
			all = append(all, weighted{m.Key, end - m.Off})
		}
	}
	slices.SortFunc(all, func(a, b weighted) int { return bytes.Compare(a.key, b.key) })
	var bounds [][]byte
	var cum int64
	k := int64(1)
	for _, m := range all {
		if k < int64(n) && cum >= k*total/int64(n) {
			if len(bounds) == 0 || bytes.Compare(m.key, bounds[len(bounds)-1]) > 0 {
				bounds = append(bounds, m.key)
			}
			for k < int64(n) && cum >= k*total/int64(n) {
				k++
			}
		}
		cum += m.w
	}
	if len(bounds) == 0 {
		return nil
	}
	ranges := make([]mergeRange, len(bounds)+1)
	for r := range ranges {
		var lo, hi []byte
		if r > 0 {
			lo = bounds[r-1]
		}
		if r < len(bounds) {
			hi = bounds[r]
		}
		rng := mergeRange{Lo: lo, Hi: hi, From: make([]int64, len(runs))}
		for j, ms := range marks {
			from, to := int64(0), runs[j].Bytes
			if lo != nil {
				// The last mark at or before lo: the records before it are
				// below lo.
				if i := sort.Search(len(ms), func(i int) bool { return bytes.Compare(ms[i].Key, lo) > 0 }); i > 0 {
					from = ms[i-1].Off
				}
			}
			if hi != nil {
				// The first mark at or past hi: the records from it are not
				// in the range.
				if i := sort.Search(len(ms), func(i int) bool { return bytes.Compare(ms[i].Key, hi) >= 0 }); i < len(ms) {
					to = ms[i].Off
				}
			}
			rng.From[j] = from
			rng.Bytes += max(to-from, 0)
		}
		ranges[r] = rng
	}
	return ranges
}

// mergeInRanges is a call of a run whose merge is split by key ranges
// (cp counted, with its ranges): it starts every range without result
// that no call works on (Parts; without it, reads them itself), and once
// every range has its result composes the results files and returns the
// checkpoint marked done. Otherwise no checkpoint: its answer.
func (f *Finalizer) mergeInRanges(ctx context.Context, b ledger.Batch, cp *checkpoint, chain int) (*checkpoint, FinalizeResult, error) {
	done, n, err := f.listed(ctx, rangesPrefix(b.ID, b.Run, cp.Seq), len(cp.Ranges))
	if err != nil {
		return nil, FinalizeResult{}, fmt.Errorf("finalize %s run %d: ranges: %w", b.ID, b.Run, err)
	}
	if n < len(cp.Ranges) {
		starter, ok := f.Parts.(FinalizeRanges)
		if !ok {
			for r := range cp.Ranges {
				if !done[r] {
					if err := f.runRange(ctx, b, cp, r); err != nil {
						return nil, FinalizeResult{}, fmt.Errorf("finalize %s run %d range %d: %w", b.ID, b.Run, r, err)
					}
				}
			}
		} else {
			if gone, err := f.runGone(ctx, b.ID, b.Run); gone || err != nil {
				// Finished since this call read its row: the listing may
				// have missed results the finish deleted; start nothing.
				return nil, FinalizeResult{Parted: true}, err
			}
			started, err := f.startCalls(ctx, b.ID, b.Run, done, func(r int) string { return rangeMarkKey(b.ID, b.Run, cp.Seq, r) },
				func(r int) error { return starter.StartFinalizeRange(ctx, b.ID, b.Run, cp.Seq, r, chain+1) })
			if err != nil {
				return nil, FinalizeResult{}, fmt.Errorf("finalize %s run %d: start ranges: %w", b.ID, b.Run, err)
			}
			if started > 0 {
				f.Log.InfoContext(ctx, "finalize in ranges: ranges started", "batch_id", b.ID, "run", b.Run, "ranges", len(cp.Ranges), "started", started, "done", n)
			}
			return nil, FinalizeResult{Continued: true, Parted: true}, nil
		}
	}
	doneCP, err := f.composeRanges(ctx, b, cp)
	switch {
	case errors.Is(err, api.ErrConflict):
		// Another call composed them first: go on from its checkpoint.
		doneCP, err = f.loadCheckpoint(ctx, b.ID, b.Run)
		if err == nil && (doneCP == nil || !doneCP.Done) {
			return nil, FinalizeResult{Continued: true, Parted: true}, nil
		}
	case err == nil:
		// This call's checkpoint was written; a call that composed first
		// and finished the run meanwhile deleted its own with the prefix
		// (after moving the row): then this one is late and completes
		// nothing — the results file stays the one reported.
		if gone, gerr := f.runGone(ctx, b.ID, b.Run); gone || gerr != nil {
			if gone {
				_ = f.Blobs.Delete(ctx, checkpointKey(b.ID, b.Run, doneCP.Seq))
			}
			return nil, FinalizeResult{Parted: true}, gerr
		}
		f.Log.InfoContext(ctx, "finalize in ranges: results composed", "batch_id", b.ID, "run", b.Run, "ranges", len(cp.Ranges), "rows", cp.Rows)
	}
	if err != nil {
		return nil, FinalizeResult{}, fmt.Errorf("finalize %s run %d: compose ranges: %w", b.ID, b.Run, err)
	}
	return doneCP, FinalizeResult{}, nil
}

// listed lists which of n calls' results ({i}.json, four digits) are
// under prefix, and how many.
func (f *Finalizer) listed(ctx context.Context, prefix string, n int) ([]bool, int, error) {
	done, count := make([]bool, n), 0
	err := f.Blobs.List(ctx, f.Blobs.Bucket(), prefix, func(o source.ObjectInfo) error {
		name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ".json")
		var i int
		if _, err := fmt.Sscanf(name, "%04d", &i); ok && err == nil && len(name) == 4 && i < n && !done[i] {
			done[i] = true
			count++
		}
		return nil
	})
	return done, count, err
}

// FinalizeRange merges range rng of the merge planned by checkpoint seq
// of run of batch id (the call mergeInRanges started) and, when every
// range has its result, composes the results and finishes the run (the
// result and errors are Finalize's). A range of a checkpoint replaced
// since, of a run finished or superseded, or of a batch gone does
// nothing. Idempotent: a range whose result exists is not read again.
func (f *Finalizer) FinalizeRange(ctx context.Context, id string, run, seq, rng int) (FinalizeResult, error) {
	res, err := f.finalizeRange(ctx, id, run, seq, rng, 0)
	return f.answer(ctx, id, run, res, err)
}

func (f *Finalizer) finalizeRange(ctx context.Context, id string, run, seq, rng, chain int) (FinalizeResult, error) {
	b, running, err := f.running(ctx, id, run)
	if err != nil || !running {
		return FinalizeResult{Parted: true}, err
	}
	cp, err := f.loadCheckpoint(ctx, id, run)
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d range %d: checkpoint: %w", id, run, rng, err)
	}
	if cp == nil || cp.Seq != seq || !cp.Counted || cp.Done || rng < 0 || rng >= len(cp.Ranges) {
		return FinalizeResult{Parted: true}, nil // replaced, or composed meanwhile
	}
	if err := f.runRange(ctx, b, cp, rng); err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d range %d: %w", id, run, rng, err)
	}
	_, n, err := f.listed(ctx, rangesPrefix(id, run, seq), len(cp.Ranges))
	if err != nil || n < len(cp.Ranges) {
		return FinalizeResult{Continued: true, Parted: true}, err
	}
	return f.finalize(ctx, id, run, finalizeCall{chain: chain})
}

// runRange merges range r of cp's ranges into one piece per outcome and
// writes its result, unless it has one.
func (f *Finalizer) runRange(ctx context.Context, b ledger.Batch, cp *checkpoint, r int) (err error) {
	resultKey := rangeResultKey(b.ID, b.Run, cp.Seq, r)
	if _, err := f.Blobs.Get(ctx, resultKey); err == nil {
		return nil
	} else if !errors.Is(err, api.ErrNotFound) {
		return err
	}
	until := f.Clock.Now().Add(f.partLease())
	if dl, ok := ctx.Deadline(); ok {
		until = dl
	}
	if err := f.mark(ctx, rangeMarkKey(b.ID, b.Run, cp.Seq, r), until); err != nil {
		return err
	}
	rng := cp.Ranges[r]
	if len(rng.From) != len(cp.Runs) {
		return fmt.Errorf("range %d starts in %d runs, the checkpoint has %d: %w", r, len(rng.From), len(cp.Runs), errRunMalformed)
	}
	runs := make([]sortRun, len(cp.Runs))
	for j, run := range cp.Runs {
		runs[j] = sortRun{Key: run.Key, Bytes: run.Bytes, Merged: rng.From[j]}
	}
	token := ledger.NewToken()
	res := rangeResult{Range: r, Pieces: map[api.Outcome]rangePiece{}}
	writers := map[api.Outcome]*partWriter{}
	own := []string{rangeMarkKey(b.ID, b.Run, cp.Seq, r)}
	defer func() {
		if err != nil {
			for _, w := range writers {
				_ = w.wait()
			}
			f.dropIfGone(ctx, b, own...)
		}
	}()
	write := func(_ []byte, o api.Outcome, line []byte) error {
		w := writers[o]
		if w == nil {
			key := rangePieceKey(b.ID, b.Run, cp.Seq, r, token, o)
			upload, err := f.Blobs.StartParts(ctx, key, "application/x-ndjson")
			if err != nil {
				return err
			}
			w = &partWriter{ctx: ctx, blobs: f.Blobs, key: key, file: &partFile{UploadID: upload}, buf: newPartBuf()}
			writers[o] = w
		}
		res.Lines++
		return w.write(line)
	}
	kr := keyRange{Lo: rng.Lo, Hi: rng.Hi}
	if _, err := mergeRunsIn(ctx, f.Blobs, runs, sortReadBytes(f.sortBudget(), len(runs)), kr, write, func() bool { return false }); err != nil {
		return err
	}
	for o, w := range writers {
		if err := w.last(); err != nil {
			return err
		}
		if err := f.Blobs.CompleteParts(ctx, w.key, w.file.UploadID, w.file.Parts, w.file.Bytes); err != nil {
			return err
		}
		res.Pieces[o] = rangePiece{Key: w.key, Bytes: w.file.Bytes}
		own = append(own, w.key)
	}
	return f.putResult(ctx, b, resultKey, res, own)
}

// composeRanges writes each outcome's results from the ranges' pieces, in
// range order, and the checkpoint after cp marked done with their
// uploads (If-None-Match: ErrConflict when another call wrote it first).
// The ranges' lines must add up to the rows cp counted.
func (f *Finalizer) composeRanges(ctx context.Context, b ledger.Batch, cp *checkpoint) (*checkpoint, error) {
	results, err := readResults[rangeResult](ctx, f.Blobs, len(cp.Ranges), func(r int) string { return rangeResultKey(b.ID, b.Run, cp.Seq, r) })
	if err != nil {
		return nil, fmt.Errorf("ranges: %w", err)
	}
	var lines int64
	for _, rr := range results {
		lines += rr.Lines
	}
	if lines != cp.Rows {
		return nil, fmt.Errorf("the ranges hold %d result lines, the parts counted %d rows: %w", lines, cp.Rows, errRunMalformed)
	}
	done := *cp
	done.Files = map[api.Outcome]*partFile{}
	for _, o := range api.TerminalOutcomes() {
		var pieces []rangePiece
		for _, rr := range results {
			if p, ok := rr.Pieces[o]; ok && p.Bytes > 0 {
				pieces = append(pieces, p)
			}
		}
		if len(pieces) == 0 {
			continue
		}
		file, err := f.composeFile(ctx, api.ResultsKey(b.ID, b.Run, o), pieces)
		if err != nil {
			return nil, err
		}
		done.Files[o] = file
	}
	done.Seq, done.Done, done.Token = cp.Seq+1, true, ""
	if err := f.saveCheckpoint(ctx, b.ID, b.Run, &done); err != nil {
		return nil, err
	}
	return &done, nil
}

// composeCopies is how many UploadPartCopy calls composeFile makes at
// once.
const composeCopies = 32

// composeFile writes the pieces, one after the other, as the parts of a
// new upload of key (not completed: the report completes it, as it
// completes a single pass's). A piece, or what is left of one, of at
// least 5 MiB is copied inside S3 (at most 5 GiB a part, composeCopies
// at once); smaller ones are read and sent with the bytes around them,
// so that every part but the last holds at least minPartBytes. Memory:
// under 3 × minPartBytes.
func (f *Finalizer) composeFile(ctx context.Context, key string, pieces []rangePiece) (*partFile, error) {
	upload, err := f.Blobs.StartParts(ctx, key, "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	file := &partFile{UploadID: upload}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, composeCopies)
	)
	copyPart := func(n int, src string, off, length int64) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f.Blobs.CopyPart(ctx, key, upload, n, src, off, length); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	file, err = f.composeParts(ctx, key, file, pieces, copyPart)
	wg.Wait()
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	return file, nil
}

// composeParts lays the pieces out as file's parts: what it reads is
// sent here, the copies handed to copyPart.
func (f *Finalizer) composeParts(ctx context.Context, key string, file *partFile, pieces []rangePiece, copyPart func(n int, src string, off, length int64)) (*partFile, error) {
	upload := file.UploadID
	var buf []byte
	send := func() error {
		file.Parts++
		err := f.Blobs.PutPart(ctx, key, upload, file.Parts, buf)
		buf = buf[:0]
		return err
	}
	read := func(p rangePiece, off, n int64) error {
		body, err := f.Blobs.OpenRange(ctx, p.Key, off, n)
		if err != nil {
			return err
		}
		defer body.Close()
		at := len(buf)
		buf = append(buf, make([]byte, n)...)
		if _, err := io.ReadFull(body, buf[at:]); err != nil {
			return fmt.Errorf("read %s at %d: %w", p.Key, off, err)
		}
		return nil
	}
	for _, p := range pieces {
		file.Bytes += p.Bytes
		off := int64(0)
		if len(buf) > 0 || p.Bytes <= minPartBytes {
			// Fill the held bytes up to a part; take the whole piece when
			// what would be left of it is too small to be a part. A piece
			// of exactly 5 MiB is read too: S3 copies a range only from a
			// source over 5 MB (S3 API reference, "UploadPartCopy",
			// x-amz-copy-source-range), so every copied piece is larger.
			n := min(p.Bytes, minPartBytes-int64(len(buf)))
			if p.Bytes-n < minPartBytes {
				n = p.Bytes
			}
			if err := read(p, 0, n); err != nil {
				return nil, err
			}
			off = n
			if len(buf) >= minPartBytes {
				if err := send(); err != nil {
					return nil, err
				}
			}
		}
		for off < p.Bytes {
			n := min(p.Bytes-off, copyPartBytes)
			if rest := p.Bytes - off - n; rest > 0 && rest < minPartBytes {
				n -= minPartBytes - rest // the last copy keeps a part's least
			}
			file.Parts++
			if file.Parts > MaxResultParts {
				return nil, fmt.Errorf("results %s: more than %d parts", key, MaxResultParts)
			}
			copyPart(file.Parts, p.Key, off, n)
			off += n
		}
	}
	if len(buf) > 0 {
		if err := send(); err != nil {
			return nil, err
		}
	}
	return file, nil
}

// startCalls starts, for each i not done, the call start(i) of run of
// batch id unless the mark at markKey(i) says a call works on it (absent
// or past: a call lost, or never started), marking it first for a lease;
// at most 16 at once. It returns how many it started. When the run has
// finished meanwhile (its finish deleted the finalize prefix, maybe
// before these marks were written), it deletes the marks it wrote: the
// calls it started find the run finished and do nothing.
func (f *Finalizer) startCalls(ctx context.Context, id string, run int, done []bool, markKey func(i int) string, start func(i int) error) (int, error) {
	var (
		mu      sync.Mutex
		errs    []error
		started int
		wg      sync.WaitGroup
		sem     = make(chan struct{}, 16)
	)
	now := f.Clock.Now()
	var marked []string
	for i := range done {
		if done[i] {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if body, err := f.Blobs.Get(ctx, markKey(i)); err == nil {
				var a active
				if json.Unmarshal(body, &a) == nil && now.Before(a.Until) {
					return // at work, or started and waiting for its call
				}
			}
			err := f.mark(ctx, markKey(i), now.Add(f.partLease()))
			mu.Lock()
			if err == nil {
				marked = append(marked, markKey(i))
			}
			mu.Unlock()
			if err == nil {
				err = start(i)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				started++
			}
		})
	}
	wg.Wait()
	if len(marked) > 0 {
		if gone, err := f.runGone(ctx, id, run); err == nil && gone {
			for _, k := range marked {
				_ = f.Blobs.Delete(ctx, k)
			}
		}
	}
	return started, errors.Join(errs...)
}

// mark writes the mark at key: a call works on it until until.
func (f *Finalizer) mark(ctx context.Context, key string, until time.Time) error {
	body, _ := json.Marshal(active{Until: until})
	return f.Blobs.Put(ctx, key, "application/json", body)
}
