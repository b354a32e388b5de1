package cli

import (
	"bytes"
	"testing"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Cost sums drift: the CLI prints summed costs in plain decimal, without
// binary-float noise. Guards `bulkrun status` and `bulkrun report`
// (README, The command line).
func TestPrintCostExact(t *testing.T) {
	sum := pipeline.CostSum{}
	for range 10 {
		sum.Add(pipeline.Cost{"usd": 0.1, "eur": 0.07, "tokens": 1e-7})
	}
	var out bytes.Buffer
	(&app{out: &out}).printCost(sum)
	if want := "cost:  eur 0.7  tokens 0.000001  usd 1\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
	out.Reset()
	(&app{out: &out}).printCost(nil)
	if out.Len() != 0 {
		t.Fatalf("no costs printed %q, want nothing", out.String())
	}
}
