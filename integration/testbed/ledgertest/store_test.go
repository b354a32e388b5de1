package ledgertest_test

import (
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/ledgertest"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestStoreConformance runs the ledger.Store conformance suite on the
// in-memory store, so that the domain's unit tests on it see the
// conditions and orders the DynamoDB adapter has (the same suite runs on
// it in integration/store_test.go).
func TestStoreConformance(t *testing.T) {
	ledgertest.Run(t, func(*testing.T) ledger.Store { return ledgertest.NewStore() })
}
