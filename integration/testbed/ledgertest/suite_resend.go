package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// A take or a settle sent again after its answer was lost: the SDK sends
// a write again when its answer was lost (a reset connection, a 5xx),
// also when the first try was applied, and the resend then fails the
// write's own condition on the write's own row. Under the write's token
// (Reservation.Token, PackWrite.Token, Record.Token of a settle) the
// store answers the resend as the first try: taken (with what the take
// found: interrupted, resumed, run attempts; no attempt added) or
// settled; one under another token is refused as before. Each case
// sends the same write twice, as the SDK does.

func init() { cases = append(cases, resendCases...) }

// sameTake fails unless again, the answer to a resend, is first, the
// first try's answer, in every field the worker reads.
func sameTake(t *testing.T, what string, first, again ledger.Item) {
	t.Helper()
	check(t, what+": attempt", again.Attempt, first.Attempt)
	check(t, what+": run attempts", again.RunAttempts, first.RunAttempts)
	check(t, what+": interrupted", again.Interrupted, first.Interrupted)
	check(t, what+": resumed", again.Resumed, first.Resumed)
	check(t, what+": resumed at (ms)", again.ResumedAt.UnixMilli(), first.ResumedAt.UnixMilli())
	check(t, what+": throttled since (ms)", again.ThrottledSince.UnixMilli(), first.ThrottledSince.UnixMilli())
	check(t, what+": lease (ms)", again.LeaseUntil.UnixMilli(), first.LeaseUntil.UnixMilli())
	check(t, what+": outcome", again.Outcome, api.OutcomeInFlight)
}

// twice sends r twice and returns both answers; the second must succeed.
func twice(t *testing.T, s ledger.Store, what string, r ledger.Reservation) (ledger.Item, ledger.Item) {
	t.Helper()
	first := reserve(t, s, r)
	again, err := s.Reserve(ctx, r)
	if err != nil {
		t.Fatalf("%s sent again: %v, want the first try's answer", what, err)
	}
	sameTake(t, what, first, again)
	return first, again
}

var resendCases = []suiteCase{
	{"TakeSentAgainAnswersAsTheFirst", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("resend"))
		// A fresh take.
		r := res(b, "fresh", 1, T0)
		r.Token = ledger.NewTakeToken()
		first, _ := twice(t, s, "fresh take", r)
		check(t, "fresh: first attempt", first.Attempt, 1)
		check(t, "fresh: row attempt", mustGet(t, s, b, "fresh").Attempt, 1)
		// Another delivery's take (another token) is refused as before.
		other := r
		other.Token = ledger.NewTakeToken()
		if _, err := s.Reserve(ctx, other); !errors.Is(err, api.ErrConflict) {
			t.Fatalf("another delivery's take under a live lease: %v, want ErrConflict", err)
		}
		// No token: no such check.
		other.Token = ""
		if _, err := s.Reserve(ctx, other); !errors.Is(err, api.ErrConflict) {
			t.Fatalf("a take without a token under a live lease: %v, want ErrConflict", err)
		}

		// A takeover of an interrupted attempt (its lease ended, no retry
		// scheduled): interrupted, on both answers.
		over := res(b, "fresh", 1, T0.Add(lease+time.Second))
		over.Redelivered, over.Token = true, ledger.NewTakeToken()
		took, _ := twice(t, s, "takeover of an interrupted attempt", over)
		check(t, "takeover: attempt", took.Attempt, 2)
		check(t, "takeover: interrupted", took.Interrupted, true)
		check(t, "takeover: row attempt", mustGet(t, s, b, "fresh").Attempt, 2)

		// A takeover of an attempt whose retry was scheduled: not
		// interrupted, its throttled time kept.
		it := reserve(t, s, res(b, "retry", 1, T0))
		rel := rec(b, "retry", 1, it.Attempt, api.OutcomeFailed, T0.Add(time.Second))
		rel.RetryAt, rel.ThrottledSince = T0.Add(10*time.Second), T0.Add(time.Second)
		if err := s.Release(ctx, rel); err != nil {
			t.Fatal(err)
		}
		due := res(b, "retry", 1, T0.Add(11*time.Second))
		due.Redelivered, due.Token = true, ledger.NewTakeToken()
		took, _ = twice(t, s, "takeover of a scheduled retry", due)
		check(t, "retry: interrupted", took.Interrupted, false)
		check(t, "retry: throttled since (ms)", took.ThrottledSince.UnixMilli(), T0.Add(time.Second).UnixMilli())

		// A resume of a held item once woken: resumed from it, at its wake.
		done(t, s, b, "held", 1, api.OutcomeWithheld, T0)
		held := mustGet(t, s, b, "held")
		wake := ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: "held", Run: 1, By: api.WakeLift, Now: T0.Add(time.Second),
			Subject: heldSubject, Outcome: api.OutcomeWithheld, Attempt: held.Attempt}
		if _, err := s.WakeItem(ctx, wake); err != nil {
			t.Fatal(err)
		}
		woke := res(b, "held", 1, T0.Add(2*time.Second))
		woke.Token = ledger.NewTakeToken()
		took, _ = twice(t, s, "resume of a woken item", woke)
		check(t, "resume: resumed from", took.Resumed, api.OutcomeWithheld)
		check(t, "resume: resumed at (ms)", took.ResumedAt.UnixMilli(), wake.Now.UnixMilli())
		check(t, "resume: run attempts", took.RunAttempts, 2)
	}},
	{"SettleSentAgainAnswersAsTheFirst", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("resend-settle"))
		twice := func(what string, r ledger.Record, settle func(ledger.Record) (ledger.Item, error)) ledger.Item {
			t.Helper()
			first, err := settle(r)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			again, err := settle(r)
			if err != nil {
				t.Fatalf("%s sent again: %v, want the first try's answer", what, err)
			}
			check(t, what+": resumed", again.Resumed, first.Resumed)
			check(t, what+": resumed at (ms)", again.ResumedAt.UnixMilli(), first.ResumedAt.UnixMilli())
			other := r
			other.Token = ledger.NewTakeToken()
			_, err = settle(other)
			isConflict(t, what+" by another delivery", err)
			return first
		}
		settle := func(r ledger.Record) (ledger.Item, error) { return s.Settle(ctx, r) }
		unstarted := func(r ledger.Record) (ledger.Item, error) { return s.SettleUnstarted(ctx, r) }
		// A row never reserved: cancelled, and dead-lettered unstarted.
		r := rec(b, "fresh", 1, 0, api.OutcomeCancelled, T0)
		r.Token = ledger.NewTakeToken()
		twice("settle of a fresh row", r, settle)
		r = rec(b, "unstarted", 1, 0, api.OutcomeFailed, T0)
		r.Reason, r.Error, r.Token = api.ReasonDeadLettered, "dead-lettered", ledger.NewTakeToken()
		twice("settle of an unstarted row", r, unstarted)
		// In flight, its lease ended.
		reserve(t, s, res(b, "ended", 1, T0))
		r = rec(b, "ended", 1, 0, api.OutcomeCancelled, T0.Add(lease+time.Second))
		r.Token = ledger.NewTakeToken()
		twice("settle of an ended lease", r, settle)
		check(t, "ended: cancelled", mustGet(t, s, b, "ended").Outcome, api.OutcomeCancelled)
		// Held and woken to cancel: resumed from it on both answers.
		done(t, s, b, "held", 1, api.OutcomeWithheld, T0)
		held := mustGet(t, s, b, "held")
		if _, err := s.WakeItem(ctx, ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: "held", Run: 1, By: api.WakeCancel, Now: T0.Add(time.Second),
			Subject: heldSubject, Outcome: api.OutcomeWithheld, Attempt: held.Attempt}); err != nil {
			t.Fatal(err)
		}
		r = rec(b, "held", 1, 0, api.OutcomeCancelled, T0.Add(2*time.Second))
		r.Token = ledger.NewTakeToken()
		got := twice("settle of a woken held row", r, settle)
		check(t, "held: resumed from", got.Resumed, api.OutcomeWithheld)
	}},
	{"PackTakeSentAgainAnswersAsTheFirst", func(t *testing.T, s ledger.Store) {
		b := create(t, s, packBatch("resend-pack"))
		ref := pref(b, 0)
		take := ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: T0.Add(lease), InFlight: 1, Now: T0, Token: ledger.NewTakeToken(),
			Items: []ledger.PackItemWrite{{Index: 0, Item: pitem("a", 1, 1, api.OutcomeInFlight, T0)}}}
		for i := range 2 {
			if err := s.WritePack(ctx, take); err != nil {
				t.Fatalf("first take, try %d: %v, want the first try's answer", i+1, err)
			}
		}
		other := take
		other.Token = ledger.NewTakeToken()
		isConflict(t, "another delivery's first take", s.WritePack(ctx, other))
		other.Token = ""
		isConflict(t, "a first take without a token", s.WritePack(ctx, other))
		// A take after the lease ended, sent twice.
		over := take
		over.Attempt, over.Now, over.LeaseUntil, over.Token = 1, T0.Add(lease+time.Second), T0.Add(2*lease+time.Second), ledger.NewTakeToken()
		over.Items = []ledger.PackItemWrite{{Index: 0, Item: pitem("a", 1, 2, api.OutcomeInFlight, over.Now), Was: api.OutcomeInFlight}}
		for i := range 2 {
			if err := s.WritePack(ctx, over); err != nil {
				t.Fatalf("take after the lease, try %d: %v, want the first try's answer", i+1, err)
			}
		}
		p, err := s.GetPack(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "attempt", p.Attempt, 2)
		check(t, "token", p.Token, over.Token)
		// The first holder's take, sent again late, is not the row's.
		isConflict(t, "the first take sent again after the takeover", s.WritePack(ctx, take))
	}},
}
