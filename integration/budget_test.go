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

// TestBudgetPauseOnTheEmulator guards "a budget that pauses", end to end
// through the API on the deployed stack: 30 items of the Python example
// (the lambda pipeline), each reporting $0.50 spent, one at a time
// (max_concurrency 1), under a budget of $3. The run pauses by its budget
// once its counters reach $3; its calls stop (what was running then
// finishes); an unpause and a budget not above the spend are refused
// (409); raising the budget to $100 resumes it, and every item succeeds,
// each called once, the run's spend exactly 30 × $0.50.
func TestBudgetPauseOnTheEmulator(t *testing.T) {
	deployExampleFunction(t)
	ctx := context.Background()
	const n = 30
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"text":"item %d","usd":0.5}`, i))
	}
	id := newID(t)
	t.Cleanup(func() {
		_ = env.api.Forget(context.Background(), id)
		for key := range exampleCallObjects(t, id) {
			_, _ = env.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &env.bucket, Key: aws.String(key)})
		}
	})
	bad := -2.0
	_, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "lambda", BudgetUSD: &bad,
		Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(lines, ",") + "]")}, Options: json.RawMessage(`{"function":"` + exampleFunction + `"}`)})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "budget_usd" {
		t.Fatalf("a budget of -2: %v, want a 400 naming budget_usd", err)
	}
	budget := 3.0
	start := time.Now()
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "lambda", BudgetUSD: &budget, MaxConcurrency: 1, ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(lines, ",") + "]")}, Options: json.RawMessage(`{"function":"` + exampleFunction + `"}`)}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	v, err := env.api.WaitUntil(wctx, id, 250*time.Millisecond, func(v wire.BatchView) bool { return v.Pause != nil || v.Status.Finished() }, nil)
	if err != nil {
		t.Fatalf("wait for the budget pause: %v", err)
	}
	if v.Status.Finished() || v.Pause.By != api.PauseByBudget || !strings.HasPrefix(v.Pause.Error, "budget $3 reached ($") {
		t.Fatalf("batch %s, pause %+v: want running, paused by its budget of $3", v.Status, v.Pause)
	}
	pausedAt := time.Now()
	// What was running at the pause finishes; then nothing more is called.
	time.Sleep(inFlightGrace)
	atPause := countCalls(exampleCalls(t, id))
	time.Sleep(10 * time.Second)
	later := countCalls(exampleCalls(t, id))
	if later != atPause || atPause >= n {
		t.Fatalf("calls: %d %s after the pause, %d ten seconds later, of %d items: want none after the in-flight ones", atPause, inFlightGrace, later, n)
	}
	v, err = env.api.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	spent := decimal.Zero
	if v.Census != nil {
		spent = v.Census.RunSpent["usd"]
	}
	if v.Pause == nil || spent.LessThan(decimal.NewFromInt(3)) || v.Census.Succeeded != int64(atPause) {
		t.Fatalf("while paused: pause %+v, census %+v: want paused, run_spent usd ≥ 3, %d succeeded (every call so far)", v.Pause, v.Census, atPause)
	}
	if _, err := env.api.Unpause(ctx, id); !errors.As(err, &ae) || ae.Status != 409 {
		t.Fatalf("unpause of a budget pause: %v, want 409", err)
	}
	if _, err := env.api.SetBudget(ctx, id, 2); !errors.As(err, &ae) || ae.Status != 409 || !strings.Contains(ae.Body.Message, "has spent") {
		t.Fatalf("a budget below the spend: %v, want 409 naming the spend", err)
	}
	if v, err = env.api.SetBudget(ctx, id, 100); err != nil || v.Pause != nil || v.BudgetUSD != 100 {
		t.Fatalf("raise to $100: pause %+v, budget %v, %v: want unpaused at $100", v.Pause, v.BudgetUSD, err)
	}
	raisedAt := time.Now()
	v = wait(t, id)
	c := v.Census
	if v.Status != api.StatusCompleted || c.Succeeded != n || !c.RunSpent["usd"].Equal(decimal.NewFromInt(15)) || !c.Cost["usd"].Equal(decimal.NewFromInt(15)) {
		t.Fatalf("finished: %s %+v, want completed, %d succeeded, run_spent and cost usd=15", v.Status, c, n)
	}
	calls := exampleCalls(t, id)
	if len(calls) != n {
		t.Errorf("%d items called, want %d", len(calls), n)
	}
	for key, cs := range calls {
		if len(cs) != 1 || cs[0] != "1-ok" {
			t.Errorf("item %s: calls %v, want one, answered", key, cs)
		}
	}
	t.Logf("paused at +%s after %d calls (spent $%s of $3), raised at +%s, finished at +%s",
		pausedAt.Sub(start).Round(time.Second), atPause, spent, raisedAt.Sub(start).Round(time.Second), time.Since(start).Round(time.Second))
}
