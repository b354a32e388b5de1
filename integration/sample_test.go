//go:build integration

package integration

import (
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/spend"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// TestSampleThenApproveOnTheStack guards "sample, estimate, approve"
// (docs/api.md, "Sample and approve") on the deployed stack, by the
// receiver's own log: 2,000 webhook items, 10 a message, sampled at 200;
// each answer reports `Bulkrun-Cost: usd=0.01`, and one item in 25 is
// refused with a 400 (failed, permanent). Until the approval the receiver
// sees exactly the first 200 items, each once, and nothing more for 20 s
// after the estimate is written; the estimate projects the whole run.
// Approved, every item is called exactly once, 1,920 succeed and 80 fail,
// and the estimate is compared with what the run did: the pipeline's
// spend exactly, the whole spend (with DynamoDB) within 15 %, the failure
// rate inside the interval; the time is logged beside the actual, and
// the rest's first call comes by the hold's next check after the
// approval (api.ApprovalReachesBy) with 15 s of slack.
// A repeated submit with another sample is 409 naming sample, and a
// reject after the approval is 409. BULKRUN_SAMPLE_ITEMS sets another
// number of items (a multiple of 25; 20000 measures a larger run), and
// BULKRUN_SAMPLE_DELAY_MS how long the receiver takes to answer (0: at
// once, when an item's time is the emulator's own and bound by its two
// cores; docs/api.md gives both).
func TestSampleThenApproveOnTheStack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const sample = 200
	items := 2000
	if v := os.Getenv("BULKRUN_SAMPLE_ITEMS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2*sample || n%25 != 0 {
			t.Fatalf("BULKRUN_SAMPLE_ITEMS=%q: want a multiple of 25 of at least %d", v, 2*sample)
		}
		items = n
	}
	var delay time.Duration // how long the receiver takes to answer a call
	if v := os.Getenv("BULKRUN_SAMPLE_DELAY_MS"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || ms > 10_000 {
			t.Fatalf("BULKRUN_SAMPLE_DELAY_MS=%q: want milliseconds, 0–10000", v)
		}
		delay = time.Duration(ms) * time.Millisecond
	}
	id := newID(t)
	var mu sync.Mutex
	var first, last time.Time   // the receiver's first and last call after the approval
	var sFirst, sLast time.Time // the receiver's first and last call of the sample
	var approved time.Time
	u := env.hook.routeAnswer(id, func(w http.ResponseWriter, _ *http.Request, key string, _ []byte) int {
		w.Header().Set("Bulkrun-Cost", "usd=0.01")
		time.Sleep(delay)
		mu.Lock()
		now := time.Now()
		switch {
		case !approved.IsZero():
			if first.IsZero() {
				first = now
			}
			last = now
		case sFirst.IsZero():
			sFirst, sLast = now, now
		default:
			sLast = now
		}
		mu.Unlock()
		if n, _ := strconv.Atoi(strings.TrimPrefix(key, "item-")); n%25 == 0 {
			return 400
		}
		return 200
	})
	req := webhookRequest(id, u, inlineItems(items))
	req.ItemsPerMessage, req.Sample = 10, sample
	start := time.Now()
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	v := awaitEstimate(t, ctx, id)
	var err error
	sampled := time.Now()
	e := v.Approval.Estimate
	if v.Status.Finished() || e == nil {
		t.Fatalf("status %s, approval %+v: want running, awaiting approval with an estimate", v.Status, v.Approval)
	}
	if l := v.Live; l == nil || len(l.Attention) == 0 || !strings.Contains(strings.Join(l.Attention, "; "), "awaiting approval") || l.Stalled {
		t.Errorf("live view %+v: want an attention line saying awaiting approval, not stalled", l)
	}
	onlyTheSampleCalled(t, id, sample, 20*time.Second)
	if e.Items != int64(items) || e.SampleItems != sample || e.Failed != sample/25 {
		t.Errorf("estimate %+v: want %d sample items of %d, %d failed", *e, sample, items, sample/25)
	}
	mu.Lock()
	approved = time.Now()
	mu.Unlock()
	if v, err = env.api.Approve(ctx, id); err != nil || v.Approval.State != api.ApprovalApproved || v.Approval.DecidedBy != api.DecidedByCaller {
		t.Fatalf("approve: %+v, %v", v.Approval, err)
	}
	var ae *client.APIError
	if _, err := env.api.Reject(ctx, id); !errors.As(err, &ae) || ae.Status != 409 {
		t.Errorf("reject after the approval: %v, want 409", err)
	}
	again := req
	again.Sample = 100
	if _, err := env.api.Submit(ctx, again); !errors.As(err, &ae) || ae.Status != 409 || ae.Body.Field != "sample" {
		t.Errorf("a repeated submit with another sample: %v, want 409 naming sample", err)
	}
	wctx2, cancel2 := context.WithTimeout(ctx, 5*time.Minute+time.Duration(items/50)*time.Second)
	defer cancel2()
	if v, err = env.api.Wait(wctx2, id, time.Second, nil); err != nil {
		t.Fatalf("wait for the run: %v", err)
	}
	c := v.Census
	if v.Status != api.StatusCompleted || c == nil || c.Succeeded != int64(items-items/25) || c.Failed != int64(items/25) {
		t.Fatalf("status %s, census %+v: want %d succeeded, %d failed", v.Status, c, items-items/25, items/25)
	}
	calls := env.hook.counts(id)
	if len(calls) != items {
		t.Errorf("%d items called, want %d", len(calls), items)
	}
	for key, n := range calls {
		if n != 1 {
			t.Errorf("item %s called %d times, want once", key, n)
		}
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	pipe, _ := c.RunSpent["usd"].Float64()
	infra, _ := spend.InfraUSD(rep.Usage).Float64()
	actual := pipe + infra
	rate := float64(c.Failed) / float64(items)
	if math.Abs(e.PipelineUSD-pipe) > 1e-6 {
		t.Errorf("estimated pipeline spend $%v, actual $%v: want the same (every item reports $0.01)", e.PipelineUSD, pipe)
	}
	if math.Abs(e.CostUSD-actual) > 0.15*actual {
		t.Errorf("estimated spend $%v, actual $%v (pipeline $%v, DynamoDB $%v): want within 15 %%", e.CostUSD, actual, pipe, infra)
	}
	if rate < e.FailureLow || rate > e.FailureHigh {
		t.Errorf("failure rate %.4f outside the estimate's interval %.4f–%.4f", rate, e.FailureLow, e.FailureHigh)
	}
	mu.Lock()
	rest, firstAfter := last.Sub(first), first.Sub(approved)
	reach := api.ApprovalReachesBy(e.MadeAt, approved).Sub(approved)
	mu.Unlock()
	// The rest starts at the hold's next check after the approval (every
	// 10 s in its first 10 minutes), plus the item function's receive:
	// 15 s of slack for a loaded emulator (the checks before were 30 s
	// then every minute, 15–30 s after each: 25–40 s here).
	if firstAfter > reach+15*time.Second {
		t.Errorf("the rest's first call %s after the approval, want by the hold's next check (%s after it) + 15 s", firstAfter.Round(time.Millisecond), reach)
	}
	// The report's own comparison says what the test worked out above.
	switch sc := rep.Sample; {
	case sc == nil:
		t.Error("the report of a run approved on an estimate has no sample check")
	case sc.Estimate.CostUSD != e.CostUSD || math.Abs(sc.CostUSD-actual) > 1e-6 || sc.Ended != c.Succeeded+c.Failed+c.Quarantined ||
		sc.Failed != c.Failed+c.Quarantined || sc.FailureInInterval != (rate >= e.FailureLow && rate <= e.FailureHigh) || sc.RestSeconds < rest.Seconds() ||
		sc.ReachSeconds < 0 || sc.ReachSeconds > 12: // approved within 10 minutes of the estimate: the next check (≤ 10 s) + 2 s
		t.Errorf("report's sample check %+v: want the estimate's $%v beside $%v spent, %d of %d failed, the rest ≥ %v from the approval, the approval's reach %v", sc, e.CostUSD, actual, c.Failed, items, rest, reach)
	default:
		t.Logf("report: cost %+.4f %% against the estimate, failures %.2f %% (in the interval: %v), the rest %.1f s from the approval against %.0f s estimated + %.1f s for the approval to reach the held items (%+.0f %%)",
			100*sc.CostDiff, 100*sc.FailureRate, sc.FailureInInterval, sc.RestSeconds, sc.Estimate.Seconds, sc.ReachSeconds, 100*sc.RestDiff)
	}
	mu.Lock()
	t.Logf("sample: the receiver's first call %.2f s after the submit, its last %.2f s after it (%.1f calls/s between them)",
		sFirst.Sub(start).Seconds(), sLast.Sub(start).Seconds(), float64(sample-1)/max(sLast.Sub(sFirst).Seconds(), 1e-3))
	mu.Unlock()
	t.Logf("sample: %d items ended %.1f s after the submit (estimate made %s after it); estimate: $%.6f (pipeline $%.2f, DynamoDB $%.6f), failures %.2f %% (%.2f–%.2f %%), the rest %.0f s at %.1f items/s (%s)",
		e.SampleItems, e.SampleSeconds, sampled.Sub(start).Round(time.Second), e.CostUSD, e.PipelineUSD, e.InfraUSD, 100*e.FailureRate, 100*e.FailureLow, 100*e.FailureHigh, e.Seconds, e.ItemsPerSecond, e.Pace)
	t.Logf("actual: $%.6f (pipeline $%.2f, DynamoDB $%.6f: %.1f write, %.1f read units), spend %+.1f %% against the estimate; failures %.2f %%; the rest's calls from %s after the approval over %s (%.1f items/s), estimated %.0f s (%+.0f %%)",
		actual, pipe, infra, rep.Usage.DynamoDBWriteUnits, rep.Usage.DynamoDBReadUnits, 100*(e.CostUSD-actual)/actual, 100*rate,
		first.Sub(approved).Round(time.Second), rest.Round(time.Second), float64(items-sample)/rest.Seconds(), e.Seconds, 100*(e.Seconds-rest.Seconds())/rest.Seconds())
}

// TestSampleOnTracksOnTheStack guards a sample taken with
// max_concurrency (docs/api.md, "Sample and approve") on the deployed
// stack: 200 webhook items, one a message, max_concurrency 4, sampled at
// 40, against a receiver that answers each call after 300 ms. Until the
// approval the receiver sees exactly items 0–39, once each, and nothing
// more for 15 s after the estimate (the tracks hold at the sample's
// end); approved, every item is called exactly once and the receiver
// never has more than 4 calls open, before or after the approval.
func TestSampleOnTracksOnTheStack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const items, sample, limit = 200, 40, 4
	id := newID(t)
	var rcv slowReceiver
	req := webhookRequest(id, env.hook.route(id, rcv.decide), inlineItems(items))
	req.ItemsPerMessage, req.Sample, req.MaxConcurrency = 1, sample, limit
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	v := awaitEstimate(t, ctx, id)
	e := v.Approval.Estimate
	if v.Status.Finished() || e == nil || e.SampleItems != sample || e.Items != items {
		t.Fatalf("status %s, approval %+v: want running, awaiting approval with an estimate of %d sample items of %d", v.Status, v.Approval, sample, items)
	}
	onlyTheSampleCalled(t, id, sample, 15*time.Second)
	approved := time.Now()
	if _, err := env.api.Approve(ctx, id); err != nil {
		t.Fatalf("approve: %v", err)
	}
	v = wait(t, id)
	rest := time.Since(approved)
	if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != items {
		t.Fatalf("status %s, census %+v: want completed, %d succeeded", v.Status, v.Census, items)
	}
	calls := env.hook.counts(id)
	for j := range items {
		if c := calls[api.PositionalKey(int64(j))]; c != 1 {
			t.Errorf("item %d called %d times, want once", j, c)
		}
	}
	if m := rcv.most(); m > limit {
		t.Errorf("the receiver had %d calls open at once, want at most %d", m, limit)
	}
	t.Logf("estimate: %d s for the rest at %.1f items/s (%s); the rest took %.1f s from the approval to the status completed (the tracks come back at the hold's next check); at most %d calls open",
		int(e.Seconds), e.ItemsPerSecond, e.Pace, rest.Seconds(), rcv.most())
}

// awaitEstimate waits (3 minutes at most) until batch id awaits approval
// or has finished, and returns its view.
func awaitEstimate(t *testing.T, ctx context.Context, id string) wire.BatchView {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	v, err := env.api.WaitUntil(wctx, id, 500*time.Millisecond, func(v wire.BatchView) bool {
		return v.Approval != nil && v.Approval.State == api.ApprovalAwaiting || v.Status.Finished()
	}, nil)
	if err != nil {
		t.Fatalf("wait for the estimate: %v", err)
	}
	return v
}

// onlyTheSampleCalled waits for (after the estimate) and then checks
// that the receiver called exactly the sample's items of batch id (keys
// item-0 … item-{sample−1}), each once: the rest is held.
func onlyTheSampleCalled(t *testing.T, id string, sample int, wait time.Duration) {
	t.Helper()
	time.Sleep(wait)
	calls := env.hook.counts(id)
	if len(calls) != sample {
		t.Fatalf("%d items called before the approval (%s after the estimate), want the sample's %d", len(calls), wait, sample)
	}
	for key, n := range calls {
		if i, _ := strconv.Atoi(strings.TrimPrefix(key, "item-")); i >= sample || n != 1 {
			t.Errorf("before the approval: item %s called %d times, want only items below %d, once", key, n, sample)
		}
	}
}
