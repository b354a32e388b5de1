// Package finalize is the finalize engine: Finalizer.Finalize counts a
// finished run's census from its item rows (never from the counters), in
// bounded memory and checkpointed chunks, a run of 2·10^6 items or more
// in parallel parts (Finalizer.FinalizePart) merged at the end; it writes
// the results (one JSON Lines file per outcome, in key order, and a
// manifest.json shaped like Step Functions Distributed Map's
// ResultWriter), applies the threshold, writes the report once (S3
// If-None-Match), moves the batch to its final status once and announces
// it. Finalizer.Tick is the backstop: runs whose counters stood still,
// fan-outs that were lost, events not yet published.
//
// It declares the store methods it uses (Store) and imports no other
// engine and no AWS SDK.
package finalize
