// Package client talks to a deployed bulkrun stack: it finds the stack's
// resources from its CloudFormation outputs and calls the REST API with
// SigV4-signed requests (the API uses IAM authorization). The CLI, the demo
// and the integration tests use it.
//
// This package is part of bulkrun's Go API: docs/packages.md says what
// that promises.
package client

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Stack is a deployed stack's outputs (config.Output* keys → values).
type Stack map[string]string

// Get returns the output named key, or an error naming it.
func (s Stack) Get(key string) (string, error) {
	v, ok := s[key]
	if !ok || v == "" {
		return "", fmt.Errorf("stack has no output %q (is the stack deployed?)", key)
	}
	return v, nil
}

// FindStack reads the outputs of the CloudFormation stack named name.
func FindStack(ctx context.Context, c aws.Config, name string) (Stack, error) {
	out, err := cloudformation.NewFromConfig(c).DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: &name})
	if err != nil {
		return nil, fmt.Errorf("describe stack %s: %w", name, err)
	}
	if len(out.Stacks) == 0 {
		return nil, fmt.Errorf("stack %s not found", name)
	}
	s := Stack{}
	for _, o := range out.Stacks[0].Outputs {
		s[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	return s, nil
}

// Client calls the bulkrun REST API. Safe for concurrent use.
//
// Every call goes through the AWS SDK's standard retryer (NewRetryer):
// API Gateway's 429 (the stage's throttle), 500, 502, 503 and 504 answers,
// timeouts and lost connections are sent again with backoff, each try
// signed anew. The client keeps the offset between the machine's clock
// and the API's, learned from the Date header of the API's answers, and
// signs with it (the AWS SDK's clock-skew correction): a request API
// Gateway refuses because its signing time is more than 5 minutes from
// the gateway's clock (403 "Signature expired" or "Signature not yet
// current") is sent again at the corrected time, and a *ClockError names
// the machine's clock when that cannot fix it.
type Client struct {
	base   string // API base URL, ending without "/"
	aws    aws.Config
	http   *http.Client
	signer *v4.Signer
	// bucket is the stack's bucket (config.OutputBucket), where Submit and
	// Correct put inline items too large to send; "" when the stack has
	// none.
	bucket string
	// skew is the API's clock minus the machine's, in nanoseconds, as the
	// last answer's Date header measured it.
	skew atomic.Int64
	// Retryer returns the retryer of each call; nil: NewRetryer.
	Retryer func() aws.Retryer
}

// EnvAPIURL, when set, is the API base URL the client calls instead of the
// one it derives from the stack (e.g. a custom domain, or a proxy).
const EnvAPIURL = "BULKRUN_API_URL"

// New returns a client for the stack's API: $BULKRUN_API_URL when set;
// with AWS_ENDPOINT_URL set (an emulator)
// {endpoint}/restapis/{api id}/{stage}/_user_request_, the LocalStack-style
// form; otherwise the stack's ApiUrl output. The stack's bucket output,
// when there is one, is where large inline sources go (Submit).
func New(c aws.Config, s Stack) (*Client, error) {
	var base string
	if u := os.Getenv(EnvAPIURL); u != "" {
		base = strings.TrimRight(u, "/")
	} else if ep := os.Getenv("AWS_ENDPOINT_URL"); ep != "" {
		id, err := s.Get(config.OutputAPIID)
		if err != nil {
			return nil, err
		}
		stage := s[config.OutputAPIStage]
		if stage == "" {
			stage = config.DefaultAPIStage
		}
		base = strings.TrimRight(ep, "/") + "/restapis/" + id + "/" + stage + "/_user_request_"
	} else {
		u, err := s.Get(config.OutputAPIURL)
		if err != nil {
			return nil, err
		}
		base = strings.TrimRight(u, "/")
	}
	// Redirects are not followed: a signed request is never sent on to
	// another URL (Report follows its link itself, unsigned).
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: base, aws: c, http: &http.Client{Timeout: 60 * time.Second, CheckRedirect: noRedirect}, signer: v4.NewSigner(), bucket: s[config.OutputBucket]}, nil
}

// APIError is an error answer of the API: its HTTP status and bulkrun's
// JSON error body; for an answer of API Gateway itself ({"message": "…"}:
// its stage throttle, a signature it refuses, a request too large) Body
// holds Code "http_{status}" and the gateway's message, and Type the
// gateway's error type (its x-amzn-ErrorType header, e.g.
// "TooManyRequestsException", "InvalidSignatureException").
type APIError struct {
	Status int
	Body   wire.ErrorBody
	Type   string
}

// Error is "HTTP {status} {code}: {message}", the message without the
// code said again at its end (the server's messages end with the
// domain's sentinel, "…: conflict").
func (e *APIError) Error() string {
	msg := strings.TrimSuffix(e.Body.Message, ": "+strings.ReplaceAll(e.Body.Code, "_", " "))
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Body.Code, msg)
}

// ErrorCode is the error's code as the AWS SDK's retryer reads it: Type
// when the gateway gave one, else Body.Code.
func (e *APIError) ErrorCode() string {
	if e.Type != "" {
		return e.Type
	}
	return e.Body.Code
}

// HTTPStatusCode is Status (how the AWS SDK's retryer reads it).
func (e *APIError) HTTPStatusCode() int { return e.Status }

// Is maps API error codes to the domain's sentinels: not_found →
// api.ErrNotFound, batch_mismatch → api.ErrBatchMismatch,
// invalid_request → api.ErrInvalid.
func (e *APIError) Is(t error) bool {
	switch e.Body.Code {
	case wire.CodeNotFound:
		return t == api.ErrNotFound
	case wire.CodeBatchMismatch:
		return t == api.ErrBatchMismatch
	case wire.CodeInvalidRequest:
		return t == api.ErrInvalid
	}
	return false
}

// signatureTime reports whether e is API Gateway refusing a request for
// its signing time: 403, "Signature expired: {signed} is now earlier than
// {earliest} ({now} - 5 min.)" or "Signature not yet current: {signed} is
// still later than {latest} ({now} + 5 min.)".
func (e *APIError) signatureTime() bool {
	m := e.Body.Message
	return e.Status == http.StatusForbidden && (strings.HasPrefix(m, "Signature expired") || strings.HasPrefix(m, "Signature not yet current"))
}

// ClockError is a call API Gateway refused because its signing time was
// more than 5 minutes from the gateway's clock, after the client's
// correction (see Client) could not fix it: the machine's clock is off.
// Offset is the API's clock minus the machine's as the client last
// measured it (0 when no answer said); Err the refusal, an *APIError.
type ClockError struct {
	Offset time.Duration
	Err    error
}

func (e *ClockError) Error() string {
	off := "more than 5 minutes off"
	switch {
	case e.Offset >= time.Minute:
		off = fmt.Sprintf("%s behind", e.Offset.Round(time.Second))
	case e.Offset <= -time.Minute:
		off = fmt.Sprintf("%s ahead of", (-e.Offset).Round(time.Second))
	}
	return fmt.Sprintf("the API refused the request's signing time: this machine's clock is %s the API's (API Gateway takes a signature within 5 minutes of its own clock) and the client could not correct for it; set the machine's clock right (turn on time synchronisation, e.g. timedatectl set-ntp true, or the system's date and time settings) and run the command again (cause: %v)", off, e.Err)
}

func (e *ClockError) Unwrap() error { return e.Err }

// TooLargeError is a request the client does not send: its Lambda event —
// the body as a JSON string, the headers twice, the path and the request
// context, which API Gateway passes to the submit function — would be
// over Lambda's synchronous invocation payload limit, wire.MaxEventBytes
// (6 MB), so the function would never run (API Gateway answers 413).
// EventBytes is the client's estimate of the event's size.
type TooLargeError struct {
	Method, Path string
	EventBytes   int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s %s: not sent: its Lambda event would be about %d bytes, over Lambda's 6 MB invocation payload limit (%d bytes; Lambda quotas, \"Invocation payload (request and response)\": https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html), and never reach the function; put the items in an S3 object and name it ({\"source\": {\"object\": \"s3://…\"}}), or give the file to bulkrun submit, which uploads it",
		e.Method, e.Path, e.EventBytes, wire.MaxEventBytes)
}

// EventOverheadBytes is what the client allows, in bytes, for the parts
// of a request's Lambda event other than its body and headers (the path,
// query and path parameters, the request context with the caller's
// identity) and for the headers API Gateway adds (X-Forwarded-*, Via,
// X-Amzn-Trace-Id, …): 16 KiB.
const EventOverheadBytes = 16 << 10

// HeaderBytes is what the client allows, in bytes, for the headers it
// sends (Content-Type, Host, User-Agent, the signature's Authorization
// and X-Amz-Date, and a session token, which STS may make a few KB long):
// 6 KiB. The event holds them twice.
const HeaderBytes = 6 << 10

// eventBytes estimates the size of the Lambda event of a request with
// payload: the body as a JSON string, the headers twice and
// EventOverheadBytes.
func (c *Client) eventBytes(payload []byte) int {
	return wire.BodyEventBytes(payload) + 2*HeaderBytes + EventOverheadBytes
}

// Do sends a signed request and decodes a 2xx JSON answer into out (when
// non-nil). It returns the status code. Every call is retried as Client
// says. Its errors: *TooLargeError before anything is sent; an *APIError
// for a non-2xx answer (after the retries it wraps, in the SDK's
// *retry.MaxAttemptsError, the last try's); a *ClockError for a signing
// time the API keeps refusing; a transport error naming the method and
// path when no answer came. When a try's answer was lost and a later try
// was refused, the error says an earlier try may have done it.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	status, _, err := c.do(ctx, method, path, body, out)
	return status, err
}

// do is Do, also returning how many tries were made.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, int, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, 0, err
		}
	}
	if n := c.eventBytes(payload); n > wire.MaxEventBytes {
		return 0, 0, &TooLargeError{Method: method, Path: path, EventBytes: n}
	}
	a, tries, err := c.send(ctx, method, path, payload)
	if err != nil {
		status, err := c.callError(method, path, tries, err)
		return status, tries, err
	}
	if a.status/100 != 2 {
		// A redirect: Do follows none.
		return a.status, tries, newAPIError(a.status, a.header, a.body)
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			return a.status, tries, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return a.status, tries, nil
}

// callError is Do's error for a call that failed after tries tries.
func (c *Client) callError(method, path string, tries int, err error) (int, error) {
	var ae *APIError
	if !errors.As(err, &ae) {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if ae.signatureTime() {
		return ae.Status, &ClockError{Offset: time.Duration(c.skew.Load()), Err: err}
	}
	if tries > 1 && !Retryable(err) {
		// A refusal after a try whose outcome is unknown (no answer, a
		// 5xx): that try may have been carried out.
		return ae.Status, fmt.Errorf("%w (after %s: an earlier try whose answer was lost may have done what was asked)", err, api.Count(tries, "try"))
	}
	return ae.Status, err
}

// Submit posts a batch and returns it (Created tells whether this call
// created it; status submitting while an S3 source is read in the
// background: Wait for it). Without a batch id it gives the request a new
// ULID first, so that every try names the same batch: the retries of Do
// (a 504 from API Gateway when the integration outlives its timeout, while
// the submit may still go on; a lost connection) send that same request,
// and a repeated submit of the same request is the same batch, so a retry
// never makes a second one. Inline items whose request would be over
// Lambda's invocation payload limit (a *TooLargeError) are put in the
// stack's bucket first, under uploads/ (uploadItems), and the request
// names that object instead: the batch is read in the background (202
// submitting) with the same items, keys and digest. Without a bucket the
// *TooLargeError is returned. Refusals (*APIError 4xx, 507) are returned
// at once.
func (c *Client) Submit(ctx context.Context, req api.SubmitRequest) (wire.BatchView, error) {
	if req.BatchID == "" {
		req.BatchID = NewBatchID()
	}
	src, err := c.sendable(ctx, req, req.Source)
	if err != nil {
		return wire.BatchView{}, fmt.Errorf("submit %s: %w", req.BatchID, err)
	}
	req.Source = src
	var v wire.BatchView
	if _, err := c.Do(ctx, http.MethodPost, "/batches", req, &v); err != nil {
		return v, fmt.Errorf("submit %s: %w", req.BatchID, err)
	}
	return v, nil
}

// sendable returns src, or, when src holds inline items and request (with
// src in it) would be over the invocation payload limit, the source
// naming those items uploaded to the stack's bucket.
func (c *Client) sendable(ctx context.Context, request any, src api.SourceSpec) (api.SourceSpec, error) {
	if src.Items == nil {
		return src, nil
	}
	payload, err := json.Marshal(request)
	if err != nil {
		return src, err
	}
	n := c.eventBytes(payload)
	if n <= wire.MaxEventBytes {
		return src, nil
	}
	if c.bucket == "" {
		return src, &TooLargeError{Method: http.MethodPost, Path: "/batches", EventBytes: n}
	}
	return c.uploadItems(ctx, src.Items)
}

// uploadItems puts inline items (a JSON array) in the stack's bucket as
// they are, under uploads/{first 16 hex digits of their SHA-256}/items.json
// (the prefix the CLI uploads local files under; the same items, the same
// key), and returns the source naming that object in format json: submit
// reads it with the reader of inline items.
func (c *Client) uploadItems(ctx context.Context, items json.RawMessage) (api.SourceSpec, error) {
	sum := sha256.Sum256(items)
	key := "uploads/" + hex.EncodeToString(sum[:8]) + "/items.json"
	if err := blob.New(blob.NewS3(c.aws), c.bucket).Put(ctx, key, "application/json", items); err != nil {
		return api.SourceSpec{}, fmt.Errorf("upload the inline items (too large to send inline): %w", err)
	}
	return api.SourceSpec{Object: "s3://" + c.bucket + "/" + key, Format: api.FormatJSON}, nil
}

// Retryable reports whether a call that failed with err may be sent again
// with the same request — what the client's retryer retries: 429, 500,
// 502, 503 and 504 answers, and errors that got no answer (timeouts,
// refused or reset connections). Not 507 (insufficient storage), nor any
// 4xx but 429.
func Retryable(err error) bool {
	if retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary {
		return true
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return false
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// Status reads a batch with its census.
func (c *Client) Status(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodGet, "/batches/"+url.PathEscape(id), nil, &v)
	return v, err
}

// Report reads the batch's last report. A report too large for the
// API's answer comes as a link (303 See Other, a wire.ReportLink), which
// Report follows with a plain GET: the URL carries its own signature, and
// the caller's is never sent with it.
func (c *Client) Report(ctx context.Context, id string) (api.Report, error) {
	var r api.Report
	path := "/batches/" + url.PathEscape(id) + "/report"
	a, tries, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		_, err = c.callError(http.MethodGet, path, tries, err)
		return r, err
	}
	if a.status != http.StatusSeeOther {
		if err := json.Unmarshal(a.body, &r); err != nil {
			return r, fmt.Errorf("GET %s: decode answer: %w", path, err)
		}
		return r, nil
	}
	var link wire.ReportLink
	if err := json.Unmarshal(a.body, &link); err != nil || link.URL == "" {
		return r, fmt.Errorf("GET %s: 303 without a report link: %.200s", path, a.body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link.URL, nil)
	if err != nil {
		return r, fmt.Errorf("report link: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return r, fmt.Errorf("GET the report of %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return r, fmt.Errorf("GET the report of %s: %s: %.300s", id, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, fmt.Errorf("the report of %s: %w", id, err)
	}
	return r, nil
}

// Wait polls Status every interval until the batch's run is finished (or
// the batch refused: Status.Finished) or ctx ends, calling progress
// (optional) with each view. It waits through submitting.
func (c *Client) Wait(ctx context.Context, id string, interval time.Duration, progress func(wire.BatchView)) (wire.BatchView, error) {
	return c.WaitUntil(ctx, id, interval, func(v wire.BatchView) bool { return v.Status.Finished() }, progress)
}

// Submitted waits while the batch is submitting: it returns the batch once
// its manifest is frozen (running or later) or it was refused.
func (c *Client) Submitted(ctx context.Context, id string, interval time.Duration) (wire.BatchView, error) {
	return c.WaitUntil(ctx, id, interval, func(v wire.BatchView) bool { return v.Status != api.StatusSubmitting }, nil)
}

// MaxPollInterval is the longest pause between two polls of WaitUntil.
const MaxPollInterval = 15 * time.Second

// NextPoll is the pause before the next poll of a waiting client: interval
// again after a poll that saw the batch move (status or counts changed),
// else the last pause doubled, at most max(interval, MaxPollInterval). A
// batch that stands still (a long pipeline call, a stalled run waiting for
// the tick) is thus polled a few times a minute, not every second; each
// poll of a running batch costs O(counter shards) reads.
func NextPoll(last, interval time.Duration, moved bool) time.Duration {
	if moved || last <= 0 {
		return interval
	}
	return min(2*last, max(interval, MaxPollInterval))
}

// WaitUntil polls Status until done says so or ctx ends, calling progress
// (optional) with each view. Polls are interval apart while the batch
// moves and back off while it does not (NextPoll).
func (c *Client) WaitUntil(ctx context.Context, id string, interval time.Duration, done func(wire.BatchView) bool, progress func(wire.BatchView)) (wire.BatchView, error) {
	var pause time.Duration
	var seen string
	for {
		v, err := c.Status(ctx, id)
		if err != nil {
			return v, err
		}
		if progress != nil {
			progress(v)
		}
		if done(v) {
			return v, nil
		}
		now := movement(v)
		pause = NextPoll(pause, interval, now != seen)
		seen = now
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, fmt.Errorf("wait for batch %s: %w (last status %s)", id, ctx.Err(), v.Status)
		case <-t.C:
		}
	}
}

// movement sums up what a poll shows of a batch's progress.
func movement(v wire.BatchView) string {
	s := fmt.Sprintf("%s %d %v", v.Status, v.Run, v.Stop)
	if v.Progress != nil {
		s += fmt.Sprintf(" %d %d", v.Progress.Done, v.Progress.Failures)
	}
	if c := v.Census; c != nil {
		s += fmt.Sprintf(" %d %d %d %d %d %d", c.Succeeded, c.Failed, c.Quarantined, c.Cancelled, c.InFlight, c.Pending)
	}
	return s
}

// Resume starts a new run of a finished batch.
func (c *Client) Resume(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/resume", nil, &v)
	return v, err
}

// Pause pauses the batch's current run: no item starts until Unpause;
// items running finish (POST /batches/{id}/pause).
func (c *Client) Pause(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/pause", nil, &v)
	return v, err
}

// Unpause ends the batch's pause, whoever paused it (POST
// /batches/{id}/unpause).
func (c *Client) Unpause(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/unpause", nil, &v)
	return v, err
}

// Approve approves a sampled batch: the items outside its sample run
// (POST /batches/{id}/approve; api.Plan.Sample).
func (c *Client) Approve(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/approve", nil, &v)
	return v, err
}

// Reject rejects a sampled batch: its run is cancelled (POST
// /batches/{id}/reject).
func (c *Client) Reject(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/reject", nil, &v)
	return v, err
}

// SetBudget sets the batch's budget to usd US dollars (POST
// /batches/{id}/budget, api.BudgetRequest): on a run paused at its
// budget, a budget above the run's spend resumes it; one at or below the
// spend is refused (409 conflict, naming the spend).
func (c *Client) SetBudget(ctx context.Context, id string, usd float64) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/budget", api.BudgetRequest{BudgetUSD: &usd}, &v)
	return v, err
}

// SetCeilings sets the per-item ceilings raise sets (POST
// /batches/{id}/ceilings) and wakes the exhausted items now under them;
// one call wakes what it can in a bounded time (Done false asks for
// another). SetCeilingsAll repeats it.
func (c *Client) SetCeilings(ctx context.Context, id string, raise api.Ceilings) (api.CeilingsResult, error) {
	var res api.CeilingsResult
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/ceilings", raise, &res)
	return res, err
}

// SetCeilingsAll is SetCeilings repeated until its answer is Done (at
// most 100 calls); Woken counts each item the calls moved on once (the
// first answer's Woken, then each later one's Woken − AlreadyWoken: a
// call goes over the items an earlier one woke again), AlreadyWoken is
// the first answer's, Still the last one's. The count is exact when no
// other wake ran before or between the calls: an item woken before the
// first call and not reached by it is missed, and one woken, held again
// and woken again between two calls is counted twice (it did run twice).
func (c *Client) SetCeilingsAll(ctx context.Context, id string, raise api.Ceilings) (api.CeilingsResult, error) {
	var sum api.CeilingsResult
	for call := range 100 {
		res, err := c.SetCeilings(ctx, id, raise)
		if err != nil {
			return sum, err
		}
		sum.Ceilings, sum.Still = res.Ceilings, res.Still
		sum.Woken += wokenAnew(call, res.Woken, res.AlreadyWoken)
		if call == 0 {
			sum.AlreadyWoken = res.AlreadyWoken
		}
		if sum.Done = res.Done; res.Done {
			break
		}
	}
	return sum, nil
}

// Lift lifts the batch's halt on subject and wakes the items withheld
// under it (POST /batches/{id}/halts/lift). One call wakes what it can in
// a bounded time: the answer's Done false asks for another; LiftAll
// repeats it.
func (c *Client) Lift(ctx context.Context, id, subject string) (api.LiftResult, error) {
	var res api.LiftResult
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/halts/lift", wire.LiftRequest{Subject: subject}, &res)
	return res, err
}

// LiftAll is Lift repeated until its answer is Done (at most 100 calls):
// the halt lifted and every item withheld under it woken. Lifted is any
// answer's, Woken counts each item the calls moved on once (as
// SetCeilingsAll's), AlreadyWoken is the first answer's.
func (c *Client) LiftAll(ctx context.Context, id, subject string) (api.LiftResult, error) {
	sum := api.LiftResult{Subject: subject}
	for call := range 100 {
		res, err := c.Lift(ctx, id, subject)
		if err != nil {
			return sum, err
		}
		sum.Lifted = sum.Lifted || res.Lifted
		sum.Woken += wokenAnew(call, res.Woken, res.AlreadyWoken)
		if call == 0 {
			sum.AlreadyWoken = res.AlreadyWoken
		}
		if sum.Done = res.Done; res.Done {
			break
		}
	}
	return sum, nil
}

// wokenAnew is what call (0 first) of a wake that goes on over several
// adds to their count: the first call's every item moved on, a later
// call's only those it woke itself (an item an earlier call woke is found
// woken again, and counted then).
func wokenAnew(call int, woken, already int64) int64 {
	if call == 0 {
		return woken
	}
	return max(0, woken-already)
}

// Correct sends corrected inputs for items of a finished batch (POST
// /batches/{id}/corrections, submit.Submitter.Correct): the answer is the
// batch at its correction run and the revision; Created false when the
// same corrections were given before (no new run). Retried like any call:
// the same corrections are one revision. Inline items too large to send
// go through the stack's bucket, as Submit's do.
func (c *Client) Correct(ctx context.Context, id string, req api.CorrectRequest) (wire.CorrectionView, error) {
	var v wire.CorrectionView
	src, err := c.sendable(ctx, req, req.Source)
	if err != nil {
		return v, fmt.Errorf("correct %s: %w", id, err)
	}
	req.Source = src
	_, err = c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/corrections", req, &v)
	return v, err
}

// Cancel stops the batch's current run.
func (c *Client) Cancel(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/cancel", nil, &v)
	return v, err
}

// Forget removes the batch and everything it owns. A 404 after a try
// whose answer was lost is that try's success: nil.
func (c *Client) Forget(ctx context.Context, id string) error {
	_, tries, err := c.do(ctx, http.MethodDelete, "/batches/"+url.PathEscape(id), nil, nil)
	if tries > 1 && errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

// Release makes a quarantined item eligible for the next run. The key is
// sent escaped as one path segment (wire.ItemPath), so any key — "/",
// "%", "+", spaces, non-ASCII — names exactly that item.
func (c *Client) Release(ctx context.Context, id, key string) error {
	_, err := c.Do(ctx, http.MethodPost, wire.ItemPath(id, key, "release"), nil, nil)
	return err
}

// Signal signals suspended item key of batch id (POST
// /batches/{id}/items/{key}/signal): it runs once more, its next attempt
// given payload (JSON, at most api.MaxSignalPayloadBytes; nil: none).
// token, when not empty, must be the token its suspension returned.
// Idempotent: a repeated signal answers Woken false and By, what woke
// the item. Errors: 409 conflict for an item not suspended (or under
// another token), 404 for an unknown batch or item. Each call names its
// signal with an ID of its own (wire.SignalRequest.ID), which the
// client's retries of the call keep: a retry after a lost answer is
// answered as delivered, never delivered to a later suspension.
func (c *Client) Signal(ctx context.Context, id, key, token string, payload json.RawMessage) (api.SignalResult, error) {
	var res api.SignalResult
	_, err := c.Do(ctx, http.MethodPost, wire.ItemPath(id, key, "signal"), wire.SignalRequest{Payload: payload, Token: token, ID: rand.Text()}, &res)
	return res, err
}

// Items pages the batch's items of outcome (failed, quarantined,
// withheld, in_flight; api.NeedsAttention: every
// item needing a look, each with its next move).
func (c *Client) Items(ctx context.Context, id string, outcome api.Outcome, cursor string, limit int) (api.ItemPage, error) {
	q := url.Values{"outcome": {string(outcome)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var p api.ItemPage
	_, err := c.Do(ctx, http.MethodGet, "/batches/"+url.PathEscape(id)+"/items?"+q.Encode(), nil, &p)
	return p, err
}

// Inputs reads one page of the current inputs of the batch's items of
// outcome (GET /batches/{id}/inputs; see control.Control.Inputs): failed
// ("" too) or quarantined, limit items at most (0: the API's default,
// 100; at most 1,000), after cursor ("" from the first). The page's Body
// is in the source's format, Format: CSV with the source's header and
// delimiter (a header on every page), or JSON Lines. The pages end when
// NextCursor is empty. Errors as Do's (an *APIError: 400 naming outcome,
// limit or cursor; 404; 409 for a batch with positional keys).
func (c *Client) Inputs(ctx context.Context, id string, outcome api.Outcome, cursor string, limit int) (api.InputPage, error) {
	q := url.Values{}
	if outcome != "" {
		q.Set("outcome", string(outcome))
	}
	path := pagePath(id, "inputs", q, cursor, limit)
	a, tries, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		_, err = c.callError(http.MethodGet, path, tries, err)
		return api.InputPage{}, err
	}
	if a.status/100 != 2 {
		return api.InputPage{}, newAPIError(a.status, a.header, a.body)
	}
	p := api.InputPage{Format: api.FormatJSONL, Body: a.body, NextCursor: a.header.Get(api.HeaderNextCursor)}
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt == "text/csv" {
		p.Format = api.FormatCSV
	}
	if p.Count, err = strconv.Atoi(a.header.Get(api.HeaderInputCount)); err != nil {
		return api.InputPage{}, fmt.Errorf("GET %s: header %s: %w", path, api.HeaderInputCount, err)
	}
	return p, nil
}

// PartialResults reads one page of the results lines the batch's current
// run has recorded so far (GET /batches/{id}/results/partial; see
// control.Control.PartialResults): limit lines at most (0: the API's
// default), after cursor ("" from the first). The stream ends when the
// page's NextCursor is empty.
func (c *Client) PartialResults(ctx context.Context, id, cursor string, limit int) (api.ResultPage, error) {
	var p api.ResultPage
	_, err := c.Do(ctx, http.MethodGet, pagePath(id, "results/partial", url.Values{}, cursor, limit), nil, &p)
	return p, err
}

// pagePath is the path of a paged route of batch id ("/batches/{id}/"
// + route), with q and, when set, cursor and limit as its query.
func pagePath(id, route string, q url.Values, cursor string, limit int) string {
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	path := "/batches/" + url.PathEscape(id) + "/" + route
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return path
}

// ListBatches pages the batches newest first (GET /batches): r's
// statuses, since, source and limit filter and size the page, r.Cursor continues
// a previous one. See control.Control.ListBatches.
func (c *Client) ListBatches(ctx context.Context, r api.ListBatchesRequest) (api.BatchPage, error) {
	q := url.Values{}
	if len(r.Statuses) > 0 {
		s := make([]string, len(r.Statuses))
		for i, st := range r.Statuses {
			s[i] = string(st)
		}
		q.Set("status", strings.Join(s, ","))
	}
	if !r.Since.IsZero() {
		q.Set("since", r.Since.UTC().Format(time.RFC3339Nano))
	}
	if r.Limit > 0 {
		q.Set("limit", fmt.Sprint(r.Limit))
	}
	if r.Cursor != "" {
		q.Set("cursor", r.Cursor)
	}
	if r.Source != "" {
		q.Set("source", r.Source)
	}
	path := "/batches"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p api.BatchPage
	_, err := c.Do(ctx, http.MethodGet, path, nil, &p)
	return p, err
}

// NewBatchID returns a new batch id: a ULID (26 characters, time-ordered),
// the id the API gives a batch submitted without one.
func NewBatchID() string { return ulid.Make().String() }
