package flow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/live"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestMemCeilingExhaustsItems guards "per-item ceilings end an item
// exhausted, not failed; raising the ceiling resumes exactly those
// items", K = 1 and 10: under a ceiling of $0.5 per item, every item
// whose first attempt fails transiently having spent $0.5 or $1 ends
// exhausted after one call (not failed, not retried), and an item whose
// first attempt succeeds having spent $10 stays succeeded. The run stays
// running, the live view and the listings say so with the next move.
// Raising the ceiling to $0.8 wakes exactly the items at $0.5 (the
// others stay, counted), each called exactly once more under duplicate
// deliveries; raising it to $5 wakes the rest; the run completes with
// every item succeeded. A cancel instead settles the exhausted items
// cancelled.
func TestMemCeilingExhaustsItems(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { ceilingExhausts(t, k) })
	}
}

func ceilingExhausts(t *testing.T, k int) {
	ctx := context.Background()
	const n = 20
	last := api.PositionalKey(n - 1)
	indexOf := func(key string) int {
		i, err := strconv.Atoi(strings.TrimLeft(strings.TrimPrefix(key, "item-"), "0"))
		if err != nil {
			return 0
		}
		return i
	}
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		switch {
		case req.Key == last:
			return pipeline.Result{Output: []byte(`{"ok":true}`), Cost: pipeline.Cost{"usd": 10}}, nil
		case req.Attempt > 1:
			return pipeline.Result{Output: []byte(`{"ok":true}`), Cost: pipeline.Cost{"usd": 0.5}}, nil
		}
		usd := 0.5
		if indexOf(req.Key)%2 == 1 {
			usd = 1
		}
		return pipeline.Result{Cost: pipeline.Cost{"usd": usd}}, errors.New("HTTP 503: try later")
	})
	r.wakeHeld()
	submit := func(id string) {
		t.Helper()
		if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k,
			Ceilings: &api.Ceilings{SpendUSD: 0.5}}); err != nil {
			t.Fatal(err)
		}
		r.drain(t, ctx, 1)
	}
	calls := func() map[string]int64 {
		m := map[string]int64{}
		for i := range n {
			m[api.PositionalKey(int64(i))] = r.callsOf(api.PositionalKey(int64(i)))
		}
		return m
	}
	var ie *api.InputError
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "bad", Pipeline: "counted", Source: api.SourceSpec{Items: items(1)},
		Ceilings: &api.Ceilings{Tokens: -3}}); !errors.As(err, &ie) || ie.Field != "ceilings.tokens" {
		t.Fatalf("a ceiling of -3 tokens: %v, want an input error naming ceilings.tokens", err)
	}

	submit("ceil")
	before := calls()
	for key, c := range before {
		it := memItem(t, r, "ceil", key)
		want := api.OutcomeExhausted
		if key == last {
			want = api.OutcomeSucceeded
		}
		if it.Outcome != want || c != 1 {
			t.Errorf("%s: %s after %d calls; want %s after 1", key, it.Outcome, c, want)
		}
		if want == api.OutcomeExhausted && (it.Hold == nil || it.Hold.Subject != api.CeilingSpendUSD || it.Reason != api.ReasonCeiling || !strings.Contains(it.Error, "ceiling $0.5")) {
			t.Errorf("%s: hold %+v, reason %s, error %q; want held at %s", key, it.Hold, it.Reason, it.Error, api.CeilingSpendUSD)
		}
	}
	b, err := r.ctl.Get(ctx, "ceil")
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != api.StatusRunning || b.Ceilings == nil || b.Ceilings.SpendUSD != 0.5 {
		t.Fatalf("batch %s, ceilings %+v; want running under $0.5 per item", b.Status, b.Ceilings)
	}
	if _, err := r.fin.Finalize(ctx, "ceil", 1); err == nil {
		t.Fatal("finalize finished a run whose items are exhausted")
	}
	p, err := r.store.Progress(ctx, "ceil", 1, max(1, b.CounterShards))
	if err != nil {
		t.Fatal(err)
	}
	if lv := live.Of(b, p, r.clock.T, 0); lv.Exhausted != n-1 || lv.InFlight != 0 || lv.Withheld != 0 || !lv.NeedsAttention() {
		t.Errorf("live view %+v; want %d exhausted, none in flight, needing attention", lv, n-1)
	}
	page, err := r.ctl.Items(ctx, "ceil", api.NeedsAttention, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != n-1 || !strings.Contains(page.Items[0].Next, "bulkrun ceilings") {
		t.Fatalf("needs attention: %d items, first %+v; want %d, each with its next move", len(page.Items), page.Items[0], n-1)
	}
	if page, err = r.ctl.Items(ctx, "ceil", api.OutcomeExhausted, "", 100); err != nil || len(page.Items) != n-1 {
		t.Fatalf("exhausted listing: %d items, %v; want %d", len(page.Items), err, n-1)
	}

	// $0.8 wakes the items at $0.5 (even), not those at $1 (odd).
	if _, err := r.ctl.SetCeilings(ctx, "ceil", api.Ceilings{SpendUSD: -1}); !errors.As(err, &ie) || ie.Field != "ceilings.spend_usd" {
		t.Fatalf("a ceiling of $-1: %v, want an input error naming ceilings.spend_usd", err)
	}
	const even, odd = n / 2, n/2 - 1 // the last item (odd) succeeded
	res, err := r.ctl.SetCeilings(ctx, "ceil", api.Ceilings{SpendUSD: 0.8})
	if err != nil || res.Woken != even || res.AlreadyWoken != 0 || res.Still != odd || !res.Done || res.Ceilings.SpendUSD != 0.8 {
		t.Fatalf("raise to $0.8: %+v %v; want %d woken, %d still exhausted, done", res, err, even, odd)
	}
	if again, err := r.ctl.SetCeilings(ctx, "ceil", api.Ceilings{SpendUSD: 0.8}); err != nil || again.Woken != even || again.AlreadyWoken != even || again.Still != odd {
		t.Fatalf("raise to $0.8 again: %+v %v; want the %d woken items found woken (already_woken)", again, err, even)
	}
	r.drain(t, ctx, 2) // duplicate deliveries: each woken item still runs once
	mid := calls()
	for key, c := range mid {
		it := memItem(t, r, "ceil", key)
		switch {
		case key == last:
		case indexOf(key)%2 == 0 && (c != before[key]+1 || it.Outcome != api.OutcomeSucceeded):
			t.Errorf("%s (at $0.5): %s after %d calls, %d before; want succeeded after exactly one more", key, it.Outcome, c, before[key])
		case indexOf(key)%2 == 1 && (c != before[key] || it.Outcome != api.OutcomeExhausted):
			t.Errorf("%s (at $1): %s after %d calls, %d before; want still exhausted, not called", key, it.Outcome, c, before[key])
		}
	}

	if p, err = r.store.Progress(ctx, "ceil", 1, max(1, b.CounterShards)); err != nil {
		t.Fatal(err)
	}
	if lv := live.Of(b, p, r.clock.T, 0); lv.Exhausted != odd || lv.InFlight != 0 {
		t.Errorf("live view after the first raise %+v; want %d exhausted (those woken counted out), none in flight", lv, odd)
	}

	// $5 wakes the rest.
	if res, err = r.ctl.SetCeilings(ctx, "ceil", api.Ceilings{SpendUSD: 5}); err != nil || res.Woken != odd || res.Still != 0 || !res.Done {
		t.Fatalf("raise to $5: %+v %v; want %d woken, none left", res, err, odd)
	}
	r.drain(t, ctx, 2)
	after := calls()
	for key := range after {
		if want := before[key] + 1; key != last && after[key] != want || key == last && after[key] != 1 {
			t.Errorf("%s: %d calls in all; want exactly one more than the %d before the raises", key, after[key], before[key])
		}
	}
	fin, err := r.fin.Finalize(ctx, "ceil", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := fin.Report.Census; c.Succeeded != n || c.Failed != 0 || c.Exhausted != 0 || fin.Report.Status != api.StatusCompleted {
		t.Fatalf("after the raises: %s %+v; want completed, %d succeeded", fin.Report.Status, c, n)
	}

	// Exhausted again, then cancelled: every exhausted item settles
	// cancelled, uncalled.
	submit("cancelled")
	called := calls()
	if _, err := r.ctl.Cancel(ctx, "cancelled"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	fin, err = r.fin.Finalize(ctx, "cancelled", 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := fin.Report.Census; c.Cancelled != n-1 || c.Succeeded != 1 || c.Exhausted != 0 || fin.Report.Status != api.StatusCancelled {
		t.Fatalf("cancelled: %s %+v; want cancelled, %d cancelled", fin.Report.Status, c, n-1)
	}
	for key, c := range calls() {
		if c != called[key] {
			t.Errorf("%s: called %d times after the cancel, want none", key, c-called[key])
		}
	}
}

// TestMemThresholdStopSettlesExhaustedItems guards the stop on a failure
// threshold of a run with exhausted items: they have no message of their
// own, so the stop wakes them and they settle cancelled, uncalled, and
// the run ends threshold_exceeded instead of staying running until a
// cancel (shared/worker wakeToSettle).
func TestMemThresholdStopSettlesExhaustedItems(t *testing.T) {
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			const n = 12
			last := api.PositionalKey(n - 1)
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				switch {
				case req.Key != last:
					return pipeline.Result{Cost: pipeline.Cost{"usd": 1}}, errors.New("HTTP 503: try later") // exhausted at $0.5
				}
				return pipeline.Result{}, pipeline.Permanent(errors.New("HTTP 400: bad input"))
			})
			r.wakeHeld()
			zero := int64(0)
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "stop", Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: k,
				Ceilings: &api.Ceilings{SpendUSD: 0.5}, Threshold: api.Threshold{FailureCount: &zero}}); err != nil {
				t.Fatal(err)
			}
			r.drainBy(t, ctx, 1, 1) // in key order: the others exhausted before the last fails
			fin, err := r.fin.Finalize(ctx, "stop", 1)
			if err != nil {
				t.Fatalf("finalize after the stop: %v; want the run ended, its exhausted items settled", err)
			}
			if c := fin.Report.Census; fin.Report.Status != api.StatusThresholdExceeded || c.Exhausted != 0 || c.Failed != 1 || c.Cancelled != n-1 {
				t.Fatalf("%s %+v; want threshold_exceeded, 1 failed, %d cancelled, none exhausted", fin.Report.Status, c, n-1)
			}
			for i := range n - 1 {
				if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1 (exhausted, then settled uncalled)", api.PositionalKey(int64(i)), c)
				}
			}
		})
	}
}
