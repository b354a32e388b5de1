package batch

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// BatchQuery is what Store.ListBatches reads: batches newest first (by
// CreatedAt, then id), at most Limit of them.
type BatchQuery struct {
	// Statuses keeps only batches in one of these statuses; empty keeps all.
	Statuses []Status
	// Since keeps only batches created at or after it; zero: no bound.
	Since time.Time
	// Source keeps only the batches whose source is this S3 object or
	// prefix, as Batch.Source describes it ("s3://bucket/key",
	// "s3://bucket/prefix/*"); "" keeps all. A store reads only that
	// source's batches then (an index of their own), not the whole listing.
	Source string
	// Before continues a listing: the position a previous page ended at
	// (its next position, as the store returned it); "" starts at the
	// newest batch.
	Before string
	// Limit is the most batches of the page, ≥ 1.
	Limit int
	// Now decides expiry: a batch Expired at Now is never listed.
	Now time.Time
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
	// NeedsAttention is the last finished run's, or for a running batch
	// with a Live view, also its Attention.
	NeedsAttention  bool           `json:"needs_attention"`
	Stop            Status         `json:"stop,omitempty"`
	Refusal         *SubmitRefusal `json:"refusal,omitempty"`
	SubmittedBy     string         `json:"submitted_by,omitempty"`
	PendingDeletion bool           `json:"pending_deletion,omitempty"`
	// Live is a running batch's live view (LiveOf), for the first
	// MaxLiveSummaries running batches of a page; NeedsAttention then
	// includes its Attention.
	Live *LiveView `json:"live,omitempty"`
}

// MaxLiveSummaries is how many running batches of one listing page get
// their live view: each costs a read of its batch row and one Query per
// counter partition (Batch.CounterShards, 1–16).
const MaxLiveSummaries = 25

// liveSummaries sets the live view of the page's first MaxLiveSummaries
// running batches, 4 at a time; a batch whose read fails keeps none.
func (c *Control) liveSummaries(ctx context.Context, bs []BatchSummary) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	n := 0
	for i := range bs {
		if bs[i].Status != StatusRunning || bs[i].Stop != "" || n >= MaxLiveSummaries {
			continue
		}
		n++
		wg.Add(1)
		go func(s *BatchSummary) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			b, err := c.Store.GetBatch(ctx, s.ID)
			if err != nil || b.Status != StatusRunning {
				return
			}
			p, err := c.Store.Progress(ctx, b.ID, b.Run, max(1, b.CounterShards))
			if err != nil {
				return
			}
			l := LiveOf(b, p, c.now())
			s.Live, s.NeedsAttention = &l, s.NeedsAttention || l.NeedsAttention()
		}(&bs[i])
	}
	wg.Wait()
}

// Summary returns b as a listing shows it.
func Summary(b Batch) BatchSummary {
	return BatchSummary{
		ID: b.ID, Status: b.Status, Pipeline: b.Pipeline, ItemCount: b.ItemCount, Run: b.Run,
		CreatedAt: b.CreatedAt, FinishedAt: b.FinishedAt, NeedsAttention: b.NeedsAttention,
		Stop: b.Stop, Refusal: b.Refusal, SubmittedBy: b.SubmittedBy, PendingDeletion: b.PendingDeletion,
	}
}

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

// ListBatches lists batches newest first (created_at descending, then id
// descending), limit per page (default 100, at most 1,000), continuing
// after cursor (opaque, from the previous page; a cursor stays valid
// whatever the filters). Expired batches (Batch.Expired) are never listed;
// submitting and refused ones are, with their status. The listing reads
// an eventually consistent index: a batch created or changed a moment ago
// may show a moment later. r.Source lists only the batches started from
// one S3 object ("s3://bucket/incoming/orders.csv": an upload, or a submit
// of that object) or prefix ("s3://bucket/images/*"). Errors: an
// *InputError naming status, source, limit or cursor.
func (c *Control) ListBatches(ctx context.Context, r ListBatchesRequest) (BatchPage, error) {
	for _, s := range r.Statuses {
		if !slices.Contains(Statuses(), s) {
			return BatchPage{}, &InputError{Field: "status", Reason: fmt.Sprintf("%q: want one of %v", s, Statuses())}
		}
	}
	if r.Source != "" && (!strings.HasPrefix(r.Source, "s3://") || len(r.Source) > MaxSourceBytes) {
		return BatchPage{}, &InputError{Field: "source", Reason: fmt.Sprintf("%q: want an S3 object or prefix as a batch names it, s3://bucket/key or s3://bucket/prefix/* (at most %d bytes)", truncate(r.Source, 140), MaxSourceBytes)}
	}
	limit := r.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return BatchPage{}, &InputError{Field: "limit", Reason: fmt.Sprintf("%d is not within 1–%d", limit, MaxListLimit)}
	}
	before := ""
	if r.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(r.Cursor)
		if err != nil || len(raw) == 0 {
			return BatchPage{}, &InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
		}
		before = string(raw)
	}
	rows, next, err := c.Store.ListBatches(ctx, BatchQuery{Statuses: r.Statuses, Since: r.Since, Source: r.Source, Before: before, Limit: limit, Now: c.now()})
	if err != nil {
		return BatchPage{}, err
	}
	p := BatchPage{Batches: make([]BatchSummary, 0, len(rows))}
	for _, b := range rows {
		p.Batches = append(p.Batches, Summary(b))
	}
	c.liveSummaries(ctx, p.Batches)
	if next != "" {
		p.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return p, nil
}
