// Package batch is bulkrun's domain: batches, items, runs, outcomes,
// census, threshold, manifest, reservation and retention. It imports no AWS
// type; it declares the small interfaces it consumes (Store, Blobs, Queue,
// Trigger, Events, Clock), which internal/dynamo, internal/blob, internal/queue,
// internal/trigger and internal/event implement.
//
// The workflows: Submitter (submit, accept and its background read, resume), Worker (fan-out, items, dead
// letters), Finalizer (census, results, report; the scheduled tick),
// Control (cancel, release, forget, listings) and Sweeper (retention).
//
// An item's outcome within a run:
//
//	         reserve (conditional)            record (fenced by attempt)
//	pending ─────────────────────▶ in_flight ─────────────────────────▶ succeeded
//	   │                             │  ▲ │                              failed
//	   │                             │  │ │                              quarantined
//	   │ settle: stopped run,        │  └─┘ takeover of an expired lease,
//	   │ dead-lettered               │      or a scheduled retry (attempt + 1)
//	   ▼                             │
//	cancelled, failed                └─ never cancelled once started
//
// A new run (resume) makes failed and cancelled items (and released
// quarantined ones) pending again; succeeded items never run again.
//
// A batch's status:
//
//	Accept (S3 source) ──▶ submitting ──freeze (conditional)──▶ running ──▶ completed
//	                           │                                   ▲       threshold_exceeded
//	                           └──▶ refused (final)                │       cancelled
//	Submit (inline, upload, tick) ─────────────────────────────────┘  resume ◀─┘
//
// The invariants the package keeps, each proven by a test that can fail
// (see docs/design.md for the test names):
//
//   - One id, one plan: a submit with an existing id and another manifest
//     digest or other settings is refused (ErrBatchMismatch); the same one is
//     idempotent and never starts a run; a rerun is explicit (Resume).
//   - Reserve before run: a pipeline runs only under a reservation; a
//     succeeded item is recorded once and never runs again.
//   - Exact counts: the census is counted from the item rows; counters only
//     tell when to finalize and may lag or be lost.
//   - Every batch finishes: every item reaches a terminal outcome (poison
//     and dead-lettered ones included), and finalize writes the report
//     exactly once per run, however many times it is triggered.
//   - Threshold like Step Functions Distributed Map, over all items of the
//     run; once exceeded, items not yet started end cancelled.
//   - Nothing lost on bad input: an *InputError names the line, element,
//     key or field, and nothing is half-written; an accepted batch whose
//     background read fails for good is refused with that reason, never
//     dropped (the submit tick hands dead reads off again).
//   - The sweep deletes only the expired, oldest first, and all of it.
//   - AWS faults are not the item's: throttling and 5xx (ErrUnavailable)
//     never count an attempt, fail an item or bring its message toward the
//     dead-letter queue; only items never reserved in a run are settled for
//     a dead-lettered fan-out chunk; every valid manifest line travels
//     (SQSSafe); error texts are bounded (pipeline.CutText).
//
// API: the types the client and shared/wire return (SubmitRequest,
// Batch, Census, Report, Item, ItemPage, BatchPage, ResultLine, Outcome,
// Status, Threshold and their constants) are part of bulkrun's Go API
// (docs/packages.md); the engine (Store, Worker, Finalizer, Submitter,
// Control, Sweeper and the rules) is not.
package batch
