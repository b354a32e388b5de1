// Package client talks to a deployed bulkrun stack: it finds the stack's
// resources from its CloudFormation outputs and calls the REST API with
// SigV4-signed requests (the API uses IAM authorization). The CLI, the demo
// and the integration tests use it.
//
// This package is part of bulkrun's Go API: docs/packages.md says what
// that promises.
package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"

	"github.com/bulkrun/bulkrun/internal/retry"
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
type Client struct {
	base   string // API base URL, ending without "/"
	aws    aws.Config
	http   *http.Client
	signer *v4.Signer
	// Retry is how Submit retries; the zero value means DefaultRetry.
	Retry Retry
}

// Retry is a bounded exponential backoff: Tries calls in all, the n-th
// retry after min(Base × 2^(n-1), Max) plus up to half of it at random.
type Retry struct {
	Tries int
	Base  time.Duration
	Max   time.Duration
}

// schedule is r as a retry schedule: min(Base × 2^(n−1), Max) × 1.25 ±
// 20 %, which is that delay plus up to half of it at random.
func (r Retry) schedule() retry.Schedule {
	return retry.Schedule{Interval: r.Base * 5 / 4, MaxDelay: r.Max * 5 / 4, Jitter: 0.2}
}

// DefaultRetry is Submit's retry policy: 6 tries over about a minute
// (1, 2, 4, 8, 16 s between them, plus jitter).
var DefaultRetry = Retry{Tries: 6, Base: time.Second, Max: 16 * time.Second}

// EnvAPIURL, when set, is the API base URL the client calls instead of the
// one it derives from the stack (e.g. a custom domain, or a proxy).
const EnvAPIURL = "BULKRUN_API_URL"

// New returns a client for the stack's API: $BULKRUN_API_URL when set;
// with AWS_ENDPOINT_URL set (an emulator)
// {endpoint}/restapis/{api id}/{stage}/_user_request_, the LocalStack-style
// form; otherwise the stack's ApiUrl output.
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
	return &Client{base: base, aws: c, http: &http.Client{Timeout: 60 * time.Second, CheckRedirect: noRedirect}, signer: v4.NewSigner()}, nil
}

// APIError is an error answer of the API.
type APIError struct {
	Status int
	Body   wire.ErrorBody
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

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

// Do sends a signed request and decodes a 2xx JSON answer into out (when
// non-nil). It returns the status code; a non-2xx answer is an *APIError
// (a redirect too: Do follows none).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	status, _, data, err := c.send(ctx, method, path, body)
	if err != nil {
		return status, err
	}
	return status, answer(method, path, status, data, out)
}

// answer is Do's reading of an answer: a non-2xx one is an *APIError,
// a 2xx one is decoded into out (when non-nil).
func answer(method, path string, status int, data []byte, out any) error {
	if status/100 != 2 {
		ae := &APIError{Status: status}
		if json.Unmarshal(data, &ae.Body) != nil || ae.Body.Code == "" {
			ae.Body = wire.ErrorBody{Code: "http_" + fmt.Sprint(status), Message: strings.TrimSpace(string(data))}
		}
		return ae
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// send sends a signed request and returns the answer as given: status,
// headers and body (at most 64 MiB read).
func (c *Client) send(ctx context.Context, method, path string, body any) (int, http.Header, []byte, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, nil, nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	creds, err := c.aws.Credentials.Retrieve(ctx)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("credentials: %w", err)
	}
	sum := sha256.Sum256(payload)
	if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", c.aws.Region, time.Now()); err != nil {
		return 0, nil, nil, fmt.Errorf("sign: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, resp.Header, nil, err
	}
	return resp.StatusCode, resp.Header, data, nil
}

// Submit posts a batch and returns it (Created tells whether this call
// created it; status submitting while an S3 source is read in the
// background: Wait for it). Without a batch id it gives the request a new
// ULID first, so that every try names the same batch; it then retries,
// with the same request, answers that may not have reached the API or
// whose outcome is unknown: 429, 500, 502, 503, 504 (API Gateway answers
// 504 when the integration outlives its timeout, while the submit may
// still go on), timeouts and connection errors, as c.Retry says. A repeated
// submit of the same request is the same batch, so a retry never makes a
// second one. Other errors (*APIError 4xx, 507) are returned at once.
func (c *Client) Submit(ctx context.Context, req api.SubmitRequest) (wire.BatchView, error) {
	if req.BatchID == "" {
		req.BatchID = NewBatchID()
	}
	r := c.Retry
	if r.Tries <= 0 {
		r = DefaultRetry
	}
	var v wire.BatchView
	var err error
	for try := 1; ; try++ {
		v = wire.BatchView{}
		_, err = c.Do(ctx, http.MethodPost, "/batches", req, &v)
		if err == nil || try >= r.Tries || !Retryable(err) || ctx.Err() != nil {
			break
		}
		d := r.schedule().Delay(try)
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("submit %s: %w (last try: %v)", req.BatchID, ctx.Err(), err)
		case <-time.After(d):
		}
	}
	if err != nil {
		return v, fmt.Errorf("submit %s: %w", req.BatchID, err)
	}
	return v, nil
}

// Retryable reports whether a call that failed with err may be sent again
// with the same request: 429, 500, 502, 503 and 504 answers, and errors
// that got no answer (timeouts, refused or reset connections). Not 507
// (insufficient storage), nor any 4xx but 429.
func Retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
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
	status, _, data, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return r, err
	}
	if status != http.StatusSeeOther {
		return r, answer(http.MethodGet, path, status, data, &r)
	}
	var link wire.ReportLink
	if err := json.Unmarshal(data, &link); err != nil || link.URL == "" {
		return r, fmt.Errorf("GET %s: 303 without a report link: %.200s", path, data)
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

// Correct sends corrected inputs for items of a finished batch (POST
// /batches/{id}/corrections, submit.Submitter.Correct): the answer is the
// batch at its correction run and the revision; Created false when the
// same corrections were given before (no new run). Retried like any call:
// the same corrections are one revision.
func (c *Client) Correct(ctx context.Context, id string, req api.CorrectRequest) (wire.CorrectionView, error) {
	var v wire.CorrectionView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/corrections", req, &v)
	return v, err
}

// Cancel stops the batch's current run.
func (c *Client) Cancel(ctx context.Context, id string) (wire.BatchView, error) {
	var v wire.BatchView
	_, err := c.Do(ctx, http.MethodPost, "/batches/"+url.PathEscape(id)+"/cancel", nil, &v)
	return v, err
}

// Forget removes the batch and everything it owns.
func (c *Client) Forget(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/batches/"+url.PathEscape(id), nil, nil)
	return err
}

// Release makes a quarantined item eligible for the next run. The key is
// sent escaped as one path segment (wire.ItemPath), so any key — "/",
// "%", "+", spaces, non-ASCII — names exactly that item.
func (c *Client) Release(ctx context.Context, id, key string) error {
	_, err := c.Do(ctx, http.MethodPost, wire.ItemPath(id, key, "release"), nil, nil)
	return err
}

// Items pages the batch's items of outcome (failed, quarantined, in_flight).
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
