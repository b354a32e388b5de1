// Package flow holds the engines' tests together on the in-memory ledger
// (integration/testbed/memstore): a request submitted, its items run
// through the worker with duplicate deliveries, crashes, fenced takeovers,
// packs, pauses, stops and corrections, finalized, resumed and swept, in
// milliseconds; and the submit's parts and the finalize's parts against a
// single read. Its tests are the whole of it: no code here is linked by
// anything else. Storage semantics are tested against DynamoDB on the
// emulator, in integration/.
package flow
