package pacetest

import (
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The in-memory store passes the pacing rows' conformance.
func TestMemStore(t *testing.T) {
	Run(t, func(*testing.T) ledger.Store { return memstore.NewStore() })
}
