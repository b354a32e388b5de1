package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// row is a stored item row: the item's state (the same ledger.ItemState a
// pack row holds per item) and the row's own lease, shard and TTL.
type row struct {
	batchID    string
	s          ledger.ItemState
	leaseUntil time.Time
	shard      int // item shard, from the write's ListShards
	expiresAt  time.Time
	// token is the last take's or settle's (ledger.Reservation.Token,
	// ledger.Record.Token) and taken what it answered: a resend of it
	// answers the same, as DynamoDB's adapter does from the row.
	token string
	taken ledger.Item
}

// view is the item as the adapter reads it back.
func (r *row) view() ledger.Item {
	it := r.s.Item(r.batchID)
	it.LeaseUntil, it.ExpiresAt = r.leaseUntil, r.expiresAt
	it.Output = slices.Clone(it.Output)
	it.Cost = maps.Clone(it.Cost)
	it.Spent = maps.Clone(it.Spent)
	return it
}

func (s *Store) row(batchID, key string) *row {
	return s.items[batchID][key]
}

// plan is ledger.Plan for the row of r's item (nil: no row): the in-memory
// store takes and refuses exactly what the item rules say, as DynamoDB's
// conditions do (the conformance suite checks both).
func (s *Store) plan(batchID, key string, listShards, run, rev int, mode ledger.Mode, now time.Time) (*row, ledger.Step, bool) {
	cur := s.row(batchID, key)
	if cur == nil {
		cur = &row{batchID: batchID, s: ledger.ItemState{Key: key}, shard: ledger.Shard(key, listShards)}
	}
	step, interrupted := ledger.Plan(cur.s, run, rev, mode, !cur.leaseUntil.IsZero() && cur.leaseUntil.UnixMilli() >= now.UnixMilli())
	return cur, step, interrupted
}

func (s *Store) put(r *row) {
	if s.items[r.batchID] == nil {
		s.items[r.batchID] = map[string]*row{}
	}
	s.items[r.batchID][r.s.Key] = r
}

// fenced: the row is in flight in run under attempt.
func fenced(r *row, run, attempt int) bool {
	return r != nil && r.s.Outcome == api.OutcomeInFlight && r.s.Attempt == attempt && r.s.Run == run
}

func (s *Store) stored(batchID, key string) ledger.Item {
	if r := s.row(batchID, key); r != nil {
		return r.view()
	}
	return ledger.Item{}
}

// Reserve implements ledger.Store: where ledger.Plan gives StepRun.
func (s *Store) Reserve(_ context.Context, r ledger.Reservation) (ledger.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, step, interrupted := s.plan(r.BatchID, r.Key, r.ListShards, r.Run, r.Revision, ledger.ModeRun, r.Now)
	if step != ledger.StepRun {
		if r.Token != "" && cur.token == r.Token && cur.s.Run == r.Run && cur.s.Outcome == api.OutcomeInFlight {
			return cur.taken, nil // this take sent again after its answer was lost
		}
		return s.stored(r.BatchID, r.Key), conflictf("reserve %s/%s", r.BatchID, r.Key)
	}
	was := cur.s
	cur.s = ledger.Start(was, r.Run, ms(r.Now))
	cur.leaseUntil = ms(r.Now.Add(r.Lease))
	s.put(cur)
	it := ledger.Item{
		Item: api.Item{
			Key:            r.Key,
			RunID:          r.RunID,
			Run:            r.Run,
			Outcome:        api.OutcomeInFlight,
			Attempt:        cur.s.Attempt,
			LeaseUntil:     cur.leaseUntil,
			UpdatedAt:      ms(r.Now),
			RunAttempts:    cur.s.RunAttempts(),
			ThrottledSince: cur.s.ThrottledSince,
			Revision:       cur.s.Revision,
		},
		BatchID:     r.BatchID,
		Interrupted: interrupted, Signalled: cur.s.Signalled,
	}
	if was.Run == r.Run && was.Outcome.Held() {
		it.Resumed, it.ResumedAt = was.Outcome, was.UpdatedAt
	}
	if was.Run == r.Run && was.SpentRun == r.Run && len(was.Spent) > 0 {
		it.Spent, it.SpentRun = maps.Clone(was.Spent), r.Run
	}
	cur.token, cur.taken = r.Token, it
	return it, nil
}

// setOutcome writes r's outcome fields on n, as the adapter's outcome
// update does.
func setOutcome(n *row, r ledger.Record) {
	n.s.Run, n.s.UpdatedAt, n.s.Outcome = r.Run, ms(r.Now), r.Outcome
	n.s.Output, n.s.OutputRef = slices.Clone(r.Output), r.OutputRef
	if len(n.s.Output) == 0 {
		n.s.Output = nil
	}
	n.s.Error = pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes)
	n.s.Reason = r.Reason
	n.s.Cost = nil
	if len(r.Cost) > 0 {
		n.s.Cost = maps.Clone(r.Cost)
	}
	setSpent(n, r)
	n.s.Hold = api.Hold{}
	if r.Outcome.Held() {
		n.s.Hold = storedHold(r.Hold)
	}
	if !ledger.KeepsSignal(r.Outcome) {
		n.s.Signalled = 0
	}
	n.leaseUntil = time.Time{}
}

// storedHold is h as the adapter stores it: times at millisecond
// precision.
func storedHold(h api.Hold) api.Hold {
	h.Since, h.WakeAt = ms(h.Since), ms(h.WakeAt)
	return h
}

func setSpent(n *row, r ledger.Record) {
	if len(r.Spent) > 0 {
		n.s.Spent, n.s.SpentRun = maps.Clone(r.Spent), r.Run
	}
}

// Record implements ledger.Store. Staged effects are refused: this store
// has no table to commit them to.
func (s *Store) Record(_ context.Context, r ledger.Record) error {
	if r.Effects != nil && r.Effects.Len() > 0 {
		return fmt.Errorf("record %s/%s attempt %d: memstore commits no staged writes (%T)", r.BatchID, r.Key, r.Attempt, r.Effects)
	}
	if !r.Outcome.Terminal() && !r.Outcome.Held() {
		return fmt.Errorf("record %s/%s: %q is not a terminal or held outcome", r.BatchID, r.Key, r.Outcome)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(r.BatchID, r.Key)
	if !fenced(cur, r.Run, r.Attempt) {
		if cur != nil && cur.s.Run == r.Run && cur.s.Attempt == r.Attempt && cur.s.Outcome == r.Outcome &&
			cur.s.Reason == r.Reason && cur.s.Error == pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes) {
			return nil // the same write sent again
		}
		return conflictf("record %s/%s attempt %d", r.BatchID, r.Key, r.Attempt)
	}
	if n := recordBytes(r); n > MaxItemBytes {
		return fmt.Errorf("record %s/%s attempt %d: %w (%d bytes by ledger.StateBytes)", r.BatchID, r.Key, r.Attempt, ErrItemTooLarge, n)
	}
	setOutcome(cur, r)
	if r.FirstAttempt > 0 {
		cur.s.FirstAttempt = r.FirstAttempt
	}
	return nil
}

// recordBytes is the size of the item row r leaves, as ledger.StateBytes
// estimates it, plus packRowHead for the row's keys.
func recordBytes(r ledger.Record) int {
	return packRowHead + ledger.StateBytes(ledger.ItemState{Key: r.Key, Output: r.Output, OutputRef: r.OutputRef, Error: pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes),
		Reason: r.Reason, Cost: r.Cost, Spent: r.Spent})
}

// Release implements ledger.Store.
func (s *Store) Release(_ context.Context, r ledger.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(r.BatchID, r.Key)
	if !fenced(cur, r.Run, r.Attempt) {
		return conflictf("release %s/%s attempt %d", r.BatchID, r.Key, r.Attempt)
	}
	cur.leaseUntil, cur.s.UpdatedAt = ms(r.Now), ms(r.Now)
	if r.RetryAt.After(r.Now) {
		cur.leaseUntil = ms(r.RetryAt.Add(-time.Millisecond)) // as DynamoDB's Release
	}
	cur.s.Retry = true
	cur.s.Error = pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes)
	if r.FirstAttempt > 0 {
		cur.s.FirstAttempt = r.FirstAttempt
	}
	cur.s.ThrottledSince = ms(r.ThrottledSince)
	setSpent(cur, r)
	return nil
}

// Settle implements ledger.Store: where ledger.Plan gives StepSettle in
// ModeSettle.
func (s *Store) Settle(_ context.Context, r ledger.Record) (ledger.Item, error) {
	return s.settle(r, ledger.ModeSettle)
}

// SettleUnstarted implements ledger.Store: where ledger.Plan gives
// StepSettle in ModeUnstarted.
func (s *Store) SettleUnstarted(_ context.Context, r ledger.Record) (ledger.Item, error) {
	return s.settle(r, ledger.ModeUnstarted)
}

func (s *Store) settle(r ledger.Record, mode ledger.Mode) (ledger.Item, error) {
	if !r.Outcome.Terminal() {
		return ledger.Item{}, fmt.Errorf("record %s/%s: %q is not a terminal outcome", r.BatchID, r.Key, r.Outcome)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, step, _ := s.plan(r.BatchID, r.Key, r.ListShards, r.Run, r.Revision, mode, r.Now)
	if step != ledger.StepSettle {
		if r.Token != "" && cur.token == r.Token && cur.s.Run == r.Run && cur.s.Outcome == r.Outcome {
			return cur.taken, nil // this settle sent again after its answer was lost
		}
		return s.stored(r.BatchID, r.Key), conflictf("settle %s/%s", r.BatchID, r.Key)
	}
	was := cur.s
	cur.s = ledger.Settled(cur.s, r.Run, r.Outcome, r.Reason, r.Error, ms(r.Now))
	setOutcome(cur, r)
	s.put(cur)
	var it ledger.Item
	if was.Run == r.Run && was.Outcome.Held() {
		it = ledger.Item{Resumed: was.Outcome, ResumedAt: was.UpdatedAt}
	}
	cur.token, cur.taken = r.Token, it
	return it, nil
}

// ReleaseItem implements ledger.Store.
func (s *Store) ReleaseItem(_ context.Context, batchID string, _ int, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(batchID, key)
	if cur == nil {
		if found, err := s.releasePackItem(batchID, key); found {
			return err
		}
	}
	switch {
	case cur == nil:
		return fmt.Errorf("item %s/%s: %w", batchID, key, api.ErrNotFound)
	case cur.s.Outcome != api.OutcomeQuarantined:
		return conflictf("release %s/%s: not quarantined", batchID, key)
	}
	cur.s.Released = true
	return nil
}

// markable: an earlier run than run left the item failed, quarantined or
// cancelled, or it has revision rev already.
func markable(st ledger.ItemState, run, rev int) bool {
	return st.Revision == rev || st.Run < run && (st.Outcome == api.OutcomeFailed || st.Outcome == api.OutcomeQuarantined || st.Outcome == api.OutcomeCancelled)
}

// MarkRevision implements ledger.Store.
func (s *Store) MarkRevision(_ context.Context, b ledger.Batch, rev int, marks []ledger.RevisionMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range marks {
		var st *ledger.ItemState
		if m.Pack {
			p := s.packs[b.ID][m.PackFirst]
			if p != nil && m.Index < len(p.p.Items) && p.p.Items[m.Index].Key == m.Key {
				st = &p.p.Items[m.Index]
			}
		} else if r := s.row(b.ID, m.Key); r != nil {
			st = &r.s
		}
		if st == nil || !markable(*st, b.Run, rev) {
			return conflictf("mark %s/%s with revision %d", b.ID, m.Key, rev)
		}
		st.Revision = rev
	}
	return nil
}

// ReadItems implements ledger.Store.
func (s *Store) ReadItems(_ context.Context, batchID string, _ int, keys []string) ([]ledger.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ledger.Item
	for _, k := range keys {
		if r := s.row(batchID, k); r != nil {
			out = append(out, r.view())
		}
	}
	return out, nil
}

// WakeItem implements ledger.Store.
func (s *Store) WakeItem(_ context.Context, w ledger.WakeMark) (ledger.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(w.BatchID, w.Key)
	switch {
	case cur == nil:
		return ledger.Item{}, conflictf("wake %s/%s: no row", w.BatchID, w.Key)
	case cur.s.Run != w.Run || !cur.s.Outcome.Held() || cur.s.Hold.Woken != "",
		w.Outcome != "" && cur.s.Outcome != w.Outcome,
		w.Subject != "" && cur.s.Hold.Subject != w.Subject,
		w.Attempt > 0 && cur.s.Attempt != w.Attempt:
		return cur.view(), conflictf("wake %s/%s", w.BatchID, w.Key)
	}
	cur.s = held.Woke(cur.s, w.By, ms(w.Now))
	return cur.view(), nil
}

// LocateItem implements ledger.Store.
func (s *Store) LocateItem(_ context.Context, batchID string, _ int, key string) (ledger.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.row(batchID, key); r != nil {
		return r.view(), nil
	}
	if e, ok := s.attn[batchID][key]; ok {
		if r := s.packs[batchID][e.it.PackFirst]; r != nil {
			p := r.view()
			for j := range p.Items {
				if p.Items[j].Key == key {
					return p.Item(j), nil
				}
			}
		}
	}
	return ledger.Item{}, fmt.Errorf("item %s/%s: %w", batchID, key, api.ErrNotFound)
}
