package ledgertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The item rules (ledger.Plan, Start, Settled) pin the item-row
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
	make  func(t *testing.T, s ledger.Store, b ledger.Batch, key string)
	tryAt time.Time
}

func rowStates() []rowState {
	after := T0.Add(time.Second)
	ended := T0.Add(2 * lease)
	outcome := func(o api.Outcome) func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
		return func(t *testing.T, s ledger.Store, b ledger.Batch, key string) { done(t, s, b, key, 1, o, T0) }
	}
	return []rowState{
		{"no row", func(*testing.T, ledger.Store, ledger.Batch, string) {}, after},
		{"in flight, lease live", func(t *testing.T, s ledger.Store, b ledger.Batch, key string) { reserve(t, s, res(b, key, 1, T0)) }, after},
		{"in flight, lease ended", func(t *testing.T, s ledger.Store, b ledger.Batch, key string) { reserve(t, s, res(b, key, 1, T0)) }, ended},
		{"retry scheduled", func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
			it := reserve(t, s, res(b, key, 1, T0))
			if err := s.Release(ctx, rec(b, key, 1, it.Attempt, "", T0)); err != nil {
				t.Fatal(err)
			}
		}, after},
		{"succeeded", outcome(api.OutcomeSucceeded), after},
		{"failed", outcome(api.OutcomeFailed), after},
		{"quarantined", outcome(api.OutcomeQuarantined), after},
		{"quarantined, released", func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
			done(t, s, b, key, 1, api.OutcomeQuarantined, T0)
			if err := s.ReleaseItem(ctx, b.ID, b.ListShards, key); err != nil {
				t.Fatal(err)
			}
		}, after},
		{"cancelled", func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
			if _, err := s.Settle(ctx, rec(b, key, 1, 0, api.OutcomeCancelled, T0)); err != nil {
				t.Fatal(err)
			}
		}, after},
		{"withheld", outcome(api.OutcomeWithheld), after},
		{"withheld, woken", heldWoken(api.OutcomeWithheld, api.WakeLift), after},
		{"withheld, woken to cancel", heldWoken(api.OutcomeWithheld, api.WakeCancel), after},
		{"failed, marked with revision 2", marked(api.OutcomeFailed), after},
		{"quarantined, marked with revision 2", marked(api.OutcomeQuarantined), after},
		{"cancelled, marked with revision 2", marked(api.OutcomeCancelled), after},
	}
}

// heldWoken makes an item row held with outcome o in run 1 and wakes it
// by by (Store.WakeItem).
func heldWoken(o api.Outcome, by api.Wake) func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
	return func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
		done(t, s, b, key, 1, o, T0)
		if _, err := s.WakeItem(ctx, ledger.WakeMark{BatchID: b.ID, ListShards: b.ListShards, Key: key, Run: 1, Outcome: o, By: by, Now: T0}); err != nil {
			t.Fatal(err)
		}
	}
}

// marked makes an item row of outcome o in run 1 and marks it with
// revision 2 for run 2 (Store.MarkRevision).
func marked(o api.Outcome) func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
	return func(t *testing.T, s ledger.Store, b ledger.Batch, key string) {
		if o == api.OutcomeCancelled {
			if _, err := s.Settle(ctx, rec(b, key, 1, 0, api.OutcomeCancelled, T0)); err != nil {
				t.Fatal(err)
			}
		} else {
			done(t, s, b, key, 1, o, T0)
		}
		at2 := b
		at2.Run = 2
		if err := s.MarkRevision(ctx, at2, 2, []ledger.RevisionMark{{Key: key}}); err != nil {
			t.Fatal(err)
		}
	}
}

// stateOf is the item rules' view of a stored item row.
func stateOf(it ledger.Item, ok bool) ledger.ItemState {
	if !ok {
		return ledger.ItemState{}
	}
	st := ledger.ItemState{Key: it.Key, Run: it.Run, Outcome: it.Outcome, Attempt: it.Attempt,
		FirstAttempt: it.Attempt - it.RunAttempts + 1, Released: it.Released, Revision: it.Revision}
	if it.Hold != nil {
		st.Hold = *it.Hold
	}
	return st
}

func itemRowConditionsArePlan(t *testing.T, s ledger.Store) {
	b := create(t, s, newBatch("rules"))
	modes := []struct {
		name string
		mode ledger.Mode
		want ledger.Step
		// redelivered: Reserve of a message received before, which tries
		// the takeover's condition first; it must take the same rows.
		redelivered bool
	}{{"reserve", ledger.ModeRun, ledger.StepRun, false}, {"reserve redelivered", ledger.ModeRun, ledger.StepRun, true},
		{"settle", ledger.ModeSettle, ledger.StepSettle, false}, {"settle unstarted", ledger.ModeUnstarted, ledger.StepSettle, false}}
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
					step, _ := ledger.Plan(before, run, rev, m.mode, live)
					var err error
					r := rec(b, key, run, 0, api.OutcomeFailed, st.tryAt)
					r.Reason, r.Error, r.Revision = api.ReasonDeadLettered, "dead-lettered", rev
					switch m.mode {
					case ledger.ModeRun:
						var got ledger.Item
						rs := res(b, key, run, st.tryAt)
						rs.Revision, rs.Redelivered = rev, m.redelivered
						got, err = s.Reserve(ctx, rs)
						if err == nil {
							want := ledger.Start(before, run, st.tryAt)
							check(t, what+": attempt", got.Attempt, want.Attempt)
							check(t, what+": run attempts", got.RunAttempts, want.RunAttempts())
							check(t, what+": revision", got.Revision, want.Revision)
						}
					case ledger.ModeSettle:
						_, err = s.Settle(ctx, r)
					case ledger.ModeUnstarted:
						_, err = s.SettleUnstarted(ctx, r)
					}
					if err != nil && !errors.Is(err, api.ErrConflict) {
						t.Fatalf("%s: %v", what, err)
					}
					if took := err == nil; took != (step == m.want) {
						t.Errorf("%s: took the row %v, Plan says step %d", what, took, step)
						continue
					}
					if err == nil && m.mode != ledger.ModeRun {
						after := stateOf(get(t, s, b, key))
						want := ledger.Settled(before, run, api.OutcomeFailed, r.Reason, r.Error, st.tryAt)
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
