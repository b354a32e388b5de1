package api

import (
	"fmt"
	"math"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// A batch's budget (Plan.BudgetUSD) is the most US dollars a run of it
// may spend before it pauses (PauseByBudget): the pipeline's reported
// spend under the cost name SpendCostName (Census.RunSpent["usd"], every
// attempt of the run) plus bulkrun's infrastructure cost that the
// counters carry (Usage: the item function's DynamoDB request units,
// priced by InfraUSD). The counters carry no Lambda, SQS, S3 or
// EventBridge figure, so those are not counted (docs/design/cost.md
// prices them per item). The worker reads the counters after its counter
// writes (at most once per BudgetCheckEvery per batch per process) and
// pauses the run once the spend reaches the budget; items already running
// finish, so a run spends past its budget by what was in flight and what
// the counters had not counted yet. Raising the budget
// (POST /batches/{id}/budget) above the spend resumes it.
// docs/adr/0032-budgets-pause-a-batch.md.

// SpendCostName is the cost name a pipeline reports its spend under, in
// US dollars, for the budget: "usd" (pipeline.Cost{"usd": 0.0021}).
const SpendCostName = "usd"

// PauseByBudget: the worker, when the run's spend (RunSpend) reached the
// batch's budget (Plan.BudgetUSD); only raising the budget above the
// spend ends it (POST /batches/{id}/budget; a caller's unpause is
// refused, 409). A budget pause does not probe.
const PauseByBudget PauseBy = "budget"

// DynamoDB on-demand prices, us-east-1, US dollars per request unit:
// "Amazon DynamoDB pricing for on-demand capacity"
// (https://aws.amazon.com/dynamodb/pricing/on-demand/), Standard table
// class, since 1 November 2024: $0.625 per million write request units,
// $0.125 per million read request units.
var (
	USDPerWriteUnit = decimal.RequireFromString("0.000000625")
	USDPerReadUnit  = decimal.RequireFromString("0.000000125")
)

// InfraUSD is what u's DynamoDB request units cost at on-demand prices
// (USDPerWriteUnit, USDPerReadUnit), in US dollars. Lambda, SQS, S3 and
// EventBridge are not in Usage, so not in it.
func InfraUSD(u Usage) decimal.Decimal {
	return decimal.NewFromFloat(u.DynamoDBWriteUnits).Mul(USDPerWriteUnit).
		Add(decimal.NewFromFloat(u.DynamoDBReadUnits).Mul(USDPerReadUnit))
}

// Spend is what a run spent as its budget counts it, in US dollars:
// Pipeline is the pipeline's reported spend (RunSpent[SpendCostName]),
// Infra the DynamoDB request units' cost (InfraUSD). JSON: {"usd":
// "25.0312", "pipeline_usd": "25.03", "infra_usd": "0.0012"}.
type Spend struct {
	USD      decimal.Decimal `json:"usd"`
	Pipeline decimal.Decimal `json:"pipeline_usd"`
	Infra    decimal.Decimal `json:"infra_usd"`
}

// RunSpend is the Spend of a run whose counters sum spent (the run's
// spend by cost name) and usage.
func RunSpend(spent pipeline.CostSum, usage Usage) Spend {
	p, i := spent[SpendCostName], InfraUSD(usage)
	return Spend{USD: p.Add(i), Pipeline: p, Infra: i}
}

// Reached reports whether s reached a budget of usd dollars (usd > 0).
func (s Spend) Reached(usd float64) bool {
	return usd > 0 && s.USD.GreaterThanOrEqual(decimal.NewFromFloat(usd))
}

// BudgetText is a budget pause's text (Pause.Error): "budget $25
// reached ($25.0312 spent: pipeline $25.03, DynamoDB $0.0012; Lambda and
// SQS not counted)", amounts rounded to 4 decimals.
func BudgetText(usd float64, s Spend) string {
	return fmt.Sprintf("budget $%s reached ($%s spent: pipeline $%s, DynamoDB $%s; Lambda and SQS not counted)",
		USDText(usd), s.USD.Round(4).String(), s.Pipeline.Round(4).String(), s.Infra.Round(4).String())
}

// USDText is a dollar amount as plain decimal text: 25, 0.5, 12.75.
func USDText(usd float64) string { return decimal.NewFromFloat(usd).String() }

// MaxBudgetUSD is the largest budget: $10^9.
const MaxBudgetUSD = 1e9

// CheckBudget is nil when usd is a valid budget (finite, > 0 and ≤
// MaxBudgetUSD), else an *InputError naming field.
func CheckBudget(field string, usd float64) error {
	if math.IsNaN(usd) || math.IsInf(usd, 0) || usd <= 0 || usd > MaxBudgetUSD {
		return &InputError{Field: field, Reason: fmt.Sprintf("%v is not a budget in US dollars: want a number > 0 and ≤ %s", usd, USDText(MaxBudgetUSD))}
	}
	return nil
}

// BudgetRequest is the body of POST /batches/{id}/budget: the batch's
// new budget in US dollars, > 0 and ≤ MaxBudgetUSD. JSON: {"budget_usd":
// 50}.
type BudgetRequest struct {
	BudgetUSD *float64 `json:"budget_usd"`
}
