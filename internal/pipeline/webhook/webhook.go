// Package webhook is the built-in pipeline "webhook": it POSTs each item's
// input JSON to a URL set in the batch's options and records the answer.
//
// # Options, request, output, cost
//
// Options, the batch's pipeline options (an unknown option is an error):
//
//	{"url": "https://example.com/hooks/bulkrun", "timeout_ms": 10000}
//
// url is required: an absolute http or https URL whose host is allowed by
// the stack's egress allow-list (see "Destinations" below). timeout_ms bounds one
// attempt's whole exchange (connect, send, headers and body of the answer),
// in milliseconds, 1–900000, default 10000.
//
// The request is a POST whose body is the item's input exactly as in the
// manifest, with these headers:
//
//	Content-Type: application/json
//	Idempotency-Key: <run id>          same on every attempt of the item
//	Bulkrun-Batch-Id: <batch id>
//	Bulkrun-Item-Key: <url.PathEscape(item key)>
//	Bulkrun-Attempt: <attempt, from 1>
//	traceparent: 00-<trace id>-<span id>-<flags>   W3C Trace Context: the call in the batch's trace
//	tracestate: <vendor entries>       when the submitting call sent one
//	User-Agent: bulkrun-webhook         unless a submit header sets it
//	Bulkrun-Signal: <base64url of JSON> the payload of the signal that resumed the suspended item, on its next attempt only
//
// plus every header given at submit, in canonical form. The headers above
// win over a submit header of the same name; Host, Content-Length,
// Transfer-Encoding and Trailer given at submit are ignored (net/http sets
// them). Redirects are not followed: a
// 3xx answer fails the item (a followed 301/302/303 would turn the POST into
// a GET and drop the body).
//
// Output, on a 2xx answer: the answer's body when it is valid JSON of at
// most [MaxResponseBytes] (compacted); otherwise {"status": 204} for an
// empty body, or {"status": 200, "body": "<text>"} with the text cut to
// [MaxBodyTextBytes] at a UTF-8 boundary.
//
// Cost: {"calls": 1} for every call that reached the receiver — once the
// whole request was sent, whatever ended it: an answer of any status, the
// timeout, the caller's context ending (the worker's deadline margin), a
// connection reset or a body cut short. The receiver may have acted on
// it, so the run's spent (api.Census.RunSpent) counts it. A request that
// never went out (connection refused, DNS failure, a destination the
// allow-list denies, bad options or headers) costs nothing.
//
// A receiver reports what the call cost it — the US dollars a budget and
// a spend ceiling read ("usd", pipeline.SpendCostName), the tokens a
// token ceiling reads ("tokens"), any other unit — in the header
// Bulkrun-Cost of any answer (a success, an error status, a suspend):
//
//	Bulkrun-Cost: usd=0.0042, tokens=812
//
// comma-separated name=amount pairs (several header lines add up), each
// name 1–pipeline.MaxCostNameBytes bytes without "=", "," or spaces, each
// amount a finite number ≥ 0; they are added to {"calls": 1} (CostOf). A
// pair that is not so — a bad amount, an empty or reserved name ("calls",
// bulkrun's own), a name given twice — is left out and counted under
// "bulkrun.cost_refused" instead, so that the report shows it; the item's
// outcome stands (the receiver did the work; failing the item would make a
// rerun do it again). Past pipeline.MaxCostNames names the record is
// folded (pipeline.BoundCost) as any pipeline's.
//
// # Suspend
//
// A receiver suspends the item by answering 202 Accepted with the header
// Bulkrun-Suspend naming the reason (a 202 without it is a success, as
// before; the header on another status is ignored):
//
//	HTTP/1.1 202 Accepted
//	Bulkrun-Suspend: waiting for the customer's approval
//	Bulkrun-Wake-At: 2026-12-03T10:00:00Z   optional: RFC 3339, the item's timer
//	Bulkrun-Token: approval-7f3a            optional: at most 256 bytes; a signal that names a token wakes the item only under it
//
// The item ends suspended (pipeline.SuspendError), its body ignored. A
// Bulkrun-Wake-At that is not RFC 3339 fails the item permanently,
// naming the header.
//
// # Destinations
//
// The webhook may not reach loopback, link-local (169.254.0.0/16, which
// holds the metadata and credential endpoints, and fe80::/10), private
// (RFC 1918), unique-local (fc00::/7), unspecified or other non-public
// addresses, nor their IPv4-mapped forms, unless the allow-list given to
// [New] (config.EnvWebhookAllow, the stack's WebhookAllow prop) names them;
// package egress has the rule. It is applied at submit (ValidateOptions
// resolves the host and refuses the batch, naming pipeline_options.url) and
// again on every connection the default transport dials, after name
// resolution, so a name that resolves elsewhere later (DNS rebinding) fails
// the item permanently. The default transport ignores proxy settings from
// the environment (a proxy would dial on bulkrun's behalf, unchecked).
//
// One attempt is one HTTP request: the transport sends nothing again on
// its own (a connection reset before the answer fails the attempt as a
// transient error). The receiver should deduplicate on Idempotency-Key
// (the run id: the same on every attempt of the item, in every run): an
// attempt that timed out or was reset after the receiver acted is
// retried, as a new attempt with the next Bulkrun-Attempt, with the same
// key.
//
// # Errors
//
// See package pipeline for what each class does.
//
//   - permanent, [ErrInvalidOptions]: the options are not a JSON object, url
//     is missing or not an absolute http(s) URL, timeout_ms is out of range,
//     or an option is unknown.
//   - permanent, *[egress.DeniedError] (errors.Is(err, egress.ErrDenied)):
//     the connection would go to an address the allow-list does not allow,
//     e.g. `webhook: item-0000000007: POST http://127.0.0.1:8080: dial tcp
//     127.0.0.1:8080: 127.0.0.1 is a loopback address, which the webhook
//     allow-list does not name`.
//   - permanent, [ErrInvalidHeader]: a submit header's name is not an HTTP
//     token or its value holds a control character.
//   - permanent, *[StatusError]: the answer's status is a 3xx, or a 4xx other
//     than 429, or outside 200–599, e.g.
//     `webhook: item-0000000007: HTTP 422: {"error":"bad"}`. A 401 or 403
//     is also a *pipeline.CredentialRejectedError: a header resolved from
//     a secret reference is read again, bypassing the cache, and when it
//     changed (a secret rotated mid-batch) the item's next attempt sends
//     the new value, counting no attempt; else the item fails.
//   - throttled, *pipeline.ThrottledError over the *[StatusError]: the
//     answer's status is 429 or 503 (the receiver's rate or capacity).
//   - transient, *[StatusError]: the answer's status is 429 or 5xx. On a 429
//     or 503 with a Retry-After header (delta-seconds, e.g. `Retry-After:
//     20`, or an HTTP date, RFC 9110 §10.2.3), the StatusError is wrapped in
//     a *pipeline.RetryAfterError carrying that delay, capped at
//     pipeline.MaxRetryAfter (1 hour): bulkrun retries the item no sooner.
//     A date in the past, a negative or unparsable value is ignored.
//   - transient, *pipeline.TimeoutError: the request was sent and no
//     answer came within timeout_ms; the receiver may still be working on
//     it, so the worker waits at least twice timeout_ms before the item's
//     next call (ledger.TimeoutWait). Its failure class is "timeout".
//   - transient: other timeouts (connecting), connection refused or
//     reset, DNS failures, a body cut short, and cancellation of the
//     caller's context.
package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// classifyStatus is the class of a non-2xx answer (RFC 9110 §15): 429
// Too Many Requests and 503 Service Unavailable are the receiver's rate
// or capacity (*pipeline.ThrottledError, with its Retry-After, also as a
// *pipeline.RetryAfterError); other 5xx are transient; 401 Unauthorized
// and 403 Forbidden reject the credential sent
// (pipeline.CredentialRejected: permanent, but a credential from a secret
// reference is read again and, when it changed, sent by the next
// attempt); every other
// status is permanent.
func classifyStatus(serr *StatusError) error {
	var err error = serr
	switch code := serr.StatusCode; {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		err = pipeline.Throttled("http", strconv.Itoa(code), serr.RetryAfter, serr)
		if serr.RetryAfter > 0 {
			err = pipeline.RetryAfter(err, serr.RetryAfter)
		}
		return err
	case serr.Transient():
		return serr
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return pipeline.CredentialRejected(serr)
	}
	return pipeline.Permanent(serr)
}

// The headers of a suspension and of its signal (see "Suspend").
const (
	HeaderCost    = "Bulkrun-Cost"
	HeaderSuspend = "Bulkrun-Suspend"
	HeaderWakeAt  = "Bulkrun-Wake-At"
	HeaderToken   = "Bulkrun-Token"
	HeaderSignal  = "Bulkrun-Signal"
)

// suspendOf reads a suspension from resp: ok when it is a 202 with
// Bulkrun-Suspend; err names a Bulkrun-Wake-At that is not RFC 3339.
func suspendOf(key string, resp *http.Response) (*pipeline.SuspendError, bool, error) {
	reason := strings.TrimSpace(resp.Header.Get(HeaderSuspend))
	if resp.StatusCode != http.StatusAccepted || reason == "" {
		return nil, false, nil
	}
	s := &pipeline.SuspendError{Reason: reason, Token: resp.Header.Get(HeaderToken)}
	if v := strings.TrimSpace(resp.Header.Get(HeaderWakeAt)); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, false, fmt.Errorf("webhook: %s: %s %q is not an RFC 3339 time", key, HeaderWakeAt, v)
		}
		s.WakeAt = t
	}
	return s, true, nil
}

// Name is the name the pipeline is registered under.
const Name = "webhook"

// Limits and defaults.
const (
	// DefaultTimeout is the per-attempt timeout when timeout_ms is not set.
	DefaultTimeout = 10 * time.Second
	// MaxTimeout is the largest timeout_ms, as a duration: 15 minutes, the
	// Lambda maximum.
	MaxTimeout = 15 * time.Minute
	// MaxResponseBytes is the largest 2xx body taken as the item's output
	// JSON: 1 MiB. A larger body is recorded as text, cut.
	MaxResponseBytes = 1 << 20
	// MaxBodyTextBytes is the most of a non-JSON 2xx body kept in the
	// output's "body": 1 KiB.
	MaxBodyTextBytes = 1 << 10
	// MaxErrorBodyBytes is the most of a non-2xx body quoted in the error
	// message: 200 bytes.
	MaxErrorBodyBytes = 200
)

// Errors a caller can branch on with errors.Is. Run returns them wrapped in
// a *pipeline.PermanentError.
var (
	// ErrInvalidOptions means the batch's options are not valid webhook options.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrInvalidHeader means a submit header cannot be sent as an HTTP header.
	ErrInvalidHeader = errors.New("invalid header")
)

// Options is the batch's pipeline options JSON.
type Options struct {
	URL       string `json:"url"`        // absolute http or https URL; required
	TimeoutMS int64  `json:"timeout_ms"` // per-attempt timeout in milliseconds, 1–900000, default 10000
}

// StatusError is a non-2xx answer. Run returns it as is when the status is
// 429 or 5xx (transient) and wrapped in a *pipeline.PermanentError
// otherwise. Its message is `webhook: {key}: HTTP {status}: {body}`.
type StatusError struct {
	Key        string        // the item key
	StatusCode int           // the HTTP status code
	Body       string        // at most the first MaxErrorBodyBytes of the body, valid UTF-8, trimmed
	RetryAfter time.Duration // a 429's or 503's Retry-After header as a duration (delta-seconds or HTTP date), at most pipeline.MaxRetryAfter; 0 when absent, invalid or on another status
}

// Error returns `webhook: {key}: HTTP {status}: {body}`, without the last
// colon when the body is empty.
func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("webhook: %s: HTTP %d", e.Key, e.StatusCode)
	}
	return fmt.Sprintf("webhook: %s: HTTP %d: %s", e.Key, e.StatusCode, e.Body)
}

// FailureClass is "http" and the status code ("http 502"): the class
// under which a paused batch counts the failure (streak.Class).
func (e *StatusError) FailureClass() string { return "http " + strconv.Itoa(e.StatusCode) }

// Transient reports whether a retry may succeed: true for 429 and 5xx.
func (e *StatusError) Transient() bool {
	return e.StatusCode == http.StatusTooManyRequests || (e.StatusCode >= 500 && e.StatusCode <= 599)
}

// Pipeline is the webhook pipeline. It is safe for concurrent use; it is
// idempotent per item only as far as the receiver honours Idempotency-Key.
type Pipeline struct {
	client *http.Client
	allow  *egress.Policy
}

var _ pipeline.Pipeline = (*Pipeline)(nil)

// New returns the pipeline sending with client, allowing the non-public
// destinations that allow names (nil allows none; see package egress).
//
// A nil client gets a transport cloned from http.DefaultTransport (30 s
// dial timeout, 10 s TLS handshake timeout) keeping up to 32 idle
// connections per host, without a proxy, whose dialer checks every
// connection's address with allow (egress.Policy.DialContext). A caller's
// client is used as is: its transport must do that check itself (submit's
// check with allow still applies). The per-attempt timeout comes from the
// options, so client.Timeout should be 0. When client.CheckRedirect is nil,
// New uses a copy of client that does not follow redirects; the caller's
// client is not modified.
func New(client *http.Client, allow *egress.Policy) *Pipeline {
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 32
		t.Proxy = nil
		t.DialContext = allow.DialContext(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
		client = &http.Client{Transport: t}
	}
	c := *client
	if c.CheckRedirect == nil {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return &Pipeline{client: &c, allow: allow}
}

// Run POSTs req.Input to the options' URL and classifies the answer. The
// package comment lists its output, its errors and their classes.
func (p *Pipeline) Run(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
	opts, err := ParseOptions(req.Options)
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("webhook: %s: %w", req.Key, err))
	}
	target, _ := url.Parse(opts.URL) // validated by ParseOptions
	timeout := time.Duration(opts.TimeoutMS) * time.Millisecond

	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, opts.URL, bytes.NewReader(req.Input))
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("webhook: %s: %w", req.Key, err))
	}
	hreq.Header.Set("User-Agent", "bulkrun-webhook")
	for name, value := range req.Headers {
		if err := checkHeader(name, value); err != nil {
			return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("webhook: %s: %w", req.Key, err))
		}
		hreq.Header.Set(name, value)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Idempotency-Key", req.RunID)
	hreq.Header.Set("Bulkrun-Batch-Id", req.BatchID)
	hreq.Header.Set("Bulkrun-Item-Key", url.PathEscape(req.Key))
	hreq.Header.Set("Bulkrun-Attempt", strconv.Itoa(req.Attempt))
	// Only a signal's payload: a batch's own header of that name (its
	// headers are set above) would pose as a signal on every attempt.
	hreq.Header.Del(HeaderSignal)
	if len(req.Signal) > 0 {
		hreq.Header.Set(HeaderSignal, base64.RawURLEncoding.EncodeToString(req.Signal))
	}
	// The W3C trace context of the call (traceparent, tracestate when
	// there is one): the batch's trace, whatever the exporter.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hreq.Header))
	// One attempt is one request: without GetBody, net/http's transport
	// never sends the POST again on its own (it replays a request whose
	// body it can rewind when it carries an Idempotency-Key header and a
	// reused connection dies before the answer; net/http,
	// Request.isReplayable). A retry is bulkrun's: a new attempt, with its
	// own Bulkrun-Attempt.
	hreq.GetBody = nil
	// The call is spent once the whole request went out: the receiver
	// may act on it whatever happens to the answer (a timeout, the
	// caller's context ending, a connection reset), so its cost counts
	// then too. A request that never went out (refused, unresolved,
	// denied) cost nothing.
	var sent atomic.Bool
	hreq = hreq.WithContext(httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.Store(i.Err == nil) },
	}))
	spent := func() pipeline.Result {
		if sent.Load() {
			return pipeline.Result{Cost: pipeline.Cost{"calls": 1}}
		}
		return pipeline.Result{}
	}

	resp, err := p.client.Do(hreq)
	if err != nil {
		return spent(), p.transportError(ctx, req.Key, target, timeout, sent.Load(), err)
	}
	defer resp.Body.Close()

	answered := CostOf(resp.Header)
	if s, ok, err := suspendOf(req.Key, resp); ok || err != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBytes))
		called := pipeline.Result{Cost: answered}
		if err != nil {
			return called, pipeline.Permanent(err)
		}
		return called, s
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBodyBytes))
		serr := &StatusError{
			Key:        req.Key,
			StatusCode: resp.StatusCode,
			Body:       strings.TrimSpace(cutUTF8(strings.ToValidUTF8(string(head), "\uFFFD"), MaxErrorBodyBytes)),
		}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			serr.RetryAfter = RetryAfterDelay(resp.Header.Get("Retry-After"), time.Now())
		}
		// The call was made: its cost counts even when the item fails.
		called := pipeline.Result{Cost: answered}
		return called, classifyStatus(serr)
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return pipeline.Result{Cost: answered}, p.transportError(ctx, req.Key, target, timeout, true, err)
	}
	out, err := output(resp.StatusCode, body)
	if err != nil {
		return pipeline.Result{Cost: answered}, fmt.Errorf("webhook: %s: %w", req.Key, err)
	}
	return pipeline.Result{Output: out, Cost: answered}, nil
}

// CostRefused is the cost name under which CostOf counts the pairs of a
// Bulkrun-Cost header it left out.
const CostRefused = "bulkrun.cost_refused"

// CostOf is the cost of a call the receiver answered with header h:
// {"calls": 1} plus the pairs of its Bulkrun-Cost lines (see the package
// doc), each pair that is not name=amount (a finite amount ≥ 0, a name of
// 1–pipeline.MaxCostNameBytes bytes without spaces, not "calls" nor given
// twice) counted under CostRefused instead. Never fails.
func CostOf(h http.Header) pipeline.Cost {
	c := pipeline.Cost{"calls": 1}
	refused := 0
	for _, line := range h.Values(HeaderCost) {
		for _, pair := range strings.Split(line, ",") {
			pair = strings.TrimSpace(pair)
			if pair == "" {
				continue
			}
			name, amount, ok := strings.Cut(pair, "=")
			name, amount = strings.TrimSpace(name), strings.TrimSpace(amount)
			v, err := strconv.ParseFloat(amount, 64)
			_, dup := c[name]
			if !ok || err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || dup ||
				name == "" || len(name) > pipeline.MaxCostNameBytes || strings.ContainsAny(name, " \t=,") || !utf8.ValidString(name) {
				refused++
				continue
			}
			c[name] = v
		}
	}
	if refused > 0 {
		c[CostRefused] += float64(refused)
	}
	return c
}

// output turns a 2xx body into the item's output JSON.
func output(status int, body []byte) (json.RawMessage, error) {
	if len(body) <= MaxResponseBytes && len(bytes.TrimSpace(body)) > 0 {
		var b bytes.Buffer
		if json.Compact(&b, body) == nil {
			return b.Bytes(), nil
		}
	}
	o := struct {
		Status int    `json:"status"`
		Body   string `json:"body,omitempty"`
	}{Status: status}
	if len(body) > 0 {
		o.Body = cutUTF8(strings.ToValidUTF8(string(body[:min(len(body), MaxBodyTextBytes+utf8.UTFMax)]), "\uFFFD"), MaxBodyTextBytes)
	}
	return json.Marshal(o)
}

// transportError words and classifies an error from sending the request or
// reading the answer. A destination the allow-list refuses is permanent;
// all others are transient, and a timeout of a request that was sent
// (the receiver may still be working on it) is a *pipeline.TimeoutError
// of the call's timeout. The URL's path and query, which may hold a
// secret, are left out of the message.
func (p *Pipeline) transportError(ctx context.Context, key string, target *url.URL, timeout time.Duration, sent bool, err error) error {
	where := "POST " + target.Scheme + "://" + target.Host
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("webhook: %s: %s: %w", key, where, cerr)
	}
	if errors.Is(err, egress.ErrDenied) {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return pipeline.Permanent(fmt.Errorf("webhook: %s: %s: %w", key, where, err))
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var nerr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()) {
		err = fmt.Errorf("webhook: %s: %s: timed out after %s: %w", key, where, timeout, err)
		if sent {
			return pipeline.TimedOut(err, timeout)
		}
		return err
	}
	return fmt.Errorf("webhook: %s: %s: %w", key, where, err)
}

// ValidateOptions checks a batch's options (ParseOptions) before any item
// runs, and the url's host against the allow-list (egress.Policy.CheckURL:
// an address literal as is, a host name by resolving it). It implements
// pipeline.OptionsValidator; a refused url is a *pipeline.OptionError for
// option "url" wrapping ErrInvalidOptions and a *egress.DeniedError.
func (p *Pipeline) ValidateOptions(raw json.RawMessage) error {
	o, err := ParseOptions(raw)
	if err != nil {
		return err
	}
	u, _ := url.Parse(o.URL) // validated by ParseOptions
	if err := p.allow.CheckURL(context.Background(), nil, u); err != nil {
		return &pipeline.OptionError{Option: "url", Err: fmt.Errorf("%w: url: %w", ErrInvalidOptions, err)}
	}
	return nil
}

var _ pipeline.OptionsValidator = (*Pipeline)(nil)

// ParseOptions validates the batch's options JSON and returns it with the
// default timeout filled in. Its error wraps ErrInvalidOptions and names the
// option at fault. Submit can call it to refuse a batch whose options every
// item would fail on.
func ParseOptions(raw json.RawMessage) (Options, error) {
	o := Options{TimeoutMS: DefaultTimeout.Milliseconds()}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return o, fmt.Errorf("%w: url is required", ErrInvalidOptions)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field == "url":
			return o, fmt.Errorf("%w: url must be a string, got JSON %s", ErrInvalidOptions, te.Value)
		case errors.As(err, &te) && te.Field == "timeout_ms":
			return o, fmt.Errorf("%w: timeout_ms must be an integer, got JSON %s", ErrInvalidOptions, te.Value)
		case errors.As(err, &te):
			return o, fmt.Errorf("%w: want a JSON object, got JSON %s", ErrInvalidOptions, te.Value)
		}
		return o, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	if dec.More() {
		return o, fmt.Errorf("%w: trailing data after the options object", ErrInvalidOptions)
	}
	if o.URL == "" {
		return o, fmt.Errorf("%w: url is required", ErrInvalidOptions)
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return o, fmt.Errorf("%w: url is not a URL: %v", ErrInvalidOptions, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return o, fmt.Errorf("%w: url must be an absolute http or https URL, got scheme %q and host %q", ErrInvalidOptions, u.Scheme, u.Host)
	}
	if o.TimeoutMS < 1 || o.TimeoutMS > MaxTimeout.Milliseconds() {
		return o, fmt.Errorf("%w: timeout_ms must be 1–%d milliseconds, got %d", ErrInvalidOptions, MaxTimeout.Milliseconds(), o.TimeoutMS)
	}
	return o, nil
}

// checkHeader reports whether name and value can be sent as an HTTP header
// field: name a token (RFC 9110 §5.6.2), value without control characters
// other than horizontal tab.
func checkHeader(name, value string) error {
	if name == "" {
		return fmt.Errorf("%w: empty header name", ErrInvalidHeader)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("%w: header name %q: byte %d is not allowed in an HTTP header name", ErrInvalidHeader, name, i)
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Errorf("%w: header %q: value holds control character 0x%02x", ErrInvalidHeader, name, c)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// RetryAfterDelay parses a Retry-After header value (RFC 9110 §10.2.3):
// delta-seconds ("20") or an HTTP date in any of the three formats
// http.ParseTime accepts ("Sun, 06 Nov 1994 08:49:37 GMT"), relative to
// now. The result is capped at pipeline.MaxRetryAfter; an empty, negative
// or unparsable value, or a date not after now, gives 0.
func RetryAfterDelay(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseUint(v, 10, 64); err == nil {
		if s > uint64(pipeline.MaxRetryAfter/time.Second) {
			return pipeline.MaxRetryAfter
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), pipeline.MaxRetryAfter)
	}
	return 0
}

// cutUTF8 returns s cut to at most n bytes without splitting a rune.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
