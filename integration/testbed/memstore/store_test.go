package memstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/ledgertest"
	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestStoreConformance runs the ledger.Store conformance suite on the
// in-memory store, so that the domain's unit tests on it see the
// conditions and orders the DynamoDB adapter has (the same suite runs on
// it in integration/store_test.go).
func TestStoreConformance(t *testing.T) {
	ledgertest.Run(t, func(*testing.T) ledger.Store { return memstore.NewStore() })
}

// The in-memory store applies DynamoDB's 400 KB item limit to pack rows
// and item rows, as the test bed must for every AWS rule bulkrun relies
// on: a pack write leaving 7 items of 60 KiB of output is refused with
// ErrItemTooLarge and changes nothing, one leaving 6 is taken; an item
// row's outcome with 401 KiB of output is refused.
func TestStoreRefusesRowsOverTheItemLimit(t *testing.T) {
	ctx := context.Background()
	s := memstore.NewStore()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ref := ledger.PackRef{BatchID: "big", ListShards: 1, First: 0}
	out := json.RawMessage(`"` + strings.Repeat("x", 60<<10) + `"`)
	write := func(n, attempt int, take bool) error {
		var items []ledger.PackItemWrite
		for j := range n {
			items = append(items, ledger.PackItemWrite{Index: j, Item: ledger.ItemState{Key: fmt.Sprintf("k%d", j), Run: 1, Outcome: api.OutcomeSucceeded,
				Attempt: 1, Output: out, UpdatedAt: now}})
		}
		return s.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: take, Attempt: attempt, Run: 1, Items: items, InFlight: 0, Now: now})
	}
	if err := write(7, 0, true); !errors.Is(err, memstore.ErrItemTooLarge) {
		t.Fatalf("a pack row of 7 × 60 KiB: %v, want ErrItemTooLarge", err)
	}
	if _, err := s.GetPack(ctx, ref); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the refused write left a row: %v", err)
	}
	if err := write(6, 0, true); err != nil {
		t.Fatalf("a pack row of 6 × 60 KiB: %v", err)
	}
	it, err := s.Reserve(ctx, ledger.Reservation{BatchID: "big", Key: "k", Run: 1, ListShards: 1, Now: now, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Record(ctx, ledger.Record{BatchID: "big", Key: "k", Run: 1, ListShards: 1, Attempt: it.Attempt, Outcome: api.OutcomeSucceeded,
		Output: json.RawMessage(`"` + strings.Repeat("x", 401<<10) + `"`), Now: now})
	if !errors.Is(err, memstore.ErrItemTooLarge) {
		t.Fatalf("an item row with 401 KiB of output: %v, want ErrItemTooLarge", err)
	}
}
