package finalize

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/bulkrun/bulkrun/internal/sliceheap"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The order of a run's results.
//
// A run's results (results/{outcome}.jsonl) list their items in key byte
// order (KeyOrder) at every items per message. With one item per message
// the rows come in that order already: each item shard is a DynamoDB
// partition whose sort key is the item key, and shardmerge.Merge merges the
// shards. A pack row holds the items of one pack message, which are
// consecutive manifest lines, so the pack partitions come in manifest
// order; finalize then sorts their result lines by key in bounded memory
// (an external merge sort across its chunks):
//
//  1. while it counts the rows, it keeps their result lines in memory up
//     to SortRunBytes, sorts them by key and writes them as one sorted
//     run (an object under the run's finalize prefix, named in the
//     checkpoint); a chunk's end writes what it holds as a run too;
//  2. once every row is counted, it merges the runs (a heap of one reader
//     per run, each reading ranges of its run as it goes) into the
//     results parts, in chunks like the count, each run's merged offset
//     in the checkpoint.
//
// A run whose result lines fit in one sort run is sorted in memory and
// written straight to its results: no run object. The merge is
// deterministic (the runs named by a checkpoint and their offsets give
// the same bytes), so two calls going on from one checkpoint still write
// the same parts.

// Bounds of finalize's key sort (a batch with items per message > 1).
const (
	// SortRunBytes is how many bytes of result lines (with their keys)
	// finalize holds before it sorts them and writes them as one run:
	// 16 MiB. With the run's part being written (5 MiB) it takes the place
	// of the results parts a batch of item rows holds while it counts
	// (two of ResultPartBytes per outcome), so that finalize keeps its
	// memory bound at every items per message.
	SortRunBytes = 16 << 20
	// MinSortReadBytes and MaxSortReadBytes bound one ranged read of a
	// run while the runs are merged: the merge budget
	// (shardmerge.Options.BudgetBytes) shared by the runs, two reads each (one
	// merged, one read ahead), within 64 KiB–8 MiB.
	MinSortReadBytes = 64 << 10
	MaxSortReadBytes = 8 << 20
	// sortPartBytes is the part size of a run's upload: S3's least part
	// size but for the last (S3 user guide, "Amazon S3 multipart upload
	// limits").
	sortPartBytes = 5 << 20
	// sortRecordOverhead is what one held line costs besides its bytes.
	sortRecordOverhead = 16
)

// sortRun is one sorted run of result lines, as a checkpoint names it.
type sortRun struct {
	Key    string `json:"key"`
	Bytes  int64  `json:"bytes"`
	Merged int64  `json:"merged,omitempty"` // bytes merged into the results so far
}

func sortRunKey(id string, run, seq int, token string, n int) string {
	return FinalizePrefix(id, run) + fmt.Sprintf("sort/%06d-%s-%04d.run", seq, token, n)
}

// keySorter holds result lines and sorts them by key. A run's record is
// uvarint(len key) key, outcome (its index in TerminalOutcomes),
// uvarint(len line) line.
type keySorter struct {
	limit int    // bytes held (size) before the lines make a run
	arena []byte // key and line of every record, back to back; at most limit
	recs  []sortRec
	out   []byte // a run's encoding, reused
}

type sortRec struct {
	off, klen, llen uint32
	o               uint8
}

func (s *keySorter) size() int { return len(s.arena) + len(s.recs)*sortRecordOverhead }

// full reports whether a line of n bytes (with its key) would take the
// held lines past the limit: they make a run first.
func (s *keySorter) full(n int) bool {
	return len(s.recs) > 0 && s.size()+n+sortRecordOverhead > s.limit
}

func (s *keySorter) add(key string, o api.Outcome, line []byte) error {
	i := slices.Index(api.TerminalOutcomes(), o)
	if i < 0 {
		return fmt.Errorf("sort results: item %q is %s", key, o)
	}
	if need := len(s.arena) + len(key) + len(line); need > cap(s.arena) {
		// Grow within the limit (append would overshoot it by a quarter).
		arena := make([]byte, len(s.arena), max(need, min(2*cap(s.arena), s.limit), 64<<10))
		copy(arena, s.arena)
		s.arena = arena
	}
	s.recs = append(s.recs, sortRec{off: uint32(len(s.arena)), klen: uint32(len(key)), llen: uint32(len(line)), o: uint8(i)})
	s.arena = append(s.arena, key...)
	s.arena = append(s.arena, line...)
	return nil
}

func (s *keySorter) key(r sortRec) []byte { return s.arena[r.off : r.off+r.klen] }

// sorted sorts the held records by key and calls fn with each, in order.
func (s *keySorter) sorted(fn func(key []byte, o api.Outcome, line []byte) error) error {
	slices.SortFunc(s.recs, func(a, b sortRec) int { return bytes.Compare(s.key(a), s.key(b)) })
	for _, r := range s.recs {
		line := s.arena[r.off+r.klen : r.off+r.klen+r.llen]
		if err := fn(s.key(r), api.TerminalOutcomes()[r.o], line); err != nil {
			return err
		}
	}
	return nil
}

// writeRun sorts the held records into one run, written to key as a
// multipart upload of sortPartBytes parts (so that only one part is held
// besides the records), forgets them, and returns the run's size.
func (s *keySorter) writeRun(ctx context.Context, blobs ledger.Blobs, key string) (int64, error) {
	w, err := newRunWriter(ctx, blobs, key, s.out)
	if err != nil {
		return 0, err
	}
	err = s.sorted(w.add)
	s.out = w.out[:0]
	s.arena, s.recs = s.arena[:0], s.recs[:0]
	if err != nil {
		return 0, fmt.Errorf("write sort run %s: %w", key, err)
	}
	return w.close()
}

// runWriter writes records, given in key order, as one sorted run: a
// multipart upload of sortPartBytes parts, one part held at a time. With
// markEvery > 0 it also keeps the run's index: a mark (the record's key
// and offset) for the first record at or past every markEvery bytes; when
// the marks' keys pass maxIndexKeyBytes, every other mark is dropped and
// the spacing doubled, so that an index stays within that bound whatever
// the keys' size (up to api.MaxKeyBytes).
type runWriter struct {
	ctx       context.Context
	blobs     ledger.Blobs
	key       string
	upload    string
	out       []byte
	parts     int
	size      int64
	markEvery int64
	marks     []runMark
	markBytes int // the marks' keys
}

// maxIndexKeyBytes bounds the keys of one run's index: 256 KiB, so that
// the call that plans a merge's ranges holds at most 64 MiB of marks'
// keys for MaxFinalizeParts runs (≈ 12,000 marks of 20-byte keys a run,
// 1 MiB apart at ≈ 1 GB a part; 256 of 1 KiB keys, ≈ 4 MiB apart).
const maxIndexKeyBytes = 256 << 10

// runMark is one entry of a sorted run's index: the record at Off has
// key Key, so every record before Off has a smaller key.
type runMark struct {
	Key []byte `json:"key"` // base64 in JSON: a key is any bytes
	Off int64  `json:"off"`
}

// newRunWriter starts the run's upload; buf, when it has room, is reused
// for its part.
func newRunWriter(ctx context.Context, blobs ledger.Blobs, key string, buf []byte) (*runWriter, error) {
	upload, err := blobs.StartParts(ctx, key, "application/octet-stream")
	if err != nil {
		return nil, fmt.Errorf("write sort run %s: %w", key, err)
	}
	if cap(buf) == 0 {
		buf = make([]byte, 0, sortPartBytes+64<<10)
	}
	return &runWriter{ctx: ctx, blobs: blobs, key: key, upload: upload, out: buf[:0]}, nil
}

// add appends one record: uvarint(len key) key, the outcome's index in
// TerminalOutcomes, uvarint(len line) line.
func (w *runWriter) add(key []byte, o api.Outcome, line []byte) error {
	i := slices.Index(api.TerminalOutcomes(), o)
	if i < 0 {
		return fmt.Errorf("sort results: item %q is %s", key, o)
	}
	if off := w.size + int64(len(w.out)); w.markEvery > 0 && (len(w.marks) == 0 || off >= w.marks[len(w.marks)-1].Off+w.markEvery) {
		w.marks = append(w.marks, runMark{Key: slices.Clone(key), Off: off})
		w.markBytes += len(key)
		if w.markBytes > maxIndexKeyBytes {
			w.thinMarks()
		}
	}
	w.out = binary.AppendUvarint(w.out, uint64(len(key)))
	w.out = append(w.out, key...)
	w.out = append(w.out, byte(i))
	w.out = binary.AppendUvarint(w.out, uint64(len(line)))
	w.out = append(w.out, line...)
	if len(w.out) >= sortPartBytes {
		return w.put()
	}
	return nil
}

// thinMarks keeps every other mark (the first among them) and doubles
// the spacing of the marks to come.
func (w *runWriter) thinMarks() {
	kept, n := w.marks[:0], 0
	for i, m := range w.marks {
		if i%2 == 0 {
			kept = append(kept, m)
			n += len(m.Key)
		}
	}
	clear(w.marks[len(kept):])
	w.marks, w.markBytes, w.markEvery = kept, n, 2*w.markEvery
}

func (w *runWriter) put() error {
	w.parts++
	w.size += int64(len(w.out))
	err := w.blobs.PutPart(w.ctx, w.key, w.upload, w.parts, w.out)
	w.out = w.out[:0]
	return err
}

// close writes the last part, completes the run and returns its size.
func (w *runWriter) close() (int64, error) {
	var err error
	if len(w.out) > 0 || w.parts == 0 {
		err = w.put()
	}
	if err == nil {
		err = w.blobs.CompleteParts(w.ctx, w.key, w.upload, w.parts, w.size)
	}
	if err != nil {
		return 0, fmt.Errorf("write sort run %s: %w", w.key, err)
	}
	return w.size, nil
}

// runReader reads one sorted run from an offset, in ranged reads of
// block bytes, the next block read ahead while the current one is merged
// (so that a merge of many runs waits for S3's first byte once per run,
// not once per block): two blocks in memory. Its current record is key,
// o, line (valid until next).
type runReader struct {
	ctx   context.Context
	blobs ledger.Blobs
	run   *sortRun
	block int64
	off   int64 // offset of buf[0] in the run
	buf   []byte
	pos   int // start of the current record in buf
	end   int // end of the current record in buf
	key   []byte
	o     api.Outcome
	line  []byte
	// ahead is the read of the next block in flight; pre the bytes read
	// ahead not yet in buf (at run offset preOff, in spare).
	ahead  chan readAhead
	pre    []byte
	preOff int64
	spare  []byte
}

type readAhead struct {
	off  int64
	data []byte
	err  error
}

// errRunMalformed is a run whose bytes do not parse: never written by
// this code; the chain starts over.
var errRunMalformed = errors.New("malformed sort run")

// next moves to the run's next record; false at the run's end.
func (r *runReader) next() (bool, error) {
	r.pos = r.end
	r.run.Merged = r.off + int64(r.pos)
	for {
		if ok := r.parse(); ok {
			return true, nil
		}
		if r.off+int64(len(r.buf)) >= r.run.Bytes {
			if r.pos < len(r.buf) {
				return false, fmt.Errorf("%s at %d: %w", r.run.Key, r.off+int64(r.pos), errRunMalformed)
			}
			return false, nil
		}
		if err := r.fill(); err != nil {
			return false, err
		}
	}
}

// parse reads the record at pos if buf holds all of it.
func (r *runReader) parse() bool {
	b := r.buf[r.pos:]
	klen, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < klen+1 {
		return false
	}
	key := b[n : n+int(klen)]
	oi := int(b[n+int(klen)])
	rest := b[n+int(klen)+1:]
	llen, m := binary.Uvarint(rest)
	if m <= 0 || uint64(len(rest)-m) < llen {
		return false
	}
	if oi >= len(api.TerminalOutcomes()) {
		return false
	}
	r.key, r.o, r.line = key, api.TerminalOutcomes()[oi], rest[m:m+int(llen)]
	r.end = r.pos + n + int(klen) + 1 + m + int(llen)
	return true
}

// fill keeps the current record's bytes at the front of buf and reads
// up to block bytes after them into buf's room (buf is allocated once,
// block bytes and a long record's more): from what was read ahead when
// it is there, else with a ranged read; then it reads the next block
// ahead.
func (r *runReader) fill() error {
	kept := copy(r.buf[:cap(r.buf)], r.buf[r.pos:])
	r.off += int64(r.pos)
	r.pos, r.end = 0, 0
	if room := cap(r.buf) - kept; room < max(int(r.block)/2, 1) {
		// A record longer than half a block: room for it and a block.
		buf := make([]byte, kept, kept+int(r.block))
		copy(buf, r.buf[:kept])
		r.buf = buf
	}
	r.buf = r.buf[:kept]
	from := r.off + int64(kept)
	if r.ahead != nil {
		a := <-r.ahead
		r.ahead = nil
		if a.err != nil {
			return a.err
		}
		r.pre, r.preOff = a.data, a.off
	}
	if len(r.pre) > 0 && r.preOff == from {
		c := copy(r.buf[kept:cap(r.buf)], r.pre)
		r.buf = r.buf[:kept+c]
		r.pre, r.preOff = r.pre[c:], r.preOff+int64(c)
	} else {
		r.pre = nil
		n := min(int64(cap(r.buf)-kept), r.run.Bytes-from)
		body, err := r.blobs.OpenRange(r.ctx, r.run.Key, from, n)
		if err != nil {
			return fmt.Errorf("read sort run %s: %w", r.run.Key, err)
		}
		defer body.Close()
		r.buf = r.buf[:kept+int(n)]
		if _, err := io.ReadFull(body, r.buf[kept:]); err != nil {
			return fmt.Errorf("read sort run %s at %d: %w", r.run.Key, from, err)
		}
	}
	if next := r.off + int64(len(r.buf)); len(r.pre) == 0 && next < r.run.Bytes {
		r.readAhead(next, min(r.block, r.run.Bytes-next))
	}
	return nil
}

// readAhead reads n bytes of the run at from into spare, in the
// background.
func (r *runReader) readAhead(from, n int64) {
	if int64(cap(r.spare)) < n {
		r.spare = make([]byte, n)
	}
	buf := r.spare[:n]
	ch := make(chan readAhead, 1)
	r.ahead = ch
	go func() {
		body, err := r.blobs.OpenRange(r.ctx, r.run.Key, from, n)
		if err == nil {
			_, err = io.ReadFull(body, buf)
			body.Close()
		}
		if err != nil {
			err = fmt.Errorf("read sort run %s at %d: %w", r.run.Key, from, err)
		}
		ch <- readAhead{off: from, data: buf, err: err}
	}()
}

// sortReadBytes is the ranged read of each of n runs while they are
// merged within budget bytes: each run holds two (the block merged and
// the next, read ahead).
func sortReadBytes(budget int64, n int) int64 {
	return min(max(budget/int64(2*max(n, 1)), MinSortReadBytes), MaxSortReadBytes)
}

// mergeRuns merges the sorted runs from their merged offsets, reading
// block bytes of a run at a time, and gives emit their records (key,
// outcome, line) in key order until the runs end (true) or stop says the
// chunk ends (false); each run's Merged (in runs) is then where the next
// call goes on from.
func mergeRuns(ctx context.Context, blobs ledger.Blobs, runs []sortRun, block int64, emit func(key []byte, o api.Outcome, line []byte) error, stop func() bool) (bool, error) {
	return mergeRunsIn(ctx, blobs, runs, block, keyRange{}, emit, stop)
}

// keyRange is the keys [Lo, Hi) of a merge; a nil bound is open.
type keyRange struct{ Lo, Hi []byte }

// mergeRunsIn is mergeRuns over the records whose keys are in kr: those
// before kr.Lo are read and skipped, and a run ends at its first key at
// or past kr.Hi.
func mergeRunsIn(ctx context.Context, blobs ledger.Blobs, runs []sortRun, block int64, kr keyRange, emit func(key []byte, o api.Outcome, line []byte) error, stop func() bool) (bool, error) {
	h := &sliceheap.Heap[*runReader]{Order: func(a, b *runReader) bool { return bytes.Compare(a.key, b.key) < 0 }}
	for i := range runs {
		run := &runs[i]
		r := &runReader{ctx: ctx, blobs: blobs, run: run, block: block, off: run.Merged}
		ok, err := r.next()
		if err != nil {
			return false, err
		}
		if ok {
			h.S = append(h.S, r)
		}
	}
	heap.Init(h)
	var last []byte
	for h.Len() > 0 {
		if stop() {
			return false, nil
		}
		r := h.S[0]
		if last != nil && bytes.Compare(r.key, last) <= 0 {
			return false, fmt.Errorf("sort runs: key %q after %q: %w", r.key, last, errRunMalformed)
		}
		if kr.Hi != nil && bytes.Compare(r.key, kr.Hi) >= 0 {
			heap.Pop(h) // this run's keys in the range end here
			continue
		}
		last = append(last[:0], r.key...)
		if kr.Lo == nil || bytes.Compare(r.key, kr.Lo) >= 0 {
			if err := emit(r.key, r.o, r.line); err != nil {
				return false, err
			}
		}
		ok, err := r.next()
		if err != nil {
			return false, err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return true, nil
}
