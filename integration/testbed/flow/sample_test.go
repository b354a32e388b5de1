package flow

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/integration/testbed/eventschema"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// sampledPipeline reports $0.01 per call and fails, permanently, every
// item whose key ends in 7 (one in ten).
func sampledPipeline(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
	if strings.HasSuffix(req.Key, "7") {
		return pipeline.Result{Cost: pipeline.Cost{"usd": 0.01}}, pipeline.Permanent(errors.New("HTTP 422: refused"))
	}
	return pipeline.Result{Output: []byte(`{"ok":true}`), Cost: pipeline.Cost{"usd": 0.01}}, nil
}

// submitSampled submits n items at 10 a message, sampling sample.
func (r *rig) submitSampled(t *testing.T, ctx context.Context, id string, n, sample int, auto *float64) {
	t.Helper()
	r.worker.BudgetEvery = -1 // the rig's clock moves by hand: judge after every write
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 10,
		Sample: sample, AutoApproveUSD: auto, Source: api.SourceSpec{Items: items(n)}}); err != nil {
		t.Fatal(err)
	}
}

// sampleRounds hands every queued message to the worker rounds times,
// the clock moving 10 s after each, and returns the batch after.
func (r *rig) sampleRounds(t *testing.T, ctx context.Context, id string, rounds int) ledger.Batch {
	t.Helper()
	var b ledger.Batch
	for range rounds {
		b = r.step(t, ctx, id, 10*time.Second)
	}
	return b
}

// A batch of 200 items at 10 a message sampling 25 runs the packs that
// hold its first 25 items — the rig's fan-out chunks hold 7 items, so
// its packs are 0–6, 7–13, 14–20, 21–27: 28 items — each once, then
// holds the other 172 through any number of deliveries, with an
// estimate from the sample: 3 of 28 failed (10.7 %, Wilson interval
// 3.7–27.2 %), $0.28 spent so $2.00 projected for 200, 21 failures
// projected. Approved, the rest
// runs: every item called exactly once, 180 succeeded and 20 failed, and
// the run spent what the estimate said. The Batch State Change events
// are awaiting_approval with the estimate (its id from made_at), then
// approved by the caller (its id from decided_at), once each, valid
// against the published schema.
func TestSampleHoldsTheRestUntilApproved(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, sampledPipeline)
	bus := &recordingBus{}
	r.worker.Bus, r.ctl.Bus = bus, bus
	const id = "sampled"
	r.submitSampled(t, ctx, id, 200, 25, nil)
	b := r.sampleRounds(t, ctx, id, 6)
	if n := r.totalCalls(); n != 28 {
		t.Fatalf("%d items called during the sample, want 28 (the 4 packs holding the first 25)", n)
	}
	a := b.Approval
	if a == nil || a.State != api.ApprovalAwaiting || a.Sample != 25 || a.Estimate == nil {
		t.Fatalf("approval %+v: want awaiting_approval with an estimate", a)
	}
	e := a.Estimate
	if e.Items != 200 || e.SampleItems != 28 || e.Failed != 3 || e.ProjectedFailures != 21 {
		t.Fatalf("estimate %+v: want 28 sample items of 200, 3 failed, 21 projected", *e)
	}
	if math.Abs(e.FailureRate-3.0/28) > 1e-9 || math.Abs(e.FailureLow-0.0371) > 0.001 || math.Abs(e.FailureHigh-0.2720) > 0.001 {
		t.Errorf("failure rate %.4f in %.4f–%.4f, want 0.1071 in the Wilson 95 %% interval 0.0371–0.2720", e.FailureRate, e.FailureLow, e.FailureHigh)
	}
	if e.PipelineUSD != 2 || e.SampleUSD < 0.28 || e.CostUSD < 2 || !e.ProjectedCost["usd"].Equal(decimal.NewFromInt(2)) {
		t.Errorf("estimate costs %+v: want pipeline $2.00 of $0.28 spent by 28 items", *e)
	}
	if e.SampleSeconds <= 0 || e.ItemsPerSecond <= 0 || e.Seconds != math.Ceil(172/e.ItemsPerSecond) {
		t.Errorf("estimate time %+v: want the sample's time and the rest's", *e)
	}
	// The chunks wholly outside the sample wait unexpanded: one message
	// each, not one per pack.
	if p, err := r.store.Progress(ctx, id, 1, b.CounterShards); err != nil || p.FannedOut != 28 {
		t.Fatalf("fanned out %d items (%v) while awaiting approval, want the sample's 4 chunks' 28", p.FannedOut, err)
	}
	// Held: no call, however often the messages come back.
	b = r.sampleRounds(t, ctx, id, 5)
	if n := r.totalCalls(); n != 28 || b.Approval.State != api.ApprovalAwaiting || b.Approval.Estimate.MadeAt != e.MadeAt {
		t.Fatalf("after 5 more rounds: %d calls, approval %+v: want 28 and the same estimate", n, b.Approval)
	}
	ch := sampleChanges(t, bus)
	if len(ch) != 1 || ch[0].Change != api.ChangeAwaitingApproval || ch[0].Status != api.StatusRunning ||
		ch[0].EventID != api.StateChangeEventID(id, 1, api.ChangeAwaitingApproval, e.MadeAt) ||
		ch[0].Approval == nil || ch[0].Approval.State != api.ApprovalAwaiting || ch[0].Approval.Sample != 25 ||
		ch[0].Approval.Estimate == nil || !ch[0].Approval.Estimate.MadeAt.Equal(e.MadeAt) || ch[0].Approval.Estimate.CostUSD != e.CostUSD {
		t.Fatalf("state changes while awaiting %+v: want one awaiting_approval with the estimate, its id from made_at", ch)
	}
	if b, err := r.ctl.Approve(ctx, id); err != nil || b.Approval.State != api.ApprovalApproved || b.Approval.DecidedBy != api.DecidedByCaller {
		t.Fatalf("approve: %+v, %v", b.Approval, err)
	}
	if _, err := r.ctl.Reject(ctx, id); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("reject after the approval: %v, want a conflict", err)
	}
	if _, err := r.ctl.Approve(ctx, id); err != nil {
		t.Fatalf("approve again: %v, want the batch as it is", err)
	}
	b, err := r.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ch = sampleChanges(t, bus)
	if len(ch) != 2 || ch[1].Change != api.ChangeApproved || ch[1].Status != api.StatusRunning ||
		ch[1].EventID != api.StateChangeEventID(id, 1, api.ChangeApproved, b.Approval.DecidedAt) ||
		ch[1].Approval == nil || ch[1].Approval.State != api.ApprovalApproved || ch[1].Approval.DecidedBy != api.DecidedByCaller ||
		!ch[1].Approval.DecidedAt.Equal(b.Approval.DecidedAt) || ch[1].Approval.Estimate == nil || !ch[1].Approval.Estimate.MadeAt.Equal(e.MadeAt) {
		t.Fatalf("state changes %+v: want awaiting_approval, then one approved by the caller at %s with the estimate", ch, b.Approval.DecidedAt)
	}
	r.drain(t, ctx, 1)
	// The rest ran in no time on the rig's clock: its end is set 100 s
	// after the approval, which the report's rest_seconds must say.
	r.clock.T = b.Approval.DecidedAt.Add(100 * time.Second)
	res, err := r.fin.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bus.changes); n != 2 {
		t.Errorf("%d state changes after the rest ran, want the 2 of the sample", n)
	}
	c := res.Report.Census
	if c.Succeeded != 180 || c.Failed != 20 || !c.RunSpent["usd"].Equal(decimal.NewFromInt(2)) {
		t.Fatalf("census %+v: want 180 succeeded, 20 failed, $2 spent", c)
	}
	// The report sets the estimate beside the run: 20 of 200 failed
	// (10 %, within the sample's 3.7–27.2 %), its spend against the
	// estimate's, the rest's time from the approval.
	if sc := res.Report.Sample; sc == nil || sc.Estimate.CostUSD != e.CostUSD || sc.Ended != 200 || sc.Failed != 20 || !sc.FailureInInterval ||
		sc.CostUSD < 2 || sc.DecidedBy != api.DecidedByCaller || sc.RestSeconds != 100 {
		t.Errorf("report's sample %+v: want the estimate ($%v) beside 20 of 200 failed (within its interval), at least $2 spent, the rest 100 s from the caller's approval", sc, e.CostUSD)
	} else {
		t.Logf("report: estimate $%v against $%v spent (%+.2f %%); failures %.1f %% in %.1f–%.1f %%; the rest %v s against %v s estimated",
			sc.Estimate.CostUSD, sc.CostUSD, 100*sc.CostDiff, 100*sc.FailureRate, 100*sc.Estimate.FailureLow, 100*sc.Estimate.FailureHigh, sc.RestSeconds, sc.Estimate.Seconds)
	}
	// A rejection of the finished run names why, not a cancel that
	// would do nothing.
	if _, err := r.ctl.Reject(ctx, id); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "first run is over") {
		t.Errorf("reject after the run ended: %v, want a conflict saying its first run is over", err)
	}
	keys := 0
	r.calls.Range(func(k, _ any) bool {
		keys++
		if n := r.callsOf(k.(string)); n != 1 {
			t.Errorf("item %s called %d times, want once", k, n)
		}
		return true
	})
	if keys != 200 {
		t.Errorf("%d items called, want 200", keys)
	}
}

// A sampled batch rejected after its sample is cancelled: the 86 items
// outside the sample (10, in packs of the rig's 7-item chunks: 14) end
// cancelled, never called; the sample's 14 stand. The rejection puts no
// state change of its own: awaiting_approval, then the run's finished,
// cancelled.
func TestSampleRejectedCancelsTheRest(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, sampledPipeline)
	bus := &recordingBus{}
	r.worker.Bus, r.ctl.Bus, r.fin.Bus, r.fin.Events = bus, bus, bus, finishedEvents{bus}
	const id = "rejected"
	r.submitSampled(t, ctx, id, 100, 10, nil)
	if b := r.sampleRounds(t, ctx, id, 4); b.Approval.State != api.ApprovalAwaiting {
		t.Fatalf("approval %+v: want awaiting_approval", b.Approval)
	}
	b, err := r.ctl.Reject(ctx, id)
	if err != nil || b.Approval.State != api.ApprovalRejected || b.Stop != api.StatusCancelled || !strings.Contains(b.StopDetail, "rejected") {
		t.Fatalf("reject: %+v stop %q %q, %v", b.Approval, b.Stop, b.StopDetail, err)
	}
	if _, err := r.ctl.Approve(ctx, id); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("approve after the rejection: %v, want a conflict", err)
	}
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Census; c.Succeeded+c.Failed != 14 || c.Cancelled != 86 || res.Report.Status != api.StatusCancelled {
		t.Fatalf("census %+v status %s: want the sample's 14 ended and 86 cancelled", c, res.Report.Status)
	}
	if n := r.totalCalls(); n != 14 {
		t.Fatalf("%d items called, want the sample's 14", n)
	}
	if ch := sampleChanges(t, bus); len(ch) != 2 || ch[0].Change != api.ChangeAwaitingApproval ||
		ch[1].Change != api.ChangeFinished || ch[1].Verdict != api.StatusCancelled {
		t.Fatalf("state changes %+v: want awaiting_approval, then finished cancelled", ch)
	}
}

// Auto-approval: a batch whose estimate ($1.00 for 100 items) is within
// its auto_approve_usd runs on without a caller, its state changes
// awaiting_approval then approved by auto_approve (both ids from the
// estimate's made_at, the decision's time); one above it waits (until
// rejected, so that the queue drains), awaiting_approval only.
func TestSampleAutoApproves(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, sampledPipeline)
	bus := &recordingBus{}
	r.worker.Bus, r.ctl.Bus = bus, bus
	enough, short := 5.0, 0.5
	r.submitSampled(t, ctx, "auto", 100, 10, &enough)
	r.submitSampled(t, ctx, "waits", 100, 10, &short)
	r.sampleRounds(t, ctx, "auto", 4)
	auto, err := r.store.GetBatch(ctx, "auto")
	if err != nil {
		t.Fatal(err)
	}
	if a := auto.Approval; a.State != api.ApprovalApproved || a.DecidedBy != api.DecidedByAuto || a.Estimate == nil || a.Estimate.CostUSD > enough {
		t.Fatalf("auto: approval %+v: want approved by auto_approve with its estimate", a)
	}
	waits, err := r.store.GetBatch(ctx, "waits")
	if err != nil {
		t.Fatal(err)
	}
	if a := waits.Approval; a.State != api.ApprovalAwaiting || a.Estimate.CostUSD <= short {
		t.Fatalf("waits: approval %+v: want awaiting_approval, its estimate over $0.50", a)
	}
	if _, err := r.ctl.Reject(ctx, "waits"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if n := r.callsOfBatch(100); n != 114 {
		t.Fatalf("%d calls, want 100 of auto and the 14 of waits' sample", n)
	}
	byBatch := map[string][]api.StateChangeEvent{}
	for _, c := range sampleChanges(t, bus) {
		byBatch[c.BatchID] = append(byBatch[c.BatchID], c)
	}
	a, ch := auto.Approval, byBatch["auto"]
	if len(ch) != 2 || ch[0].Change != api.ChangeAwaitingApproval || ch[0].EventID != api.StateChangeEventID("auto", 1, api.ChangeAwaitingApproval, a.Estimate.MadeAt) ||
		ch[1].Change != api.ChangeApproved || ch[1].EventID != api.StateChangeEventID("auto", 1, api.ChangeApproved, a.DecidedAt) ||
		ch[1].Approval == nil || ch[1].Approval.State != api.ApprovalApproved || ch[1].Approval.DecidedBy != api.DecidedByAuto ||
		!ch[1].Approval.DecidedAt.Equal(a.DecidedAt) || ch[1].Approval.Estimate == nil || ch[1].Approval.Estimate.CostUSD != a.Estimate.CostUSD {
		t.Errorf("auto: state changes %+v: want awaiting_approval, then approved by auto_approve with the estimate", ch)
	}
	if ch := byBatch["waits"]; len(ch) != 1 || ch[0].Change != api.ChangeAwaitingApproval || ch[0].Approval.State != api.ApprovalAwaiting {
		t.Errorf("waits: state changes %+v: want awaiting_approval only", ch)
	}
}

// sampleChanges returns the Batch State Change events put on bus, each
// checked against the published schema.
func sampleChanges(t *testing.T, bus *recordingBus) []api.StateChangeEvent {
	t.Helper()
	schema, err := eventschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	bus.mu.Lock()
	ch := slices.Clone(bus.changes)
	bus.mu.Unlock()
	for _, c := range ch {
		if err := schema.ValidateValue(c); err != nil {
			t.Errorf("%s %s against %s: %v", c.BatchID, c.Change, eventschema.SchemaPath, err)
		}
	}
	return ch
}

// callsOfBatch counts the items called once or more among the rig's
// positional keys item-0000000000 … below n (shared by the rig's
// batches).
func (r *rig) callsOfBatch(n int) int64 {
	var total int64
	for i := range n {
		total += r.callsOf(fmt.Sprintf("item-%010d", i))
	}
	return total
}

// A batch with max_concurrency 3 samples on its tracks: 300 items at K
// = 1 and 10 sampling 25 call exactly the units holding the first 25
// items (25 items at K = 1; the 7-item chunks' packs 0–6 … 21–27, 28,
// at K = 10), then hold — no call, however often the tracks come back,
// one message per track on the queue — with an estimate whose time
// counts 3 items at once for the sample and the rest. Approved, the rest
// runs: every item called exactly once, never more than 3 at once, 270
// succeeded and 30 failed.
func TestSampleOnTracks(t *testing.T) {
	const n, sample, limit = 300, 25, 3
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			var running, most atomic.Int64
			r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				c := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
				}
				time.Sleep(50 * time.Microsecond)
				return sampledPipeline(ctx, req)
			})
			r.worker.BudgetEvery = -1
			r.worker.Sleep = func(context.Context, time.Duration) {}
			const id = "tracked"
			submitK(t, r, id, k, n, func(req *api.SubmitRequest) {
				req.MaxConcurrency, req.Sample, req.MaxAttempts = limit, sample, 3
			})
			want := int64(sample)
			if k == 10 {
				want = 28
			}
			var b ledger.Batch
			for round := 0; ; round++ {
				if round > 60 {
					t.Fatalf("no estimate after 60 rounds: %d calls, approval %+v", r.totalCalls(), b.Approval)
				}
				if b = r.step(t, ctx, id, 10*time.Second); b.Approval != nil && b.Approval.Estimate != nil {
					break
				}
			}
			for round := 0; round < 8; round++ {
				b = r.step(t, ctx, id, 10*time.Second)
			}
			if got := r.totalCalls(); got != want || r.callsOfBatch(int(want)) != want {
				t.Fatalf("%d calls while the batch holds, want the %d items of the units holding the first %d", got, want, sample)
			}
			if msgs, _ := messagesOf(r); msgs > limit {
				t.Errorf("%d messages on the queue while the batch awaits approval, want at most one per track (%d)", msgs, limit)
			}
			e := b.Approval.Estimate
			if b.Approval.State != api.ApprovalAwaiting || e.SampleItems != want || e.Items != n ||
				!strings.Contains(e.Pace, "sample's pace") || strings.Contains(e.Pace, "messages at once") {
				t.Fatalf("approval %+v, estimate %+v: want awaiting, %d sample items of %d, the rest at the sample's pace (3 at once both)", b.Approval, *e, want, n)
			}
			if _, err := r.ctl.Approve(ctx, id); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 1)
			res, err := r.fin.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Report.Census; c.Succeeded != 270 || c.Failed != 30 {
				t.Errorf("census %+v: want 270 succeeded, 30 failed", c)
			}
			if got := r.callsOfBatch(n); got != n || r.totalCalls() != n {
				t.Errorf("%d calls of the batch's items (%d in all), want each of %d once", got, r.totalCalls(), n)
			}
			for i := range n {
				if c := r.callsOf(fmt.Sprintf("item-%010d", i)); c != 1 {
					t.Errorf("item %d called %d times, want once", i, c)
				}
			}
			if m := most.Load(); m > limit {
				t.Errorf("%d calls at once, want at most %d", m, limit)
			}
		})
	}
}

// The submit refuses a sample out of range and an auto-approval without
// a sample, naming the field.
func TestSampleRequestChecks(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, sampledPipeline)
	one := 1.0
	for _, tc := range []struct {
		req   api.SubmitRequest
		field string
	}{
		{api.SubmitRequest{Sample: -1}, "sample"},
		{api.SubmitRequest{Sample: api.MaxSample + 1}, "sample"},
		{api.SubmitRequest{AutoApproveUSD: &one}, "auto_approve_usd"},
	} {
		tc.req.Pipeline, tc.req.Source = "counted", api.SourceSpec{Items: items(10)}
		_, err := r.sub.Submit(ctx, tc.req)
		var ie *api.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("submit %+v: %v, want an input error naming %s", tc.req, err, tc.field)
		}
	}
}
