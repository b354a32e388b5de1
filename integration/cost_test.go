//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Cost sums drift: ten items of 0.1 usd and 0.07 eur give exactly 1 usd and
// 0.7 eur in the stored report (S3), in the batch row's final census
// (DynamoDB) and in its results lines. Guards the census and report cost
// (docs/design.md, Vocabulary: census).
func TestHarnessCostSumsExact(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"usd": 0.1, "eur": 0.07}}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, batch.SubmitRequest{BatchID: id, Pipeline: "counted", Source: batch.SourceSpec{Items: inlineItems(10)}}); err != nil {
		t.Fatal(err)
	}
	for {
		ds := h.receive(t, 10)
		if len(ds) == 0 {
			break
		}
		h.worker.Handle(ctx, ds)
	}
	if _, err := h.finalizer.Finalize(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	b, err := h.store.GetBatch(ctx, id)
	if err != nil || b.FinalCensus == nil || b.FinalCensus.Cost.String() != "eur=0.7 usd=1" {
		t.Fatalf("batch row census cost: %+v %v", b.FinalCensus, err)
	}
	rep, err := h.blobs.Get(ctx, b.ReportKey)
	if err != nil || !strings.Contains(string(rep), `"cost": {`) && !strings.Contains(string(rep), `"cost":{`) {
		t.Fatalf("report: %s %v", rep, err)
	}
	compact := strings.Join(strings.Fields(string(rep)), "")
	if !strings.Contains(compact, `"cost":{"eur":0.7,"usd":1}`) {
		t.Fatalf("report %s: want cost {\"eur\":0.7,\"usd\":1}", rep)
	}
	lines, err := h.blobs.Get(ctx, batch.ResultsKey(id, 1, batch.OutcomeSucceeded))
	if err != nil || strings.Count(string(lines), `"cost":{"eur":0.07,"usd":0.1}`) != 10 {
		t.Fatalf("results lines: %s %v", lines, err)
	}
}
