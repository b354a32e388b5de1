// Package handler holds bulkrun's Lambda adapters: each decodes its
// function's events, calls an engine and encodes the answer. Router
// dispatches a function's raw events by their kind (Submit.Router: API
// requests, uploads under incoming/, schedules, the submit function's own
// background reads and parts, the submit tick; Item.Router: SQS batches;
// Finalize.Router: triggers, chains, parts and the tick; Sweep: the
// schedule); API serves the REST API behind API Gateway; Logger builds
// the functions' JSON logger, whose records carry the invocation's
// request id from the context they are logged with.
//
// shared/function wires these to the engines and starts them; the loops
// (the sweep's passes, finalize's waits and chains) are the engines'.
package handler
