// Package ledger is the core the four engines share: the rows of a batch
// and its items (Batch, Item: the api types plus bookkeeping), the rules
// of a unit's attempt (Plan, Start, Settled, Conclude: the one decision
// chain whatever the items per message), the keys and shards that keep
// every DynamoDB partition under 1,000 writes/s (RunID, Shard,
// ListShards, CounterShards, CounterLanes), the formats that outlive a
// deploy (Message, PackMessage, Pack, FormatVersion), the store's
// parameter and result types and the ports the adapters implement (Blobs,
// Queue, Trigger, Events, Clock), and the commands two engines share
// (StopRun, Forget; reading a batch's item shards in key order is its
// room shared/ledger/shardmerge).
//
// It imports no AWS type and no engine. Each engine (shared/submit,
// shared/worker, shared/finalize, shared/control) declares the store
// methods it uses; internal/dynamo implements all of them, and the
// conformance suite (integration/testbed/ledgertest) holds it and the
// in-memory store to the same contract.
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
//	cancelled, failed                ├─ cancelled before its call (a stop)
//	                                 └─ never cancelled once called
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
// (docs/design.md, "Invariants and the tests that prove them", names the
// tests):
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
// The ledger and the engines are not bulkrun's Go API (docs/packages.md):
// they may change in any commit; shared/api is what a client reads.
package ledger
