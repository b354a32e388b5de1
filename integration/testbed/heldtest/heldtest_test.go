package heldtest

import (
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The in-memory store passes the exhausted outcome's conformance.
func TestMemStore(t *testing.T) {
	Run(t, func(*testing.T) ledger.Store { return memstore.NewStore() })
}
