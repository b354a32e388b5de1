//go:build integration

package integration

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// TestCostCountsEveryAttempt guards docs/pipelines.md "Pipelines" (cost records): the census
// and report carry `cost` (what the attempt that ended each item spent) and
// `run_spent` (what every attempt of this run spent). Before, the rollup
// counted only ending attempts (a webhook answered 429 twice then 200 was
// one call, not three), and a resumed run's report showed the whole
// batch's cost as if that run had spent it.
func TestCostCountsEveryAttempt(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	ctx := context.Background()
	id := newID(t)
	throttled, broken := api.PositionalKey(1), api.PositionalKey(2)
	var healed atomic.Bool
	url := env.hook.routeOwn(t, id, func(key string, attempt int) int {
		switch {
		case key == throttled && attempt <= 2:
			return 429
		case key == broken && !healed.Load():
			return 422
		}
		return 200
	})
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(3))); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Census.Succeeded != 2 || v.Census.Failed != 1 {
		t.Fatalf("run 1: %s %+v", v.Status, v.Census)
	}
	if c := env.hook.counts(id)[throttled]; c != 3 {
		t.Fatalf("%s: %d calls, want 3 (429, 429, 200)", throttled, c)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []api.Census{*v.Census, rep.Census} {
		if c.Cost.Text("calls") != "3" || c.RunSpent.Text("calls") != "5" {
			t.Fatalf("run 1: cost %v, run_spent %v; want calls 3 ending, 5 spent", c.Cost, c.RunSpent)
		}
	}

	healed.Store(true)
	if _, err := env.api.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	v = wait(t, id)
	if v.Run != 2 || v.Census.Succeeded != 3 {
		t.Fatalf("run 2: run %d %s %+v", v.Run, v.Status, v.Census)
	}
	if rep, err = env.api.Report(ctx, id); err != nil || rep.Run != 2 {
		t.Fatalf("report of run 2: run %d, %v", rep.Run, err)
	}
	// The resumed run called the pipeline once: that is what it spent; the
	// ending attempts of all three items still cost three calls.
	for _, c := range []api.Census{*v.Census, rep.Census} {
		if c.Cost.Text("calls") != "3" || c.RunSpent.Text("calls") != "1" {
			t.Fatalf("run 2: cost %v, run_spent %v; want calls 3 ending, 1 spent by this run", c.Cost, c.RunSpent)
		}
	}
}
