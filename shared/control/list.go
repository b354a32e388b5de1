package control

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/live"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pacer"
)

// MaxLiveSummaries is how many running batches of one listing page get
// their live view: each costs a read of its batch row and one Query per
// counter partition (Batch.CounterShards, 1–16).
const MaxLiveSummaries = 25

// liveSummaries sets the live view of the page's first MaxLiveSummaries
// running batches, 4 at a time; a batch whose read fails keeps none.
func (c *Control) liveSummaries(ctx context.Context, bs []api.BatchSummary) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	n := 0
	paces := &adaptiveReads{seen: map[string]*api.AdaptivePace{}, rates: map[string]*api.RateBooked{}}
	for i := range bs {
		if bs[i].Status != api.StatusRunning || bs[i].Stop != "" || n >= MaxLiveSummaries {
			continue
		}
		n++
		wg.Add(1)
		go func(s *api.BatchSummary) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			b, err := c.Store.GetBatch(ctx, s.ID)
			if err != nil || b.Status != api.StatusRunning {
				return
			}
			p, err := c.Store.Progress(ctx, b.ID, b.Run, max(1, b.CounterShards))
			if err != nil {
				return
			}
			l := live.Of(b, p, c.now(), c.ItemTimeout)
			l.AdaptivePace = paces.of(ctx, c, b)
			l.Booked(paces.booked(ctx, c, b))
			l.RateConflict = c.RateConflict(ctx, b) // a read only for a batch with a note
			s.Live, s.NeedsAttention = &l, s.NeedsAttention || l.NeedsAttention()
			if b.Pause != nil {
				s.Pause = b.Pause.View(c.now())
			}
		}(&bs[i])
	}
	wg.Wait()
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
func (c *Control) ListBatches(ctx context.Context, r api.ListBatchesRequest) (api.BatchPage, error) {
	for _, s := range r.Statuses {
		if !slices.Contains(api.Statuses(), s) {
			return api.BatchPage{}, &api.InputError{Field: "status", Reason: fmt.Sprintf("%q: want one of %v", s, api.Statuses())}
		}
	}
	if r.Source != "" && (!strings.HasPrefix(r.Source, "s3://") || len(r.Source) > api.MaxSourceBytes) {
		return api.BatchPage{}, &api.InputError{Field: "source", Reason: fmt.Sprintf("%q: want an S3 object or prefix as a batch names it, s3://bucket/key or s3://bucket/prefix/* (at most %d bytes)", api.Truncate(r.Source, 140), api.MaxSourceBytes)}
	}
	limit := r.Limit
	if limit == 0 {
		limit = api.DefaultListLimit
	}
	if limit < 1 || limit > api.MaxListLimit {
		return api.BatchPage{}, &api.InputError{Field: "limit", Reason: fmt.Sprintf("%d is not within 1–%d", limit, api.MaxListLimit)}
	}
	before := ""
	if r.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(r.Cursor)
		if err != nil || len(raw) == 0 {
			return api.BatchPage{}, &api.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
		}
		before = string(raw)
	}
	rows, next, err := c.Store.ListBatches(ctx, ledger.BatchQuery{Statuses: r.Statuses, Since: r.Since, Source: r.Source, Before: before, Limit: limit, Now: c.now()})
	if err != nil {
		return api.BatchPage{}, err
	}
	p := api.BatchPage{Batches: make([]api.BatchSummary, 0, len(rows))}
	for _, b := range rows {
		p.Batches = append(p.Batches, api.Summary(b.Batch))
	}
	c.liveSummaries(ctx, p.Batches)
	if next != "" {
		p.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return p, nil
}

// adaptiveReads reads each downstream key's adaptive row once per
// listing page, for the page's running batches with no rate (several
// batches calling one key share its row), and each rate key's bucket
// rows once, for those with a request rate.
type adaptiveReads struct {
	mu    sync.Mutex
	seen  map[string]*api.AdaptivePace
	rates map[string]*api.RateBooked // by rate key and its rows
}

// booked is c.RateBooked(b) at now, read once per rate key and rows.
func (r *adaptiveReads) booked(ctx context.Context, c *Control, b ledger.Batch) *api.RateBooked {
	if b.Rate == nil || b.Rate.RequestsPerSecond <= 0 && !b.Rate.Budgeted() {
		return nil
	}
	// What RateBooked reads: the key's bucket rows (their number, if
	// any) and its token row (if budgeted).
	id := b.Rate.KeyOf(b.ID) + "\x00" + strconv.FormatBool(b.Rate.RequestsPerSecond > 0) + "\x00" +
		strconv.Itoa(pace.RateShards(b.Rate.RequestsPerSecond)) + "\x00" + strconv.FormatBool(b.Rate.Budgeted())
	r.mu.Lock()
	defer r.mu.Unlock()
	if rb, ok := r.rates[id]; ok {
		if rb == nil {
			return nil
		}
		v := *rb
		v.RequestsPerSecond, v.TokensPerSecond = b.Rate.RequestsPerSecond, b.Rate.TokenBudget()
		return &v
	}
	rb := c.RateBooked(ctx, b, c.now())
	r.rates[id] = rb
	return rb
}

// of is c.AdaptivePace(b) at now, read once per key.
func (r *adaptiveReads) of(ctx context.Context, c *Control, b ledger.Batch) *api.AdaptivePace {
	if b.Rate != nil {
		return nil
	}
	key := pacer.DownstreamKey(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.seen[key]; ok {
		return p
	}
	p := c.AdaptivePace(ctx, b, c.now())
	r.seen[key] = p
	return p
}

// RateBooked is how far ahead the calls of b's rate key are booked at now
// (api.RateBooked). A request rate: one strongly consistent read of each
// of the key's bucket rows (pace.RateShards, at most 20), the earliest
// Next — a unit leases one row at random, so it starts its calls no
// earlier. A token budget: one of the key's token row, its Next. A unit
// needs both, so the later one is the answer, By naming it. nil for a
// batch with neither, and while neither is booked past now; a failed
// read is logged and the view goes on without it.
func (c *Control) RateBooked(ctx context.Context, b ledger.Batch, now time.Time) *api.RateBooked {
	if b.Rate == nil || b.Rate.RequestsPerSecond <= 0 && !b.Rate.Budgeted() {
		return nil
	}
	key := b.Rate.KeyOf(b.ID)
	unread := func(err error) *api.RateBooked {
		if c.Log != nil {
			c.Log.WarnContext(ctx, "rate key's bookings unread; the view goes on without them", "batch_id", b.ID, "rate_key", key, "error", err.Error())
		}
		return nil
	}
	var until time.Time
	by := api.BookedByRequests
	if b.Rate.RequestsPerSecond > 0 {
		for shard := range pace.RateShards(b.Rate.RequestsPerSecond) {
			next, err := c.Store.ReadRate(ctx, key, shard)
			if err != nil {
				return unread(err)
			}
			if !next.After(now) {
				until = time.Time{} // a row free now: the requests hold no unit back
				break
			}
			if until.IsZero() || next.Before(until) {
				until = next
			}
		}
	}
	if b.Rate.Budgeted() {
		g, err := c.Store.ReadTokens(ctx, key)
		if err != nil {
			return unread(err)
		}
		if g.Next.After(now) && g.Next.After(until) {
			until, by = g.Next, api.BookedByTokens
		}
	}
	if !until.After(now) {
		return nil
	}
	return &api.RateBooked{Key: key, RequestsPerSecond: b.Rate.RequestsPerSecond, TokensPerSecond: b.Rate.TokenBudget(), By: by,
		Until: until, AheadSeconds: math.Round(until.Sub(now).Seconds()*10) / 10}
}

// AdaptivePace is the adaptive pace b's downstream holds it to at now
// (api.AdaptivePace, docs/adr/0036): one strongly consistent read of the
// key's adaptive row, for a batch with no rate of its own (a batch with
// one is paced by it). nil when the key is not paced; a failed read is
// logged and the view goes on without it.
func (c *Control) AdaptivePace(ctx context.Context, b ledger.Batch, now time.Time) *api.AdaptivePace {
	if b.Rate != nil {
		return nil
	}
	key := pacer.DownstreamKey(b)
	a, err := c.Store.ReadAdapt(ctx, key)
	if err != nil {
		if c.Log != nil {
			c.Log.WarnContext(ctx, "adaptive pace unread; the view goes on without it", "batch_id", b.ID, "downstream_key", key, "error", err.Error())
		}
		return nil
	}
	return live.Adaptive(key, a, now)
}
