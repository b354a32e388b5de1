package submit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/bulkrun/bulkrun/internal/keyset"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Reading a large source in parts.
//
// A JSON Lines or CSV object of more than PartsConfig.PartBytes bytes,
// not gzip, is read by several invocations of
// the submit function at once instead of one (Complete hands them off;
// docs/design/submit.md, "Reading a source in parts"):
//
//  1. Complete writes the plan (PartPlan: the object's ETag and size, the
//     part size, a CSV object's delimiter and header) and invokes one read
//     per part (PartEvent, step "read").
//  2. ReadPart reads bytes [i × PartBytes, (i+1) × PartBytes) of the
//     object (a record belongs to the part its first byte is in; a CSV
//     part guesses where its first row starts, see PartStartUnknown),
//     checks and normalizes its records exactly as a whole read does, and
//     writes its manifest part, its keys partitioned by hash (one object,
//     a section per partition), the lengths of its manifest lines and,
//     last, its result. The part that finds every result written invokes
//     the re-reads of the CSV parts that guessed wrong, then one key check
//     per partition (step "keys").
//  3. CheckKeys merges one partition's keys of every part
//     (internal/keyset, with the source's line numbers) and writes what it
//     found; the check that finds every check written assembles: the
//     manifest parts become one object (server-side copies), the fan-out
//     chunks are cut from the lengths, and the batch is frozen or refused
//     as Complete does.
//
// A source without key field (positional keys, item-{index in the
// source}) has every part counted first (step "count", a scan), then read
// knowing its first item's index and its quote state; its keys cannot
// repeat, so there is no key check.
//
// Every object a step writes depends only on the source and the plan, so a
// step run again (a killed invocation, Lambda's retries, the submit tick's
// hand-off, which resumes the parts whose result is missing) writes the
// same bytes. The manifest is byte for byte the one a whole read writes;
// its digest is PartsDigest, which a whole read of the same object gives
// too (it hashes by the same parts), so a repeated submit compares equal.

// DefaultPartBytes is PartsConfig.PartBytes when zero: 512 MiB of source
// per invocation, ≈ 500,000 items of 1 KB, ≈ 8 CPU-seconds of reading
// (docs/design/measured.md, "Measured"): ≈ 14 s at submit's 1,024 MB, far inside
// Lambda's 15 minutes.
const DefaultPartBytes = 512 << 20

// MinComposePartBytes is the smallest manifest part S3 can copy into a
// multipart upload other than the last: 5 MiB (S3 user guide, "Amazon S3
// multipart upload limits"). A source whose manifest parts are smaller
// (its lines mostly blank) is assembled by one invocation reading it whole.
const MinComposePartBytes = 5 << 20

// MaxSourceParts bounds the parts of one source: S3's 10,000 parts per
// multipart upload (the manifest is assembled from one copy per part).
const MaxSourceParts = 10000

// MaxKeyPartitions bounds the key partitions of a source read in parts
// (one per part up to it): a part holds one temporary file per partition
// open at once, within Lambda's 1,024 file descriptors (Lambda quotas).
// At 256, each check merges the keys of 1/256 of the source: ≈ 400,000
// keys at 10^8 items, ≈ 4 million (≈ 450 MB spilled to /tmp, more than
// the default 512 MB of ephemeral storage leaves) at 10^9.
const MaxKeyPartitions = 256

// PartsConfig turns on reading large sources in parts.
type PartsConfig struct {
	// PartBytes is the source bytes per part; 0 means DefaultPartBytes. An
	// object of more than PartBytes bytes is read in parts.
	PartBytes int64
	// Handoff invokes the part steps (the submit function invoking itself
	// asynchronously, internal/trigger); nil reads every part in the
	// invocation that reads the source, one after the other (the same
	// manifest and digest, one invocation's time).
	Handoff PartHandoff
	// MinComposeBytes is the smallest manifest part assembled by an S3
	// copy rather than read again; default MinComposePartBytes, S3's
	// limit (tests of small parts lower it).
	MinComposeBytes int64
	// MaxWholeBytes is the most text a source read by one invocation may
	// hold; default MaxWholeReadBytes (tests lower it).
	MaxWholeBytes int64
}

// PartHandoff starts one step of a source read in parts, asynchronously.
// Starting a step twice is harmless.
type PartHandoff interface {
	StartPart(ctx context.Context, ev ledger.PartEvent) error
}

// PartBlobs is what reading a source in parts needs of Blobs besides the
// interface (internal/blob.Store has it).
type PartBlobs interface {
	// HeadSource returns the size and ETag of bucket/key; a missing object
	// is ErrNotFound.
	HeadSource(ctx context.Context, bucket, key string) (source.ObjectInfo, error)
	// OpenSourceRange reads bytes [offset, offset+length) of bucket/key
	// (length < 0: to the end) only if its ETag is etag: another object
	// under the key is ErrConflict, a missing one ErrNotFound.
	OpenSourceRange(ctx context.Context, bucket, key, etag string, offset, length int64) (io.ReadCloser, error)
	// Compose writes key (batches bucket) as the concatenation of the
	// objects sources (batches bucket), copied by S3 (UploadPartCopy), not
	// read: every source but the last holds MinComposePartBytes to 5 GiB.
	// Writing it again writes the same object.
	Compose(ctx context.Context, key, contentType string, sources []string) error
}

// PartPlan is how a source is cut into parts; written once per batch and
// plan as batches/{id}/parts/{plan}/plan.json.
type PartPlan struct {
	ID        string `json:"id"` // hex of SHA-256(ETag, size, part bytes), 16 digits
	BatchID   string `json:"batch_id"`
	Bucket    string `json:"bucket"`
	Key       string `json:"key"`
	ETag      string `json:"etag"`
	Size      int64  `json:"size"`
	PartBytes int64  `json:"part_bytes"`
	Parts     int    `json:"parts"`
	// Partitions is how many key partitions the parts write and how many
	// checks merge them (one per part, at most MaxKeyPartitions).
	Partitions int `json:"partitions"`
	// Records is how every part's records are read: the format, the key
	// field and the CSV delimiter and header part 0 finds, read once by
	// the plan and given to the other parts.
	source.Records
}

// partResult is what one part read found: batches/{id}/parts/{plan}/part-NNNNN.json.
type partResult struct {
	Part  int   `json:"part"`
	Lines int64 `json:"lines"` // newlines in the part: the line number before the next part's first line
	Items int64 `json:"items"`
	source.PartSum
	// Sections are the offsets of the key partitions in the keys object
	// (Partitions + 1 of them).
	Sections []int64           `json:"sections,omitempty"`
	Refusal  *source.PartError `json:"refusal,omitempty"`
	// InQuote is the start the read assumed (a CSV part: its first byte
	// inside a quoted field); QuoteOdd says whether the part's bytes
	// [i × PartBytes, (i+1) × PartBytes) hold an odd number of '"', which
	// does not depend on the start.
	InQuote  bool `json:"in_quote,omitempty"`
	QuoteOdd bool `json:"quote_odd,omitempty"`
}

// checkResult is what one key check found: batches/{id}/parts/{plan}/check-NNNNN.json.
type checkResult struct {
	Partition int                       `json:"partition"`
	Duplicate *keyset.DuplicateKeyError `json:"duplicate,omitempty"`
}

func partsPrefix(batchID, plan string) string {
	return fmt.Sprintf("batches/%s/parts/%s/", batchID, plan)
}

func (p *PartPlan) prefix() string { return partsPrefix(p.BatchID, p.ID) }

func (p *PartPlan) planKey() string { return p.prefix() + "plan.json" }

// The objects of part i read from a start inside a quoted field (a CSV
// part) end in "-q": both reads of a part can exist, and a late
// invocation of one never overwrites the other's.
func quoteSuffix(inQuote bool) string {
	if inQuote {
		return "-q"
	}
	return ""
}

func (p *PartPlan) resultKey(i int, in bool) string {
	return fmt.Sprintf("%spart-%05d%s.json", p.prefix(), i, quoteSuffix(in))
}

func (p *PartPlan) manifestKey(i int, in bool) string {
	return fmt.Sprintf("%smanifest-%05d%s.jsonl", p.prefix(), i, quoteSuffix(in))
}

func (p *PartPlan) keysKey(i int, in bool) string {
	return fmt.Sprintf("%skeys-%05d%s", p.prefix(), i, quoteSuffix(in))
}

func (p *PartPlan) lengthsKey(i int, in bool) string {
	return fmt.Sprintf("%slengths-%05d%s", p.prefix(), i, quoteSuffix(in))
}

func (p *PartPlan) checkKey(h int) string { return fmt.Sprintf("%scheck-%05d.json", p.prefix(), h) }

func (p *PartPlan) countKey(i int) string { return fmt.Sprintf("%scount-%05d.json", p.prefix(), i) }

func (p *PartPlan) positional() bool { return p.KeyField == "" }

func (p *PartPlan) bounds(i int) (lo, hi int64) {
	return int64(i) * p.PartBytes, min(int64(i+1)*p.PartBytes, p.Size)
}

// partBytes is the part size of s (0: sources are read whole).
func (s *Submitter) partBytes() int64 {
	if s.Parts == nil {
		return 0
	}
	if s.Parts.PartBytes > 0 {
		return s.Parts.PartBytes
	}
	return DefaultPartBytes
}

// planParts returns the plan of req's source when it is read in parts: a
// JSON Lines or CSV object (with a key field, or positional keys: each
// part counted first), of more than the part size,
// not gzip (a gzip stream cannot be entered in the middle: it stays one
// part), with Blobs able to read ranges; a CSV object whose header (and
// delimiter) part 0's bytes hold and a whole read accepts. Otherwise nil:
// the source is read whole. JSON arrays are read whole too, and so is
// the source of a batch with a schema or bad_rows (checkedWhole).
func (s *Submitter) planParts(ctx context.Context, req api.SubmitRequest) (*PartPlan, error) {
	pb := s.partBytes()
	pbl, ok := s.Blobs.(PartBlobs)
	src := req.Source
	if pb <= 0 || !ok || src.Object == "" || checkedWhole(req) {
		return nil, nil
	}
	bucket, key, err := api.ParseS3URI(src.Object)
	if err != nil {
		return nil, nil
	}
	format := src.Format
	if format == "" {
		format = api.FormatOf(key)
	}
	if format != api.FormatJSONL && format != api.FormatCSV {
		return nil, nil
	}
	info, err := pbl.HeadSource(ctx, bucket, key)
	if err != nil {
		if errors.Is(err, api.ErrNotFound) {
			return nil, nil // the whole read names it
		}
		return nil, fmt.Errorf("head %s: %w", src.Object, err)
	}
	if info.Size <= pb || src.ETag != "" && strings.Trim(src.ETag, `"`) != strings.Trim(info.ETag, `"`) {
		return nil, nil
	}
	rc, err := pbl.OpenSourceRange(ctx, bucket, key, info.ETag, 0, 2)
	if err != nil {
		if errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("read %s: %w", src.Object, err)
	}
	head, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", src.Object, err)
	}
	if source.IsGzip(head) {
		return nil, nil
	}
	parts := int((info.Size + pb - 1) / pb)
	if parts > MaxSourceParts {
		return nil, nil
	}
	etag := strings.Trim(info.ETag, `"`)
	id := sha256.Sum256(fmt.Appendf(nil, "%s\n%d\n%d", etag, info.Size, pb))
	plan := &PartPlan{ID: hex.EncodeToString(id[:8]), BatchID: req.BatchID, Bucket: bucket, Key: key, ETag: etag, Size: info.Size,
		PartBytes: pb, Parts: parts, Partitions: min(parts, MaxKeyPartitions), Records: source.Records{KeyField: req.KeyField}}
	if req.KeyField == "" {
		plan.Partitions = 0 // positional keys are unique: no key check
	}
	if format == api.FormatCSV {
		plan.Format, plan.CSVDelimiter = api.FormatCSV, src.CSVDelimiter
		delim, header, err := csvHead(ctx, pbl, plan)
		if err != nil || header == nil {
			return nil, err // a header the whole read refuses, or none in part 0: the whole read names it
		}
		plan.Delimiter, plan.Header = string(delim), header
	}
	return plan, nil
}

// openPart opens part i of plan, its first byte's quote state start (a
// CSV part; source.PartStartUnknown guesses it). It returns a reader of
// the part's bytes; the caller closes rc.
func openPart(ctx context.Context, b PartBlobs, p *PartPlan, i, start int) (*source.PartReader, io.Closer, error) {
	lo, hi := p.bounds(i)
	from := lo
	if i > 0 {
		from = lo - 1 // to tell whether a record starts at lo
	}
	rc, err := b.OpenSourceRange(ctx, p.Bucket, p.Key, p.ETag, from, -1)
	if err != nil {
		switch {
		case errors.Is(err, api.ErrConflict):
			return nil, nil, &api.InputError{Field: "source.object", Reason: fmt.Sprintf("s3://%s/%s changed while it was read: its ETag is no longer %s", p.Bucket, p.Key, p.ETag)}
		case errors.Is(err, api.ErrNotFound):
			return nil, nil, &api.InputError{Field: "source.object", Reason: fmt.Sprintf("s3://%s/%s was deleted while it was read", p.Bucket, p.Key)}
		}
		return nil, nil, fmt.Errorf("read part %d of s3://%s/%s: %w", i, p.Bucket, p.Key, err)
	}
	pr, err := source.OpenPart(rc, p.Records, lo, hi, start)
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("read part %d of s3://%s/%s: %w", i, p.Bucket, p.Key, err)
	}
	return pr, rc, nil
}

// csvHead reads the delimiter and header of p's CSV object as a whole read
// does (source.Records.CSVHead); a nil header when the object changed or
// is gone (the parts' reads refuse it).
func csvHead(ctx context.Context, b PartBlobs, p *PartPlan) (rune, []string, error) {
	rc, err := b.OpenSourceRange(ctx, p.Bucket, p.Key, p.ETag, 0, -1)
	if err != nil {
		if errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrNotFound) {
			return 0, nil, nil
		}
		return 0, nil, fmt.Errorf("read s3://%s/%s: %w", p.Bucket, p.Key, err)
	}
	defer rc.Close()
	delim, header, err := p.CSVHead(rc, p.PartBytes)
	if err != nil {
		return 0, nil, fmt.Errorf("read s3://%s/%s: %w", p.Bucket, p.Key, err)
	}
	return delim, header, nil
}

// countPart counts the items of part i of p without parsing them
// (source.Records.CountPart).
func countPart(ctx context.Context, b PartBlobs, p *PartPlan, i int) (source.PartCount, error) {
	c := source.PartCount{Part: i}
	lo, hi := p.bounds(i)
	from := lo
	if i > 0 {
		from = lo - 1
	}
	rc, err := b.OpenSourceRange(ctx, p.Bucket, p.Key, p.ETag, from, -1)
	if err != nil {
		if errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrNotFound) {
			return c, nil // the part's read refuses it, naming the object
		}
		return c, fmt.Errorf("count part %d of s3://%s/%s: %w", i, p.Bucket, p.Key, err)
	}
	defer rc.Close()
	c, err = p.CountPart(rc, lo, hi)
	c.Part = i
	if err != nil {
		return c, fmt.Errorf("count part %d: %w", i, err)
	}
	return c, nil
}

// partRead is what reading a part found besides its items.
type partRead struct {
	lines    int64 // newlines in the part
	inQuote  bool  // the start state assumed (CSV)
	quoteOdd bool  // an odd number of quotes in [lo, hi) (CSV)
}

// readPart reads part i of p from start (a CSV part's quote state at its
// first byte, see PartStartUnknown), calling emit with each item, its
// line counted from the part's first line; base is the positional index
// of its first item (a source without key field). A record encoding/csv
// refuses is its *csv.ParseError (see partFault).
func readPart(ctx context.Context, b PartBlobs, p *PartPlan, i, start int, base int64, emit func(source.SourceItem) error) (partRead, error) {
	pr, rc, err := openPart(ctx, b, p, i, start)
	if err != nil {
		return partRead{}, err
	}
	defer rc.Close()
	err = p.ReadPart(pr, i == 0, base, emit)
	return partRead{lines: pr.Lines(), inQuote: pr.InQuote(), quoteOdd: pr.QuoteOdd()}, err
}

// readWholeByParts reads every part of p in turn into mw, ending a
// manifest segment after each: one invocation's read of a source that is
// read in parts (a synchronous submit, an upload, or no PartHandoff),
// giving the same manifest and digest as the parts would. Each part's
// start state is known here: the quote parity of the parts before it.
func readWholeByParts(ctx context.Context, b PartBlobs, p *PartPlan, mw *source.ManifestWriter) error {
	var base, items int64
	in := false
	mw.BySegments()
	for i := 0; i < p.Parts; i++ {
		read, err := readPart(ctx, b, p, i, source.PartStartOf(in), items, func(it source.SourceItem) error {
			it.Line += base
			items++
			return mw.Add(it)
		})
		if err != nil {
			var ie *api.InputError
			var pe *csv.ParseError
			switch {
			case errors.As(err, &ie):
				if ie.Line > 0 {
					ie.Line += base
				}
			case errors.As(err, &pe):
				f, _ := source.PartFault(err)
				return f.InputError(base)
			}
			return err
		}
		base += read.lines
		in = in != read.quoteOdd
		mw.Segment()
	}
	return nil
}

// keyEntries writes (key, line) entries of a part to one temporary file
// per partition.
type keyEntries struct {
	dir   string
	files []*os.File
	bufs  []*bufio.Writer
	tmp   []byte
}

func newKeyEntries(dir string, partitions int) (*keyEntries, error) {
	d, err := os.MkdirTemp(dir, "bulkrun-part-keys-")
	if err != nil {
		return nil, err
	}
	return &keyEntries{dir: d, files: make([]*os.File, partitions), bufs: make([]*bufio.Writer, partitions)}, nil
}

// partitionOf is the key partition of key: FNV-1a 64 mod partitions.
func partitionOf(key string, partitions int) int {
	h := fnv.New64a()
	io.WriteString(h, key)
	return int(h.Sum64() % uint64(partitions))
}

func (k *keyEntries) add(key string, line int64) error {
	h := partitionOf(key, len(k.files))
	if k.files[h] == nil {
		f, err := os.Create(filepath.Join(k.dir, fmt.Sprint(h)))
		if err != nil {
			return err
		}
		k.files[h], k.bufs[h] = f, bufio.NewWriterSize(f, 16<<10)
	}
	k.tmp = binary.AppendUvarint(k.tmp[:0], uint64(len(key)))
	k.tmp = append(k.tmp, key...)
	k.tmp = binary.AppendUvarint(k.tmp, uint64(line))
	_, err := k.bufs[h].Write(k.tmp)
	return err
}

// writeTo writes the partitions one after the other to w and returns
// their offsets (partitions + 1).
func (k *keyEntries) writeTo(w io.Writer) ([]int64, error) {
	offs := make([]int64, 0, len(k.files)+1)
	var off int64
	for h, f := range k.files {
		offs = append(offs, off)
		if f == nil {
			continue
		}
		if err := k.bufs[h].Flush(); err != nil {
			return nil, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		n, err := io.Copy(w, f)
		if err != nil {
			return nil, err
		}
		off += n
	}
	return append(offs, off), nil
}

func (k *keyEntries) close() {
	for _, f := range k.files {
		if f != nil {
			f.Close()
		}
	}
	os.RemoveAll(k.dir)
}

// getJSON reads key into v; found is false when it is missing.
func getJSON(ctx context.Context, b ledger.Blobs, key string, v any) (found bool, err error) {
	body, err := b.Get(ctx, key)
	if errors.Is(err, api.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fmt.Errorf("%s: %w", key, err)
	}
	return true, nil
}

func putJSON(ctx context.Context, b ledger.Blobs, key string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(ctx, key, "application/json", body)
}

// countObjects counts the objects under prefix whose key starts with it.
func countObjects(ctx context.Context, b ledger.Blobs, prefix string) (int, error) {
	n := 0
	err := b.List(ctx, b.Bucket(), prefix, func(source.ObjectInfo) error { n++; return nil })
	return n, err
}

// startParts begins (or resumes) reading b's source in parts: it writes
// the plan and hands off a read of every part that has no result. When
// every part has one, it goes on at once.
func (s *Submitter) startParts(ctx context.Context, b ledger.Batch, p *PartPlan) (ledger.Batch, error) {
	if err := putJSON(ctx, s.Blobs, p.planKey(), p); err != nil {
		return b, err
	}
	if p.positional() {
		return s.countedParts(ctx, b, p, false)
	}
	have, err := s.listParts(ctx, p)
	if err != nil {
		return b, err
	}
	missing := 0
	for i := 0; i < p.Parts; i++ {
		if have[i][0] || have[i][1] {
			continue
		}
		missing++
		if err := s.Parts.Handoff.StartPart(ctx, ledger.PartEvent{Step: ledger.PartStepRead, BatchID: b.ID, Plan: p.ID, Index: i}); err != nil {
			return b, fmt.Errorf("submit %s: hand off part %d: %w", b.ID, i, err)
		}
	}
	s.Log.InfoContext(ctx, "source read in parts", "batch_id", b.ID, "plan", p.ID, "parts", p.Parts, "handed_off", missing, "bytes", p.Size)
	if missing == 0 {
		return s.partsRead(ctx, b, p, true, false)
	}
	return b, nil
}

// handOffOnce reports whether this call is the first to hand off the
// steps named what of plan p (an object written If-None-Match): of the
// steps that end together and each find every step before them done,
// one hands off the next steps. Without once (the background read and the
// tick resuming a read, which hand off only what is missing) it is true.
func (s *Submitter) handOffOnce(ctx context.Context, p *PartPlan, what string, once bool) (bool, error) {
	if !once {
		return true, nil
	}
	err := s.Blobs.PutIfAbsent(ctx, p.prefix()+"handed-off-"+what, "application/json", []byte("{}\n"))
	if errors.Is(err, api.ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// handOffFailed lets the retry of a step whose hand-off of the steps
// named what failed hand them off again (see handOffOnce), and returns err.
func (s *Submitter) handOffFailed(ctx context.Context, p *PartPlan, what string, err error) error {
	if derr := s.Blobs.Delete(ctx, p.prefix()+"handed-off-"+what); derr != nil {
		return errors.Join(err, derr)
	}
	return err
}

// listParts returns which results exist of each part: [i][0] read from a
// start outside a quoted field, [i][1] inside.
func (s *Submitter) listParts(ctx context.Context, p *PartPlan) ([][2]bool, error) {
	have := make([][2]bool, p.Parts)
	prefix := p.prefix() + "part-"
	err := s.Blobs.List(ctx, s.Blobs.Bucket(), prefix, func(o source.ObjectInfo) error {
		name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), ".json")
		if !ok {
			return nil
		}
		num, in := strings.CutSuffix(name, "-q")
		var i int
		if _, err := fmt.Sscanf(num, "%d", &i); err == nil && i >= 0 && i < p.Parts {
			have[i][btoi(in)] = true
		}
		return nil
	})
	return have, err
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func allParts(have [][2]bool) bool {
	for _, h := range have {
		if !h[0] && !h[1] {
			return false
		}
	}
	return true
}

// loadPlan reads the plan of ev and its batch; ok is false when there is
// nothing more to do (the batch is no longer submitting, or forgotten).
func (s *Submitter) loadPlan(ctx context.Context, ev ledger.PartEvent) (ledger.Batch, *PartPlan, bool, error) {
	b, err := s.Store.GetBatch(ctx, ev.BatchID)
	if errors.Is(err, api.ErrNotFound) || err == nil && b.Status != api.StatusSubmitting {
		return b, nil, false, nil
	}
	if err != nil {
		return b, nil, false, err
	}
	var p PartPlan
	found, err := getJSON(ctx, s.Blobs, partsPrefix(ev.BatchID, ev.Plan)+"plan.json", &p)
	if err != nil || !found {
		if err == nil {
			err = fmt.Errorf("submit %s: plan %s is missing", ev.BatchID, ev.Plan)
		}
		return b, nil, false, err
	}
	return b, &p, true, nil
}

// Part runs one step of a source read in parts (the event PartEvent). An
// error is to be retried (the step is idempotent); a bad source refuses
// the batch when every part has been read.
func (s *Submitter) Part(ctx context.Context, ev ledger.PartEvent) (ledger.Batch, error) {
	b, p, ok, err := s.loadPlan(ctx, ev)
	if !ok || err != nil {
		return b, err
	}
	if ev.Index < 0 || ev.Step == ledger.PartStepRead && ev.Index >= p.Parts || ev.Step == ledger.PartStepKeys && ev.Index >= p.Partitions ||
		ev.Start < source.PartStartUnknown || ev.Start > source.PartStartInside {
		return b, fmt.Errorf("submit %s: %s step %d outside plan %s", ev.BatchID, ev.Step, ev.Index, p.ID)
	}
	if p.positional() && ev.Step == ledger.PartStepRead && ev.Start == source.PartStartUnknown {
		return b, fmt.Errorf("submit %s: read of part %d without its start and base (positional keys)", ev.BatchID, ev.Index)
	}
	switch ev.Step {
	case ledger.PartStepCount:
		if ev.Index >= p.Parts || !p.positional() {
			return b, fmt.Errorf("submit %s: count step %d outside plan %s", ev.BatchID, ev.Index, p.ID)
		}
		if err := s.countStep(ctx, p, ev.Index); err != nil {
			return b, err
		}
		n, err := countObjects(ctx, s.Blobs, p.prefix()+"count-")
		if err != nil || n < p.Parts {
			return b, err
		}
		return s.countedParts(ctx, b, p, true)
	case ledger.PartStepRead:
		if err := s.readPartStep(ctx, p, ev.Index, ev.Start, ev.Base); err != nil {
			return b, err
		}
		have, err := s.listParts(ctx, p)
		if err != nil || !allParts(have) {
			return b, err
		}
		// The first reads hand off the re-reads; a re-read goes on only
		// when it finds every re-read done.
		return s.partsRead(ctx, b, p, ev.Start == source.PartStartUnknown, true)
	case ledger.PartStepKeys:
		if err := s.checkKeysStep(ctx, p, ev.Index); err != nil {
			return b, err
		}
		n, err := countObjects(ctx, s.Blobs, p.prefix()+"check-")
		if err != nil || n < p.Partitions {
			return b, err
		}
		return s.assemble(ctx, b, p)
	}
	return b, fmt.Errorf("submit %s: unknown part step %q", ev.BatchID, ev.Step)
}

// readPartStep reads part i from start and writes its objects, the
// result last. A part whose result exists (for that start; any start
// when it is unknown) is not read again.
func (s *Submitter) readPartStep(ctx context.Context, p *PartPlan, i, start int, base int64) error {
	exists := func(in bool) (bool, error) {
		var done partResult
		return getJSON(ctx, s.Blobs, p.resultKey(i, in), &done)
	}
	for _, in := range []bool{false, true} {
		if start != source.PartStartUnknown && in != (start == source.PartStartInside) {
			continue
		}
		if found, err := exists(in); err != nil || found {
			return err
		}
	}
	pb := s.Blobs.(PartBlobs)
	pr, rc, err := openPart(ctx, pb, p, i, start)
	if err != nil {
		var ie *api.InputError
		if errors.As(err, &ie) {
			f, _ := source.PartFault(err)
			return putJSON(ctx, s.Blobs, p.resultKey(i, start == source.PartStartInside), partResult{Part: i, InQuote: start == source.PartStartInside, Refusal: f})
		}
		return err
	}
	defer rc.Close()
	in := pr.InQuote()
	if start == source.PartStartUnknown {
		if found, err := exists(in); err != nil || found {
			return err
		}
	}
	dir := s.Keys.Dir
	if dir == "" {
		dir = s.TempDir
	}
	keys, err := newKeyEntries(dir, p.Partitions)
	if err != nil {
		return fmt.Errorf("part %d: %w", i, err)
	}
	defer keys.close()
	mw, err := s.Blobs.Create(ctx, p.manifestKey(i, in), "application/x-ndjson")
	if err != nil {
		return err
	}
	h := sha256.New()
	res := partResult{Part: i, InQuote: in}
	var lengths []byte
	var line bytes.Buffer
	w := io.MultiWriter(mw, h)
	err = p.ReadPart(pr, i == 0, base, func(it source.SourceItem) error {
		if err := source.EncodeManifestLine(&line, it); err != nil {
			return err
		}
		if p.Partitions > 0 { // positional keys are unique: nothing to check
			if err := keys.add(it.Key, it.Line); err != nil {
				return fmt.Errorf("part %d: keys: %w", i, err)
			}
		}
		n, err := w.Write(line.Bytes())
		if err != nil {
			return fmt.Errorf("part %d: manifest: %w", i, err)
		}
		lengths = binary.AppendUvarint(lengths, uint64(n))
		res.Items++
		res.Bytes += int64(n)
		return nil
	})
	res.Lines = pr.Lines()
	if f, ok := source.PartFault(err); ok {
		_ = mw.Abort()
		// The parity of the quotes in the part's bytes, which the parts
		// after it need to know where they start, even so.
		res.Refusal = f
		if res.QuoteOdd, err = pr.QuoteParity(); err != nil {
			return fmt.Errorf("part %d: %w", i, err)
		}
		return putJSON(ctx, s.Blobs, p.resultKey(i, in), res)
	}
	if err != nil {
		_ = mw.Abort()
		return err
	}
	res.QuoteOdd = pr.QuoteOdd()
	if err := mw.Close(); err != nil {
		return fmt.Errorf("part %d: manifest: %w", i, err)
	}
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	if p.Partitions > 0 {
		kw, err := s.Blobs.Create(ctx, p.keysKey(i, in), "application/octet-stream")
		if err != nil {
			return err
		}
		if res.Sections, err = keys.writeTo(kw); err != nil {
			_ = kw.Abort()
			return fmt.Errorf("part %d: keys: %w", i, err)
		}
		if err := kw.Close(); err != nil {
			return fmt.Errorf("part %d: keys: %w", i, err)
		}
	}
	if err := s.Blobs.Put(ctx, p.lengthsKey(i, in), "application/octet-stream", lengths); err != nil {
		return err
	}
	return putJSON(ctx, s.Blobs, p.resultKey(i, in), res)
}

// settled returns the result of every part read from its true start:
// part 0 from outside a quoted field, part i+1 from inside one when the
// parts before it hold an odd number of quotes (JSON Lines parts: all
// outside). A part whose only result assumed another start is to be read
// again: reread lists those steps (their rs entries are zero). The parts
// after the first refused one are not needed: refused is its index (-1:
// none) and rs ends with it. Every part needs a result of some start
// (the quote parity of its bytes, which every result records).
func (s *Submitter) settled(ctx context.Context, p *PartPlan) (rs []partResult, reread []ledger.PartEvent, refused int, err error) {
	have, err := s.listParts(ctx, p)
	if err != nil {
		return nil, nil, -1, err
	}
	both := make([][2]partResult, p.Parts)
	errs := make([]error, 2*p.Parts) // one per result read: a part's two starts are read at once
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range both {
		for q, in := range []bool{false, true} {
			if !have[i][q] {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				found, err := getJSON(ctx, s.Blobs, p.resultKey(i, in), &both[i][q])
				if err == nil && !found {
					err = fmt.Errorf("the result of part %d of plan %s is gone", i, p.ID)
				}
				errs[2*i+q] = err
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, -1, err
	}
	rs = make([]partResult, 0, p.Parts)
	in := false
	for i := range both {
		q := btoi(in)
		switch {
		case have[i][q]:
			if both[i][q].Refusal != nil {
				return append(rs, both[i][q]), reread, i, nil
			}
			rs = append(rs, both[i][q])
		case have[i][1-q]:
			reread = append(reread, ledger.PartEvent{Step: ledger.PartStepRead, BatchID: p.BatchID, Plan: p.ID, Index: i, Start: source.PartStartOf(in)})
			rs = append(rs, partResult{})
		default:
			return nil, nil, -1, fmt.Errorf("part %d of plan %s has no result", i, p.ID)
		}
		// The parity of the part's bytes, the same whatever its start.
		odd := both[i][q].QuoteOdd
		if !have[i][q] {
			odd = both[i][1-q].QuoteOdd
		}
		in = in != odd
	}
	return rs, reread, -1, nil
}

// results reads the settled result of every part; any part not settled
// is an error.
func (s *Submitter) results(ctx context.Context, p *PartPlan) ([]partResult, error) {
	rs, reread, refused, err := s.settled(ctx, p)
	switch {
	case err != nil:
		return nil, err
	case len(reread) > 0:
		return nil, fmt.Errorf("part %d of plan %s has no result read from its start", reread[0].Index, p.ID)
	case refused >= 0:
		return nil, fmt.Errorf("part %d of plan %s is refused", refused, p.ID)
	}
	return rs, nil
}

// partsRead goes on once every part is read: a part that is to be read
// again from another start (a CSV part that guessed wrong) is handed off
// when handOff is set, and the batch waits for it; a part that refused its
// lines refuses the batch (the first such part, its line numbered in the
// whole source, as a whole read would name it); else the key checks are
// handed off.
func (s *Submitter) partsRead(ctx context.Context, b ledger.Batch, p *PartPlan, handOff, once bool) (ledger.Batch, error) {
	rs, reread, refused, err := s.settled(ctx, p)
	if err != nil {
		return b, err
	}
	if len(reread) > 0 {
		if !handOff {
			return b, nil // the re-read that finds every re-read done goes on
		}
		if first, err := s.handOffOnce(ctx, p, "rereads", once); err != nil || !first {
			return b, err
		}
		for _, ev := range reread {
			if s.Parts.Handoff == nil {
				if err := s.readPartStep(ctx, p, ev.Index, ev.Start, ev.Base); err != nil {
					return b, err
				}
				continue
			}
			if err := s.Parts.Handoff.StartPart(ctx, ev); err != nil {
				return b, s.handOffFailed(ctx, p, "rereads", fmt.Errorf("submit %s: hand off part %d again: %w", b.ID, ev.Index, err))
			}
		}
		s.Log.InfoContext(ctx, "parts read again from their quote state", "batch_id", b.ID, "plan", p.ID, "parts", len(reread))
		if s.Parts.Handoff != nil {
			return b, nil
		}
		return s.partsRead(ctx, b, p, false, false)
	}
	var base, items int64
	for i, r := range rs {
		if i == refused {
			ie := r.Refusal.InputError(base)
			return s.refuse(ctx, b, refusalOf(fmt.Errorf("submit %s: %w", b.ID, ie)))
		}
		base += r.Lines
		items += r.Items
	}
	if items == 0 {
		return s.refuse(ctx, b, refusalOf(&api.InputError{Field: "source.object", Reason: "holds no items (blank and whitespace-only lines are not items)", Err: api.ErrEmptySource}))
	}
	if p.Partitions > 0 && s.Parts.Handoff != nil {
		if first, err := s.handOffOnce(ctx, p, "checks", once); err != nil || !first {
			return b, err
		}
	}
	for h := 0; h < p.Partitions; h++ {
		var c checkResult
		found, err := getJSON(ctx, s.Blobs, p.checkKey(h), &c)
		if err != nil {
			return b, err
		}
		if found {
			continue
		}
		if s.Parts.Handoff == nil {
			if err := s.checkKeysStep(ctx, p, h); err != nil {
				return b, err
			}
			continue
		}
		if err := s.Parts.Handoff.StartPart(ctx, ledger.PartEvent{Step: ledger.PartStepKeys, BatchID: b.ID, Plan: p.ID, Index: h}); err != nil {
			return b, s.handOffFailed(ctx, p, "checks", fmt.Errorf("submit %s: hand off key check %d: %w", b.ID, h, err))
		}
	}
	if n, err := countObjects(ctx, s.Blobs, p.prefix()+"check-"); err != nil || n < p.Partitions {
		return b, err
	}
	return s.assemble(ctx, b, p)
}

func refusalOf(err error) api.SubmitRefusal {
	r, _ := api.RefusalOf(err)
	return r
}

// checkKeysStep merges partition h of every part's keys, their lines
// numbered in the whole source, and writes what it found.
func (s *Submitter) checkKeysStep(ctx context.Context, p *PartPlan, h int) error {
	var c checkResult
	if found, err := getJSON(ctx, s.Blobs, p.checkKey(h), &c); err != nil || found {
		return err
	}
	rs, err := s.results(ctx, p)
	if err != nil {
		return err
	}
	opts := s.Keys
	if opts.Dir == "" {
		opts.Dir = s.TempDir
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = SubmitKeysMemoryBytes
	}
	d := keyset.New(opts)
	defer d.Close()
	var base int64
	for i, r := range rs {
		if len(r.Sections) <= h+1 || r.Sections[h+1] == r.Sections[h] {
			base += r.Lines
			continue
		}
		rc, err := s.Blobs.OpenRange(ctx, p.keysKey(i, r.InQuote), r.Sections[h], r.Sections[h+1]-r.Sections[h])
		if err != nil {
			return err
		}
		br := bufio.NewReaderSize(rc, 64<<10)
		for {
			n, err := binary.ReadUvarint(br)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return fmt.Errorf("keys of part %d: %w", i, err)
			}
			key := make([]byte, n)
			if _, err := io.ReadFull(br, key); err != nil {
				rc.Close()
				return fmt.Errorf("keys of part %d: %w", i, err)
			}
			line, err := binary.ReadUvarint(br)
			if err != nil {
				rc.Close()
				return fmt.Errorf("keys of part %d: %w", i, err)
			}
			if err := d.Add(key, base+int64(line)); err != nil {
				rc.Close()
				return fmt.Errorf("key check %d: %w", h, err)
			}
		}
		rc.Close()
		base += r.Lines
	}
	c = checkResult{Partition: h}
	if err := d.Finish(); err != nil {
		if !errors.As(err, &c.Duplicate) {
			return fmt.Errorf("key check %d: %w", h, err)
		}
	}
	return putJSON(ctx, s.Blobs, p.checkKey(h), c)
}

// assemble ends a read in parts: a duplicate key refuses the batch (the
// smallest duplicated key, at its first two lines, as a whole read names
// it); else the manifest parts become the batch's manifest, the chunks
// are cut, and the batch is frozen and fanned out as Complete does.
func (s *Submitter) assemble(ctx context.Context, b ledger.Batch, p *PartPlan) (ledger.Batch, error) {
	if cur, err := s.Store.GetBatch(ctx, b.ID); err != nil || cur.Status != api.StatusSubmitting {
		return cur, err
	}
	var dup *keyset.DuplicateKeyError
	for h := 0; h < p.Partitions; h++ {
		var c checkResult
		if _, err := getJSON(ctx, s.Blobs, p.checkKey(h), &c); err != nil {
			return b, err
		}
		if c.Duplicate != nil && (dup == nil || c.Duplicate.Key < dup.Key) {
			dup = c.Duplicate
		}
	}
	if dup != nil {
		return s.refuse(ctx, b, refusalOf(&api.InputError{Field: "source.object", Line: dup.SecondLine, Key: api.Truncate(dup.Key, 80),
			Reason: fmt.Sprintf("duplicate item key: first seen at line %d, again at line %d", dup.FirstLine, dup.SecondLine)}))
	}
	rs, err := s.results(ctx, p)
	if err != nil {
		return b, err
	}
	minCompose := s.Parts.MinComposeBytes
	if minCompose == 0 {
		minCompose = MinComposePartBytes
	}
	var sources []string
	sums := make([]source.PartSum, 0, len(rs))
	for i, r := range rs {
		sums = append(sums, r.PartSum)
		if r.Bytes == 0 {
			continue
		}
		if r.Bytes < minCompose && i < len(rs)-1 {
			s.Log.WarnContext(ctx, "a manifest part is too small to be copied; the source is read whole", "batch_id", b.ID, "part", i, "bytes", r.Bytes)
			return s.completeWhole(ctx, b)
		}
		sources = append(sources, p.manifestKey(i, r.InQuote))
	}
	manifestKey := api.ManifestKey(b.ID, "parts-"+p.ID)
	if err := s.Blobs.(PartBlobs).Compose(ctx, manifestKey, "application/x-ndjson", sources); err != nil {
		return b, fmt.Errorf("submit %s: assemble manifest: %w", b.ID, err)
	}
	var req api.SubmitRequest
	if err := json.Unmarshal(b.Request, &req); err != nil {
		return b, fmt.Errorf("submit %s: the accepted request: %w", b.ID, err)
	}
	if err := s.keepSchema(ctx, manifestKey, req.Schema); err != nil {
		return b, fmt.Errorf("submit %s: %w", b.ID, err)
	}
	sum, err := s.partChunks(ctx, p, rs)
	if err != nil {
		return b, err
	}
	sum.Digest = source.PartsDigest(sums)
	// The chunks, for a fan-out sent again (resume, the finalize tick):
	// cutting them from a manifest of 10^8 items would take one invocation
	// longer than Lambda allows.
	if err := putJSON(ctx, s.Blobs, ledger.ChunksKey(manifestKey), sum.Chunks); err != nil {
		return b, err
	}
	b, err = s.freezeAndFanOut(ctx, b, manifestKey, sum, false)
	if err == nil && b.Status == api.StatusRunning {
		if _, derr := s.Blobs.DeletePrefix(ctx, p.prefix()); derr != nil {
			s.Log.WarnContext(ctx, "delete the parts", "batch_id", b.ID, "error", derr.Error())
		}
	}
	return b, err
}

// partsManifest reports whether a manifest was assembled from parts.
func partsManifest(manifestKey string) bool {
	return strings.Contains(manifestKey, "/manifests/parts-")
}

// partChunks cuts the fan-out chunks of the assembled manifest from the
// parts' line lengths, exactly as a whole read cuts them.
func (s *Submitter) partChunks(ctx context.Context, p *PartPlan, rs []partResult) (source.ManifestSummary, error) {
	per := int64(s.ChunkItems)
	if per <= 0 {
		per = source.DefaultChunkItems
	}
	cut := source.ChunkCutter{Per: per}
	for i, r := range rs {
		if r.Items == 0 {
			continue
		}
		lengths, err := s.Blobs.Get(ctx, p.lengthsKey(i, r.InQuote))
		if err != nil {
			return source.ManifestSummary{}, fmt.Errorf("lengths of part %d: %w", i, err)
		}
		for len(lengths) > 0 {
			n, k := binary.Uvarint(lengths)
			if k <= 0 {
				return source.ManifestSummary{}, fmt.Errorf("lengths of part %d: malformed", i)
			}
			lengths = lengths[k:]
			cut.Line(int64(n))
		}
	}
	sum := source.ManifestSummary{Count: cut.Count, Bytes: cut.Offset, Chunks: cut.Chunks}
	if p.CSV() && p.Delimiter != "" {
		sum.CSV = source.CSVShapeOf(p.Delimiter, p.Header) // part 0's, which every part read with
	}
	return sum, nil
}

// checkedWhole reports whether req asks for checks — a schema, or
// bad_rows (refuse or fail) — and so has every problem of its source
// listed in one read: such a source is read whole, not in parts (at most
// MaxWholeReadBytes of text, see wholeReadFits), its rows becoming
// items of the manifest or leaving it (duplicates) as that one read
// decides. Without checks the first problem refuses the source, as a
// read in parts does.
func checkedWhole(req api.SubmitRequest) bool {
	return len(req.Schema) > 0 || req.BadRows != ""
}

// completeWhole reads a submitting batch's source in this invocation
// (the fallback of assemble).
func (s *Submitter) completeWhole(ctx context.Context, b ledger.Batch) (ledger.Batch, error) {
	var req api.SubmitRequest
	if err := json.Unmarshal(b.Request, &req); err != nil {
		return s.refuse(ctx, b, api.SubmitRefusal{Code: api.RefusalInternal, Message: "the stored request does not decode: " + err.Error()})
	}
	manifestKey, sum, checked, err := s.writeManifest(ctx, req, true)
	if err != nil {
		if r, ok := api.RefusalOf(err); ok {
			return s.refuse(ctx, b, r)
		}
		return b, err
	}
	b.Checked = checked
	return s.freezeAndFanOut(ctx, b, manifestKey, sum, true)
}

// countedParts goes on with a source without key field: a part's keys
// are the indexes of its items in the whole source, so every part is
// counted first (a scan, no parsing) and then read knowing its first
// item's index and, in CSV, whether it begins inside a quoted field. It
// hands off the counts missing or, every part counted, the reads
// missing; every part read, it goes on at once. A count step that finds
// every count (once, after the steps that end together: once) hands off
// the reads only if it is the first to (handOffOnce).
func (s *Submitter) countedParts(ctx context.Context, b ledger.Batch, p *PartPlan, once bool) (ledger.Batch, error) {
	counts := make([]source.PartCount, p.Parts)
	found := make([]bool, p.Parts)
	errs := make([]error, p.Parts)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range counts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			found[i], errs[i] = getJSON(ctx, s.Blobs, p.countKey(i), &counts[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return b, err
	}
	missing := 0
	for i := range counts {
		if found[i] {
			continue
		}
		missing++
		if err := s.Parts.Handoff.StartPart(ctx, ledger.PartEvent{Step: ledger.PartStepCount, BatchID: b.ID, Plan: p.ID, Index: i}); err != nil {
			return b, fmt.Errorf("submit %s: hand off the count of part %d: %w", b.ID, i, err)
		}
	}
	if missing > 0 {
		s.Log.InfoContext(ctx, "source counted in parts", "batch_id", b.ID, "plan", p.ID, "parts", p.Parts, "handed_off", missing, "bytes", p.Size)
		return b, nil
	}
	if first, err := s.handOffOnce(ctx, p, "reads", once); err != nil || !first {
		return b, err
	}
	have, err := s.listParts(ctx, p)
	if err != nil {
		return b, err
	}
	in, base := false, int64(0)
	for i, c := range counts {
		if !have[i][btoi(in)] {
			missing++
			if err := s.Parts.Handoff.StartPart(ctx, ledger.PartEvent{Step: ledger.PartStepRead, BatchID: b.ID, Plan: p.ID, Index: i, Start: source.PartStartOf(in), Base: base}); err != nil {
				return b, s.handOffFailed(ctx, p, "reads", fmt.Errorf("submit %s: hand off part %d: %w", b.ID, i, err))
			}
		}
		base += c.Items[btoi(in)]
		in = in != c.QuoteOdd
	}
	s.Log.InfoContext(ctx, "source read in parts", "batch_id", b.ID, "plan", p.ID, "parts", p.Parts, "handed_off", missing, "items", base)
	if missing == 0 {
		return s.partsRead(ctx, b, p, true, false)
	}
	return b, nil
}

// countStep counts part i's items and writes what it found; a part
// counted already is not counted again.
func (s *Submitter) countStep(ctx context.Context, p *PartPlan, i int) error {
	var c source.PartCount
	if found, err := getJSON(ctx, s.Blobs, p.countKey(i), &c); err != nil || found {
		return err
	}
	c, err := countPart(ctx, s.Blobs.(PartBlobs), p, i)
	if err != nil {
		return err
	}
	return putJSON(ctx, s.Blobs, p.countKey(i), c)
}
