package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The pack rows of a batch with items per message > 1 (ledger.Pack):
// the take and fence conditions of Store.WritePack, the round trip of each
// item's state, attention entries, release, scan order, listing, keep and
// delete.

func init() { cases = append(cases, packCases...) }

func packBatch(id string) ledger.Batch {
	b := newBatch(id)
	b.ItemsPerMessage = 10
	return b
}

func pref(b ledger.Batch, first int64) ledger.PackRef {
	return ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: first}
}

// pitem is item key's state in run with outcome o after its attempt-th
// attempt (the run's first, at attempt).
func pitem(key string, run, attempt int, o api.Outcome, now time.Time) ledger.ItemState {
	it := ledger.ItemState{Key: key, Run: run, Outcome: o, Attempt: attempt, FirstAttempt: attempt, UpdatedAt: now}
	switch o {
	case api.OutcomeSucceeded:
		it.Output = []byte(`{"ok":"` + key + `"}`)
		it.Cost = pipeline.Cost{"usd": 0.25}
	case api.OutcomeFailed:
		it.Error, it.Reason = "boom "+key, api.ReasonPermanent
	case api.OutcomeQuarantined:
		it.Error, it.Reason = "look "+key, api.ReasonQuarantine
	case api.OutcomeCancelled:
		it.Reason = api.ReasonCancel
	}
	return it
}

// takeAndRecord takes the pack at first (a new row) for run 1 and writes
// keys[j] with outcomes[j] under the take's fence.
func takeAndRecord(t *testing.T, s ledger.Store, b ledger.Batch, first int64, keys []string, outcomes []api.Outcome) {
	t.Helper()
	var start, end []ledger.PackItemWrite
	for j, k := range keys {
		start = append(start, ledger.PackItemWrite{Index: j, Item: pitem(k, 1, 1, api.OutcomeInFlight, T0)})
		end = append(end, ledger.PackItemWrite{Index: j, Item: pitem(k, 1, 1, outcomes[j], T0), Was: api.OutcomeInFlight})
	}
	if err := s.WritePack(ctx, ledger.PackWrite{Ref: pref(b, first), Take: true, Run: 1, LeaseUntil: T0.Add(lease), Items: start, InFlight: len(keys), Now: T0}); err != nil {
		t.Fatalf("take pack %d: %v", first, err)
	}
	if err := s.WritePack(ctx, ledger.PackWrite{Ref: pref(b, first), Attempt: 1, Run: 1, Items: end, Now: T0}); err != nil {
		t.Fatalf("record pack %d: %v", first, err)
	}
}

// itemAt is item j of p; a pack row may hold fewer items than the pack
// when its last ones were never written.
func itemAt(p ledger.Pack, j int) ledger.ItemState {
	if j < len(p.Items) {
		return p.Items[j]
	}
	return ledger.ItemState{}
}

var packCases = []suiteCase{
	{"PackTakeAndFence", func(t *testing.T, s ledger.Store) {
		b := create(t, s, packBatch("b1"))
		ref := pref(b, 20)
		if _, err := s.GetPack(ctx, ref); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("get before any take: %v, want ErrNotFound", err)
		}
		a := pitem("a", 1, 1, api.OutcomeInFlight, T0)
		take := ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: T0.Add(lease), Items: []ledger.PackItemWrite{{Index: 0, Item: a}}, Now: T0}
		if err := s.WritePack(ctx, take); err != nil {
			t.Fatal(err)
		}
		isConflict(t, "a second first take", s.WritePack(ctx, take))
		again := take
		again.Attempt, again.Now = 1, T0.Add(time.Second)
		isConflict(t, "a take under a live lease", s.WritePack(ctx, again))
		p, err := s.GetPack(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "attempt", p.Attempt, 1)
		check(t, "run", p.Run, 1)
		check(t, "lease", p.LeaseUntil, ms(T0.Add(lease)))
		check(t, "first", p.First, int64(20))
		// The lease ends: the next take fences the first holder off.
		again.Now = T0.Add(lease + time.Second)
		again.LeaseUntil = again.Now.Add(lease)
		a2 := a
		a2.Attempt = 2
		again.Items = []ledger.PackItemWrite{{Index: 0, Item: a2, Was: api.OutcomeInFlight}}
		if err := s.WritePack(ctx, again); err != nil {
			t.Fatalf("take after the lease: %v", err)
		}
		late := ledger.PackWrite{Ref: ref, Attempt: 1, Run: 1, Items: []ledger.PackItemWrite{{Index: 0, Item: pitem("a", 1, 1, api.OutcomeFailed, T0), Was: api.OutcomeInFlight}}, Now: again.Now}
		isConflict(t, "the first holder's late write", s.WritePack(ctx, late))
		// The holder writes every field of an item; a resend is the same write.
		full := ledger.ItemState{Key: "a", Run: 1, Outcome: api.OutcomeSucceeded, Attempt: 2, FirstAttempt: 1,
			Output: []byte(`{"n":1}`), OutputRef: "s3://b/k", Cost: pipeline.Cost{"usd": 0.5}, Spent: pipeline.Cost{"usd": 0.75},
			SpentRun: 1, CountedRun: 1, UpdatedAt: again.Now}
		retry := ledger.ItemState{Key: "b", Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, Retry: true, Error: "busy", UpdatedAt: again.Now}
		fenced := ledger.PackWrite{Ref: ref, Attempt: 2, Run: 1, Items: []ledger.PackItemWrite{{Index: 0, Item: full, Was: api.OutcomeInFlight}, {Index: 3, Item: retry}}, Now: again.Now}
		for range 2 {
			if err := s.WritePack(ctx, fenced); err != nil {
				t.Fatalf("fenced write: %v", err)
			}
		}
		p, err = s.GetPack(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "attempt after the takeover", p.Attempt, 2)
		check(t, "lease left free", p.LeaseUntil, time.Time{})
		check(t, "items", len(p.Items), 4)
		got := p.Items[0]
		check(t, "key", got.Key, "a")
		check(t, "outcome", got.Outcome, api.OutcomeSucceeded)
		check(t, "attempt", got.Attempt, 2)
		check(t, "first attempt", got.FirstAttempt, 1)
		check(t, "output", string(got.Output), `{"n":1}`)
		check(t, "output ref", got.OutputRef, "s3://b/k")
		check(t, "cost", got.Cost["usd"], 0.5)
		check(t, "spent", got.Spent["usd"], 0.75)
		check(t, "spent run", got.SpentRun, 1)
		check(t, "counted run", got.CountedRun, 1)
		check(t, "updated", got.UpdatedAt, ms(again.Now))
		check(t, "never written", itemAt(p, 1).Outcome, api.Outcome(""))
		check(t, "retry scheduled", p.Items[3].Retry, true)
		check(t, "retry error", p.Items[3].Error, "busy")
		it := p.Item(0)
		check(t, "item view run id", it.RunID, ledger.RunID("b1", "a"))
		check(t, "item view attempts", it.RunAttempts, 2)
		check(t, "item view position", it.Pos, ledger.PackPos(20, 0))
		// A free pack is taken at once; an item written empty is removed.
		free := ledger.PackWrite{Ref: ref, Take: true, Attempt: 2, Run: 2, Items: []ledger.PackItemWrite{{Index: 3, Item: ledger.ItemState{}, Was: api.OutcomeInFlight}}, Now: again.Now}
		if err := s.WritePack(ctx, free); err != nil {
			t.Fatalf("take of a free pack: %v", err)
		}
		p, _ = s.GetPack(ctx, ref)
		check(t, "run of the take", p.Run, 2)
		check(t, "removed item", itemAt(p, 3).Outcome, api.Outcome(""))
	}},
	{"PackAttentionEntries", func(t *testing.T, s ledger.Store) {
		b := create(t, s, packBatch("b1"))
		done(t, s, b, "m-item-row", 1, api.OutcomeFailed, T0) // an item row, listed with them
		keys := []string{"p3", "p1", "p2", "p0"}
		takeAndRecord(t, s, b, 0, keys, []api.Outcome{api.OutcomeFailed, api.OutcomeSucceeded, api.OutcomeQuarantined, api.OutcomeFailed})
		takeAndRecord(t, s, b, 10, []string{"a9", "z9"}, []api.Outcome{api.OutcomeFailed, api.OutcomeCancelled})
		list := func(o api.Outcome, want []string) {
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
						if it.Outcome != o || it.Run < 1 || it.RunAttempts != 1 || it.Error == "" || it.RunID != ledger.RunID(b.ID, it.Key) {
							return fmt.Errorf("%s listing holds %+v", o, it)
						}
						if it.Packed && it.Error != pitem(it.Key, it.Run, 1, o, T0).Error {
							return fmt.Errorf("%s listing gives %s the error %q, want its own", o, it.Key, it.Error)
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
		list(api.OutcomeFailed, []string{"a9", "m-item-row", "p0", "p3"})
		list(api.OutcomeQuarantined, []string{"p2"})
		// A failed and a quarantined pack item read alone keep their
		// error texts, wherever the store keeps them.
		for _, k := range []struct {
			key string
			o   api.Outcome
		}{{"p0", api.OutcomeFailed}, {"p2", api.OutcomeQuarantined}} {
			it, err := s.LocateItem(ctx, b.ID, b.ListShards, k.key)
			if err != nil {
				t.Fatalf("locate %s: %v", k.key, err)
			}
			if want := pitem(k.key, 1, 1, k.o, T0); it.Outcome != k.o || it.Error != want.Error || it.Reason != want.Reason {
				t.Errorf("locate %s: %s %q (%s), want %s %q (%s)", k.key, it.Outcome, it.Error, it.Reason, k.o, want.Error, want.Reason)
			}
		}
		// p3 leaves failed (a new run takes it); p1 enters quarantined.
		now := T0.Add(time.Hour)
		err := s.WritePack(ctx, ledger.PackWrite{Ref: pref(b, 0), Take: true, Attempt: 1, Run: 2, LeaseUntil: now.Add(lease), Now: now, InFlight: 1,
			Items: []ledger.PackItemWrite{{Index: 0, Item: pitem("p3", 2, 2, api.OutcomeInFlight, now), Was: api.OutcomeFailed},
				{Index: 1, Item: pitem("p1", 2, 2, api.OutcomeQuarantined, now), Was: api.OutcomeSucceeded}}})
		if err != nil {
			t.Fatal(err)
		}
		list(api.OutcomeFailed, []string{"a9", "m-item-row", "p0"})
		list(api.OutcomeQuarantined, []string{"p1", "p2"})
		// In-flight pack items, in key order, paged.
		eventually(t, func() error {
			items, next, err := s.ListPackItems(ctx, b.ID, b.ListShards, "", 10)
			if err != nil {
				return err
			}
			if len(items) != 1 || items[0].Key != "p3" || next != "" || items[0].LeaseUntil != ms(now.Add(lease)) {
				return fmt.Errorf("in flight: %+v next %q", items, next)
			}
			return nil
		})
	}},
	{"PackReleaseItem", func(t *testing.T, s ledger.Store) {
		b := create(t, s, packBatch("b1"))
		takeAndRecord(t, s, b, 0, []string{"q", "f", "s"}, []api.Outcome{api.OutcomeQuarantined, api.OutcomeFailed, api.OutcomeSucceeded})
		finish(t, s, b.ID, 1, api.StatusCompleted, T0.Add(time.Hour))
		if err := s.ReleaseItem(ctx, b.ID, b.ListShards, "q"); err != nil {
			t.Fatalf("release q: %v", err)
		}
		isConflict(t, "release of a failed pack item", s.ReleaseItem(ctx, b.ID, b.ListShards, "f"))
		if err := s.ReleaseItem(ctx, b.ID, b.ListShards, "nobody"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("release of an unknown item: %v, want ErrNotFound", err)
		}
		p, err := s.GetPack(ctx, pref(b, 0))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "q released in its pack", p.Items[0].Released, true)
		check(t, "f not released", p.Items[1].Released, false)
		eventually(t, func() error {
			items, _, err := s.ListItems(ctx, b.ID, b.ListShards, api.OutcomeQuarantined, "", 10)
			if err != nil {
				return err
			}
			if len(items) != 1 || !items[0].Released {
				return fmt.Errorf("quarantined listing after release: %+v", items)
			}
			return nil
		})
	}},
	{"ScanPacksInManifestOrder", func(t *testing.T, s ledger.Store) {
		b := create(t, s, packBatch("b1"))
		var want []string
		for pk := range int64(12) {
			first := pk * 3
			keys := []string{fmt.Sprintf("z%02d", first), fmt.Sprintf("a%02d", first+1), fmt.Sprintf("m%02d", first+2)}
			takeAndRecord(t, s, b, first, keys, []api.Outcome{api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeSucceeded})
			want = append(want, keys...)
		}
		// A never-reserved item is not a row.
		if err := s.WritePack(ctx, ledger.PackWrite{Ref: pref(b, 100), Take: true, Run: 1, Now: T0,
			Items: []ledger.PackItemWrite{{Index: 1, Item: pitem("late", 1, 1, api.OutcomeCancelled, T0)}}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, "late")
		var got, pos []string
		err := shardmerge.Merge(ctx, s, b.ID, b.ListShards, "", shardmerge.Options{Packed: true, BudgetBytes: 2000}, func(it ledger.Item) error {
			got, pos = append(got, it.Key), append(pos, it.Pos)
			if !it.Packed || it.PackFirst > 100 {
				return fmt.Errorf("item %+v", it)
			}
			// The results take each failed item's error text from the scan.
			if want := pitem(it.Key, 1, 1, it.Outcome, T0); it.Error != want.Error || it.Reason != want.Reason {
				return fmt.Errorf("scanned %s (%s): error %q (%s), want %q (%s)", it.Key, it.Outcome, it.Error, it.Reason, want.Error, want.Reason)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("scan order %q, want manifest order %q", got, want)
		}
		// From a position inside a pack.
		var rest []string
		err = shardmerge.Merge(ctx, s, b.ID, b.ListShards, pos[4], shardmerge.Options{Packed: true}, func(it ledger.Item) error {
			rest = append(rest, it.Key)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rest, want[5:]) {
			t.Fatalf("scan after %s: %q, want %q", pos[4], rest, want[5:])
		}
		for shard := range b.ListShards {
			items, _, err := s.ScanPacks(ctx, b.ID, shard, "", 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) == 0 {
				continue
			}
			if items[0].Pos == "" || items[0].Outcome == "" {
				t.Errorf("shard %d: %+v", shard, items[0])
			}
		}
	}},
	{"PackRowsKeptAndDeleted", func(t *testing.T, s ledger.Store) {
		b := create(t, s, packBatch("b1"))
		keep := create(t, s, packBatch("keep"))
		takeAndRecord(t, s, b, 0, []string{"a", "b"}, []api.Outcome{api.OutcomeFailed, api.OutcomeSucceeded})
		takeAndRecord(t, s, keep, 0, []string{"x"}, []api.Outcome{api.OutcomeSucceeded})
		p, _ := s.GetPack(ctx, pref(b, 0))
		until := T0.Add(100 * 24 * time.Hour).Add(500 * time.Millisecond)
		if err := s.KeepPacks(ctx, b, []int64{0, 50}, []string{"a"}, until); err != nil {
			t.Fatal(err)
		}
		want := time.Unix(until.Unix(), 0).UTC()
		kept, _ := s.GetPack(ctx, pref(b, 0))
		if !p.ExpiresAt.IsZero() && p.ExpiresAt.After(want) {
			want = p.ExpiresAt
		}
		check(t, "pack kept until", kept.ExpiresAt, want)
		if _, err := s.GetPack(ctx, pref(b, 50)); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("KeepPacks created a pack: %v", err)
		}
		if err := s.KeepPacks(ctx, b, []int64{0}, nil, until.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		kept, _ = s.GetPack(ctx, pref(b, 0))
		check(t, "pack after an earlier until", kept.ExpiresAt, want)
		finish(t, s, b.ID, 1, api.StatusCompleted, T0.Add(time.Hour))
		stored, _ := s.GetBatch(ctx, b.ID)
		if err := s.DeleteBatch(ctx, stored); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetPack(ctx, pref(b, 0)); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("pack row after delete: %v", err)
		}
		if err := s.ReleaseItem(ctx, b.ID, b.ListShards, "a"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("attention entry after delete: release gives %v, want ErrNotFound", err)
		}
		if _, err := s.GetPack(ctx, pref(keep, 0)); err != nil {
			t.Errorf("another batch's pack went too: %v", err)
		}
	}},
}
