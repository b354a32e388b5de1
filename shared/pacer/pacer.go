// Package pacer keeps what an item function's process knows of the rows
// that pace its calls (shared/pace's rules, kept in the ledger): the Next
// it last saw of each bucket row and token row, a hint for the store's
// first form (idle or busy) — and, since a bucket row's Next only moves
// later, enough to skip a late call's lease that every row of its key
// would refuse (Relet) — never what lets a call start; and each token key's
// tokens per call, from which a unit books its expected use of a token
// budget (docs/adr/0035). The item engine (shared/worker) leases and
// waits; this package answers how much to book and how long to wait.
// Its state is the process's: lost with it, rebuilt from the rows'
// answers, bounded by a sweep of the rows whose Next has passed.
package pacer

import (
	"sync"
	"sync/atomic"
	"time"
)

// Row names a row this process leased from: a rate key's bucket row
// (Shard) or its token row (Tokens).
type Row struct {
	Key    string
	Shard  int
	Tokens bool
}

// seen is what the process last saw of a row: its Next and, of a token
// row with settled calls, the tokens per call.
type seen struct {
	next    time.Time
	perCall float64
	known   bool
}

var (
	rows sync.Map // Row → seen
	// stores counts Saw's calls; every SweepEvery-th sweeps rows.
	stores atomic.Int64
)

// SweepEvery is how many rows are seen between two sweeps of the hints.
const SweepEvery = 1024

// Idle reports whether r's Next, as this process last saw it, has passed
// by now (or it never saw r): the store's idle form goes first.
func Idle(r Row, now time.Time) bool {
	v, ok := rows.Load(r)
	return !ok || !v.(seen).next.After(now)
}

// Saw keeps next as r's hint, and every SweepEvery calls deletes the
// hints whose Next has passed: such a hint says what no hint says (the
// row is idle; a token key's estimate is read again from its row's next
// answer), so that the process holds only the rows it leased from in the
// last horizon, however many keys it met over its life.
func Saw(r Row, next, now time.Time) {
	v, _ := rows.Load(r)
	s, _ := v.(seen)
	s.next = next
	save(r, s, now)
}

func save(r Row, s seen, now time.Time) {
	rows.Store(r, s)
	if stores.Add(1)%SweepEvery != 0 {
		return
	}
	rows.Range(func(k, v any) bool {
		if !v.(seen).next.After(now) {
			rows.CompareAndDelete(k, v)
		}
		return true
	})
}

// Forget drops every hint and every key's lateness (a test's fresh
// process).
func Forget() {
	rows.Clear()
	forgetLags()
}
