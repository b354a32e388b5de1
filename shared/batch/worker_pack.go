package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// DefaultPackConcurrency is how many items of one pack message run their
// pipeline at once in an invocation (Worker.PackConcurrency).
const DefaultPackConcurrency = 10

// packTakeTries bounds the reads and takes of one pack per delivery when
// another writer keeps changing it.
const packTakeTries = 3

// Validate reports a malformed pack message (a poison message is
// acknowledged and logged).
func (m PackMessage) Validate() error {
	switch {
	case m.Kind != KindPack:
		return fmt.Errorf("pack message: kind %q", m.Kind)
	case !ValidBatchID(m.BatchID):
		return fmt.Errorf("pack message: bad batch_id %q", m.BatchID)
	case m.Run < 1:
		return fmt.Errorf("pack message: bad run %d", m.Run)
	case len(m.Items) == 0 || len(m.Items) > MaxItemsPerMessage:
		return fmt.Errorf("pack message: %d items, want 1–%d", len(m.Items), MaxItemsPerMessage)
	case m.PackFirst < m.ChunkFirst || m.ChunkItems > 0 && m.PackFirst+int64(len(m.Items)) > m.ChunkFirst+m.ChunkItems:
		return fmt.Errorf("pack message: items %d+%d outside chunk %d+%d", m.PackFirst, len(m.Items), m.ChunkFirst, m.ChunkItems)
	}
	for j, it := range m.Items {
		if r := CheckKey(it.Key); r != "" {
			return fmt.Errorf("pack message: item %d: %s", j, r)
		}
		if it.Input == nil && it.InputRef == nil {
			return fmt.Errorf("pack message: item %q has neither input nor input_ref", it.Key)
		}
		if it.InputRef != nil && m.ManifestKey == "" {
			return fmt.Errorf("pack message: item %q has input_ref without manifest_key", it.Key)
		}
	}
	return nil
}

// Body encodes the pack message as the fan-out does (see Packer).
func (m PackMessage) Body() ([]byte, error) { return encodeSafe(m) }

// packMode is what a delivery of a pack does to its items.
type packMode int

const (
	packRun       packMode = iota // run the items (the message's normal delivery)
	packSettle                    // settle the items not yet terminal in the run (stop, dead letter)
	packUnstarted                 // settle only the items not reserved in the run (a lost fan-out)
)

// packStep is what one delivery does with one item of its pack, decided
// from the pack row it read (planPackItem).
type packStep int

const (
	stepNone   packStep = iota // terminal in this run already, or left to its own message
	stepCount                  // answered from an earlier run's outcome: counted once in this run
	stepRun                    // reserved: its pipeline runs under attempt + 1
	stepSettle                 // settled without running
)

// planPackItem decides, for an item whose state in the pack row is s, what
// a delivery of run `run` in mode does with it: the rules of Store.Reserve,
// Settle, SettleUnstarted and MarkCounted for an item row, applied to the
// item's state in its pack (the pack's take has fenced out every earlier
// holder, so a state in flight in this run is a scheduled retry or an
// interruption). interrupted reports a stepRun item whose last attempt's
// outcome is unknown (in flight without a scheduled retry).
func planPackItem(s PackItem, run int, mode packMode) (step packStep, interrupted bool) {
	o := s.Outcome
	fresh := o == "" || s.Run < run && (o == OutcomeFailed || o == OutcomeCancelled || o == OutcomeInFlight || o == OutcomeQuarantined && s.Released)
	inFlight := s.Run == run && o == OutcomeInFlight
	kept := s.Run < run && (o == OutcomeSucceeded || o == OutcomeQuarantined && !s.Released)
	switch {
	case mode == packUnstarted && fresh:
		return stepSettle, false
	case mode == packUnstarted:
		return stepNone, false
	case fresh:
		if mode == packSettle {
			return stepSettle, false
		}
		return stepRun, false
	case inFlight:
		if mode == packSettle {
			return stepSettle, false
		}
		return stepRun, !s.Retry
	case kept && s.CountedRun != run:
		return stepCount, false
	}
	return stepNone, false
}

// startPackItem is s reserved for an attempt in run at now: in flight,
// attempt + 1; an item new to the run starts its attempts there and drops
// the earlier run's outcome.
func startPackItem(s PackItem, run int, now time.Time) PackItem {
	n := s
	n.Attempt = s.Attempt + 1
	if s.Run != run || s.Outcome != OutcomeInFlight {
		n.FirstAttempt = n.Attempt
		n.Output, n.OutputRef, n.Error, n.Reason, n.Cost, n.Released = nil, "", "", "", nil, false
	}
	n.Run, n.Outcome, n.Retry, n.UpdatedAt = run, OutcomeInFlight, false, now
	return n
}

// settlePackItem is s settled with outcome o without running.
func settlePackItem(s PackItem, run int, o Outcome, reason Reason, text string, now time.Time) PackItem {
	n := s
	if s.Run != run || s.Outcome != OutcomeInFlight {
		n.FirstAttempt = s.Attempt + 1 // no attempt in this run
	}
	n.Run, n.Outcome, n.Reason, n.Error = run, o, reason, pipeline.CutText(text, pipeline.MaxErrorTextBytes)
	n.Output, n.OutputRef, n.Cost, n.Released, n.Retry, n.UpdatedAt = nil, "", nil, false, false, now
	return n
}

// runAttempts is the attempts of the item's run.
func (p PackItem) runAttempts() int { return p.Attempt - max(p.FirstAttempt, 1) + 1 }

// packState is one delivery's hold on a pack: the row it read, the take's
// attempt (the fence) and lease, and each item's state as written.
type packState struct {
	ref     PackRef
	msg     PackMessage
	attempt int
	lease   time.Time
	items   []PackItem // as stored after the take (index j)
	was     []PackItem // as read before the take
}

// deliverPack handles one pack message: its items in one message and one
// ledger row, each with its own outcome.
func (w *Worker) deliverPack(ctx context.Context, d Delivery, batches *batchCache, margin time.Duration) (bool, []done) {
	var m PackMessage
	if err := json.Unmarshal(d.Body, &m); err != nil {
		w.Log.Error("poison message: not a pack; acknowledged", "message_id", d.MessageID, "error", err.Error())
		return true, nil
	}
	if err := m.Validate(); err != nil {
		w.Log.Error("poison message; acknowledged", "message_id", d.MessageID, "error", err.Error())
		return true, nil
	}
	log := w.Log.With("batch_id", m.BatchID, "run", m.Run, "pack_first", m.PackFirst)
	b, err := batches.get(ctx, m.BatchID, m.Run)
	if errors.Is(err, ErrNotFound) {
		log.Warn("message for an unknown batch; acknowledged", "message_id", d.MessageID)
		return true, nil
	}
	if err != nil {
		return w.unavailablePack(ctx, log, d, m, "read batch", err)
	}
	if m.Run < b.Run {
		log.Info("message of an earlier run; acknowledged")
		return true, nil
	}
	if m.Run > b.Run {
		log.Warn("message of a later run than the batch row; retried")
		return false, nil
	}
	var dns []done
	ack := false
	switch {
	case d.DeadLetter:
		ack, dns = w.settlePack(ctx, log, b, m, d, packSettle, OutcomeFailed, ReasonDeadLettered,
			fmt.Sprintf("message exceeded the items queue's receive limit (%d receives)", d.ReceiveCount))
		if n := countOutcome(dns, OutcomeFailed); n > 0 {
			w.Metrics.DeadLetters(b.Pipeline, n, b.ID, b.Run)
		}
	case b.Stop == "" && b.Status.Finished():
		return true, nil // the run finished: every item was already terminal
	case b.Stop != "":
		reason := ReasonThreshold
		if b.Stop == StatusCancelled {
			reason = ReasonCancel
		}
		ack, dns = w.settlePack(ctx, log, b, m, d, packSettle, OutcomeCancelled, reason, b.StopDetail)
	default:
		ack, dns = w.runPack(ctx, log, b, m, d, margin)
	}
	for i := range dns {
		dns[i].first, dns[i].items = m.ChunkFirst, m.ChunkItems
	}
	return ack, dns
}

func countOutcome(dns []done, o Outcome) int64 {
	var n int64
	for _, d := range dns {
		if d.outcome == o {
			n++
		}
	}
	return n
}

// takePack reads the pack row and takes it for this delivery: items
// planned stepRun are written in flight (attempt + 1) with the lease,
// stepSettle items with the outcome settle gives them, stepCount items
// counted in the run. It returns the state, the deliveries' counts and,
// when another holder's lease is live, held with that lease's end.
// Nothing planned to change writes nothing (zero state, no error).
func (w *Worker) takePack(ctx context.Context, b Batch, m PackMessage, mode packMode,
	settle func(s PackItem, now time.Time) PackItem, prepare func(run []int) error) (st *packState, dns []done, held time.Time, err error) {
	ref := PackRef{BatchID: b.ID, ListShards: b.ListShards, First: m.PackFirst}
	for try := 0; ; try++ {
		now := w.Clock.Now()
		p, err := w.Store.GetPack(ctx, ref)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, nil, time.Time{}, err
		}
		if p.Attempt > 0 && !p.LeaseUntil.Before(now) {
			return nil, nil, p.LeaseUntil, nil
		}
		st := &packState{ref: ref, msg: m, attempt: p.Attempt + 1, items: make([]PackItem, len(m.Items)), was: make([]PackItem, len(m.Items))}
		var writes []PackItemWrite
		var run []int
		dns = dns[:0]
		for j, mi := range m.Items {
			var s PackItem
			if j < len(p.Items) {
				s = p.Items[j]
			}
			if s.Key == "" {
				s.Key = mi.Key
			}
			st.was[j], st.items[j] = s, s
			step, _ := planPackItem(s, b.Run, mode)
			switch step {
			case stepRun:
				st.items[j] = startPackItem(s, b.Run, now)
				run = append(run, j)
			case stepSettle:
				st.items[j] = settle(s, now)
				dns = append(dns, done{batch: b, outcome: st.items[j].Outcome})
			case stepCount:
				st.items[j].CountedRun = b.Run
				dns = append(dns, done{batch: b, outcome: s.Outcome})
			default:
				continue
			}
			writes = append(writes, PackItemWrite{Index: j, Item: st.items[j], Was: s.Outcome})
		}
		if len(writes) == 0 {
			return nil, nil, time.Time{}, nil
		}
		if len(run) > 0 {
			if err := prepare(run); err != nil {
				return nil, nil, time.Time{}, err
			}
			st.lease = now.Add(w.Lease)
		}
		err = w.Store.WritePack(ctx, PackWrite{Ref: ref, Take: true, Attempt: p.Attempt, Run: b.Run, LeaseUntil: st.lease, Items: writes, Now: now})
		if errors.Is(err, ErrConflict) && try+1 < packTakeTries {
			continue // another writer changed the row since it was read
		}
		if errors.Is(err, ErrConflict) {
			return nil, nil, now.Add(LiveLeaseRecheck), nil
		}
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		return st, dns, time.Time{}, nil
	}
}

// settlePack settles the pack's items that are not yet terminal in the run
// with outcome o (a stopped run: cancelled; a dead-lettered message:
// failed) and counts the ones answered from an earlier run; in mode
// packUnstarted only the items never reserved in the run.
func (w *Worker) settlePack(ctx context.Context, log *slog.Logger, b Batch, m PackMessage, d Delivery, mode packMode, o Outcome, reason Reason, text string) (bool, []done) {
	settle := func(s PackItem, now time.Time) PackItem { return settlePackItem(s, b.Run, o, reason, text, now) }
	st, dns, held, err := w.takePack(ctx, b, m, mode, settle, func([]int) error { return nil })
	switch {
	case err != nil:
		return w.unavailablePack(ctx, log, d, m, "settle pack", err)
	case !held.IsZero() && mode == packSettle && !d.DeadLetter:
		// Started before the stop: its holder records the outcomes; if the
		// holder died, this message takes the pack once the lease ends.
		w.delay(ctx, log, d, held.Sub(w.Clock.Now()))
		return false, nil
	case !held.IsZero():
		return false, nil // under a live lease: its holder decides
	case st == nil:
		return true, nil // every item already terminal in the run
	}
	if n := countOutcome(dns, o); n > 0 {
		w.Metrics.ItemsRecorded(b.Pipeline, string(o), n, b.ID, b.Run)
	}
	log.Warn("pack settled", "outcome", string(o), "reason", string(reason), "items", len(dns))
	return true, dns
}

// packItemRun is one reserved item's attempt in runPack.
type packItemRun struct {
	j           int
	interrupted bool
	input       json.RawMessage
	final       PackItem // its state once the attempt ended
	wait        time.Duration
	retry       bool // transient: its retry is scheduled
	started     bool // its pipeline was called (else it is given back untouched)
	committed   bool // written on its own, with its staged writes
	lost        bool // its own write lost the pack's fence
}

// runPack takes the pack, runs every reserved item's pipeline (at most
// PackConcurrency at once, none started inside the deadline margin), and
// writes every item's outcome in one write fenced by the take's attempt.
// Items that failed transiently stay in flight with a retry scheduled and
// the message comes back after the longest of their delays; the others
// are answered from the row on that delivery.
func (w *Worker) runPack(ctx context.Context, log *slog.Logger, b Batch, m PackMessage, d Delivery, margin time.Duration) (bool, []done) {
	headers, options, serr := resolveSecrets(ctx, w.Secrets, b.Headers, b.Options)
	if errors.Is(serr, ErrUnavailable) {
		return w.unavailablePack(ctx, log, d, m, "resolve secrets", serr)
	}
	inputs := make([]json.RawMessage, len(m.Items))
	// Inputs by pointer are read before the take, so that S3 being
	// unavailable costs no attempt.
	prepare := func(run []int) error {
		for _, j := range run {
			it := m.Items[j]
			if inputs[j] != nil {
				continue
			}
			if it.InputRef == nil {
				inputs[j] = it.Input
				continue
			}
			l, err := w.readLine(ctx, Message{Key: it.Key, ManifestKey: m.ManifestKey, InputRef: it.InputRef})
			if err != nil {
				return fmt.Errorf("read input of %q: %w", it.Key, err)
			}
			inputs[j] = l.Input
		}
		return nil
	}
	noSettle := func(s PackItem, _ time.Time) PackItem { return s }
	st, dns, held, err := w.takePack(ctx, b, m, packRun, noSettle, prepare)
	switch {
	case err != nil:
		return w.unavailablePack(ctx, log, d, m, "take pack", err)
	case !held.IsZero():
		w.delay(ctx, log, d, held.Sub(w.Clock.Now()))
		log.Info("pack under a lease; retried later")
		return false, nil
	case st == nil:
		log.Info("pack already recorded; acknowledged")
		return true, nil
	}
	log = log.With("attempt", st.attempt)
	var runs []*packItemRun
	for j := range st.items {
		if st.items[j].Outcome == OutcomeInFlight && st.items[j].Attempt != st.was[j].Attempt {
			_, interrupted := planPackItem(st.was[j], b.Run, packRun)
			runs = append(runs, &packItemRun{j: j, interrupted: interrupted, input: inputs[j]})
		}
	}
	p, ok := w.Pipelines.Lookup(b.Pipeline)
	conc := w.PackConcurrency
	if conc <= 0 {
		conc = DefaultPackConcurrency
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for _, r := range runs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if dl, has := ctx.Deadline(); has && time.Until(dl) < margin {
				return // not started: given back untouched below
			}
			r.started = true
			w.runPackItem(ctx, log, b, st, r, p, ok, serr, headers, options, margin)
		}()
	}
	wg.Wait()

	var writes []PackItemWrite
	var wait time.Duration
	retries, lost := 0, false
	for _, r := range runs {
		switch {
		case r.lost:
			lost = true
		case r.committed:
			dns = append(dns, done{batch: b, outcome: r.final.Outcome})
			w.Metrics.ItemsRecorded(b.Pipeline, string(r.final.Outcome), 1, b.ID, b.Run)
		case !r.started:
			// Inside the deadline margin: its reservation is undone, as if
			// this delivery had never taken it (no attempt used).
			writes = append(writes, PackItemWrite{Index: r.j, Item: st.was[r.j], Was: OutcomeInFlight})
			retries++
		default:
			writes = append(writes, PackItemWrite{Index: r.j, Item: r.final, Was: OutcomeInFlight})
			if r.retry {
				retries++
				wait = max(wait, r.wait)
			}
		}
	}
	if lost {
		log.Warn("pack fenced by a later take; its holder records the outcomes")
		return false, dns
	}
	if len(writes) > 0 {
		now := w.Clock.Now()
		err := w.persist(ctx, log, "record pack", func() error {
			return w.Store.WritePack(ctx, PackWrite{Ref: st.ref, Attempt: st.attempt, Run: b.Run, Items: writes, Now: now})
		})
		if errors.Is(err, ErrConflict) {
			log.Warn("pack outcomes fenced by a later take")
			return false, dns
		}
		if err != nil {
			log.Error("record pack", "error", pipeline.ErrorText(err))
			return false, dns
		}
	}
	for _, wr := range writes {
		if o := wr.Item.Outcome; o.Terminal() {
			dns = append(dns, done{batch: b, outcome: o})
			w.Metrics.ItemsRecorded(b.Pipeline, string(o), 1, b.ID, b.Run)
			if o != OutcomeSucceeded {
				log.Warn("item recorded", "key", wr.Item.Key, "outcome", string(o), "reason", string(wr.Item.Reason), "error", wr.Item.Error)
			}
		}
	}
	if retries == 0 {
		log.Info("pack recorded", "items", len(writes))
		return true, dns
	}
	if wait <= 0 {
		wait = time.Second // items not started: back soon
	}
	if err := w.Queue.Delay(ctx, d.ReceiptHandle, wait); err != nil {
		log.Warn("delay message", "error", err.Error())
	}
	log.Warn("pack items to retry", "items", retries, "retry_in_ms", wait.Milliseconds())
	return false, dns
}

// runPackItem runs one reserved item of the pack as Worker.item runs an
// item after its reservation, and leaves its ending state in r.final.
func (w *Worker) runPackItem(ctx context.Context, log *slog.Logger, b Batch, st *packState, r *packItemRun,
	p pipeline.Pipeline, registered bool, serr error, headers map[string]string, options json.RawMessage, margin time.Duration) {
	n := st.items[r.j]
	log = log.With("key", n.Key, "item_attempt", n.Attempt)
	spent := pipeline.Cost(nil)
	if st.was[r.j].SpentRun == b.Run && st.was[r.j].Run == b.Run {
		spent = st.was[r.j].Spent // this run's earlier attempts
	}
	end := func(o Outcome, reason Reason, text string) {
		r.final = n
		r.final.Outcome, r.final.Reason, r.final.Error = o, reason, pipeline.CutText(text, pipeline.MaxErrorTextBytes)
		r.final.UpdatedAt = w.Clock.Now()
	}
	switch {
	case r.interrupted && b.OnInterrupt == InterruptQuarantine:
		end(OutcomeQuarantined, ReasonInterrupted, fmt.Sprintf("attempt %d was interrupted (lease expired, outcome unknown); the batch quarantines interrupted items", n.Attempt-1))
		return
	case n.runAttempts() > b.MaxAttempts:
		end(OutcomeFailed, ReasonMaxAttempts, fmt.Sprintf("interrupted: attempt %d exceeds max attempts %d", n.runAttempts(), b.MaxAttempts))
		return
	case serr != nil:
		end(OutcomeFailed, ReasonPermanent, pipeline.ErrorText(serr))
		return
	case !registered:
		end(OutcomeFailed, ReasonPermanent, fmt.Sprintf("pipeline %q is not registered in this item function", b.Pipeline))
		return
	}
	runCtx, cancel := w.runContext(ctx, st.lease, margin)
	pipeCtx, seal := runCtx, func() StagedEffects { return nil }
	if w.Staging != nil {
		pipeCtx, seal = w.Staging(runCtx)
	}
	start := w.Clock.Now()
	res, perr := w.runPipeline(pipeCtx, log, p, b, pipeline.Request{
		BatchID: b.ID, Key: n.Key, RunID: RunID(b.ID, n.Key), Attempt: n.Attempt, Input: r.input,
		Headers: headers, Options: options, Outputs: w.outputs(b.ID),
	})
	staged := seal()
	cutOff := errors.Is(runCtx.Err(), context.DeadlineExceeded)
	cancel()
	w.Metrics.ItemDuration(b.Pipeline, w.Clock.Now().Sub(start), b.ID, b.Run)
	n.Spent, n.SpentRun = spent.Plus(res.Cost), b.Run
	if len(n.Spent) == 0 {
		n.Spent, n.SpentRun = st.was[r.j].Spent, st.was[r.j].SpentRun
	}
	n.Cost = res.Cost
	if perr == nil {
		var out json.RawMessage
		var ref string
		err := w.persist(ctx, log, "store output", func() (err error) {
			out, ref, err = w.storeOutput(ctx, b.ID, RunID(b.ID, n.Key), res.Output)
			return err
		})
		if err == nil {
			end(OutcomeSucceeded, "", "")
			r.final.Output, r.final.OutputRef = out, ref
			if staged != nil && staged.Len() > 0 {
				w.commitPackItem(ctx, log, b, st, r, staged)
			}
			return
		}
		perr = err // transient: S3 write failed
	} else if cutOff && pipeline.Classify(perr) == pipeline.ClassTransient {
		perr = &interruptedError{err: perr}
	}
	text := pipeline.ErrorText(perr)
	switch pipeline.Classify(perr) {
	case pipeline.ClassPermanent:
		end(OutcomeFailed, ReasonPermanent, text)
		return
	case pipeline.ClassQuarantine:
		end(OutcomeQuarantined, ReasonQuarantine, text)
		return
	}
	var interrupted *interruptedError
	if errors.As(perr, &interrupted) && b.OnInterrupt == InterruptQuarantine {
		end(OutcomeQuarantined, ReasonInterrupted, text)
		return
	}
	w.retryPackItem(log, b, n, r, perr, text)
}

// retryPackItem ends an attempt that failed transiently: the item fails at
// the batch's max attempts; otherwise it stays in flight with its retry
// scheduled after the backoff (or the pipeline's longer Retry-After).
func (w *Worker) retryPackItem(log *slog.Logger, b Batch, n PackItem, r *packItemRun, perr error, text string) {
	r.final = n
	r.final.UpdatedAt = w.Clock.Now()
	if n.runAttempts() >= b.MaxAttempts {
		r.final.Outcome, r.final.Reason = OutcomeFailed, ReasonMaxAttempts
		r.final.Error = pipeline.CutText(fmt.Sprintf("attempt %d of %d: %s", n.runAttempts(), b.MaxAttempts, text), pipeline.MaxErrorTextBytes)
		return
	}
	r.final.Outcome, r.final.Retry, r.final.Error, r.final.Reason = OutcomeInFlight, true, pipeline.CutText(text, pipeline.MaxErrorTextBytes), ""
	r.final.Output, r.final.OutputRef = nil, ""
	bo := w.Backoff
	if bo == nil {
		bo = DefaultBackoff
	}
	r.wait = bo(n.runAttempts())
	if ra, ok := pipeline.RetryDelay(perr); ok && ra > r.wait {
		r.wait = ra
	}
	r.retry = true
	log.Warn("transient error; retried", "error", text, "retry_in_ms", r.wait.Milliseconds())
	w.Metrics.Retry(b.Pipeline, b.ID, b.Run)
}

// commitPackItem writes a succeeded item together with the writes its
// attempt staged, alone, in one transaction fenced by the pack's attempt.
// Refused writes fail the item permanently without them; a staged
// condition that does not hold ends the attempt as a transient failure.
func (w *Worker) commitPackItem(ctx context.Context, log *slog.Logger, b Batch, st *packState, r *packItemRun, staged StagedEffects) {
	now := w.Clock.Now() // the same on every resend: it names the commit's transaction
	write := func(it PackItem, effects StagedEffects) error {
		return w.persist(ctx, log, "record item with staged writes", func() error {
			return w.Store.WritePack(ctx, PackWrite{Ref: st.ref, Attempt: st.attempt, Run: b.Run, LeaseUntil: st.lease,
				Items: []PackItemWrite{{Index: r.j, Item: it, Was: OutcomeInFlight}}, Effects: effects, Now: now})
		})
	}
	err := write(r.final, staged)
	var ee *EffectsError
	switch {
	case err == nil:
		r.committed = true
		return
	case errors.Is(err, ErrConflict):
		r.lost = true
		return
	case !errors.As(err, &ee):
		// Not written: the pack's final write records it without its
		// staged writes would be wrong; its attempt ends unknown.
		log.Error("record item with staged writes", "error", pipeline.ErrorText(err))
		r.lost = true
		return
	}
	n := st.items[r.j]
	n.Spent, n.SpentRun, n.Cost = r.final.Spent, r.final.SpentRun, r.final.Cost
	if ee.Permanent {
		r.final = n
		r.final.Outcome, r.final.Reason, r.final.Error = OutcomeFailed, ReasonPermanent, pipeline.CutText(pipeline.ErrorText(err), pipeline.MaxErrorTextBytes)
		r.final.UpdatedAt = w.Clock.Now()
		return
	}
	log.Warn("a staged write's condition did not hold; nothing applied", "error", pipeline.ErrorText(err))
	w.retryPackItem(log, b, n, r, err, pipeline.ErrorText(err))
}

// unavailablePack is Worker.unavailable for a pack message: on
// ErrUnavailable the message is sent again after a short delay (no
// attempt counted) and this one acknowledged.
func (w *Worker) unavailablePack(ctx context.Context, log *slog.Logger, d Delivery, m PackMessage, what string, err error) (bool, []done) {
	return w.sendAgain(ctx, log, d, &m.Requeued, func() ([]byte, error) { return m.Body() }, what, err), nil
}

// settlePackUnstarted settles as failed, with reason and text, the items
// of the pack at first (keys in order) that were never reserved in the
// run: the pack's message was refused or its chunk's fan-out was
// dead-lettered. A pack under a live lease is left to its holder. It
// returns how many items it settled.
func (w *Worker) settlePackUnstarted(ctx context.Context, b Batch, chunk Chunk, first int64, keys []string, reason Reason, text string) (int64, error) {
	m := PackMessage{Kind: KindPack, BatchID: b.ID, Run: b.Run, ChunkFirst: chunk.FirstIndex, ChunkItems: chunk.Count, PackFirst: first}
	for _, k := range keys {
		m.Items = append(m.Items, PackedItem{Key: k})
	}
	settle := func(s PackItem, now time.Time) PackItem {
		return settlePackItem(s, b.Run, OutcomeFailed, reason, text, now)
	}
	_, dns, _, err := w.takePack(ctx, b, m, packUnstarted, settle, func([]int) error { return nil })
	return int64(len(dns)), err
}
