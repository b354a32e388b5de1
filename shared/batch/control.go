package batch

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Resume starts a new run of a finished batch from its stored manifest:
// succeeded items are answered from their rows without running, quarantined
// ones stay set aside unless released, failed and cancelled ones run again;
// the run gets its own report. A resume retried while its fan-out was
// interrupted finishes that fan-out. Errors: ErrNotFound; ErrExpired
// (wrapped) once the retention has ended; ErrConflict (wrapped) while a
// run is still going.
func (s *Submitter) Resume(ctx context.Context, id string) (Batch, error) {
	b, err := s.Store.GetBatch(ctx, id)
	if err != nil {
		return Batch{}, err
	}
	if b.Status == StatusSubmitting || b.Status == StatusRefused {
		return b, fmt.Errorf("resume %s: the batch is %s, it has no manifest to run: %w", id, b.Status, ErrConflict)
	}
	if b, err = Live(b, s.Clock.Now()); err != nil {
		return Batch{}, fmt.Errorf("resume: %w", err)
	}
	if b.Status == StatusRunning {
		if b.FannedOut {
			return b, fmt.Errorf("resume %s: run %d is still going: %w", id, b.Run, ErrConflict)
		}
		s.Log.Info("resume finishes an interrupted fan-out", "batch_id", id, "run", b.Run)
	} else {
		if b, err = s.Store.StartRun(ctx, id, b.Run, s.Clock.Now()); err != nil {
			return Batch{}, fmt.Errorf("resume %s: %w", id, err)
		}
	}
	if err := s.FanOut(ctx, b); err != nil {
		return Batch{}, fmt.Errorf("resume %s: %w", id, err)
	}
	b.FannedOut = true
	s.Log.Info("run started", "batch_id", id, "run", b.Run)
	return b, nil
}

// FanOut (re)sends the fan-out messages of the batch's current run, cut
// from its stored manifest, and marks the run fanned out. A correction
// run's corrected items are marked with its revision first
// (Store.MarkRevision, idempotent). Re-sent items are deduplicated by
// their reservation, so it is safe to call again after an interruption;
// the finalize tick does so for a run whose fan-out was lost.
func (s *Submitter) FanOut(ctx context.Context, b Batch) error {
	chunks, marks, err := s.chunks(ctx, b)
	if err != nil {
		return err
	}
	if len(marks) > 0 {
		if err := s.Store.MarkRevision(ctx, b, b.RunRevision, marks); err != nil {
			return fmt.Errorf("fan out %s run %d: %w", b.ID, b.Run, err)
		}
	}
	return s.fanout(ctx, b, chunks)
}

// chunks cuts the current run's manifest (Batch.RunManifestKey) into
// fan-out chunks by reading it once (streaming), or reads them from
// beside a manifest assembled from parts, and returns where its corrected
// items live (a correction run's; none otherwise).
func (s *Submitter) chunks(ctx context.Context, b Batch) ([]Chunk, []RevisionMark, error) {
	key := b.RunManifestKey()
	if partsManifest(key) {
		var chunks []Chunk
		found, err := getJSON(ctx, s.Blobs, chunksKey(key), &chunks)
		if err != nil {
			return nil, nil, fmt.Errorf("read the chunks of %s: %w", key, err)
		}
		if found {
			return chunks, nil, nil
		}
	}
	rc, err := s.Blobs.Open(ctx, s.Blobs.Bucket(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("open manifest: %w", err)
	}
	defer rc.Close()
	cut := chunker{per: int64(s.ChunkItems)}
	var keys []string
	index := map[string]int64{}
	err = ReadManifestLines(rc, 0, func(l ManifestLine, off, length int64) error {
		if l.Corrected && l.Index != nil {
			keys = append(keys, l.Key)
			index[l.Key] = *l.Index
		}
		return cut.add(l, off, length)
	})
	if err != nil {
		return nil, nil, err
	}
	if cut.n != b.RunItems() {
		return nil, nil, fmt.Errorf("manifest %s holds %d items, the run %d", key, cut.n, b.RunItems())
	}
	return cut.chunks, correctionMarks(b, keys, index, cut.perItems()), nil
}

// chunker cuts manifest lines into fan-out chunks: a chunk ends every per
// items of the batch's manifest (DefaultChunkItems when per ≤ 0), so that
// packs (K consecutive items from a chunk's first) have fixed boundaries;
// in a correction run's manifest, whose lines carry their manifest index,
// a chunk also ends where an index skips, and starts at its first line's
// index, so that its packs are the batch's own.
type chunker struct {
	per    int64
	n      int64 // lines read
	prev   int64
	chunks []Chunk
}

// perItems is the items a chunk holds at most.
func (c *chunker) perItems() int64 {
	if c.per <= 0 {
		return DefaultChunkItems
	}
	return c.per
}

func (c *chunker) add(l ManifestLine, off, length int64) error {
	per := c.perItems()
	i := c.n
	if l.Index != nil {
		i = *l.Index
	}
	if c.n == 0 || i != c.prev+1 || i%per == 0 {
		c.chunks = append(c.chunks, Chunk{Offset: off, FirstIndex: i})
	}
	ch := &c.chunks[len(c.chunks)-1]
	ch.Length += length
	ch.Count++
	c.n++
	c.prev = i
	return nil
}

// Control carries out a caller's commands on existing batches: cancel,
// release, forget, and the listing of items needing attention. Safe for
// concurrent use.
type Control struct {
	Store Store
	Blobs Blobs
	Log   *slog.Logger
	Clock Clock // decides expiry; nil means SystemClock
	// Bus gets the Batch Paused and Batch Unpaused events of a caller's
	// pause and unpause; nil for none.
	Bus EventBus
}

func (c *Control) now() time.Time {
	if c.Clock == nil {
		return SystemClock{}.Now()
	}
	return c.Clock.Now()
}

// Get reads the batch as callers see it: ErrNotFound without a row, an
// error wrapping ErrExpired once its retention has ended (Batch.Expired),
// whether or not the sweep has deleted it yet.
func (c *Control) Get(ctx context.Context, id string) (Batch, error) {
	b, err := c.Store.GetBatch(ctx, id)
	if err != nil {
		return Batch{}, err
	}
	return Live(b, c.now())
}

// Cancel stops the batch's current run: items not yet started end
// cancelled, started ones finish, and finalize gives the run the status
// cancelled. Idempotent: cancelling a run that is already stopping, or a
// batch whose run has finished (whatever its status), returns the batch
// unchanged. Errors: ErrNotFound (ErrExpired past the retention);
// ErrConflict while the source is still being read (submitting).
func (c *Control) Cancel(ctx context.Context, id string) (Batch, error) {
	b, err := c.Get(ctx, id)
	if err != nil {
		return Batch{}, err
	}
	if b.Status.Finished() {
		return b, nil // nothing runs: the answer is the batch as it ended
	}
	if b.Status != StatusRunning {
		return b, fmt.Errorf("cancel %s: no run is going yet (status %s): %w", id, b.Status, ErrConflict)
	}
	if b.Stop == "" {
		err := stopRun(ctx, c.Store, b, b.Run, StatusCancelled, "cancelled by a caller")
		if err != nil && !errors.Is(err, ErrConflict) {
			return Batch{}, err
		}
		c.Log.Info("run cancelling", "batch_id", id, "run", b.Run)
	}
	return c.Store.GetBatch(ctx, id)
}

// Release makes a quarantined item eligible for the next run (resume).
// Items are released between runs: a run in progress may already have
// answered the item's message. Errors, the same at every items per
// message: ErrNotFound when the batch has no item with the key;
// ErrConflict when the item is not quarantined or a run is going.
//
// A pack item that is neither failed nor quarantined has no row of its
// own to say that it exists (Store.ReleaseItem answers ErrNotFound): the
// key is then looked up in the results of the batch's last finalized
// run, which list every item of the batch once, in key order (see
// keysort.go), by a binary search in ranged reads (about log2 of the
// lines, one read each, per results file). A key found there is a
// conflict. Results a release before key-ordered packs wrote (manifest
// order) may not find it: ErrNotFound, as that release answered.
func (c *Control) Release(ctx context.Context, id, key string) error {
	b, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if b.Status == StatusRunning {
		return fmt.Errorf("release %s/%s: run %d is going; release between runs: %w", id, key, b.Run, ErrConflict)
	}
	err = c.Store.ReleaseItem(ctx, id, b.ListShards, key)
	if b.Pack() > 1 && errors.Is(err, ErrNotFound) {
		o, found, ferr := c.resultOf(ctx, b, key)
		switch {
		case ferr != nil:
			return fmt.Errorf("release %s/%s: %w", id, key, ferr)
		case found:
			return fmt.Errorf("release %s/%s: not quarantined (%s): %w", id, key, o, ErrConflict)
		}
	}
	return err
}

// resultOf finds key in the results of b's last finalized run (a run that
// ended finalize_failed has none: the run before it).
func (c *Control) resultOf(ctx context.Context, b Batch, key string) (Outcome, bool, error) {
	for run := b.Run; run >= 1; run-- {
		body, err := c.Blobs.Get(ctx, ReportKey(b.ID, run))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return "", false, err
		}
		var rep Report
		if err := json.Unmarshal(body, &rep); err != nil {
			return "", false, fmt.Errorf("report of run %d: %w", run, err)
		}
		for _, o := range TerminalOutcomes() {
			file, ok := rep.Results.Files[o]
			if !ok || file.Bytes == 0 {
				continue
			}
			found, err := searchResults(ctx, c.Blobs, ResultsKey(b.ID, run, o), file.Bytes, key)
			if err != nil || found {
				return o, found, err
			}
		}
		return "", false, nil
	}
	return "", false, nil
}

// searchResults reports whether the results file at objectKey (size
// bytes of JSONL in KeyOrder) has a line of key: a binary search over
// byte offsets, each probe reading the first whole line at or after its
// offset.
func searchResults(ctx context.Context, blobs Blobs, objectKey string, size int64, key string) (bool, error) {
	lo, hi := int64(0), size // lo starts a line; key's line, if any, starts in [lo, hi)
	for lo < hi {
		mid := lo + (hi-lo)/2
		start, line, err := lineFrom(ctx, blobs, objectKey, size, mid, mid == lo)
		if err != nil {
			return false, err
		}
		if start >= hi {
			hi = mid // no line starts in [mid, hi)
			continue
		}
		var l struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return false, fmt.Errorf("results %s at %d: %w", objectKey, start, err)
		}
		switch c := KeyOrder(l.Key, key); {
		case c == 0:
			return true, nil
		case c < 0:
			lo = start + int64(len(line))
		default:
			hi = mid
		}
	}
	return false, nil
}

// lineFrom returns the first whole line of objectKey that starts at off
// (atStart) or after it, and where it starts; start is size past the
// last line.
func lineFrom(ctx context.Context, blobs Blobs, objectKey string, size, off int64, atStart bool) (int64, []byte, error) {
	const read = 64 << 10
	from := off
	if !atStart {
		from = off - 1 // a line starts at off if the byte before it ends one
	}
	var buf []byte
	start := int64(-1)
	if atStart {
		start = off
	}
	for pos := from; ; {
		if start >= 0 {
			if i := bytes.IndexByte(buf[start-from:], '\n'); i >= 0 {
				return start, buf[start-from : start-from+int64(i)+1], nil
			}
		} else if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			start = from + int64(i) + 1
			continue
		}
		if pos >= size {
			if start >= 0 && start < size {
				return start, buf[start-from:], nil // a last line without its newline
			}
			return size, nil, nil
		}
		n := min(int64(read), size-pos)
		body, err := blobs.OpenRange(ctx, objectKey, pos, n)
		if err != nil {
			return 0, nil, err
		}
		chunk, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("results %s at %d: %w", objectKey, pos, err)
		}
		if len(chunk) == 0 {
			return 0, nil, fmt.Errorf("results %s: nothing at %d of %d bytes", objectKey, pos, size)
		}
		buf = append(buf, chunk...)
		pos += int64(len(chunk))
	}
}

// Forget removes everything the batch owns: it flags the batch as being
// forgotten (pending_deletion; no resume can start a run from then on),
// deletes its objects under batches/{id}/ (manifests, outputs, results,
// reports), then its rows, the batch row and its retention markers last. A
// later submit of the id starts from nothing. An expired batch may be
// forgotten. Retrying an interrupted forget finishes it. Errors:
// ErrNotFound; ErrConflict while a run is going (cancel it first);
// ErrPendingDeletion (wrapped, with the cause) when deleting started and
// did not finish.
func (c *Control) Forget(ctx context.Context, id string) error {
	b, err := c.Store.GetBatch(ctx, id)
	if err != nil {
		return err
	}
	if b.Status == StatusRunning {
		return fmt.Errorf("forget %s: run %d is going; cancel it first: %w", id, b.Run, ErrConflict)
	}
	if b.Status == StatusSubmitting {
		return fmt.Errorf("forget %s: its source is still being read; forget it once it runs or is refused: %w", id, ErrConflict)
	}
	// From here no resume can start a run (StartRun refuses a batch being
	// forgotten), so nothing is deleted under a new run's feet.
	if err := c.Store.MarkForgetting(ctx, id); err != nil {
		if errors.Is(err, ErrConflict) {
			return fmt.Errorf("forget %s: a run started; cancel it first: %w", id, err)
		}
		return err
	}
	n, err := c.Blobs.DeletePrefix(ctx, BatchesPrefix(id))
	if err != nil {
		return fmt.Errorf("forget %s: %d objects deleted: %w: %w", id, n, ErrPendingDeletion, err)
	}
	if err := c.Store.DeleteBatch(ctx, b); err != nil {
		return fmt.Errorf("forget %s: %w: %w", id, ErrPendingDeletion, err)
	}
	c.Log.Info("batch forgotten", "batch_id", id, "objects", n)
	return nil
}

// BatchesPrefix is the S3 prefix of everything a batch owns.
func BatchesPrefix(id string) string { return "batches/" + id + "/" }

// ItemPage is one page of a listing.
type ItemPage struct {
	Items      []Item `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"` // pass as cursor for the next page; empty at the end
	// Live, on the first page of in_flight of a running batch, is its
	// live view (LiveOf): the items the page cannot list because they have
	// no row yet (not fanned out, or sent and not yet received) are
	// counted there, with those waiting for a retry.
	Live *LiveView `json:"live,omitempty"`
}

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Items lists the batch's items of outcome (failed, quarantined,
// in_flight), oldest key first, limit per page (default 100, at most
// 1,000), continuing after cursor (opaque, from the previous page).
func (c *Control) Items(ctx context.Context, id string, outcome Outcome, cursor string, limit int) (ItemPage, error) {
	switch outcome {
	case OutcomeFailed, OutcomeQuarantined, OutcomeInFlight:
	default:
		return ItemPage{}, &InputError{Field: "outcome", Reason: fmt.Sprintf("%q: want failed, quarantined or in_flight", outcome)}
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return ItemPage{}, &InputError{Field: "limit", Reason: fmt.Sprintf("%d is not within 1–%d", limit, MaxListLimit)}
	}
	after := ""
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil {
			return ItemPage{}, &InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
		}
		after = string(raw)
	}
	b, err := c.Get(ctx, id)
	if err != nil {
		return ItemPage{}, err
	}
	list := c.Store.ListItems
	if b.Pack() > 1 && outcome == OutcomeInFlight {
		list = func(ctx context.Context, id string, shards int, _ Outcome, after string, limit int) ([]Item, string, error) {
			return c.Store.ListPackItems(ctx, id, shards, after, limit)
		}
	}
	items, next, err := list(ctx, id, b.ListShards, outcome, after, limit)
	if err != nil {
		return ItemPage{}, err
	}
	if items == nil {
		items = []Item{}
	}
	p := ItemPage{Items: items}
	if next != "" {
		p.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	if outcome == OutcomeInFlight && cursor == "" && b.Status == StatusRunning {
		// One Progress read (its counter partitions) per first page.
		pr, err := c.Store.Progress(ctx, id, b.Run, max(1, b.CounterShards))
		if err != nil {
			return ItemPage{}, err
		}
		l := LiveOf(b, pr, c.Clock.Now())
		p.Live = &l
	}
	return p, nil
}
