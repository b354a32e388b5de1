// Package worker is the item engine: Worker.Handle takes one batch of
// queue deliveries (fan-out chunks, item messages, packs of K items, dead
// letters) and runs each unit's items to a recorded outcome through the
// ledger's rules: reserve before run, record fenced by the attempt, retry
// by the batch's policy with the queue as timer, settle what a stop or
// the dead-letter queue ends. It counts what ended in the run's counter
// lanes (the last count triggers finalize), stops a run whose failures
// pass its threshold, holds a batch's max_concurrency in slots, pauses a
// batch whose downstream is down and resumes it when a probe is answered,
// and resolves secret references just before a pipeline call.
//
// AWS faults are not the item's: throttling and unavailability
// (ledger.ErrUnavailable) never count an attempt or fail an item.
//
// It declares the store methods it uses (Store) and imports no other
// engine and no AWS SDK.
package worker
