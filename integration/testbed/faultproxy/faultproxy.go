// Package faultproxy is an HTTP reverse proxy that sits between AWS SDK
// callers and an AWS emulator and injects the faults the emulator never
// produces: throttling in each service's real wire shape, 500s, connection
// resets before or after the emulator saw the call, added latency, and
// batch answers rewritten into partial failures (BatchWriteItem
// UnprocessedItems, DeleteObjects per-key errors, SendMessageBatch Failed
// entries), and canned answers that stand for an account the emulator
// cannot be (KindAnswer: no API Gateway CloudWatch role, a low Lambda
// quota, a bucket in another Region). It exists for bulkrun's
// integration tests and `make soak`.
//
// # Rules
//
// A [Config] holds a seed and an ordered list of [Rule]s. For each request
// the proxy names the call ([Call]: service, operation, access key) and
// walks the rules in order: a rule that matches the call (and, with
// Rule.Path, the request's path) fires with
// probability Rate. Latency rules add their delay and the walk goes on;
// the first other rule that fires decides the request's fault, and the
// walk stops. A request no rule fires on is forwarded unchanged, and so is
// every unsigned request (health checks) and the control endpoint's own.
//
// # Reproducibility
//
// Whether rule i fires on a call is a pure function of (seed, i, service,
// operation, n), where n counts the calls of that service and operation
// since the configuration was set; which entries a partial failure takes
// is one of (seed, i, service, operation, n, entry). The same seed and the
// same sequence of calls per operation give the same faults. Concurrent
// callers interleave differently from run to run, so under concurrency
// the same faults fall on the same positions of each operation's
// sequence, not necessarily on the same requests.
//
// # Control endpoint
//
//   - POST /_faults with a JSON [Config] replaces the rules and the seed
//     and resets every counter; an invalid config is refused with 400 and
//     a message naming the rule and field (the old one stays).
//   - GET /_faults answers a [Status]: the config, the requests seen, and
//     the injected faults by kind and by "service.Operation".
//   - DELETE /_faults clears the rules and the counters.
//
// A Proxy is safe for concurrent use.
package faultproxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ControlPath is the path of the control endpoint.
const ControlPath = "/_faults"

// Kind is what a rule does to a request it fires on.
type Kind string

const (
	// KindThrottle answers with the service's throttling error without
	// calling the emulator (DynamoDB 400 ProvisionedThroughputExceededException,
	// SQS 403 RequestThrottled, S3 503 SlowDown, Lambda and API Gateway 429
	// TooManyRequestsException; Rule.Code picks another, see throttleCodes).
	KindThrottle Kind = "throttle"
	// KindServerError answers 500 in the service's shape (DynamoDB
	// InternalServerError, SQS and S3 InternalError, Lambda
	// ServiceException; API Gateway's 502 InternalServerErrorException, its
	// answer when the integration fails) without calling the emulator.
	KindServerError Kind = "server_error"
	// KindReset resets the connection (TCP RST) without calling the
	// emulator: the call had no effect.
	KindReset Kind = "reset"
	// KindResetAfter forwards the call, waits for the emulator's answer and
	// then resets the connection instead of answering: the call took
	// effect but the caller cannot know (a crash window).
	KindResetAfter Kind = "reset_after"
	// KindLatency delays the request by Rule.Delay before the rest of the
	// rules are looked at. Latency rules add up.
	KindLatency Kind = "latency"
	// KindPartial turns a batch call into a partial failure; see partialOps
	// for the calls it applies to. It is ignored on any other call.
	KindPartial Kind = "partial"
	// KindDuplicate sends the call to the emulator twice: the request, and
	// once it is answered, an identical copy whose answer is dropped (the
	// caller sees the first). On SQS SendMessage and SendMessageBatch every
	// message is then delivered twice, as a standard queue may do
	// (at-least-once delivery,
	// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/standard-queues-at-least-once-delivery.html).
	// It is ignored on S3 calls with a body other than DeleteObjects (their
	// bodies are streamed, not kept).
	KindDuplicate Kind = "duplicate"
	// KindAnswer answers the call itself with Rule.Status, Rule.Headers
	// and Rule.Body, without calling the emulator: an answer of an
	// account the emulator cannot stand for (API Gateway's GetAccount
	// without a CloudWatch role, Lambda's GetAccountSettings of a
	// low-quota account, S3's GetBucketLocation of a bucket in another
	// Region, a topic encrypted with aws/sns). The body is sent as given,
	// in the service's wire format (JSON or XML).
	KindAnswer Kind = "answer"
	// KindError answers with any error of bulkrun's error table
	// (awsfault.Table) for the call's service, in the service's wire
	// shape, without calling the emulator: Rule.Code names it (required;
	// the table's code or its alias), Rule.Status its HTTP status
	// (default the table's), Rule.Message its message. A DynamoDB
	// TransactionCanceledException carries Rule.Reasons as its
	// cancellation reasons, one per operation of the request in order
	// ("None" past the list), as DynamoDB sends them.
	KindError Kind = "error"
)

// Kinds lists every Kind.
func Kinds() []Kind {
	return []Kind{KindThrottle, KindServerError, KindReset, KindResetAfter, KindLatency, KindPartial, KindDuplicate, KindAnswer, KindError}
}

// Rule is one fault and the calls it applies to. JSON names in brackets.
type Rule struct {
	// Service [service] is the SigV4 signing name ("dynamodb", "sqs",
	// "s3", "lambda", …); "" or "*" matches every signed request.
	Service string `json:"service,omitempty"`
	// Operations [operations] are operation names ("BatchWriteItem",
	// "SendMessageBatch", "PutObject", "Invoke", …); empty matches every
	// operation of the service.
	Operations []string `json:"operations,omitempty"`
	// AccessKey [access_key], if set, matches only requests signed with
	// that access key id ("000000000000": MiniStack's deployed functions).
	AccessKey string `json:"access_key,omitempty"`
	// Contains [contains], if set, matches only requests whose body
	// contains it. Bodies are read for every service but S3 (where only
	// DeleteObjects bodies are), so it never matches other S3 calls.
	Contains string `json:"contains,omitempty"`
	// Path [path], if set, matches only requests whose URL path contains
	// it: an S3 bucket ("/src-eu"), a Lambda function's name.
	Path string `json:"path,omitempty"`
	// Kind [kind] is the fault. Required.
	Kind Kind `json:"kind"`
	// Rate [rate] is the probability in [0, 1] that the rule fires on a
	// matching call.
	Rate float64 `json:"rate"`
	// Max [max], if > 0, is how many times the rule fires at most.
	Max int `json:"max,omitempty"`
	// Delay [delay_ms] is the latency added by KindLatency, in
	// milliseconds in JSON; required (> 0) for it, at most one minute.
	Delay Millis `json:"delay_ms,omitempty"`
	// Code [code] is the error code: for KindThrottle one of the
	// service's throttling codes (default the first); for KindPartial the
	// per-entry code (default "InternalError"); for KindError a code of
	// awsfault.Table for the service (required).
	Code string `json:"code,omitempty"`
	// Message [message] is the per-entry message of KindPartial, or the
	// message of KindError (default its code).
	Message string `json:"message,omitempty"`
	// Status [status] is the HTTP status of KindError (default the
	// table's for its code), and KindAnswer's, 100–599, required for it.
	Status int `json:"status,omitempty"`
	// Reasons [reasons] are the cancellation reasons of a KindError
	// TransactionCanceledException (DynamoDB), by the position of the
	// request's operations.
	Reasons []string `json:"reasons,omitempty"`
	// SenderFault [sender_fault] marks SQS Failed entries of KindPartial
	// as the sender's fault (default false: a transient failure).
	SenderFault bool `json:"sender_fault,omitempty"`
	// Fraction [fraction] is the share of a batch's entries KindPartial
	// fails, each independently, at least one; default 0.5.
	Fraction float64 `json:"fraction,omitempty"`
	// Headers [headers] are KindAnswer's response headers (Content-Type
	// among them: default application/json); each a single value.
	Headers map[string]string `json:"headers,omitempty"`
	// Body [body] is KindAnswer's response body, sent as given.
	Body string `json:"body,omitempty"`
}

// Millis is a duration written in JSON as a number of milliseconds.
type Millis time.Duration

// MarshalJSON writes whole milliseconds.
func (m Millis) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(m).Milliseconds())
}

// UnmarshalJSON reads a number of milliseconds.
func (m *Millis) UnmarshalJSON(b []byte) error {
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("milliseconds: %w", err)
	}
	*m = Millis(time.Duration(ms * float64(time.Millisecond)))
	return nil
}

// Config is what POST /_faults takes: {"seed": 1, "rules": [...], "api":
// {...}}. API holds the rules of API Gateway the proxy applies to
// execute-api calls (APIGateway); its zero value throttles nothing and
// keeps the machine's clock, and the payload and signature-time rules
// always apply.
type Config struct {
	Seed  int64      `json:"seed"`
	Rules []Rule     `json:"rules"`
	API   APIGateway `json:"api,omitzero"`
}

// Validate returns an error naming the first rule and field at fault.
func (c Config) Validate() error {
	if err := c.API.validate(); err != nil {
		return err
	}
	for i, r := range c.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		switch r.Kind {
		case KindThrottle, KindServerError, KindReset, KindResetAfter, KindLatency, KindPartial, KindDuplicate, KindAnswer, KindError:
		case "":
			return fmt.Errorf("%s.kind: missing (one of %v)", at, Kinds())
		default:
			return fmt.Errorf("%s.kind: %q is not one of %v", at, r.Kind, Kinds())
		}
		if math.IsNaN(r.Rate) || r.Rate < 0 || r.Rate > 1 {
			return fmt.Errorf("%s.rate: %v is outside [0, 1]", at, r.Rate)
		}
		if r.Max < 0 {
			return fmt.Errorf("%s.max: %d is negative", at, r.Max)
		}
		if r.Kind == KindLatency && (r.Delay <= 0 || time.Duration(r.Delay) > time.Minute) {
			return fmt.Errorf("%s.delay_ms: latency needs a delay in (0, 60000] ms, got %d", at, time.Duration(r.Delay).Milliseconds())
		}
		if r.Kind != KindLatency && r.Delay != 0 {
			return fmt.Errorf("%s.delay_ms: only for kind latency", at)
		}
		if r.Kind == KindThrottle && r.Code != "" {
			if _, ok := throttleShape(strings.ToLower(r.Service), r.Code); !ok {
				return fmt.Errorf("%s.code: %q is not a throttling code of %q", at, r.Code, r.Service)
			}
		}
		if r.Kind != KindThrottle && r.Kind != KindPartial && r.Kind != KindError && r.Code != "" {
			return fmt.Errorf("%s.code: only for kinds throttle, partial and error", at)
		}
		if r.Kind == KindError {
			if err := validateError(r); err != nil {
				return fmt.Errorf("%s.%w", at, err)
			}
		} else if r.Status != 0 && r.Kind != KindAnswer || len(r.Reasons) > 0 {
			return fmt.Errorf("%s: status is only for kinds error and answer, reasons for error", at)
		}
		if r.Kind == KindPartial {
			if len(r.Operations) == 0 {
				return fmt.Errorf("%s.operations: partial needs one of %s", at, partialList())
			}
			for _, op := range r.Operations {
				if !partialOps[strings.ToLower(r.Service)+"."+op] {
					return fmt.Errorf("%s.operations: %s.%s has no partial failure (one of %s)", at, r.Service, op, partialList())
				}
			}
			if math.IsNaN(r.Fraction) || r.Fraction < 0 || r.Fraction > 1 {
				return fmt.Errorf("%s.fraction: %v is outside [0, 1]", at, r.Fraction)
			}
		} else if r.Fraction != 0 || r.SenderFault || r.Message != "" && r.Kind != KindError {
			return fmt.Errorf("%s: fraction and sender_fault are only for kind partial, message for partial and error", at)
		}
		if r.Kind == KindAnswer && (r.Status < 100 || r.Status > 599) {
			return fmt.Errorf("%s.status: answer needs an HTTP status in [100, 599], got %d", at, r.Status)
		}
		if r.Kind != KindAnswer && (r.Headers != nil || r.Body != "") {
			return fmt.Errorf("%s: headers and body are only for kind answer", at)
		}
	}
	return nil
}

func partialList() string {
	ops := make([]string, 0, len(partialOps))
	for op := range partialOps {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return strings.Join(ops, ", ")
}

func (r Rule) matches(c Call, body []byte) bool {
	if r.Service != "" && r.Service != "*" && !strings.EqualFold(r.Service, c.Service) {
		return false
	}
	if len(r.Operations) > 0 {
		ok := false
		for _, op := range r.Operations {
			if op == c.Operation {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if r.AccessKey != "" && r.AccessKey != c.AccessKey {
		return false
	}
	if r.Contains != "" && (body == nil || !bytes.Contains(body, []byte(r.Contains))) {
		return false
	}
	return true
}

// matchesPath says whether the rule's Path (if any) is in the request's
// URL path.
func (r Rule) matchesPath(path string) bool {
	return r.Path == "" || strings.Contains(path, r.Path)
}

// Status is what GET /_faults answers.
type Status struct {
	Config Config `json:"config"`
	// Requests counts the requests forwarded or faulted since the config
	// was set (control requests excluded).
	Requests int64 `json:"requests"`
	// Injected counts the faults by kind (latency included).
	Injected map[Kind]int64 `json:"injected"`
	// ByCall counts the faults by "service.Operation", then kind.
	ByCall map[string]map[Kind]int64 `json:"by_call"`
	// Fired counts how often each rule fired, by position.
	Fired []int64 `json:"fired"`
	// Gateway counts the execute-api calls the proxy answered as API
	// Gateway (APIGateway), by kind: GatewayThrottled, GatewaySignature,
	// GatewayTooLarge.
	Gateway map[string]int64 `json:"gateway"`
}

// Proxy is the fault-injecting reverse proxy; an http.Handler. Build it
// with New.
type Proxy struct {
	upstream *url.URL
	rp       *httputil.ReverseProxy
	log      *slog.Logger

	mu       sync.Mutex
	gate     Gate
	cfg      Config
	seq      map[string]uint64
	requests int64
	injected map[Kind]int64
	byCall   map[string]map[Kind]int64
	fired    []int64
	// now is the machine's clock (time.Now; a test's own in tests);
	// buckets the stages' token buckets and gateway the APIGateway counts.
	now     func() time.Time
	buckets map[string]*bucket
	gateway map[string]int64
}

// EmulatorKeepAlive is how long MiniStack keeps an idle connection open:
// its server (Hypercorn) closes one idle that long (ministack/app.py:
// config.keep_alive_timeout = 75). A request that reaches it as it does
// so is applied and not answered (hypercorn/asyncio/tcp_server.py:
// _idle_timeout closes the connection under the request it has just
// read), and the caller's SDK sends it again: a SendMessageBatch sent
// twice, a conditional write refused by its own first try.
const EmulatorKeepAlive = 75 * time.Second

// UpstreamIdleTimeout is how long the proxy keeps an idle connection to
// the emulator: well under EmulatorKeepAlive, so that the proxy closes it
// first and never sends on one the emulator is closing.
const UpstreamIdleTimeout = 30 * time.Second

// New returns a Proxy that forwards to upstream (e.g.
// "http://127.0.0.1:4566"), with no rules. log receives one line per
// injected fault at debug level and forwarding errors at warn; nil
// discards them.
func New(upstream string, log *slog.Logger) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q is not an absolute URL", upstream)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{upstream: u, log: log, now: time.Now}
	p.reset(Config{})
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	transport.IdleConnTimeout = UpstreamIdleTimeout
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // the emulator builds URLs from it
		},
		Transport:      transport,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
	}
	return p, nil
}

// Set replaces the config and resets the counters; it returns
// Config.Validate's error and keeps the old config then.
func (p *Proxy) Set(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	p.reset(c)
	return nil
}

func (p *Proxy) reset(c Config) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Rules == nil {
		c.Rules = []Rule{}
	}
	p.cfg = c
	p.seq = map[string]uint64{}
	p.requests = 0
	p.injected = map[Kind]int64{}
	p.byCall = map[string]map[Kind]int64{}
	p.fired = make([]int64, len(c.Rules))
	p.buckets = map[string]*bucket{}
	p.gateway = map[string]int64{}
}

// Status returns the config and the counters.
func (p *Proxy) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{Config: p.cfg, Requests: p.requests, Injected: map[Kind]int64{}, ByCall: map[string]map[Kind]int64{}, Fired: append([]int64{}, p.fired...), Gateway: map[string]int64{}}
	for k, v := range p.gateway {
		s.Gateway[k] = v
	}
	for k, v := range p.injected {
		s.Injected[k] = v
	}
	for c, m := range p.byCall {
		s.ByCall[c] = map[Kind]int64{}
		for k, v := range m {
			s.ByCall[c][k] = v
		}
	}
	return s
}

// decision is what the rules decided for one request.
type decision struct {
	call  Call
	delay time.Duration
	kind  Kind // "" forwards unchanged
	rule  Rule
	index int
	n     uint64
	seed  int64
}

type ctxKey struct{}

// unit returns a number in [0, 1) that depends only on its arguments.
func unit(seed int64, rule int, call string, n uint64, entry int) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	binary.LittleEndian.PutUint64(b[:], uint64(rule))
	h.Write(b[:])
	h.Write([]byte(call))
	binary.LittleEndian.PutUint64(b[:], n)
	h.Write(b[:])
	binary.LittleEndian.PutUint64(b[:], uint64(entry))
	h.Write(b[:])
	// splitmix64 finaliser: FNV's low bits are weak on short inputs.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

func (p *Proxy) decide(c Call, path string, body []byte, kept bool) decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	key := c.String()
	n := p.seq[key]
	p.seq[key] = n + 1
	d := decision{call: c, n: n, seed: p.cfg.Seed}
	for i, r := range p.cfg.Rules {
		if !r.matches(c, body) || !r.matchesPath(path) || (r.Max > 0 && p.fired[i] >= int64(r.Max)) {
			continue
		}
		if (r.Kind == KindPartial && !partialOps[key]) || (r.Kind == KindDuplicate && !kept) {
			continue
		}
		if unit(p.cfg.Seed, i, key, n, -1) >= r.Rate {
			continue
		}
		p.fired[i]++
		p.injected[r.Kind]++
		if p.byCall[key] == nil {
			p.byCall[key] = map[Kind]int64{}
		}
		p.byCall[key][r.Kind]++
		if r.Kind == KindLatency {
			d.delay += time.Duration(r.Delay)
			continue
		}
		d.kind, d.rule, d.index = r.Kind, r, i
		break
	}
	return d
}

// ServeHTTP serves the control endpoint and proxies everything else.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == ControlPath {
		p.control(w, r)
		return
	}
	gate := p.currentGate()
	if gate != nil && isGatePath(r.URL.Path) {
		gate.ServeHTTP(w, r)
		return
	}
	var body []byte
	kept := r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0
	if !kept && p.wantsBody(r) {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			http.Error(w, "faultproxy: read request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		_ = r.Body.Close()
		r.Body = readCloser(body)
		kept = true
	}
	c := classify(r, body)
	if c.Service == "" {
		p.rp.ServeHTTP(w, r)
		return
	}
	if c.Service == "execute-api" {
		if p.apiGateway(w, r, body) {
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), apiGatewayKey{}, true))
	}
	if gate != nil {
		if f := gate.Admit(r, c, body); f != nil {
			if r = p.refuse(w, r, c, body, f, fmt.Sprintf("gate-%s", c.String())); r == nil {
				return
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), gateKey{}, gateCall{gate, c}))
	}
	d := p.decide(c, r.URL.Path, body, kept)
	if d.kind != "" || d.delay > 0 {
		p.log.Debug("fault", "call", c.String(), "kind", string(d.kind), "delay_ms", d.delay.Milliseconds(), "n", d.n)
	}
	if d.delay > 0 {
		t := time.NewTimer(d.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	requestID := fmt.Sprintf("faultproxy-%d-%s-%d", d.seed, c.String(), d.n)
	switch d.kind {
	case KindThrottle:
		e, _ := throttleShape(c.Service, d.rule.Code)
		writeError(w, r, c, e, requestID)
		return
	case KindServerError:
		writeError(w, r, c, serverShape(c.Service), requestID)
		return
	case KindError:
		writeError(w, r, c, tableShape(c.Service, d.rule, body), requestID)
		return
	case KindReset:
		reset(w)
		return
	case KindAnswer:
		writeAnswer(w, d.rule, requestID)
		return
	case KindPartial:
		pt := &partial{call: c, rule: d.rule}
		out, err := pt.rewriteRequest(body, func(j int) float64 { return unit(d.seed, d.index, c.String(), d.n, j) })
		if err != nil {
			p.log.Warn("partial failure not applied", "call", c.String(), "error", err.Error())
			break
		}
		if pt.none {
			resp, err := pt.rewriteResponse(nil)
			if err != nil {
				p.log.Warn("partial failure not applied", "call", c.String(), "error", err.Error())
				break
			}
			w.Header().Set("Content-Type", pt.contentType())
			fixHeaders(w.Header(), c, resp)
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(resp)
			return
		}
		setBody(r, out)
		r = r.WithContext(context.WithValue(r.Context(), partialKey{}, pt))
	case KindResetAfter:
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, &d))
	case KindDuplicate:
		dup := r.Clone(r.Context())
		if body != nil {
			dup.Body = readCloser(body)
		}
		r = r.WithContext(context.WithValue(r.Context(), duplicateKey{}, dup))
	}
	p.rp.ServeHTTP(w, r)
}

type partialKey struct{}

// apiGatewayKey marks an execute-api call, whose answer gets the proxy's
// Date.
type apiGatewayKey struct{}

// gateKey carries the gate and call of an admitted request to its answer.
type gateKey struct{}

type gateCall struct {
	gate Gate
	call Call
}

func contextWithPartial(r *http.Request, pt *partial) context.Context {
	return context.WithValue(r.Context(), partialKey{}, pt)
}

type duplicateKey struct{}

// sendCopy sends the copy of a request KindDuplicate keeps and drops the
// answer.
func (p *Proxy) sendCopy(dup *http.Request) {
	out := dup.Clone(context.WithoutCancel(dup.Context()))
	out.Body = dup.Body
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.upstream.Scheme, p.upstream.Host
	out.Host = dup.Host
	resp, err := p.rp.Transport.RoundTrip(out)
	if err != nil {
		p.log.Warn("duplicate not sent", "path", dup.URL.Path, "error", err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// wantsBody says whether the request body is read before forwarding: every
// non-S3 body (small JSON or form bodies) and S3 DeleteObjects.
func (p *Proxy) wantsBody(r *http.Request) bool {
	svc, _ := credentialScope(r)
	if svc != "s3" {
		return true
	}
	_, del := r.URL.Query()["delete"]
	return del && r.Method == http.MethodPost
}

var errResetAfter = errors.New("faultproxy: reset after the emulator answered")

func (p *Proxy) modifyResponse(resp *http.Response) error {
	ctx := resp.Request.Context()
	if ctx.Value(apiGatewayKey{}) != nil {
		resp.Header.Set("Date", p.clock().Format(http.TimeFormat))
	}
	if dup, ok := ctx.Value(duplicateKey{}).(*http.Request); ok {
		p.sendCopy(dup)
	}
	if d, ok := ctx.Value(ctxKey{}).(*decision); ok && d.kind == KindResetAfter {
		_, _ = io.Copy(io.Discard, resp.Body)
		return errResetAfter
	}
	if g, ok := ctx.Value(gateKey{}).(gateCall); ok {
		if rw, ok := g.gate.(ResponseRewriter); ok {
			rw.Rewrite(resp, g.call)
		}
		if f := g.gate.Answered(resp.Request, g.call, resp.StatusCode, resp.Header); f != nil {
			replaceAnswer(resp, g.call, f)
			return nil
		}
	}
	pt, ok := ctx.Value(partialKey{}).(*partial)
	if !ok || resp.StatusCode != http.StatusOK {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	out, err := pt.rewriteResponse(body)
	if err != nil {
		p.log.Warn("partial failure answer not rewritten", "call", pt.call.String(), "error", err.Error())
		out = body
	}
	fixHeaders(resp.Header, pt.call, out)
	resp.ContentLength = int64(len(out))
	resp.Body = readCloser(out)
	return nil
}

func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errResetAfter) {
		reset(w)
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	p.log.Warn("forward", "path", r.URL.Path, "error", err.Error())
	w.WriteHeader(http.StatusBadGateway)
}

// reset ends the request's connection with a TCP RST, answering nothing.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func (p *Proxy) control(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		var c Config
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			http.Error(w, "faultproxy: config: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := p.Set(c); err != nil {
			http.Error(w, "faultproxy: config: "+err.Error(), http.StatusBadRequest)
			return
		}
	case http.MethodDelete:
		p.reset(Config{})
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "faultproxy: GET, POST or DELETE", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p.Status())
}

func readCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// writeAnswer sends a KindAnswer rule's canned answer, with the request
// ids the SDKs read.
func writeAnswer(w http.ResponseWriter, r Rule, requestID string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	for k, v := range r.Headers {
		h.Set(k, v)
	}
	h.Set("X-Amzn-Requestid", requestID)
	h.Set("X-Amz-Request-Id", requestID)
	h.Set("Content-Length", strconv.Itoa(len(r.Body)))
	w.WriteHeader(r.Status)
	_, _ = io.WriteString(w, r.Body)
}
