//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bulkrun/bulkrun/integration/testbed/heldtest"
	"github.com/bulkrun/bulkrun/integration/testbed/ledgertest"
	"github.com/bulkrun/bulkrun/integration/testbed/pacetest"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestStoreConformance runs the ledger.Store conformance suite
// (integration/testbed/ledgertest: every condition, transition and listing order of
// the contract) on the DynamoDB adapter, a table of its own per case made
// by dynamo.CreateTable as the harness makes it. The in-memory store the
// domain's unit tests use passes the same suite, so what those tests see
// is what DynamoDB does.
func TestStoreConformance(t *testing.T) {
	ledgertest.Run(t, conformanceStore)
}

// TestHeldStoreConformance runs the exhausted outcome's conformance
// (integration/testbed/heldtest) on the DynamoDB adapter as
// TestStoreConformance does.
func TestHeldStoreConformance(t *testing.T) {
	heldtest.Run(t, conformanceStore)
}

// TestPaceStoreConformance runs the pacing rows' conformance
// (integration/testbed/pacetest: rate leases, token bookings and settles)
// on the DynamoDB adapter as TestStoreConformance does.
func TestPaceStoreConformance(t *testing.T) {
	pacetest.Run(t, conformanceStore)
}

// conformanceStore is the DynamoDB adapter on a table of its own.
func conformanceStore(t *testing.T) ledger.Store {
	ctx := context.Background()
	name := strings.Trim(strings.ToLower(newID(t)), "-")
	if len(name) > 60 {
		name = strings.Trim(name[len(name)-60:], "-")
	}
	if err := dynamo.CreateTable(ctx, env.ddb, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	return dynamo.New(env.ddb, name)
}
