// Package memstore is the ledger's in-memory store (Store, NewStore): the
// conditions, transitions and listing orders of the DynamoDB adapter, held
// to them by the conformance suite of integration/testbed/ledgertest,
// which its test runs. Beside it are small tools for tests (FixedClock,
// Gzip, OrdersJSONL).
//
// Only tests and the test bed import it; no Lambda binary links it.
package memstore
