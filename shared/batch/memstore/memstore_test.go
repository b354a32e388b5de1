package memstore_test

import (
	"testing"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/batch/memstore"
	"github.com/bulkrun/bulkrun/shared/batch/storetest"
)

// TestStoreConformance runs the batch.Store conformance suite on the
// in-memory store, so that the domain's unit tests on it see the
// conditions and orders the DynamoDB adapter has (the same suite runs on
// it in integration/store_test.go).
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) batch.Store { return memstore.New() })
}
