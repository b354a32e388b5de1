// Package keyset finds duplicate item keys in a stream of keys, in memory
// bounded by a budget whatever the number of keys. Submit uses it while it
// streams a source into a manifest, to refuse a batch whose item keys are
// not unique (docs/design.md, "Vocabulary"; a source is read as a stream,
// never materialized).
//
// # How
//
// A Detector buffers (key, line) entries in memory. When the next entry
// would take the buffer past Options.MemoryBytes, it sorts the buffer by
// (key, line) and writes it to a run file in its own temporary directory
// under Options.Dir. Finish sorts the last buffer, which stays in memory,
// and merges it with every run in key byte order (a k-way merge with a
// heap); equal keys are then adjacent. Keys are compared byte for byte,
// never by hash, so there are neither false positives nor false negatives.
// Keys are not normalized: "café" in NFC and in NFD are different keys.
//
// # Which duplicate is reported
//
// When several keys are duplicated, Finish reports the smallest of them in
// byte order (bytes.Compare), not the one whose second occurrence comes
// first in the source: the merge meets keys in byte order and stops at the
// first repeat. The report names that key's two smallest line numbers, so a
// key seen three or more times is reported at its first two lines. The
// answer depends only on the set of (key, line) entries, not on the memory
// budget or on how the entries fell into runs.
//
// # Memory
//
// The buffer is accounted as its capacity: key bytes, packed in chunks of at
// most 64 KiB, plus EntryOverheadBytes (16) per entry for the index that is
// sorted. Both grow only while their sum stays within MemoryBytes, and the
// budget is split between them as the average key length seen so far
// suggests; a single entry larger than the whole budget is admitted alone.
// Around that buffer, the Detector holds one RunBufferBytes writer while it
// writes a run and, during a merge, up to MaxMergeRuns open run files, each
// with a RunBufferBytes reader and a MaxKeyBytes key. So the live memory is
//
//	peak ≈ MemoryBytes + MaxMergeRuns × (RunBufferBytes + MaxKeyBytes) + RunBufferBytes
//
// whatever the number of keys: with the defaults, 32 MiB + 64 × 65 KiB +
// 64 KiB ≈ 36.1 MiB. (While the buffer fills for the first time, growing the
// index briefly holds its previous copy too, at most half the index; and
// the Go runtime lets the heap reach about twice the live memory between
// collections unless GOMEMLIMIT says otherwise.)
//
// At the default budget an entry with a 40-byte key costs 56 bytes, so a
// run holds about 599,000 entries, and 10^7 such keys make 16 run files plus
// the last buffer: 17 sources, merged in one pass. When there are more run
// files than MaxMergeRuns, Finish first merges the oldest of them into
// larger runs until MaxMergeRuns are left, which bounds the open files and
// reader buffers however many runs there are.
//
// # Disk
//
// A run stores each entry front-coded, as uvarints (encoding/binary): the
// length of the prefix shared with the previous key in the run, the length
// of the rest, the rest, and the line. 10^7 random 40-byte keys take about
// 400 MB of run files (40 bytes a key); keys that share a long prefix, such
// as S3 object keys under one prefix or zero-padded positional keys, take
// about 8 bytes each (76 MB for 10^7 40-byte object keys). An intermediate
// merge writes its output before it removes its inputs, so the disk in use
// can briefly exceed the run bytes, by at most the size of one merge's
// inputs. On Lambda, /tmp is 512 MB unless the function's ephemeral storage
// is raised. Stats reports the bytes written and the peak in use.
//
// # Errors
//
// Every error a caller can get:
//
//   - *DuplicateKeyError, matching ErrDuplicateKey, from Finish: two items
//     share a key. Permanent: the source must change.
//   - ErrInvalidKey (a key of 0 or more than MaxKeyBytes bytes) and
//     ErrInvalidLine (a line below 1), wrapped, from Add: the caller broke
//     the contract; the entry is not recorded and the Detector stays usable.
//   - ErrClosed from Add, and from Finish after Close: the Detector is done.
//   - *NoSpaceError, matching ErrNoSpace, from Add or Finish: the disk under
//     Dir is full (ENOSPC) while a run is written. Not worth retrying with
//     the same keys on the same disk: the source is larger than the disk
//     was sized for (on Lambda, the function's ephemeral storage).
//   - any other error is an I/O error on the run files (a missing Dir, a
//     damaged run), wrapped with what was being done. It says nothing about
//     the keys; a retried submit may succeed. After one, Add and Finish
//     return it again.
//
// A Detector is not safe for concurrent use: one goroutine streams a source
// into it.
package keyset

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

const (
	// DefaultMemoryBytes is the buffer budget, in bytes, when
	// Options.MemoryBytes is 0: 32 MiB.
	DefaultMemoryBytes = 32 << 20
	// DefaultMaxMergeRuns is the most run files a merge reads at once when
	// Options.MaxMergeRuns is 0.
	DefaultMaxMergeRuns = 64
	// RunBufferBytes is the size, in bytes, of the buffered reader of each
	// run file open in a merge and of the buffered writer of a run.
	RunBufferBytes = 64 << 10
	// MaxKeyBytes is the longest item key, in bytes (docs/design.md, "Vocabulary").
	MaxKeyBytes = 1024
	// EntryOverheadBytes is what one buffered entry costs beyond its key
	// bytes, in bytes: its place in the sorted index (line, chunk, offset
	// and length).
	EntryOverheadBytes = 16
)

const (
	maxChunkBytes = 64 << 10 // largest key chunk; offsets in a chunk fit a uint16
	minEntries    = 256      // first capacity of the index, budget permitting
)

// ErrDuplicateKey matches every *DuplicateKeyError (errors.Is).
var ErrDuplicateKey = errors.New("duplicate item key")

// ErrInvalidKey is wrapped by the error Add returns for a key of 0 or more
// than MaxKeyBytes bytes.
var ErrInvalidKey = errors.New("invalid item key")

// ErrInvalidLine is wrapped by the error Add returns for a line below 1.
var ErrInvalidLine = errors.New("invalid line number")

// ErrClosed is returned by Add after Finish or Close, and by Finish after
// Close.
var ErrClosed = errors.New("keyset: detector finished or closed")

// DuplicateKeyError is the error Finish returns when two items share a key:
// Key is the smallest duplicated key in byte order and FirstLine and
// SecondLine (1-based, FirstLine < SecondLine when lines are distinct) are
// its two smallest line numbers. It matches ErrDuplicateKey with errors.Is.
type DuplicateKeyError struct {
	Key        string // the duplicated key, byte for byte
	FirstLine  int64  // the smallest line the key was added at
	SecondLine int64  // the next smallest line the key was added at
}

// Error returns `duplicate item key "abc" at lines 3 and 17`, the key quoted
// with %q.
func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("%s %q at lines %d and %d", ErrDuplicateKey, e.Key, e.FirstLine, e.SecondLine)
}

// Is reports whether target is ErrDuplicateKey.
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }

// ErrNoSpace matches every *NoSpaceError (errors.Is).
var ErrNoSpace = errors.New("keyset: no space left for run files")

// NoSpaceError is a run file that did not fit on the disk under Dir
// (ENOSPC): DiskBytes of runs were on disk, and Keys had been added. It
// matches ErrNoSpace and unwraps to the system error.
type NoSpaceError struct {
	Dir       string
	DiskBytes int64
	Keys      int64
	Err       error
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("keyset: disk under %s full with %d bytes of run files after %d keys: %v", e.Dir, e.DiskBytes, e.Keys, e.Err)
}

// Is reports whether target is ErrNoSpace.
func (e *NoSpaceError) Is(target error) bool { return target == ErrNoSpace }

// Unwrap returns the system error.
func (e *NoSpaceError) Unwrap() error { return e.Err }

// Options configures a Detector. The zero value is ready to use.
type Options struct {
	// Dir is the directory in which the Detector creates its own temporary
	// directory for run files, on the first spill; "" means os.TempDir().
	// It must exist.
	Dir string
	// MemoryBytes is the budget, in bytes, for buffered entries (key bytes
	// plus EntryOverheadBytes each) before they are sorted and spilled to a
	// run file; 0 or less means DefaultMemoryBytes (32 MiB).
	MemoryBytes int
	// MaxMergeRuns is the most run files a merge reads at once, each with an
	// open file and a RunBufferBytes reader; 0 or less means
	// DefaultMaxMergeRuns (64), and 1 means 2.
	MaxMergeRuns int
	// CreateRun creates a run file for writing at path (in a directory the
	// Detector made under Dir); nil means os.OpenFile with O_EXCL and mode
	// 0600. The file is read back with os.Open, so it must be a real file:
	// this is where tests inject write faults such as a full disk.
	CreateRun func(path string) (io.WriteCloser, error)
}

// Stats counts the work a Detector has done. Tests and logs use it; it has
// no timings.
type Stats struct {
	Keys            int64 // keys added
	Runs            int   // run files spilled by Add (intermediate merges not counted)
	MergePasses     int   // intermediate merges done by Finish, each into one larger run
	SpilledBytes    int64 // bytes written to run files, intermediate merges included
	PeakDiskBytes   int64 // most bytes of run files on disk at once
	PeakBufferBytes int   // largest buffer capacity held, in bytes; ≤ MemoryBytes unless one entry exceeds it
}

// Detector finds duplicate item keys among the keys added to it, in memory
// bounded by Options.MemoryBytes whatever the number of keys, spilling
// sorted runs to temporary files under Options.Dir (see the package comment
// for the bound and the disk use).
//
// Use: New, Add each key with its line, then Finish; defer Close so that
// the temporary files are removed also when Finish is not reached. A
// Detector is used once and is not safe for concurrent use.
type Detector struct {
	dir      string
	budget   int
	maxMerge int
	create   func(path string) (io.WriteCloser, error)

	// The buffer: keys packed in chunks, and the index that is sorted.
	chunks     [][]byte // len is the bytes in use, cap the chunk's size
	cur        int      // the chunk being filled
	arenaBytes int      // sum of the chunks' capacities
	keyBytes   int      // key bytes buffered
	entries    []entry

	tmp       string // this Detector's run directory; "" before the first spill and after removal
	runs      []run
	seq       int
	bw        *bufio.Writer
	cursors   []*cursor // reused between merges
	prev      []byte    // the previous key of the final merge
	diskBytes int64

	stats    Stats
	err      error // sticky I/O error
	closed   bool
	finished bool
	result   error // Finish's result, returned again by later calls
}

// entry is one buffered (key, line); the key is
// chunks[chunk][off : off+n].
type entry struct {
	line  int64
	chunk uint32
	off   uint16
	n     uint16
}

// run is one run file: its entries sorted by (key, line).
type run struct {
	path    string
	entries int64
	bytes   int64
}

// New returns a Detector configured by opts (see Options for the defaults).
// It does no I/O: the run directory is created on the first spill.
func New(opts Options) *Detector {
	d := &Detector{dir: opts.Dir, budget: opts.MemoryBytes, maxMerge: opts.MaxMergeRuns, create: opts.CreateRun}
	if d.create == nil {
		d.create = func(path string) (io.WriteCloser, error) {
			return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		}
	}
	if d.dir == "" {
		d.dir = os.TempDir()
	}
	if d.budget <= 0 {
		d.budget = DefaultMemoryBytes
	}
	if d.maxMerge <= 0 {
		d.maxMerge = DefaultMaxMergeRuns
	}
	d.maxMerge = max(d.maxMerge, 2)
	return d
}

// Add records key (1–MaxKeyBytes bytes, compared byte for byte) as seen at
// line (the 1-based line or position of the item in the source). It copies
// key. It does not report duplicates, which may be in different runs:
// Finish does. It returns a wrapped ErrInvalidKey or ErrInvalidLine for an
// entry out of contract (not recorded), ErrClosed after Finish or Close, or
// an I/O error from spilling a run, after which the Detector is unusable.
func (d *Detector) Add(key []byte, line int64) error {
	switch {
	case d.closed:
		return ErrClosed
	case d.err != nil:
		return d.err
	case len(key) == 0 || len(key) > MaxKeyBytes:
		return fmt.Errorf("keyset: line %d: key of %d bytes, want 1–%d: %w", line, len(key), MaxKeyBytes, ErrInvalidKey)
	case line < 1:
		return fmt.Errorf("keyset: line %d: %w", line, ErrInvalidLine)
	}
	if !d.room(len(key)) {
		if err := d.spill(); err != nil {
			d.err = err
			return err
		}
		d.room(len(key)) // an empty buffer always makes room
	}
	c := d.chunks[d.cur]
	d.entries = append(d.entries, entry{line: line, chunk: uint32(d.cur), off: uint16(len(c)), n: uint16(len(key))})
	d.chunks[d.cur] = append(c, key...)
	d.keyBytes += len(key)
	d.stats.Keys++
	return nil
}

// room makes room in the buffer for one more entry with an n-byte key,
// growing the chunks or the index within the budget. It reports false when
// the buffer must be spilled first; on an empty buffer it always succeeds.
func (d *Detector) room(n int) bool {
	for d.cur < len(d.chunks) && cap(d.chunks[d.cur])-len(d.chunks[d.cur]) < n {
		d.cur++
	}
	haveKey := d.cur < len(d.chunks)
	haveEntry := len(d.entries) < cap(d.entries)
	if haveKey && haveEntry {
		return true
	}

	// Split the budget as the keys buffered so far suggest, so that
	// neither the index nor the chunks take the room the other will need.
	avg := (d.keyBytes + n + len(d.entries)) / (len(d.entries) + 1) // rounded up
	idealEntries := d.budget / (avg + EntryOverheadBytes)
	idealArena := d.budget - idealEntries*EntryOverheadBytes

	entriesCap := cap(d.entries)
	if !haveEntry {
		needArena := d.arenaBytes
		if !haveKey {
			needArena += n
		}
		grown := max(2*entriesCap, minEntries)
		entriesCap = max(len(d.entries)+1, min(grown, (d.budget-max(needArena, idealArena))/EntryOverheadBytes))
	}
	chunkBytes := 0
	if !haveKey {
		chunkBytes = max(n, min(maxChunkBytes, d.budget-d.arenaBytes-max(entriesCap, idealEntries)*EntryOverheadBytes))
	}
	if d.arenaBytes+chunkBytes+entriesCap*EntryOverheadBytes > d.budget {
		if len(d.entries) > 0 {
			return false
		}
		if d.arenaBytes > 0 || cap(d.entries) > 0 {
			// Capacity kept from earlier runs is shaped for other keys:
			// start afresh.
			d.chunks, d.cur, d.arenaBytes, d.entries = nil, 0, 0, nil
			return d.room(n)
		}
		// One entry larger than the whole budget: admit it alone.
	}
	if !haveEntry {
		grown := make([]entry, len(d.entries), entriesCap)
		copy(grown, d.entries)
		d.entries = grown
	}
	if !haveKey {
		d.chunks = append(d.chunks, make([]byte, 0, chunkBytes))
		d.cur = len(d.chunks) - 1
		d.arenaBytes += chunkBytes
	}
	d.stats.PeakBufferBytes = max(d.stats.PeakBufferBytes, d.arenaBytes+cap(d.entries)*EntryOverheadBytes)
	return true
}

// key returns e's key bytes, in the buffer.
func (d *Detector) key(e entry) []byte {
	return d.chunks[e.chunk][e.off : int(e.off)+int(e.n)]
}

// sortBuffer sorts the buffered entries by (key, line).
func (d *Detector) sortBuffer() {
	slices.SortFunc(d.entries, func(a, b entry) int {
		if c := bytes.Compare(d.key(a), d.key(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.line, b.line)
	})
}

// resetBuffer empties the buffer and keeps its capacity for the next run.
func (d *Detector) resetBuffer() {
	for i := range d.chunks {
		d.chunks[i] = d.chunks[i][:0]
	}
	d.cur, d.keyBytes, d.entries = 0, 0, d.entries[:0]
}

// spill sorts the buffer, writes it as a run file and empties it.
func (d *Detector) spill() error {
	d.sortBuffer()
	r, err := d.writeRun(func(w *runWriter) error {
		for _, e := range d.entries {
			if err := w.write(d.key(e), e.line); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("keyset: spill run %d of %d entries: %w", d.stats.Runs+1, len(d.entries), err)
	}
	d.runs = append(d.runs, r)
	d.stats.Runs++
	d.resetBuffer()
	return nil
}

// writeRun creates the next run file, lets fill write its entries in
// (key, line) order and closes it. On error it removes the file; a full
// disk is a *NoSpaceError.
func (d *Detector) writeRun(fill func(*runWriter) error) (run, error) {
	r, err := d.writeRunFile(fill)
	if err != nil && errors.Is(err, syscall.ENOSPC) {
		err = &NoSpaceError{Dir: d.dir, DiskBytes: d.diskBytes, Keys: d.stats.Keys, Err: err}
	}
	return r, err
}

func (d *Detector) writeRunFile(fill func(*runWriter) error) (run, error) {
	if d.tmp == "" {
		dir, err := os.MkdirTemp(d.dir, "bulkrun-keyset-")
		if err != nil {
			return run{}, err
		}
		d.tmp = dir
	}
	d.seq++
	path := filepath.Join(d.tmp, fmt.Sprintf("run-%06d", d.seq))
	f, err := d.create(path)
	if err != nil {
		return run{}, err
	}
	if d.bw == nil {
		d.bw = bufio.NewWriterSize(f, RunBufferBytes)
	} else {
		d.bw.Reset(f)
	}
	w := &runWriter{bw: d.bw, prev: make([]byte, 0, MaxKeyBytes)}
	err = fill(w)
	if err == nil {
		err = d.bw.Flush()
	}
	d.bw.Reset(nil) // drop the file
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path) // the write error says more
		return run{}, err
	}
	d.stats.SpilledBytes += w.bytes
	d.diskBytes += w.bytes
	d.stats.PeakDiskBytes = max(d.stats.PeakDiskBytes, d.diskBytes)
	return run{path: path, entries: w.entries, bytes: w.bytes}, nil
}

// runWriter writes entries front-coded: uvarint(shared prefix length),
// uvarint(suffix length), suffix, uvarint(line).
type runWriter struct {
	bw      *bufio.Writer
	prev    []byte
	scratch [2 * binary.MaxVarintLen64]byte
	entries int64
	bytes   int64
}

func (w *runWriter) write(key []byte, line int64) error {
	shared := 0
	for shared < len(key) && shared < len(w.prev) && key[shared] == w.prev[shared] {
		shared++
	}
	b := binary.AppendUvarint(w.scratch[:0], uint64(shared))
	b = binary.AppendUvarint(b, uint64(len(key)-shared))
	w.bw.Write(b) // errors are sticky in bufio.Writer: checked below
	w.bw.Write(key[shared:])
	w.bytes += int64(len(b) + len(key) - shared)
	b = binary.AppendUvarint(w.scratch[:0], uint64(line))
	if _, err := w.bw.Write(b); err != nil {
		return err
	}
	w.bytes += int64(len(b))
	w.entries++
	w.prev = append(w.prev[:0], key...)
	return nil
}

// errCorruptRun is wrapped by the error of a run file that does not decode.
var errCorruptRun = errors.New("corrupt run file")

// cursor reads one sorted source of a merge: a run file, or the buffer.
type cursor struct {
	key  []byte
	line int64

	// A run file.
	f         *os.File
	br        *bufio.Reader
	buf       []byte
	name      string
	remaining int64

	// The buffer.
	d *Detector
	i int
}

// next moves to the next entry; it returns io.EOF after the last.
func (c *cursor) next() error {
	if c.d != nil {
		if c.i == len(c.d.entries) {
			return io.EOF
		}
		e := c.d.entries[c.i]
		c.key, c.line = c.d.key(e), e.line
		c.i++
		return nil
	}
	if c.remaining == 0 {
		return io.EOF
	}
	if err := c.read(); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the run ended before its last entry
		}
		return fmt.Errorf("read run %s: %w", c.name, err)
	}
	c.remaining--
	return nil
}

func (c *cursor) read() error {
	shared, err := binary.ReadUvarint(c.br)
	if err != nil {
		return err
	}
	suffix, err := binary.ReadUvarint(c.br)
	if err != nil {
		return err
	}
	if shared > uint64(len(c.buf)) || suffix > MaxKeyBytes || shared+suffix == 0 || shared+suffix > MaxKeyBytes {
		return errCorruptRun
	}
	c.buf = c.buf[:shared+suffix]
	if _, err := io.ReadFull(c.br, c.buf[shared:]); err != nil {
		return err
	}
	line, err := binary.ReadUvarint(c.br)
	if err != nil {
		return err
	}
	if line == 0 || line > math.MaxInt64 {
		return errCorruptRun
	}
	c.key, c.line = c.buf, int64(line)
	return nil
}

// mergeHeap orders cursors by their current (key, line).
type mergeHeap []*cursor

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].key, h[j].key); c != 0 {
		return c < 0
	}
	return h[i].line < h[j].line
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *mergeHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

// merge calls emit with every entry of the cursors in (key, line) order
// until emit returns true or an error, or the entries run out.
func merge(cursors []*cursor, emit func(key []byte, line int64) (stop bool, err error)) error {
	h := make(mergeHeap, 0, len(cursors))
	for _, c := range cursors {
		switch err := c.next(); err {
		case nil:
			h = append(h, c)
		case io.EOF:
		default:
			return err
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		c := h[0]
		if stop, err := emit(c.key, c.line); stop || err != nil {
			return err
		}
		switch err := c.next(); err {
		case nil:
			heap.Fix(&h, 0)
		case io.EOF:
			heap.Pop(&h)
		default:
			return err
		}
	}
	return nil
}

// openRuns opens runs for a merge, reusing the cursors and their buffers.
// The caller closes them with closeRuns.
func (d *Detector) openRuns(runs []run) ([]*cursor, error) {
	for len(d.cursors) < len(runs) {
		d.cursors = append(d.cursors, &cursor{
			br:  bufio.NewReaderSize(nil, RunBufferBytes),
			buf: make([]byte, 0, MaxKeyBytes),
		})
	}
	cursors := d.cursors[:len(runs)]
	for i, r := range runs {
		f, err := os.Open(r.path)
		if err != nil {
			closeRuns(cursors[:i])
			return nil, err
		}
		c := cursors[i]
		c.f, c.name, c.remaining = f, filepath.Base(r.path), r.entries
		c.br.Reset(f)
		c.buf, c.key, c.line = c.buf[:0], nil, 0
	}
	return cursors, nil
}

func closeRuns(cursors []*cursor) {
	for _, c := range cursors {
		c.f.Close() // read-only: nothing to lose
		c.f = nil
		c.br.Reset(nil)
	}
}

// removeRuns deletes merged run files.
func (d *Detector) removeRuns(runs []run) error {
	for _, r := range runs {
		if err := os.Remove(r.path); err != nil {
			return err
		}
		d.diskBytes -= r.bytes
	}
	return nil
}

// Finish merges the buffer with every run and returns the smallest
// duplicated key in byte order, with its two smallest lines, as a
// *DuplicateKeyError (matching ErrDuplicateKey), or nil if every key added
// is unique. It returns an I/O error if a run cannot be merged or removed,
// joined with the duplicate if one was found first. It removes the
// temporary files and frees the buffer in every case. A later call returns
// the same result; after Close without Finish it returns ErrClosed.
func (d *Detector) Finish() error {
	var dup *DuplicateKeyError
	err := d.finishWith(func(key []byte, first, line int64) (bool, error) {
		dup = &DuplicateKeyError{Key: string(key), FirstLine: first, SecondLine: line}
		return true, nil
	})
	switch {
	case dup != nil && err == nil:
		d.result = dup
	case dup != nil:
		d.result = errors.Join(dup, err)
	default:
		return err
	}
	return d.result
}

// FinishAll is Finish that reports every duplicate instead of the first:
// it calls fn, in key byte order, once for each later line of a key seen
// more than once, as a *DuplicateKeyError whose FirstLine is the key's
// smallest line and SecondLine that later line (a key seen three times
// gives two calls). An error fn returns ends the merge and is returned;
// otherwise FinishAll returns nil, or an I/O error as Finish does. It
// removes the temporary files and frees the buffer in every case; memory
// stays within Finish's bound however many duplicates there are.
func (d *Detector) FinishAll(fn func(*DuplicateKeyError) error) error {
	return d.finishWith(func(key []byte, first, line int64) (bool, error) {
		if err := fn(&DuplicateKeyError{Key: string(key), FirstLine: first, SecondLine: line}); err != nil {
			return true, err
		}
		return false, nil
	})
}

// finishWith merges the buffer with every run, calling dup for each later
// line of a repeated key until it stops, once.
func (d *Detector) finishWith(dup func(key []byte, first, line int64) (bool, error)) error {
	if d.closed {
		if d.finished {
			return d.result
		}
		return ErrClosed
	}
	d.closed, d.finished = true, true
	d.result = d.finish(dup)
	if err := d.cleanup(); err != nil {
		d.result = errors.Join(d.result, err)
	}
	return d.result
}

func (d *Detector) finish(dup func(key []byte, first, line int64) (bool, error)) error {
	if d.err != nil {
		return d.err
	}
	d.sortBuffer()
	for len(d.runs) > d.maxMerge {
		// Merge only as many as needed to leave maxMerge runs, oldest first.
		k := min(d.maxMerge, len(d.runs)-d.maxMerge+1)
		if err := d.mergeRuns(k); err != nil {
			return fmt.Errorf("keyset: merge %d runs: %w", k, err)
		}
	}
	cursors, err := d.openRuns(d.runs)
	if err != nil {
		return fmt.Errorf("keyset: merge %d runs: %w", len(d.runs), err)
	}
	defer closeRuns(cursors)
	cursors = append(cursors[:len(cursors):len(cursors)], &cursor{d: d})

	var firstLine int64
	var fnErr error
	d.prev = make([]byte, 0, MaxKeyBytes)
	err = merge(cursors, func(key []byte, line int64) (bool, error) {
		if firstLine != 0 && bytes.Equal(d.prev, key) {
			stop, err := dup(key, firstLine, line)
			fnErr = err
			return stop, nil
		}
		d.prev, firstLine = append(d.prev[:0], key...), line
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("keyset: merge %d runs: %w", len(d.runs), err)
	}
	return fnErr
}

// mergeRuns merges the k oldest runs into one new run at the end.
func (d *Detector) mergeRuns(k int) error {
	group := d.runs[:k]
	r, err := d.writeRun(func(w *runWriter) error {
		cursors, err := d.openRuns(group)
		if err != nil {
			return err
		}
		defer closeRuns(cursors)
		return merge(cursors, func(key []byte, line int64) (bool, error) {
			return false, w.write(key, line)
		})
	})
	if err != nil {
		return err
	}
	d.runs = append(d.runs[k:], r)
	d.stats.MergePasses++
	return d.removeRuns(group)
}

// Close removes the temporary files and frees the buffer. Add and Finish
// return ErrClosed afterwards (Finish returns its own result if it ran
// first). It is safe to call after Finish and more than once; it returns an
// error only if removing the run directory fails, and a later call tries
// again.
func (d *Detector) Close() error {
	d.closed = true
	return d.cleanup()
}

// cleanup frees the buffer and removes the run directory.
func (d *Detector) cleanup() error {
	d.chunks, d.entries, d.cursors, d.prev, d.bw = nil, nil, nil, nil, nil
	d.cur, d.arenaBytes, d.keyBytes = 0, 0, 0
	if d.tmp == "" {
		return nil
	}
	if err := os.RemoveAll(d.tmp); err != nil {
		return fmt.Errorf("keyset: remove run directory: %w", err)
	}
	d.tmp, d.runs, d.diskBytes = "", nil, 0
	return nil
}

// Stats returns the counts so far. It may be called at any time, also after
// Finish and Close.
func (d *Detector) Stats() Stats { return d.stats }
