//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/shared/api"
)

// docText is a page of the manual with its white space collapsed, so that
// a phrase matches whatever its line breaks.
func docText(t *testing.T, page string) string {
	t.Helper()
	raw, err := os.ReadFile("../" + page)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(raw)), " ")
}

// TestDocsStateTheRunningCensus holds docs/api.md and docs/operations.md
// to what GET /batches/{id} answers for a running batch: its census
// comes from the run's counters, in_flight counts the items fanned out
// and not ended (the live view's in_flight + retry_waiting), pending
// those not fanned out yet, and cost and run_spent are the items' ended
// so far. The pages once said that items being run count as pending
// with in_flight 0, and that the counters' census has no cost.
func TestDocsStateTheRunningCensus(t *testing.T) {
	t.Parallel()
	apiPage, ops := docText(t, "docs/api.md"), docText(t, "docs/operations.md")
	for _, c := range []struct{ page, text, phrase string }{
		{"docs/api.md", apiPage, "in_flight the items fanned out and not ended (live in_flight + retry_waiting"},
		{"docs/api.md", apiPage, "pending the items not fanned out yet (live not_fanned_out)"},
		{"docs/api.md", apiPage, "cost and run_spent those of the items ended so far"},
		{"docs/operations.md", ops, "`in_flight` the items fanned out and not ended, `pending` those not fanned out yet, and the cost so far"},
		{"docs/operations.md", ops, "In the census of a running batch (`census_source: counters`), `in_flight` is `in_flight` + `retry_waiting` and `pending` is `not_fanned_out`"},
	} {
		if !strings.Contains(c.text, c.phrase) {
			t.Errorf("%s does not say %q", c.page, c.phrase)
		}
	}
	for _, c := range []struct{ page, text, wrong string }{
		{"docs/api.md", apiPage, "in_flight is 0"},
		{"docs/api.md", apiPage, "items being run count as pending"},
		{"docs/operations.md", ops, "items in flight among the pending"},
		{"docs/operations.md", ops, "no cost;"},
	} {
		if strings.Contains(c.text, c.wrong) {
			t.Errorf("%s says %q", c.page, c.wrong)
		}
	}

	// A running batch whose receiver holds each call 3 s: its census while
	// it runs is as the pages say.
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, func(string, int) int { time.Sleep(3 * time.Second); return 200 })
	var items []string
	for i := range 12 {
		items = append(items, fmt.Sprintf(`{"k":"k%02d"}`, i))
	}
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1, MaxConcurrency: 4,
		Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url)), Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(items, ",") + "]")}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })
	sawInFlight, sawCost := false, false
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	_, err := env.api.WaitUntil(wctx, id, 500*time.Millisecond, func(v handler.BatchView) bool { return v.Status.Finished() }, func(v handler.BatchView) {
		if v.Status != api.StatusRunning || v.Census == nil || v.Live == nil {
			return
		}
		c, l := v.Census, v.Live
		if v.CensusSource != "counters" {
			t.Errorf("a running batch's census from %q, want counters", v.CensusSource)
		}
		if c.InFlight != l.InFlight+l.RetryWaiting || c.Pending != l.NotFannedOut+l.HeldForApproval+l.AwaitingTrack {
			t.Errorf("running census in_flight %d, pending %d; live in_flight %d + retry_waiting %d, not_fanned_out %d",
				c.InFlight, c.Pending, l.InFlight, l.RetryWaiting, l.NotFannedOut)
		}
		sawInFlight = sawInFlight || c.InFlight > 0
		if c.Succeeded > 0 {
			sawCost = sawCost || !c.Cost["calls"].IsZero()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawInFlight || !sawCost {
		t.Errorf("while it ran: items in flight seen %v, the cost so far seen %v; want both", sawInFlight, sawCost)
	}
}
