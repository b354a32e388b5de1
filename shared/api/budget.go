package api

import (
	"fmt"
	"math"
	"strconv"
)

// A batch's budget (Plan.BudgetUSD) is the most US dollars a run of it
// may spend before it pauses (PauseByBudget): the pipeline's reported
// spend under the cost name SpendCostName (Census.RunSpent["usd"], every
// attempt of the run) plus bulkrun's infrastructure cost that the
// counters carry (Usage: the item function's DynamoDB request units,
// priced by spend.InfraUSD; spend.RunSpend sums them). The counters
// carry no Lambda, SQS, S3 or EventBridge figure, so those are not
// counted (docs/design/cost.md prices them per item). The worker reads
// the counters after its counter writes (at most once per
// judge.DefaultBudgetEvery per run per process) and
// pauses the run once the spend reaches the budget; items already running
// finish, so a run spends past its budget by what was in flight and what
// the counters had not counted yet. Raising the budget
// (POST /batches/{id}/budget) above the spend resumes it.
// docs/adr/0032-budgets-pause-a-batch.md.

// SpendCostName is the cost name a pipeline reports its spend under, in
// US dollars, for the budget: "usd" (pipeline.Cost{"usd": 0.0021}).
const SpendCostName = "usd"

// PauseByBudget: the worker, when the run's spend (spend.RunSpend) reached the
// batch's budget (Plan.BudgetUSD); only raising the budget above the
// spend ends it (POST /batches/{id}/budget; a caller's unpause is
// refused, 409). A budget pause does not probe.
const PauseByBudget PauseBy = "budget"

// USDText is a dollar amount as plain decimal text: 25, 0.5, 12.75.
func USDText(usd float64) string { return strconv.FormatFloat(usd, 'f', -1, 64) }

// MaxBudgetUSD is the largest budget: $10^9.
const MaxBudgetUSD = 1e9

// MinBudgetUSD is the smallest budget: $0.000001, a millionth of a dollar
// (far above the smallest positive number DynamoDB stores, 10^-130:
// "Supported data types and naming rules", Number).
const MinBudgetUSD = 1e-6

// CheckBudget is nil when usd is a valid budget (finite, ≥ MinBudgetUSD
// and ≤ MaxBudgetUSD), else an *InputError naming field.
func CheckBudget(field string, usd float64) error {
	if math.IsNaN(usd) || math.IsInf(usd, 0) || usd < MinBudgetUSD || usd > MaxBudgetUSD {
		return &InputError{Field: field, Reason: fmt.Sprintf("%v is not a budget in US dollars: want a number from %s to %s", usd, USDText(MinBudgetUSD), USDText(MaxBudgetUSD))}
	}
	return nil
}

// BudgetRequest is the body of POST /batches/{id}/budget: the batch's
// new budget in US dollars, > 0 and ≤ MaxBudgetUSD. JSON: {"budget_usd":
// 50}.
type BudgetRequest struct {
	BudgetUSD *float64 `json:"budget_usd"`
}
