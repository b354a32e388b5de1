// Package spend is what a run spent as a batch's budget counts it: the
// pipeline's reported "usd" plus the DynamoDB request units at on-demand
// prices, from the run's counters (ledger.Progress.Spent and .Usage). The
// budget's pause (shared/worker), its raise (shared/control) and a
// sample's estimate (shared/sample's callers) read it.
package spend

import (
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// What a batch's budget counts (api.Batch.BudgetUSD, api.PauseByBudget):
// a run's spend as its counters carry it (ledger.Progress.Spent, ledger.Progress.Usage).

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
// EventBridge are not in api.Usage, so not in it.
func InfraUSD(u api.Usage) decimal.Decimal {
	return decimal.NewFromFloat(u.DynamoDBWriteUnits).Mul(USDPerWriteUnit).
		Add(decimal.NewFromFloat(u.DynamoDBReadUnits).Mul(USDPerReadUnit))
}

// Spend is what a run spent as its budget counts it, in US dollars:
// Pipeline is the pipeline's reported spend (RunSpent[api.SpendCostName]),
// Infra the DynamoDB request units' cost (InfraUSD), USD their sum.
type Spend struct {
	USD, Pipeline, Infra decimal.Decimal
}

// RunSpend is the Spend of a run whose counters sum spent (the run's
// spend by cost name) and usage.
func RunSpend(spent pipeline.CostSum, usage api.Usage) Spend {
	p, i := spent[api.SpendCostName], InfraUSD(usage)
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
		api.USDText(usd), SpendText(s.USD), SpendText(s.Pipeline), SpendText(s.Infra))
}

// SpendText is d in US dollars to 4 places, or to 9 when it is under
// $0.0001 and not 0 (a small budget's spend does not read "$0").
func SpendText(d decimal.Decimal) string {
	if !d.IsZero() && d.Abs().LessThan(decimal.New(1, -4)) {
		return d.Round(9).String()
	}
	return d.Round(4).String()
}
