package finalize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Chunked finalize. A run's rows are read in key order and counted, and
// its results written, in chunks: a call stops reading at the earlier of
// Finalizer.ChunkTime and Finalizer.ChunkMargin before its deadline (or
// after Finalizer.ChunkRows rows), and writes a checkpoint — the last key
// counted, the census so far, and for each outcome the results upload's
// id, the parts written and the bytes past the last part (the tail, its
// own small object). The next call (the tick, a trigger, a retry) goes on
// from the newest checkpoint. Checkpoints are numbered and written with
// If-None-Match (Blobs.PutIfAbsent), so of two calls going on from the same
// checkpoint one wins and the other's chunk counts for nothing. The
// parts of a checkpoint's uploads are written by one call at a time:
// each claims its chunk first (claim.go), since two calls reading rows
// eventually consistently may not write the same bytes. A call killed
// anywhere leaves the newest checkpoint as it was. The last chunk writes
// each tail as its upload's last part and a checkpoint marked done;
// completing the uploads and the report is idempotent from there. A pack
// batch's rows come in manifest order: its chunks write sorted runs
// instead of results, and then merge them into the results in key order
// (keysort.go).

// Defaults of the chunked finalize.
const (
	// DefaultChunkTime is how long one finalize call reads rows before it
	// writes a checkpoint: 10 minutes, two thirds of Lambda's 15-minute
	// limit.
	DefaultChunkTime = 10 * time.Minute
	// DefaultChunkMargin is how long before its deadline a call stops
	// reading, to write its parts, tails and checkpoint (or complete the
	// run): 2 minutes.
	DefaultChunkMargin = 2 * time.Minute
	// ResultPartBytes is the size of every results part but the last: S3
	// wants at least 5 MiB and allows 10,000 parts per upload (S3 user
	// guide, "Amazon S3 multipart upload limits",
	// https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html), so
	// a results file written by one pass or one call's merge holds up to
	// ≈ 78 GiB (a merge in key ranges composes larger ones from copies of
	// up to 5 GiB: finalize_ranges.go).
	ResultPartBytes = 8 << 20
	// MaxResultParts is S3's limit of parts per upload.
	MaxResultParts = 10_000
	// keepBatch is how many keys of rows whose TTL must be extended are
	// held before Store.KeepRows is called with them.
	keepBatch = 1000
)

// FinalizePrefix is where a run's finalize keeps its checkpoints while it
// works: batches/{id}/finalize/{run}/. It is deleted once the run is
// finished (and with the batch).
func FinalizePrefix(batchID string, run int) string {
	return fmt.Sprintf("%s%s/%s%d/", config.BatchesPrefix, batchID, config.FinalizeCheckpoints, run)
}

func checkpointKey(id string, run, seq int) string {
	return FinalizePrefix(id, run) + fmt.Sprintf("%06d.json", seq)
}

func tailKey(id string, run, seq int, token string, o api.Outcome) string {
	return FinalizePrefix(id, run) + fmt.Sprintf("%06d-%s.%s.tail", seq, token, o)
}

// checkpoint is the stored state of a run's finalize between chunks.
type checkpoint struct {
	Seq int `json:"seq"`
	// ChainStartedAt is when the first chunk after the last restart began;
	// a chain older than TTLGrace/2 starts over (its uploads would be
	// aborted by the bucket's lifecycle rule after a day).
	ChainStartedAt time.Time `json:"chain_started_at"`
	After          string    `json:"after"` // every row up to this key is counted; "" none
	tally
	Files map[api.Outcome]*partFile `json:"files"`
	Token string                    `json:"token,omitempty"` // names this checkpoint's tail objects
	Done  bool                      `json:"done,omitempty"`  // every row counted, every part written
	// KeyOrder says the results are written in key order (KeyOrder). A
	// pack batch's checkpoint without it was written by a release whose
	// results came in manifest order: its chain starts over.
	KeyOrder bool `json:"key_order,omitempty"`
	// Runs are the sorted runs of a pack batch's result lines so far (see
	// keysort.go); Counted says every row is counted and the runs are
	// being merged into the results.
	Runs    []sortRun `json:"runs,omitempty"`
	Counted bool      `json:"counted,omitempty"`
	// Ranges split the merge of Runs by key ranges, each merged by its
	// own call (finalize_ranges.go); none: one chain of calls merges.
	Ranges []mergeRange `json:"ranges,omitempty"`
}

// tally is what the rows counted so far add up to.
type tally struct {
	Rows          int64      `json:"rows"` // rows counted in the run
	Census        api.Census `json:"census"`
	LastOutcomeAt time.Time  `json:"last_outcome_at,omitzero"`
}

func newTally() tally {
	return tally{Census: api.Census{Cost: pipeline.CostSum{}, RunSpent: pipeline.CostSum{}}}
}

// add adds another tally's rows (a part of a parallel finalize): counts,
// and cost sums in decimal, so that the sum is the one a single pass
// makes whatever the order.
func (t *tally) add(o tally) {
	t.Rows += o.Rows
	c, oc := &t.Census, o.Census
	c.Succeeded += oc.Succeeded
	c.Failed += oc.Failed
	c.Quarantined += oc.Quarantined
	c.Cancelled += oc.Cancelled
	c.InFlight += oc.InFlight
	c.Pending += oc.Pending
	for name, v := range oc.Cost {
		c.Cost[name] = c.Cost[name].Add(v)
	}
	for name, v := range oc.RunSpent {
		c.RunSpent[name] = c.RunSpent[name].Add(v)
	}
	if o.LastOutcomeAt.After(t.LastOutcomeAt) {
		t.LastOutcomeAt = o.LastOutcomeAt
	}
}

// partFile is one outcome's results upload.
type partFile struct {
	UploadID string `json:"upload_id"`
	Parts    int    `json:"parts"` // parts written, each ResultPartBytes but the last once done
	Bytes    int64  `json:"bytes"` // bytes of results so far: parts and tail
}

func (p *partFile) tailBytes() int64 { return p.Bytes - int64(p.Parts)*ResultPartBytes }

func newCheckpoint(seq int, now time.Time) *checkpoint {
	return &checkpoint{Seq: seq, ChainStartedAt: now, tally: newTally(), Files: map[api.Outcome]*partFile{}, KeyOrder: true}
}

// loadCheckpoint returns the run's newest checkpoint, or nil.
func (f *Finalizer) loadCheckpoint(ctx context.Context, id string, run int) (*checkpoint, error) {
	prefix := FinalizePrefix(id, run)
	best, bestKey := -1, ""
	err := f.Blobs.List(ctx, f.Blobs.Bucket(), prefix, func(o source.ObjectInfo) error {
		name := strings.TrimPrefix(o.Key, prefix)
		digits, ok := strings.CutSuffix(name, ".json")
		if n, err := strconv.Atoi(digits); ok && err == nil && len(digits) == 6 && n > best {
			best, bestKey = n, o.Key
		}
		return nil
	})
	if err != nil || best < 0 {
		return nil, err
	}
	body, err := f.Blobs.Get(ctx, bestKey)
	if err != nil {
		return nil, err
	}
	cp := &checkpoint{}
	if err := json.Unmarshal(body, cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", bestKey, err)
	}
	if cp.Files == nil {
		cp.Files = map[api.Outcome]*partFile{}
	}
	if cp.Census.Cost == nil {
		cp.Census.Cost = pipeline.CostSum{}
	}
	if cp.Census.RunSpent == nil {
		cp.Census.RunSpent = pipeline.CostSum{}
	}
	return cp, nil
}

// saveCheckpoint writes cp under its number if no checkpoint has it yet;
// ErrConflict when another call wrote it first.
func (f *Finalizer) saveCheckpoint(ctx context.Context, id string, run int, cp *checkpoint) error {
	body, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	return f.Blobs.PutIfAbsent(ctx, checkpointKey(id, run, cp.Seq), "application/json", body)
}

// active is a chunk's claim (claim.go): until when its call may write.
type active struct {
	Until time.Time `json:"until"`
}

// partWriter appends one outcome's result lines to its upload: a part of
// ResultPartBytes is sent as soon as it is full (one at a time, while the
// next fills), the rest stays in memory until the chunk ends (tail object)
// or the run does (last part). Memory: two parts.
type partWriter struct {
	ctx      context.Context
	blobs    ledger.Blobs
	key      string
	file     *partFile
	buf      []byte
	inflight chan error
}

func newPartBuf() []byte { return make([]byte, 0, ResultPartBytes+64<<10) }

func (w *partWriter) write(line []byte) error {
	w.buf = append(w.buf, line...)
	w.file.Bytes += int64(len(line))
	for len(w.buf) >= ResultPartBytes {
		if err := w.wait(); err != nil {
			return err
		}
		if w.file.Parts+1 >= MaxResultParts {
			return fmt.Errorf("results %s: more than %d parts of %d bytes", w.key, MaxResultParts, ResultPartBytes)
		}
		part := w.buf[:ResultPartBytes]
		next := newPartBuf()
		w.buf = append(next, w.buf[ResultPartBytes:]...)
		w.file.Parts++
		n, ch := w.file.Parts, make(chan error, 1)
		w.inflight = ch
		go func() { ch <- w.blobs.PutPart(w.ctx, w.key, w.file.UploadID, n, part) }()
	}
	return nil
}

// wait waits for the part in flight.
func (w *partWriter) wait() error {
	if w.inflight == nil {
		return nil
	}
	err := <-w.inflight
	w.inflight = nil
	return err
}

// saveTail waits for the part in flight and stores the tail under key.
func (w *partWriter) saveTail(key string) error {
	if err := w.wait(); err != nil {
		return err
	}
	if len(w.buf) == 0 {
		return nil
	}
	return w.blobs.Put(w.ctx, key, "application/octet-stream", w.buf)
}

// last waits for the part in flight and sends the tail as the last part.
func (w *partWriter) last() error {
	if err := w.wait(); err != nil {
		return err
	}
	if len(w.buf) == 0 {
		return nil
	}
	w.file.Parts++
	return w.blobs.PutPart(w.ctx, w.key, w.file.UploadID, w.file.Parts, w.buf)
}

// chunkWriters are a chunk's part writers, one per outcome met.
type chunkWriters struct {
	ctx   context.Context
	blobs ledger.Blobs
	id    string
	run   int
	cp    *checkpoint
	w     map[api.Outcome]*partWriter
}

// resume loads the tails of cp's files.
func (c *chunkWriters) resume() error {
	c.w = map[api.Outcome]*partWriter{}
	for o, file := range c.cp.Files {
		w := &partWriter{ctx: c.ctx, blobs: c.blobs, key: api.ResultsKey(c.id, c.run, o), file: file, buf: newPartBuf()}
		if n := file.tailBytes(); n > 0 {
			tail, err := c.blobs.Get(c.ctx, tailKey(c.id, c.run, c.cp.Seq, c.cp.Token, o))
			if err != nil {
				return fmt.Errorf("results tail of %s: %w", o, err)
			}
			if int64(len(tail)) != n {
				return fmt.Errorf("results tail of %s: %d bytes, want %d", o, len(tail), n)
			}
			w.buf = append(w.buf, tail...)
		}
		c.w[o] = w
	}
	return nil
}

// resultLine is item it's line in the results of outcome o.
func resultLine(it ledger.Item, o api.Outcome) ([]byte, error) {
	line, err := json.Marshal(ledger.ResultLineOf(it, o))
	return append(line, '\n'), err
}

// write appends line to the results of outcome o.
func (c *chunkWriters) write(o api.Outcome, line []byte) error {
	w := c.w[o]
	if w == nil {
		key := api.ResultsKey(c.id, c.run, o)
		upload, err := c.blobs.StartParts(c.ctx, key, "application/x-ndjson")
		if err != nil {
			return err
		}
		file := &partFile{UploadID: upload}
		c.cp.Files[o] = file
		w = &partWriter{ctx: c.ctx, blobs: c.blobs, key: key, file: file, buf: newPartBuf()}
		c.w[o] = w
	}
	return w.write(line)
}

// drop waits for every part in flight (their errors are dropped: the
// chunk is abandoned).
func (c *chunkWriters) drop() {
	for _, w := range c.w {
		_ = w.wait()
	}
}

// errChunkEnds stops the merge at the chunk's end.
var errChunkEnds = errors.New("chunk ends")

// scanChunk counts rows after cp.After and writes their results until the
// rows end (true) or the chunk does (false, its checkpoint written). A
// non-terminal row is ErrNotFinished, so are rows missing at the end
// (pending items, whose rows may come before keys already counted: the
// chain starts over). The caller's cp is advanced in place. A pack batch's
// rows come in manifest order: their result lines go into sorted runs,
// merged into the results in key order once every row is counted
// (keysort.go).
func (f *Finalizer) scanChunk(ctx context.Context, b ledger.Batch, cp *checkpoint) (bool, error) {
	stopAt := time.Now().Add(f.chunkTime())
	if dl, ok := ctx.Deadline(); ok {
		if end := dl.Add(-f.chunkMargin()); end.Before(stopAt) {
			stopAt = end
		}
	}
	// Only one call writes from a checkpoint (claim.go); its parts in
	// flight end before the claim is released (cw.drop, or their waits).
	release, cerr := f.claimChunk(ctx, b.ID, b.Run, cp.Seq+1, claimUntil(ctx, stopAt.Add(f.chunkMargin())))
	if cerr != nil {
		return false, cerr
	}
	defer release()
	cw := &chunkWriters{ctx: ctx, blobs: f.Blobs, id: b.ID, run: b.Run, cp: cp}
	if err := cw.resume(); err != nil {
		return false, err
	}
	var rows int64
	chunkEnds := func() bool {
		return rows > 0 && (f.ChunkRows > 0 && rows >= f.ChunkRows || time.Now().After(stopAt))
	}
	if cp.Counted {
		return f.mergeChunk(ctx, b, cp, cw, chunkEnds, &rows)
	}
	now := f.Clock.Now()
	rc := f.newRowCounter(ctx, b, &cp.tally)
	opts := f.Merge
	opts.Packed = b.Packed()
	if opts.Packed {
		opts.BudgetBytes = f.sortBudget() // the sort holds the rest
	}
	var sorter *keySorter // a pack batch's lines, sorted by key
	token := ledger.NewToken()
	flushRun := func() error {
		if sorter.size() == 0 {
			return nil
		}
		key := sortRunKey(b.ID, b.Run, cp.Seq+1, token, len(cp.Runs))
		n, err := sorter.writeRun(ctx, f.Blobs, key)
		if err == nil {
			cp.Runs = append(cp.Runs, sortRun{Key: key, Bytes: n})
		}
		return err
	}
	if opts.Packed {
		sorter = &keySorter{limit: f.sortRunBytes()}
	}
	err := shardmerge.Merge(ctx, f.Store, b.ID, b.ListShards, cp.After, opts, func(it ledger.Item) error {
		if chunkEnds() {
			return errChunkEnds
		}
		rows++
		o, line, ok, err := rc.count(it)
		switch {
		case err != nil:
			return err
		case !ok: // pending in this run
		case sorter == nil:
			err = cw.write(o, line)
		case sorter.full(len(it.Key) + len(line)):
			err = flushRun()
		}
		if err == nil && ok && sorter != nil {
			err = sorter.add(it.Key, o, line)
		}
		if err != nil {
			return err
		}
		cp.After = it.ScanPos()
		return nil
	})
	if err != nil && !errors.Is(err, errChunkEnds) {
		cw.drop()
		return false, err
	}
	if err := rc.flush(); err != nil {
		cw.drop()
		return false, err
	}
	if err == nil && cp.Rows < b.ItemCount {
		cw.drop()
		pending := b.ItemCount - cp.Rows
		if cp.Seq > 0 {
			// Counted keys may come before rows still missing: start over.
			if err := f.saveCheckpoint(ctx, b.ID, b.Run, newCheckpoint(cp.Seq+1, now)); err != nil && !errors.Is(err, api.ErrConflict) {
				return false, err
			}
		}
		return false, fmt.Errorf("%d items pending: %w", pending, api.ErrNotFinished)
	}
	done := err == nil
	if sorter != nil {
		var serr error
		switch {
		case done && len(cp.Runs) == 0:
			// Every line fits in memory: sorted straight into the results.
			serr = sorter.sorted(func(_ []byte, o api.Outcome, line []byte) error { return cw.write(o, line) })
		case done:
			if serr = flushRun(); serr == nil {
				cp.Counted = true
				return f.mergeChunk(ctx, b, cp, cw, chunkEnds, &rows)
			}
		default:
			serr = flushRun()
		}
		if serr != nil {
			cw.drop()
			return false, serr
		}
	}
	return f.endChunk(ctx, b, cp, cw, done)
}

// rowCounter counts a run's rows as finalize reads them into a tally
// (rows, census, the last outcome's time) and makes their result lines;
// it extends the TTL of the rows that need it, keepBatch keys at a time.
type rowCounter struct {
	ctx                   context.Context
	store                 Store
	b                     ledger.Batch
	t                     *tally
	keepBefore, keepUntil time.Time
	keep                  []string
	keepPacks             []int64
	keepAttention         []string // pack items with an attention entry
}

func (f *Finalizer) newRowCounter(ctx context.Context, b ledger.Batch, t *tally) *rowCounter {
	now := f.Clock.Now()
	// Rows whose TTL ends less than half the grace after the retention
	// (written long before the finish, or without a TTL) get it extended
	// to the full grace; rows written with the stack's row TTL (retention
	// + grace) during the last half grace need no write.
	return &rowCounter{ctx: ctx, store: f.Store, b: b, t: t, keepBefore: now.Add(f.Retention + ledger.TTLGrace/2), keepUntil: now.Add(f.Retention + ledger.TTLGrace)}
}

// count counts row it: its outcome in the run and result line, or ok
// false for a row pending in this run. A row in flight is ErrNotFinished.
func (c *rowCounter) count(it ledger.Item) (api.Outcome, []byte, bool, error) {
	o, ok := ledger.OutcomeInRun(it, c.b)
	if !ok {
		return "", nil, false, nil
	}
	if !o.Terminal() {
		return "", nil, false, fmt.Errorf("item %q is %s: %w", it.Key, o, api.ErrNotFinished)
	}
	c.t.Rows++
	c.t.Census.Add(o, it.Cost)
	if it.SpentRun == c.b.Run {
		c.t.Census.RunSpent.Add(it.Spent)
	}
	if it.UpdatedAt.After(c.t.LastOutcomeAt) {
		c.t.LastOutcomeAt = it.UpdatedAt
	}
	line, err := resultLine(it, o)
	if err != nil {
		return "", nil, false, err
	}
	if it.ExpiresAt.Before(c.keepBefore) {
		switch {
		case !it.Packed:
			c.keep = append(c.keep, it.Key)
		case len(c.keepPacks) == 0 || c.keepPacks[len(c.keepPacks)-1] != it.PackFirst:
			c.keepPacks = append(c.keepPacks, it.PackFirst)
		}
		if it.Packed && (o == api.OutcomeFailed || o == api.OutcomeQuarantined) {
			c.keepAttention = append(c.keepAttention, it.Key)
		}
		if len(c.keep)+len(c.keepPacks) >= keepBatch {
			if err := c.flush(); err != nil {
				return "", nil, false, err
			}
		}
	}
	return o, line, true, nil
}

// flush extends the TTL of the rows held.
func (c *rowCounter) flush() error {
	if len(c.keep) == 0 && len(c.keepPacks) == 0 {
		return nil
	}
	err := c.store.KeepRows(c.ctx, c.b, c.keep, c.keepUntil)
	if err == nil && len(c.keepPacks) > 0 {
		err = c.store.KeepPacks(c.ctx, c.b, c.keepPacks, c.keepAttention, c.keepUntil)
	}
	c.keep, c.keepPacks, c.keepAttention = c.keep[:0], c.keepPacks[:0], c.keepAttention[:0]
	return err
}

// mergeChunk merges a pack batch's sorted runs into its results from
// where cp left them, until the runs end or the chunk does.
func (f *Finalizer) mergeChunk(ctx context.Context, b ledger.Batch, cp *checkpoint, cw *chunkWriters, chunkEnds func() bool, rows *int64) (bool, error) {
	write := func(_ []byte, o api.Outcome, line []byte) error { return cw.write(o, line) }
	done, err := mergeRuns(ctx, f.Blobs, cp.Runs, sortReadBytes(f.sortBudget(), len(cp.Runs)), write, func() bool {
		if chunkEnds() {
			return true
		}
		*rows++
		return false
	})
	if err != nil {
		cw.drop()
		return false, err
	}
	return f.endChunk(ctx, b, cp, cw, done)
}

// endChunk writes the chunk's checkpoint: with the results' last parts
// when done, else with their tails.
func (f *Finalizer) endChunk(ctx context.Context, b ledger.Batch, cp *checkpoint, cw *chunkWriters, done bool) (bool, error) {
	cp.Seq++
	if done {
		for _, w := range cw.w {
			if err := w.last(); err != nil {
				cw.drop()
				return false, err
			}
		}
		cp.Done, cp.Token = true, ""
	} else {
		cp.Token = ledger.NewToken()
		for o, w := range cw.w {
			if err := w.saveTail(tailKey(b.ID, b.Run, cp.Seq, cp.Token, o)); err != nil {
				cw.drop()
				return false, err
			}
		}
	}
	if err := f.saveCheckpoint(ctx, b.ID, b.Run, cp); err != nil {
		return false, err
	}
	return cp.Done, nil
}

func (f *Finalizer) chunkTime() time.Duration {
	if f.ChunkTime > 0 {
		return f.ChunkTime
	}
	return DefaultChunkTime
}

// sortBudget is what a pack batch's finalize gives shardmerge.Merge while it
// counts and the runs' reads while it merges them: the merge budget less
// SortRunBytes, which the held lines take while it counts and the
// results parts (two of ResultPartBytes) while it merges, so that its
// memory stays that of a batch of item rows (shardmerge.Merge's budget and the
// results parts).
func (f *Finalizer) sortBudget() int64 {
	budget := f.Merge.BudgetBytes
	if budget <= 0 {
		budget = shardmerge.DefaultBudgetBytes
	}
	return max(budget-int64(f.sortRunBytes()), budget/4)
}

func (f *Finalizer) sortRunBytes() int {
	if f.SortRunBytes > 0 {
		return f.SortRunBytes
	}
	return SortRunBytes
}

func (f *Finalizer) chunkMargin() time.Duration {
	if f.ChunkMargin > 0 {
		return f.ChunkMargin
	}
	return DefaultChunkMargin
}
