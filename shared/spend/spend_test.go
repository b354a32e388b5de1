package spend_test

import (
	"errors"
	"math"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/spend"
)

// The budget's spend: the pipeline's usd plus the DynamoDB units at
// $0.625 / $0.125 per 10^6, exact; other cost names are not dollars.
func TestRunSpend(t *testing.T) {
	spent := pipeline.CostSum{"usd": decimal.RequireFromString("2.5"), "calls": decimal.NewFromInt(1000), "tokens": decimal.NewFromInt(9e6)}
	s := spend.RunSpend(spent, api.Usage{DynamoDBWriteUnits: 2_000_000, DynamoDBReadUnits: 400_000})
	if s.Pipeline.String() != "2.5" || s.Infra.String() != "1.3" || s.USD.String() != "3.8" {
		t.Fatalf("spend %s = %s + %s, want 3.8 = 2.5 + 1.3 (1.25 of writes, 0.05 of reads)", s.USD, s.Pipeline, s.Infra)
	}
	if !s.Reached(3.8) || !s.Reached(3) || s.Reached(3.81) || s.Reached(0) {
		t.Errorf("reached: 3.8 %v, 3 %v, 3.81 %v, 0 %v: want true, true, false, false", s.Reached(3.8), s.Reached(3), s.Reached(3.81), s.Reached(0))
	}
	if none := spend.RunSpend(nil, api.Usage{}); !none.USD.IsZero() || none.Reached(0.01) {
		t.Errorf("no spend: %s, reached $0.01 %v", none.USD, none.Reached(0.01))
	}
	want := "budget $3.5 reached ($3.8 spent: pipeline $2.5, DynamoDB $1.3; Lambda and SQS not counted)"
	if got := spend.BudgetText(3.5, s); got != want {
		t.Errorf("text %q, want %q", got, want)
	}
}

// A budget is a finite amount > 0 and ≤ $10^9; anything else is an
// input error naming the field given.
func TestCheckBudget(t *testing.T) {
	for _, ok := range []float64{0.01, 25, 1e9} {
		if err := api.CheckBudget("budget_usd", ok); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1), 1e9 + 1} {
		var ie *api.InputError
		if err := api.CheckBudget("--budget", bad); !errors.As(err, &ie) || ie.Field != "--budget" {
			t.Errorf("%v: %v, want an input error naming --budget", bad, err)
		}
	}
}

// A spend under $0.0001 reads with its digits, not as $0; others to 4
// places.
func TestSpendText(t *testing.T) {
	for in, want := range map[string]string{"0": "0", "0.0000085": "0.0000085", "0.00000000012": "0", "1.234567": "1.2346", "0.0001": "0.0001"} {
		if got := spend.SpendText(decimal.RequireFromString(in)); got != want {
			t.Errorf("spend.SpendText(%s) = %s, want %s", in, got, want)
		}
	}
}
