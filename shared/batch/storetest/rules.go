package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/batch"
)

// The item rules (batch.Plan, Start, Settled) pin the item-row
// conditions: for every state an item row can hold (marked with a
// correction's revision or not), a run of the same or the next number, a
// run of the whole manifest or a correction run, and each mode, Reserve,
// Settle and SettleUnstarted take the row exactly when Plan says so, and
// leave what Start and Settled say. On DynamoDB this checks the condition
// expressions of internal/dynamo against the one statement of the rules.

func init() { cases = append(cases, suiteCase{"ItemRowConditionsArePlan", itemRowConditionsArePlan}) }

// rowState is a state an item row can hold after run 1, the ops that make
// it, and when the ops are tried (its lease live or ended then).
type rowState struct {
	name  string
	make  func(t *testing.T, s batch.Store, b batch.Batch, key string)
	tryAt time.Time
}

func rowStates() []rowState {
	after := T0.Add(time.Second)
	ended := T0.Add(2 * lease)
	outcome := func(o batch.Outcome) func(t *testing.T, s batch.Store, b batch.Batch, key string) {
		return func(t *testing.T, s batch.Store, b batch.Batch, key string) { done(t, s, b, key, 1, o, T0) }
	}
	return []rowState{
		{"no row", func(*testing.T, batch.Store, batch.Batch, string) {}, after},
		{"in flight, lease live", func(t *testing.T, s batch.Store, b batch.Batch, key string) { reserve(t, s, res(b, key, 1, T0)) }, after},
		{"in flight, lease ended", func(t *testing.T, s batch.Store, b batch.Batch, key string) { reserve(t, s, res(b, key, 1, T0)) }, ended},
		{"retry scheduled", func(t *testing.T, s batch.Store, b batch.Batch, key string) {
			it := reserve(t, s, res(b, key, 1, T0))
			if err := s.Release(ctx, rec(b, key, 1, it.Attempt, "", T0)); err != nil {
				t.Fatal(err)
			}
		}, after},
		{"succeeded", outcome(batch.OutcomeSucceeded), after},
		{"failed", outcome(batch.OutcomeFailed), after},
		{"quarantined", outcome(batch.OutcomeQuarantined), after},
		{"quarantined, released", func(t *testing.T, s batch.Store, b batch.Batch, key string) {
			done(t, s, b, key, 1, batch.OutcomeQuarantined, T0)
			if err := s.ReleaseItem(ctx, b.ID, b.ListShards, key); err != nil {
				t.Fatal(err)
			}
		}, after},
		{"cancelled", func(t *testing.T, s batch.Store, b batch.Batch, key string) {
			if _, err := s.Settle(ctx, rec(b, key, 1, 0, batch.OutcomeCancelled, T0)); err != nil {
				t.Fatal(err)
			}
		}, after},
		{"failed, marked with revision 2", marked(batch.OutcomeFailed), after},
		{"quarantined, marked with revision 2", marked(batch.OutcomeQuarantined), after},
		{"cancelled, marked with revision 2", marked(batch.OutcomeCancelled), after},
	}
}

// marked makes an item row of outcome o in run 1 and marks it with
// revision 2 for run 2 (Store.MarkRevision).
func marked(o batch.Outcome) func(t *testing.T, s batch.Store, b batch.Batch, key string) {
	return func(t *testing.T, s batch.Store, b batch.Batch, key string) {
		if o == batch.OutcomeCancelled {
			if _, err := s.Settle(ctx, rec(b, key, 1, 0, batch.OutcomeCancelled, T0)); err != nil {
				t.Fatal(err)
			}
		} else {
			done(t, s, b, key, 1, o, T0)
		}
		at2 := b
		at2.Run = 2
		if err := s.MarkRevision(ctx, at2, 2, []batch.RevisionMark{{Key: key}}); err != nil {
			t.Fatal(err)
		}
	}
}

// stateOf is the item rules' view of a stored item row.
func stateOf(it batch.Item, ok bool) batch.ItemState {
	if !ok {
		return batch.ItemState{}
	}
	return batch.ItemState{Key: it.Key, Run: it.Run, Outcome: it.Outcome, Attempt: it.Attempt,
		FirstAttempt: it.Attempt - it.RunAttempts + 1, Released: it.Released, Revision: it.Revision}
}

func itemRowConditionsArePlan(t *testing.T, s batch.Store) {
	b := create(t, s, newBatch("rules"))
	modes := []struct {
		name string
		mode batch.Mode
		want batch.Step
		// redelivered: Reserve of a message received before, which tries
		// the takeover's condition first; it must take the same rows.
		redelivered bool
	}{{"reserve", batch.ModeRun, batch.StepRun, false}, {"reserve redelivered", batch.ModeRun, batch.StepRun, true},
		{"settle", batch.ModeSettle, batch.StepSettle, false}, {"settle unstarted", batch.ModeUnstarted, batch.StepSettle, false}}
	n := 0
	for _, st := range rowStates() {
		for _, run := range []int{1, 2} {
			for _, rev := range []int{0, 2} {
				for _, m := range modes {
					n++
					key := fmt.Sprintf("k%03d", n)
					what := fmt.Sprintf("%s in run 1, %s in run %d of revision %d", st.name, m.name, run, rev)
					st.make(t, s, b, key)
					before := stateOf(get(t, s, b, key))
					it, _ := get(t, s, b, key)
					live := !it.LeaseUntil.IsZero() && it.LeaseUntil.UnixMilli() >= st.tryAt.UnixMilli()
					step, _ := batch.Plan(before, run, rev, m.mode, live)
					var err error
					r := rec(b, key, run, 0, batch.OutcomeFailed, st.tryAt)
					r.Reason, r.Error, r.Revision = batch.ReasonDeadLettered, "dead-lettered", rev
					switch m.mode {
					case batch.ModeRun:
						var got batch.Item
						rs := res(b, key, run, st.tryAt)
						rs.Revision, rs.Redelivered = rev, m.redelivered
						got, err = s.Reserve(ctx, rs)
						if err == nil {
							want := batch.Start(before, run, st.tryAt)
							check(t, what+": attempt", got.Attempt, want.Attempt)
							check(t, what+": run attempts", got.RunAttempts, want.RunAttempts())
							check(t, what+": revision", got.Revision, want.Revision)
						}
					case batch.ModeSettle:
						_, err = s.Settle(ctx, r)
					case batch.ModeUnstarted:
						_, err = s.SettleUnstarted(ctx, r)
					}
					if err != nil && !errors.Is(err, batch.ErrConflict) {
						t.Fatalf("%s: %v", what, err)
					}
					if took := err == nil; took != (step == m.want) {
						t.Errorf("%s: took the row %v, Plan says step %d", what, took, step)
						continue
					}
					if err == nil && m.mode != batch.ModeRun {
						after := stateOf(get(t, s, b, key))
						want := batch.Settled(before, run, batch.OutcomeFailed, r.Reason, r.Error, st.tryAt)
						check(t, what+": outcome", after.Outcome, want.Outcome)
						check(t, what+": run attempts", after.RunAttempts(), want.RunAttempts())
						check(t, what+": attempt", after.Attempt, want.Attempt)
						check(t, what+": revision", after.Revision, want.Revision)
					}
				}
			}
		}
	}
}
