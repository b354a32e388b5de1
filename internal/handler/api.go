package handler

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/live"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
	"github.com/bulkrun/bulkrun/shared/submit"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// MaxRequestBytes bounds a request body ServeHTTP reads, in bytes: 6 MB
// (6,291,456 bytes), wire.MaxEventBytes. A larger body is answered 413
// naming the limit. Through API Gateway (Serve) the bound is the Lambda
// event's, which holds the body and more: see Serve.
const MaxRequestBytes = wire.MaxEventBytes

// ReportInlineBytes is the largest report GET /batches/{id}/report
// answers in its body: 2 MiB (2,097,152 bytes). The function returns the
// body as a JSON string, which escapes each quote and backslash of the
// report's JSON again, so a report of at most this size stays within the
// 6 MB of a synchronous Lambda response ("Lambda quotas", "Invocation
// payload (request and response)"), past which API Gateway answers 502. A
// larger report (thousands of cost names) is answered 303 See Other with
// a wire.ReportLink: a presigned URL to the object, good for
// ReportLinkTTL.
const ReportInlineBytes = 2 << 20

// ReportLinkTTL is how long the URL of a report answered as a link reads
// it: 15 minutes (less if the function's session credentials, which sign
// it, end first).
const ReportLinkTTL = 15 * time.Minute

// Presigner makes a URL that reads key of the batches bucket with a plain
// GET for ttl (internal/blob's Store, an S3 presigned URL).
type Presigner interface {
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
}

// API serves the REST API (http.Handler), on API Gateway through Serve:
//
//	POST   /batches                          submit (202 accepted, read in the background; 201 created, 200 identical batch exists)
//	GET    /batches?status=&since=&limit=&cursor=   batches newest first (api.BatchPage)
//	GET    /batches/{id}                     status and census
//	GET    /batches/{id}/report              the last finished run's report (303 and a link when over ReportInlineBytes)
//	GET    /batches/{id}/items?outcome=failed|quarantined|withheld|exhausted|suspended|in_flight|needs_attention&limit=&cursor=
//	GET    /batches/{id}/results/partial?limit=&cursor=   the results lines recorded so far in the current run (api.ResultPage)
//	GET    /batches/{id}/inputs?outcome=failed|quarantined&limit=&cursor=   the items' inputs in the source's format (api.InputPage: CSV or JSON Lines)
//	POST   /batches/{id}/resume              new run of a finished batch (202)
//	POST   /batches/{id}/cancel              stop the current run (202)
//	POST   /batches/{id}/pause               pause the current run: no item starts (202)
//	POST   /batches/{id}/unpause             end the run's pause (202)
//	POST   /batches/{id}/approve             approve a sampled batch: the rest of its items run (202)
//	POST   /batches/{id}/reject              reject a sampled batch: its run is cancelled (202)
//	POST   /batches/{id}/budget              set the batch's budget in US dollars; a raise ends a budget pause (202)
//	POST   /batches/{id}/ceilings            set per-item ceilings; wake the exhausted items now under them (200)
//	POST   /batches/{id}/corrections         corrected inputs: a revision and its run (202; 200 the same corrections again)
//	POST   /batches/{id}/halts/lift          lift a halt and wake the items withheld under it (200)
//	POST   /batches/{id}/items/{key}/release release a quarantined item (204)
//	POST   /batches/{id}/items/{key}/signal  resume a suspended item, its payload to the next attempt (200)
//	DELETE /batches/{id}                     forget the batch and all it owns (204)
//
// POST /batches answers 202 with status submitting when the source (an S3
// object or prefix) is read in the background, 201/200 when an inline
// source was read in the call.
//
// Routes match the decoded path (r.URL.Path): an item key is everything
// between "/items/" and the last "/release", so it may hold "/" (sent as
// %2F, see [ItemPath]) and any other character. A path that matches no
// route, or a route with another method, is 404 not_found.
//
// Errors are JSON {"code", "message", "field", "line", "element", "key"}:
// invalid_request 400, empty_source 400 (the source holds no items;
// nothing was created), not_found 404, expired 404 (the batch's retention
// has ended: it is gone, whether or not the sweep has deleted it yet, and
// a submit may reuse its id), batch_mismatch 409, conflict 409 (a run is
// going, or not), internal 409 (a refused batch submitted again),
// insufficient_storage 507 (the source is too large for the submit
// function's temporary disk: not retryable), internal 500 (retryable).
type API struct {
	Submitter *submit.Submitter
	Control   *control.Control
	Store     ledger.Store
	Blobs     ledger.Blobs
	Log       *slog.Logger
	// Presign makes the link of a report over ReportInlineBytes; nil
	// answers every report whole (a handler outside Lambda, which has no
	// response limit).
	Presign Presigner
}

// NewAPI wires the routes; blobs that are a Presigner (internal/blob's
// Store) make the links of large reports.
func NewAPI(s *submit.Submitter, store ledger.Store, blobs ledger.Blobs, log *slog.Logger) *API {
	c := &control.Control{Store: store, Blobs: blobs, Log: log, Clock: ledger.SystemClock{}}
	if s != nil && s.Queue != nil {
		// The wakes of held items send their saved messages again.
		c.Wake = &held.Waker{Store: store, Blobs: blobs, Queue: s.Queue, Clock: ledger.SystemClock{}, Log: log}
	}
	a := &API{Submitter: s, Control: c, Store: store, Blobs: blobs, Log: log}
	if p, ok := blobs.(Presigner); ok {
		a.Presign = p
	}
	return a
}

// ItemPath is wire.ItemPath: the API path of an item route, with id and
// key each escaped as one path segment.
func ItemPath(id, key, action string) string { return wire.ItemPath(id, key, action) }

// ServeHTTP routes a request on its decoded path, r.URL.Path (see the
// route table on [API]).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := a.route(r)
	if h == nil {
		writeError(w, http.StatusNotFound, ErrorBody{Code: "not_found", Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
		return
	}
	h(w, r)
}

// route returns the handler of r, with its path values ("id", "key") set,
// or nil when no route matches r's method and decoded path.
func (a *API) route(r *http.Request) http.HandlerFunc {
	rest, ok := strings.CutPrefix(r.URL.Path, "/"+config.APIBatchesResource)
	if !ok {
		return nil
	}
	if rest == "" {
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.submit, http.MethodGet: a.list})
	}
	rest, ok = strings.CutPrefix(rest, "/")
	if !ok || rest == "" {
		return nil
	}
	id, tail, sub := strings.Cut(rest, "/")
	r.SetPathValue("id", id)
	if !sub {
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodGet: a.status, http.MethodDelete: a.forget})
	}
	switch tail {
	case "report":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodGet: a.report})
	case "items":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodGet: a.items})
	case "results/partial":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodGet: a.partialResults})
	case "inputs":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodGet: a.inputs})
	case "resume":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.resume})
	case "cancel":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.cancel})
	case "pause":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.control(a.Control.Pause)})
	case "unpause":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.control(a.Control.Unpause)})
	case "approve":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.control(a.Control.Approve)})
	case "reject":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.control(a.Control.Reject)})
	case "budget":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.budget})
	case "ceilings":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.ceilings})
	case "corrections":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.correct})
	case "halts/lift":
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.lift})
	}
	key, ok := strings.CutPrefix(tail, "items/")
	if !ok {
		return nil
	}
	if k, ok := strings.CutSuffix(key, "/signal"); ok && k != "" {
		r.SetPathValue("key", k)
		return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.signal})
	}
	if key, ok = strings.CutSuffix(key, "/release"); !ok || key == "" {
		return nil
	}
	r.SetPathValue("key", key)
	return pick(r.Method, map[string]http.HandlerFunc{http.MethodPost: a.release})
}

func pick(method string, by map[string]http.HandlerFunc) http.HandlerFunc { return by[method] }

// ErrorBody is the JSON of every error answer (see wire.ErrorBody).
type ErrorBody = wire.ErrorBody

// BatchView is the JSON of a batch in API answers (see wire.BatchView).
type BatchView = wire.BatchView

// Progress is a large running batch's counters (see wire.Progress).
type Progress = wire.Progress

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, e ErrorBody) { writeJSON(w, status, e) }

// ErrorOf maps a domain error to its HTTP status and JSON body.
func ErrorOf(err error) (int, ErrorBody) {
	var ie *api.InputError
	var me *api.MismatchError
	var re *api.BatchRefusedError
	var rue *api.RepeatedUploadError
	switch {
	case errors.As(err, &rue):
		// An upload only: the items another upload started within the window.
		return http.StatusConflict, ErrorBody{Code: api.RefusalRepeatedUpload, Message: err.Error(), Field: "x-amz-meta-rerun"}
	case errors.Is(err, api.ErrEmptySource) && errors.As(err, &ie):
		return http.StatusBadRequest, ErrorBody{Code: "empty_source", Message: err.Error(), Field: ie.Field}
	case errors.As(err, &ie):
		return http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: err.Error(), Field: ie.Field, Line: ie.Line, Element: ie.Element, Key: ie.Key}
	case errors.As(err, &me):
		return http.StatusConflict, ErrorBody{Code: "batch_mismatch", Message: err.Error(), Field: me.Field}
	case errors.As(err, &re):
		r := re.Refusal
		status := http.StatusConflict // refused for good: the same request cannot succeed
		switch r.Code {
		case api.RefusalInvalid, api.RefusalEmptySource:
			status = http.StatusBadRequest
		case api.RefusalInsufficientStorage:
			status = http.StatusInsufficientStorage
		}
		return status, ErrorBody{Code: r.Code, Message: err.Error(), Field: r.Field, Line: r.Line, Element: r.Element, Key: r.Key}
	case errors.Is(err, api.ErrInsufficientStorage):
		return http.StatusInsufficientStorage, ErrorBody{Code: api.RefusalInsufficientStorage, Message: err.Error()}
	case errors.Is(err, api.ErrExpired):
		return http.StatusNotFound, ErrorBody{Code: "expired", Message: err.Error()}
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound, ErrorBody{Code: "not_found", Message: err.Error()}
	case errors.Is(err, api.ErrConflict):
		return http.StatusConflict, ErrorBody{Code: "conflict", Message: err.Error()}
	}
	return http.StatusInternalServerError, ErrorBody{Code: "internal", Message: "internal error; the request can be retried"}
}

// errorAnswer writes the answer of a domain error (logging internal ones).
func (a *API) errorAnswer(w http.ResponseWriter, r *http.Request, err error) {
	status, body := ErrorOf(err)
	if status == http.StatusInternalServerError {
		a.Log.ErrorContext(r.Context(), "request failed", "error", err.Error())
	}
	writeError(w, status, body)
}

// readBody decodes the request's JSON body into v (no unknown field, no
// content after it, at most MaxRequestBytes), answering the error itself
// when it cannot and returning false.
func (a *API) readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err != nil {
		a.errorAnswer(w, r, err)
		return false
	}
	if len(body) > MaxRequestBytes {
		writeError(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: "invalid_request", Field: "body",
			Message: fmt.Sprintf("body over %d bytes (Lambda's 6 MB invocation payload limit): put the items in S3 and name the object (source.object)", MaxRequestBytes)})
		return false
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: "request body: " + err.Error(), Field: jsonField(err)})
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: "request body: content after the JSON object"})
		return false
	}
	return true
}

// correct is POST /batches/{id}/corrections (submit.Submitter.Correct): 202
// with the batch at its correction run and the revision; 200 when the same
// corrections were given before (no new run).
func (a *API) correct(w http.ResponseWriter, r *http.Request) {
	var req api.CorrectRequest
	if !a.readBody(w, r, &req) {
		return
	}
	req.SubmittedBy = CallerOf(r.Context())
	res, err := a.Submitter.Correct(r.Context(), r.PathValue("id"), req)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusAccepted
	}
	writeJSON(w, status, wire.CorrectionView{Batch: BatchView{Batch: secretref.Redacted(res.Batch.Batch), Created: &res.Created}, Revision: res.Revision})
}

// lift serves POST /batches/{id}/halts/lift, body wire.LiftRequest:
// 200 with an api.LiftResult (done false: call again to wake the rest).
// budget sets the batch's budget (api.BudgetRequest; Control.SetBudget)
// and answers the batch view, 202 as pause and unpause: a budget pause
// the raise ended lets items start at its next check.
func (a *API) budget(w http.ResponseWriter, r *http.Request) {
	var req api.BudgetRequest
	if !a.readBody(w, r, &req) {
		return
	}
	if req.BudgetUSD == nil {
		a.errorAnswer(w, r, &api.InputError{Field: "budget_usd", Reason: "required: the budget in US dollars, > 0"})
		return
	}
	usd := *req.BudgetUSD
	a.control(func(ctx context.Context, id string) (ledger.Batch, error) { return a.Control.SetBudget(ctx, id, usd) })(w, r)
}

// ceilings serves POST /batches/{id}/ceilings, body api.Ceilings (the
// ceilings to set; Control.SetCeilings): 200 with an api.CeilingsResult
// (done false: call again to wake the rest).
func (a *API) ceilings(w http.ResponseWriter, r *http.Request) {
	var req api.Ceilings
	if !a.readBody(w, r, &req) {
		return
	}
	res, err := a.Control.SetCeilings(r.Context(), r.PathValue("id"), req)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (a *API) lift(w http.ResponseWriter, r *http.Request) {
	var req wire.LiftRequest
	if !a.readBody(w, r, &req) {
		return
	}
	res, err := a.Control.Lift(r.Context(), r.PathValue("id"), req.Subject)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// signal serves POST /batches/{id}/items/{key}/signal, body
// wire.SignalRequest (optional: an empty body signals without a
// payload): 200 with an api.SignalResult.
func (a *API) signal(w http.ResponseWriter, r *http.Request) {
	var req wire.SignalRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if len(bytes.TrimSpace(body)) > 0 && !a.readBody(w, r, &req) {
		return
	}
	res, err := a.Control.Signal(r.Context(), r.PathValue("id"), r.PathValue("key"), req.ID, req.Token, req.Payload)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (a *API) submit(w http.ResponseWriter, r *http.Request) {
	var req api.SubmitRequest
	if !a.readBody(w, r, &req) {
		return
	}
	req.SubmittedBy = CallerOf(r.Context())
	// The caller's traceparent (and tracestate) header, when it sent one,
	// is the parent of the submit's span, which the batch stores.
	res, err := a.Submitter.Accept(tracing.Extract(r.Context(), r.Header), req)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	req.BatchID = res.Batch.ID // (the submit names a batch the request left unnamed)
	view := BatchView{Batch: secretref.Redacted(res.Batch.Batch), Created: &res.Created, Warnings: a.Submitter.Warnings(r.Context(), req)}
	status := http.StatusOK
	switch {
	case res.Batch.Status == api.StatusSubmitting:
		status = http.StatusAccepted
	case res.Created:
		status = http.StatusCreated
	}
	writeJSON(w, status, view)
}

// jsonField names the field of a JSON decoding error, when it tells.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	if m := err.Error(); strings.HasPrefix(m, "json: unknown field ") {
		return strings.Trim(strings.TrimPrefix(m, "json: unknown field "), `"`)
	}
	return ""
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !api.ValidBatchID(id) {
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: "batch id is not 1–128 bytes of [A-Za-z0-9_-]", Field: "id"})
		return
	}
	view, err := a.View(r.Context(), id)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// View reads a batch and its census; an expired batch is ErrExpired.
func (a *API) View(ctx context.Context, id string) (BatchView, error) {
	b, err := a.Control.Get(ctx, id)
	if err != nil {
		return BatchView{}, err
	}
	return a.viewOf(ctx, b)
}

// viewOf is the view of the batch row b with its census: the report's once
// finished, the run's counters while it runs.
func (a *API) viewOf(ctx context.Context, b ledger.Batch) (BatchView, error) {
	v := BatchView{Batch: secretref.Redacted(b.Batch)}
	if b.Pause != nil {
		v.Pause = b.Pause.View(time.Now().UTC())
	}
	switch {
	case b.Status == api.StatusSubmitting || b.Status == api.StatusRefused:
		// No manifest yet, or never: nothing to count.
	case b.Status.Finished() && b.FinalCensus != nil:
		v.Census, v.CensusSource = b.FinalCensus, wire.CensusFromReport
		v.Report = "s3://" + a.Blobs.Bucket() + "/" + b.ReportKey
		v.NeedsAttention = v.NeedsAttention || b.KeepsHalts()
		v.Paused = b.PausedSummary(b.FinishedAt)
	default:
		// A running batch: its chunk counters, O(counter shards) reads
		// whatever its size; the exact census comes with the report.
		p, err := a.Store.Progress(ctx, b.ID, b.Run, max(1, b.CounterShards))
		if err != nil {
			return BatchView{}, err
		}
		v.Progress, v.CensusSource = &Progress{Done: p.Done, Failures: p.Failures}, wire.CensusFromCounters
		now := a.Control.Clock.Now()
		lv := live.Of(b, p, now, a.Control.ItemTimeout)
		a.samplePace(ctx, b, p, now)
		lv.AdaptivePace = a.Control.AdaptivePace(ctx, b, now)
		lv.Booked(a.Control.RateBooked(ctx, b, now))
		lv.RateConflict = a.Control.RateConflict(ctx, b)
		c := CounterCensus(b, p, lv)
		v.Census, v.Live, v.Paused = &c, &lv, b.PausedSummary(now)
		v.NeedsAttention = v.NeedsAttention || lv.NeedsAttention()
	}
	return v, nil
}

// CounterCensus is a running batch's census as its counters tell it:
// terminal items by outcome as counted so far, their cost and what this
// run spent on them, in flight the items fanned out and not ended
// (queued, running or waiting for a retry: live.InFlight +
// live.RetryWaiting), withheld those held under a halt (live.Withheld),
// exhausted those held at a per-item ceiling (live.Exhausted),
// suspended those a pipeline suspended (live.Suspended),
// pending the items not fanned out yet, those a sampled run holds for
// its approval (live.HeldForApproval) and those waiting for a track of
// a run with max_concurrency (live.AwaitingTrack).
// A correction run's counters count its own items; the batch's other
// items are added with what they kept (api.Revision.Kept), each counted
// once. Counters may lag the rows; the report's census is exact.
func CounterCensus(b ledger.Batch, p ledger.Progress, live api.LiveView) api.Census {
	c := api.Census{Total: b.ItemCount, Cost: p.Cost, RunSpent: p.Spent}
	if c.Cost == nil {
		c.Cost = pipeline.CostSum{}
	}
	if c.RunSpent == nil {
		c.RunSpent = pipeline.CostSum{}
	}
	c.Succeeded = p.ByOutcome[api.OutcomeSucceeded]
	c.Failed = p.ByOutcome[api.OutcomeFailed]
	c.Quarantined = p.ByOutcome[api.OutcomeQuarantined]
	c.Cancelled = p.ByOutcome[api.OutcomeCancelled]
	if r, ok := b.Revision(b.RunRevision); ok && r.Kept != nil {
		// A correction run counts its own items; the others keep theirs.
		c.Succeeded += r.Kept.Succeeded
		c.Failed += r.Kept.Failed
		c.Quarantined += r.Kept.Quarantined
		c.Cancelled += r.Kept.Cancelled
	}
	left := max(0, b.ItemCount-c.Succeeded-c.Failed-c.Quarantined-c.Cancelled)
	c.Withheld = min(left, live.Withheld)
	c.Exhausted = min(left-c.Withheld, live.Exhausted)
	c.Suspended = min(left-c.Withheld-c.Exhausted, live.Suspended)
	c.InFlight = min(left-c.Held(), live.InFlight+live.RetryWaiting)
	c.Pending = left - c.Held() - c.InFlight
	return c
}

func (a *API) report(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	b, err := a.Control.Get(r.Context(), id)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	key := b.ReportKey
	if key == "" {
		msg := fmt.Sprintf("batch %s has no report yet (status %s)", id, b.Status)
		if b.Status == api.StatusRunning {
			msg = fmt.Sprintf("batch %s has no report yet: run %d is running, and its report is written when it ends; the results it recorded so far are at GET /batches/%s/results/partial (bulkrun results %s --partial)", id, b.Run, id, id)
		}
		writeError(w, http.StatusNotFound, ErrorBody{Code: "not_found", Message: msg})
		return
	}
	if a.Presign != nil {
		info, err := a.Blobs.HeadSource(r.Context(), a.Blobs.Bucket(), key)
		if err != nil {
			a.errorAnswer(w, r, err)
			return
		}
		if info.Size > ReportInlineBytes {
			u, err := a.Presign.PresignGet(r.Context(), key, ReportLinkTTL)
			if err != nil {
				a.errorAnswer(w, r, err)
				return
			}
			w.Header().Set("Location", u)
			writeJSON(w, http.StatusSeeOther, wire.ReportLink{URL: u, Bytes: info.Size, ExpiresAt: time.Now().UTC().Add(ReportLinkTTL).Truncate(time.Second)})
			return
		}
	}
	body, err := a.Blobs.Get(r.Context(), key)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// Serve answers one API Gateway (REST, proxy integration) request. Header
// names are matched case-insensitively (API Gateway may lower-case them).
// The route is matched on [EventPath], the request's path decoded once.
//
// An event over wire.MaxEventBytes, Lambda's invocation payload limit, is
// answered 413 invalid_request naming field body and the limit, whatever
// its route: on AWS such a request never reaches the function (Lambda
// refuses the invocation and API Gateway answers 413 {"message": "Request
// Too Long"}), so one that does (an emulator) is refused as it would be.
func (a *API) Serve(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	if n := EventBytes(ev); n > wire.MaxEventBytes {
		b, _ := json.Marshal(ErrorBody{Code: wire.CodeInvalidRequest, Field: "body", Message: fmt.Sprintf(
			"the request's Lambda event is %d bytes, over Lambda's 6 MB invocation payload limit (%d bytes: the body, JSON-escaped or base64, the headers and the request context; on AWS the function never runs and API Gateway answers 413 Request Too Long): put the items in S3 and name the object (source.object)",
			n, wire.MaxEventBytes)})
		return events.APIGatewayProxyResponse{StatusCode: http.StatusRequestEntityTooLarge, Headers: map[string]string{"Content-Type": "application/json"}, Body: string(b)}, nil
	}
	body := ev.Body
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return events.APIGatewayProxyResponse{StatusCode: 400, Body: `{"code":"invalid_request","message":"body is not valid base64"}`}, nil
		}
		body = string(b)
	}
	path, err := EventPath(ev)
	if err != nil {
		status, body := http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: err.Error(), Field: "path"}
		b, _ := json.Marshal(body)
		return events.APIGatewayProxyResponse{StatusCode: status, Headers: map[string]string{"Content-Type": "application/json"}, Body: string(b)}, nil
	}
	u := &url.URL{Path: path}
	q := url.Values{}
	for k, vs := range ev.MultiValueQueryStringParameters {
		q[k] = vs
	}
	for k, v := range ev.QueryStringParameters {
		if _, ok := q[k]; !ok {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(WithCaller(ctx, EventCaller(ev)), ev.HTTPMethod, "/", strings.NewReader(body))
	if err != nil {
		return events.APIGatewayProxyResponse{StatusCode: 400, Body: `{"code":"invalid_request","message":"bad request line"}`}, nil
	}
	req.URL = u // set, not parsed: the decoded path may hold "?", "#" or "%"
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	rec := &recorder{header: http.Header{}}
	a.ServeHTTP(rec, req)
	headers := map[string]string{}
	for k := range rec.header {
		headers[k] = rec.header.Get(k)
	}
	return events.APIGatewayProxyResponse{StatusCode: rec.status(), Headers: headers, Body: rec.body.String()}, nil
}

// EventBytes is the size of ev as Lambda measures the invocation's
// payload: its JSON, the body counted as wire.BodyEventBytes counts it.
func EventBytes(ev events.APIGatewayProxyRequest) int {
	body := ev.Body
	ev.Body = ""
	rest, err := json.Marshal(ev)
	if err != nil {
		return wire.BodyEventBytes([]byte(body))
	}
	return len(rest) - 2 + wire.BodyEventBytes([]byte(body))
}

// recorder is the http.ResponseWriter Serve hands to ServeHTTP: it keeps
// the status, headers and body for the proxy answer. The status is 200
// when the handler writes a body without WriteHeader, as net/http does.
type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

func (a *API) resume(w http.ResponseWriter, r *http.Request) {
	b, err := a.Submitter.Resume(r.Context(), r.PathValue("id"))
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, BatchView{Batch: secretref.Redacted(b.Batch)})
}

// cancel answers the batch as GET /batches/{id} would, census and
// needs_attention included, so the answer agrees with the next status; when
// the census cannot be read the cancel still stands and the answer is the
// batch row alone.
func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	a.control(a.Control.Cancel)(w, r)
}

// control serves a command on a running batch (cancel, pause, unpause):
// 202 with the batch as GET /batches/{id} would answer it (the batch row
// alone when its census cannot be read: the command still stands).
func (a *API) control(do func(context.Context, string) (ledger.Batch, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := do(r.Context(), r.PathValue("id"))
		if err != nil {
			a.errorAnswer(w, r, err)
			return
		}
		v, err := a.viewOf(r.Context(), b)
		if err != nil {
			a.Log.WarnContext(r.Context(), "census not read; answering the batch row", "batch_id", b.ID, "error", err)
			v = BatchView{Batch: secretref.Redacted(b.Batch)}
		}
		writeJSON(w, http.StatusAccepted, v)
	}
}

func (a *API) forget(w http.ResponseWriter, r *http.Request) {
	if err := a.Control.Forget(r.Context(), r.PathValue("id")); err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// release serves POST /batches/{id}/items/{key}/release; the key is the
// decoded path between "/items/" and the last "/release".
func (a *API) release(w http.ResponseWriter, r *http.Request) {
	id, key := r.PathValue("id"), r.PathValue("key")
	if !api.ValidBatchID(id) {
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: "batch id is not 1–128 bytes of [A-Za-z0-9_-]", Field: "id"})
		return
	}
	if reason := api.CheckKey(key); reason != "" {
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: reason, Field: "key", Key: key})
		return
	}
	if err := a.Control.Release(r.Context(), id, key); err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// list serves GET /batches: status (one or more statuses, comma-separated
// or repeated), since (RFC 3339 time: batches created at or after it),
// limit (1–1,000, default 100), cursor (a previous page's next_cursor).
// Answers 200 with a api.BatchPage; 400 invalid_request naming the
// parameter at fault.
func (a *API) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var req api.ListBatchesRequest
	for _, v := range q["status"] {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				req.Statuses = append(req.Statuses, api.Status(s))
			}
		}
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: fmt.Sprintf("since: %q is not an RFC 3339 time (e.g. 2026-11-30T00:00:00Z)", v), Field: "since"})
			return
		}
		req.Since = t
	}
	limit, ok := queryLimit(w, q)
	if !ok {
		return
	}
	req.Limit = limit
	req.Cursor = q.Get("cursor")
	req.Source = q.Get("source")
	page, err := a.Control.ListBatches(r.Context(), req)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func (a *API) items(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := queryLimit(w, q)
	if !ok {
		return
	}
	outcome := api.Outcome(q.Get("outcome"))
	if outcome == "" {
		outcome = api.OutcomeFailed
	}
	page, err := a.Control.Items(r.Context(), r.PathValue("id"), outcome, q.Get("cursor"), limit)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// queryLimit is the query's limit parameter, 0 when absent (each route
// applies its own default and bounds); false after answering 400 when it
// is not a whole number.
func queryLimit(w http.ResponseWriter, q url.Values) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: "limit: not a whole number", Field: "limit"})
		return 0, false
	}
	return n, true
}

// partialResults serves GET /batches/{id}/results/partial: a page of the
// results lines recorded so far (control.Control.PartialResults).
func (a *API) partialResults(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := queryLimit(w, q)
	if !ok {
		return
	}
	page, err := a.Control.PartialResults(r.Context(), r.PathValue("id"), q.Get("cursor"), limit)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// inputs serves GET /batches/{id}/inputs: a page of the current inputs of
// the batch's items of outcome (failed by default, or quarantined), in
// the source's own format (control.Control.Inputs). 200 with the page as
// its body, as it is: Content-Type text/csv (header=present) for a CSV
// source, application/x-ndjson for any other; the header
// Bulkrun-Next-Cursor (absent at the end) goes on, Bulkrun-Input-Count
// says how many items' inputs the page holds. 400 invalid_request naming
// id, outcome, limit or cursor; 404 not_found or expired; 409 conflict
// for a batch with positional keys.
func (a *API) inputs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !api.ValidBatchID(id) {
		writeError(w, http.StatusBadRequest, ErrorBody{Code: "invalid_request", Message: "batch id is not 1–128 bytes of [A-Za-z0-9_-]", Field: "id"})
		return
	}
	q := r.URL.Query()
	limit, ok := queryLimit(w, q)
	if !ok {
		return
	}
	p, err := a.Control.Inputs(r.Context(), id, api.Outcome(q.Get("outcome")), q.Get("cursor"), limit)
	if err != nil {
		a.errorAnswer(w, r, err)
		return
	}
	w.Header().Set("Content-Type", api.InputContentType(p.Format))
	w.Header().Set(api.HeaderInputCount, strconv.Itoa(p.Count))
	if p.NextCursor != "" {
		w.Header().Set(api.HeaderNextCursor, p.NextCursor)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(p.Body)
}

// callerKey is the context key of the API caller's identity.
type callerKey struct{}

// WithCaller returns ctx carrying the API caller's identity (see
// EventCaller), which a submit records as the batch's submitted_by.
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

// CallerOf returns the caller identity ctx carries ("" when none).
func CallerOf(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

// EventCaller is the IAM identity of an API Gateway REST API request made
// with IAM authorization: requestContext.identity.userArn (the caller's
// ARN: an IAM user, or an assumed role's session,
// arn:aws:sts::123456789012:assumed-role/ops/alice), else
// requestContext.identity.caller (its principal id), else "" (API Gateway
// developer guide, "Input format of a Lambda function for proxy
// integration", https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html).
// API Gateway fills them from the verified SigV4 signature; the caller
// cannot set them.
func EventCaller(ev events.APIGatewayProxyRequest) string {
	if id := ev.RequestContext.Identity; id.UserArn != "" {
		return id.UserArn
	} else if id.Caller != "" {
		return id.Caller
	}
	return ""
}

// pathParamRE matches a path parameter of an API Gateway resource path:
// "{name}" or the greedy "{name+}".
var pathParamRE = regexp.MustCompile(`\{([^{}+]+)\+?\}`)

// EventPath returns the request path of a REST API proxy event decoded
// exactly once. API Gateway's REST API sends `path` still percent-encoded
// and `pathParameters` decoded (API Gateway developer guide, "Lambda proxy
// integrations in API Gateway", input format:
// https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html);
// the path is therefore rebuilt from `resource` (e.g. "/batches/{proxy+}")
// with each parameter replaced by its decoded value, which also leaves out
// a custom domain's base path. An event without a resource template, or
// missing one of its parameters, falls back to decoding `path` once
// (url.PathUnescape); a malformed escape is an error naming it.
func EventPath(ev events.APIGatewayProxyRequest) (string, error) {
	if ev.Resource != "" && strings.HasPrefix(ev.Resource, "/") {
		missing := false
		p := pathParamRE.ReplaceAllStringFunc(ev.Resource, func(m string) string {
			name := pathParamRE.FindStringSubmatch(m)[1]
			v, ok := ev.PathParameters[name]
			if !ok {
				missing = true
			}
			return v
		})
		if !missing {
			return p, nil
		}
	}
	p, err := url.PathUnescape(ev.Path)
	if err != nil {
		return "", fmt.Errorf("path %q: %w", ev.Path, err)
	}
	return p, nil
}
