package flow

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// A batch with a budget of $5 whose pipeline reports $0.50 per item, run
// two messages per invocation: the counter write that takes the spend to
// $5 pauses it (by its budget, no probe), after exactly the 10 items
// counted by then; no item runs while it is paused, a caller's unpause
// and a budget not above the spend are refused, and raising the budget
// resumes the run: all 40 items succeed, each called once, the run's
// spend is exactly 40 × $0.50. The events say paused by the budget,
// unpaused by the budget.
func TestBudgetPausesAndARaiseResumes(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: []byte(`{"ok":true}`), Cost: pipeline.Cost{"usd": 0.5}}, nil
	})
	bus := &recordingBus{}
	r.worker.Bus, r.ctl.Bus = bus, bus
	r.worker.BudgetEvery = -1 // the rig's clock does not move: judge after every write
	five := 5.0
	const id = "budget"
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		BudgetUSD: &five, Source: api.SourceSpec{Items: items(40)}}); err != nil {
		t.Fatal(err)
	}
	b := r.untilPaused(t, ctx, id)
	if b.Pause.By != api.PauseByBudget || b.Pause.Class != "budget" || !strings.HasPrefix(b.Pause.Error, "budget $5 reached ($5 spent: pipeline $5, DynamoDB $0;") {
		t.Fatalf("pause %+v: want by budget, budget $5 reached ($5 spent …)", *b.Pause)
	}
	called := r.totalCalls()
	if called != 10 {
		t.Fatalf("%d items called before the pause, want 10 ($5 at $0.50, two a message batch)", called)
	}
	p, err := r.store.Progress(ctx, id, 1, b.CounterShards)
	if err != nil {
		t.Fatal(err)
	}
	if p.Done != 10 || !p.Spent["usd"].Equal(decimal.NewFromInt(5)) {
		t.Fatalf("counters at the pause: %d done, spent %s: want 10, usd=5", p.Done, p.Spent)
	}
	// Paused: every message comes back without a call.
	for range 5 {
		r.handleSome(ctx, 0)
	}
	if n := r.totalCalls(); n != called {
		t.Fatalf("%d items called while paused at the budget, want none", n-called)
	}
	if _, err := r.ctl.Unpause(ctx, id); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "raise the budget") {
		t.Fatalf("a caller's unpause of a budget pause: %v, want a conflict saying to raise the budget", err)
	}
	// A caller's pause would be lost to the raise (the row keeps one
	// pause): refused, not answered as if it were written.
	if _, err := r.ctl.Pause(ctx, id); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "at its budget") {
		t.Fatalf("a caller's pause of a budget pause: %v, want a conflict saying it is paused at its budget", err)
	}
	for _, low := range []float64{4, 5} {
		if _, err := r.ctl.SetBudget(ctx, id, low); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "has spent ($5)") {
			t.Fatalf("budget $%v at a spend of $5: %v, want a conflict naming the spend", low, err)
		}
	}
	var ie *api.InputError
	if _, err := r.ctl.SetBudget(ctx, id, -1); !errors.As(err, &ie) || ie.Field != "budget_usd" {
		t.Fatalf("a negative budget: %v, want an input error naming budget_usd", err)
	}
	if b, _ = r.store.GetBatch(ctx, id); b.Pause == nil || b.BudgetUSD != 5 {
		t.Fatalf("after the refused raises: pause %+v, budget %v: want still paused at $5", b.Pause, b.BudgetUSD)
	}
	if b, err = r.ctl.SetBudget(ctx, id, 100); err != nil || b.Pause != nil || b.BudgetUSD != 100 {
		t.Fatalf("raise to $100: pause %+v, budget %v, %v: want unpaused at $100", b.Pause, b.BudgetUSD, err)
	}
	// The resume put the downstream in slow start from
	// pace.AdaptResume (its units lease places in line, due as the
	// clock moves): this rig's clock stands still, so it moves past
	// the ramp's end (≈ 11 s) once.
	r.clock.T = r.clock.T.Add(15 * time.Second)
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Report.Census
	if c.Succeeded != 40 || c.Failed != 0 || !c.RunSpent["usd"].Equal(decimal.NewFromInt(20)) || !c.Cost["usd"].Equal(decimal.NewFromInt(20)) {
		t.Fatalf("census %+v: want 40 succeeded, run_spent and cost usd=20", c)
	}
	if p := res.Report.Paused; p == nil || p.Pauses != 1 || p.Last == nil || p.Last.By != api.PauseByBudget || p.Last.EndedBy != api.PauseByBudget || p.Seconds <= 0 {
		t.Errorf("report's pauses %+v: want 1 budget pause, ended by the raise", p)
	}
	keys := 0
	r.calls.Range(func(k, _ any) bool {
		keys++
		if n := r.callsOf(k.(string)); n != 1 {
			t.Errorf("item %s called %d times, want once", k, n)
		}
		return true
	})
	if keys != 40 {
		t.Errorf("%d items called, want 40", keys)
	}
	if len(bus.types) != 2 || bus.types[0] != api.DetailPaused || bus.types[1] != api.DetailUnpaused ||
		bus.events[0].By != api.PauseByBudget || bus.events[1].By != api.PauseByBudget {
		t.Errorf("events %v %+v: want Batch Paused and Batch Unpaused, both by budget", bus.types, bus.events)
	}
	if ch := bus.changes; len(ch) != 2 || ch[0].Change != api.ChangePaused || ch[0].Pause == nil || ch[0].Pause.By != api.PauseByBudget ||
		ch[1].Change != api.ChangeUnpaused || ch[1].UnpausedBy != api.PauseByBudget {
		t.Errorf("state changes %+v: want paused by budget, then unpaused by budget", ch)
	}
}

// The spend of attempts that will be retried counts toward the budget as
// they happen, not once their item ends: a pipeline that reports $0.50
// per attempt, fails the first two attempts of every even item
// transiently and succeeds at once for odd ones (so that no failure
// streak pauses the batch for an outage), 20 items, a budget of $5, two
// messages per invocation. At the pause the counters' spend is every call
// so far at $0.50 — retried attempts included, though their items have
// not ended — and it came with the first count that reached $5 (11
// calls: the fan-out takes the first invocation's other message);
// counted at their items' end alone, the spend would lag the calls.
// Raised, every item succeeds, and the counters' spend equals the
// census's run_spent (10 × 3 × $0.50 + 10 × $0.50): each attempt counted
// once.
func TestBudgetCountsRetriedAttempts(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		res := pipeline.Result{Output: []byte(`{"ok":true}`), Cost: pipeline.Cost{"usd": 0.5}}
		if last := req.Key[len(req.Key)-1]; (last-'0')%2 == 0 && req.Attempt < 3 {
			return res, errors.New("HTTP 503: try later")
		}
		return res, nil
	})
	r.worker.BudgetEvery = -1 // judge after every write
	five := 5.0
	const id = "retried"
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 5, ItemsPerMessage: 1,
		BudgetUSD: &five, Source: api.SourceSpec{Items: items(20)}}); err != nil {
		t.Fatal(err)
	}
	b := r.untilPaused(t, ctx, id)
	p, err := r.store.Progress(ctx, id, 1, b.CounterShards)
	if err != nil {
		t.Fatal(err)
	}
	called := r.totalCalls()
	if called != 11 || p.Done >= called || !p.Spent["usd"].Equal(decimal.NewFromFloat(0.5).Mul(decimal.NewFromInt(called))) || b.Pause.By != api.PauseByBudget {
		t.Fatalf("at the pause: %d calls, %d items ended, spent %s, pause %+v: want 11 calls, fewer items ended, usd=0.5 per call, by budget", called, p.Done, p.Spent, *b.Pause)
	}
	if _, err := r.ctl.SetBudget(ctx, id, 100); err != nil {
		t.Fatal(err)
	}
	// The retries wait for their time: a second of the rig's clock a round.
	for round := 0; ; round++ {
		ds := r.queue.take()
		if len(ds) == 0 {
			break
		}
		if round > 3000 {
			t.Fatal("the queue did not drain in 3,000 rounds")
		}
		r.queue.put(ds)
		r.handleSome(ctx, 0)
	}
	res, err := r.fin.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = r.store.Progress(ctx, id, 1, b.CounterShards); err != nil {
		t.Fatal(err)
	}
	c := res.Report.Census
	if c.Succeeded != 20 || !c.RunSpent["usd"].Equal(decimal.NewFromInt(20)) || !p.Spent["usd"].Equal(c.RunSpent["usd"]) || r.totalCalls() != 40 {
		t.Fatalf("census %+v, counters' spend %s, %d calls: want 20 succeeded, run_spent usd=20 in both, 40 calls", c, p.Spent, r.totalCalls())
	}
}

// Without a budget nothing reads the counters for one, and a batch whose
// spend passes any amount runs to its end.
func TestNoBudgetNeverPauses(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: []byte(`{}`), Cost: pipeline.Cost{"usd": 1000}}, nil
	})
	r.worker.BudgetEvery = -1
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "unbudgeted", Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: items(10)}}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		r.handleSome(ctx, 2)
		if b, _ := r.store.GetBatch(ctx, "unbudgeted"); b.Pause != nil {
			t.Fatalf("paused without a budget: %+v", *b.Pause)
		}
	}
	if res, err := r.fin.Finalize(ctx, "unbudgeted", 1); err != nil || res.Report.Census.Succeeded != 10 {
		t.Fatalf("finalize: %+v, %v", res.Report.Census, err)
	}
}

// Submit refuses a budget that is not a positive amount, naming the field.
func TestSubmitRefusesABadBudget(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
	for _, usd := range []float64{0, -3, 2e9} {
		_, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "bad-budget", Pipeline: "counted", BudgetUSD: &usd, Source: api.SourceSpec{Items: items(1)}})
		var ie *api.InputError
		if !errors.As(err, &ie) || ie.Field != "budget_usd" {
			t.Errorf("budget %v: %v, want an input error naming budget_usd", usd, err)
		}
	}
}

// untilPaused hands two messages per invocation (handleSome) until batch
// id is paused, and returns it (at most 400 rounds).
func (r *rig) untilPaused(t *testing.T, ctx context.Context, id string) ledger.Batch {
	t.Helper()
	for range 400 {
		r.handleSome(ctx, 2)
		b, err := r.store.GetBatch(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if b.Pause != nil {
			return b
		}
	}
	t.Fatal("not paused in 400 rounds")
	return ledger.Batch{}
}

// handleSome hands at most per queued messages (0: all) to one worker
// call and puts back, after the rest, the ones it failed.
func (r *rig) handleSome(ctx context.Context, per int) {
	ds := r.queue.take()
	if per > 0 && len(ds) > per {
		r.queue.put(ds[per:])
		ds = ds[:per]
	}
	failed := r.worker.Handle(ctx, ds)
	for _, d := range ds {
		for _, f := range failed {
			if d.MessageID == f {
				d.ReceiveCount++
				r.queue.put([]worker.Delivery{d})
			}
		}
	}
	r.clock.T = r.clock.T.Add(time.Second)
}

// failRequeue is the rig's queue whose Requeue (a timer's hop, a message
// sent again) fails while fail is set.
type failRequeue struct {
	*memQueue
	fail atomic.Bool
}

func (q *failRequeue) Requeue(ctx context.Context, body []byte, d time.Duration) error {
	if q.fail.Load() {
		return errors.New("sqs: unavailable")
	}
	return q.memQueue.Requeue(ctx, body, d)
}

// A write that stored a retry counts its attempt's spend even when what
// comes after it fails: a pack of 2 whose first item suspends with a
// timer and whose second fails transiently having reported $0.50, the
// timer's send failing. Once both items succeed, the counters' spend is
// the census's run_spent ($1.50): the first attempt's $0.50 is not lost
// to the message coming back.
func TestSpendOfARetryCountedWhenTheTimerCannotBeSent(t *testing.T) {
	ctx := context.Background()
	var r *rig
	r = newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		ok := pipeline.Result{Output: []byte(`{"ok":true}`), Cost: pipeline.Cost{"usd": 0.5}}
		if r.callsOf(req.Key) > 1 {
			return ok, nil
		}
		if req.Key[len(req.Key)-1] == '0' {
			return pipeline.Result{}, pipeline.Suspend("awaiting a file", r.clock.T.Add(time.Hour))
		}
		return ok, errors.New("HTTP 503: try later")
	})
	q := &failRequeue{memQueue: r.queue}
	r.worker.Queue = q
	q.fail.Store(true)
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "tm", Pipeline: "counted", MaxAttempts: 5, ItemsPerMessage: 2,
		Source: api.SourceSpec{Items: items(2)}}); err != nil {
		t.Fatal(err)
	}
	for round := 0; r.totalCalls() < 2; round++ {
		if round > 100 {
			t.Fatal("the pack's items were not called in 100 rounds")
		}
		r.handleSome(ctx, 0)
	}
	q.fail.Store(false)
	r.clock.T = r.clock.T.Add(2 * time.Hour)
	for round := 0; ; round++ {
		ds := r.queue.take()
		if len(ds) == 0 {
			break
		}
		if round > 300 {
			t.Fatal("the queue did not drain in 300 rounds")
		}
		r.queue.put(ds)
		r.handleSome(ctx, 0)
	}
	res, err := r.fin.Finalize(ctx, "tm", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.store.GetBatch(ctx, "tm")
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.store.Progress(ctx, "tm", 1, b.CounterShards)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Census; c.Succeeded != 2 || !c.RunSpent["usd"].Equal(decimal.RequireFromString("1.5")) || !p.Spent["usd"].Equal(c.RunSpent["usd"]) {
		t.Fatalf("census %+v, counters' spend %s: want 2 succeeded, run_spent usd=1.5 in both", c, p.Spent)
	}
}
