package source

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/bulkrun/bulkrun/internal/keyset"
	"github.com/bulkrun/bulkrun/shared/api"
)

// ManifestLine is one line of a manifest: {"key": "...", "input": ...}.
// The manifest is JSON Lines, one item per line, in source order, input JSON
// compacted; its SHA-256 is the batch's digest.
type ManifestLine struct {
	Key   string          `json:"key"`
	Input json.RawMessage `json:"input"`
	// Index and Corrected are set in a correction run's manifest only
	// (Revision.RunKey): the line's index in the batch's manifest, and
	// whether the line is a corrected item (else another item of its
	// pack, counted without running). Other manifests omit them.
	Index     *int64 `json:"i,omitempty"`
	Corrected bool   `json:"c,omitempty"`
	// Invalid ("x") is set on the line of a bad row that runs as a failed
	// item (bad_rows fail; SourceItem.Invalid): why it cannot run. The item
	// function ends such an item failed with it, without calling its
	// pipeline; its Input is what the row held (see BadRow). Absent on
	// every other line.
	Invalid string `json:"x,omitempty"`
}

// DefaultChunkItems is how many items one fan-out message covers.
const DefaultChunkItems = 5000

// ManifestWriter streams a normalized manifest to w while hashing it,
// cutting it into fan-out chunks and detecting duplicate keys in bounded
// memory (internal/keyset spills to disk). Memory: one line plus the key
// detector's budget (keyset.DefaultMemoryBytes unless set) plus one Chunk
// per ChunkItems items. Not safe for concurrent use.
type ManifestWriter struct {
	w         io.Writer
	h         hash.Hash
	seg       *segmentHash // set when the manifest is hashed by parts (Segment)
	keys      *keyset.Detector
	cut       ChunkCutter
	lineBuf   bytes.Buffer
	elements  bool // the source numbers its items by element (a JSON array)
	keysDir   string
	tempLimit int64
	csv       *api.CSVShape // the first item's CSV layout
}

// NewManifestWriter writes to w. chunkItems ≤ 0 means DefaultChunkItems;
// keysDir is where duplicate detection spills ("" means the OS temp dir).
func NewManifestWriter(w io.Writer, chunkItems int, keysDir string) *ManifestWriter {
	return NewManifestWriterOptions(w, ManifestOptions{ChunkItems: chunkItems, Keys: keyset.Options{Dir: keysDir}})
}

// ManifestOptions configures a ManifestWriter.
type ManifestOptions struct {
	ChunkItems int            // items per fan-out chunk; ≤ 0 means DefaultChunkItems
	Keys       keyset.Options // duplicate detection: Dir ("" = OS temp dir), budget, fault injection
	// TempLimitBytes is the size of the disk under Keys.Dir (the submit
	// function's ephemeral storage), named in a *StorageFullError; 0: unknown.
	TempLimitBytes int64
}

// NewManifestWriterOptions writes to w as o says.
func NewManifestWriterOptions(w io.Writer, o ManifestOptions) *ManifestWriter {
	if o.ChunkItems <= 0 {
		o.ChunkItems = DefaultChunkItems
	}
	dir := o.Keys.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	h := sha256.New()
	return &ManifestWriter{
		w:         io.MultiWriter(w, h),
		h:         h,
		keys:      keyset.New(o.Keys),
		cut:       ChunkCutter{Per: int64(o.ChunkItems)},
		keysDir:   dir,
		tempLimit: o.TempLimitBytes,
	}
}

// keysError classifies an error of duplicate detection: a full disk is a
// *StorageFullError (not retryable), anything else an I/O error.
func (m *ManifestWriter) keysError(err error) error {
	var ns *keyset.NoSpaceError
	if errors.As(err, &ns) {
		return &api.StorageFullError{Dir: m.keysDir, LimitBytes: m.tempLimit, Items: m.cut.Count, SpilledBytes: ns.DiskBytes, Err: err}
	}
	return fmt.Errorf("manifest: duplicate detection: %w", err)
}

// Add appends one item. Its key is checked (1–1024 bytes of UTF-8) and
// recorded for duplicate detection, which reports at Finish.
func (m *ManifestWriter) Add(it SourceItem) error {
	if r := api.CheckKey(it.Key); r != "" {
		return &api.InputError{Line: it.Line, Element: it.Element, Key: api.Truncate(it.Key, 80), Reason: r}
	}
	where := it.Line
	if where == 0 {
		where = it.Element
		m.elements = true
	}
	if err := m.keys.Add([]byte(it.Key), where); err != nil {
		return m.keysError(err)
	}
	if err := EncodeManifestLine(&m.lineBuf, it); err != nil {
		return err
	}
	n, err := m.w.Write(m.lineBuf.Bytes())
	if err == nil && m.seg != nil {
		m.seg.h.Write(m.lineBuf.Bytes())
		m.seg.bytes += int64(n)
	}
	if err != nil {
		return fmt.Errorf("manifest: write: %w", err)
	}
	m.cut.Line(int64(n))
	if m.csv == nil {
		m.csv = it.CSV
	}
	return nil
}

// EncodeManifestLine puts it's manifest line, newline included, in buf.
func EncodeManifestLine(buf *bytes.Buffer, it SourceItem) error {
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ManifestLine{Key: it.Key, Input: it.Input, Invalid: it.Invalid}); err != nil { // Encode appends '\n'
		return &api.InputError{Line: it.Line, Element: it.Element, Key: api.Truncate(it.Key, 80), Reason: "cannot encode input", Err: err}
	}
	return nil
}

// Segment ends the manifest's current part (see PartsDigest): Finish's
// digest is then the parts digest of the segments instead of the SHA-256
// of the whole manifest. Call BySegments before the first item and
// Segment after each part of the source, the last one included.
func (m *ManifestWriter) Segment() {
	m.BySegments()
	m.seg.parts = append(m.seg.parts, PartSum{SHA256: hex.EncodeToString(m.seg.h.Sum(nil)), Bytes: m.seg.bytes})
	m.seg.h.Reset()
	m.seg.bytes = 0
}

// BySegments starts hashing by parts (see Segment), before the first
// item.
func (m *ManifestWriter) BySegments() {
	if m.seg == nil {
		m.seg = &segmentHash{h: sha256.New()}
	}
}

type segmentHash struct {
	h     hash.Hash
	bytes int64
	parts []PartSum
}

// ChunkCutter cuts a manifest into fan-out chunks of per items, a line at
// a time: a chunk starts at every per-th line.
type ChunkCutter struct {
	Per    int64 // items per chunk, > 0
	Count  int64 // lines so far
	Offset int64 // bytes so far
	Chunks []Chunk
}

// Line adds the manifest's next line, length bytes long.
func (c *ChunkCutter) Line(length int64) {
	if c.Count%c.Per == 0 {
		c.Chunks = append(c.Chunks, Chunk{Offset: c.Offset, FirstIndex: c.Count})
	}
	ch := &c.Chunks[len(c.Chunks)-1]
	ch.Length += length
	ch.Count++
	c.Offset += length
	c.Count++
}

// ManifestSummary is what Finish returns.
type ManifestSummary struct {
	Digest string // hex SHA-256 of the manifest bytes, or PartsDigest of a source read by parts
	Count  int64
	Bytes  int64
	Chunks []Chunk
	// CSV is the layout of the CSV table the items were read from (the
	// first item's SourceItem.CSV); nil for any other source.
	CSV *api.CSVShape
}

// Finish checks for duplicate keys and returns the summary. A duplicate is
// an *InputError naming the key and both lines (errors.Is ErrInvalid).
func (m *ManifestWriter) Finish() (ManifestSummary, error) {
	if err := m.keys.Finish(); err != nil {
		var dup *keyset.DuplicateKeyError
		if errors.As(err, &dup) {
			if m.elements {
				return ManifestSummary{}, &api.InputError{Element: dup.SecondLine, Key: api.Truncate(dup.Key, 80),
					Reason: fmt.Sprintf("duplicate item key: first seen at element %d, again at element %d", dup.FirstLine, dup.SecondLine)}
			}
			return ManifestSummary{}, &api.InputError{Line: dup.SecondLine, Key: api.Truncate(dup.Key, 80),
				Reason: fmt.Sprintf("duplicate item key: first seen at line %d, again at line %d", dup.FirstLine, dup.SecondLine)}
		}
		return ManifestSummary{}, m.keysError(err)
	}
	digest := hex.EncodeToString(m.h.Sum(nil))
	if m.seg != nil {
		digest = PartsDigest(m.seg.parts)
	}
	return ManifestSummary{Digest: digest, Count: m.cut.Count, Bytes: m.cut.Offset, Chunks: m.cut.Chunks, CSV: m.csv}, nil
}

// FinishAll is Finish handing every duplicate — each later line (or
// element) of a key seen before, in key byte order — to dup as a Problem
// (kind duplicate, Line or Element, Key, FirstLine; Handling unset)
// instead of refusing the first; an error dup returns is returned. The
// summary is the manifest as written: the caller decides what its
// duplicates mean (a check lists them; a submit refuses, or writes the
// manifest again without them).
func (m *ManifestWriter) FinishAll(dup func(api.Problem) error) (ManifestSummary, error) {
	err := m.keys.FinishAll(func(d *keyset.DuplicateKeyError) error {
		p := api.Problem{Line: d.SecondLine, Key: d.Key, Kind: api.ProblemDuplicate, FirstLine: d.FirstLine,
			Reason: fmt.Sprintf("duplicate item key: first seen at line %d", d.FirstLine)}
		if m.elements {
			p.Line, p.Element = 0, d.SecondLine
			p.Reason = fmt.Sprintf("duplicate item key: first seen at element %d", d.FirstLine)
		}
		return dup(p)
	})
	if err != nil {
		var ie *api.InputError
		if errors.As(err, &ie) {
			return ManifestSummary{}, err
		}
		return ManifestSummary{}, m.keysError(err)
	}
	digest := hex.EncodeToString(m.h.Sum(nil))
	if m.seg != nil {
		digest = PartsDigest(m.seg.parts)
	}
	return ManifestSummary{Digest: digest, Count: m.cut.Count, Bytes: m.cut.Offset, Chunks: m.cut.Chunks, CSV: m.csv}, nil
}

// Close releases the duplicate detector's temporary files. Safe after Finish.
func (m *ManifestWriter) Close() error { return m.keys.Close() }

// ReadManifestLines parses manifest lines from r (a chunk or the whole
// manifest), calling fn with each line, its byte offset relative to base
// and its length.
func ReadManifestLines(r io.Reader, base int64, fn func(line ManifestLine, offset, length int64) error) error {
	dec := json.NewDecoder(r)
	off := base
	for {
		var l ManifestLine
		err := dec.Decode(&l)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("manifest at byte %d: %w", off, err)
		}
		end := base + dec.InputOffset()
		// The encoder wrote a '\n' after each line; the decoder stops before it.
		length := end - off + 1
		if err := fn(l, off, length); err != nil {
			return err
		}
		off += length
	}
}
