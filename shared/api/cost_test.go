package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Cost sums drift: a census counted from ten items of 0.1 usd and 0.07 eur
// carries exactly 1 usd and 0.7 eur, in the report's JSON too. Guards the
// census and report cost (docs/design.md, Vocabulary: census).
func TestCensusCostSumsExact(t *testing.T) {
	var c Census
	for range 10 {
		c.Add(OutcomeSucceeded, pipeline.Cost{"usd": 0.1, "eur": 0.07})
	}
	b, err := json.Marshal(Report{Census: c})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"cost":{"eur":0.7,"usd":1}`) {
		t.Fatalf("report JSON %s, want cost {\"eur\":0.7,\"usd\":1}", b)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Census.Cost.Text("usd") != "1" || back.Census.Cost.Text("eur") != "0.7" {
		t.Fatalf("read back: %v %v", back.Census.Cost, err)
	}
}
