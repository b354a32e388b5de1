package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Revision returns the revision numbered n and whether the batch has it.
func (b Batch) Revision(n int) (api.Revision, bool) {
	for _, r := range b.Revisions {
		if r.N == n {
			return r, true
		}
	}
	return api.Revision{}, false
}

// CurrentManifestKey is the manifest a run that is not a correction reads
// (a resume): the latest revision's whole manifest, or the batch's own.
func (b Batch) CurrentManifestKey() string {
	if n := len(b.Revisions); n > 0 {
		return b.Revisions[n-1].ManifestKey
	}
	return b.ManifestKey
}

// RunChunks is the number of fan-out chunks of the current run: its
// revision's run manifest's for a correction run, else Batch.Chunks.
func (b Batch) RunChunks() int {
	if r, ok := b.Revision(b.RunRevision); ok {
		return r.RunChunks
	}
	return b.Chunks
}

// RunItems is the number of items the current run's counters count: its
// revision's run manifest's lines for a correction run, else ItemCount.
func (b Batch) RunItems() int64 {
	if r, ok := b.Revision(b.RunRevision); ok {
		return r.RunItems
	}
	return b.ItemCount
}

// RunLanes is the number of counter lanes the current run counts in
// (Batch.CounterLanes; 0: counted per chunk): a correction run of fewer
// items than the batch has lanes counts in one lane per item, so that
// every lane has items to fill it (LaneTarget of RunItems).
func (b Batch) RunLanes() int {
	if b.CounterLanes <= 0 {
		return b.CounterLanes
	}
	return int(min(int64(b.CounterLanes), max(1, b.RunItems())))
}

// RunManifestKey is the manifest the current run fans out: its revision's
// run manifest for a correction run, else CurrentManifestKey.
func (b Batch) RunManifestKey() string {
	if r, ok := b.Revision(b.RunRevision); ok {
		return r.RunKey
	}
	return b.CurrentManifestKey()
}

// RunIDOf is the run id an item's pipeline sees (pipeline.Request.RunID):
// RunID(batchID, key) for the batch's own input (revision 0 or 1), the
// hex SHA-256 of "{batch id}/{key}#{revision}" for a corrected one, so
// that a downstream idempotency cache keyed on it never answers the
// corrected input with the result of the old one. The same on every
// attempt and run of that input.
func RunIDOf(batchID, key string, revision int) string {
	if revision <= 1 {
		return RunID(batchID, key)
	}
	sum := sha256.Sum256([]byte(batchID + "/" + key + "#" + strconv.Itoa(revision)))
	return hex.EncodeToString(sum[:])
}

// RevisionMark asks Store.MarkRevision to give one item a revision's
// input: its key, and where its state lives — an item row (Pack false),
// or entry Index of the pack row starting at manifest index PackFirst.
type RevisionMark struct {
	Key       string
	Pack      bool
	PackFirst int64
	Index     int
}

// RevisionsKey is the S3 prefix of a batch's revision objects.
func RevisionsKey(batchID string, n int, name string) string {
	return fmt.Sprintf("batches/%s/revisions/%d/%s", batchID, n, name)
}
