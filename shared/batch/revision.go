package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// Revision is a correction of a batch: corrected inputs for some of its
// keys, frozen as a manifest revision with its digest, and the run that
// runs exactly those keys with them (Submitter.Correct). Revisions are
// numbered from 2 (1 is the batch's own manifest) and kept on the batch
// row, oldest first. JSON names are the API's.
type Revision struct {
	// N is the revision's number, 2, 3, …
	N int `json:"revision"`
	// Digest is the hex SHA-256 of the corrections as read (a manifest of
	// the corrected items, in the corrections' order): the same
	// corrections given again are this revision (idempotent).
	Digest string `json:"digest"`
	// Items is the number of corrected items.
	Items int64 `json:"items"`
	// Run is the run the revision started.
	Run int `json:"run"`
	// Source is where the corrections came from (SourceSpec.Describe).
	Source      string    `json:"source"`
	SubmittedBy string    `json:"submitted_by,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	// CorrectionsKey is the S3 key of the corrections as read (normalized
	// JSONL, the digest's bytes); ManifestKey the batch's whole manifest
	// with the corrected lines (same keys, same order), which later runs
	// (resume) read; RunKey the run's own manifest: every pack (K items
	// per message; one item each at K = 1) that holds a corrected item, in
	// manifest order, each line carrying its manifest index ("i") and the
	// corrected ones "c": true.
	CorrectionsKey string `json:"corrections_key"`
	ManifestKey    string `json:"manifest_key"`
	RunKey         string `json:"run_key"`
	// RunItems is the run manifest's lines: the corrected items and the
	// other items of their packs, which the run counts without running.
	// RunChunks is the run's fan-out chunks.
	RunItems  int64 `json:"run_items"`
	RunChunks int   `json:"run_chunks"`
	// Kept is what the batch's other items (outside the run) had when it
	// started, from the last finished run's census: they keep it, and a
	// running correction's live census is Kept plus its counters (nil when
	// the batch had no finished census).
	Kept *Kept `json:"kept,omitempty"`
}

// Kept counts the outcomes the items outside a correction run keep.
type Kept struct {
	Succeeded   int64 `json:"succeeded"`
	Failed      int64 `json:"failed"`
	Quarantined int64 `json:"quarantined"`
	Cancelled   int64 `json:"cancelled"`
}

// MaxRevisions bounds the corrections of one batch: they live on its row
// (DynamoDB items are at most 400 KB; a revision takes about 600 bytes).
const MaxRevisions = 100

// Revision returns the revision numbered n and whether the batch has it.
func (b Batch) Revision(n int) (Revision, bool) {
	for _, r := range b.Revisions {
		if r.N == n {
			return r, true
		}
	}
	return Revision{}, false
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
