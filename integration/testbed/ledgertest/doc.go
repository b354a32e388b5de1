// Package ledgertest is the ledger's test bed: an in-memory store (Store,
// NewStore) with the conditions, transitions and listing orders of the
// DynamoDB adapter, the conformance suite every store passes (Run: the
// adapter on the emulator, from integration/store_test.go; the in-memory
// store, in its own test), an in-memory bucket with S3's semantics
// (Blobs), and small tools for tests (FixedClock, Gzip, OrdersJSONL).
//
// Only tests and the test bed import it; no Lambda binary links it.
package ledgertest
