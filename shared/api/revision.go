package api

import (
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
