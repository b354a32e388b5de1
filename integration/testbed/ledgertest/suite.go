package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// T0 is the suite's clock start: inside the batches index's range.
var T0 = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

const lease = time.Minute

// ms is t at DynamoDB's rows' precision (milliseconds), UTC: the
// precision every store keeps leases and stamps at.
func ms(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }

// Run is the conformance suite of the store contract (ledger.Store, of
// which each engine declares the methods it uses): every condition,
// transition and listing order its doc comments state, run against each
// implementation (the DynamoDB adapter on the emulator, from
// integration/store_test.go; the in-memory store, in its own test), as
// river's riverdrivertest is run against every driver. Each case runs
// as a parallel subtest on a store of its own from newStore (an empty
// store: no batch, no marker).
func Run(t *testing.T, newStore func(t *testing.T) ledger.Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t))
		})
	}
}

type suiteCase struct {
	name string
	run  func(t *testing.T, s ledger.Store)
}

var ctx = context.Background()

// newBatch is a running batch at run 1 created at T0 (its row and
// running marker are written by the case).
func newBatch(id string) ledger.Batch {
	return ledger.Batch{
		Batch: api.Batch{
			ID:            id,
			Plan:          api.Plan{Pipeline: "echo", Digest: "d1", MaxAttempts: 3, OnInterrupt: api.InterruptRetry, Headers: map[string]string{"h": "v"}},
			ManifestKey:   "batches/" + id + "/manifest.jsonl",
			ManifestBytes: 10,
			ItemCount:     10,
			ListShards:    4,
			CounterShards: 2,
			Run:           1,
			Status:        api.StatusRunning,
			Source:        "inline",
			CreatedAt:     T0,
			RunStartedAt:  T0,
		},
		Chunks: 2,
	}
}

func create(t *testing.T, s ledger.Store, b ledger.Batch) ledger.Batch {
	t.Helper()
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatalf("create %s: %v", b.ID, err)
	}
	return b
}

func res(b ledger.Batch, key string, run int, now time.Time) ledger.Reservation {
	return ledger.Reservation{BatchID: b.ID, Key: key, RunID: ledger.RunID(b.ID, key), Run: run, ListShards: b.ListShards, Now: now, Lease: lease}
}

func rec(b ledger.Batch, key string, run, attempt int, o api.Outcome, now time.Time) ledger.Record {
	r := ledger.Record{BatchID: b.ID, Key: key, RunID: ledger.RunID(b.ID, key), Run: run, ListShards: b.ListShards, Attempt: attempt, Outcome: o, Now: now}
	switch o {
	case api.OutcomeSucceeded:
		r.Output = []byte(`{"ok":"` + key + `"}`)
	case api.OutcomeFailed:
		r.Error, r.Reason = "boom", api.ReasonPermanent
	case api.OutcomeQuarantined:
		r.Reason = api.ReasonQuarantine
	case api.OutcomeCancelled:
		r.Reason = api.ReasonCancel
	case api.OutcomeWithheld:
		r.Error, r.Reason, r.Hold = "HTTP 401", api.ReasonCredential, api.Hold{Subject: "secret:arn:aws:ssm:us-east-1:123456789012:parameter/x.y", Since: now}
	}
	return r
}

func reserve(t *testing.T, s ledger.Store, r ledger.Reservation) ledger.Item {
	t.Helper()
	it, err := s.Reserve(ctx, r)
	if err != nil {
		t.Fatalf("reserve %s: %v", r.Key, err)
	}
	return it
}

func record(t *testing.T, s ledger.Store, r ledger.Record) {
	t.Helper()
	if err := s.Record(ctx, r); err != nil {
		t.Fatalf("record %s: %v", r.Key, err)
	}
}

// done reserves key in run and records o under the new attempt.
func done(t *testing.T, s ledger.Store, b ledger.Batch, key string, run int, o api.Outcome, now time.Time) {
	t.Helper()
	it := reserve(t, s, res(b, key, run, now))
	record(t, s, rec(b, key, run, it.Attempt, o, now))
}

// get reads key's row through ScanShard (the contract has no point read).
func get(t *testing.T, s ledger.Store, b ledger.Batch, key string) (ledger.Item, bool) {
	t.Helper()
	items, _, err := s.ScanShard(ctx, b.ID, ledger.Shard(key, b.ListShards), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Key == key {
			return it, true
		}
	}
	return ledger.Item{}, false
}

func mustGet(t *testing.T, s ledger.Store, b ledger.Batch, key string) ledger.Item {
	t.Helper()
	it, ok := get(t, s, b, key)
	if !ok {
		t.Fatalf("item %s has no row", key)
	}
	return it
}

func isConflict(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, api.ErrConflict) {
		t.Fatalf("%s: got %v, want ErrConflict", what, err)
	}
}

func check[V comparable](t *testing.T, what string, got, want V) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// eventually retries read until it passes or 10 s have passed: the
// listings served by an index (ListItems of failed and quarantined items,
// ListBatches) are eventually consistent.
func eventually(t *testing.T, read func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := read()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func finish(t *testing.T, s ledger.Store, id string, run int, status api.Status, expires time.Time) {
	t.Helper()
	err := s.FinishRun(ctx, id, run, ledger.Finish{Status: status, ReportKey: fmt.Sprintf("batches/%s/report-%d.json", id, run),
		Census: api.Census{Total: 1, Succeeded: 1}, FinishedAt: T0.Add(time.Minute), ExpiresAt: expires})
	if err != nil {
		t.Fatalf("finish %s run %d: %v", id, run, err)
	}
}

var cases = []suiteCase{
	{"ReserveNewItem", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		it := reserve(t, s, res(b, "k1", 1, T0))
		check(t, "outcome", it.Outcome, api.OutcomeInFlight)
		check(t, "attempt", it.Attempt, 1)
		check(t, "run attempts", it.RunAttempts, 1)
		check(t, "run", it.Run, 1)
		check(t, "lease", it.LeaseUntil, ms(T0.Add(lease)))
		check(t, "interrupted", it.Interrupted, false)
		stored := mustGet(t, s, b, "k1")
		check(t, "stored run id", stored.RunID, ledger.RunID(b.ID, "k1"))
		check(t, "stored attempt", stored.Attempt, 1)
		check(t, "stored lease", stored.LeaseUntil, ms(T0.Add(lease)))
	}},
	{"ReserveUnderLiveLeaseConflictsWithStoredRow", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		reserve(t, s, res(b, "k1", 1, T0))
		it, err := s.Reserve(ctx, res(b, "k1", 1, T0.Add(lease-time.Millisecond)))
		isConflict(t, "second reserve", err)
		check(t, "stored outcome", it.Outcome, api.OutcomeInFlight)
		check(t, "stored attempt", it.Attempt, 1)
		check(t, "stored lease", it.LeaseUntil, ms(T0.Add(lease)))
	}},
	{"ReserveTakesOverAnExpiredLease", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		reserve(t, s, res(b, "k1", 1, T0))
		now := T0.Add(lease + time.Millisecond)
		it := reserve(t, s, res(b, "k1", 1, now))
		check(t, "attempt", it.Attempt, 2)
		check(t, "run attempts", it.RunAttempts, 2)
		check(t, "interrupted", it.Interrupted, true)
		check(t, "lease", it.LeaseUntil, ms(now.Add(lease)))
		// The first attempt is fenced off.
		isConflict(t, "record by the old attempt", s.Record(ctx, rec(b, "k1", 1, 1, api.OutcomeSucceeded, now)))
		record(t, s, rec(b, "k1", 1, 2, api.OutcomeSucceeded, now))
	}},
	{"ReserveAfterReleaseIsARetryNotAnInterruption", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		it := reserve(t, s, res(b, "k1", 1, T0))
		r := rec(b, "k1", 1, it.Attempt, api.OutcomeFailed, T0.Add(time.Second))
		r.Error, r.Spent = "throttled", pipeline.Cost{"tokens": 5}
		if err := s.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		stored := mustGet(t, s, b, "k1")
		check(t, "released outcome", stored.Outcome, api.OutcomeInFlight)
		check(t, "released error", stored.Error, "throttled")
		check(t, "released lease", stored.LeaseUntil, ms(T0.Add(time.Second)))
		it = reserve(t, s, res(b, "k1", 1, T0.Add(2*time.Second)))
		check(t, "attempt", it.Attempt, 2)
		check(t, "interrupted", it.Interrupted, false)
		check(t, "spent carried", it.Spent["tokens"], 5.0)
		check(t, "spent run", it.SpentRun, 1)
		isConflict(t, "release by the old attempt", s.Release(ctx, rec(b, "k1", 1, 1, api.OutcomeFailed, T0.Add(3*time.Second))))
	}},
	{"ThrottledReleaseCountsNoAttempt", func(t *testing.T, s ledger.Store) {
		// A throttled attempt is released with FirstAttempt moved past it
		// (ledger.Ended) and the streak's start: the next reservation's
		// attempt is the fence (2), but the run counts 1 attempt; a Release
		// sent again writes the same row; a counted retry ends the streak.
		b := create(t, s, newBatch("b1"))
		it := reserve(t, s, res(b, "k1", 1, T0))
		r := rec(b, "k1", 1, it.Attempt, api.OutcomeFailed, T0.Add(time.Second))
		r.Error, r.FirstAttempt, r.ThrottledSince = "429 TooManyRequestsException", 2, T0.Add(time.Second)
		for range 2 { // the second: the SDK sending it again after a lost answer
			if err := s.Release(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		stored := mustGet(t, s, b, "k1")
		check(t, "released attempts", stored.RunAttempts, 0)
		check(t, "released throttled since", stored.ThrottledSince, ms(T0.Add(time.Second)))
		it = reserve(t, s, res(b, "k1", 1, T0.Add(2*time.Second)))
		check(t, "attempt", it.Attempt, 2)
		check(t, "run attempts", it.RunAttempts, 1)
		check(t, "interrupted", it.Interrupted, false)
		check(t, "throttled since", it.ThrottledSince, ms(T0.Add(time.Second)))
		r = rec(b, "k1", 1, it.Attempt, api.OutcomeFailed, T0.Add(3*time.Second))
		r.Error, r.FirstAttempt = "500", 2
		if err := s.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		it = reserve(t, s, res(b, "k1", 1, T0.Add(4*time.Second)))
		check(t, "attempt after a counted retry", it.Attempt, 3)
		check(t, "run attempts after a counted retry", it.RunAttempts, 2)
		check(t, "streak ended", it.ThrottledSince.IsZero(), true)
		// A new run starts afresh.
		record(t, s, rec(b, "k1", 1, 3, api.OutcomeFailed, T0.Add(5*time.Second)))
		it = reserve(t, s, res(b, "k1", 2, T0.Add(6*time.Second)))
		check(t, "attempts of run 2", it.RunAttempts, 1)
		check(t, "no streak in run 2", it.ThrottledSince.IsZero(), true)
	}},
	{"RecordOfAnUnrunAttemptCountsNone", func(t *testing.T, s ledger.Store) {
		// An attempt a stop ended before its call is recorded cancelled
		// with FirstAttempt moved past it (ledger.Ended): the run counts
		// no attempt of the item; a Record sent again is the same write.
		b := create(t, s, newBatch("b1"))
		it := reserve(t, s, res(b, "k1", 1, T0))
		r := rec(b, "k1", 1, it.Attempt, api.OutcomeCancelled, T0.Add(time.Second))
		r.Reason, r.Error, r.FirstAttempt = api.ReasonCancel, "the run was cancelled before this item's call started", it.Attempt+1
		for range 2 {
			if err := s.Record(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		stored := mustGet(t, s, b, "k1")
		check(t, "outcome", stored.Outcome, api.OutcomeCancelled)
		check(t, "run attempts", stored.RunAttempts, 0)
		check(t, "attempt (the fence)", stored.Attempt, it.Attempt)
	}},
	{"RecordIsFenced", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		isConflict(t, "record without a row", s.Record(ctx, rec(b, "k1", 1, 1, api.OutcomeSucceeded, T0)))
		it := reserve(t, s, res(b, "k1", 1, T0))
		isConflict(t, "record of another attempt", s.Record(ctx, rec(b, "k1", 1, it.Attempt+1, api.OutcomeSucceeded, T0)))
		isConflict(t, "record of another run", s.Record(ctx, rec(b, "k1", 2, it.Attempt, api.OutcomeSucceeded, T0)))
		r := rec(b, "k1", 1, it.Attempt, api.OutcomeSucceeded, T0.Add(time.Second))
		r.Cost = pipeline.Cost{"usd": 0.5}
		record(t, s, r)
		stored := mustGet(t, s, b, "k1")
		check(t, "outcome", stored.Outcome, api.OutcomeSucceeded)
		check(t, "output", string(stored.Output), `{"ok":"k1"}`)
		check(t, "cost", stored.Cost["usd"], 0.5)
		check(t, "run attempts", stored.RunAttempts, 1)
		check(t, "updated", stored.UpdatedAt, ms(T0.Add(time.Second)))
		got, err := s.Reserve(ctx, res(b, "k1", 1, T0.Add(2*lease)))
		isConflict(t, "reserve of a succeeded item", err)
		check(t, "stored outcome", got.Outcome, api.OutcomeSucceeded)
	}},
	{"RecordSentAgainCountsAsWritten", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		it := reserve(t, s, res(b, "k1", 1, T0))
		r := rec(b, "k1", 1, it.Attempt, api.OutcomeFailed, T0)
		record(t, s, r)
		if err := s.Record(ctx, r); err != nil {
			t.Fatalf("the same record again: %v, want nil", err)
		}
		other := r
		other.Error = "another error"
		isConflict(t, "a different outcome on the same attempt", s.Record(ctx, other))
		other = rec(b, "k1", 1, it.Attempt, api.OutcomeSucceeded, T0)
		isConflict(t, "succeeded after failed", s.Record(ctx, other))
	}},
	{"RecordRefusesANonTerminalOutcome", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		it := reserve(t, s, res(b, "k1", 1, T0))
		err := s.Record(ctx, rec(b, "k1", 1, it.Attempt, api.OutcomeInFlight, T0))
		if err == nil || errors.Is(err, api.ErrConflict) {
			t.Fatalf("record in_flight: %v, want an error other than ErrConflict", err)
		}
		check(t, "outcome", mustGet(t, s, b, "k1").Outcome, api.OutcomeInFlight)
	}},
	{"SettleConditions", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		// No row: settled, no attempt made.
		if _, err := s.Settle(ctx, rec(b, "none", 1, 0, api.OutcomeCancelled, T0)); err != nil {
			t.Fatal(err)
		}
		it := mustGet(t, s, b, "none")
		check(t, "settled outcome", it.Outcome, api.OutcomeCancelled)
		check(t, "settled reason", it.Reason, api.ReasonCancel)
		check(t, "settled attempt", it.Attempt, 0)
		check(t, "settled run attempts", it.RunAttempts, 0)
		// Live lease: left to its attempt.
		reserve(t, s, res(b, "live", 1, T0))
		got, err := s.Settle(ctx, rec(b, "live", 1, 0, api.OutcomeFailed, T0.Add(time.Second)))
		isConflict(t, "settle under a live lease", err)
		check(t, "stored outcome", got.Outcome, api.OutcomeInFlight)
		// Expired lease: settled, its attempts kept.
		now := T0.Add(lease + time.Second)
		r := rec(b, "live", 1, 0, api.OutcomeFailed, now)
		r.Reason = api.ReasonDeadLettered
		if _, err := s.Settle(ctx, r); err != nil {
			t.Fatalf("settle of an expired lease: %v", err)
		}
		it = mustGet(t, s, b, "live")
		check(t, "outcome", it.Outcome, api.OutcomeFailed)
		check(t, "attempt", it.Attempt, 1)
		check(t, "run attempts", it.RunAttempts, 1)
		// Terminal in this run: conflict.
		got, err = s.Settle(ctx, rec(b, "live", 1, 0, api.OutcomeCancelled, now))
		isConflict(t, "settle of a terminal item", err)
		check(t, "stored outcome", got.Outcome, api.OutcomeFailed)
	}},
	{"SettleUnstartedLeavesReservedItems", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		if _, err := s.SettleUnstarted(ctx, rec(b, "none", 1, 0, api.OutcomeCancelled, T0)); err != nil {
			t.Fatal(err)
		}
		reserve(t, s, res(b, "k1", 1, T0))
		got, err := s.SettleUnstarted(ctx, rec(b, "k1", 1, 0, api.OutcomeCancelled, T0.Add(2*lease)))
		isConflict(t, "settle unstarted of an expired reservation of this run", err)
		check(t, "stored outcome", got.Outcome, api.OutcomeInFlight)
		// A failed row of an earlier run is unstarted in the next.
		done(t, s, b, "f", 1, api.OutcomeFailed, T0)
		if _, err := s.SettleUnstarted(ctx, rec(b, "f", 2, 0, api.OutcomeCancelled, T0.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		it := mustGet(t, s, b, "f")
		check(t, "run", it.Run, 2)
		check(t, "outcome", it.Outcome, api.OutcomeCancelled)
		check(t, "run attempts", it.RunAttempts, 0)
	}},
	{"ReserveInANewRun", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		for key, o := range map[string]api.Outcome{"s": api.OutcomeSucceeded, "f": api.OutcomeFailed, "q": api.OutcomeQuarantined} {
			done(t, s, b, key, 1, o, T0)
		}
		if _, err := s.Settle(ctx, rec(b, "c", 1, 0, api.OutcomeCancelled, T0)); err != nil {
			t.Fatal(err)
		}
		reserve(t, s, res(b, "i", 1, T0)) // in flight when run 1 ended
		now := T0.Add(time.Hour)
		for _, tc := range []struct {
			key     string
			ok      bool
			attempt int
		}{{"s", false, 1}, {"q", false, 1}, {"f", true, 2}, {"c", true, 1}, {"i", true, 2}} {
			it, err := s.Reserve(ctx, res(b, tc.key, 2, now))
			if !tc.ok {
				isConflict(t, "run 2 reserve of "+tc.key, err)
				check(t, tc.key+" stored run", it.Run, 1)
				continue
			}
			if err != nil {
				t.Fatalf("run 2 reserve of %s: %v", tc.key, err)
			}
			check(t, tc.key+" attempt", it.Attempt, tc.attempt)
			check(t, tc.key+" run attempts", it.RunAttempts, 1)
			check(t, tc.key+" interrupted", it.Interrupted, false)
		}
		if err := s.ReleaseItem(ctx, b.ID, b.ListShards, "q"); err != nil {
			t.Fatal(err)
		}
		it := reserve(t, s, res(b, "q", 2, now))
		check(t, "released item attempt", it.Attempt, 2)
	}},
	{"ReleaseItem", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		if err := s.ReleaseItem(ctx, b.ID, b.ListShards, "none"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("release without a row: %v, want ErrNotFound", err)
		}
		done(t, s, b, "s", 1, api.OutcomeSucceeded, T0)
		isConflict(t, "release of a succeeded item", s.ReleaseItem(ctx, b.ID, b.ListShards, "s"))
		done(t, s, b, "q", 1, api.OutcomeQuarantined, T0)
		if err := s.ReleaseItem(ctx, b.ID, b.ListShards, "q"); err != nil {
			t.Fatal(err)
		}
		it := mustGet(t, s, b, "q")
		check(t, "released", it.Released, true)
		check(t, "outcome", it.Outcome, api.OutcomeQuarantined)
	}},
	{"MarkCountedOncePerRun", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		for i, want := range []bool{true, false} {
			got, err := s.MarkCounted(ctx, b.ID, b.ListShards, "k1", 2, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("mark %d", i+1), got, want)
		}
		got, err := s.MarkCounted(ctx, b.ID, b.ListShards, "k1", 3, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		check(t, "mark in run 3", got, true)
	}},
	{"CreateBatch", func(t *testing.T, s ledger.Store) {
		if _, err := s.GetBatch(ctx, "b1"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("get before create: %v, want ErrNotFound", err)
		}
		b := newBatch("b1")
		on := false
		b.StopOnThreshold = &on
		create(t, s, b)
		got, err := s.GetBatch(ctx, "b1")
		if err != nil {
			t.Fatal(err)
		}
		check(t, "digest", got.Digest, "d1")
		check(t, "status", got.Status, api.StatusRunning)
		check(t, "created", got.CreatedAt, T0)
		check(t, "list shards", got.ListShards, 4)
		check(t, "chunks", got.Chunks, 2)
		check(t, "header", got.Headers["h"], "v")
		check(t, "early stop", got.EarlyStop(), false)
		other := newBatch("b1")
		other.Digest = "d2"
		stored, err := s.CreateBatch(ctx, other)
		if !errors.Is(err, api.ErrBatchExists) {
			t.Fatalf("second create: %v, want ErrBatchExists", err)
		}
		check(t, "stored digest", stored.Digest, "d1")
		ids, err := s.RunningBatches(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, []string{"b1"}) {
			t.Errorf("running = %v, want [b1]", ids)
		}
	}},
	{"SubmittingFreezeAndRefuse", func(t *testing.T, s ledger.Store) {
		b := newBatch("b1")
		b.Status, b.ItemCount, b.ListShards, b.Chunks = api.StatusSubmitting, 0, 0, 0
		create(t, s, b)
		for want := 1; want <= 2; want++ {
			got, err := s.BeginSubmit(ctx, "b1", T0.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			check(t, "submit attempts", got.SubmitAttempts, want)
			check(t, "submit deadline", got.SubmitDeadline, T0.Add(time.Minute))
		}
		f := newBatch("b1")
		f.Digest, f.ItemCount, f.ListShards, f.CounterShards, f.Chunks, f.RunStartedAt = "d9", 7, 2, 1, 1, T0.Add(time.Second)
		f.FanRows = 3
		f.Checked = &api.CheckSummary{Invalid: 2, Duplicates: 1, Object: "batches/b1/invalid/x.jsonl",
			First: []api.Problem{{Line: 3, Key: "k", Kind: api.ProblemSchema, Path: "/qty", Reason: "r", Handling: api.HandlingFailed}}}
		if err := s.Freeze(ctx, f); err != nil {
			t.Fatal(err)
		}
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "status", got.Status, api.StatusRunning)
		if got.Checked == nil || got.Checked.Invalid != 2 || got.Checked.Object != f.Checked.Object || len(got.Checked.First) != 1 || got.Checked.First[0].Path != "/qty" {
			t.Errorf("checked = %+v, want %+v", got.Checked, f.Checked)
		}
		check(t, "digest", got.Digest, "d9")
		check(t, "items", got.ItemCount, int64(7))
		check(t, "list shards", got.ListShards, 2)
		check(t, "chunks", got.Chunks, 1)
		check(t, "fan rows", got.FanRows, 3)
		check(t, "fanned out", got.FannedOut, false)
		check(t, "run started", got.RunStartedAt, T0.Add(time.Second))
		isConflict(t, "second freeze", s.Freeze(ctx, f))
		_, err := s.BeginSubmit(ctx, "b1", T0)
		isConflict(t, "begin submit of a running batch", err)
		isConflict(t, "refuse of a running batch", s.Refuse(ctx, "b1", api.SubmitRefusal{Code: "x"}, T0, T0.Add(time.Hour)))
		_, err = s.BeginSubmit(ctx, "none", T0)
		isConflict(t, "begin submit without a row", err)

		r := newBatch("b2")
		r.Status = api.StatusSubmitting
		create(t, s, r)
		expires := T0.Add(time.Hour)
		if err := s.Refuse(ctx, "b2", api.SubmitRefusal{Code: "bad_line", Line: 3}, T0.Add(time.Second), expires); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetBatch(ctx, "b2")
		check(t, "refused status", got.Status, api.StatusRefused)
		if got.Refusal == nil || got.Refusal.Code != "bad_line" || got.Refusal.Line != 3 {
			t.Errorf("refusal = %+v", got.Refusal)
		}
		check(t, "refused expires", got.ExpiresAt, expires)
		ids, _ := s.RunningBatches(ctx)
		if !slices.Equal(ids, []string{"b1"}) {
			t.Errorf("running = %v, want [b1]", ids)
		}
		m, err := s.ExpiredMarkers(ctx, expires, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 1 || m[0].BatchID != "b2" || !m[0].ExpiresAt.Equal(expires) {
			t.Errorf("markers = %+v, want b2's", m)
		}
	}},
	{"StopFirstWins", func(t *testing.T, s ledger.Store) {
		create(t, s, newBatch("b1"))
		isConflict(t, "stop of another run", s.Stop(ctx, ledger.StopMark{BatchID: "b1", Run: 2, Status: api.StatusCancelled, Detail: "x"}))
		if err := s.Stop(ctx, ledger.StopMark{BatchID: "b1", Run: 1, Status: api.StatusThresholdExceeded, Detail: "3 > 2", Ran: 7, Failures: 3}); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "second stop", s.Stop(ctx, ledger.StopMark{BatchID: "b1", Run: 1, Status: api.StatusCancelled, Detail: "cancel"}))
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "stop", got.Stop, api.StatusThresholdExceeded)
		check(t, "detail", got.StopDetail, "3 > 2")
		check(t, "ran at the stop", got.StopRan, int64(7))
		check(t, "failures at the stop", got.StopFailures, int64(3))
		isConflict(t, "stop without a row", s.Stop(ctx, ledger.StopMark{BatchID: "none", Run: 1, Status: api.StatusCancelled}))
	}},
	{"PauseProbeUnpause", func(t *testing.T, s ledger.Store) {
		create(t, s, newBatch("b1"))
		outage := ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByOutage, Class: "http 502", Error: "webhook: k: HTTP 502", Now: T0}
		isConflict(t, "pause of another run", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 2, By: api.PauseByOutage, Now: T0}))
		isConflict(t, "probe of a batch not paused", s.ClaimProbe(ctx, ledger.ProbeClaim{BatchID: "b1", Run: 1, Since: T0, Probe: 1, Now: T0}))
		check(t, "pause on an outage", s.Pause(ctx, outage), nil)
		isConflict(t, "a second outage pause", s.Pause(ctx, outage))
		got, _ := s.GetBatch(ctx, "b1")
		if got.Pause == nil {
			t.Fatal("no pause on the row")
		}
		check(t, "pause", *got.Pause, api.Pause{By: api.PauseByOutage, Since: T0, Class: "http 502", Error: "webhook: k: HTTP 502"})
		check(t, "pauses", got.Pauses, 1)
		probe := ledger.ProbeClaim{BatchID: "b1", Run: 1, Since: T0, Probe: 2, Now: T0.Add(time.Minute)}
		check(t, "claim probe 2", s.ClaimProbe(ctx, probe), nil)
		isConflict(t, "claim probe 2 again", s.ClaimProbe(ctx, probe))
		isConflict(t, "claim an earlier probe", s.ClaimProbe(ctx, ledger.ProbeClaim{BatchID: "b1", Run: 1, Since: T0, Probe: 1, Now: T0}))
		isConflict(t, "claim a probe of another pause", s.ClaimProbe(ctx, ledger.ProbeClaim{BatchID: "b1", Run: 1, Since: T0.Add(time.Second), Probe: 3, Now: T0}))
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "probes", got.Pause.Probes, 2)
		isConflict(t, "unpause of another outage pause", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByOutage, Since: T0.Add(time.Second)}))
		// A caller's pause replaces the outage's as it read it, its time
		// kept; no probe, no outage unpause ends it.
		isConflict(t, "a caller's pause over an outage pause it did not read", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0.Add(2 * time.Minute)}))
		stale := api.Pause{By: api.PauseByOutage, Since: T0.Add(time.Second)}
		isConflict(t, "a caller's pause over another outage pause", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0.Add(2 * time.Minute), Replaces: &stale}))
		read := api.Pause{By: api.PauseByOutage, Since: T0, Class: "http 502", Error: "webhook: k: HTTP 502", Probes: 2}
		check(t, "a caller pauses", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0.Add(2 * time.Minute), Replaces: &read}), nil)
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "paused ms after the outage pause replaced", got.PausedMs, int64(120_000))
		if got.LastPause == nil {
			t.Fatal("the replaced outage pause is not kept as the last")
		}
		check(t, "the replaced outage pause", *got.LastPause, api.PauseSpan{By: api.PauseByOutage, Since: T0, Until: T0.Add(2 * time.Minute), Class: "http 502", Error: "webhook: k: HTTP 502", Probes: 2, EndedBy: api.PauseByCaller})
		isConflict(t, "a caller pauses again", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0.Add(3 * time.Minute)}))
		isConflict(t, "probe of a caller's pause", s.ClaimProbe(ctx, ledger.ProbeClaim{BatchID: "b1", Run: 1, Since: T0.Add(2 * time.Minute), Probe: 1, Now: T0}))
		isConflict(t, "an outage unpause of a caller's pause", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByOutage, Since: T0.Add(2 * time.Minute)}))
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "pause by", got.Pause.By, api.PauseByCaller)
		check(t, "pause class", got.Pause.Class, "")
		check(t, "pauses", got.Pauses, 2)
		callers := api.Pause{By: api.PauseByCaller, Since: T0.Add(2 * time.Minute)}
		isConflict(t, "an unpause of a pause other than the one read", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Since: T0, Now: T0.Add(5 * time.Minute), Pause: callers}))
		check(t, "a caller unpauses", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Since: callers.Since, Now: T0.Add(5 * time.Minute), Pause: callers}), nil)
		isConflict(t, "unpause of a batch not paused", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller}))
		got, _ = s.GetBatch(ctx, "b1")
		if got.Pause != nil {
			t.Fatalf("still paused: %+v", *got.Pause)
		}
		// An outage pause its probe ends; a stopping or finished run is not paused.
		check(t, "pause again", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByOutage, Class: "timeout", Error: "t", Now: T0.Add(time.Hour)}), nil)
		timeout := api.Pause{By: api.PauseByOutage, Since: T0.Add(time.Hour), Class: "timeout", Error: "t", Probes: 1}
		check(t, "the probe ends it", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByOutage, Since: timeout.Since, Now: T0.Add(time.Hour + 1500*time.Millisecond), Pause: timeout}), nil)
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "paused ms (2 min by the first outage, 3 min by the caller, 1.5 s by the second outage)", got.PausedMs, int64(301_500))
		if got.LastPause == nil {
			t.Fatal("no last pause on the row")
		}
		check(t, "last pause", *got.LastPause, api.PauseSpan{By: api.PauseByOutage, Since: T0.Add(time.Hour), Until: T0.Add(time.Hour + 1500*time.Millisecond), Class: "timeout", Error: "t", Probes: 1, EndedBy: api.PauseByOutage})
		check(t, "pause before the finish", s.Pause(ctx, outage), nil)
		if err := s.Stop(ctx, ledger.StopMark{BatchID: "b1", Run: 1, Status: api.StatusCancelled, Detail: "c"}); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "a caller's pause of a stopping run", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0}))
		finish(t, s, "b1", 1, api.StatusCancelled, T0.Add(24*time.Hour))
		got, _ = s.GetBatch(ctx, "b1")
		if got.Pause != nil {
			t.Errorf("a finished run is paused: %+v", *got.Pause)
		}
		isConflict(t, "pause of a finished run", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0}))
		got, err := s.StartRun(ctx, "b1", 1, T0.Add(2*time.Hour))
		check(t, "start run 2", err, nil)
		check(t, "run 2 pauses", got.Pauses, 0)
		check(t, "run 2 paused ms", got.PausedMs, int64(0))
		if got.LastPause != nil {
			t.Errorf("run 2 starts with run 1's last pause: %+v", *got.LastPause)
		}
		if got.Pause != nil {
			t.Errorf("run 2 starts paused: %+v", *got.Pause)
		}
	}},
	{"BudgetPauseAndRaise", func(t *testing.T, s ledger.Store) {
		b := newBatch("b1")
		b.BudgetUSD = 5
		create(t, s, b)
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "budget stored", got.BudgetUSD, 5.0)
		budget := ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByBudget, Class: "budget", Error: "budget $5 reached ($5 spent)", BudgetUSD: 5, Now: T0}
		isConflict(t, "a budget pause under a budget the row no longer has", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByBudget, BudgetUSD: 4, Now: T0}))
		check(t, "pause at the budget", s.Pause(ctx, budget), nil)
		got, _ = s.GetBatch(ctx, "b1")
		if got.Pause == nil {
			t.Fatal("no pause on the row")
		}
		check(t, "pause", *got.Pause, api.Pause{By: api.PauseByBudget, Since: T0, Class: "budget", Error: "budget $5 reached ($5 spent)"})
		isConflict(t, "a second budget pause", s.Pause(ctx, budget))
		isConflict(t, "a caller's pause does not replace a budget's", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0}))
		isConflict(t, "an outage's unpause of a budget pause", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByOutage, Since: T0}))
		isConflict(t, "a caller's unpause of a budget pause (the store's own condition)", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Since: T0}))
		isConflict(t, "a probe of a budget pause", s.ClaimProbe(ctx, ledger.ProbeClaim{BatchID: "b1", Run: 1, Since: T0, Probe: 1, Now: T0}))
		check(t, "raise the budget", s.SetLimits(ctx, "b1", ledger.Limits{BudgetUSD: 12.5}), nil)
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "budget raised", got.BudgetUSD, 12.5)
		if got.Pause == nil || got.Pause.By != api.PauseByBudget {
			t.Fatalf("the raise alone ended the pause: %+v", got.Pause)
		}
		check(t, "the raise's unpause", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByBudget, Since: T0}), nil)
		isConflict(t, "a budget unpause of a batch not paused", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByBudget}))
		check(t, "a caller pauses", s.Pause(ctx, ledger.PauseMark{BatchID: "b1", Run: 1, By: api.PauseByCaller, Now: T0.Add(time.Minute)}), nil)
		isConflict(t, "a budget unpause of a caller's pause", s.Unpause(ctx, ledger.UnpauseMark{BatchID: "b1", Run: 1, By: api.PauseByBudget}))
		isConflict(t, "the budget of no batch", s.SetLimits(ctx, "none", ledger.Limits{BudgetUSD: 1}))
	}},
	{"SampleApproval", func(t *testing.T, s ledger.Store) {
		plain := newBatch("plain")
		create(t, s, plain)
		est := &api.SampleEstimate{MadeAt: T0, Items: 10, SampleItems: 2, Failed: 1, FailureRate: 0.5, CostUSD: 0.25, Pace: "the sample's pace"}
		isConflict(t, "an estimate on a batch without a sample", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "plain", Run: 1, Estimate: est}))
		isConflict(t, "a decision on a batch without a sample", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "plain", Run: 1, Decision: api.ApprovalApproved, By: api.DecidedByCaller, Now: T0}))
		b := newBatch("b1")
		b.Sample = 2
		create(t, s, b)
		got, _ := s.GetBatch(ctx, "b1")
		if a := got.Approval; a == nil || a.State != api.ApprovalSampling || a.Sample != 2 || !a.Holds() {
			t.Fatalf("approval of a new sampled batch: %+v, want sampling 2", a)
		}
		isConflict(t, "an estimate of another run", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "b1", Run: 2, Estimate: est}))
		check(t, "the estimate", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "b1", Run: 1, Estimate: est}), nil)
		isConflict(t, "a second estimate", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "b1", Run: 1, Estimate: est}))
		got, _ = s.GetBatch(ctx, "b1")
		if a := got.Approval; a == nil || a.State != api.ApprovalAwaiting || a.Estimate == nil || !reflect.DeepEqual(*a.Estimate, *est) {
			t.Fatalf("approval after the estimate: %+v, want awaiting_approval with %+v", a, *est)
		}
		approve := ledger.ApprovalMark{BatchID: "b1", Run: 1, Decision: api.ApprovalApproved, By: api.DecidedByCaller, Now: T0.Add(time.Minute)}
		check(t, "the approval", s.MarkApproval(ctx, approve), nil)
		isConflict(t, "a second decision", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "b1", Run: 1, Decision: api.ApprovalRejected, By: api.DecidedByCaller, Now: T0}))
		isConflict(t, "an estimate after the decision", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "b1", Run: 1, Estimate: est}))
		got, _ = s.GetBatch(ctx, "b1")
		if a := got.Approval; a == nil || a.State != api.ApprovalApproved || a.DecidedBy != api.DecidedByCaller || !a.DecidedAt.Equal(T0.Add(time.Minute)) || a.Holds() || a.Estimate == nil {
			t.Fatalf("approval after the decision: %+v, want approved by a caller at T0+1m, the estimate kept", a)
		}
		// A decision on a stopping run is refused.
		c := newBatch("c1")
		c.Sample = 2
		create(t, s, c)
		check(t, "stop c1", s.Stop(ctx, ledger.StopMark{BatchID: "c1", Run: 1, Status: api.StatusCancelled, Detail: "cancelled"}), nil)
		isConflict(t, "a decision on a stopping run", s.MarkApproval(ctx, ledger.ApprovalMark{BatchID: "c1", Run: 1, Decision: api.ApprovalApproved, By: api.DecidedByCaller, Now: T0}))
	}},
	{"LaneStreaksAddUntilAnswered", func(t *testing.T, s ledger.Store) {
		b := newBatch("b1")
		b.CounterLanes, b.CounterShards = 1, 1
		b = create(t, s, b)
		w := func(at int, answered bool, streaks map[int]int64, o map[api.Outcome]int64) ledger.LaneCounted {
			t.Helper()
			got, err := s.CountLane(ctx, ledger.LaneCount{BatchID: b.ID, Run: 1, Lane: 0, Target: 100, Outcomes: o,
				Answered: answered, Streaks: streaks, Token: fmt.Sprintf("s%d", at), Now: T0.Add(time.Duration(at) * time.Second)})
			check(t, fmt.Sprintf("write %d", at), err, nil)
			return got
		}
		got := w(1, false, map[int]int64{3: 4}, nil)
		check(t, "slot 3 after 4", got.Streaks[3], int64(4))
		got = w(2, false, map[int]int64{3: 7, 5: 1}, nil)
		check(t, "slot 3 after 11", got.Streaks[3], int64(11))
		check(t, "slot 5", got.Streaks[5], int64(1))
		got = w(3, true, nil, map[api.Outcome]int64{api.OutcomeSucceeded: 1})
		check(t, "done", got.Done, int64(1))
		got = w(4, false, map[int]int64{3: 2}, nil)
		check(t, "slot 3 after an answer", got.Streaks[3], int64(2))
		got = w(5, false, map[int]int64{5: 1}, map[api.Outcome]int64{api.OutcomeFailed: 1})
		check(t, "slot 5 after an answer", got.Streaks[5], int64(1))
		check(t, "done with the streak write", got.Done, int64(2))
	}},
	{"FinishRunOnce", func(t *testing.T, s ledger.Store) {
		create(t, s, newBatch("b1"))
		if err := s.SetFannedOut(ctx, "b1", 1); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "set fanned out of another run", s.SetFannedOut(ctx, "b1", 2))
		expires := T0.Add(24 * time.Hour)
		isConflict(t, "finish of another run", s.FinishRun(ctx, "b1", 2, ledger.Finish{Status: api.StatusCompleted, ExpiresAt: expires}))
		finish(t, s, "b1", 1, api.StatusCompleted, expires)
		isConflict(t, "second finish", s.FinishRun(ctx, "b1", 1, ledger.Finish{Status: api.StatusCompleted, ExpiresAt: expires}))
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "status", got.Status, api.StatusCompleted)
		check(t, "fanned out", got.FannedOut, true)
		check(t, "report", got.ReportKey, "batches/b1/report-1.json")
		check(t, "finished", got.FinishedAt, T0.Add(time.Minute))
		check(t, "expires", got.ExpiresAt, expires)
		if got.FinalCensus == nil || got.FinalCensus.Succeeded != 1 {
			t.Errorf("census = %+v", got.FinalCensus)
		}
		ids, _ := s.RunningBatches(ctx)
		check(t, "running", len(ids), 0)
		refs, _ := s.Unpublished(ctx)
		if !slices.Equal(refs, []ledger.RunRef{{BatchID: "b1", Run: 1}}) {
			t.Errorf("unpublished = %v", refs)
		}
	}},
	{"FinalizeFailedEndsTheRunAtTheLimit", func(t *testing.T, s ledger.Store) {
		create(t, s, newBatch("b1"))
		expires := T0.Add(24 * time.Hour)
		ff := func(run int, reason string) ledger.FinalizeFailure {
			return ledger.FinalizeFailure{BatchID: "b1", Run: run, Reason: reason, Limit: 2, Now: T0.Add(time.Minute), ExpiresAt: expires}
		}
		_, err := s.FinalizeFailed(ctx, ff(2, "x"))
		isConflict(t, "a failure of another run", err)
		ended, err := s.FinalizeFailed(ctx, ff(1, "write report: AccessDenied"))
		if err != nil || ended {
			t.Fatalf("first failure: ended %v, %v", ended, err)
		}
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "status after one", got.Status, api.StatusRunning)
		check(t, "failure after one", got.Failure, "write report: AccessDenied")
		ended, err = s.FinalizeFailed(ctx, ff(1, "write report: AccessDenied again"))
		if err != nil || !ended {
			t.Fatalf("second failure: ended %v, %v", ended, err)
		}
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "status", got.Status, api.StatusFinalizeFailed)
		check(t, "failure", got.Failure, "write report: AccessDenied again")
		check(t, "needs attention", got.NeedsAttention, true)
		check(t, "finished", got.FinishedAt, T0.Add(time.Minute))
		check(t, "expires", got.ExpiresAt, expires)
		ids, _ := s.RunningBatches(ctx)
		check(t, "running", len(ids), 0)
		m, _ := s.ExpiredMarkers(ctx, expires.Add(time.Millisecond), 10)
		check(t, "retention marker", len(m), 1)
		_, err = s.FinalizeFailed(ctx, ff(1, "x"))
		isConflict(t, "a failure once ended", err)
		got, err = s.StartRun(ctx, "b1", 1, T0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "resumed", got.Status, api.StatusRunning)
		check(t, "failure cleared", got.Failure, "")
		ended, err = s.FinalizeFailed(ctx, ff(2, "y"))
		if err != nil || ended {
			t.Fatalf("first failure of run 2: ended %v, %v (the count starts again)", ended, err)
		}
	}},
	{"StartRunTransitions", func(t *testing.T, s ledger.Store) {
		create(t, s, newBatch("b1"))
		_, err := s.StartRun(ctx, "b1", 1, T0)
		isConflict(t, "start run of a running batch", err)
		if err := s.Stop(ctx, ledger.StopMark{BatchID: "b1", Run: 1, Status: api.StatusCancelled, Detail: "by x", Ran: 2}); err != nil {
			t.Fatal(err)
		}
		finish(t, s, "b1", 1, api.StatusCancelled, T0.Add(24*time.Hour))
		_, err = s.StartRun(ctx, "b1", 2, T0)
		isConflict(t, "start run from another run", err)
		got, err := s.StartRun(ctx, "b1", 1, T0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "run", got.Run, 2)
		check(t, "status", got.Status, api.StatusRunning)
		check(t, "stop", got.Stop, api.Status(""))
		check(t, "fanned out", got.FannedOut, false)
		check(t, "run started", got.RunStartedAt, T0.Add(time.Hour))
		ids, _ := s.RunningBatches(ctx)
		if !slices.Equal(ids, []string{"b1"}) {
			t.Errorf("running = %v", ids)
		}
		_, err = s.StartRun(ctx, "b1", 2, T0)
		isConflict(t, "start run while running", err)

		r := newBatch("r")
		r.Status = api.StatusSubmitting
		create(t, s, r)
		if err := s.Refuse(ctx, "r", api.SubmitRefusal{Code: "x"}, T0, T0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		_, err = s.StartRun(ctx, "r", 1, T0)
		isConflict(t, "start run of a refused batch", err)
	}},
	{"MarkForgetting", func(t *testing.T, s ledger.Store) {
		if err := s.MarkForgetting(ctx, ledger.ForgetMark{BatchID: "none", Now: T0}); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("forget without a row: %v, want ErrNotFound", err)
		}
		b := create(t, s, newBatch("b1"))
		mark := ledger.ForgetMark{BatchID: "b1", CreatedAt: b.CreatedAt, Now: T0.Add(2 * time.Hour), Token: "first"}
		isConflict(t, "forget while running", s.MarkForgetting(ctx, mark))
		finish(t, s, "b1", 1, api.StatusCompleted, T0.Add(time.Hour))
		for range 2 {
			if err := s.MarkForgetting(ctx, mark); err != nil {
				t.Fatal(err)
			}
		}
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "pending deletion", got.PendingDeletion, true)
		check(t, "marked at (ms)", got.ForgettingAt.UnixMilli(), mark.Now.UnixMilli())
		_, err := s.StartRun(ctx, "b1", 1, T0)
		isConflict(t, "start run while forgetting", err)
		// Another batch of the id than the one read is not marked.
		other := mark
		other.CreatedAt = T0.Add(time.Minute)
		if err := s.MarkForgetting(ctx, other); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("mark of another batch of the id: %v, want ErrNotFound", err)
		}
		// A forget that must be the only one is refused within the quiet
		// time of another's mark, and marks after it.
		only := mark
		only.Quiet, only.Now, only.Token = ledger.ForgetQuiet, mark.Now.Add(ledger.ForgetQuiet-time.Second), "only"
		if err := s.MarkForgetting(ctx, only); !errors.Is(err, ledger.ErrForgetGoing) || !errors.Is(err, api.ErrConflict) {
			t.Fatalf("mark within the quiet time: %v, want ErrForgetGoing", err)
		}
		only.Now = mark.Now.Add(ledger.ForgetQuiet + time.Second)
		if err := s.MarkForgetting(ctx, only); err != nil {
			t.Fatalf("mark past the quiet time: %v", err)
		}
		// The same mark sent again (the SDK's resend after a lost answer)
		// is its own, not another forget's.
		if err := s.MarkForgetting(ctx, only); err != nil {
			t.Fatalf("the mark sent again: %v, want its first answer", err)
		}
		// The batch row is the latest mark's to delete.
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "marked by", got.ForgettingBy, "only")
		stale := got
		stale.ForgettingBy = mark.Token
		if err := s.DeleteBatch(ctx, stale); !errors.Is(err, ledger.ErrForgetGoing) {
			t.Fatalf("delete by an earlier mark: %v, want ErrForgetGoing", err)
		}
		if _, err := s.GetBatch(ctx, "b1"); err != nil {
			t.Fatalf("the batch row after an earlier mark's delete: %v, want it kept", err)
		}
		if err := s.DeleteBatch(ctx, got); err != nil {
			t.Fatalf("delete by the latest mark: %v", err)
		}
		if _, err := s.GetBatch(ctx, "b1"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("the batch row after the latest mark's delete: %v, want gone", err)
		}
		if err := s.DeleteBatch(ctx, got); err != nil {
			t.Fatalf("the same delete sent again: %v", err)
		}
	}},
	{"CountChunkSumsCost", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("cost"))
		// Ten message batches of one item each, across both counter
		// shards: the cost sums are exact decimals, as the census's.
		for i := range 10 {
			cost, spent := pipeline.CostSum{}, pipeline.CostSum{}
			cost.Add(pipeline.Cost{"usd": 0.1, "calls": 1})
			spent.Add(pipeline.Cost{"usd": 0.1, "calls": 3})
			first := int64(i%2) * 5
			if _, err := s.CountChunk(ctx, ledger.ChunkCount{BatchID: b.ID, Run: 1, First: first, Items: 5, Chunks: 2, Shards: 2,
				Outcomes: map[api.Outcome]int64{api.OutcomeSucceeded: 1}, Cost: cost, Spent: spent, Now: T0}); err != nil {
				t.Fatal(err)
			}
		}
		// A count without cost adds none.
		if _, err := s.CountChunk(ctx, ledger.ChunkCount{BatchID: b.ID, Run: 1, First: 0, Items: 5, Chunks: 2, Shards: 2,
			Outcomes: map[api.Outcome]int64{api.OutcomeFailed: 1}, Failures: 1, Now: T0}); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() error {
			p, err := s.Progress(ctx, b.ID, 1, 2)
			if err != nil {
				return err
			}
			if p.Done != 11 || p.Cost.Text("usd") != "1" || p.Cost.Text("calls") != "10" || p.Spent.Text("usd") != "1" || p.Spent.Text("calls") != "30" || len(p.Cost) != 2 {
				return fmt.Errorf("progress: done %d, cost %v, spent %v; want 11, usd=1 calls=10, usd=1 calls=30", p.Done, p.Cost, p.Spent)
			}
			return nil
		})
	}},
	{"CountChunkCompletion", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		cc := func(first, items int64, o map[api.Outcome]int64, failures int64, runFailures bool, at time.Time) ledger.ChunkCounted {
			t.Helper()
			got, err := s.CountChunk(ctx, ledger.ChunkCount{BatchID: b.ID, Run: 1, First: first, Items: items, Chunks: 2,
				Shards: b.CounterShards, Outcomes: o, Failures: failures, RunFailures: runFailures, Now: at})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		type ok = map[api.Outcome]int64
		got := cc(0, 3, ok{api.OutcomeSucceeded: 2}, 0, false, T0)
		check(t, "first write chunk done", got.ChunkDone, false)
		got = cc(3, 2, ok{api.OutcomeFailed: 1}, 1, true, T0.Add(time.Second))
		check(t, "partial chunk 2 done", got.ChunkDone, false)
		check(t, "run failures", got.Failures, int64(1))
		got = cc(0, 3, ok{api.OutcomeQuarantined: 1}, 1, false, T0.Add(2*time.Second))
		check(t, "chunk 1 done", got.ChunkDone, true)
		check(t, "run done after chunk 1", got.RunDone, false)
		got = cc(3, 2, ok{api.OutcomeCancelled: 1}, 0, true, T0.Add(3*time.Second))
		check(t, "chunk 2 done", got.ChunkDone, true)
		check(t, "run done", got.RunDone, true)
		check(t, "run failures", got.Failures, int64(1))
		got = cc(3, 2, ok{api.OutcomeSucceeded: 1}, 0, false, T0.Add(4*time.Second))
		check(t, "a write past the count completes nothing", got.ChunkDone || got.RunDone, false)

		p, err := s.Progress(ctx, b.ID, 1, b.CounterShards)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "done", p.Done, int64(6))
		check(t, "failures", p.Failures, int64(2))
		wantBy := ok{api.OutcomeSucceeded: 3, api.OutcomeFailed: 1, api.OutcomeQuarantined: 1, api.OutcomeCancelled: 1}
		for o, n := range wantBy {
			check(t, "by outcome "+string(o), p.ByOutcome[o], n)
		}
		check(t, "updated", p.UpdatedAt, T0.Add(4*time.Second))
		p, err = s.Progress(ctx, b.ID, 2, b.CounterShards)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "run 2 done", p.Done, int64(0))
		check(t, "run 2 updated", p.UpdatedAt.IsZero(), true)
	}},
	{"CountLanesFillToTheirTargets", func(t *testing.T, s ledger.Store) {
		b := newBatch("b1")
		b.CounterLanes, b.CounterShards = 2, 2
		b = create(t, s, b)
		type ok = map[api.Outcome]int64
		cl := func(lane int, target int64, o ok, failures int64, at time.Time) (ledger.LaneCounted, error) {
			t.Helper()
			return s.CountLane(ctx, ledger.LaneCount{BatchID: b.ID, Run: 1, Lane: lane, Target: target, Outcomes: o,
				Failures: failures, Token: fmt.Sprintf("t%d", at.UnixMilli()), Now: at})
		}
		got, err := cl(0, 3, ok{api.OutcomeSucceeded: 2}, 0, T0)
		check(t, "first write", err, nil)
		check(t, "lane 0 done", got.Done, int64(2))
		got, err = cl(0, 3, ok{api.OutcomeFailed: 2}, 2, T0.Add(time.Second))
		isConflict(t, "2 items into 1 room", err)
		check(t, "room", got.Room, int64(1))
		got, err = cl(0, 3, ok{api.OutcomeFailed: 1}, 1, T0.Add(2*time.Second))
		check(t, "fill lane 0", err, nil)
		check(t, "lane 0 full", got.Done, int64(3))
		check(t, "lane 0 failures", got.Failures, int64(1))
		got, err = cl(0, 3, ok{api.OutcomeSucceeded: 1}, 0, T0.Add(3*time.Second))
		isConflict(t, "a full lane", err)
		check(t, "no room", got.Room, int64(0))
		got, err = cl(1, 2, ok{api.OutcomeQuarantined: 1, api.OutcomeCancelled: 1}, 1, T0.Add(4*time.Second))
		check(t, "lane 1", err, nil)
		check(t, "lane 1 full", got.Done, int64(2))

		r, err := s.CountRun(ctx, ledger.RunCount{BatchID: b.ID, Run: 1, LanesDone: 1, Token: "r1", Now: T0})
		check(t, "run row", err, nil)
		check(t, "lanes done", r.LanesDone, int64(1))
		r, err = s.CountRun(ctx, ledger.RunCount{BatchID: b.ID, Run: 1, LanesDone: 1, Failures: 2, Token: "r2", Now: T0})
		check(t, "run row again", err, nil)
		check(t, "lanes done", r.LanesDone, int64(2))
		check(t, "run failures", r.Failures, int64(2))

		p, err := s.Progress(ctx, b.ID, 1, b.CounterShards)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "done", p.Done, int64(5))
		check(t, "failures", p.Failures, int64(2))
		for o, n := range (ok{api.OutcomeSucceeded: 2, api.OutcomeFailed: 1, api.OutcomeQuarantined: 1, api.OutcomeCancelled: 1}) {
			check(t, "by outcome "+string(o), p.ByOutcome[o], n)
		}
		check(t, "updated", p.UpdatedAt, T0.Add(4*time.Second))
	}},
	{"RetryTotalsOutliveThePrune", func(t *testing.T, s ledger.Store) {
		// A wait write may prune the minutes already past (they count no
		// wait); the run's retry totals, which the report prints, count
		// every retry written, whatever was pruned.
		b := create(t, s, newBatch("b1"))
		m := ledger.DueMinute(T0.Add(time.Minute))
		late := T0.Add(5 * time.Minute) // within the prune of m
		for i, c := range []ledger.WaitCount{
			{Due: map[int64]int64{m: 3}, Throttled: map[int64]int64{m: 1},
				Causes: map[string]ledger.WaitCause{"http 500": {Error: "webhook: k1: HTTP 500", Due: map[int64]int64{m: 2}}}, Now: T0},
			{Due: map[int64]int64{ledger.DueMinute(late) + 1: 1},
				Causes: map[string]ledger.WaitCause{"http 500": {Error: "webhook: k2: HTTP 500", Due: map[int64]int64{ledger.DueMinute(late) + 1: 1}}}, Now: late},
		} {
			c.BatchID, c.Run, c.Token = b.ID, 1, fmt.Sprintf("t%d", i)
			check(t, fmt.Sprintf("wait write %d", i), s.CountWaits(ctx, c), nil)
		}
		p, err := s.Progress(ctx, b.ID, 1, max(1, b.CounterShards))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "retried", p.Retried, int64(4))
		check(t, "retried throttled", p.RetriedThrottled, int64(1))
		check(t, "http 500 total", p.Causes["http 500"].Total, int64(3))
		check(t, "waiting after the late write", p.Waiting(late), int64(1))
	}},
	{"LiveCountersBesideTheLanes", func(t *testing.T, s ledger.Store) {
		// The live view's wait and fan rows live in the counter
		// partitions: Progress reads them with the lanes, they change
		// neither done nor the time of the last progress, and a chunk
		// fanned out twice counts once.
		b := newBatch("b1")
		b.CounterLanes, b.CounterShards = 2, 2
		b = create(t, s, b)
		if _, err := s.CountLane(ctx, ledger.LaneCount{BatchID: b.ID, Run: 1, Lane: 0, Target: 10,
			Outcomes: map[api.Outcome]int64{api.OutcomeSucceeded: 2}, Token: "l1", Now: T0}); err != nil {
			t.Fatal(err)
		}
		m := ledger.DueMinute(T0.Add(5 * time.Minute))
		for i, c := range []ledger.WaitCount{
			{Lane: 0, Due: map[int64]int64{m: 3}, Interrupted: 1, TimedOut: 2, Throttled: map[int64]int64{m: 1},
				Causes: map[string]ledger.WaitCause{"http 502": {Error: "webhook: k1: HTTP 502", Due: map[int64]int64{m: 2}}}},
			{Lane: 1, Due: map[int64]int64{m: 2, m + 10: 4}, TimedOut: 1, Causes: map[string]ledger.WaitCause{
				"http 502":           {Error: "webhook: k7: HTTP 502", Due: map[int64]int64{m: 2}},
				"connection refused": {Error: "webhook: dial tcp: connection refused", Due: map[int64]int64{m + 10: 3}}}},
			{Lane: 1, Due: map[int64]int64{m + 10: 1}, Interrupted: 2, Throttled: map[int64]int64{m + 10: 1}},
		} {
			c.BatchID, c.Run, c.Token, c.Now = b.ID, 1, fmt.Sprintf("w%d", i), T0.Add(time.Duration(i+1)*time.Minute)
			check(t, fmt.Sprintf("wait write %d", i), s.CountWaits(ctx, c), nil)
		}
		for i, c := range []ledger.FanCount{
			{Lane: 0, First: 0, Items: 5},
			{Lane: 1, First: 5, Items: 5},
			{Lane: 0, First: 0, Items: 5}, // the same chunk again
			{Lane: 1, Row: 3, First: 10, Items: 4},
			{Lane: 1, Row: 3, First: 10, Items: 4}, // again, in its row
			{Lane: 0, Row: 1, First: 14, Items: 1},
		} {
			c.BatchID, c.Run, c.Now = b.ID, 1, T0.Add(time.Duration(i+5)*time.Minute)
			check(t, fmt.Sprintf("fan write %d", i), s.CountFanned(ctx, c), nil)
		}
		p, err := s.Progress(ctx, b.ID, 1, b.CounterShards)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "done", p.Done, int64(2))
		check(t, "updated", p.UpdatedAt, T0)
		check(t, "due at m", p.RetryDue[m], int64(5))
		check(t, "due at m+10", p.RetryDue[m+10], int64(5))
		check(t, "interrupted", p.Interrupted, int64(3))
		check(t, "timed out", p.TimedOut, int64(3))
		check(t, "fanned out", p.FannedOut, int64(15))
		check(t, "fanned-out chunks", p.FanChunks, int64(4))
		check(t, "waiting before m", p.Waiting(T0), int64(10))
		check(t, "waiting after m", p.Waiting(time.Unix(m*60, 0)), int64(5))
		check(t, "next retry", p.NextRetry(T0), time.Unix(m*60, 0).UTC())
		// The waiting items by cause: throttled ones apart, the others by
		// failure class, each with one of its errors.
		check(t, "throttled before m", p.ThrottledWaiting(T0), int64(2))
		check(t, "throttled after m", p.ThrottledWaiting(time.Unix(m*60, 0)), int64(1))
		class, text, n := p.Cause(T0)
		check(t, "cause before m", class, "http 502")
		check(t, "its items", n, int64(4))
		check(t, "its error", strings.HasPrefix(text, "webhook: k"), true)
		class, text, n = p.Cause(time.Unix(m*60, 0))
		check(t, "cause after m", class+" / "+text, "connection refused / webhook: dial tcp: connection refused")
		check(t, "its items after m", n, int64(3))
	}},
	{"ScanItemsInKeyByteOrder", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		keys := []string{"b", "a", "B", "a0", "Z", "0", "é", "a-", "zz", "_"}
		for _, k := range keys {
			reserve(t, s, res(b, k, 1, T0))
		}
		want := slices.Sorted(slices.Values(keys))
		var got []string
		if err := s.ScanItems(ctx, b.ID, b.ListShards, func(it ledger.Item) error {
			got = append(got, it.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("scan = %q, want %q", got, want)
		}
		stop := errors.New("stop")
		n := 0
		err := s.ScanItems(ctx, b.ID, b.ListShards, func(ledger.Item) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Errorf("scan stopped by fn: %v after %d rows, want fn's error after 1", err, n)
		}
	}},
	{"ScanShardPages", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		var keys []string
		for i := range 23 {
			k := fmt.Sprintf("k%02d", i)
			keys = append(keys, k)
			reserve(t, s, res(b, k, 1, T0))
		}
		var all []string
		for shard := range b.ListShards {
			after := ""
			for pages := 0; ; pages++ {
				if pages > 30 {
					t.Fatalf("shard %d: no end after 30 pages", shard)
				}
				items, more, err := s.ScanShard(ctx, b.ID, shard, after, 2)
				if err != nil {
					t.Fatal(err)
				}
				if len(items) > 2 {
					t.Fatalf("shard %d: %d rows, limit 2", shard, len(items))
				}
				if len(items) < 2 && more {
					t.Errorf("shard %d: a short page (%d rows) says more", shard, len(items))
				}
				for _, it := range items {
					if it.Key <= after {
						t.Errorf("shard %d: %q not after %q", shard, it.Key, after)
					}
					if sh := ledger.Shard(it.Key, b.ListShards); sh != shard {
						t.Errorf("%q read from shard %d, belongs to %d", it.Key, shard, sh)
					}
					after = it.Key
					all = append(all, it.Key)
				}
				if !more {
					break
				}
			}
		}
		slices.Sort(all)
		if !slices.Equal(all, keys) {
			t.Errorf("shards hold %q, want %q", all, keys)
		}
	}},
	{"ListItemsByOutcome", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		want := map[api.Outcome][]string{}
		for i, o := range []api.Outcome{api.OutcomeFailed, api.OutcomeQuarantined, api.OutcomeSucceeded, api.OutcomeInFlight, api.OutcomeCancelled} {
			for j := range 5 {
				k := fmt.Sprintf("%c%d", 'e'-rune(j), i)
				if o == api.OutcomeInFlight {
					reserve(t, s, res(b, k, 1, T0))
				} else if o == api.OutcomeCancelled {
					if _, err := s.Settle(ctx, rec(b, k, 1, 0, o, T0)); err != nil {
						t.Fatal(err)
					}
				} else {
					done(t, s, b, k, 1, o, T0)
				}
				want[o] = append(want[o], k)
			}
		}
		for _, o := range []api.Outcome{api.OutcomeFailed, api.OutcomeQuarantined, api.OutcomeInFlight} {
			w := slices.Sorted(slices.Values(want[o]))
			eventually(t, func() error {
				var got []string
				after := ""
				for pages := 0; pages < 20; pages++ {
					items, next, err := s.ListItems(ctx, b.ID, b.ListShards, o, after, 2)
					if err != nil {
						return err
					}
					if len(items) > 2 {
						return fmt.Errorf("%s: %d items, limit 2", o, len(items))
					}
					for _, it := range items {
						if it.Outcome != o {
							return fmt.Errorf("%s listing holds %q %s", o, it.Key, it.Outcome)
						}
						got = append(got, it.Key)
					}
					if next == "" {
						break
					}
					after = next
				}
				if !slices.Equal(got, w) {
					return fmt.Errorf("%s: listed %q, want %q", o, got, w)
				}
				return nil
			})
		}
		for _, o := range []api.Outcome{api.OutcomeSucceeded, api.OutcomeCancelled, api.OutcomePending, "bogus"} {
			if _, _, err := s.ListItems(ctx, b.ID, b.ListShards, o, "", 10); !errors.Is(err, api.ErrInvalid) {
				t.Errorf("list %s: %v, want ErrInvalid", o, err)
			}
		}
	}},
	{"ListBatchesNewestFirst", func(t *testing.T, s ledger.Store) {
		now := T0.Add(48 * time.Hour)
		var want []string
		for i := range 7 {
			b := newBatch(fmt.Sprintf("b%d", i))
			b.CreatedAt = T0.Add(time.Duration(i) * time.Hour)
			create(t, s, b)
			want = append([]string{b.ID}, want...)
		}
		finish(t, s, "b1", 1, api.StatusCompleted, now.Add(time.Hour))
		finish(t, s, "b2", 1, api.StatusCompleted, now.Add(-time.Hour)) // expired at now
		want = slices.DeleteFunc(want, func(id string) bool { return id == "b2" })
		page := func(q ledger.BatchQuery) []string {
			t.Helper()
			var ids []string
			eventually(t, func() error {
				ids = nil
				q := q
				for pages := 0; ; pages++ {
					if pages > 50 {
						return fmt.Errorf("no end after 50 pages")
					}
					bs, next, err := s.ListBatches(ctx, q)
					if err != nil {
						return err
					}
					if len(bs) > q.Limit {
						return fmt.Errorf("%d batches, limit %d", len(bs), q.Limit)
					}
					for _, b := range bs {
						ids = append(ids, b.ID)
					}
					if next == "" {
						return nil
					}
					q.Before = next
				}
			})
			return ids
		}
		if got := page(ledger.BatchQuery{Limit: 2, Now: now}); !slices.Equal(got, want) {
			t.Errorf("listing = %v, want %v", got, want)
		}
		if got := page(ledger.BatchQuery{Limit: 10, Now: now, Statuses: []api.Status{api.StatusCompleted}}); !slices.Equal(got, []string{"b1"}) {
			t.Errorf("completed = %v, want [b1]", got)
		}
		if got := page(ledger.BatchQuery{Limit: 10, Now: now, Since: T0.Add(5 * time.Hour)}); !slices.Equal(got, []string{"b6", "b5"}) {
			t.Errorf("since = %v, want [b6 b5]", got)
		}
		bs, _, err := s.ListBatches(ctx, ledger.BatchQuery{Limit: 1, Now: now})
		if err != nil || len(bs) != 1 {
			t.Fatalf("first = %v, %v", bs, err)
		}
		check(t, "summary status", bs[0].Status, api.StatusRunning)
		check(t, "summary pipeline", bs[0].Pipeline, "echo")
		check(t, "summary created", bs[0].CreatedAt, T0.Add(6*time.Hour))
		var ie *api.InputError
		if _, _, err := s.ListBatches(ctx, ledger.BatchQuery{Limit: 1, Now: now, Before: "not a cursor"}); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("bad cursor: %v, want an InputError naming cursor", err)
		}
		if _, _, err := s.ListBatches(ctx, ledger.BatchQuery{Limit: 0, Now: now}); !errors.As(err, &ie) || ie.Field != "limit" {
			t.Errorf("limit 0: %v, want an InputError naming limit", err)
		}
	}},
	{"ListBatchesBySource", func(t *testing.T, s ledger.Store) {
		now := T0.Add(48 * time.Hour)
		const file, other = "s3://bkt/incoming/orders (1).csv", "s3://bkt/incoming/orders.csv"
		sources := map[string]string{"s1": file, "s2": other, "s3": file, "s4": "inline", "s5": file, "s6": "s3://bkt/images/*"}
		for i, id := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
			b := newBatch(id)
			b.Source = sources[id]
			b.CreatedAt = T0.Add(time.Duration(i) * time.Hour)
			create(t, s, b)
		}
		finish(t, s, "s3", 1, api.StatusCompleted, now.Add(time.Hour))
		list := func(q ledger.BatchQuery) []string {
			t.Helper()
			var ids []string
			eventually(t, func() error {
				ids = nil
				q := q
				for pages := 0; ; pages++ {
					if pages > 20 {
						return fmt.Errorf("no end after 20 pages")
					}
					bs, next, err := s.ListBatches(ctx, q)
					if err != nil {
						return err
					}
					for _, b := range bs {
						ids = append(ids, b.ID)
					}
					if next == "" {
						return nil
					}
					q.Before = next
				}
			})
			return ids
		}
		if got := list(ledger.BatchQuery{Limit: 1, Now: now, Source: file}); !slices.Equal(got, []string{"s5", "s3", "s1"}) {
			t.Errorf("source %s = %v, want [s5 s3 s1] (newest first, one a page)", file, got)
		}
		if got := list(ledger.BatchQuery{Limit: 10, Now: now, Source: "s3://bkt/images/*"}); !slices.Equal(got, []string{"s6"}) {
			t.Errorf("prefix source = %v, want [s6]", got)
		}
		if got := list(ledger.BatchQuery{Limit: 10, Now: now, Source: file, Statuses: []api.Status{api.StatusCompleted}}); !slices.Equal(got, []string{"s3"}) {
			t.Errorf("completed of %s = %v, want [s3]", file, got)
		}
		if got := list(ledger.BatchQuery{Limit: 10, Now: now, Source: file, Since: T0.Add(3 * time.Hour)}); !slices.Equal(got, []string{"s5"}) {
			t.Errorf("since of %s = %v, want [s5]", file, got)
		}
		if got := list(ledger.BatchQuery{Limit: 10, Now: now, Source: "inline"}); len(got) != 0 {
			t.Errorf("source inline = %v, want none (only S3 sources are found by source)", got)
		}
		if got := list(ledger.BatchQuery{Limit: 10, Now: now, Source: "s3://bkt/incoming/none.csv"}); len(got) != 0 {
			t.Errorf("unknown source = %v, want none", got)
		}
	}},
	{"ClaimUploadOnePerContent", func(t *testing.T, s ledger.Store) {
		const a, b = "s3://bkt/incoming/records.csv", "s3://bkt/incoming/records (1).csv"
		claim := func(src, id string, at time.Time) api.UploadClaim {
			return api.UploadClaim{Content: "c1", BatchID: id, Source: src, ClaimedAt: at, Until: at.Add(7 * 24 * time.Hour)}
		}
		got, err := s.ClaimUpload(ctx, claim(a, "records-1", T0), false)
		if err != nil || got.BatchID != "records-1" {
			t.Fatalf("first claim: %+v %v", got, err)
		}
		// The same object again (a repeated notification, the same file
		// uploaded again): it holds the claim.
		if _, err := s.ClaimUpload(ctx, claim(a, "records-1", T0.Add(time.Hour)), false); err != nil {
			t.Fatalf("the same object again: %v", err)
		}
		// Another object within the window: refused, the standing claim
		// returned, nothing written.
		got, err = s.ClaimUpload(ctx, claim(b, "records-2", T0.Add(2*time.Hour)), false)
		if !errors.Is(err, api.ErrConflict) || got.BatchID != "records-1" || got.Source != a || !got.ClaimedAt.Equal(T0.Add(time.Hour)) {
			t.Fatalf("another object within the window: %+v %v, want ErrConflict with the claim of %s", got, err, a)
		}
		// Another content is its own claim.
		other := claim(b, "records-2", T0.Add(2*time.Hour))
		other.Content = "c2"
		if _, err := s.ClaimUpload(ctx, other, false); err != nil {
			t.Fatalf("another content: %v", err)
		}
		// Forced (a rerun asked for): the claim moves.
		if got, err := s.ClaimUpload(ctx, claim(b, "records-2", T0.Add(3*time.Hour)), true); err != nil || got.Source != b {
			t.Fatalf("forced claim: %+v %v", got, err)
		}
		if got, err := s.ClaimUpload(ctx, claim(a, "records-1", T0.Add(4*time.Hour)), false); !errors.Is(err, api.ErrConflict) || got.Source != b {
			t.Fatalf("after the forced claim, the first object: %+v %v, want the claim of %s", got, err, b)
		}
		// Past the window anyone claims it.
		if got, err := s.ClaimUpload(ctx, claim(a, "records-3", T0.Add(3*time.Hour+7*24*time.Hour)), false); err != nil || got.BatchID != "records-3" {
			t.Fatalf("past the window: %+v %v", got, err)
		}
	}},
	{"RetentionMarkersOldestFirst", func(t *testing.T, s ledger.Store) {
		for i, id := range []string{"c", "a", "b"} {
			create(t, s, newBatch(id))
			finish(t, s, id, 1, api.StatusCompleted, T0.Add(time.Duration(3-i)*time.Hour))
		}
		// c expires at +3h, a at +2h, b at +1h.
		m, err := s.ExpiredMarkers(ctx, T0.Add(2*time.Hour), 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range m {
			if x.Malformed {
				t.Errorf("marker %q malformed", x.Key)
			}
			ids = append(ids, x.BatchID)
		}
		if !slices.Equal(ids, []string{"b", "a"}) {
			t.Fatalf("expired at +2h = %v, want [b a]", ids)
		}
		check(t, "expiry", m[0].ExpiresAt, T0.Add(time.Hour))
		m, _ = s.ExpiredMarkers(ctx, T0.Add(3*time.Hour), 1)
		if len(m) != 1 || m[0].BatchID != "b" {
			t.Fatalf("limit 1 = %+v, want b's", m)
		}
		if err := s.DeleteMarker(ctx, m[0].Key); err != nil {
			t.Fatal(err)
		}
		m, _ = s.ExpiredMarkers(ctx, T0.Add(3*time.Hour), 10)
		if len(m) != 2 || m[0].BatchID != "a" || m[1].BatchID != "c" {
			t.Errorf("after delete = %+v, want a, c", m)
		}
	}},
	{"UnpublishedUntilSetPublished", func(t *testing.T, s ledger.Store) {
		create(t, s, newBatch("b1"))
		finish(t, s, "b1", 1, api.StatusCancelled, T0.Add(time.Hour))
		if _, err := s.StartRun(ctx, "b1", 1, T0); err != nil {
			t.Fatal(err)
		}
		finish(t, s, "b1", 2, api.StatusCompleted, T0.Add(2*time.Hour))
		create(t, s, newBatch("a"))
		finish(t, s, "a", 1, api.StatusCompleted, T0.Add(time.Hour))
		refs, _ := s.Unpublished(ctx)
		if !slices.Equal(refs, []ledger.RunRef{{BatchID: "a", Run: 1}, {BatchID: "b1", Run: 1}, {BatchID: "b1", Run: 2}}) {
			t.Fatalf("unpublished = %v", refs)
		}
		if err := s.SetPublished(ctx, "b1", 2); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.SetPublished(ctx, "b1", 1); err != nil { // later than the stored 2: left; idempotent
				t.Fatal(err)
			}
		}
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "published run", got.PublishedRun, 2)
		if err := s.SetPublished(ctx, "gone", 1); err != nil {
			t.Fatalf("set published of a missing batch: %v", err)
		}
		refs, _ = s.Unpublished(ctx)
		if !slices.Equal(refs, []ledger.RunRef{{BatchID: "a", Run: 1}}) {
			t.Errorf("unpublished = %v, want [a 1]", refs)
		}
		if _, err := s.GetBatch(ctx, "gone"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("set published created a batch row: %v", err)
		}
	}},
	{"TaskHeartbeatKeptAndTaskGoneMarked", func(t *testing.T, s ledger.Store) {
		b := newBatch("b1")
		b.TaskToken, b.TaskHeartbeat = "token", 600
		create(t, s, b)
		got, _ := s.GetBatch(ctx, "b1")
		check(t, "task heartbeat", got.TaskHeartbeat, 600)
		check(t, "task gone before", got.TaskGone, false)
		for range 2 { // idempotent
			if err := s.SetTaskGone(ctx, "b1"); err != nil {
				t.Fatal(err)
			}
		}
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "task gone", got.TaskGone, true)
		check(t, "task token kept", got.TaskToken, "token")
		if err := s.SetTaskGone(ctx, "missing"); err != nil {
			t.Fatalf("set task gone of a missing batch: %v", err)
		}
		if _, err := s.GetBatch(ctx, "missing"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("set task gone created a batch row: %v", err)
		}
	}},
	{"RateConflictNotedOnceEachUpToTheMax", func(t *testing.T, s ledger.Store) {
		create(t, s, newBatch("b1"))
		got, _ := s.GetBatch(ctx, "b1")
		if got.RateConflict != nil {
			t.Fatalf("a new batch has a rate conflict: %+v", got.RateConflict)
		}
		at := time.Date(2026, 12, 7, 10, 5, 0, 0, time.UTC)
		note := func(other string, rps float64) {
			t.Helper()
			c := api.RateConflict{Key: "api.example.com", BatchID: other, Rate: api.Rate{Key: "api.example.com", RequestsPerSecond: rps}, NotedAt: at, Batches: 99}
			if err := s.NoteRateConflict(ctx, "b1", c); err != nil {
				t.Fatal(err)
			}
		}
		note("b2", 20)
		note("b3", 30)
		note("b2", 20) // a submit repeated: nothing more
		got, _ = s.GetBatch(ctx, "b1")
		want := &api.RateConflict{Key: "api.example.com", BatchID: "b3", Rate: api.Rate{Key: "api.example.com", RequestsPerSecond: 30}, NotedAt: at, Batches: 2}
		if got.RateConflict == nil || *got.RateConflict != *want {
			t.Fatalf("rate conflict = %+v, want %+v", got.RateConflict, want)
		}
		for i := range api.MaxRateConflicts + 3 {
			note(fmt.Sprintf("c%02d", i), 40)
		}
		got, _ = s.GetBatch(ctx, "b1")
		check(t, "batches noted, at most the max", got.RateConflict.Batches, api.MaxRateConflicts)
		check(t, "the latest noted within the max", got.RateConflict.BatchID, fmt.Sprintf("c%02d", api.MaxRateConflicts-3))
		if err := s.NoteRateConflict(ctx, "missing", *want); err != nil {
			t.Fatalf("note on a missing batch: %v", err)
		}
		if _, err := s.GetBatch(ctx, "missing"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("the note created a batch row: %v", err)
		}
	}},
	{"DeleteBatchRemovesEveryRow", func(t *testing.T, s ledger.Store) {
		b := newBatch("b1")
		b.MaxConcurrency = 2
		create(t, s, b)
		create(t, s, newBatch("keep"))
		keep := newBatch("keep")
		done(t, s, keep, "x", 1, api.OutcomeSucceeded, T0)
		for _, k := range []string{"a", "b", "c"} {
			done(t, s, b, k, 1, api.OutcomeFailed, T0)
		}
		if _, err := s.CountChunk(ctx, ledger.ChunkCount{BatchID: b.ID, Run: 1, First: 0, Items: 3, Shards: 2,
			Outcomes: map[api.Outcome]int64{api.OutcomeFailed: 3}, Failures: 3, RunFailures: true, Now: T0}); err != nil {
			t.Fatal(err)
		}
		if err := s.AcquireSlot(ctx, b.ID, 1, "w1", T0, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TakeTrack(ctx, ledger.TrackTake{BatchID: b.ID, Run: 1, Track: 1, Seq: 5, Holder: "w1", Now: T0, Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimSlice(ctx, ledger.SliceClaim{BatchID: b.ID, Run: 1, Track: 0, Claim: 1, Now: T0}); err != nil {
			t.Fatal(err)
		}
		expires := T0.Add(time.Hour)
		finish(t, s, b.ID, 1, api.StatusCompleted, expires)
		if _, err := s.StartRun(ctx, b.ID, 1, T0); err != nil {
			t.Fatal(err)
		}
		reserve(t, s, res(b, "a", 2, T0))
		if _, err := s.MarkCounted(ctx, b.ID, b.ListShards, "x", 2, time.Now()); err != nil {
			t.Fatal(err)
		}
		finish(t, s, b.ID, 2, api.StatusCompleted, expires)
		stored, _ := s.GetBatch(ctx, b.ID)
		if err := s.DeleteBatch(ctx, stored); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetBatch(ctx, b.ID); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("batch row after delete: %v", err)
		}
		n := 0
		if err := s.ScanItems(ctx, b.ID, b.ListShards, func(ledger.Item) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		check(t, "item rows left", n, 0)
		p, _ := s.Progress(ctx, b.ID, 1, 2)
		check(t, "counted left", p.Done, int64(0))
		if again, _ := s.MarkCounted(ctx, b.ID, b.ListShards, "x", 2, time.Now()); !again {
			t.Error("count mark left after delete")
		}
		if err := s.AcquireSlot(ctx, b.ID, 1, "w2", T0, time.Hour); err != nil {
			t.Errorf("slot left after delete: %v", err)
		}
		if _, err := s.TakeTrack(ctx, ledger.TrackTake{BatchID: b.ID, Run: 1, Track: 1, Seq: 1, Holder: "w2", Now: T0, Lease: time.Hour}); err != nil {
			t.Errorf("track fence left after delete: %v", err)
		}
		if n, err := s.ClaimSlice(ctx, ledger.SliceClaim{BatchID: b.ID, Run: 1, Track: 0, Claim: 1, Now: T0}); err != nil || n != 1 {
			t.Errorf("claim counter after delete = %d, %v; want 1", n, err)
		}
		m, _ := s.ExpiredMarkers(ctx, expires, 10)
		check(t, "retention markers left", len(m), 0)
		refs, _ := s.Unpublished(ctx)
		if len(refs) != 0 {
			t.Errorf("unpublished after delete = %v", refs)
		}
		ids, _ := s.RunningBatches(ctx)
		if !slices.Equal(ids, []string{"keep"}) {
			t.Errorf("running after delete = %v, want [keep]", ids)
		}
		if _, ok := get(t, s, keep, "x"); !ok {
			t.Error("another batch's item row went too")
		}
	}},
	{"KeepRowsOnlyExtends", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("b1"))
		for _, k := range []string{"a", "b"} {
			done(t, s, b, k, 1, api.OutcomeSucceeded, T0)
		}
		base := map[string]time.Time{"a": mustGet(t, s, b, "a").ExpiresAt, "b": mustGet(t, s, b, "b").ExpiresAt}
		until := T0.Add(100 * 24 * time.Hour).Add(500 * time.Millisecond)
		if err := s.KeepRows(ctx, b, []string{"a", "gone"}, until); err != nil {
			t.Fatal(err)
		}
		want := time.Unix(until.Unix(), 0).UTC()
		check(t, "a kept until", mustGet(t, s, b, "a").ExpiresAt, want)
		check(t, "b untouched", mustGet(t, s, b, "b").ExpiresAt, base["b"])
		if _, ok := get(t, s, b, "gone"); ok {
			t.Error("KeepRows created a row")
		}
		if err := s.KeepRows(ctx, b, []string{"a"}, until.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		check(t, "a after an earlier until", mustGet(t, s, b, "a").ExpiresAt, want)
	}},
	{"SlotLeases", func(t *testing.T, s ledger.Store) {
		if err := s.AcquireSlot(ctx, "b1", 0, "w1", T0, time.Minute); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "another holder under the lease", s.AcquireSlot(ctx, "b1", 0, "w2", T0.Add(time.Second), time.Minute))
		isConflict(t, "the same holder again under the lease", s.AcquireSlot(ctx, "b1", 0, "w1", T0.Add(time.Second), time.Minute))
		if err := s.AcquireSlot(ctx, "b1", 1, "w2", T0, time.Minute); err != nil {
			t.Fatalf("another slot: %v", err)
		}
		if err := s.FreeSlot(ctx, "b1", 0, "w2"); err != nil {
			t.Fatalf("free by a non-holder: %v", err)
		}
		isConflict(t, "slot freed by a non-holder", s.AcquireSlot(ctx, "b1", 0, "w3", T0.Add(time.Second), time.Minute))
		if err := s.FreeSlot(ctx, "b1", 0, "w1"); err != nil {
			t.Fatal(err)
		}
		if err := s.AcquireSlot(ctx, "b1", 0, "w3", T0.Add(time.Second), time.Minute); err != nil {
			t.Fatalf("freed slot: %v", err)
		}
		if err := s.AcquireSlot(ctx, "b1", 0, "w4", T0.Add(time.Second+time.Minute+time.Millisecond), time.Minute); err != nil {
			t.Fatalf("slot past its lease: %v", err)
		}
		if err := s.FreeSlot(ctx, "b1", 0, "w3"); err != nil {
			t.Fatalf("free by the holder it was taken from: %v", err)
		}
		isConflict(t, "slot of w4 after w3's free", s.AcquireSlot(ctx, "b1", 0, "w5", T0.Add(2*time.Minute), time.Minute))
		if err := s.FreeSlot(ctx, "none", 0, "w1"); err != nil {
			t.Fatalf("free of a slot without a row: %v", err)
		}
	}},
	{"TrackFencesAndClaims", func(t *testing.T, s ledger.Store) {
		take := func(track int, seq int64, holder string, now time.Time) (time.Time, error) {
			took, err := s.TakeTrack(ctx, ledger.TrackTake{BatchID: "b1", Run: 1, Track: track, Seq: seq, Holder: holder, Now: now, Lease: time.Minute})
			return took.Held, err
		}
		if _, err := take(0, 1, "d1", T0); err != nil {
			t.Fatalf("first take: %v", err)
		}
		held, err := take(0, 1, "d2", T0.Add(time.Second))
		isConflict(t, "a duplicate of the same seq under the lease", err)
		check(t, "held until", held.UnixMilli(), T0.Add(time.Minute).UnixMilli())
		if _, err := take(0, 1, "d1", T0.Add(time.Second)); err != nil {
			t.Errorf("the holder again: %v", err)
		}
		if _, err := take(1, 1, "d3", T0); err != nil {
			t.Errorf("another track: %v", err)
		}
		if _, err := take(0, 2, "d4", T0.Add(2*time.Second)); err != nil {
			t.Fatalf("the next send under the lease: %v", err)
		}
		held, err = take(0, 1, "d2", T0.Add(5*time.Minute))
		isConflict(t, "an earlier seq past every lease", err)
		check(t, "a stale take is not held", held.IsZero(), true)
		if _, err := take(0, 2, "d5", T0.Add(2*time.Second+time.Minute+time.Millisecond)); err != nil {
			t.Errorf("the same seq past its lease (a crashed holder): %v", err)
		}
		claim := func(run, track int, k int64) (int64, error) {
			return s.ClaimSlice(ctx, ledger.SliceClaim{BatchID: "b1", Run: run, Track: track, Claim: k, Now: T0})
		}
		for i, c := range []struct {
			track int
			k     int64
			want  int64
		}{{0, 1, 1}, {1, 1, 2}, {0, 1, 1}, {0, 2, 3}, {1, 2, 4}, {1, 2, 4}, {0, 3, 5}} {
			n, err := claim(1, c.track, c.k)
			if err != nil || n != c.want {
				t.Fatalf("claim %d (track %d, its claim %d) = %d, %v; want %d", i, c.track, c.k, n, err, c.want)
			}
		}
		_, err = claim(1, 0, 2)
		isConflict(t, "a claim below the track's last", err)
		if n, err := claim(2, 0, 1); err != nil || n != 1 {
			t.Errorf("another run's first claim = %d, %v", n, err)
		}
		// A run of several counters: each its own row, apart from the one
		// counter's; a claim made again on a counter answers again.
		on := func(counters, c, track int, k int64) (int64, error) {
			return s.ClaimSlice(ctx, ledger.SliceClaim{BatchID: "b1", Run: 3, Track: track, Claim: k, Counters: counters, Counter: c, Now: T0})
		}
		read := func(counters, c, track int) ledger.SliceCount {
			got, err := s.SliceCounter(ctx, ledger.SliceCounterRead{BatchID: "b1", Run: 3, Track: track, Counters: counters, Counter: c})
			if err != nil {
				t.Fatalf("read counter %d of %d: %v", c, counters, err)
			}
			return got
		}
		check(t, "a counter not claimed from", read(3, 1, 0), ledger.SliceCount{})
		for i, c := range []struct {
			counter, track int
			k, want        int64
		}{{0, 0, 1, 1}, {1, 1, 1, 1}, {0, 3, 1, 2}, {1, 1, 1, 1}, {1, 0, 2, 2}, {2, 0, 3, 1}, {2, 0, 3, 1}} {
			if n, err := on(3, c.counter, c.track, c.k); err != nil || n != c.want {
				t.Fatalf("claim %d (counter %d, track %d, its claim %d) = %d, %v; want %d", i, c.counter, c.track, c.k, n, err, c.want)
			}
		}
		_, err = on(3, 1, 0, 1)
		isConflict(t, "a claim below the track's last on that counter", err)
		check(t, "counter 1 of 3 as read by track 0", read(3, 1, 0), ledger.SliceCount{Claims: 2, TrackClaim: 2})
		check(t, "counter 1 of 3 as read by track 2", read(3, 1, 2), ledger.SliceCount{Claims: 2})
		check(t, "the run's one counter, untouched", read(1, 0, 0), ledger.SliceCount{})
		if n, err := on(0, 0, 5, 1); err != nil || n != 1 {
			t.Errorf("the one counter's first claim = %d, %v", n, err)
		}
		check(t, "counters 0 and 1 are the one counter", read(1, 0, 5), ledger.SliceCount{Claims: 1, TrackClaim: 1})
	}},
	{"UnitsHandedToTracks", func(t *testing.T, s ledger.Store) {
		take := func(seq int64, holder string, now time.Time, clear ...string) (ledger.TrackTaken, error) {
			return s.TakeTrack(ctx, ledger.TrackTake{BatchID: "b1", Run: 1, Track: 0, Seq: seq, Holder: holder, Now: now, Lease: time.Minute, Clear: clear})
		}
		hand := func(track int, id string, first int64) (bool, error) {
			return s.HandToTrack(ctx, ledger.TrackHand{BatchID: "b1", Run: 1, Track: track, ID: id,
				Unit: ledger.TrackRetry{First: first, Count: 2, Offset: first * 10, Length: 20, ChunkFirst: 0, ChunkItems: 100}, Now: T0})
		}
		handed := func(hs []ledger.TrackHanded) string {
			out := []string{}
			for _, h := range hs {
				out = append(out, fmt.Sprintf("%s:%d", h.ID, h.Unit.First))
			}
			return strings.Join(out, " ")
		}
		retired, err := hand(0, "a", 4)
		isConflict(t, "a hand-off to a track without a row", err)
		check(t, "a track without a row is not retired", retired, false)
		if took, err := take(1, "d1", T0); err != nil || len(took.Handed) != 0 {
			t.Fatalf("first take = %+v, %v", took, err)
		}
		for _, h := range []struct {
			id    string
			first int64
		}{{"b", 8}, {"a", 4}, {"b", 8}} {
			if _, err := hand(0, h.id, h.first); err != nil {
				t.Fatalf("hand %s: %v", h.id, err)
			}
		}
		took, err := take(1, "d1", T0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "hand-offs answered by a take, in ID order, each once", handed(took.Handed), "a:4 b:8")
		if u := took.Handed[0].Unit; u.Count != 2 || u.Offset != 40 || u.Length != 20 || u.ChunkItems != 100 {
			t.Errorf("handed unit read back = %+v", u)
		}
		// The next send's take clears what its message merged; a unit
		// handed since stays, even the same unit handed again.
		for _, h := range []struct {
			id    string
			first int64
		}{{"c", 12}, {"e", 4}} {
			if _, err := hand(0, h.id, h.first); err != nil {
				t.Fatal(err)
			}
		}
		took, err = take(2, "d2", T0.Add(2*time.Second), "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		check(t, "left after the take cleared a and b", handed(took.Handed), "c:12 e:4")
		took, err = take(3, ledger.TrackRetired, T0.Add(3*time.Second), "c")
		isConflict(t, "a retire with a hand-off it has not merged", err)
		check(t, "a refused retire answers every hand-off", handed(took.Handed), "c:12 e:4")
		if _, err := take(2, "d2", T0.Add(3*time.Second)); err != nil {
			t.Errorf("the track's holder after a refused retire: %v", err)
		}
		if err := s.TakeTrackSlot(ctx, ledger.TrackSlot{BatchID: "b1", Run: 1, Track: 0, Holder: "u1", Now: T0, Lease: time.Minute}); !errors.Is(err, api.ErrConflict) {
			t.Errorf("a live track taken as a slot: %v", err)
		}
		if _, err := take(3, ledger.TrackRetired, T0.Add(4*time.Second), "c", "e"); err != nil {
			t.Fatalf("retire having merged every handed unit: %v", err)
		}
		retired, err = hand(0, "f", 16)
		isConflict(t, "a hand-off to a retired track", err)
		check(t, "retired", retired, true)
		slot := func(holder string, now time.Time) error {
			return s.TakeTrackSlot(ctx, ledger.TrackSlot{BatchID: "b1", Run: 1, Track: 0, Holder: holder, Now: now, Lease: time.Minute})
		}
		if err := slot("u1", T0); err != nil {
			t.Fatalf("a retired track as a slot: %v", err)
		}
		isConflict(t, "a retired track's slot under another's lease", slot("u2", T0.Add(time.Second)))
		if err := s.FreeTrackSlot(ctx, ledger.TrackSlot{BatchID: "b1", Run: 1, Track: 0, Holder: "u2"}); err != nil {
			t.Errorf("free by a non-holder: %v", err)
		}
		isConflict(t, "still held after a non-holder's free", slot("u2", T0.Add(time.Second)))
		if err := s.FreeTrackSlot(ctx, ledger.TrackSlot{BatchID: "b1", Run: 1, Track: 0, Holder: "u1"}); err != nil {
			t.Fatal(err)
		}
		if err := slot("u2", T0.Add(time.Second)); err != nil {
			t.Errorf("the slot after its holder freed it: %v", err)
		}
		if err := slot("u3", T0.Add(time.Second+time.Minute+time.Millisecond)); err != nil {
			t.Errorf("the slot past its holder's lease: %v", err)
		}
		_, err = take(2, "stale", T0.Add(time.Hour))
		isConflict(t, "a stale send of a retired track", err)
	}},
	{"HandoffsBounded", func(t *testing.T, s ledger.Store) {
		take := func(seq int64, holder string, clear ...string) (ledger.TrackTaken, error) {
			return s.TakeTrack(ctx, ledger.TrackTake{BatchID: "b1", Run: 1, Track: 0, Seq: seq, Holder: holder, Now: T0, Lease: time.Minute, Clear: clear})
		}
		hand := func(id string) (bool, error) {
			return s.HandToTrack(ctx, ledger.TrackHand{BatchID: "b1", Run: 1, Track: 0, ID: id,
				Unit: ledger.TrackRetry{First: 1, Count: 1, Offset: 0, Length: 10, ChunkItems: 10}, Now: T0})
		}
		if _, err := take(1, "d1"); err != nil {
			t.Fatal(err)
		}
		ids := make([]string, 0, ledger.MaxHandoffs)
		for i := range ledger.MaxHandoffs {
			ids = append(ids, fmt.Sprintf("h%02d", i))
			if _, err := hand(ids[i]); err != nil {
				t.Fatalf("hand-off %d: %v", i, err)
			}
		}
		retired, err := hand("over")
		isConflict(t, "a hand-off past MaxHandoffs", err)
		check(t, "a full row is not retired", retired, false)
		if _, err := hand(ids[0]); err != nil {
			t.Errorf("the same hand-off again on a full row: %v", err)
		}
		took, err := take(2, "d2", ids...)
		if err != nil || len(took.Handed) != 0 {
			t.Fatalf("a take clearing %d hand-offs = %d left, %v", len(ids), len(took.Handed), err)
		}
		if _, err := hand("again"); err != nil {
			t.Errorf("a hand-off once the take cleared the row: %v", err)
		}
		// A retire whose Clear names a hand-off no longer on the row (one
		// an earlier take cleared) while an unmerged one waits is refused.
		_, err = take(3, ledger.TrackRetired, ids[0])
		isConflict(t, "a retire naming a cleared hand-off while another waits", err)
		if _, err := take(3, ledger.TrackRetired, "again"); err != nil {
			t.Errorf("a retire that merged the one waiting: %v", err)
		}
	}},
}
