//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// TestCeilingExhaustsThenRaise guards "50 items exhausted at a per-item
// ceiling and resumed by raising it", end to end through the API on the
// deployed stack: 50 items of the Python example (the lambda pipeline)
// whose first attempt answers a transient error having spent $0.50, under
// a per-item ceiling of $0.50. Every item ends exhausted after one call —
// none failed, none retried, the batch running, the census, the live view
// and the listing say so with the next move. Raising the ceiling to $2
// through the API wakes the 50; each is called exactly once more (counted
// by the function itself) and succeeds, and the run completes with the
// census exact: 50 succeeded, the run's spend 50 × $1.
func TestCeilingExhaustsThenRaise(t *testing.T) {
	deployExampleFunction(t)
	ctx := context.Background()
	const n = 50
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"text":"item %d","fail":"transient","until_attempt":2,"usd":0.5}`, i))
	}
	id := newID(t)
	t.Cleanup(func() {
		_ = env.api.Forget(context.Background(), id)
		for key := range exampleCallObjects(t, id) {
			_, _ = env.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &env.bucket, Key: aws.String(key)})
		}
	})
	req := api.SubmitRequest{BatchID: id, Pipeline: "lambda", Ceilings: &api.Ceilings{SpendUSD: -1},
		Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(lines, ",") + "]")}, Options: json.RawMessage(`{"function":"` + exampleFunction + `"}`)}
	var ae *client.APIError
	if _, err := env.api.Submit(ctx, req); !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "ceilings.spend_usd" {
		t.Fatalf("a ceiling of $-1: %v, want a 400 naming ceilings.spend_usd", err)
	}
	req.Ceilings = &api.Ceilings{SpendUSD: 0.5}
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	v, err := env.api.WaitUntil(wctx, id, 500*time.Millisecond, func(v wire.BatchView) bool {
		return v.Status.Finished() || v.Census != nil && v.Census.Exhausted == n
	}, nil)
	if err != nil {
		t.Fatalf("wait for %d exhausted items: %v", n, err)
	}
	if c := v.Census; v.Status != api.StatusRunning || c.Exhausted != n || c.Failed != 0 || c.Succeeded != 0 || v.Live == nil || v.Live.Exhausted != n ||
		v.Ceilings == nil || v.Ceilings.SpendUSD != 0.5 {
		t.Fatalf("exhausted: status %s, census %+v, live %+v, ceilings %+v; want running, %d exhausted, none failed", v.Status, v.Census, v.Live, v.Ceilings, n)
	}
	page, err := env.api.Items(ctx, id, api.OutcomeExhausted, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != n || page.Items[0].Hold == nil || page.Items[0].Hold.Subject != api.CeilingSpendUSD || !strings.Contains(page.Items[0].Next, "bulkrun ceilings") {
		t.Fatalf("exhausted listing: %d items, first %+v", len(page.Items), page.Items[0])
	}
	before := exampleCalls(t, id)
	if countCalls(before) != n {
		t.Fatalf("%d calls before the raise, want one per item (%d)", countCalls(before), n)
	}

	res, err := env.api.SetCeilingsAll(ctx, id, api.Ceilings{SpendUSD: 2})
	if err != nil || res.Woken != n || res.Still != 0 || !res.Done || res.Ceilings.SpendUSD != 2 {
		t.Fatalf("raise to $2: %+v %v; want %d woken, none left", res, err, n)
	}
	v = wait(t, id)
	c := v.Census
	if v.Status != api.StatusCompleted || c.Succeeded != n || c.Exhausted != 0 || c.Failed != 0 || !c.RunSpent["usd"].Equal(decimal.NewFromInt(n)) {
		t.Fatalf("after the raise: %s %+v; want completed, %d succeeded, run_spent usd=%d", v.Status, c, n, n)
	}
	calls := exampleCalls(t, id)
	if len(calls) != n {
		t.Errorf("%d items called, want %d", len(calls), n)
	}
	for key, cs := range calls {
		if len(cs) != 2 || !contains(cs, "1-transient") || !contains(cs, "2-ok") {
			t.Errorf("item %s: calls %v, want exactly two: 1-transient, then 2-ok", key, cs)
		}
	}
}
