// Package pacetest is the ledger.Store conformance of the rows that pace
// calls (shared/pace, shared/pacer): a rate key's bucket rows
// (Store.LeaseRate), a key's token row (Store.LeaseTokens,
// SettleTokens, ReadTokens) and a key's adaptive row (Store.ReadAdapt,
// CutAdapt, LeaseAdapt). Run passes each case a new store. The
// in-memory store (integration/testbed/memstore) passes it in this
// package's tests, the DynamoDB adapter in integration's
// TestPaceStoreConformance. It sits beside ledgertest, whose suite is at
// its size bound, as heldtest does.
package pacetest

import (
	"context"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// T0 is the cases' clock.
var T0 = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

var ctx = context.Background()

// Run runs every case on a store of its own from newStore.
func Run(t *testing.T, newStore func(t *testing.T) ledger.Store) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s ledger.Store)
	}{
		{"RateLeases", rateLeases},
		{"TokenLeases", tokenLeases},
		{"TokenSettlesAtOnce", tokenSettlesAtOnce},
		{"AdaptCuts", adaptCuts},
		{"AdaptLeases", adaptLeases},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

func check[V comparable](t *testing.T, what string, got, want V) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
