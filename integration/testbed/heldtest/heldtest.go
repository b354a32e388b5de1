// Package heldtest is the ledger.Store conformance of the exhausted
// outcome (api.OutcomeExhausted) and the per-item ceilings on the batch
// row (Store.SetLimits): Run passes each case a new store. The in-memory
// store (integration/testbed/memstore) passes it in this package's tests,
// the DynamoDB adapter in integration's TestHeldStoreConformance.
// It sits beside ledgertest, whose suite is at its size bound.
package heldtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// t0 is the cases' clock.
var t0 = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

// Run runs every case on a store of its own from newStore.
func Run(t *testing.T, newStore func(t *testing.T) ledger.Store) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s ledger.Store)
	}{
		{"CeilingsOnTheBatchRow", ceilingsOnTheRow},
		{"ExhaustedRowWakesOnce", exhaustedWakesOnce},
		{"ExhaustedIsFreshNextRun", exhaustedFreshNextRun},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

func batch(t *testing.T, s ledger.Store, id string) ledger.Batch {
	t.Helper()
	b := ledger.Batch{Batch: api.Batch{ID: id, Plan: api.Plan{Pipeline: "echo", Digest: "d1", MaxAttempts: 3, OnInterrupt: api.InterruptRetry},
		ManifestKey: "batches/" + id + "/manifest.jsonl", ManifestBytes: 10, ItemCount: 10, ListShards: 4, CounterShards: 2, Run: 1,
		Status: api.StatusRunning, Source: "inline", CreatedAt: t0, RunStartedAt: t0, BudgetUSD: 9, Ceilings: &api.Ceilings{SpendUSD: 0.5}}, Chunks: 2}
	if _, err := s.CreateBatch(context.Background(), b); err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return b
}

// exhaust reserves key in run and records it exhausted at $0.5 spent.
func exhaust(t *testing.T, s ledger.Store, b ledger.Batch, key string, run int) ledger.Item {
	t.Helper()
	ctx := context.Background()
	it, err := s.Reserve(ctx, ledger.Reservation{BatchID: b.ID, Key: key, RunID: ledger.RunID(b.ID, key), Run: run, ListShards: b.ListShards, Now: t0, Lease: time.Minute})
	if err != nil {
		t.Fatalf("reserve %s: %v", key, err)
	}
	r := ledger.Record{BatchID: b.ID, Key: key, RunID: ledger.RunID(b.ID, key), Run: run, ListShards: b.ListShards, Attempt: it.Attempt,
		Outcome: api.OutcomeExhausted, Reason: api.ReasonCeiling, Error: "its attempts reported $0.5, at its ceiling",
		Hold: api.Hold{Subject: api.CeilingSpendUSD, Since: t0}, Cost: pipeline.Cost{"usd": 0.5}, Spent: pipeline.Cost{"usd": 0.5}, Now: t0}
	if err := s.Record(ctx, r); err != nil {
		t.Fatalf("record %s exhausted: %v", key, err)
	}
	return it
}

func ceilingsOnTheRow(t *testing.T, s ledger.Store) {
	ctx := context.Background()
	b := batch(t, s, "ceil-row")
	got, err := s.GetBatch(ctx, b.ID)
	if err != nil || got.Ceilings == nil || *got.Ceilings != (api.Ceilings{SpendUSD: 0.5}) {
		t.Fatalf("created: ceilings %+v %v", got.Ceilings, err)
	}
	// Written under a condition on the ceilings as read: a raise merged
	// from a stale read is refused, and nothing of it is written.
	if err := s.SetLimits(ctx, b.ID, ledger.Limits{Ceilings: &api.Ceilings{SpendUSD: 3}, CeilingsWas: &api.Ceilings{SpendUSD: 0.4}}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("ceilings merged from a stale read: %v, want a conflict", err)
	}
	if err := s.SetLimits(ctx, b.ID, ledger.Limits{Ceilings: &api.Ceilings{SpendUSD: 3}}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("ceilings merged from a read of none: %v, want a conflict", err)
	}
	if err := s.SetLimits(ctx, b.ID, ledger.Limits{Ceilings: &api.Ceilings{SpendUSD: 2, Tokens: 900}, CeilingsWas: got.Ceilings}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.GetBatch(ctx, b.ID); err != nil || *got.Ceilings != (api.Ceilings{SpendUSD: 2, Tokens: 900}) || got.BudgetUSD != 9 {
		t.Fatalf("raised: ceilings %+v, budget %v, %v; want the new ceilings, the budget kept", got.Ceilings, got.BudgetUSD, err)
	}
	if err := s.SetLimits(ctx, b.ID, ledger.Limits{BudgetUSD: 12}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.GetBatch(ctx, b.ID); err != nil || *got.Ceilings != (api.Ceilings{SpendUSD: 2, Tokens: 900}) || got.BudgetUSD != 12 {
		t.Fatalf("budget raised: ceilings %+v, budget %v, %v; want the ceilings kept", got.Ceilings, got.BudgetUSD, err)
	}
	if err := s.SetLimits(ctx, "none", ledger.Limits{Ceilings: &api.Ceilings{Tokens: 1}}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("the ceilings of no batch: %v, want a conflict", err)
	}
}

func exhaustedWakesOnce(t *testing.T, s ledger.Store) {
	ctx := context.Background()
	b := batch(t, s, "ceil-wake")
	first := exhaust(t, s, b, "k", 1)
	for _, sel := range []api.Outcome{api.OutcomeExhausted, api.NeedsAttention} {
		items, _, err := s.ListItems(ctx, b.ID, b.ListShards, sel, "", 100)
		if err != nil || len(items) != 1 {
			t.Fatalf("list %s: %d items, %v; want the exhausted one", sel, len(items), err)
		}
		it := items[0]
		if it.Outcome != api.OutcomeExhausted || it.Hold == nil || it.Hold.Subject != api.CeilingSpendUSD || it.Reason != api.ReasonCeiling ||
			it.Spent["usd"] != 0.5 || it.SpentRun != 1 {
			t.Fatalf("list %s: %+v hold %+v; want exhausted at %s, $0.5 spent in run 1", sel, it, it.Hold, api.CeilingSpendUSD)
		}
	}
	now := t0.Add(time.Second)
	res := ledger.Reservation{BatchID: b.ID, Key: "k", RunID: ledger.RunID(b.ID, "k"), Run: 1, ListShards: b.ListShards, Now: now, Lease: time.Minute}
	if _, err := s.Reserve(ctx, res); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("reserve before the raise: %v, want a conflict", err)
	}
	mk := ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: "k", Run: 1, Outcome: api.OutcomeWithheld, Subject: api.CeilingSpendUSD, By: api.WakeRaise, Now: now}
	if _, err := s.WakeItem(ctx, mk); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a wake of a withheld item: %v, want a conflict", err)
	}
	mk.Outcome = api.OutcomeExhausted
	got, err := s.WakeItem(ctx, mk)
	if err != nil || got.Hold == nil || got.Hold.Woken != api.WakeRaise {
		t.Fatalf("wake: %+v %v", got, err)
	}
	if again, err := s.WakeItem(ctx, mk); !errors.Is(err, api.ErrConflict) || again.Hold == nil || again.Hold.Woken != api.WakeRaise {
		t.Fatalf("wake again: %+v %v; want a conflict that finds it woken", again, err)
	}
	r, err := s.Reserve(ctx, res)
	if err != nil {
		t.Fatalf("reserve once woken: %v", err)
	}
	if r.Attempt != first.Attempt+1 || r.RunAttempts != 2 || r.Resumed != api.OutcomeExhausted {
		t.Fatalf("reserved: attempt %d, run attempts %d, resumed %q; want %d, 2 (the run's attempts kept), exhausted", r.Attempt, r.RunAttempts, r.Resumed, first.Attempt+1)
	}
	if _, err := s.Reserve(ctx, res); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a second reserve of the woken item: %v, want a conflict", err)
	}
}

func exhaustedFreshNextRun(t *testing.T, s ledger.Store) {
	ctx := context.Background()
	b := batch(t, s, "ceil-next")
	exhaust(t, s, b, "k", 1)
	r, err := s.Reserve(ctx, ledger.Reservation{BatchID: b.ID, Key: "k", RunID: ledger.RunID(b.ID, "k"), Run: 2, ListShards: b.ListShards, Now: t0.Add(time.Minute), Lease: time.Minute})
	if err != nil {
		t.Fatalf("reserve in run 2 an item exhausted in run 1: %v", err)
	}
	if r.Run != 2 || r.RunAttempts != 1 || r.Outcome != api.OutcomeInFlight {
		t.Fatalf("reserved in run 2: %+v; want in flight, its first attempt of the run", r)
	}
}
