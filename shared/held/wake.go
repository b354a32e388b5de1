package held

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Store is what the held outcomes need of the ledger's store: the methods
// they call, each with the contract ledger.Store documents.
// internal/dynamo implements it on DynamoDB,
// integration/testbed/memstore in memory.
type Store interface {
	GetBatch(ctx context.Context, id string) (ledger.Batch, error)
	WakeItem(ctx context.Context, w ledger.WakeMark) (ledger.Item, error)
	GetPack(ctx context.Context, ref ledger.PackRef) (ledger.Pack, error)
	WritePack(ctx context.Context, w ledger.PackWrite) error
	ListItems(ctx context.Context, batchID string, listShards int, outcome api.Outcome, after string, limit int) ([]ledger.Item, string, error)
	LocateItem(ctx context.Context, batchID string, listShards int, key string) (ledger.Item, error)
}

// The ledger's store contract holds every method this room calls.
var _ Store = ledger.Store(nil)

// Unit is the name of the ledger unit item it lives in, as MessageKey
// takes it: "pack-{first:012}" for an item of a pack row, "item-{run id}"
// for an item row.
func Unit(it ledger.Item) string {
	if it.Packed {
		return PackUnit(it.PackFirst)
	}
	return ItemUnit(it.BatchID, it.Key)
}

// PackUnit is the name of the pack row at first: "pack-{first:012}".
func PackUnit(first int64) string { return "pack-" + ledger.PackSK(first) }

// ItemUnit is the name of item key's row in batch batchID: "item-{run id}".
func ItemUnit(batchID, key string) string { return "item-" + ledger.RunID(batchID, key) }

// MessageKey is where the message of unit (Unit) of b's current run
// waits while an item of it is held (api.HeldMessageKey).
func MessageKey(b ledger.Batch, unit string) string { return api.HeldMessageKey(b.ID, b.Run, unit) }

// Save keeps body, the items-queue message of unit in b's current run,
// for the wakes of its held items: the item function calls it before it
// records an item of the unit held. Each hold of the unit writes it
// again (the same message, its counts as they are then).
func Save(ctx context.Context, blobs ledger.Blobs, b ledger.Batch, unit string, body []byte) error {
	if err := blobs.Put(ctx, MessageKey(b, unit), "application/json", body); err != nil {
		return fmt.Errorf("keep the message of %s/%s: %w", b.ID, unit, err)
	}
	return nil
}

// Waker wakes held items: a conditional write per item, then its unit's
// saved message sent again (Save). Safe for concurrent use.
type Waker struct {
	Store Store
	Blobs ledger.Blobs
	Queue ledger.Queue
	Clock ledger.Clock
	Log   *slog.Logger
}

// Filter selects the held items a wake moves on: those of Outcome (a
// held outcome; api.NeedsAttention: every held one), with the hold's
// Subject where it is not empty. By is what wakes them
// (api.Hold.Woken).
type Filter struct {
	Outcome api.Outcome
	Subject string
	By      api.Wake
	// Attempt, when > 0, is the attempt that held the item: an item held
	// by another attempt is not woken.
	Attempt int
	// Pick, when not nil, is asked of each held item the filter selects
	// (as listed): an item it refuses is not woken, and counts in
	// Woken.Skipped (Raise: an item still at a ceiling). What it judged
	// is fenced: an item row is woken only at the attempt it was listed
	// with (a listing may lag, and the item may have been woken, run and
	// held again since), and a pack's item is asked again as the pack
	// read before its take holds it.
	Pick func(ledger.Item) bool
}

// Woken is what a wake did: Woken items moved on (woken now, or found
// woken by an earlier wake, whose message went again), Units messages
// sent again, and Done false when a bound (the call's time, a pack held
// by a delivery) left matching items for another call.
type Woken struct {
	Woken int64
	Units int
	Done  bool
	// Skipped counts the held items the filter selected that its Pick
	// refused (0 without a Pick).
	Skipped int64
	// Again counts those of Woken an earlier wake had moved on (found
	// woken; their messages sent again): Woken − Again is what this call
	// woke itself, so that the calls of a wake that goes on over several
	// (Done false) add up to each item once.
	Again int64
}

// wakePage is how many held items one listing page of a wake reads.
const wakePage = 200

// packWakeTries is how often a wake tries a pack whose lease is live
// (a delivery running another of its items), 200 ms apart, before it
// leaves it to the next wake.
const packWakeTries = 5

// Wake wakes every held item of b's current run that f selects, in key
// order through the listing of items needing attention (no scan of the
// other items), and sends each woken unit's saved message again (once
// per unit per call, after the pass). Its pass stops once half of took
// has passed (0: no bound), leaving the other half for the sends, with
// Done false; calling it again goes on (an item already woken counts as
// woken and its message goes again, which the reservation makes
// harmless). Idempotent: whatever is repeated, each woken item runs
// (or settles) once per wake.
func (w *Waker) Wake(ctx context.Context, b ledger.Batch, f Filter, took time.Duration) (Woken, error) {
	var u unitSends
	res, err := w.wakePages(ctx, b, f, took/2, &u)
	if serr := w.sendAll(ctx, b, &u); err == nil {
		err = serr
	}
	res.Units = len(u.order)
	return res, err
}

// wakePages is Wake's pass over the listing, its woken units collected
// in u: their messages go once the pass ended, so that no unit it woke
// runs (and takes its pack, or is held again) while the pass goes on —
// a pack's items are consecutive in the source, not in key order, and a
// page after the one that woke some of a pack's items may hold others.
func (w *Waker) wakePages(ctx context.Context, b ledger.Batch, f Filter, took time.Duration, u *unitSends) (Woken, error) {
	start := w.Clock.Now()
	var res Woken
	sel := f.Outcome
	if sel == "" {
		sel = api.NeedsAttention
	}
	after := ""
	for {
		if took > 0 && w.Clock.Now().Sub(start) >= took {
			return res, nil
		}
		items, next, err := w.Store.ListItems(ctx, b.ID, b.ListShards, sel, after, wakePage)
		if err != nil {
			return res, fmt.Errorf("wake %s: %w", b.ID, err)
		}
		var page []ledger.Item
		for _, it := range items {
			if it.Run == b.Run && it.Outcome.Held() && it.Hold != nil &&
				(f.Subject == "" || it.Hold.Subject == f.Subject) {
				if f.Pick != nil && it.Hold.Woken == "" && !f.Pick(it) {
					res.Skipped++
					continue
				}
				page = append(page, it)
			}
		}
		n, again, all, err := w.wakeItems(ctx, b, page, f, u)
		res.Woken += n
		res.Again += again
		if err != nil {
			return res, err
		}
		if !all {
			return res, nil
		}
		if next == "" {
			res.Done = true
			return res, nil
		}
		after = next
	}
}

// Settle wakes every held item (withheld, exhausted, suspended) of b's
// run, which a cancel or a threshold stop has stopped, with api.WakeCancel,
// so that each unit's saved message settles it cancelled: a held item has
// no message of its own, and the run ends only when every item ended. One
// pass over the listing of items needing attention (its failures are read
// and passed over: the attention index is keyed by shard and key, so a
// listing of one outcome reads them too). It stops once took has passed
// (0: no bound) with Done false; calling it again goes on (Wake's
// idempotence).
func (w *Waker) Settle(ctx context.Context, b ledger.Batch, took time.Duration) (Woken, error) {
	return w.Wake(ctx, b, Filter{By: api.WakeCancel}, took)
}

// WakeOne wakes held item key of b's current run as f selects it
// (attempt > 0 fences it to the attempt that held it) and sends its
// unit's message again. It returns the item
// as it was found, and whether it moved on (woken now or by an earlier
// wake). Errors: ErrNotFound (wrapped) for an item without a row or
// attention entry; ErrConflict (wrapped) for an item that is not so
// held, naming its outcome.
func (w *Waker) WakeOne(ctx context.Context, b ledger.Batch, key string, attempt int, f Filter) (ledger.Item, error) {
	it, err := w.Store.LocateItem(ctx, b.ID, b.ListShards, key)
	if err != nil {
		return ledger.Item{}, fmt.Errorf("wake %s/%s: %w", b.ID, key, err)
	}
	f.Attempt = attempt
	if it.Run != b.Run || it.Hold == nil || f.Outcome != "" && it.Outcome != f.Outcome || attempt > 0 && it.Attempt != attempt {
		what := string(it.Outcome)
		if attempt > 0 && it.Attempt != attempt {
			what = fmt.Sprintf("%s at attempt %d, not %d", it.Outcome, it.Attempt, attempt)
		}
		return it, fmt.Errorf("wake %s/%s: the item is %s in run %d: %w", b.ID, key, what, it.Run, api.ErrConflict)
	}
	if it.BatchID == "" {
		it.BatchID = b.ID
	}
	var u unitSends
	_, _, all, err := w.wakeItems(ctx, b, []ledger.Item{it}, f, &u)
	if serr := w.sendAll(ctx, b, &u); err == nil {
		err = serr
	}
	if err == nil && !all {
		err = fmt.Errorf("wake %s/%s: its pack is held by a delivery; try again: %w", b.ID, key, ledger.ErrUnavailable)
	}
	return it, err
}

// unitSends are the units whose saved messages a wake sends again, each
// once, in the order they were first woken.
type unitSends struct {
	seen  map[string]bool
	order []string
}

func (u *unitSends) mark(unit string) {
	if u.seen == nil {
		u.seen = map[string]bool{}
	}
	if !u.seen[unit] {
		u.seen[unit] = true
		u.order = append(u.order, unit)
	}
}

// sendAll sends the saved message of every unit of u once.
func (w *Waker) sendAll(ctx context.Context, b ledger.Batch, u *unitSends) error {
	for _, unit := range u.order {
		if err := w.send(ctx, b, unit); err != nil {
			return err
		}
	}
	return nil
}

// wakeItems wakes items (held, of b's run; item rows and pack items
// mixed) and marks each woken unit in u, whose message its caller sends
// (sendAll). It returns how many moved on, how many of them an earlier
// wake had moved on, and false when a pack stayed held by a delivery
// through its tries.
func (w *Waker) wakeItems(ctx context.Context, b ledger.Batch, items []ledger.Item, f Filter, u *unitSends) (int64, int64, bool, error) {
	var woken, again int64
	all := true
	mark := u.mark
	packs := map[int64][]ledger.Item{}
	var firsts []int64
	for _, it := range items {
		it.BatchID = b.ID
		if it.Packed {
			if packs[it.PackFirst] == nil {
				firsts = append(firsts, it.PackFirst)
			}
			packs[it.PackFirst] = append(packs[it.PackFirst], it)
			continue
		}
		moved, before, err := w.wakeRow(ctx, b, it, f)
		if err != nil {
			return woken, again, all, err
		}
		if moved {
			woken++
			mark(Unit(it))
		}
		if before {
			again++
		}
	}
	for _, first := range firsts {
		n, before, held, err := w.wakePack(ctx, b, first, packs[first], f)
		if err != nil {
			return woken, again, all, err
		}
		all = all && !held
		again += int64(before)
		if n > 0 {
			woken += int64(n)
			mark(Unit(packs[first][0]))
		}
	}
	return woken, again, all, nil
}

// wakeRow wakes an item row; moved reports that it is woken (now, or by
// an earlier wake whose message may be lost: before).
func (w *Waker) wakeRow(ctx context.Context, b ledger.Batch, it ledger.Item, f Filter) (moved, before bool, err error) {
	if f.Pick != nil && f.Attempt == 0 {
		f.Attempt = it.Attempt // Pick judged the item at this attempt
	}
	mk := ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: it.Key, Run: b.Run, Outcome: it.Outcome, Subject: f.Subject, Attempt: f.Attempt,
		By: f.By, Now: w.Clock.Now()}
	got, err := w.Store.WakeItem(ctx, mk)
	switch {
	case err == nil:
		return true, false, nil
	case errors.Is(err, api.ErrConflict):
		before = got.Run == b.Run && got.Outcome.Held() && got.Hold != nil && got.Hold.Woken != ""
		return before, before, nil
	}
	return false, false, err
}

// wakePack wakes the items of the pack at first with one take of the
// pack that leaves it free (its attempt + 1 fences out any stale
// holder), trying a pack under a live lease packWakeTries times. It
// returns how many of them moved on, how many of those an earlier wake
// had moved on, and held true when the pack stayed held.
func (w *Waker) wakePack(ctx context.Context, b ledger.Batch, first int64, items []ledger.Item, f Filter) (moved, before int, held bool, err error) {
	ref := ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: first}
	for try := 0; ; try++ {
		p, err := w.Store.GetPack(ctx, ref)
		if err != nil {
			return 0, 0, false, fmt.Errorf("wake pack %s/%d: %w", b.ID, first, err)
		}
		now := w.Clock.Now()
		if !p.LeaseUntil.Before(now) {
			if try+1 >= packWakeTries {
				return 0, 0, true, nil
			}
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return 0, 0, false, err
			}
			continue
		}
		var writes []ledger.PackItemWrite
		moved, before = 0, 0
		states := slices.Clone(p.Items)
		for _, it := range items {
			j := slices.IndexFunc(p.Items, func(s ledger.ItemState) bool { return s.Key == it.Key })
			if j < 0 {
				continue
			}
			s := p.Items[j]
			switch {
			case s.Run != b.Run || !s.Outcome.Held() || f.Subject != "" && s.Hold.Subject != f.Subject || f.Attempt > 0 && s.Attempt != f.Attempt:
				continue
			case s.Hold.Woken != "":
				moved++ // woken by an earlier wake: its message goes again
				before++
				continue
			case f.Pick != nil && !f.Pick(s.Item(b.ID)):
				continue // held again since it was listed, and still picked out
			}
			s = Woke(s, f.By, now)
			states[j] = s
			writes = append(writes, ledger.PackItemWrite{Index: j, Item: s, Was: s.Outcome})
			moved++
		}
		if len(writes) == 0 {
			return moved, before, false, nil
		}
		err = w.Store.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Attempt: p.Attempt, Run: p.Run, Items: writes,
			InFlight: ledger.InFlight(states), Now: now, Token: ledger.NewTakeToken()})
		switch {
		case errors.Is(err, api.ErrConflict) && try+1 < packWakeTries:
			continue // another writer took the pack since it was read
		case errors.Is(err, api.ErrConflict):
			return 0, 0, true, nil
		case err != nil:
			return 0, 0, false, fmt.Errorf("wake pack %s/%d: %w", b.ID, first, err)
		}
		return moved, before, false, nil
	}
}

// send sends unit's saved message again, at once.
func (w *Waker) send(ctx context.Context, b ledger.Batch, unit string) error {
	body, err := w.Blobs.Get(ctx, MessageKey(b, unit))
	if err != nil {
		return fmt.Errorf("wake %s/%s: its saved message: %w", b.ID, unit, err)
	}
	if err := w.Queue.Requeue(ctx, body, 0); err != nil {
		return fmt.Errorf("wake %s/%s: send its message: %w", b.ID, unit, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
