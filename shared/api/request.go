package api

import (
	"encoding/json"
)

// SubmitRequest is the body of POST /batches (JSON names as tagged).
type SubmitRequest struct {
	// BatchID is optional; a ULID is generated when empty. Give one to make
	// retries idempotent: the same id and manifest yield the same batch.
	BatchID string `json:"batch_id,omitempty"`
	// Pipeline names the registered pipeline to run per item. Required.
	Pipeline string `json:"pipeline"`
	// Source is where the items come from. Required.
	Source SourceSpec `json:"source"`
	// KeyField names the input field (JSON) or column (CSV) holding the item
	// key; empty means positional keys item-0000000000, item-0000000001, ...
	KeyField string `json:"key_field,omitempty"`
	// Threshold is the tolerated failures; unset tolerates any.
	Threshold Threshold `json:"threshold"`
	// StopOnThreshold, true when unset (the default, as Step Functions
	// Distributed Map does), stops the run as soon as the failures counted
	// so far exceed the threshold: items not yet started end cancelled.
	// false runs every item and judges the threshold once, at the end (the
	// status is threshold_exceeded all the same, with no item cancelled).
	StopOnThreshold *bool `json:"stop_on_threshold,omitempty"`
	// BudgetUSD is the most US dollars a run may spend before the batch
	// pauses (PauseByBudget): the pipeline's spend reported under the cost
	// name "usd" plus its DynamoDB request units' cost (spend.RunSpend), > 0
	// and ≤ MaxBudgetUSD (else 400 naming budget_usd); nil (the default)
	// is no budget. Raise it with POST /batches/{id}/budget.
	BudgetUSD *float64 `json:"budget_usd,omitempty"`
	// Ceilings are the per-item ceilings (see Ceilings): each > 0 (else
	// 400 naming ceilings.spend_usd or ceilings.tokens); nil (the
	// default) is none. Raise them with POST /batches/{id}/ceilings.
	Ceilings *Ceilings `json:"ceilings,omitempty"`
	// MaxAttempts per item, 1–100; 0 means the stack's default.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Retry spaces an item's attempts after transient errors (see
	// RetryPolicy); nil means the stack's default (Submitter.Retry).
	Retry *RetryPolicy `json:"retry,omitempty"`
	// MaxConcurrency is the most items of the batch running their pipeline
	// at once, across every invocation of the item function, 1–
	// MaxBatchConcurrency; 0 (the default) is unlimited. For receivers that
	// can take only so much: the run goes on MaxConcurrency tracks (at
	// most one per 100 items), each one queue message running its items
	// one after another (shared/pace); an item not yet started waits in
	// the manifest, at no cost and without using an attempt.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Rate paces the batch's calls in requests a second across every
	// invocation, shared with every batch naming the same key (see Rate,
	// docs/pipelines.md "Rates"): a unit waits for its lease before its
	// take, on the queue or in its track, using no attempt. nil (the
	// default) is unpaced.
	Rate *Rate `json:"rate,omitempty"`
	// Priority is the batch's weight in the items queue's fair share
	// while other batches' messages wait with it, 1–MaxPriority; 0 (the
	// default) is 1. A batch of priority p sends its messages in p
	// message groups (ledger.MessageGroup), and SQS fair queues share the
	// consumers between the groups that have messages waiting, so two
	// batches of priorities 3 and 1 running together get about 3/4 and
	// 1/4 of the calls (docs/adr/0037). It orders nothing: an idle queue
	// runs every batch at full speed. Part of the plan.
	Priority int `json:"priority,omitempty"`
	// Sample runs the first Sample items of the source first (rounded up
	// to whole messages: at most Sample + items_per_message − 1), then
	// holds the rest until a caller approves (POST /batches/{id}/approve)
	// or rejects (POST /batches/{id}/reject) the batch, with an estimate
	// of the whole run from the sample (Batch.Approval, SampleEstimate).
	// 1–MaxSample; 0 (the default) runs every item at once. With
	// max_concurrency the tracks stop before the first unit past the
	// sample until the approval. Part of the plan.
	Sample int `json:"sample,omitempty"`
	// AutoApproveUSD approves a sampled batch's rest without a caller when
	// the sample's estimate of the whole run's cost is at most it, in US
	// dollars (> 0 and ≤ MaxBudgetUSD); it needs a sample (else 400 naming
	// auto_approve_usd). nil (the default): a caller approves. Part of the
	// plan.
	AutoApproveUSD *float64 `json:"auto_approve_usd,omitempty"`
	// ItemsPerMessage (K) packs K consecutive manifest items into one
	// items-queue message and one ledger row, each item keeping its own
	// reservation, attempts, outcome, error, cost, listing and census;
	// 1–MaxItemsPerMessage, 0 (the default) means 1: one item per message
	// and per row. Part of the plan: a repeated submit with another K is
	// another plan (409), and every run of the batch keeps it. With
	// max_concurrency a pack takes one slot and runs its items one at a
	// time, so the limit still counts items.
	ItemsPerMessage int `json:"items_per_message,omitempty"`
	// Headers reach the pipeline; names starting with "bulkrun." are refused.
	Headers map[string]string `json:"headers,omitempty"`
	// Options is the pipeline's own JSON object (e.g. webhook's url).
	Options json.RawMessage `json:"pipeline_options,omitempty"`
	// OnInterrupt is the policy for an item whose attempt was interrupted
	// (lease expired, outcome unknown): "retry" (default) or "quarantine"
	// (for pipelines that are not idempotent).
	OnInterrupt InterruptPolicy `json:"on_interrupt,omitempty"`
	// Rerun asks for a new run when the batch exists with this manifest and
	// its run is finished (the same as POST /batches/{id}/resume), unless
	// every item of its last run succeeded: then none starts and the
	// batch is answered as it stands (where a resume is refused). Without
	// it a repeated submit never starts a run.
	Rerun bool `json:"rerun,omitempty"`
	// TaskToken is a Step Functions task token (a Task state's
	// $$.Task.Token, `.waitForTaskToken`), 1–MaxTaskTokenBytes bytes:
	// when the batch's first run ends, bulkrun answers it exactly once,
	// SendTaskSuccess with a TaskOutput (completed, threshold_exceeded) or
	// SendTaskFailure with a TaskError* name (cancelled, finalize_failed,
	// refused). Part of the plan: a repeated submit with another token is
	// another plan (409 batch_mismatch, the tokens not echoed). Not with
	// Rerun (400). Never shown by the API.
	TaskToken string `json:"task_token,omitempty"`
	// TaskHeartbeatSeconds, with TaskToken, asks for SendTaskHeartbeat
	// while the batch's first run goes (submitting, running, paused): for
	// a Task state with HeartbeatSeconds, this many seconds or fewer (0:
	// none). bulkrun sends one on every tick of the finalize schedule (5
	// minutes by default), so it takes MinTaskHeartbeatSeconds to
	// MaxTaskHeartbeatSeconds (400 otherwise). A task Step Functions no
	// longer waits on stops the heartbeats, never the run. Part of the
	// plan; never shown by the API.
	TaskHeartbeatSeconds int `json:"task_heartbeat_seconds,omitempty"`
	// Schema is a JSON Schema (draft 2020-12; at most 64 KiB; no remote
	// "$ref"; see shared/validate) that every item's input must satisfy,
	// checked while the source is read, before any item runs. It also
	// types a CSV source's columns: a top-level property of type integer,
	// number or boolean turns its cells into JSON numbers or booleans
	// (validate.Schema.Cell). Part of the plan (a repeated submit with
	// another is 409 naming schema). nil: no schema.
	Schema json.RawMessage `json:"schema,omitempty"`
	// BadRows says what becomes of rows that cannot run (api.Problem: a
	// format problem, one the schema refuses, a duplicate key), every one
	// found in one read (set, or with a Schema; "" without a Schema: the
	// first problem refuses the source, which large sources are read in
	// parts for): "refuse" (and "") refuses the batch listing them;
	// "fail" runs the others, each bad row an item that ends failed with
	// its problem without its pipeline being called, the later row of a
	// duplicate key dropped, unless bad rows pass MaxInvalidPercent. Part
	// of the plan.
	BadRows BadRows `json:"bad_rows,omitempty"`
	// MaxInvalidPercent is the share of bad rows, in percent of the rows
	// read (0 < p ≤ 100), past which a batch with bad_rows fail is refused
	// whole; nil means DefaultMaxInvalidPercent (10). Part of the plan.
	MaxInvalidPercent *float64 `json:"max_invalid_percent,omitempty"`
	// SubmittedBy is who asked for the batch, recorded on the batch row
	// (Batch.SubmittedBy): set by the entry point, never read from the
	// request body (an API caller's IAM identity, an upload's principal,
	// a schedule's name).
	SubmittedBy string `json:"-"`
}

// MaxBadRowsDropped bounds the duplicates a batch with bad_rows fail may
// drop: 100,000 rows, whose lines the second read of the source holds in
// memory to leave them out. More is refused whole.
const MaxBadRowsDropped = 100_000

// MaxHeaderBytes bounds the headers given at submit: they are stored on the
// batch row (DynamoDB items are at most 400 KB).
const MaxHeaderBytes = 16 << 10

// RegisterPipelineHint ends the unknown-pipeline error: where a pipeline
// has to be declared before submit accepts it. A Go pipeline is declared
// once, in the main of the binary deployed as the submit and item
// functions (its registry is what both run), and the stack names it.
const RegisterPipelineHint = "pass its registered.Declaration to function.Start (shared/function/function.go) in the binary the stack deploys as the submit and item functions, name it in RunnerProps.CustomPipelines (infra/bulkrun/runner.go), and redeploy; see docs/pipelines.md \"Write your own pipeline\""

// ReservedHeaderPrefix is refused in submitted header names.
const ReservedHeaderPrefix = "bulkrun."

// MaxBatchConcurrency is the largest max_concurrency a batch may ask.
const MaxBatchConcurrency = 1000

// MaxPriority is the largest priority a batch may ask: 10, ten message
// groups, enough for a tenfold share; more groups per batch would let
// one batch's groups crowd out the "quiet tenants" SQS fair queues
// exist to protect.
const MaxPriority = 10

// CorrectRequest is the body of POST /batches/{id}/corrections: corrected
// inputs for items of the batch, read as a submit's source is (JSON
// names as tagged).
type CorrectRequest struct {
	// Source holds the corrected items: inline items or an S3 object (any
	// format and encoding a submit reads; not a prefix), each with the key
	// of the item it corrects.
	Source SourceSpec `json:"source"`
	// KeyField names the field (JSON) or column (CSV) holding each
	// corrected item's key; default the batch's own key_field. A batch of
	// positional keys (item-0000000017) needs one naming where the key is.
	KeyField string `json:"key_field,omitempty"`
	// SubmittedBy is who asked (set by the entry point, as for a submit).
	SubmittedBy string `json:"-"`
}

// Correction bounds: the corrected items are held in the submit
// function's memory while the batch's manifest is rewritten with them.
const (
	MaxCorrectionItems = 100_000
	MaxCorrectionBytes = 64 << 20 // of corrected inputs
)
