package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/credential"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// DefaultItemConcurrency is how many items run their pipeline at once in
// one invocation (Worker.ItemConcurrency).
const DefaultItemConcurrency = 10

// itemRun is one reserved item's attempt in runUnit.
type itemRun struct {
	j     int
	input json.RawMessage
	// invalid is why its manifest line cannot run (source.ManifestLine.Invalid:
	// a bad row under bad_rows fail): the attempt ends failed with it,
	// without calling the pipeline.
	invalid   string
	state     ledger.ItemState // its state once the attempt ended
	ending    ledger.Ending
	started   bool          // its attempt started (else its take is given back)
	took      time.Duration // how long its pipeline ran; 0 when it did not
	cost      pipeline.Cost // what its attempt reported spending (Result.Cost), whatever its ending
	committed bool          // written on its own, with its staged writes
	lost      bool          // its own write lost the unit's fence
	// unknown: its write with its staged writes failed, neither refused
	// nor fenced (commit): nothing of it written, its attempt ends
	// unknown — left in flight as taken, so that the next take finds it
	// interrupted (on_interrupt) — while the unit's other items are
	// recorded.
	unknown  bool
	timedOut bool // its call was given up without an answer (a *pipeline.TimeoutError)
	// interrupted: its attempt took over an ended lease or was cut off
	// at the deadline (outcome unknown).
	interrupted bool
	// lateLease: not started, its unit's rate lease went stale meanwhile,
	// or the downstream throttled an earlier call of its unit (a batch
	// with no rate, rate.go): given back as a throttled call is, with no
	// attempt.
	lateLease bool
	// halted: its call's credential was refused with its secret unchanged
	// and the batch's halt on it was put before the units waiting on that
	// call were let go (attempt): its unit write need not put it.
	halted bool
}

// runUnit is the one delivery loop of an item or pack message: take the
// unit, run each item the take reserved (at most ItemConcurrency at once
// in the invocation, one at a time under a concurrency slot, none started
// inside the
// deadline margin), conclude each attempt, and write the endings in one
// write fenced by the take. Items whose attempt failed transiently stay
// in flight with a retry scheduled and the message comes back after the
// longest of their delays; the others are answered from the unit on that
// delivery.
func (w *Worker) runUnit(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, d Delivery, inv *invocation) (bool, []done) {
	// Secret references are resolved before the take, so that AWS being
	// unavailable costs no attempt; a reference that cannot be resolved
	// fails the items once they are taken.
	headers, options, serr := resolveSecrets(ctx, w.Secrets, b.Headers, b.Options)
	if errors.Is(serr, ledger.ErrUnavailable) {
		return w.unavailable(ctx, log, d, m, &b, "resolve secrets", serr)
	}
	// A batch with a rate leases its calls before the take (pacer.Pacer.Unit);
	// a token budget's booking is settled once the unit ends, whichever
	// way (pacer.Pacer.Settle).
	defer w.pacing().Settle(ctx, log, &m.lease)
	m.lease.Bound(ctx, w.Clock.Now(), inv.margin, inv.usable)
	// A track's message comes back by design (its units wait in it), so
	// only an item or pack message received again is a redelivery here.
	if wait, err := w.pacing().Unit(ctx, log, b, m, len(m.Items), d.ReceiveCount > 1 && m.track == nil, &m.lease); err != nil {
		return w.unavailable(ctx, log, d, m, &b, "lease the rate", err)
	} else if wait > 0 {
		return w.rateWait(ctx, log, d, b, m, wait), nil
	}
	// A batch with max_concurrency takes a slot before the take, so that
	// waiting for one costs no attempt; the unit's items then run one at
	// a time, so the slots bound the items running.
	// A track's unit needs no slot: the batch's tracks are its schedule.
	st, ok, err := w.acquireSlot(ctx, b, m)
	switch {
	case err != nil:
		return w.unavailable(ctx, log, d, m, &b, "take a concurrency slot", err)
	case st.handed:
		log.InfoContext(ctx, "woken unit handed to a track of its run; acknowledged")
		return true, nil
	case !st.hopAt.IsZero():
		return w.sendTimer(ctx, log, b, m, st.hopAt) == nil, nil
	case !ok:
		return w.slotsTaken(ctx, log, d, m), nil
	}
	defer w.freeSlot(ctx, log, b, st)
	inputs, invalid := make([]json.RawMessage, len(m.Items)), make([]string, len(m.Items))
	u := w.unitOf(b, m)
	h, err := u.take(ctx, taking{b: b, msg: m, mode: ledger.ModeRun, prepare: w.prepareInputs(ctx, m, inputs, invalid), redelivered: d.ReceiveCount > 1})
	switch {
	case err != nil:
		return w.unavailable(ctx, log, d, m, &b, "take", err)
	case !h.held.IsZero():
		// Another delivery holds it (or its lease ended this very
		// millisecond). Never acknowledge a unit in flight: come back when
		// its holder has likely recorded the outcome (5 s, doubling per
		// receive) and at the latest when its lease ends.
		log.InfoContext(ctx, "under another delivery's lease; retried later")
		if m.track != nil {
			return m.track.park(m, h.held.Sub(w.Clock.Now())+time.Second, 0), nil
		}
		w.heldOff(ctx, log, d, h)
		return false, nil
	}
	var runs []*itemRun
	for j, s := range h.steps {
		if s == ledger.StepRun {
			runs = append(runs, &itemRun{j: j, input: inputs[j], invalid: invalid[j]})
		}
	}
	if len(runs) == 0 {
		return w.nothingToRun(ctx, log, b, m, d, h), h.dones
	}
	if m.Packed {
		log = log.With("pack_attempt", h.attempt)
	}
	subject := ledger.SecretSubject(b.Headers, b.Options)
	if serr == nil {
		if hs, os, ok := w.liftedSecrets(ctx, log, b, h, subject); ok {
			headers, options = hs, os
		}
	}
	var refusal error = serr
	p, registered := w.Pipelines.Lookup(b.Pipeline)
	if !registered && refusal == nil {
		refusal = fmt.Errorf("pipeline %q is not registered in this item function", b.Pipeline)
	}
	sem := make(chan struct{}, len(runs)) // the unit's own bound: 1 under a slot or on a track
	if st.slot >= 0 || m.track != nil {
		sem = make(chan struct{}, 1)
	}
	h.probe = m.probe
	lead := throttledLead(b, m, h, runs)
	if lead > 0 {
		runs[0], runs[lead] = runs[lead], runs[0]
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		if m.probe && i > 0 {
			continue // a probe runs one item; the others are given back
		}
		if i == 1 && lead >= 0 {
			// The throttled item has had its answer: the others start now
			// (given back below if it was throttled again), from its end,
			// not late for the lease it held them to.
			wg.Wait()
			if m.lease.Paced() {
				m.lease.Leased = w.Clock.Now()
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			// A take that ends before its call whatever happens (an
			// interrupted takeover to quarantine, or past max attempts) is
			// concluded, never given back: a give-back records a retry
			// and the next take would no longer see the interruption.
			keep := endsUncalled(b, h, r.j)
			if !keep && !w.pacing().WaitCall(ctx, &m.lease, i, inv.margin) {
				return // not started: given back below
			}
			inv.items <- struct{}{}
			defer func() { <-inv.items }()
			if dl, has := ctx.Deadline(); has && time.Until(dl) < inv.margin && !keep {
				return // not started: given back below
			}
			if r.lateLease = w.lateForPlace(ctx, log, b, m, inv, i, keep); r.lateLease {
				return // not started: given back below
			}
			late, first := w.heldBack(ctx, b, m, inv, i, keep)
			defer w.pacing().Release(first) // taken and not called: the next goes
			if r.lateLease = late; late {
				return // not started: given back below
			}
			// The row as it is now, after the item's waits (the gate's,
			// in attempt, reads it again): a stop cancels the call, a pause
			// gives the item back, except a paused batch's probe.
			cur := w.beforeCall(ctx, inv, b)
			if cur.Stop == "" && cur.Pause != nil && !m.probe && !keep {
				return // not started: given back below
			}
			r.started = true
			halted := ""
			if h, on := ledger.HaltOn(cur, subject); on {
				halted = h
			}
			actx, traced := w.traceAttempt(ctx, b, h.items[r.j], d)
			recheck := func() api.Status { return w.beforeCall(ctx, inv, b).Stop }
			w.attempt(actx, itemLog(log, b, m, h.items[r.j]), b, call{stop: cur.Stop, halted: halted, subject: subject, throttled: &m.throttled, lease: &m.lease, recheck: recheck},
				u, h, r, p, refusal, headers, options, inv.margin)
			traced(r)
			w.afterCall(b.ID, r.took)
		}()
	}
	wg.Wait()
	m.tokensRan(runs)
	return w.endUnit(ctx, log, b, m, u, h, d, runs)
}

// nothingToRun ends a delivery whose take left no item to run, saying
// whether it may be acknowledged: its unit's timer sent if a suspended
// item wants one; back when the earliest retry the take left is due
// (hold.retryAt: it came early — a duplicate, or the message sent again
// for a sibling's wake or timer — and is never acknowledged before);
// else every item is recorded. A unit that wants both sends one
// message: its timer, due no later than the retry, which the timer's
// delivery then runs (a delivery kept for the retry beside a new timer
// would fork the timer's chain at each hop).
func (w *Worker) nothingToRun(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, d Delivery, h *hold) bool {
	at := h.timerAt
	if !at.IsZero() && !h.retryAt.IsZero() && h.retryAt.Before(at) {
		at = h.retryAt
	}
	if err := w.sendTimer(ctx, log, b, m, at); err != nil {
		return false
	}
	if h.retryAt.IsZero() || !h.timerAt.IsZero() {
		log.InfoContext(ctx, "already recorded; acknowledged")
		return true
	}
	wait := h.retryAt.Sub(w.Clock.Now())
	log.InfoContext(ctx, "items whose retry is not due; back then", "retry_in_ms", wait.Milliseconds())
	if m.track != nil {
		return m.track.park(m, wait, 0)
	}
	if err := w.Queue.Delay(ctx, d.ReceiptHandle, wait); err != nil {
		log.WarnContext(ctx, "delay message", "error", err.Error())
	}
	return false
}

// lateForPlace reports whether the i-th item of m's unit gives its call
// back before it starts (lateLease) because it came late for its place
// in its unit's lease (a slow take, a loaded function: pacer.Lease.Late)
// and could not be leased again from now (pacer.Pacer.Relet: the key's
// row allows no start within pace.LeaseSleep, its Until or its
// deadline's margin) — never when its take is kept (keep).
func (w *Worker) lateForPlace(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, inv *invocation, i int, keep bool) bool {
	return !keep && m.lease.Late(i, w.Clock.Now()) && !w.pacing().Relet(ctx, log, b, &m.lease, i, inv.margin)
}

// heldBack reports whether the i-th item of m's unit gives its call back
// before it starts (lateLease): after a throttled call of its unit, or
// held back by the answer to its process's first call of the downstream
// (pacer.Pacer.First) — never
// when its take is kept (keep) — and the claim of that first call it
// took, which its caller releases once the attempt ended (a no-op when
// the call was made and answered).
func (w *Worker) heldBack(ctx context.Context, b ledger.Batch, m *unitMessage, inv *invocation, i int, keep bool) (bool, pacer.FirstClaim) {
	if keep {
		return false, pacer.FirstClaim{}
	}
	if m.throttled.Load() {
		return true, pacer.FirstClaim{}
	}
	return w.pacing().First(ctx, b, &m.lease, inv.margin)
}

// throttledLead is the index in runs of the item a unit of a batch with
// no rate runs first and alone: one whose last attempt was throttled
// (ItemState.ThrottledSince), so that a downstream still refusing
// answers one call of the unit, not all of them at once (the others are
// then given back, as after any throttled call), and the same item
// calls again first each time: a refused item's next call comes at its
// unit's (with its place kept, at the key's hold's end:
// pacer.Lease.KeepPlace). −1: none, or a unit of one item, a paused
// batch's probe (one item already), or a batch with a rate (its calls
// start at their leases).
func throttledLead(b ledger.Batch, m *unitMessage, h *hold, runs []*itemRun) int {
	if b.Rate != nil || m.probe || len(runs) < 2 {
		return -1
	}
	for i, r := range runs {
		if !h.items[r.j].ThrottledSince.IsZero() {
			return i
		}
	}
	return -1
}

// call is what a call starts under, from the batch row as read just
// before it (beforeCall): the run's stop, the halt standing on the
// credential the items act under, and that credential's subject
// (ledger.SecretSubject; "" when it comes from no secret reference).
type call struct {
	stop            api.Status
	halted, subject string
	throttled       *atomic.Bool // the unit's downstream throttled one of its calls
	lease           *pacer.Lease // the unit's pacing: its calls start at a lease (Paced; pacer.Pacer.Observe)
	// recheck reads the batch row's stop again (stopcheck: the row as it
	// is now), for a call that waited after stop was read; nil: none.
	recheck func() api.Status
}

// itemLog is log for item s of m's unit: its key (a pack's; an item
// message's logger has it), run id and attempt.
func itemLog(log *slog.Logger, b ledger.Batch, m *unitMessage, s ledger.ItemState) *slog.Logger {
	if m.Packed {
		log = log.With("key", s.Key)
	}
	return log.With("run_id", ledger.RunIDOf(b.ID, s.Key, s.Revision), "attempt", s.Attempt)
}

// recorded counts and logs the items whose endings the unit's write
// stored (recorded, by position): a done and a metric for each not
// committed on its own, and its outcome line (okLines).
func (w *Worker) recorded(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, runs []*itemRun, recorded map[int]*itemRun, dns []done) []done {
	var oks int
	var longest time.Duration
	for _, r := range runs {
		if recorded[r.j] == nil {
			continue
		}
		o := r.state.Outcome
		if !r.committed {
			dns = append(dns, ranDone(b, r))
			w.Metrics.ItemsRecorded(b.Pipeline, string(o), 1, b.ID, b.Run)
		}
		ilog := itemLog(log, b, m, r.state).With("duration_ms", r.took.Milliseconds())
		switch {
		case o != api.OutcomeSucceeded:
			ilog.WarnContext(ctx, "item recorded", "outcome", string(o), "reason", string(r.state.Reason), "error", r.state.Error)
		default:
			ilog.DebugContext(ctx, "item recorded", "outcome", string(o))
			oks, longest = oks+1, max(longest, r.took)
		}
	}
	sums := m.oks
	if sums == nil { // a delivery outside an invocation's: its own line
		sums = &okLines{}
		defer sums.log(ctx, w.Log)
	}
	sums.add(b, oks, longest)
	return dns
}

// okLines is the INFO lines of the items that succeeded in an
// invocation: one per batch run ("items recorded": how many, from how
// many item and pack messages' deliveries, the longest call in ms),
// written once the invocation's deliveries are done. Each such item's
// own "item recorded" line is DEBUG: CloudWatch Logs bills every byte
// ingested ($0.50 per GB in us-east-1, "Amazon CloudWatch Pricing"); a
// line per item was half of a clean run's cost at 10 items per message
// and 8 % at one, a line per pack ≈ 8 % at 10 (docs/design/cost.md,
// "CloudWatch Logs"), and the ledger keeps every item's outcome
// (`bulkrun items`, the results). An item that did not succeed keeps
// its WARN line.
type okLines struct {
	mu   sync.Mutex
	runs []okLine // few: an invocation's messages are of a few batches
}

type okLine struct {
	batchID         string
	run             int
	items, messages int
	longest         time.Duration
}

// add counts the succeeded items of one delivery of b's run.
func (o *okLines) add(b ledger.Batch, items int, longest time.Duration) {
	if items == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	i := slices.IndexFunc(o.runs, func(l okLine) bool { return l.batchID == b.ID && l.run == b.Run })
	if i < 0 {
		o.runs = append(o.runs, okLine{batchID: b.ID, run: b.Run})
		i = len(o.runs) - 1
	}
	l := &o.runs[i]
	l.items, l.messages, l.longest = l.items+items, l.messages+1, max(l.longest, longest)
}

// log writes the lines and forgets them.
func (o *okLines) log(ctx context.Context, log *slog.Logger) {
	o.mu.Lock()
	runs := o.runs
	o.runs = nil
	o.mu.Unlock()
	for _, l := range runs {
		log.InfoContext(ctx, "items recorded", "batch_id", l.batchID, "run", l.run, "outcome", string(api.OutcomeSucceeded),
			"items", l.items, "messages", l.messages, "duration_ms", l.longest.Milliseconds())
	}
}

// endsUncalled reports whether item j's take ends before its call
// whatever the batch's state (ledger.Conclude): an interrupted takeover
// under on_interrupt quarantine, or a take past max attempts.
func endsUncalled(b ledger.Batch, h *hold, j int) bool {
	return h.interrupted[j] && b.OnInterrupt == api.InterruptQuarantine || h.items[j].RunAttempts() > b.MaxAttempts
}

// storedDones are the dones of runs' attempts that a unit's write stored
// without ending their items: the retries, for the pause and their
// attempts' spend; the interrupted and timed-out attempts, for the live
// view.
func storedDones(b ledger.Batch, runs []*itemRun) []done {
	var dns []done
	for _, r := range runs {
		if r.started && !r.lost && r.ending.Retry() {
			dns = append(dns, ranDone(b, r))
		}
		if r.started && !r.lost && r.interrupted {
			dns = append(dns, done{batch: b, interrupted: true})
		}
		if r.started && !r.lost && r.timedOut {
			dns = append(dns, done{batch: b, timedOut: true})
		}
	}
	return dns
}

// giveBack is the write of item run r's take given back unstarted
// (inside the deadline margin, paused, its lease stale or its downstream
// throttling), as if this delivery had never taken it, and the dones it
// counts. A pack's item gets its state back whole; an item row keeps the
// take's attempt (its fence never goes back), which is not counted
// (FirstAttempt moves past it, as a throttled ending's does:
// ledger.Ended), so that a take given back uses no attempt. A woken pack
// item goes back to held (woken still): the take counted it out of the
// held items (unheld) and its next take counts it out again, so it is
// counted back in.
func (w *Worker) giveBack(b ledger.Batch, m *unitMessage, h *hold, r *itemRun) (ledger.PackItemWrite, []done) {
	give := h.was[r.j]
	give.UpdatedAt = w.Clock.Now()
	if !m.Packed {
		give.FirstAttempt = max(give.FirstAttempt, 1) + 1
	}
	var dns []done
	if give.Run == b.Run && give.Outcome.Held() {
		dns = append(dns, done{batch: b, heldAs: give.Outcome, heldBy: 1})
	}
	return ledger.PackItemWrite{Index: r.j, Item: give, Was: api.OutcomeInFlight}, dns
}

// endUnit writes the endings of the unit's attempts under its fence and
// says whether the message may be acknowledged.
func (w *Worker) endUnit(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, u unit, h *hold, d Delivery, runs []*itemRun) (bool, []done) {
	dns := h.dones
	if slices.ContainsFunc(runs, func(r *itemRun) bool { return r.lost }) {
		log.WarnContext(ctx, "fenced by a later take; its holder records the outcomes")
		return false, dns
	}
	if slices.ContainsFunc(runs, heldEnding) {
		// A held item has no message on the queue: its unit's message is
		// kept for its wake before the item is recorded held. Not kept,
		// nothing would wake it: the items it would hold are given back,
		// to run again, and the others recorded.
		err := w.persist(ctx, log, "keep the held unit's message", func() error { return w.keepMessage(ctx, b, m) })
		if err != nil {
			log.ErrorContext(ctx, "keep the held unit's message; the items it would hold are given back, to run again", "error", pipeline.ErrorText(err))
			for _, r := range runs {
				if heldEnding(r) {
					r.started = false
				}
			}
		}
	}
	var writes []ledger.PackItemWrite
	var wait time.Duration
	retries, throttled := 0, false
	for _, r := range runs {
		switch {
		case r.unknown:
			retries++ // the message comes back for it
		case r.committed:
			dns = append(dns, ranDone(b, r))
			w.Metrics.ItemsRecorded(b.Pipeline, string(r.state.Outcome), 1, b.ID, b.Run)
		case !r.started:
			give, back := w.giveBack(b, m, h, r)
			writes, dns = append(writes, give), append(dns, back...)
			retries++
			throttled = throttled || r.lateLease
		default:
			writes = append(writes, ledger.PackItemWrite{Index: r.j, Item: r.state, Was: api.OutcomeInFlight})
			if r.ending.Retry() {
				retries++
				wait = max(wait, r.ending.Wait)
				throttled = throttled || r.ending.Throttled || r.ending.Paused || r.ending.Rotated
			}
		}
	}
	if !h.retryAt.IsZero() {
		// Items the take left for their retry's time (ItemState.RetryWaits)
		// come back with the message: it is not acknowledged before.
		retries++
		wait = max(wait, h.retryAt.Sub(w.Clock.Now()))
	}
	if len(writes) > 0 && m.Packed {
		err := w.persist(ctx, log, "bound the pack row", func() error {
			moved, cut, err := w.boundPack(ctx, b, h.items, writes)
			if moved+cut > 0 {
				log.WarnContext(ctx, "pack row kept within its budget", "outputs_to_s3", moved, "errors_cut", cut, "budget_bytes", ledger.PackRowBudget)
			}
			return err
		})
		if err != nil {
			log.ErrorContext(ctx, "record outcome", "error", pipeline.ErrorText(err))
			return false, dns
		}
	}
	committed := slices.ContainsFunc(runs, func(r *itemRun) bool { return r.committed })
	if len(writes) > 0 || m.Packed && committed {
		// A pack whose items all ended on their own with their staged
		// writes still gets its final write (no item in it): the one that
		// frees its lease, so that a duplicate or the next run is not held
		// off until the lease ends.
		err := w.persist(ctx, log, "record outcome", func() error { return u.write(ctx, h, writes, nil) })
		if errors.Is(err, api.ErrConflict) {
			// A later take holds the unit: its holder records the outcomes.
			// Let the message come back; it is acknowledged once they are.
			log.WarnContext(ctx, "outcome fenced by a later attempt")
			return false, dns
		}
		if err != nil {
			log.ErrorContext(ctx, "record outcome", "error", pipeline.ErrorText(err))
			return false, dns
		}
	}
	recorded := map[int]*itemRun{}
	for _, r := range runs {
		if r.committed || !r.lost && r.started && r.state.Outcome.Terminal() {
			recorded[r.j] = r
		}
	}
	dns = w.recorded(ctx, log, b, m, runs, recorded, dns)
	dns = w.heldEnded(ctx, log, b, m, runs, dns)
	// What the write stored is counted whatever comes after it (a timer
	// that cannot be sent).
	dns = append(dns, storedDones(b, runs)...)
	if err := w.sendTimer(ctx, log, b, m, suspendTimer(b, runs, h.timerAt, w.Clock.Now())); err != nil {
		return false, dns
	}
	if retries == 0 {
		return true, dns
	}
	if wait <= 0 {
		wait = time.Second // items not started: back soon
	}
	// The live view's items waiting for a retry, due when the message
	// comes back (a message sent again waits at most api.MaxResendDelay).
	due := w.Clock.Now().Add(wait)
	if throttled && wait <= api.MaxResendDelay {
		due = w.Clock.Now().Add(min(wait, api.MaxResendDelay))
	}
	for _, r := range runs {
		if r.started && !r.lost && !r.committed && r.ending.Retry() {
			dns = append(dns, waitDone(b, r.ending, due))
		}
	}
	keepPlace := func() {
		if m.lease.KeepPlace(m, w.Clock.Now().Add(wait)) {
			log.InfoContext(ctx, "throttled; the unit keeps its place on its downstream's pace", "place", m.LeasePos())
		}
	}
	if m.track != nil {
		// A track's unit waits in its track, whatever the wait.
		if throttled {
			keepPlace()
		}
		log.WarnContext(ctx, "items to retry; waiting in the track", "items", retries, "retry_in_ms", wait.Milliseconds())
		return m.track.park(m, wait, 0), dns
	}
	if throttled && wait <= api.MaxResendDelay {
		// A throttled attempt (or a paused batch's probe) counts no
		// attempt, so its wait must not count a receive either
		// (maxReceiveCount would dead-letter an item throttled often
		// enough): the message is sent again as a new one, as for AWS
		// unavailability, and this delivery acknowledged. (The message
		// delayed instead, when it cannot be sent, comes back as itself:
		// redelivered, its place not used.)
		keepPlace()
		err := w.resend(ctx, m, wait)
		if err == nil {
			w.Metrics.Resent(b.Pipeline, "throttled", b.ID, b.Run)
			log.WarnContext(ctx, "items to retry; throttled, message sent again", "items", retries, "retry_in_ms", wait.Milliseconds(), "requeued", *m.requeued)
			return true, dns
		}
		log.WarnContext(ctx, "send the message again", "error", err.Error())
	}
	if err := w.Queue.Delay(ctx, d.ReceiptHandle, wait); err != nil {
		log.WarnContext(ctx, "delay message", "error", err.Error())
	}
	log.WarnContext(ctx, "items to retry", "items", retries, "retry_in_ms", wait.Milliseconds())
	return false, dns
}

// waitDone is the live view's count of an item whose attempt ended with
// e, waiting for its retry due then: after a throttling, or a transient
// failure of its class ("transient" when it has none).
func waitDone(b ledger.Batch, e ledger.Ending, due time.Time) done {
	d := done{batch: b, retryAt: due, throttled: e.Throttled}
	if !e.Throttled {
		d.waitClass, d.waitText = e.Class, e.Error
		if d.waitClass == "" {
			d.waitClass = "transient"
		}
	}
	return d
}

// resend sends m again as a new message delivered after wait (at most
// api.MaxResendDelay), its Requeued count raised.
func (w *Worker) resend(ctx context.Context, m *unitMessage, wait time.Duration) error {
	*m.requeued++
	body, err := m.body()
	if err != nil {
		return err
	}
	return w.Queue.Requeue(ctx, body, min(wait, api.MaxResendDelay))
}

// attempt runs one reserved item: Conclude before its pipeline runs (an
// attempt that must not run ends there), the pipeline under the lease's
// deadline, its output stored, Conclude again; a success with staged
// writes is committed on its own (the unit's write with the effects).
// It leaves the item's ending in r.
func (w *Worker) attempt(ctx context.Context, log *slog.Logger, b ledger.Batch, c call, u unit, h *hold, r *itemRun,
	p pipeline.Pipeline, refusal error, headers map[string]string, options json.RawMessage, margin time.Duration) {
	s, was := h.items[r.j], h.was[r.j]
	if r.invalid != "" && refusal == nil {
		refusal = errors.New(r.invalid) // a bad row: failed, never run
	}
	a := ledger.Attempt{Number: s.Attempt, RunAttempts: s.RunAttempts(), MaxAttempts: b.MaxAttempts,
		Interrupted: h.interrupted[r.j], OnInterrupt: b.OnInterrupt, Stop: c.stop, Refusal: refusal, Halted: c.halted,
		Retry: ledger.RetryPolicyOf(b, w.retryDefault()), ThrottledSince: s.ThrottledSince, Paced: c.lease.Paced() && b.Rate == nil, Now: w.Clock.Now()}
	if h.probe && b.Pause != nil {
		a.Paused, a.PauseWait = true, b.Pause.Wait(a.Now)
	}
	s.Cost = nil // the cost of this attempt
	r.interrupted = a.Interrupted
	if e := ledger.Conclude(a); e.Outcome != "" {
		r.state, r.ending = ledger.Ended(s, e, w.Clock.Now()), e
		return
	}
	runCtx, cancel := w.runContext(ctx, h.lease, margin)
	pipeCtx, seal := runCtx, func() ledger.StagedEffects { return nil }
	if w.Staging != nil {
		pipeCtx, seal = w.Staging(runCtx)
	}
	start := w.Clock.Now()
	var allotted time.Duration // how long the call may run before it is cut off
	if dl, ok := runCtx.Deadline(); ok {
		allotted = time.Until(dl)
	}
	probe, refused, stop := w.passGate(ctx, b, h, c)
	defer probe.Done(credential.Unknown, time.Time{}) // a path that never called: the next unit probes
	if refused || stop != "" {
		// The call this one waited for was refused under the same
		// credential: withheld without a call, as under the halt it put.
		// Or a stop was recorded while it waited: cancelled, as one
		// recorded before its turn.
		if a.Stop = stop; refused {
			a.Halted = c.subject
		}
		e := ledger.Conclude(a)
		cancel()
		seal()
		r.state, r.ending = ledger.Ended(s, e, w.Clock.Now()), e
		return
	}
	signal, p := w.signalOf(ctx, b, s, p)
	callCtx, called := w.Traces.StartCall(pipeCtx, b.Pipeline)
	res, rr, perr := w.runPipeline(callCtx, log, p, b, pipeline.Request{
		BatchID: b.ID, Key: s.Key, RunID: ledger.RunIDOf(b.ID, s.Key, s.Revision), Attempt: s.Attempt, Input: r.input,
		Headers: headers, Options: options, Outputs: ledger.BatchOutputs(w.Blobs, b.ID), Signal: signal,
	})
	called(perr)
	if rr == credential.RereadUnchanged && pipeline.IsCredentialRejected(perr) {
		// Refused, its secret unchanged: the item is withheld under a halt
		// on the credential. The halt goes on the batch before the units
		// waiting on this call are let go to be withheld without a call
		// under it (probe.Done): were it put after this unit's write, a
		// unit of the same invocation could record its items withheld,
		// read the batch with no halt yet, and wake them as if a caller
		// had lifted it (wakeIfMoved).
		r.halted = w.halt(ctx, log, b, c.subject, ledger.WithheldText(perr))
	}
	verdict := credential.VerdictOf(perr, rr)
	if verdict == credential.Refused && !r.halted {
		// No halt to withhold the waiting units under (its write failed;
		// this unit's write tries again): the next one calls itself.
		verdict = credential.Unknown
	}
	probe.Done(verdict, w.Clock.Now())
	if w.pacing().Observe(ctx, log, b, start, c.lease, perr) && c.throttled != nil {
		c.throttled.Store(true) // the unit's calls not yet started wait
	}
	// Staging ends with Run, whatever its result: a write staged later (by
	// a goroutine the pipeline left behind) is refused, never committed.
	staged := seal()
	// Cut off at the deadline margin (or the lease's end) while it ran: the
	// call's outcome is unknown. Read before cancel, which would set it too.
	cutOff := errors.Is(runCtx.Err(), context.DeadlineExceeded)
	cancel()
	if _, timed := pipeline.TimeoutOf(perr); cutOff && allotted > 0 && !timed && perr != nil && pipeline.Classify(perr) == pipeline.ClassTransient {
		// A call cut off while it ran may still run where it went: its
		// retry waits as for a call that timed out after that long.
		perr = pipeline.TimedOut(perr, allotted)
	}
	_, r.timedOut = pipeline.TimeoutOf(perr)
	r.took = w.Clock.Now().Sub(start)
	w.Metrics.ItemDuration(b.Pipeline, r.took, b.ID, b.Run)
	// What this run's attempts spent: the earlier ones' (the fence makes
	// them current) and this one's.
	spent := pipeline.Cost(nil)
	if was.SpentRun == b.Run && was.Run == b.Run {
		spent = was.Spent
	}
	if sum := spent.Plus(res.Cost); len(sum) > 0 {
		// Each attempt's record is bounded; their sum may name more.
		s.Spent, _ = pipeline.BoundCost(sum)
		s.SpentRun = b.Run
	}
	s.Cost, r.cost = res.Cost, res.Cost
	a.Ran, a.Err, a.CutOff, a.Rotated = true, perr, cutOff && perr != nil, rr == credential.RereadRotated
	if rr == credential.RereadUnchanged {
		a.Withhold = c.subject
	}
	r.interrupted = r.interrupted || a.CutOff
	if perr == nil {
		err := w.persist(ctx, log, "store output", func() (err error) {
			s.Output, s.OutputRef, err = pipeline.StoreOutput(ctx, w.Blobs, b.ID, ledger.RunIDOf(b.ID, s.Key, s.Revision), res.Output)
			return err
		})
		// The S3 write failed: transient, and throttled (no attempt) when
		// S3 slowed it down or did not answer past the tries.
		a.Err = ledger.ThrottledFault(err)
	}
	if f, ok := ledger.PauseFault(a.Err); ok && pipeline.Classify(a.Err) == pipeline.ClassTransient {
		// An AWS service the attempt wrote to refuses every call until
		// someone acts on its side (its KMS key): not the item's fault.
		// The batch pauses, and the attempt waits as a throttled one,
		// counting no attempt.
		w.pauseForFault(ctx, log, b, a.Err)
		a.Err = ledger.Throttled(f.Service, f.Code, a.Err)
	}
	a.Now = w.Clock.Now()
	e := ledger.Conclude(a)
	if e.Outcome == api.OutcomeSucceeded && staged != nil && staged.Len() > 0 {
		e = w.commit(ctx, log, b, u, h, r, ledger.Ended(s, e, w.Clock.Now()), staged, a)
		if r.committed || r.lost {
			return
		}
	}
	if x, ok := held.Exhaust(b.Ceilings, s, e, b.Run, a.Now); ok {
		e = x // its run's totals reached a per-item ceiling: held, not retried
	}
	r.state, r.ending = ledger.Ended(s, e, w.Clock.Now()), e
	switch {
	case e.Outcome.Held():
		// Logged with the unit's write (item held); an exhausted ending
		// keeps its retry's marks (held.Exhaust) but is not retried.
	case e.Paused:
		log.WarnContext(ctx, "probe failed; the batch stays paused, retried without using an attempt", "error", e.Error, "retry_in_ms", e.Wait.Milliseconds())
	case e.Rotated:
		log.InfoContext(ctx, "credential rejected and rotated; retried with the new value without using an attempt", "retry_in_ms", e.Wait.Milliseconds())
	case e.Throttled:
		log.WarnContext(ctx, "throttled; retried without using an attempt", "error", e.Error, "retry_in_ms", e.Wait.Milliseconds(),
			"throttled_ms", a.Now.Sub(e.ThrottledSince).Milliseconds())
		w.Metrics.Retry(b.Pipeline, b.ID, b.Run)
	case e.Retry():
		log.WarnContext(ctx, "transient error; retried", "error", e.Error, "retry_in_ms", e.Wait.Milliseconds())
		w.Metrics.Retry(b.Pipeline, b.ID, b.Run)
	}
}

// commit writes a succeeded item with the writes its attempt staged, on
// its own, in one transaction under the unit's fence. In a pack row it
// first keeps the row within ledger.PackRowBudget as the unit's final
// write does (boundPack: the item's output to S3 when the row, with the
// items committed before it, would pass the budget); a pack's commits
// are made one at a time, so each sees the others'. When DynamoDB
// refuses the writes as written the item fails permanently without them;
// when a staged condition does not hold the attempt ends as a transient
// failure and the item runs again: the ending returned.
func (w *Worker) commit(ctx context.Context, log *slog.Logger, b ledger.Batch, u unit, h *hold, r *itemRun, n ledger.ItemState, staged ledger.StagedEffects, a ledger.Attempt) ledger.Ending {
	h.commits.Lock()
	defer h.commits.Unlock()
	write := []ledger.PackItemWrite{{Index: r.j, Item: n, Was: api.OutcomeInFlight}}
	err := w.persist(ctx, log, "record outcome with staged writes", func() error {
		if _, packed := u.(*packUnit); packed {
			moved, _, err := w.boundPack(ctx, b, h.items, write)
			if moved > 0 {
				log.WarnContext(ctx, "pack row kept within its budget", "outputs_to_s3", moved, "budget_bytes", ledger.PackRowBudget)
			}
			if err != nil {
				return err
			}
		}
		return u.write(ctx, h, write, staged)
	})
	var ee *ledger.EffectsError
	switch {
	case err == nil:
		n = write[0].Item
		r.state, r.committed = n, true
		h.items[r.j] = n // the unit's final write counts it ended
		return ledger.Ending{Outcome: api.OutcomeSucceeded}
	case errors.Is(err, api.ErrConflict):
		r.lost = true
		return ledger.Ending{}
	case !errors.As(err, &ee):
		// Not written, and the unit's write would record it without its
		// staged writes: its attempt ends unknown. The unit is still
		// this delivery's (only a conflict says a later take holds it):
		// its other items are recorded.
		log.ErrorContext(ctx, "record outcome with staged writes; its attempt ends unknown, the unit's other items are recorded", "error", pipeline.ErrorText(err))
		r.unknown = true
		return ledger.Ending{}
	}
	a.Err, a.CutOff = err, false
	if ee.Permanent {
		a.Err = pipeline.Permanent(err)
	} else {
		log.WarnContext(ctx, "a staged write's condition did not hold; nothing applied", "error", pipeline.ErrorText(err))
	}
	return ledger.Conclude(a)
}

// retryDefault is the retry policy of a batch whose row carries none.
func (w *Worker) retryDefault() api.RetryPolicy {
	if w.Retry != nil {
		return *w.Retry
	}
	return api.DefaultRetryPolicy
}

// settleUnit settles the unit's items not yet terminal in the run with
// outcome o (a stopped run: cancelled; a dead-lettered message: failed)
// and counts the ones answered from an earlier run.
func (w *Worker) settleUnit(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, d Delivery, o api.Outcome, reason api.Reason, text string) (bool, []done) {
	settle := func(s ledger.ItemState, now time.Time) ledger.ItemState {
		return ledger.Settled(s, b.Run, o, reason, text, now)
	}
	h, err := w.unitOf(b, m).take(ctx, taking{b: b, msg: m, mode: ledger.ModeSettle, settle: settle})
	switch {
	case err != nil:
		return w.unavailable(ctx, log, d, m, &b, "settle", err)
	case !h.held.IsZero() && !d.DeadLetter:
		// Started before the stop: its holder records the outcomes; if the
		// holder died, this message takes the unit once the lease ends.
		if m.track != nil {
			return m.track.park(m, h.held.Sub(w.Clock.Now())+time.Second, 0), nil
		}
		w.heldOff(ctx, log, d, h)
		return false, nil
	case h.retryHeld:
		// A dead letter of an item row waiting for its retry: no holder
		// decides; it settles when the retry is due (its lease ends
		// then), brought back once, not at each of the dead-letter
		// queue's visibility timeouts.
		w.heldOff(ctx, log, d, h)
		return false, nil
	case !h.held.IsZero():
		return false, nil // under a live lease: its holder decides
	}
	if n := countOutcome(h.dones, o); n > 0 {
		w.Metrics.ItemsRecorded(b.Pipeline, string(o), n, b.ID, b.Run)
		log.WarnContext(ctx, "items settled", "outcome", string(o), "reason", string(reason), "items", n)
	}
	return true, h.dones
}

// settleUnstarted settles as failed, with reason and text, the items of
// the unit at first (keys in order: an item row for one item per message,
// else the pack at first) that were never reserved in the run: their
// message was refused, or their chunk's fan-out was dead-lettered. It
// returns how many items it settled.
func (w *Worker) settleUnstarted(ctx context.Context, b ledger.Batch, chunk source.Chunk, first int64, keys []string, reason api.Reason, text string) (int64, error) {
	m := &unitMessage{BatchID: b.ID, Run: b.Run, ChunkFirst: chunk.FirstIndex, ChunkItems: chunk.Count, Packed: b.Packed(), PackFirst: first}
	for _, k := range keys {
		m.Items = append(m.Items, ledger.PackedItem{Key: k})
	}
	settle := func(s ledger.ItemState, now time.Time) ledger.ItemState {
		return ledger.Settled(s, b.Run, api.OutcomeFailed, reason, text, now)
	}
	h, err := w.unitOf(b, m).take(ctx, taking{b: b, msg: m, mode: ledger.ModeUnstarted, settle: settle})
	if err != nil {
		return 0, err
	}
	return countOutcome(h.dones, api.OutcomeFailed), nil
}
