package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/source"
)

// A ledger unit is what one items-queue message names and one conditional
// write takes: an item row (an item message, one item per message) or a
// pack row (a pack message, items_per_message > 1). The worker runs every
// unit through one loop (Worker.runUnit): take the unit, plan each item
// (Plan), run the items to run, conclude each attempt (Conclude), write
// the endings under the unit's fence. The two kinds differ only in how
// they take and write:
//
//   - an item row is taken by Store.Reserve (or Settle, SettleUnstarted):
//     one conditional write, no read; its fence is the item's attempt, and
//     its ending is one Record (or Release for a scheduled retry).
//   - a pack row is read (Store.GetPack), planned, and taken by one
//     Store.WritePack conditioned on the attempt and lease it read (a
//     fresh message's take is written first, with no read: packUnit.take);
//     its fence is the pack's attempt, and every item's ending goes in one
//     fenced WritePack.
type unit interface {
	// take reserves (ModeRun) or settles the unit's items for this
	// delivery. With another delivery's live lease it takes nothing and
	// returns the hold with held set.
	take(ctx context.Context, t taking) (*hold, error)
	// write writes the states of the items named, ended by their
	// attempts, under the hold's fence; effects (one succeeded item's
	// staged writes) go in the same transaction. ErrConflict: a later take
	// holds the unit.
	write(ctx context.Context, h *hold, items []ledger.PackItemWrite, effects ledger.StagedEffects) error
}

// unitMessage is an item or a pack message, decoded: the items of one
// ledger unit and where they come from.
type unitMessage struct {
	BatchID     string
	Run         int
	ManifestKey string
	ChunkFirst  int64
	ChunkItems  int64
	Packed      bool  // a pack message: its unit is the pack row at PackFirst
	PackFirst   int64 // Packed: the manifest index of its first item
	Items       []ledger.PackedItem
	// requeued and slotWaits are the message's Requeued and SlotWaits
	// counts; body encodes them again.
	requeued, slotWaits *int
	// rateAt and ratePos are the message's RateAtUs and RatePos (a
	// track's unit keeps them in ref);
	// tokensAt, tokensBooked and tokensDrift its TokensAtUs,
	// TokensBookedUs and TokensDriftUs.
	// rateLead its RateLeadMs.
	rateAt, rateLead, tokensAt, tokensBooked, tokensDrift *int64
	ratePos                                               *float64
	// lease is this delivery's pacing of the unit (rate.go): the start
	// of the lease it runs under (its calls start by then +
	// pace.LeaseGrace), and the token booking it settles once its calls
	// ended, or gives back when none ran.
	lease pacer.Lease
	// throttled: the downstream throttled a call of this delivery's unit
	// (a batch with no rate): its calls not yet started are given back.
	throttled atomic.Bool
	// oks sums this delivery's items that succeeded into its
	// invocation's line (okLines); nil: a line of the delivery's own.
	oks  *okLines
	body func() ([]byte, error)
	// probe: this delivery claimed its paused batch's probe; one item
	// runs (Pause).
	probe bool
	// sample: the unit is one of its batch's sample (Message.Sample): it
	// runs while the batch holds the rest (api.Approval.Holds).
	sample bool
	// track is the track running the unit (a batch with
	// max_concurrency): the unit then waits in it instead of on the
	// queue; ref is where its lines are and how often it waited for AWS.
	track *trackRun
	ref   ledger.TrackRetry
	// trackUnit is the message's TrackUnit: set on a track's unit, so
	// that its message, sent again by a wake, goes back to a track.
	trackUnit **ledger.TrackUnit
	// hopAt is the message's HopAtMs: set on a timer hop (sendTimer).
	hopAt *int64
}

// trackUnitOf is the message's TrackUnit (nil: none).
func (m *unitMessage) trackUnitOf() *ledger.TrackUnit {
	if m.trackUnit == nil {
		return nil
	}
	return *m.trackUnit
}

// itemUnitMessage is m (an item message) as a unit message.
func itemUnitMessage(m *ledger.Message) *unitMessage {
	return &unitMessage{BatchID: m.BatchID, Run: m.Run, ManifestKey: m.ManifestKey, ChunkFirst: m.ChunkFirst, ChunkItems: m.ChunkItems,
		Items: []ledger.PackedItem{{Key: m.Key, Input: m.Input, InputRef: m.InputRef}}, requeued: &m.Requeued, slotWaits: &m.SlotWaits, rateAt: &m.RateAtUs, rateLead: &m.RateLeadMs, ratePos: &m.RatePos, tokensAt: &m.TokensAtUs, tokensBooked: &m.TokensBookedUs, tokensDrift: &m.TokensDriftUs, trackUnit: &m.TrackUnit, hopAt: &m.HopAtMs, sample: m.Sample,
		// A closure, not the method value m.Body: that would copy *m now,
		// and encode the counts as they were before they grew.
		body: func() ([]byte, error) { return m.Body() }}
}

// packUnitMessage is m (a pack message) as a unit message.
func packUnitMessage(m *ledger.PackMessage) *unitMessage {
	return &unitMessage{BatchID: m.BatchID, Run: m.Run, ManifestKey: m.ManifestKey, ChunkFirst: m.ChunkFirst, ChunkItems: m.ChunkItems,
		Packed: true, PackFirst: m.PackFirst, Items: m.Items, requeued: &m.Requeued, slotWaits: &m.SlotWaits, rateAt: &m.RateAtUs, rateLead: &m.RateLeadMs, ratePos: &m.RatePos, tokensAt: &m.TokensAtUs, tokensBooked: &m.TokensBookedUs, tokensDrift: &m.TokensDriftUs, trackUnit: &m.TrackUnit, hopAt: &m.HopAtMs, sample: m.Sample,
		body: func() ([]byte, error) { return m.Body() }}
}

// taking is what a take asks for.
type taking struct {
	b    ledger.Batch
	msg  *unitMessage
	mode ledger.Mode
	// settle is the state a settled item takes (ModeSettle, ModeUnstarted).
	settle func(s ledger.ItemState, now time.Time) ledger.ItemState
	// prepare reads the inputs of the items planned to run before the
	// take's write, so that S3 being unavailable costs no attempt.
	prepare func(run []int) error
	// redelivered: the message was received before (a scheduled retry, a
	// holder that died), so its item row most likely is in flight in this
	// run: Reserve tries the takeover first.
	redelivered bool
}

// fresh reports whether the message is a first run's first delivery,
// never re-sent (no requeue, no slot wait, no pause probe): its pack has
// no row unless a duplicate delivery took it.
func (t taking) fresh() bool {
	m := t.msg
	return t.mode == ledger.ModeRun && t.b.Run == 1 && m.Run <= 1 && !t.redelivered && !m.probe &&
		(m.requeued == nil || *m.requeued == 0) && (m.slotWaits == nil || *m.slotWaits == 0)
}

// hold is one delivery's hold on a unit: the fence of its writes, its
// lease, and each item's state as read (was) and as taken (items).
type hold struct {
	attempt int
	lease   time.Time
	held    time.Time // not zero: another delivery holds the unit until then; nothing taken
	// retryHeld: held by an item row's scheduled retry, not a delivery
	// (Record.RetryAt): held is exactly when it is due.
	retryHeld   bool
	was         []ledger.ItemState
	items       []ledger.ItemState
	steps       []ledger.Step
	interrupted []bool
	dones       []done // the items the take settled or counted
	probe       bool   // the unit message's probe
	// timerAt, when not zero, is when a suspended item of the unit that
	// this delivery left waiting wants its timer message (sendTimer).
	timerAt time.Time
	// retryAt, when not zero, is the earliest due retry of the items of
	// the unit the take left because their retry is not due
	// (ItemState.RetryWaits): a delivery that came early (a duplicate, the
	// message sent again for a sibling's wake or timer) comes back then.
	retryAt time.Time
	// commits makes the unit's writes with staged effects one at a
	// time, each sizing the row with the others' items (commit).
	commits sync.Mutex
	// lifted is when the latest of the unit's items to run that was
	// withheld was woken by a lift (zero: none; liftedSecrets).
	lifted time.Time
}

func newHold(n int) *hold {
	return &hold{was: make([]ledger.ItemState, n), items: make([]ledger.ItemState, n), steps: make([]ledger.Step, n), interrupted: make([]bool, n)}
}

// unitOf is the ledger unit of m's items.
func (w *Worker) unitOf(b ledger.Batch, m *unitMessage) unit {
	if m.Packed {
		return &packUnit{w: w, run: b.Run, ref: ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: m.PackFirst}}
	}
	return &itemUnit{w: w, b: b, key: m.Items[0].Key}
}

// itemUnit is an item row.
type itemUnit struct {
	w   *Worker
	b   ledger.Batch
	key string
}

func (u *itemUnit) record(now time.Time) ledger.Record {
	return ledger.Record{BatchID: u.b.ID, Key: u.key, RunID: ledger.RunID(u.b.ID, u.key), Run: u.b.Run, Revision: u.b.RunRevision, ListShards: u.b.ListShards, Now: now}
}

// take reserves the item (Store.Reserve: one conditional write, no read)
// or settles it (Store.Settle, SettleUnstarted). A refused take reads the
// stored row the write returned: held by another delivery, or answered
// (counted once in this run when an earlier run's outcome answers it,
// Store.MarkCounted).
func (u *itemUnit) take(ctx context.Context, t taking) (*hold, error) {
	w, b, h := u.w, u.b, newHold(1)
	now := w.Clock.Now()
	var it ledger.Item
	var err error
	switch t.mode {
	case ledger.ModeRun:
		if err := t.prepare([]int{0}); err != nil {
			return nil, err
		}
		it, err = w.Store.Reserve(ctx, ledger.Reservation{BatchID: b.ID, Key: u.key, RunID: ledger.RunID(b.ID, u.key), Run: b.Run, Revision: b.RunRevision, ListShards: b.ListShards, Now: now, Lease: w.Lease,
			Redelivered: t.redelivered, Token: ledger.NewTakeToken()})
		if err == nil {
			s := ledger.ItemState{Key: u.key, Run: b.Run, Outcome: api.OutcomeInFlight, Attempt: it.Attempt, FirstAttempt: it.Attempt - it.RunAttempts + 1,
				ThrottledSince: it.ThrottledSince, Revision: it.Revision, UpdatedAt: now, Signalled: it.Signalled}
			if len(it.Spent) > 0 {
				s.Spent, s.SpentRun = it.Spent, b.Run // this run's earlier attempts
			}
			h.attempt, h.lease, h.was[0], h.items[0], h.steps[0], h.interrupted[0] = it.Attempt, it.LeaseUntil, s, s, ledger.StepRun, it.Interrupted
			if it.Resumed == api.OutcomeWithheld {
				h.lifted = it.ResumedAt // woken by a lift (a cancel settles, it does not run)
			}
			h.dones = append(h.dones, unheld(b, ledger.ItemState{Run: b.Run, Outcome: it.Resumed}))
			return h, nil
		}
	default:
		s := t.settle(ledger.ItemState{Key: u.key}, now)
		r := u.record(now)
		r.Outcome, r.Reason, r.Error, r.Token = s.Outcome, s.Reason, s.Error, ledger.NewTakeToken()
		if t.mode == ledger.ModeSettle {
			it, err = w.Store.Settle(ctx, r)
		} else {
			it, err = w.Store.SettleUnstarted(ctx, r)
		}
		if err == nil {
			h.items[0], h.steps[0] = s, ledger.StepSettle
			h.dones = append(h.dones, doneOf(b, s), unheld(b, ledger.ItemState{Run: b.Run, Outcome: it.Resumed}))
			return h, nil
		}
	}
	if !errors.Is(err, api.ErrConflict) {
		return nil, err
	}
	if t.mode == ledger.ModeRun {
		if again, err := w.wakeDueRow(ctx, b, it, h); err != nil || again {
			if err != nil {
				return nil, err
			}
			return u.take(ctx, t) // woken by its timer: reserved now
		}
	}
	switch {
	case t.mode == ledger.ModeUnstarted:
		return h, nil // reserved in this run: its own message decides
	case it.Outcome == api.OutcomeInFlight && it.Run == b.Run:
		h.held, h.retryHeld = it.LeaseUntil, it.RetryScheduled
		if h.held.Before(now) {
			h.held = now // its lease ended this very millisecond: back soon
		}
		return h, nil
	case it.Run >= b.Run || (it.Outcome != api.OutcomeSucceeded && it.Outcome != api.OutcomeQuarantined):
		return h, nil
	}
	// Answered from an earlier run: counted once toward this run (the
	// count mark is a conditional write, so a duplicate does not count).
	counted, err := w.Store.MarkCounted(ctx, b.ID, b.ListShards, u.key, b.Run, now)
	if err != nil {
		return nil, fmt.Errorf("count an answered item: %w", err)
	}
	if counted {
		h.steps[0] = ledger.StepCount
		h.dones = append(h.dones, done{batch: b, outcome: it.Outcome, cost: it.Cost})
	}
	return h, nil
}

// write records the item's ending under its attempt: a terminal or held
// outcome with Store.Record (with the attempt's staged writes, if any), a
// scheduled retry (or an attempt given back) with Store.Release.
func (u *itemUnit) write(ctx context.Context, h *hold, items []ledger.PackItemWrite, effects ledger.StagedEffects) error {
	if len(items) != 1 {
		return fmt.Errorf("item %s/%s: %d writes for one item", u.b.ID, u.key, len(items))
	}
	s := items[0].Item
	r := u.record(s.UpdatedAt)
	r.Attempt, r.Error, r.Reason, r.Cost, r.Effects, r.FirstAttempt = h.attempt, s.Error, s.Reason, s.Cost, effects, s.FirstAttempt
	r.Hold = s.Hold
	if s.SpentRun == u.b.Run {
		r.Spent = s.Spent
	}
	if !s.Outcome.Terminal() && !s.Outcome.Held() {
		r.ThrottledSince, r.RetryAt = s.ThrottledSince, s.RetryAt
		return u.w.Store.Release(ctx, r)
	}
	r.Outcome, r.Output, r.OutputRef = s.Outcome, s.Output, s.OutputRef
	return u.w.Store.Record(ctx, r)
}

// packTakeTries bounds the reads and takes of one pack per delivery when
// another writer keeps changing it.
const packTakeTries = 3

// packUnit is a pack row.
type packUnit struct {
	w   *Worker
	run int
	ref ledger.PackRef
}

// take reads the pack row and takes it for this delivery in one write
// conditioned on the attempt and lease it read: items planned StepRun
// are written in flight (Start), StepSettle items settled, StepCount
// items marked counted in the run. A pack under a live lease is held;
// a pack with nothing to change is not written.
//
// A first delivery of a first run's message (fresh) has no row yet in
// all likelihood: it is taken by a write conditioned on no row, with no
// read before it (a strongly consistent read is a read unit per message;
// a refused conditional write costs a write unit, so only where a row is
// unlikely). A refused take that brings the row as stored back
// (ledger.PackConflict) plans again from it; otherwise the row is read.
func (u *packUnit) take(ctx context.Context, t taking) (*hold, error) {
	w, b, m := u.w, t.b, t.msg
	var known *ledger.Pack
	if t.fresh() {
		known = &ledger.Pack{BatchID: u.ref.BatchID, First: u.ref.First}
	}
	for try := 0; ; try++ {
		now := w.Clock.Now()
		var p ledger.Pack
		var err error
		if known != nil {
			p, known = *known, nil
		} else if p, err = w.Store.GetPack(ctx, u.ref); err != nil && !errors.Is(err, api.ErrNotFound) {
			return nil, err
		}
		h := newHold(len(m.Items))
		var timerAt, retryAt time.Time
		if p.Attempt > 0 && !p.LeaseUntil.Before(now) {
			h.held = p.LeaseUntil
			return h, nil
		}
		h.attempt = p.Attempt + 1
		var writes []ledger.PackItemWrite
		var run []int
		for j, mi := range m.Items {
			var s ledger.ItemState
			if j < len(p.Items) {
				s = p.Items[j]
			}
			if s.Key == "" {
				s.Key = mi.Key
			}
			s = held.WakeDue(s, b.Run, now)
			timerAt = timerOf(timerAt, s, b.Run, now)
			h.was[j], h.items[j] = s, s
			h.steps[j], h.interrupted[j] = ledger.Plan(s, b.Run, b.RunRevision, t.mode, false)
			if h.steps[j] == ledger.StepRun && t.mode == ledger.ModeRun && s.RetryWaits(b.Run, now) {
				// Its retry is not due: left in flight as it is, its
				// wait kept whatever delivery came (docs/design/items.md, "Retry policy").
				h.steps[j] = ledger.StepNone
				if retryAt.IsZero() || s.RetryAt.Before(retryAt) {
					retryAt = s.RetryAt
				}
			}
			switch h.steps[j] {
			case ledger.StepRun:
				if s.Run == b.Run && s.Outcome == api.OutcomeWithheld && s.Hold.Woken == api.WakeLift && s.UpdatedAt.After(h.lifted) {
					h.lifted = s.UpdatedAt
				}
				h.items[j] = ledger.Start(s, b.Run, now)
				run = append(run, j)
				h.dones = append(h.dones, unheld(b, s))
			case ledger.StepSettle:
				h.items[j] = t.settle(s, now)
				h.dones = append(h.dones, doneOf(b, h.items[j]), unheld(b, s))
			case ledger.StepCount:
				h.items[j].CountedRun = b.Run
				h.dones = append(h.dones, done{batch: b, outcome: s.Outcome, cost: s.Cost})
			default:
				continue
			}
			writes = append(writes, ledger.PackItemWrite{Index: j, Item: h.items[j], Was: s.Outcome})
		}
		h.timerAt, h.retryAt = timerAt, retryAt
		if len(writes) == 0 {
			nh := newHold(len(m.Items))
			nh.timerAt, nh.retryAt = timerAt, retryAt
			return nh, nil
		}
		if len(run) > 0 {
			if err := t.prepare(run); err != nil {
				return nil, err
			}
			h.lease = now.Add(w.Lease)
		}
		err = w.Store.WritePack(ctx, ledger.PackWrite{Ref: u.ref, Take: true, Attempt: p.Attempt, Run: b.Run, LeaseUntil: h.lease, Items: writes,
			InFlight: ledger.InFlight(h.items), Now: now, Token: ledger.NewTakeToken()})
		var pc *ledger.PackConflict
		switch {
		case errors.As(err, &pc) && try+1 < packTakeTries:
			known = &pc.Pack // the row as stored came back with the refusal
			continue
		case errors.Is(err, api.ErrConflict) && try+1 < packTakeTries:
			continue // another writer changed the row since it was read
		case errors.Is(err, api.ErrConflict):
			h = newHold(len(m.Items))
			h.held = now.Add(LiveLeaseRecheck)
			return h, nil
		case err != nil:
			return nil, err
		}
		return h, nil
	}
}

// write writes the items' endings in one WritePack fenced by the take's
// attempt, leaving the pack free (or, with effects, one item's ending and
// its staged writes in one transaction, the pack still held). Items may
// be none: the final write of a take whose items all ended with their
// staged writes only frees the pack.
func (u *packUnit) write(ctx context.Context, h *hold, items []ledger.PackItemWrite, effects ledger.StagedEffects) error {
	now := u.w.Clock.Now()
	if len(items) > 0 {
		now = items[0].Item.UpdatedAt
	}
	pw := ledger.PackWrite{Ref: u.ref, Attempt: h.attempt, Run: u.run, Items: items, Effects: effects, InFlight: -1, Now: now}
	if effects != nil {
		pw.LeaseUntil = h.lease
		return u.w.Store.WritePack(ctx, pw)
	}
	// The unit's final write: every item it took ends here (or ended on its
	// own with its staged writes, which commit left in h.items), so the
	// row's items are the held states with these endings.
	after := slices.Clone(h.items)
	for _, iw := range items {
		after[iw.Index] = iw.Item
	}
	pw.InFlight = ledger.InFlight(after)
	return u.w.Store.WritePack(ctx, pw)
}

// prepareInputs returns the prepare function of a take of m's items: the
// inline inputs as they are, the inputs by pointer read from the manifest,
// with the reason a bad row's line cannot run in invalid (its line always
// travels by pointer, see ledger.ItemMessage).
func (w *Worker) prepareInputs(ctx context.Context, m *unitMessage, inputs []json.RawMessage, invalid []string) func(run []int) error {
	return func(run []int) error {
		for _, j := range run {
			it := m.Items[j]
			if inputs[j] != nil {
				continue
			}
			if it.InputRef == nil {
				inputs[j] = it.Input
				continue
			}
			l, err := source.ReadManifestLine(ctx, w.Blobs, m.ManifestKey, it.Key, *it.InputRef)
			if err != nil {
				return fmt.Errorf("read input of %q: %w", it.Key, err)
			}
			inputs[j], invalid[j] = l.Input, l.Invalid
		}
		return nil
	}
}
