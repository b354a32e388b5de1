package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/spend"
)

// DefaultBudgetEvery is how often, at most, one process reads a run's
// counters to judge its budget (Worker.BudgetEvery): 5 s. With P
// processes counting a run, that is at most P reads of its counter
// partitions per 5 s (each one Query per partition: ≈ 0.5 read unit),
// whatever its items.
const DefaultBudgetEvery = 5 * time.Second

// judgeBudget pauses b's run (PauseByBudget) when b has a budget and the
// run's spend (spend.RunSpend of its counters: the pipeline's "usd" and
// the DynamoDB units) reached it. Called after a counter write that
// counted items of the run; it reads the counters (Store.Progress) at
// most once per BudgetEvery per run in this process, and never for a
// batch without a budget, already paused or stopping as read for this
// message batch. The spend read lags the items: what the counters have
// not counted yet (an invocation counts at least every
// DefaultProgressEvery) and the items in flight are spent past the
// budget; items already running finish. The spend counts each attempt
// as its ending is written (done.attemptSpent): an item still retrying
// or held counts what its attempts spent so far.
func (w *Worker) judgeBudget(ctx context.Context, log *slog.Logger, b ledger.Batch) {
	if b.BudgetUSD <= 0 || b.Pause != nil || b.Stop != "" || b.Status != api.StatusRunning {
		return
	}
	now := w.Clock.Now()
	if !w.budgetBook().due(b.ID, b.Run, now, w.BudgetEvery) {
		return
	}
	p, err := w.Store.Progress(ctx, b.ID, b.Run, max(1, b.CounterShards))
	if err != nil {
		log.WarnContext(ctx, "read the counters for the budget", "error", err.Error())
		return
	}
	spent := spend.RunSpend(p.Spent, p.Usage)
	if !spent.Reached(b.BudgetUSD) {
		return
	}
	text := spend.BudgetText(b.BudgetUSD, spent)
	err = w.Store.Pause(ctx, ledger.PauseMark{BatchID: b.ID, Run: b.Run, By: api.PauseByBudget, Class: string(api.PauseByBudget), Error: text, BudgetUSD: b.BudgetUSD, Now: now})
	switch {
	case err == nil:
		log.WarnContext(ctx, "batch paused: its budget is reached", "budget_usd", b.BudgetUSD, "spent_usd", spent.USD.String())
		w.Metrics.BudgetPaused(b.Pipeline, b.ID, b.Run)
		ps := api.Pause{By: api.PauseByBudget, Since: now, Class: string(api.PauseByBudget), Error: ledger.CutError(text)}
		ledger.AnnouncePause(ctx, w.Bus, log, b, ps, true, api.PauseByBudget, now)
	case !errors.Is(err, api.ErrConflict):
		log.WarnContext(ctx, "pause at the budget", "error", err.Error())
	}
}

// budgetRuns bounds the runs a budgetBook remembers: past it, it forgets
// them all (each forgotten run costs one more counter read).
const budgetRuns = 1024

// budgetBook is when one process last read each run's counters for its
// budget.
type budgetBook struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// budgetBooks guards the making of a Worker's budgetBook.
var budgetBooks sync.Mutex

func (w *Worker) budgetBook() *budgetBook {
	budgetBooks.Lock()
	defer budgetBooks.Unlock()
	if w.budgets == nil {
		w.budgets = &budgetBook{}
	}
	return w.budgets
}

// due reports whether run's counters may be read at now (every < 0:
// always; else once per every, DefaultBudgetEvery for 0), and if so
// notes the read.
func (k *budgetBook) due(id string, run int, now time.Time, every time.Duration) bool {
	if every < 0 {
		return true
	}
	key := id + "#" + strconv.Itoa(run)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil || len(k.last) >= budgetRuns {
		k.last = map[string]time.Time{}
	}
	if at, ok := k.last[key]; ok && now.Sub(at) < cmp.Or(every, DefaultBudgetEvery) {
		return false
	}
	k.last[key] = now
	return true
}
