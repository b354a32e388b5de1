// Package api holds the types of bulkrun's REST API and of everything a
// client reads: the submit request (SubmitRequest, SourceSpec, Threshold,
// RetryPolicy), the batch (Batch, Status, Pause, Revision, StopSummary),
// its items (Item, Outcome, Reason, ItemPage, ResultLine), the census and
// report (Census, Report, Verdict, Usage), listings (BatchPage,
// BatchSummary, LiveView), the errors a caller branches on (ErrNotFound,
// ErrBatchMismatch, *InputError, …) and where a batch's objects live in
// its bucket (ReportKey, ResultsKey, OutputsPrefix, …).
//
// It imports the standard library and shared/pipeline (whose Cost and
// CostSum the census and items carry) and nothing else, so that a client,
// the command line or a CDK app links none of the engine: the CLI, the Go
// client, shared/wire and the construct import it (make lint's depguard
// rule "api" keeps it so). JSON names are the API's (docs/openapi.yaml is
// the contract, shared/wire/testdata its golden answers).
//
// The engines store a batch and an item as rows that embed these types
// (ledger.Batch, ledger.Item) with bookkeeping of their own.
//
// This package is part of bulkrun's Go API: docs/packages.md says what
// that promises.
package api
