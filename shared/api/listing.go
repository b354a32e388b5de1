package api

import (
	"maps"
	"slices"
	"time"
)

// Summary returns b as a listing shows it.
func Summary(b Batch) BatchSummary {
	return BatchSummary{
		ID: b.ID, Status: b.Status, Pipeline: b.Pipeline, ItemCount: b.ItemCount, Run: b.Run,
		CreatedAt: b.CreatedAt, FinishedAt: b.FinishedAt, NeedsAttention: b.NeedsAttention || b.KeepsHalts(),
		Stop: b.Stop, Refusal: b.Refusal, SubmittedBy: b.SubmittedBy, PendingDeletion: b.PendingDeletion,
		Halts: slices.Sorted(maps.Keys(b.Halts)),
	}
}

// KeepsHalts reports whether finished batch b keeps a halt on a refused
// credential: a resume would withhold its items without a call until a
// caller fixes the secret and lifts it, so it needs attention whatever
// its last run's census.
func (b Batch) KeepsHalts() bool { return b.Status.Finished() && len(b.Halts) > 0 }

// MaxSourceBytes is the longest source a listing may ask for: "s3://", a
// bucket name (at most 63 bytes), "/", an object key (at most 1,024
// bytes; Amazon S3 user guide, "Naming Amazon S3 objects") and a prefix's
// "*".
const MaxSourceBytes = 5 + 63 + 1 + 1024 + 1

// BatchPage is one page of GET /batches.
type BatchPage struct {
	Batches []BatchSummary `json:"batches"`
	// NextCursor, when set, continues the listing: pass it as cursor. A
	// page may hold fewer than limit batches, even none, and still have a
	// next cursor (a call reads a bounded share of the index); the listing
	// ends when it is absent.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ListBatchesRequest is GET /batches's query.
type ListBatchesRequest struct {
	Statuses []Status // empty: every status
	Since    time.Time
	// Source keeps the batches of one S3 object or prefix (see
	// BatchQuery.Source); "" every batch.
	Source string
	Limit  int    // 0: DefaultListLimit; at most MaxListLimit
	Cursor string // a previous page's next_cursor
}

// BatchSummary is a batch as a listing shows it: the batch row's
// identity, status and progress, without its plan, options or census
// (GET /batches/{id} has those). JSON names are the API's, as in Batch.
type BatchSummary struct {
	ID       string `json:"batch_id"`
	Status   Status `json:"status"`
	Pipeline string `json:"pipeline"`
	// ItemCount is 0 while the batch is submitting, and for a refused one.
	ItemCount  int64     `json:"item_count"`
	Run        int       `json:"run"`
	CreatedAt  time.Time `json:"created_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"` // the last finished run's end
	// NeedsAttention is the last finished run's, and a finished batch's
	// that keeps a halt (Batch.KeepsHalts), or for a running batch with a
	// Live view, also its Attention.
	NeedsAttention  bool           `json:"needs_attention"`
	Stop            Status         `json:"stop,omitempty"`
	Refusal         *SubmitRefusal `json:"refusal,omitempty"`
	SubmittedBy     string         `json:"submitted_by,omitempty"`
	PendingDeletion bool           `json:"pending_deletion,omitempty"`
	// Live is a running batch's live view (live.Of), for the first
	// MaxLiveSummaries running batches of a page; NeedsAttention then
	// includes its Attention.
	Live *LiveView `json:"live,omitempty"`
	// Pause is a running batch's pause (who paused it, since when, why),
	// read with its live view; absent when it runs, or beyond the first
	// MaxLiveSummaries running batches.
	Pause *Pause `json:"pause,omitempty"`
	// Halts are the subjects of the batch's halts (Batch.Halts), sorted;
	// absent when it holds none.
	Halts []string `json:"halts,omitempty"`
}

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// SweepResult counts what one pass of the sweep did: the answer of the
// sweep function (JSON as tagged), which `bulkrun sweep` prints.
type SweepResult struct {
	Expired   int `json:"expired"`   // expired markers read
	Deleted   int `json:"deleted"`   // batches forgotten
	Stale     int `json:"stale"`     // markers removed without deleting a batch
	Malformed int `json:"malformed"` // malformed markers removed
	Failed    int `json:"failed"`    // batches whose deletion could not start (their markers stay)
	// PendingDeletion counts batches partly deleted by this pass: their
	// deletion started and did not finish (their markers stay; the next
	// pass finishes it).
	PendingDeletion int `json:"pending_deletion"`
}

// Add adds the counts of another pass to r.
func (r *SweepResult) Add(o SweepResult) {
	r.Expired += o.Expired
	r.Deleted += o.Deleted
	r.Stale += o.Stale
	r.Malformed += o.Malformed
	r.Failed += o.Failed
	r.PendingDeletion += o.PendingDeletion
}
