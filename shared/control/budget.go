package control

import (
	"context"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/spend"
)

// SetBudget sets the batch's budget to usd US dollars (Plan.BudgetUSD,
// api.CheckBudget: > 0 and ≤ api.MaxBudgetUSD). On a running run the new
// budget must be above what the run has spent (spend.RunSpend of its
// counters, one Query per counter partition); a budget at or below it
// is refused and the batch stays as it is. A run paused at its budget
// (api.PauseByBudget) is unpaused: its waiting items start again at the
// pause's next check (within MaxCheckInterval + 2 × CheckGrace), and the
// Batch Unpaused and Batch State Change events say so (by "budget"). On
// a finished batch the budget is that of its next run (resume,
// corrections). Errors: an *api.InputError naming budget_usd;
// ErrNotFound (ErrExpired past the retention); ErrConflict for a budget
// not above the run's spend.
func (c *Control) SetBudget(ctx context.Context, id string, usd float64) (ledger.Batch, error) {
	if err := api.CheckBudget("budget_usd", usd); err != nil {
		return ledger.Batch{}, err
	}
	b, err := c.Get(ctx, id)
	if err != nil {
		return ledger.Batch{}, err
	}
	if b.Status == api.StatusRunning {
		p, err := c.Store.Progress(ctx, id, b.Run, max(1, b.CounterShards))
		if err != nil {
			return ledger.Batch{}, fmt.Errorf("budget of %s: read the counters: %w", id, err)
		}
		if spent := spend.RunSpend(p.Spent, p.Usage); spent.Reached(usd) {
			return b, fmt.Errorf("budget of %s: $%s is not above what run %d has spent ($%s); give a higher budget: %w",
				id, api.USDText(usd), b.Run, spend.SpendText(spent.USD), api.ErrConflict)
		}
	}
	if err := c.Store.SetLimits(ctx, id, ledger.Limits{BudgetUSD: usd}); err != nil {
		return ledger.Batch{}, err
	}
	c.Log.InfoContext(ctx, "budget set", "batch_id", id, "run", b.Run, "budget_usd", usd)
	// Read again: a worker may have paused the run at the old budget
	// since (its pause is written only under the old budget, so none
	// comes after this write).
	if b, err = c.Store.GetBatch(ctx, id); err != nil {
		return ledger.Batch{}, err
	}
	if b.Pause != nil && b.Pause.By == api.PauseByBudget {
		if err := c.endPause(ctx, b, api.PauseByBudget, "batch unpaused: its budget was raised"); err != nil {
			return ledger.Batch{}, err
		}
	}
	return c.Store.GetBatch(ctx, id)
}
