// Package wire holds the JSON shapes of bulkrun's REST API that the server
// (shared/function), the Go client (shared/client) and the CLI share: the
// error body, the batch view, and the escaping of item paths. It imports the
// standard library and the API types (shared/api, whose request, batch,
// census, report and item types are part of the wire format) and nothing
// else, so a client built on it links no server code and no AWS SDK
// service client (checked by .golangci.yml's import rules, wire-stdlib
// among them, and TestContractCLILinksNoServer in cmd/bulkrun).
//
// The shapes, by route (docs/openapi.yaml is the contract, checked against
// the handlers by TestContractOpenAPI in shared/function; testdata holds a
// golden example of each):
//
//	POST   /batches                          body api.SubmitRequest; answer BatchView
//	GET    /batches                          answer api.BatchPage
//	GET    /batches/{id}                     answer BatchView
//	GET    /batches/{id}/report              answer api.Report; a large one 303 ReportLink
//	GET    /batches/{id}/items               answer api.ItemPage
//	POST   /batches/{id}/resume, /cancel     answer BatchView
//	POST   /batches/{id}/items/{key}/release no body (204), path from ItemPath
//	POST   /batches/{id}/halts/lift          body LiftRequest; answer api.LiftResult
//	POST   /batches/{id}/items/{key}/signal  body SignalRequest; answer api.SignalResult
//	DELETE /batches/{id}                     no body (204)
//
// Every error answer is an ErrorBody.
//
// This package is part of bulkrun's Go API: docs/packages.md says what
// that promises.
package wire

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Error codes of ErrorBody.Code, with the HTTP status the API answers them
// with. A client branches on the code, never on the message.
const (
	CodeInvalidRequest      = "invalid_request"      // 400 (413 for a body over the size limit): the request names its bad field, line, element or key
	CodeEmptySource         = "empty_source"         // 400: the source holds no items; nothing was created
	CodeNotFound            = "not_found"            // 404: no such batch, report or route
	CodeExpired             = "expired"              // 404: the batch's retention has ended; a submit may reuse its id
	CodeBatchMismatch       = "batch_mismatch"       // 409: the batch id exists with another request
	CodeConflict            = "conflict"             // 409: a run is going (resume, forget) or not (cancel)
	CodeInsufficientStorage = "insufficient_storage" // 507: the source is too large for the submit function's disk; not retryable
	CodeInternal            = "internal"             // 500 retryable; 409 for a refused batch submitted again
)

// Codes returns every error code, in the order of the constants above. The
// slice is new on every call.
func Codes() []string {
	return []string{CodeInvalidRequest, CodeEmptySource, CodeNotFound, CodeExpired, CodeBatchMismatch,
		CodeConflict, CodeInsufficientStorage, CodeInternal}
}

// ErrorBody is the JSON of every error answer:
// {"code", "message", "field", "line", "element", "key"}; code is one of
// Codes(), message is for people, and field (a JSON field, query parameter
// or "path"/"body"), line (1-based line of a manifest), element (1-based
// element of a JSON array) and key (an item key) are set when they locate
// the fault.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Line    int64  `json:"line,omitempty"`
	Element int64  `json:"element,omitempty"`
	Key     string `json:"key,omitempty"`
}

// Census sources of BatchView.CensusSource.
const (
	CensusFromItems    = "items"    // counted from the item rows (no longer answered by GET: a running batch shows its counters)
	CensusFromReport   = "report"   // the finished run's census
	CensusFromCounters = "counters" // a running batch: Progress, Live and a census by outcome from its counters (in_flight: sent and not ended; pending: not fanned out), O(counter shards) reads
)

// BatchView is the JSON of a batch in API answers: the batch row's fields
// (api.Batch, redacted) plus its census (census_source, one of the
// CensusFrom* values, says whether it was counted from the item rows, read
// from the finished run, or, for a large running batch, is only the
// counters' progress), the report's location ("s3://bucket/key") when
// finished, and, in a submit's answer only, whether this call created the
// batch.
type BatchView struct {
	api.Batch
	Census       *api.Census `json:"census,omitempty"`
	CensusSource string      `json:"census_source,omitempty"` // items | report | counters
	Progress     *Progress   `json:"progress,omitempty"`
	// Live is a running batch's live view (api.LiveView): items in flight,
	// waiting for a retry (and when the next is due), interrupted, not yet
	// fanned out, and why it needs attention now.
	Live *api.LiveView `json:"live,omitempty"`
	// Paused is what the run's pauses took: so far while it runs (a
	// pause standing now counted to now), in all once it finished (a
	// pause standing then counted to the run's end, as the report's
	// api.Report.Paused); absent when it has not paused.
	Paused  *api.PausedSummary `json:"paused,omitempty"`
	Report  string             `json:"report,omitempty"`
	Created *bool              `json:"created,omitempty"`
	// Warnings, in a submit's answer, say what in the request will likely
	// go wrong though it was accepted (submit.Submitter.Warnings).
	Warnings []string `json:"warnings,omitempty"`
}

// ReportLink is the answer of GET /batches/{id}/report for a report too
// large to be answered whole within Lambda's 6 MB response (over
// handler.ReportInlineBytes, 2 MiB): status 303 See Other, its Location
// header the same URL, and this body, {"report_url", "bytes",
// "expires_at"}: URL reads report.json as stored with a plain,
// unsigned GET (an S3 presigned URL) until ExpiresAt (RFC 3339, UTC;
// sooner when the credentials that signed it end), Bytes is its size.
// shared/client's Report follows it.
type ReportLink struct {
	URL       string    `json:"report_url"`
	Bytes     int64     `json:"bytes"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CorrectionView is the answer of POST /batches/{id}/corrections: the
// batch (as GET /batches/{id} answers it, with created: false when the
// same corrections were given before, their revision answering and no run
// started) and the corrections' revision.
type CorrectionView struct {
	Batch    BatchView    `json:"batch"`
	Revision api.Revision `json:"revision"`
}

// LiftRequest is the body of POST /batches/{id}/halts/lift:
// {"subject": "secret:arn:…"}, the halt's subject as Batch.Halts and the
// withheld items' holds show it.
type LiftRequest struct {
	Subject string `json:"subject"`
}

// SignalRequest is the body of POST /batches/{id}/items/{key}/signal:
// {"payload": {…}, "token": "…"}, both optional. Payload is any JSON
// value of at most api.MaxSignalPayloadBytes, handed to the item's next
// attempt (pipeline.Request.Signal); token, when given, must be the one
// the item's suspension returned.
type SignalRequest struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	Token   string          `json:"token,omitempty"`
	// ID names this signal (1–64 of A–Z a–z 0–9 - _; held.CheckSignalID):
	// sent again with the same ID — a client's retry after a lost answer
	// — it is answered as already delivered, even when the item has run
	// and been suspended again since. The Go and Python clients set one
	// per call.
	ID string `json:"signal_id,omitempty"`
}

// Progress is a large running batch's counters: items done (in any final
// outcome) and, among them, failures (failed or quarantined), this run.
type Progress struct {
	Done     int64 `json:"done"`
	Failures int64 `json:"failures"`
}

// ItemPath is the API path of an item route, "/batches/{id}/items/{key}/" +
// action (e.g. "release"), with id and key each escaped as one path segment
// (url.PathEscape): "/" is sent as %2F, "%" as %25, a space as %20, other
// bytes outside the unreserved set by their UTF-8 bytes; "+" stays literal
// (a path gives it no meaning). A key "." or ".." is sent as %2E or %2E%2E
// so that no client or proxy removes it as a dot segment. The API decodes
// the path exactly once, so every key comes back as it was, "%2F"
// literally in a key included (sent as %252F). shared/client, and so the
// CLI, build every item path with it.
func ItemPath(id, key, action string) string {
	k := url.PathEscape(key)
	if key == "." || key == ".." {
		k = strings.Repeat("%2E", len(key))
	}
	return "/batches/" + url.PathEscape(id) + "/items/" + k + "/" + action
}

// Object metadata an upload under incoming/ may carry (x-amz-meta-<name>,
// any case, '_' for '-'): the upload's submit options (docs/sources.md,
// "Upload instead"). The submit function reads them; `bulkrun upload` sets
// them.
const (
	MetaBatchID         = "batch-id"
	MetaPipeline        = "pipeline"
	MetaKeyField        = "key-field"
	MetaFormat          = "format"
	MetaFailurePercent  = "tolerated-failure-percent"
	MetaFailureCount    = "tolerated-failure-count"
	MetaMaxAttempts     = "max-attempts"
	MetaRetry           = "retry" // a retry policy: api.ParseRetryPolicy's name=value pairs or JSON
	MetaPipelineOptions = "pipeline-options"
	MetaCSVDelimiter    = "csv-delimiter"     // as csv_delimiter: one character, or comma, semicolon, tab, pipe
	MetaRate            = "rate"              // as rate: api.ParseRate's requests a second, then optionally @key (50@api.example.com)
	MetaPriority        = "priority"          // as priority: 1–10, the batch's weight in the queue's fair share
	MetaStopOnThreshold = "stop-on-threshold" // "false" runs every item and judges the threshold at the end
	MetaBudgetUSD       = "budget-usd"        // as budget_usd: US dollars, > 0 (25, 12.5)
	MetaSample          = "sample"            // as sample: 1–100,000 items run first, the rest after an approval
	MetaAutoApproveUSD  = "auto-approve-usd"  // as auto_approve_usd: US dollars, > 0; needs sample
	MetaCeilingSpendUSD = "ceiling-spend-usd" // as ceilings.spend_usd: US dollars per item, > 0 (0.5)
	MetaCeilingTokens   = "ceiling-tokens"    // as ceilings.tokens: tokens per item, > 0 (20000)
	// MetaRerun "true" runs the upload's items even though the same items
	// started a batch from another object within the stack's window, and
	// starts a new run of a finished batch of the same object and items.
	MetaRerun = "rerun"
	// MetaCorrects names a finished batch: the upload is corrected inputs
	// for its failed, quarantined or cancelled items (POST
	// /batches/{id}/corrections), read with key-field, format and
	// csv-delimiter; no other option applies.
	MetaCorrects = "corrects"
)
