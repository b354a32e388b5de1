// Package ledgertest is the conformance suite of the ledger's store
// contract (ledger.Store): Run states every condition, transition and
// listing order the contract's doc comments give, and every store passes
// it (the DynamoDB adapter on the emulator, from integration/store_test.go;
// the in-memory store of integration/testbed/memstore, in its own test).
// It imports no store.
//
// Only tests and the test bed import it; no Lambda binary links it.
package ledgertest
