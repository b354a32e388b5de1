package judge

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The budget's reads of a run's counters: the first at once, then at
// most one per DefaultBudgetEvery per run in a process (another run has
// its own); a negative every reads each time.
func TestBudgetReadsAreThrottled(t *testing.T) {
	var k Reads
	t0 := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		id   string
		run  int
		at   time.Duration
		want bool
	}{
		{"b", 1, 0, true},
		{"b", 1, time.Second, false},
		{"b", 2, time.Second, true}, // another run
		{"c", 1, time.Second, true}, // another batch
		{"b", 1, DefaultBudgetEvery - time.Millisecond, false},
		{"b", 1, DefaultBudgetEvery, true},
		{"b", 1, DefaultBudgetEvery + time.Second, false},
	} {
		if got := k.due(tc.id, tc.run, t0.Add(tc.at), 0); got != tc.want {
			t.Errorf("%s run %d at +%s: due %v, want %v", tc.id, tc.run, tc.at, got, tc.want)
		}
	}
	for range 3 {
		if !k.due("b", 1, t0, -1) {
			t.Fatal("every < 0: want every read due")
		}
	}
}

// fakeStore is the judges' port over one run's counters, recording what
// they write.
type fakeStore struct {
	p         ledger.Progress
	reads     int
	pauses    []ledger.PauseMark
	approvals []ledger.ApprovalMark
	conflict  bool // every write answers ErrConflict (another process wrote first)
}

func (s *fakeStore) Progress(context.Context, string, int, int) (ledger.Progress, error) {
	s.reads++
	return s.p, nil
}

func (s *fakeStore) Pause(_ context.Context, m ledger.PauseMark) error {
	if s.conflict {
		return api.ErrConflict
	}
	s.pauses = append(s.pauses, m)
	return nil
}

func (s *fakeStore) MarkApproval(_ context.Context, m ledger.ApprovalMark) error {
	if s.conflict {
		return api.ErrConflict
	}
	s.approvals = append(s.approvals, m)
	return nil
}

// bus records the events put.
type bus struct{ kinds []string }

func (b *bus) Put(_ context.Context, kind string, _ any) error {
	b.kinds = append(b.kinds, kind)
	return nil
}

type clock struct{ t time.Time }

func (c clock) Now() time.Time { return c.t }

// TestBudgetPausesAtTheBudget: the run pauses (by budget, with the spend
// in its text) once the pipeline's reported spend and the DynamoDB units
// reach the budget, not before; a batch already paused or without a
// budget costs no read; a lost race is left to its winner.
func TestBudgetPausesAtTheBudget(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusRunning, BudgetUSD: 2}}
	st := &fakeStore{p: ledger.Progress{Spent: pipeline.CostSum{"usd": decimal.RequireFromString("1.99")}}}
	ev := &bus{}
	j := &Judge{Store: st, Clock: clock{now}, Bus: ev, Every: -1, Reads: &Reads{}}
	j.Budget(context.Background(), slog.New(slog.DiscardHandler), b)
	if len(st.pauses) != 0 {
		t.Fatalf("paused at $1.99 of a $2 budget: %+v", st.pauses)
	}
	st.p.Spent["usd"] = decimal.RequireFromString("2")
	j.Budget(context.Background(), slog.New(slog.DiscardHandler), b)
	if len(st.pauses) != 1 || st.pauses[0].By != api.PauseByBudget || st.pauses[0].BudgetUSD != 2 || !strings.Contains(st.pauses[0].Error, "$2") {
		t.Fatalf("at $2 of a $2 budget: pauses %+v, want one by budget naming it", st.pauses)
	}
	if len(ev.kinds) != 2 {
		t.Errorf("events %v, want the pause's two (Batch Paused, Batch State Change)", ev.kinds)
	}
	reads := st.reads
	paused := b
	paused.Pause = &api.Pause{By: api.PauseByBudget, Since: now}
	none := b
	none.BudgetUSD = 0
	for _, bb := range []ledger.Batch{paused, none} {
		j.Budget(context.Background(), slog.New(slog.DiscardHandler), bb)
	}
	if st.reads != reads || len(st.pauses) != 1 {
		t.Errorf("a paused batch and one without a budget: %d more reads, %d pauses; want none", st.reads-reads, len(st.pauses))
	}
	st.conflict, ev.kinds = true, nil
	j.Budget(context.Background(), slog.New(slog.DiscardHandler), b)
	if len(ev.kinds) != 0 {
		t.Errorf("a pause another process wrote first: events %v, want none (the winner's)", ev.kinds)
	}
}

// TestSampleEstimatesOnceTheSampleEnded: no estimate while fewer than the
// sample's items ended; then one estimate (awaiting approval, its event),
// counting held items as ended; an auto-approval under its limit, but
// not while a sample item is held; nothing for a decided batch.
func TestSampleEstimatesOnceTheSampleEnded(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	now := start.Add(20 * time.Second)
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusRunning, ItemCount: 1000, RunStartedAt: start,
		Plan: api.Plan{Sample: 100}, Approval: api.ApprovalOf(100, "", "", time.Time{}, nil)}}
	st := &fakeStore{p: ledger.Progress{Done: 99, UpdatedAt: now}}
	ev := &bus{}
	j := &Judge{Store: st, Clock: clock{now}, Bus: ev, Every: -1, Reads: &Reads{}}
	log := slog.New(slog.DiscardHandler)
	j.Sample(context.Background(), log, b, true)
	if len(st.approvals) != 0 {
		t.Fatalf("99 of 100 sample items ended: %+v, want no estimate", st.approvals)
	}
	st.p.Held = map[api.Outcome]int64{api.OutcomeSuspended: 1}
	j.Sample(context.Background(), log, b, true)
	if len(st.approvals) != 1 || st.approvals[0].Estimate == nil || st.approvals[0].Decision != "" {
		t.Fatalf("99 ended and 1 held: %+v, want one estimate", st.approvals)
	}
	if e := st.approvals[0].Estimate; e.Items != 1000 || e.SampleItems != 100 {
		t.Errorf("estimate %+v: want 100 sample items of 1000", *e)
	}
	if len(ev.kinds) != 1 || ev.kinds[0] != api.DetailStateChange {
		t.Errorf("events %v, want one Batch State Change (awaiting_approval)", ev.kinds)
	}
	// Under an auto-approval: not while a sample item is held ...
	b.AutoApproveUSD = 100
	st.approvals = nil
	j.Sample(context.Background(), log, b, true)
	if len(st.approvals) != 1 {
		t.Fatalf("with a held sample item: %+v, want the estimate alone", st.approvals)
	}
	// ... and with none held, approved by auto_approve.
	st.p.Held, st.p.Done, st.approvals = nil, 100, nil
	j.Sample(context.Background(), log, b, true)
	if len(st.approvals) != 2 || st.approvals[1].Decision != api.ApprovalApproved || st.approvals[1].By != api.DecidedByAuto {
		t.Fatalf("under the auto-approval: %+v, want the estimate, then approved by auto_approve", st.approvals)
	}
	// A decided batch is judged no more.
	b.Approval = api.ApprovalOf(100, api.ApprovalApproved, api.DecidedByCaller, now, nil)
	st.approvals, st.reads = nil, 0
	j.Sample(context.Background(), log, b, true)
	if len(st.approvals) != 0 || st.reads != 0 {
		t.Errorf("an approved batch: %d reads, %+v; want none", st.reads, st.approvals)
	}
}
