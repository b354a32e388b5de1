package submit

import (
	"context"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Resume starts a new run of a finished batch from its stored manifest:
// succeeded items are answered from their rows without running, quarantined
// ones stay set aside unless released, failed and cancelled ones run again;
// the run gets its own report. A resume retried while its fan-out was
// interrupted finishes that fan-out. Errors: ErrNotFound; ErrExpired
// (wrapped) once the retention has ended; ErrConflict (wrapped) while a
// run is still going, and for a finished batch whose last run's census
// counts every item succeeded (a run would call nothing; its items are
// answered from their rows).
func (s *Submitter) Resume(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := s.Store.GetBatch(ctx, id)
	if err != nil {
		return ledger.Batch{}, err
	}
	if b.Status == api.StatusSubmitting || b.Status == api.StatusRefused {
		return b, fmt.Errorf("resume %s: the batch is %s, it has no manifest to run: %w", id, b.Status, api.ErrConflict)
	}
	if b, err = ledger.Live(b, s.Clock.Now()); err != nil {
		return ledger.Batch{}, fmt.Errorf("resume: %w", err)
	}
	if allSucceeded(b) {
		c := b.FinalCensus
		return b, fmt.Errorf("resume %s: every item of run %d succeeded (%d of %d), so a new run would call nothing; to run items again with other inputs, correct them (POST /batches/%s/corrections): %w",
			id, b.Run, c.Succeeded, c.Total, id, api.ErrConflict)
	}
	if b.Status == api.StatusRunning {
		if b.FannedOut {
			return b, fmt.Errorf("resume %s: run %d is still going: %w", id, b.Run, api.ErrConflict)
		}
		s.Log.InfoContext(ctx, "resume finishes an interrupted fan-out", "batch_id", id, "run", b.Run)
	} else {
		if b, err = s.Store.StartRun(ctx, id, b.Run, s.Clock.Now()); err != nil {
			return ledger.Batch{}, fmt.Errorf("resume %s: %w", id, err)
		}
		s.announce(ctx, b, api.ChangeRunning, b.RunStartedAt)
	}
	if err := s.FanOut(ctx, b); err != nil {
		return ledger.Batch{}, fmt.Errorf("resume %s: %w", id, err)
	}
	b.FannedOut = true
	s.Log.InfoContext(ctx, "run started", "batch_id", id, "run", b.Run)
	return b, nil
}

// allSucceeded reports whether finished batch b's last run's census
// counts every item succeeded: a new run would call nothing.
func allSucceeded(b ledger.Batch) bool {
	c := b.FinalCensus
	return b.Status.Finished() && c != nil && c.Total > 0 && c.Succeeded == c.Total
}

// FanOut (re)sends the fan-out messages of the batch's current run, cut
// from its stored manifest, and marks the run fanned out. A correction
// run's corrected items are marked with its revision first
// (Store.MarkRevision, idempotent). Re-sent items are deduplicated by
// their reservation, so it is safe to call again after an interruption;
// the finalize tick does so for a run whose fan-out was lost.
func (s *Submitter) FanOut(ctx context.Context, b ledger.Batch) error {
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
func (s *Submitter) chunks(ctx context.Context, b ledger.Batch) ([]source.Chunk, []ledger.RevisionMark, error) {
	key := b.RunManifestKey()
	if partsManifest(key) {
		var chunks []source.Chunk
		found, err := getJSON(ctx, s.Blobs, ledger.ChunksKey(key), &chunks)
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
	err = source.ReadManifestLines(rc, 0, func(l source.ManifestLine, off, length int64) error {
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
		return nil, nil, fmt.Errorf("manifest %s holds %s, the run %d", key, api.Count(cut.n, "item"), b.RunItems())
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
	chunks []source.Chunk
}

// perItems is the items a chunk holds at most.
func (c *chunker) perItems() int64 {
	if c.per <= 0 {
		return source.DefaultChunkItems
	}
	return c.per
}

func (c *chunker) add(l source.ManifestLine, off, length int64) error {
	per := c.perItems()
	i := c.n
	if l.Index != nil {
		i = *l.Index
	}
	if c.n == 0 || i != c.prev+1 || i%per == 0 {
		c.chunks = append(c.chunks, source.Chunk{Offset: off, FirstIndex: i})
	}
	ch := &c.chunks[len(c.chunks)-1]
	ch.Length += length
	ch.Count++
	c.n++
	c.prev = i
	return nil
}
