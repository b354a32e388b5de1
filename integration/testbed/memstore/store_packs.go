package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// packRow is a stored pack row.
type packRow struct {
	p        ledger.Pack
	shard    int
	inFlight int // PackWrite.InFlight of the last write that set it
}

// attnEntry is an attention entry of a pack item: the item as its write
// left it, and where it lives.
type attnEntry struct {
	it    ledger.Item
	shard int
}

func clonePackItem(it ledger.ItemState) ledger.ItemState {
	it.Output = slices.Clone(it.Output)
	it.Cost = maps.Clone(it.Cost)
	it.Spent = maps.Clone(it.Spent)
	return it
}

func (s *Store) pack(ref ledger.PackRef) *packRow {
	return s.packs[ref.BatchID][ref.First]
}

func (r *packRow) view() ledger.Pack {
	p := r.p
	p.Items = make([]ledger.ItemState, len(r.p.Items))
	for j, it := range r.p.Items {
		p.Items[j] = clonePackItem(it)
	}
	return p
}

// GetPack implements ledger.Store.
func (s *Store) GetPack(_ context.Context, ref ledger.PackRef) (ledger.Pack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.pack(ref)
	if r == nil {
		return ledger.Pack{}, fmt.Errorf("pack %s/%d: %w", ref.BatchID, ref.First, api.ErrNotFound)
	}
	return r.view(), nil
}

// WritePack implements ledger.Store.
func (s *Store) WritePack(_ context.Context, w ledger.PackWrite) error {
	if w.Effects != nil && w.Effects.Len() > 0 {
		return fmt.Errorf("write pack %s/%d: the in-memory store commits no staged writes", w.Ref.BatchID, w.Ref.First)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.pack(w.Ref)
	now := ms(w.Now)
	switch {
	case r != nil && ledger.TakenBefore(w, r.view()):
		return nil // this take sent again after its answer was lost, as DynamoDB's adapter answers
	case w.Take && w.Attempt == 0 && r != nil:
		// As DynamoDB with ReturnValuesOnConditionCheckFailure: the row
		// as stored comes back with the refusal.
		return &ledger.PackConflict{Pack: r.view(), Err: conflictf("take pack %s/%d: it exists", w.Ref.BatchID, w.Ref.First)}
	case w.Take && w.Attempt > 0 && r != nil && (r.p.Attempt != w.Attempt || !r.p.LeaseUntil.Before(now)):
		return &ledger.PackConflict{Pack: r.view(), Err: conflictf("take pack %s/%d: attempt or lease changed", w.Ref.BatchID, w.Ref.First)}
	case w.Take && w.Attempt > 0 && r == nil:
		return conflictf("take pack %s/%d: attempt or lease changed", w.Ref.BatchID, w.Ref.First)
	case !w.Take && (r == nil || r.p.Attempt != w.Attempt):
		return conflictf("write pack %s/%d: fenced", w.Ref.BatchID, w.Ref.First)
	}
	if n := packRowBytes(r, w); n > MaxItemBytes {
		return fmt.Errorf("write pack %s/%d: %w (%d bytes by ledger.StateBytes)", w.Ref.BatchID, w.Ref.First, ErrItemTooLarge, n)
	}
	if r == nil {
		r = &packRow{p: ledger.Pack{BatchID: w.Ref.BatchID, First: w.Ref.First}, shard: ledger.PackShard(w.Ref.First, w.Ref.ListShards)}
		if s.packs[w.Ref.BatchID] == nil {
			s.packs[w.Ref.BatchID] = map[int64]*packRow{}
		}
		s.packs[w.Ref.BatchID][w.Ref.First] = r
	}
	if w.Take {
		r.p.Attempt, r.p.Run, r.p.Token = w.Attempt+1, w.Run, w.Token
	}
	if w.InFlight >= 0 {
		r.inFlight = w.InFlight
	}
	r.p.LeaseUntil = time.Time{}
	if !w.LeaseUntil.IsZero() {
		r.p.LeaseUntil = ms(w.LeaseUntil)
	}
	for _, iw := range w.Items {
		for len(r.p.Items) <= iw.Index {
			r.p.Items = append(r.p.Items, ledger.ItemState{})
		}
		it := clonePackItem(iw.Item)
		it.UpdatedAt = ms(it.UpdatedAt)
		it.Hold = storedHold(it.Hold)
		if it.Outcome == "" {
			it = ledger.ItemState{}
		}
		r.p.Items[iw.Index] = it
		s.attention(r, iw)
	}
	return nil
}

// packRowBytes is the size of the pack row w would leave, as
// ledger.StateBytes estimates its items, plus packRowHead for the row's
// own attributes.
func packRowBytes(r *packRow, w ledger.PackWrite) int {
	var items []ledger.ItemState
	if r != nil {
		items = slices.Clone(r.p.Items)
	}
	for _, iw := range w.Items {
		for len(items) <= iw.Index {
			items = append(items, ledger.ItemState{})
		}
		items[iw.Index] = iw.Item
	}
	n := packRowHead
	for _, it := range items {
		if it.Outcome != "" {
			n += ledger.StateBytes(it)
		}
	}
	return n
}

// packRowHead is what a pack row's keys and attributes besides its items
// take at most: 2,048 bytes.
const packRowHead = 2 << 10

// attention keeps the attention entry of a written pack item as the
// adapter does: put when it enters failed or quarantined, deleted when it
// leaves them.
func (s *Store) attention(r *packRow, iw ledger.PackItemWrite) {
	key := iw.Item.Key
	had := iw.Was == api.OutcomeFailed || iw.Was == api.OutcomeQuarantined || iw.Was.Held()
	switch {
	case iw.Item.Attention():
		if s.attn[r.p.BatchID] == nil {
			s.attn[r.p.BatchID] = map[string]attnEntry{}
		}
		it := r.view().Item(iw.Index)
		it.LeaseUntil = time.Time{}
		s.attn[r.p.BatchID][key] = attnEntry{it: it, shard: r.shard}
	case !iw.Item.Attention() && had:
		delete(s.attn[r.p.BatchID], key)
	}
}

// ScanPacks implements ledger.Store.
func (s *Store) ScanPacks(_ context.Context, batchID string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	limit = min(max(limit, 1), 1000)
	s.mu.Lock()
	defer s.mu.Unlock()
	var items []ledger.Item
	for _, r := range s.packs[batchID] {
		if r.shard != shard {
			continue
		}
		p := r.view()
		for j := range p.Items {
			if p.Items[j].Outcome != "" {
				if it := p.Item(j); it.Pos > after {
					items = append(items, it)
				}
			}
		}
	}
	slices.SortFunc(items, func(a, b ledger.Item) int { return strings.Compare(a.Pos, b.Pos) })
	more := len(items) > limit
	return items[:min(limit, len(items))], more, nil
}

// ListPackItems implements ledger.Store.
func (s *Store) ListPackItems(_ context.Context, batchID string, listShards int, after string, limit int) ([]ledger.Item, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var items []ledger.Item
	for _, r := range s.packs[batchID] {
		if r.inFlight == 0 {
			continue // as the adapter's filter: no item in flight after its last write
		}
		p := r.view()
		for j := range p.Items {
			if p.Items[j].Outcome == api.OutcomeInFlight && p.Items[j].Key > after && r.shard < max(1, listShards) {
				items = append(items, p.Item(j))
			}
		}
	}
	slices.SortFunc(items, func(a, b ledger.Item) int { return strings.Compare(a.Key, b.Key) })
	if len(items) > limit && limit > 0 {
		items = items[:limit]
		return items, items[len(items)-1].Key, nil
	}
	return items, "", nil
}

// KeepPacks implements ledger.Store.
func (s *Store) KeepPacks(_ context.Context, b ledger.Batch, firsts []int64, _ []string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := time.Unix(until.Unix(), 0).UTC()
	for _, f := range firsts {
		if r := s.packs[b.ID][f]; r != nil && (r.p.ExpiresAt.IsZero() || r.p.ExpiresAt.Before(u)) {
			r.p.ExpiresAt = u
		}
	}
	return nil
}

// releasePackItem releases a quarantined pack item found by its attention
// entry; false when the item has none.
func (s *Store) releasePackItem(batchID, key string) (bool, error) {
	e, ok := s.attn[batchID][key]
	if !ok {
		return false, nil
	}
	if e.it.Outcome != api.OutcomeQuarantined {
		return true, conflictf("release %s/%s: not quarantined", batchID, key)
	}
	for _, r := range s.packs[batchID] {
		for j := range r.p.Items {
			if r.p.Items[j].Key == key && r.p.Items[j].Outcome == api.OutcomeQuarantined {
				r.p.Items[j].Released = true
				e.it.Released = true
				s.attn[batchID][key] = e
				return true, nil
			}
		}
	}
	return true, conflictf("release %s/%s: not quarantined", batchID, key)
}

// attentionItems returns the batch's pack items of outcome (failed,
// quarantined) from their attention entries, keys after `after`.
func (s *Store) attentionItems(batchID string, listShards int, outcome api.Outcome, after string) []ledger.Item {
	var items []ledger.Item
	for k, e := range s.attn[batchID] {
		if ledger.ListedAs(e.it.Outcome, outcome) && k > after && e.shard < max(1, listShards) {
			it := e.it
			it.Output, it.Cost, it.Spent = slices.Clone(it.Output), maps.Clone(it.Cost), maps.Clone(it.Spent)
			items = append(items, it)
		}
	}
	return items
}
