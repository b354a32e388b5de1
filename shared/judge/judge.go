// Package judge holds the item function's judges of a run's counters:
// after a counter write that counted items of a run, the item engine
// (shared/worker) asks them whether the run's spend reached its budget
// (Budget: the run pauses, api.PauseByBudget; docs/adr/0032) and whether
// its sample has ended (Sample: the estimate is written, the batch
// awaits its approval, or is approved under its auto-approval;
// docs/adr/0038). Each reads the run's counters (Store.Progress: one
// Query per counter partition) at most once per Judge.Every per run in a
// process, and acts by one conditional write, announced on the bus; the
// rules they apply are shared/spend's and shared/sample's.
package judge

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/internal/metric"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/sample"
	"github.com/bulkrun/bulkrun/shared/spend"
)

// Store is the ledger port the judges read and write (part of
// ledger.Store).
type Store interface {
	Progress(ctx context.Context, batchID string, run, shards int) (ledger.Progress, error)
	Pause(ctx context.Context, m ledger.PauseMark) error
	MarkApproval(ctx context.Context, m ledger.ApprovalMark) error
}

// Judge judges runs' counters for one item function's process: a value
// made for each judgement, its Reads the process's (shared by every
// Judge of the process).
type Judge struct {
	// Store holds the runs' counters and batch rows.
	Store Store
	// Clock is the time; nil: the wall clock.
	Clock ledger.Clock
	// Bus takes the Batch State Change events (nil: none put).
	Bus ledger.EventBus
	// Metrics records a budget's pause (nil: none).
	Metrics *metric.Emitter
	// Every is how often, at most, this process reads a run's counters
	// to judge its budget: 0 means DefaultBudgetEvery (5 s); a negative
	// value reads after every write (tests on a clock that does not move).
	Every time.Duration
	// Parallel is how many items-queue messages the stack's item function
	// runs at once, for a sample's estimate of its rest's pace
	// (sample.Run.Parallel); 0: unknown, the sample's own pace.
	Parallel int
	// PerInvocation is how many messages the items event sources hand
	// one invocation (sample.Run.PerInvocation); 0: no event source
	// scaling modelled.
	PerInvocation int
	// Ramp is how the items event source scales (sample.Run.Ramp).
	Ramp sample.Ramp
	// ItemConcurrency is how many items one invocation of the item
	// function runs at once (worker.Worker.ItemConcurrency), for the
	// estimate's items at once per invocation (sample.Run.Slots); 0:
	// unknown, the pace from the sample's wall time.
	ItemConcurrency int
	// Reads is when this process last read each run's counters; nil: no
	// record (every judgement reads).
	Reads *Reads
}

func (j *Judge) now() time.Time {
	if j.Clock == nil {
		return time.Now()
	}
	return j.Clock.Now()
}

// DefaultBudgetEvery is how often, at most, one process reads a run's
// counters to judge its budget (Judge.Every): 5 s. With P
// processes counting a run, that is at most P reads of its counter
// partitions per 5 s (each one Query per partition: ≈ 0.5 read unit),
// whatever its items.
const DefaultBudgetEvery = 5 * time.Second

// Budget pauses b's run (PauseByBudget) when b has a budget and the
// run's spend (spend.RunSpend of its counters: the pipeline's "usd" and
// the DynamoDB units) reached it. Called after a counter write that
// counted items of the run; it reads the counters (Store.Progress) at
// most once per Every per run in this process, and never for a
// batch without a budget, already paused or stopping as read for this
// message batch. The spend read lags the items: what the counters have
// not counted yet (an invocation counts at least every
// worker.DefaultProgressEvery, a track every worker.TrackProgressEvery)
// and the items in flight are spent past the
// budget; items already running finish. The spend counts each attempt
// as its ending is written (done.attemptSpent): an item still retrying
// or held counts what its attempts spent so far.
func (j *Judge) Budget(ctx context.Context, log *slog.Logger, b ledger.Batch) {
	if b.BudgetUSD <= 0 || b.Pause != nil || b.Stop != "" || b.Status != api.StatusRunning {
		return
	}
	now := j.now()
	if !j.book().due(b.ID, b.Run, now, j.Every) {
		return
	}
	p, err := j.Store.Progress(ctx, b.ID, b.Run, max(1, b.CounterShards))
	if err != nil {
		log.WarnContext(ctx, "read the counters for the budget", "error", err.Error())
		return
	}
	spent := spend.RunSpend(p.Spent, p.Usage)
	if !spent.Reached(b.BudgetUSD) {
		return
	}
	text := spend.BudgetText(b.BudgetUSD, spent)
	err = j.Store.Pause(ctx, ledger.PauseMark{BatchID: b.ID, Run: b.Run, By: api.PauseByBudget, Class: string(api.PauseByBudget), Error: text, BudgetUSD: b.BudgetUSD, Now: now})
	switch {
	case err == nil:
		log.WarnContext(ctx, "batch paused: its budget is reached", "budget_usd", b.BudgetUSD, "spent_usd", spent.USD.String())
		j.Metrics.BudgetPaused(b.Pipeline, b.ID, b.Run)
		ps := api.Pause{By: api.PauseByBudget, Since: now, Class: string(api.PauseByBudget), Error: ledger.CutError(text)}
		ledger.AnnouncePause(ctx, j.Bus, log, b, ps, true, api.PauseByBudget, now)
	case !errors.Is(err, api.ErrConflict):
		log.WarnContext(ctx, "pause at the budget", "error", err.Error())
	}
}

// readRuns bounds the runs a Reads remembers: past it, it forgets
// them all (each forgotten run costs one more counter read).
const readRuns = 1024

// Reads is when one process last read each run's counters for a judge
// (the budget's by batch and run, the sample's under "sample#"); the zero
// value is ready, safe for concurrent use.
type Reads struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (j *Judge) book() *Reads {
	if j.Reads == nil {
		return &Reads{}
	}
	return j.Reads
}

// due reports whether run's counters may be read at now (every < 0:
// always; else once per every, DefaultBudgetEvery for 0), and if so
// notes the read.
func (k *Reads) due(id string, run int, now time.Time, every time.Duration) bool {
	if every < 0 {
		return true
	}
	key := id + "#" + strconv.Itoa(run)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil || len(k.last) >= readRuns {
		k.last = map[string]time.Time{}
	}
	if at, ok := k.last[key]; ok && now.Sub(at) < cmp.Or(every, DefaultBudgetEvery) {
		return false
	}
	k.last[key] = now
	return true
}

// sampleJudgeEvery is how often, at most, one process reads a sampled
// run's counters to see whether its sample has ended, when a held
// message comes back: 1 s. After a counter write of the run it reads
// every time, so that the write that ends the sample is followed by a
// read (a sample of 10^5 items at K = 10 writes its counters ≈ 10^3–10^4
// times: as many Queries at most, once per batch).
const sampleJudgeEvery = time.Second

// Sample writes b's sample estimate (Store.MarkApproval) once the
// sample's items have ended: b samples (its first run holds the rest,
// with no estimate yet), its source is read, and the run's counters —
// read after every counter write that counted items of the run
// (counted), and by held deliveries (the item engine's hold) at most once per
// sampleJudgeEvery per run in this process — count at least min(Sample,
// items) items ended or held; it then puts the Batch State Change
// awaiting_approval (ledger.ApprovalChangeOf). Then, under
// Plan.AutoApproveUSD, an estimate at most it approves the batch and
// puts approved (decided_by auto_approve). The held deliveries are the
// fallback: a read just after the last write may not see it yet (the
// counters' Query is eventually consistent). A lost race (another
// process wrote first) is left as it is, and announced by the winner.
func (j *Judge) Sample(ctx context.Context, log *slog.Logger, b ledger.Batch, counted bool) {
	a := b.Approval
	if b.Run != 1 || a == nil || a.Decision != "" || a.Estimate != nil || b.Stop != "" || b.Status != api.StatusRunning || b.RunItems() <= 0 {
		return
	}
	now := j.now()
	every := sampleJudgeEvery
	if counted || j.Every < 0 {
		every = -1
	}
	if !j.book().due("sample#"+b.ID, b.Run, now, every) {
		return
	}
	p, err := j.Store.Progress(ctx, b.ID, b.Run, max(1, b.CounterShards))
	if err != nil {
		log.WarnContext(ctx, "read the counters for the sample", "error", err.Error())
		return
	}
	ended := p.Done + p.HeldItems()
	if ended < min(int64(b.Sample), b.RunItems()) {
		return
	}
	spent := spend.RunSpend(p.Spent, p.Usage)
	r := sample.Run{Items: b.RunItems(), Ended: ended, Failed: p.Failures, StartedAt: b.RunStartedAt, Now: now, EndedAt: p.UpdatedAt,
		PipelineUSD: spent.Pipeline, InfraUSD: spent.Infra, Cost: p.Cost, PerMessage: b.Pack(), Parallel: j.Parallel, PerInvocation: j.PerInvocation, Ramp: j.Ramp,
		Busy: time.Duration(p.BusyMs) * time.Millisecond, Slots: min(j.ItemConcurrency, j.PerInvocation*b.Pack())}
	if n := b.MaxConcurrency; n > 0 {
		// On max_concurrency's tracks the sample and the rest run N units
		// at once, one item at a time each: no invocation's slots.
		r.PerMessage, r.Parallel, r.Busy = 1, n, 0
	}
	if b.Rate != nil {
		r.RequestsPerSecond = b.Rate.RequestsPerSecond
	}
	est := sample.Estimate(r)
	if est == nil {
		return
	}
	err = j.Store.MarkApproval(ctx, ledger.ApprovalMark{BatchID: b.ID, Run: b.Run, Estimate: est, Now: now})
	switch {
	case errors.Is(err, api.ErrConflict):
		return
	case err != nil:
		log.WarnContext(ctx, "write the sample's estimate", "error", err.Error())
		return
	}
	log.WarnContext(ctx, "batch awaits approval: its sample has ended", "sample_items", est.SampleItems, "failed", est.Failed,
		"cost_usd", est.CostUSD, "seconds", est.Seconds)
	ledger.AnnounceChange(ctx, j.Bus, log, ledger.ApprovalChangeOf(b, *api.ApprovalOf(a.Sample, "", "", time.Time{}, est), now))
	if b.AutoApproveUSD <= 0 || est.CostUSD > b.AutoApproveUSD {
		return
	}
	if ended > p.Done {
		// Held items (suspended, withheld, exhausted) spent nothing yet
		// and failed nothing yet: an estimate that counts them is no
		// ground to spend without a person.
		log.WarnContext(ctx, "not approved without asking: sample items are held", "held", ended-p.Done)
		return
	}
	m := ledger.ApprovalMark{BatchID: b.ID, Run: b.Run, Decision: api.ApprovalApproved, By: api.DecidedByAuto, Now: now}
	err = j.Store.MarkApproval(ctx, m)
	switch {
	case err == nil:
		log.WarnContext(ctx, "batch approved: the sample's estimate is within its auto-approval", "cost_usd", est.CostUSD, "auto_approve_usd", b.AutoApproveUSD)
		ledger.AnnounceChange(ctx, j.Bus, log, ledger.ApprovalChangeOf(b, *api.ApprovalOf(a.Sample, m.Decision, m.By, m.Now, est), now))
	case !errors.Is(err, api.ErrConflict):
		log.WarnContext(ctx, "auto-approve", "error", err.Error())
	}
}
