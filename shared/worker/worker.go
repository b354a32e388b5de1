package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/internal/metric"
	"github.com/bulkrun/bulkrun/internal/retry"
	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/credential"
	"github.com/bulkrun/bulkrun/shared/fanout"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/judge"
	"github.com/bulkrun/bulkrun/shared/lanebook"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/sample"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/stopcheck"
	"github.com/bulkrun/bulkrun/shared/tracklines"
)

// Delivery is one received items-queue message.
type Delivery struct {
	MessageID     string
	Body          []byte
	ReceiptHandle string
	ReceiveCount  int
	// DeadLetter is true when the message comes from the dead-letter queue:
	// it exceeded the items queue's receive limit.
	DeadLetter bool
}

// LiveLeaseRecheck is how soon a message for an item under another
// delivery's live lease comes back, doubled for each earlier receive.
const LiveLeaseRecheck = 5 * time.Second

// MaxInlineOutputBytes is the largest output stored on the item row
// (pipeline.MaxInlineOutputBytes).
const MaxInlineOutputBytes = pipeline.MaxInlineOutputBytes

// Worker runs item messages: reserve, run the pipeline, record the outcome.
// It also expands fan-out messages into item messages and records
// dead-lettered items as failed. Safe for concurrent use.
type Worker struct {
	Store     Store
	Blobs     ledger.Blobs
	Queue     ledger.Queue
	Trigger   ledger.Trigger
	Clock     ledger.Clock
	Log       *slog.Logger
	Pipelines *pipeline.Registry
	// Traces makes the spans of item attempts and pipeline calls
	// (internal/tracing, trace.go); nil: none recorded, the batch's trace
	// context still handed on to the pipelines.
	Traces *tracing.Provider
	// Metrics receives the item metrics (outcomes, durations, retries,
	// dead letters, fan-out, pauses); nil for none. A buffered emitter
	// (metric.Emitter.Buffered, as the item function's) is flushed with
	// each counter write of Handle and at its end.
	Metrics *metric.Emitter
	// Bus gets the Batch Paused and Batch Unpaused events of outage
	// pauses, and the Batch State Change awaiting_approval and approved
	// (auto_approve) of a sampled batch; nil for none.
	Bus ledger.EventBus
	// Lease is how long a reservation is owned; it must outlive the
	// invocation (config.Config.Validate checks Lease ≥ timeout + margin).
	Lease time.Duration
	// Margin is kept before the invocation deadline to record outcomes: no
	// new item starts inside it, and a pipeline's context ends there.
	// Default 10 s.
	Margin time.Duration
	// Concurrency is how many messages of one batch of deliveries run at
	// once. Default 10 (the SQS batch size).
	Concurrency int
	// StopCheck is how old the batch row a call starts under may be: 0
	// means the constant StopCheck; a negative value makes every call
	// read the row (tests on a clock that does not move).
	StopCheck time.Duration
	// ItemConcurrency is how many items run their pipeline at once in one
	// invocation, across all its messages: with items_per_message K > 1 a
	// message holds K items, and they share these with the other
	// messages'. Default DefaultItemConcurrency, which is what one item per
	// message runs with Concurrency 10, so a pack does not multiply the
	// calls an invocation makes at once (nor its memory).
	ItemConcurrency int
	// Retry is the retry policy of a batch whose row carries none (rows
	// written before policies existed); a batch's own policy
	// (Batch.Retry, filled in at submit) wins. nil: DefaultRetryPolicy.
	Retry *api.RetryPolicy
	// UnavailableDelay gives the delay before a message is handled again
	// after an AWS service was unavailable (ErrUnavailable: throttling,
	// 5xx) for the n-th time in a row (n ≥ 1). Default
	// DefaultUnavailableDelay.
	UnavailableDelay func(n int) time.Duration
	// ProgressEvery is how often an invocation still running counts what
	// its finished messages ended so far (one counter-lane write per run
	// with endings, only when something ended since), so that the live
	// view keeps up with slow calls instead of waiting for the whole
	// message batch; the rest is counted when the invocation ends. 0 means
	// DefaultProgressEvery; a negative value counts only at the end.
	ProgressEvery time.Duration
	// BudgetEvery is how often, at most, this process reads a run's
	// counters (Store.Progress: one Query per counter partition) to judge
	// its budget, after a counter write of the run: 0 means
	// judge.DefaultBudgetEvery (5 s); a negative value reads after every write
	// (tests on a clock that does not move).
	BudgetEvery time.Duration
	// Parallel is how many items-queue messages the stack's item function
	// runs at once (the items event sources' maximum concurrency × the
	// messages one invocation is handed), for a sample's estimate of its
	// rest's pace (shared/sample); 0: unknown, the sample's own pace.
	Parallel int
	// PerInvocation is how many messages the items event sources hand
	// one invocation, so that the estimate's rest starts as they scale
	// (sample.Run.PerInvocation); 0: not modelled.
	PerInvocation int
	// Ramp is how the items event source scales from an idle queue
	// (sample.Run.Ramp); zero: sample.StandardRamp.
	Ramp sample.Ramp
	// Secrets resolves the secret references in a batch's headers and
	// options (see SecretRef) before each item runs. nil: an item of a
	// batch holding a reference fails permanently (ErrSecret).
	Secrets Secrets
	// Sleep waits for a rate lease's start (at most pace.LeaseSleep); nil:
	// a timer. Tests on a clock of their own move it.
	Sleep func(ctx context.Context, d time.Duration)
	// tracks keeps the chunk tables and slices the process read for the
	// tracks of batches with max_concurrency (track.go); made on first use.
	tracks *tracklines.Book
	// Wake wakes held items (shared/held): the worker wakes an item it
	// withheld under a halt that a caller lifted meanwhile. nil: such an
	// item waits for the next lift.
	Wake *held.Waker
	// lanes remembers, per run, how much room each counter lane had when
	// last written (count.go); made on first use.
	lanes *lanebook.Book
	// adapts is what this process knows of its downstream keys' adaptive
	// rows, for the pacing of units (rate.go); made on first use.
	adapts *pacer.Adapts
	// lifts is when this process last read each halt subject's secrets
	// past its cache for an item woken by a lift (secret.go); made on
	// first use.
	lifts *credential.Lifts
	// gates holds this process's calls under each batch run's credential
	// one at a time until one is answered without a refusal (secret.go);
	// made on first use.
	gates *credential.Gates
	// reads is when this process last read each run's counters for the
	// judges of its budget and its sample (shared/judge); made on first
	// use.
	reads *judge.Reads
	// speeds remembers, per batch, whether its calls in this process
	// were short (stopcheck.go); made on first use.
	speeds *stopcheck.Speeds
	// Staging, when not nil, lets pipelines stage writes that are
	// committed with the item's succeeded outcome (shared/pipeline/effects):
	// it returns the context the pipeline runs with and a function that
	// ends staging and returns what was staged. Writes staged by an
	// attempt that does not succeed are dropped. nil: staging is refused.
	Staging func(ctx context.Context) (context.Context, func() ledger.StagedEffects)
}

// DefaultProgressEvery is Worker.ProgressEvery's default: an invocation
// of 2 s or less writes its counters once, as before; a longer one at
// most once per 2 s it ran, and only with items ended since
// (docs/adr/0027-count-progress-while-an-invocation-runs.md).
const DefaultProgressEvery = 2 * time.Second

// TrackProgressEvery is how often a track (a run with max_concurrency,
// docs/adr/0028) counts what it ended while its delivery runs, unless
// Worker.ProgressEvery sets another: 10 s. A track runs one unit at a
// time, so at DefaultProgressEvery a unit of 2 s or more (10 items of
// 200 ms at 10 items per message) would write its counter lane once per
// unit, 0.1 write units per item where a message batch's invocation,
// which runs its messages side by side, writes once per 2 s for all of
// them; at 10 s, once per 50 such items (docs/adr/0027, "Tracks"). A
// track also counts at the end of each delivery and once
// trackCountUnits units' items wait.
const TrackProgressEvery = 10 * time.Second

// The worker's retry schedules (internal/retry).
var (
	// UnavailableRetry is a message sent again while AWS is unavailable:
	// 0.75 s × 2^(n−1), at most 90 s, ±⅓ jitter, which is 1 s × 2^(n−1)
	// (at most 2 minutes) jittered within [d/2, d]: short, and spread so
	// that throttled messages do not come back together.
	UnavailableRetry = retry.Schedule{Interval: 750 * time.Millisecond, MaxDelay: 90 * time.Second, Jitter: 1.0 / 3}
	// persistRetry spaces the tries of an outcome write: 1, 2, 4, 8, 8… s.
	persistRetry = retry.Schedule{Interval: time.Second, MaxDelay: 8 * time.Second}
	// heldRetry brings back a message whose unit another delivery holds:
	// 5 s doubled per earlier receive, at most 5 s × 2^10.
	heldRetry = retry.Schedule{Interval: LiveLeaseRecheck, MaxDelay: LiveLeaseRecheck << 10}
)

// DefaultUnavailableDelay is UnavailableRetry's delay n.
func DefaultUnavailableDelay(n int) time.Duration { return UnavailableRetry.Delay(n) }

// done is what one delivery contributes to its run's counters: one
// terminal item of the fan-out chunk (first, items).
type done struct {
	batch        ledger.Batch
	outcome      api.Outcome // terminal
	first, items int64
	// cost is what the attempt that ended the item cost (an item answered
	// from an earlier run: that run's); spent what this run's attempts of
	// it spent (none for an item it did not run): a run's chunk counters
	// (batches before lanes) add them once the item ends.
	cost, spent pipeline.Cost
	// attemptSpent is what this delivery's attempt of the item reported
	// spending, whatever its ending (a retry, a hold, an outcome): a run's
	// counter lanes add each attempt's as its ending is written, so that
	// the run's live spend, and its budget, count the attempts of items
	// still retrying or held.
	attemptSpent pipeline.Cost
	// ran: an attempt of this delivery ended the item (outcome terminal)
	// or scheduled its retry (outcome in flight, counted by no counter);
	// class is the attempt's failure class when it failed transiently
	// (Ending.Class) and text its error. The pause counts them.
	ran         bool
	class, text string
	// Not an ending, for the live view only (outcome empty): retryAt, an
	// item waiting for a retry due then, after a throttling (throttled)
	// or a transient failure of class waitClass (one text: waitText);
	// interrupted (with or without an outcome), an attempt whose outcome
	// was unknown; timedOut, an attempt whose call was given up without
	// an answer.
	retryAt             time.Time
	throttled           bool
	waitClass, waitText string
	interrupted         bool
	timedOut            bool
	// heldAs and heldBy are a change of the run's held items (the live
	// view's): +1 of outcome heldAs for an item this delivery held, −1
	// for one it took or settled after it was woken.
	heldAs api.Outcome
	heldBy int64
	// busy is, on an ending that ran an attempt, its share of its
	// invocation's item-slot time (spreadBusy): a sampled run's counters
	// sum it while it has no estimate (ledger.LaneCount.BusyMs).
	busy time.Duration
}

// unheld is the done of an item taken or settled from state s: −1 held
// item of its outcome when s was held in b's run, else nothing (zero).
func unheld(b ledger.Batch, s ledger.ItemState) done {
	if s.Run != b.Run || !s.Outcome.Held() {
		return done{}
	}
	return done{batch: b, heldAs: s.Outcome, heldBy: -1}
}

// doneOf is the done of an item whose state s is terminal in b's run.
func doneOf(b ledger.Batch, s ledger.ItemState) done {
	d := done{batch: b, outcome: s.Outcome, cost: s.Cost}
	if s.SpentRun == b.Run {
		d.spent = s.Spent
	}
	return d
}

// Handle processes one batch of deliveries and returns the MessageIDs to
// report as batch item failures (they come back after their visibility
// timeout). Every other delivery may be deleted. Never returns nil.
// What the deliveries ended is added to their runs' counters while the
// others still run (every ProgressEvery) and when the last one is done.
func (w *Worker) Handle(ctx context.Context, ds []Delivery) []string {
	conc := w.Concurrency
	if conc <= 0 {
		conc = 10
	}
	margin := w.Margin
	if margin <= 0 {
		margin = 10 * time.Second
	}
	items := w.ItemConcurrency
	if items <= 0 {
		items = DefaultItemConcurrency
	}
	inv := &invocation{batches: &batchCache{store: w.Store, m: map[string]*batchEntry{}}, items: make(chan struct{}, items), margin: margin, checks: &stopcheck.Reads{}, start: w.Clock.Now(),
		oks: &okLines{}}
	if dl, ok := ctx.Deadline(); ok {
		inv.usable = max(time.Until(dl)-margin, 0)
	}
	var (
		mu     sync.Mutex
		failed = []string{}
		dones  []done
		wg     sync.WaitGroup
		sem    = make(chan struct{}, conc)
	)
	// Counts what finished messages ended while the others still run: the
	// items' rows are written before their delivery returns, and a
	// redelivered message whose unit is recorded counts nothing, so an
	// item counted here is never counted again.
	every := w.ProgressEvery
	if every == 0 {
		every = DefaultProgressEvery
	}
	since := inv.start // the start of the time no count has carried yet (spreadBusy)
	stop, flushed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flushed)
		if every < 0 {
			return
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			mu.Lock()
			ended := dones
			dones = nil
			since = spreadBusy(ended, since, w.Clock.Now(), items)
			mu.Unlock()
			if len(ended) > 0 {
				w.count(ctx, ended, 1)
			}
			w.Metrics.Flush() // a buffered emitter's lines, as often as the counts
		}
	}()
	for _, d := range ds {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < margin {
			mu.Lock()
			failed = append(failed, d.MessageID)
			mu.Unlock()
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(d Delivery) {
			defer func() { <-sem; wg.Done() }()
			ack, dns := w.deliver(ctx, d, inv)
			mu.Lock()
			defer mu.Unlock()
			if !ack {
				failed = append(failed, d.MessageID)
			}
			dones = append(dones, dns...)
		}(d)
	}
	wg.Wait()
	close(stop)
	<-flushed
	spreadBusy(dones, since, w.Clock.Now(), items)
	w.count(ctx, dones, 1)
	w.Metrics.Flush()
	inv.oks.log(ctx, w.Log)
	return failed
}

// spreadBusy spreads the invocation's item-slot time from since to now
// over the endings dns that ran an attempt (done.busy), and returns the
// start of the time not carried yet: now, or since when none ran. The
// slot time is the time × the items that could run at once: those
// endings, at most slots (the invocation's ItemConcurrency). So a
// sample's counted busy time is the item-slot seconds its items took,
// whether its invocations held one message or ten; the estimate divides
// the sample's items by it (sample.Run.Busy).
func spreadBusy(dns []done, since, now time.Time, slots int) time.Time {
	var ran int
	for _, d := range dns {
		if d.ran {
			ran++
		}
	}
	if ran == 0 || !now.After(since) {
		return since
	}
	share := now.Sub(since) * time.Duration(min(ran, slots)) / time.Duration(ran)
	for i := range dns {
		if dns[i].ran {
			dns[i].busy = share
		}
	}
	return now
}

// invocation is what the deliveries of one Handle share: the batch rows
// read, the items running their pipeline (at most ItemConcurrency), and
// the deadline margin.
type invocation struct {
	batches *batchCache
	items   chan struct{}
	margin  time.Duration
	checks  *stopcheck.Reads // the rows calls start under (beforeCall)
	start   time.Time        // when the invocation read its batch rows
	oks     *okLines         // its items that succeeded, logged once it ends
	// usable is the time its calls had at its start, to its deadline
	// less the margin (0: no deadline); a paced unit leases no more calls
	// than start within half of it (pacer.Lease.Window).
	usable time.Duration
}

type batchEntry struct {
	once sync.Once
	b    ledger.Batch
	err  error
}

// EventualBatchReader is a Store that can also read a batch row with an
// eventually consistent read, which costs half a strongly consistent one
// (DynamoDB developer guide, "Read consistency",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html).
// The worker uses it for the batch row it reads per message batch; a read
// that may be stale in a way that matters (no row, still submitting, an
// earlier run than the message's) is repeated with GetBatch. A stop set in
// the last second may thus be seen a moment later: items already taken
// then run, as items in flight at a stop always do.
type EventualBatchReader interface {
	GetBatchEventually(ctx context.Context, id string) (ledger.Batch, error)
}

// batchCache reads each batch row once per message batch.
type batchCache struct {
	store Store
	mu    sync.Mutex
	m     map[string]*batchEntry
}

// get returns the batch row for a message of run.
func (c *batchCache) get(ctx context.Context, id string, run int) (ledger.Batch, error) {
	c.mu.Lock()
	e := c.m[id]
	if e == nil {
		e = &batchEntry{}
		c.m[id] = e
	}
	c.mu.Unlock()
	e.once.Do(func() {
		if r, ok := c.store.(EventualBatchReader); ok {
			e.b, e.err = r.GetBatchEventually(ctx, id)
			if e.err == nil && e.b.Status != api.StatusSubmitting && e.b.Run >= run {
				return
			}
		}
		e.b, e.err = c.store.GetBatch(ctx, id)
	})
	return e.b, e.err
}

// deliver handles one delivery: an item or pack message (its ledger
// unit's items), a fan-out message, or a track of a batch with
// max_concurrency. ack false reports it as failed.
func (w *Worker) deliver(ctx context.Context, d Delivery, inv *invocation) (bool, []done) {
	m, fan, err := decodeMessage(d.Body)
	var nf *ledger.NewerFormatError
	switch {
	case errors.As(err, &nf):
		// Written by a newer release: left on the queue for it.
		w.Log.ErrorContext(ctx, "message not read; retried", "message_id", d.MessageID, "error", err.Error())
		return false, nil
	case err != nil:
		w.Log.ErrorContext(ctx, "poison message; acknowledged", "message_id", d.MessageID, "error", err.Error())
		return true, nil
	}
	m.oks = inv.oks
	log := w.Log.With("batch_id", m.BatchID, "run", m.Run)
	b, err := inv.batches.get(ctx, m.BatchID, m.Run)
	switch {
	case errors.Is(err, api.ErrNotFound):
		log.WarnContext(ctx, "message for an unknown batch; acknowledged", "message_id", d.MessageID)
		return true, nil
	case err != nil:
		return w.unavailable(ctx, log, d, m, nil, "read batch", err)
	case m.Run < b.Run:
		log.InfoContext(ctx, "message of an earlier run; acknowledged")
		return true, nil
	case m.Run > b.Run:
		log.WarnContext(ctx, "message of a later run than the batch row; retried")
		return false, nil
	case fan != nil && fan.Track != nil && b.MaxConcurrency > 0:
		return w.runTrack(ctx, log.With("track", fan.Track.Index), b, fan, d, inv), nil
	case fan != nil && d.DeadLetter:
		return w.deadLetterChunk(ctx, log, b, *fan, d), nil
	case fan != nil && fan.Chunk != nil && b.Run == 1 && b.Approval.Holds() && b.Stop == "" && fan.Chunk.FirstIndex >= int64(b.Sample):
		// A chunk wholly outside the sample waits unexpanded: one
		// message held for its thousands of items.
		return w.holdForApproval(ctx, log, b, m, d)
	case fan != nil:
		held, err := w.fanout(ctx, log, b, fan)
		if err != nil {
			return w.unavailable(ctx, log.With("offset", fan.Chunk.Offset), d, m, &b, "fan-out", err)
		}
		if held {
			// The chunk of the sample's end sent the sample's messages
			// only: the rest of it waits unexpanded, as a later chunk.
			return w.holdForApproval(ctx, log, b, m, d)
		}
		return true, nil
	}
	return w.dispatch(ctx, log, b, m, d, inv)
}

// decodeMessage reads an items-queue message body: an item or pack
// message as its unit (m), or a fan-out message (fan, with m its unit
// message for the fields they share). A body of a newer format is a
// *ledger.NewerFormatError; any other error makes it poison.
func decodeMessage(body []byte) (m *unitMessage, fan *ledger.Message, err error) {
	var kind struct {
		Format int                `json:"v"`
		Kind   ledger.MessageKind `json:"kind"`
	}
	if err := json.Unmarshal(body, &kind); err != nil {
		return nil, nil, err
	}
	if err := ledger.CheckFormat("message", kind.Format); err != nil {
		return nil, nil, err
	}
	if kind.Kind == ledger.KindPack {
		var pm ledger.PackMessage
		if err := json.Unmarshal(body, &pm); err != nil {
			return nil, nil, err
		}
		return packUnitMessage(&pm), nil, pm.Validate()
	}
	var im ledger.Message
	if err := json.Unmarshal(body, &im); err != nil {
		return nil, nil, err
	}
	m = itemUnitMessage(&im)
	if im.Kind == ledger.KindFanout {
		fan = &im
	}
	return m, fan, im.Validate()
}

// dispatch runs the unit of m (an item or pack message, or a track's
// unit) as b's row says: settle it when dead-lettered or its run stops,
// wait out a pause, else run it. ack false reports the delivery as
// failed.
func (w *Worker) dispatch(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, d Delivery, inv *invocation) (bool, []done) {
	if m.Packed != (b.Packed()) {
		// An item message for a batch of packs, or a pack message for a
		// batch of one item per message: the fan-out never sends one (K is
		// part of the plan), and taking its unit would run items a second
		// time beside their own unit's. Its items are their own unit's.
		log.ErrorContext(ctx, "poison message: its unit does not match the batch's items per message; acknowledged",
			"message_id", d.MessageID, "items_per_message", b.Pack(), "packed", m.Packed)
		return true, nil
	}
	if m.Packed {
		log = log.With("pack_first", m.PackFirst)
	} else {
		log = log.With("key", m.Items[0].Key)
	}
	var ack bool
	var dns []done
	switch {
	case d.DeadLetter:
		ack, dns = w.settleUnit(ctx, log, b, m, d, api.OutcomeFailed, api.ReasonDeadLettered,
			fmt.Sprintf("message exceeded the items queue's receive limit (%d receives)", d.ReceiveCount))
		if n := countOutcome(dns, api.OutcomeFailed); n > 0 {
			w.Metrics.DeadLetters(b.Pipeline, n, b.ID, b.Run)
		}
	case b.Stop == "" && b.Status.Finished():
		return true, nil // the run finished: every item was already terminal
	case b.Stop != "":
		reason := api.ReasonThreshold
		if b.Stop == api.StatusCancelled {
			reason = api.ReasonCancel
		}
		ack, dns = w.settleUnit(ctx, log, b, m, d, api.OutcomeCancelled, reason, b.StopDetail)
	case b.Run == 1 && b.Approval.Holds() && !m.sample:
		ack, dns = w.holdForApproval(ctx, log, b, m, d)
	case b.Pause != nil:
		ack, dns = w.runPaused(ctx, log, b, m, d, inv)
	default:
		ack, dns = w.runUnit(ctx, log, b, m, d, inv)
	}
	for i := range dns {
		dns[i].first, dns[i].items = m.ChunkFirst, m.ChunkItems
	}
	return ack, dns
}

func countOutcome(dns []done, o api.Outcome) int64 {
	var n int64
	for _, d := range dns {
		if d.outcome == o {
			n++
		}
	}
	return n
}

// fanout expands one manifest chunk into item messages
// (fanout.Expander.Expand): the items of messages the queue refused are
// recorded failed with its reason (settleUnstarted) and counted; held
// reports that the chunk of a sample's end sent the sample's messages
// only and waits for the decision.
func (w *Worker) fanout(ctx context.Context, log *slog.Logger, b ledger.Batch, m *ledger.Message) (held bool, err error) {
	e := fanout.Expander{Queue: w.Queue, Blobs: w.Blobs, Store: w.Store, Clock: w.Clock,
		Settle: func(ctx context.Context, chunk source.Chunk, first int64, keys []string, text string) (int64, error) {
			return w.settleUnstarted(ctx, b, chunk, first, keys, api.ReasonPermanent, text)
		}}
	res, err := e.Expand(ctx, log, b, m)
	if res.Refused > 0 {
		w.count(ctx, []done{{batch: b, outcome: api.OutcomeFailed, first: m.Chunk.FirstIndex, items: m.Chunk.Count}}, res.Refused)
		w.Metrics.ItemsRecorded(b.Pipeline, string(api.OutcomeFailed), res.Refused, b.ID, b.Run)
	}
	if err == nil && !res.Held {
		w.Metrics.FanOut(res.Sent, b.ID, b.Run)
	}
	return res.Held, err
}

// deadLetterChunk records every item of a fan-out chunk whose message was
// dead-lettered (its expansion kept failing) as failed, dead-lettered, so
// that the run still finishes. Only items never reserved in this run are
// settled (ModeUnstarted): an item reserved in this run had its own
// message — in flight, or waiting for a scheduled retry with attempts
// left — and that message decides its outcome.
func (w *Worker) deadLetterChunk(ctx context.Context, log *slog.Logger, b ledger.Batch, m ledger.Message, d Delivery) bool {
	rc, err := w.Blobs.OpenRange(ctx, m.ManifestKey, m.Chunk.Offset, m.Chunk.Length)
	if err != nil {
		log.ErrorContext(ctx, "dead-lettered fan-out: open chunk", "error", err.Error())
		return false
	}
	defer rc.Close()
	var settled int64
	text := fmt.Sprintf("the fan-out message of its chunk exceeded the items queue's receive limit (%d receives)", d.ReceiveCount)
	var unit []string // keys of the unit being read
	var index int64
	settle := func() error {
		if len(unit) == 0 {
			return nil
		}
		n, err := w.settleUnstarted(ctx, b, *m.Chunk, m.Chunk.FirstIndex+index-int64(len(unit)), unit, api.ReasonDeadLettered, text)
		settled += n
		unit = unit[:0]
		return err
	}
	err = source.ReadManifestLines(rc, m.Chunk.Offset, func(l source.ManifestLine, _, _ int64) error {
		unit = append(unit, l.Key)
		if index++; len(unit) == b.Pack() {
			return settle()
		}
		return nil
	})
	if err == nil {
		err = settle() // the chunk's last, short pack
	}
	if settled > 0 {
		// One counter write for the whole chunk.
		w.count(ctx, []done{{batch: b, outcome: api.OutcomeFailed, first: m.Chunk.FirstIndex, items: m.Chunk.Count}}, settled)
		w.Metrics.DeadLetters(b.Pipeline, settled, b.ID, b.Run)
		w.Metrics.ItemsRecorded(b.Pipeline, string(api.OutcomeFailed), settled, b.ID, b.Run)
	}
	if err != nil {
		log.ErrorContext(ctx, "dead-lettered fan-out", "error", err.Error(), "settled", settled)
		return false
	}
	log.WarnContext(ctx, "fan-out chunk dead-lettered; its items recorded failed", "items", settled)
	return true
}

// unavailable handles a delivery that could not be processed because of
// err. When err is ErrUnavailable (AWS throttled or failed transiently),
// the message is sent again as a new message after a short jittered delay
// (UnavailableDelay) and this one acknowledged: no attempt was counted,
// and the new message's receive count starts from 0, so throttling never
// brings an item to the dead-letter queue. If the new message cannot be
// sent, this one comes back after the same delay. Any other error leaves
// the message to come back after its visibility timeout (and, if it keeps
// failing, to the dead-letter queue).
// unavailable handles a message whose work an AWS service did not let
// happen (ErrUnavailable): it is sent again later, counting no attempt
// (sendAgain); an error of another kind is logged and the delivery left
// to come back. A fault of class pause also pauses b's run (pauseForFault)
// when b, the batch row the message was handled under, is known (nil: the
// row could not be read). A track's unit waits in its track instead.
func (w *Worker) unavailable(ctx context.Context, log *slog.Logger, d Delivery, m *unitMessage, b *ledger.Batch, what string, err error) (bool, []done) {
	if b != nil {
		w.pauseForFault(ctx, log, *b, err)
	}
	if m.track != nil {
		// A track's unit waits in its track, as a message would wait on
		// the queue; an error that is not AWS's waits as long as a
		// message's visibility timeout would make it.
		n := m.ref.Requeued + 1
		wait := w.unavailableDelay(n)
		if !errors.Is(err, ledger.ErrUnavailable) {
			wait = max(wait, w.Lease)
		}
		log.WarnContext(ctx, what+": waiting in the track", "error", pipeline.ErrorText(err), "retry_in_ms", wait.Milliseconds(), "requeued", n)
		return m.track.park(m, wait, n), nil
	}
	return w.sendAgain(ctx, log, d, m.requeued, m.body, what, err), nil
}

// unavailableDelay is UnavailableDelay's delay n (n ≥ 1).
func (w *Worker) unavailableDelay(n int) time.Duration {
	if w.UnavailableDelay != nil {
		return w.UnavailableDelay(n)
	}
	return DefaultUnavailableDelay(n)
}

// sendAgain is unavailable for any message: requeued is the message's
// Requeued count, which it raises before body encodes the message again.
// It reports whether the delivery may be acknowledged.
func (w *Worker) sendAgain(ctx context.Context, log *slog.Logger, d Delivery, requeued *int, body func() ([]byte, error), what string, err error) bool {
	if !errors.Is(err, ledger.ErrUnavailable) || d.DeadLetter {
		log.ErrorContext(ctx, what, "error", pipeline.ErrorText(err))
		return false
	}
	delayOf := w.UnavailableDelay
	if delayOf == nil {
		delayOf = DefaultUnavailableDelay
	}
	if *requeued >= ledger.MaxResends {
		// The loop's own bound (MaxResends): wait on this message, a receive.
		wait := delayOf(*requeued)
		log.WarnContext(ctx, what+": AWS unavailable; message delayed, not sent again", "error", pipeline.ErrorText(err), "retry_in_ms", wait.Milliseconds(), "requeued", *requeued)
		if derr := w.Queue.Delay(ctx, d.ReceiptHandle, wait); derr != nil {
			log.WarnContext(ctx, "delay message", "error", derr.Error())
		}
		return false
	}
	*requeued++
	wait := delayOf(*requeued)
	log.WarnContext(ctx, what+": AWS unavailable; message sent again", "error", pipeline.ErrorText(err), "retry_in_ms", wait.Milliseconds(), "requeued", *requeued)
	b, berr := body()
	if berr == nil {
		if berr = w.Queue.Requeue(ctx, b, wait); berr == nil {
			w.Metrics.Resent("", "unavailable", "", 0)
			return true
		}
	}
	log.WarnContext(ctx, "send the message again", "error", berr.Error())
	if derr := w.Queue.Delay(ctx, d.ReceiptHandle, wait); derr != nil {
		log.WarnContext(ctx, "delay message", "error", derr.Error())
	}
	return false
}

// delay makes a message come back after min(until+1 s, heldRetry's delay
// of its receive count).
func (w *Worker) delay(ctx context.Context, log *slog.Logger, d Delivery, until time.Duration) {
	wait := min(max(until, 0)+time.Second, heldRetry.Delay(d.ReceiveCount))
	if err := w.Queue.Delay(ctx, d.ReceiptHandle, wait); err != nil {
		log.WarnContext(ctx, "delay message", "error", err.Error())
	}
}

// heldOff brings back delivery d of a unit that h found held: when its
// holder has likely recorded the outcome (delay), or, held by an item
// row's scheduled retry (hold.retryHeld), when that retry is due — a
// duplicate that came early, brought back at the rechecks of a
// delivery's lease, would count a receive each toward the dead-letter
// queue over a long wait (a Retry-After of an hour).
func (w *Worker) heldOff(ctx context.Context, log *slog.Logger, d Delivery, h *hold) {
	if !h.retryHeld {
		w.delay(ctx, log, d, h.held.Sub(w.Clock.Now()))
		return
	}
	if err := w.Queue.Delay(ctx, d.ReceiptHandle, h.held.Sub(w.Clock.Now())); err != nil {
		log.WarnContext(ctx, "delay message", "error", err.Error())
	}
}

// persist runs fn, a write whose result the attempt depends on, again
// while it fails with ErrUnavailable (AWS throttling or 5xx after the
// SDK's tries) at persistRetry's delays, as long as the context's deadline
// leaves a second after the pause. It returns fn's last error.
func (w *Worker) persist(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	err := fn()
	for try := 1; errors.Is(err, ledger.ErrUnavailable) && ctx.Err() == nil; try++ {
		pause := persistRetry.Delay(try)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < pause+time.Second {
			break
		}
		log.WarnContext(ctx, what+": AWS unavailable; trying again", "error", pipeline.ErrorText(err), "retry_in_ms", pause.Milliseconds())
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		err = fn()
	}
	return err
}

func (w *Worker) runContext(ctx context.Context, leaseUntil time.Time, margin time.Duration) (context.Context, context.CancelFunc) {
	end := leaseUntil.Add(-margin)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-margin).Before(end) {
		end = dl.Add(-margin)
	}
	return context.WithDeadline(ctx, end)
}

// books guards the making of a Worker's process records (its lane book,
// adaptive rows, call speeds, track book, lifts and counter reads).
var books sync.Mutex

// made is *p, a process record made on first use (a Worker copied before
// that keeps its own); T's zero value is ready to use.
func made[T any](p **T) *T {
	books.Lock()
	defer books.Unlock()
	if *p == nil {
		*p = new(T)
	}
	return *p
}
