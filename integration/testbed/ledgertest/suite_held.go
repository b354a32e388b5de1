package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The held outcome (withheld): a held item row
// keeps its hold, is listed as needing attention, is woken once
// (Store.WakeItem, conditioned on its outcome, subject and attempt), and
// is then taken exactly once, its run's attempts kept; a held pack item
// is woken by a take of its pack; the batch row's halts; the live view's
// held counts.

func init() { cases = append(cases, heldCases...) }

const heldSubject = "secret:arn:aws:ssm:us-east-1:123456789012:parameter/x.y"

var heldCases = []suiteCase{
	{"HeldItemRowWakesOnce", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("held"))
		done(t, s, b, "w", 1, api.OutcomeWithheld, T0)
		it := mustGet(t, s, b, "w")
		if it.Outcome != api.OutcomeWithheld || it.Hold == nil || it.Hold.Subject != heldSubject || !it.Hold.Since.Equal(T0) || it.Hold.Woken != "" {
			t.Fatalf("withheld row: %+v hold %+v", it, it.Hold)
		}
		loc, err := s.LocateItem(ctx, b.ID, b.ListShards, "w")
		if err != nil || loc.Outcome != api.OutcomeWithheld || loc.Packed {
			t.Fatalf("locate: %+v %v", loc, err)
		}
		if _, err := s.LocateItem(ctx, b.ID, b.ListShards, "nobody"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("locate a key without a row: %v", err)
		}
		now := T0.Add(time.Second)
		// Not yet woken: nothing takes it.
		if _, err := s.Reserve(ctx, res(b, "w", 1, now)); !errors.Is(err, api.ErrConflict) {
			t.Fatalf("reserve before the wake: %v", err)
		}
		mk := ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: "w", Run: 1, By: api.WakeLift, Now: now}
		for _, wrong := range []func(*ledger.WakeMark){
			func(m *ledger.WakeMark) { m.Subject = "secret:other" },
			func(m *ledger.WakeMark) { m.Outcome = api.OutcomeFailed },
			func(m *ledger.WakeMark) { m.Attempt = it.Attempt + 1 },
			func(m *ledger.WakeMark) { m.Run = 2 },
		} {
			m := mk
			wrong(&m)
			_, err := s.WakeItem(ctx, m)
			isConflict(t, fmt.Sprintf("wake %+v", m), err)
		}
		mk.Subject, mk.Outcome, mk.Attempt = heldSubject, api.OutcomeWithheld, it.Attempt
		got, err := s.WakeItem(ctx, mk)
		if err != nil || got.Hold == nil || got.Hold.Woken != api.WakeLift {
			t.Fatalf("wake: %+v %v", got, err)
		}
		again, err := s.WakeItem(ctx, mk)
		isConflict(t, "wake again", err)
		check(t, "woken, as a repeated wake finds it", again.Hold != nil && again.Hold.Woken == api.WakeLift, true)
		r, err := s.Reserve(ctx, res(b, "w", 1, now.Add(time.Second)))
		if err != nil {
			t.Fatalf("reserve once woken: %v", err)
		}
		check(t, "attempt", r.Attempt, it.Attempt+1)
		check(t, "run attempts kept", r.RunAttempts, it.RunAttempts+1)
		check(t, "resumed from", r.Resumed, api.OutcomeWithheld)
		check(t, "resumed at the wake, not the reserve (ms)", r.ResumedAt.UnixMilli(), mk.Now.UnixMilli())
		if _, err := s.Reserve(ctx, res(b, "w", 1, now)); !errors.Is(err, api.ErrConflict) {
			t.Fatalf("a second reserve of the woken item: %v", err)
		}
		back := mustGet(t, s, b, "w")
		check(t, "in flight", back.Outcome, api.OutcomeInFlight)
		check(t, "hold dropped", back.Hold == nil, true)
	}},
	{"HeldItemRowSettlesOnceWoken", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("held-settle"))
		done(t, s, b, "x", 1, api.OutcomeWithheld, T0)
		now := T0.Add(time.Second)
		r := rec(b, "x", 1, 0, api.OutcomeCancelled, now)
		_, err := s.Settle(ctx, r)
		isConflict(t, "settle before the wake", err)
		if _, err := s.WakeItem(ctx, ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: "x", Run: 1, By: api.WakeCancel, Now: now}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Settle(ctx, r)
		if err != nil {
			t.Fatalf("settle once woken: %v", err)
		}
		check(t, "resumed from", got.Resumed, api.OutcomeWithheld)
		it := mustGet(t, s, b, "x")
		check(t, "cancelled", it.Outcome, api.OutcomeCancelled)
		check(t, "run attempts kept", it.RunAttempts, 1)
		check(t, "hold dropped", it.Hold == nil, true)
	}},
	{"HeldListing", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("held-list"))
		done(t, s, b, "a-failed", 1, api.OutcomeFailed, T0)
		done(t, s, b, "b-withheld", 1, api.OutcomeWithheld, T0)
		done(t, s, b, "c-succeeded", 1, api.OutcomeSucceeded, T0)
		done(t, s, b, "d-withheld", 1, api.OutcomeWithheld, T0)
		done(t, s, b, "f-quarantined", 1, api.OutcomeQuarantined, T0)
		list := func(o api.Outcome, want ...string) {
			t.Helper()
			eventually(t, func() error {
				var got []string
				after := ""
				for range 20 {
					items, next, err := s.ListItems(ctx, b.ID, b.ListShards, o, after, 2)
					if err != nil {
						return err
					}
					for _, it := range items {
						if it.Outcome.Held() != (it.Hold != nil) {
							return fmt.Errorf("%s: %s listed with hold %+v", o, it.Key, it.Hold)
						}
						got = append(got, it.Key)
					}
					if after = next; next == "" {
						break
					}
				}
				if !slices.Equal(got, want) {
					return fmt.Errorf("%s: listed %q, want %q", o, got, want)
				}
				return nil
			})
		}
		list(api.OutcomeWithheld, "b-withheld", "d-withheld")
		list(api.NeedsAttention, "a-failed", "b-withheld", "d-withheld", "f-quarantined")
	}},
	{"HeldPackItems", func(t *testing.T, s ledger.Store) {
		b := create(t, s, packBatch("held-pack"))
		takeAndRecord(t, s, b, 0, []string{"p0", "p1", "p2"}, []api.Outcome{api.OutcomeSucceeded, api.OutcomeInFlight, api.OutcomeSucceeded})
		// p1 ends withheld under the take's fence.
		p, err := s.GetPack(ctx, pref(b, 0))
		if err != nil {
			t.Fatal(err)
		}
		w := p.Items[1]
		w.Outcome, w.Error, w.Reason = api.OutcomeWithheld, "HTTP 401", api.ReasonCredential
		w.Hold = api.Hold{Subject: heldSubject, Since: T0}
		if err := s.WritePack(ctx, ledger.PackWrite{Ref: pref(b, 0), Attempt: p.Attempt, Run: 1, InFlight: 0, Now: T0,
			Items: []ledger.PackItemWrite{{Index: 1, Item: w, Was: api.OutcomeInFlight}}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() error {
			items, _, err := s.ListItems(ctx, b.ID, b.ListShards, api.OutcomeWithheld, "", 10)
			if err != nil {
				return err
			}
			if len(items) != 1 || items[0].Key != "p1" || items[0].Hold == nil || items[0].Hold.Subject != heldSubject || !items[0].Packed || items[0].PackFirst != 0 {
				return fmt.Errorf("withheld pack items: %+v", items)
			}
			return nil
		})
		loc, err := s.LocateItem(ctx, b.ID, b.ListShards, "p1")
		if err != nil || !loc.Packed || loc.PackFirst != 0 || loc.Outcome != api.OutcomeWithheld || loc.Hold == nil {
			t.Fatalf("locate p1: %+v %v", loc, err)
		}
		if _, err := s.LocateItem(ctx, b.ID, b.ListShards, "p0"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("locate a succeeded pack item (no attention entry): %v", err)
		}
		// The wake: a take of the free pack that leaves it free.
		p, _ = s.GetPack(ctx, pref(b, 0))
		w = p.Items[1]
		w.Hold.Woken = api.WakeLift
		now := T0.Add(2 * lease)
		if err := s.WritePack(ctx, ledger.PackWrite{Ref: pref(b, 0), Take: true, Attempt: p.Attempt, Run: 1, Now: now, InFlight: 0,
			Items: []ledger.PackItemWrite{{Index: 1, Item: w, Was: api.OutcomeWithheld}}}); err != nil {
			t.Fatalf("wake take: %v", err)
		}
		p, _ = s.GetPack(ctx, pref(b, 0))
		check(t, "woken", p.Items[1].Hold.Woken, api.WakeLift)
		check(t, "pack left free", p.LeaseUntil.IsZero(), true)
		step, _ := ledger.Plan(p.Items[1], 1, 0, ledger.ModeRun, false)
		check(t, "plan of the woken pack item", step, ledger.StepRun)
		loc, _ = s.LocateItem(ctx, b.ID, b.ListShards, "p1")
		check(t, "located woken", loc.Hold != nil && loc.Hold.Woken == api.WakeLift, true)
	}},
	{"HaltAndLift", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("halts"))
		m := ledger.HaltMark{BatchID: b.ID, Run: 1, Subject: heldSubject, Reason: "HTTP 401", Now: T0}
		if err := s.Halt(ctx, m); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "halt again", s.Halt(ctx, m))
		other := m
		other.Run = 2
		other.Subject = "secret:two"
		isConflict(t, "halt of another run", s.Halt(ctx, other))
		got, err := s.GetBatch(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := got.Halts[heldSubject]; !ok || h.Subject != heldSubject || !h.Since.Equal(T0) || h.Reason != "HTTP 401" || len(got.Halts) != 1 {
			t.Fatalf("halts %+v", got.Halts)
		}
		for i := range api.MaxHalts - 1 {
			n := m
			n.Subject = fmt.Sprintf("secret:%d", i)
			if err := s.Halt(ctx, n); err != nil {
				t.Fatalf("halt %d: %v", i, err)
			}
		}
		extra := m
		extra.Subject = "secret:one-too-many"
		isConflict(t, "a halt past MaxHalts", s.Halt(ctx, extra))
		lifted := T0.Add(1234567 * time.Microsecond)
		halt := api.Halt{Subject: heldSubject, Since: T0, Reason: "HTTP 401"}
		if err := s.Lift(ctx, ledger.LiftMark{BatchID: b.ID, Halt: halt, At: lifted}); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "lift again", s.Lift(ctx, ledger.LiftMark{BatchID: b.ID, Halt: halt, At: lifted.Add(time.Second)}))
		got, _ = s.GetBatch(ctx, b.ID)
		if _, ok := got.Halts[heldSubject]; ok || len(got.Halts) != api.MaxHalts-1 {
			t.Fatalf("halts after the lift: %d", len(got.Halts))
		}
		if !got.LiftedAt.Equal(lifted.Truncate(time.Millisecond)) {
			t.Fatalf("lifted at %v, want %v (at milliseconds; a refused lift leaves it)", got.LiftedAt, lifted.Truncate(time.Millisecond))
		}
		// The lift is kept with the halt it lifted, in the same write.
		if l := got.LastLift; got.Lifts != 1 || l == nil || l.Subject != heldSubject || !l.Since.Equal(T0) || l.Reason != "HTTP 401" ||
			!l.LiftedAt.Equal(lifted.Truncate(time.Millisecond)) {
			t.Fatalf("lifts %d, last %+v; want 1, the halt on %s lifted at %v", got.Lifts, l, heldSubject, lifted.Truncate(time.Millisecond))
		}
		// A halt lifted and put again is not lifted in the old one's name.
		again := m
		again.Now = T0.Add(time.Hour)
		if err := s.Halt(ctx, again); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "lift of the halt read before it was put again", s.Lift(ctx, ledger.LiftMark{BatchID: b.ID, Halt: halt, At: lifted.Add(time.Second)}))
		if err := s.Lift(ctx, ledger.LiftMark{BatchID: b.ID, Halt: api.Halt{Subject: heldSubject, Since: again.Now, Reason: "HTTP 401"}, At: again.Now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetBatch(ctx, b.ID)
		if l := got.LastLift; got.Lifts != 2 || l == nil || !l.Since.Equal(again.Now) {
			t.Fatalf("after the second halt's lift: lifts %d, last %+v; want 2, the halt put at %v", got.Lifts, l, again.Now)
		}
	}},
	{"KeptHaltNeedsAttention", func(t *testing.T, s ledger.Store) {
		// A run cancelled while its items were withheld keeps its halts:
		// the batch needs a look (lift before resume) though its census
		// has none, in the listing too (which reads an index that does
		// not carry the halts); lifting the last halt clears it.
		b := create(t, s, newBatch("kept"))
		for _, subject := range []string{heldSubject, "secret:two"} {
			if err := s.Halt(ctx, ledger.HaltMark{BatchID: b.ID, Run: 1, Subject: subject, Reason: "HTTP 401", Now: T0}); err != nil {
				t.Fatal(err)
			}
		}
		expires := T0.Add(48 * time.Hour)
		if err := s.FinishRun(ctx, b.ID, 1, ledger.Finish{Status: api.StatusCancelled, ReportKey: "batches/kept/report-1.json",
			Census: api.Census{Total: 2, Cancelled: 2}, NeedsAttention: true, FinishedAt: T0.Add(time.Minute), ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
		listed := func(want bool) {
			t.Helper()
			eventually(t, func() error {
				bs, _, err := s.ListBatches(ctx, ledger.BatchQuery{Limit: 10, Now: T0.Add(time.Hour)})
				if err != nil {
					return err
				}
				if len(bs) != 1 || bs[0].NeedsAttention != want {
					return fmt.Errorf("listing %+v, want needs_attention %v", bs, want)
				}
				return nil
			})
		}
		listed(true)
		if err := s.Lift(ctx, ledger.LiftMark{BatchID: b.ID, Halt: api.Halt{Subject: heldSubject, Since: T0}, At: T0.Add(2 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		got, _ := s.GetBatch(ctx, b.ID)
		check(t, "needs attention with one halt left", got.NeedsAttention, true)
		if err := s.Lift(ctx, ledger.LiftMark{BatchID: b.ID, Halt: api.Halt{Subject: "secret:two", Since: T0, Reason: "HTTP 401"}, At: T0.Add(3 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetBatch(ctx, b.ID)
		check(t, "needs attention once every halt is lifted", got.NeedsAttention, false)
		check(t, "lifts", got.Lifts, 2)
		if l := got.LastLift; l == nil || l.Subject != "secret:two" || !l.LiftedAt.Equal(T0.Add(3*time.Minute)) {
			t.Fatalf("last lift %+v, want secret:two's at +3m", l)
		}
		listed(false)
	}},
	{"HeldCounts", func(t *testing.T, s ledger.Store) {
		b := create(t, s, newBatch("held-counts"))
		for i, held := range []map[api.Outcome]int64{{api.OutcomeWithheld: 3}, {api.OutcomeWithheld: -1}, {api.OutcomeWithheld: 2}} {
			if err := s.CountWaits(ctx, ledger.WaitCount{BatchID: b.ID, Run: 1, Lane: i % max(1, b.CounterShards), Held: held, Token: ledger.NewToken(), Now: T0}); err != nil {
				t.Fatal(err)
			}
		}
		p, err := s.Progress(ctx, b.ID, 1, max(1, b.CounterShards))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "withheld", p.Held[api.OutcomeWithheld], 4)
		check(t, "held items", p.HeldItems(), 4)
	}},
}
