//go:build integration

// Package integration holds bulkrun's end-to-end tests. They run against
// the stack deployed onto the endpoint in AWS_ENDPOINT_URL (MiniStack or
// LocalStack; `make integration` deploys it first) and fail, not skip,
// under CI=true when it is missing. Each test uses its own batch ids.
//
// Most of the suite's time is waiting on the emulator (visibility
// timeouts, retry waits, a receiver down for a minute), so the tests that
// share no mutable state with others call t.Parallel(): those on a
// harness of their own (its table, bucket and queue) and those on the
// stack whose batches, receiver routes, prefixes or queues are their own.
// Go runs them together once every other test has ended (`make
// integration` runs 16 at a time: -parallel 16). A test stays
// serial when it redeploys or changes a stack-wide setting, drives the
// stack's fault proxy (stackFaults), reads stack-wide state (metrics,
// alarms, logs, listings of every batch, the shared queues), or measures
// this process's memory or wall time.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/function"
)

// env is what every test shares: the deployed stack and clients.
var env struct {
	aws                  aws.Config
	stack                client.Stack
	api                  *client.Client
	s3                   *s3.Client
	sqs                  *sqs.Client
	ddb                  *dynamodb.Client
	lambda               *lambda.Client
	bucket, table        string
	queueURL, finalizeFn string
	submitFn             string
	store                *dynamo.Store
	blobs                *blob.Store
	hook                 *hookServer
}

func TestMain(m *testing.M) {
	if os.Getenv("AWS_ENDPOINT_URL") == "" {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "integration: AWS_ENDPOINT_URL is not set; under CI=true the suite must run (start the emulator and deploy: make integration)")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "integration: AWS_ENDPOINT_URL is not set; skipping (set it, or run make integration)")
		os.Exit(0)
	}
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: set-up:", err)
		os.Exit(1)
	}
	code := m.Run()
	env.hook.close()
	if !laneSummary() && code == 0 {
		code = 1
	}
	os.Exit(code)
}

func setup() error {
	ctx := context.Background()
	c, err := function.AWSConfig(ctx)
	if err != nil {
		return err
	}
	env.aws = c
	name := os.Getenv("BULKRUN_STACK")
	if name == "" {
		name = config.DefaultStackName
	}
	if env.stack, err = client.FindStack(ctx, c, name); err != nil {
		return fmt.Errorf("%w (deploy the stack first: make deploy)", err)
	}
	if env.api, err = client.New(c, env.stack); err != nil {
		return err
	}
	for key, dst := range map[string]*string{
		config.OutputBucket: &env.bucket, config.OutputTable: &env.table, config.OutputItemsQueueURL: &env.queueURL,
		config.OutputFinalizeFunction: &env.finalizeFn, config.OutputSubmitFunction: &env.submitFn,
	} {
		if *dst, err = env.stack.Get(key); err != nil {
			return err
		}
	}
	env.s3 = function.NewS3(c)
	env.sqs = sqs.NewFromConfig(c)
	env.ddb = dynamodb.NewFromConfig(c)
	env.lambda = lambda.NewFromConfig(c)
	env.store = dynamo.New(env.ddb, env.table)
	env.blobs = blob.New(env.s3, env.bucket)
	env.hook, err = newHookServer()
	if err != nil {
		return err
	}
	return laneReset()
}

// newID returns a batch id unique to this test run.
func newID(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	id := fmt.Sprintf("it-%s-%s", name, hex.EncodeToString(b[:]))
	laneTrack(t, id)
	return id
}

// hookServer is the HTTP receiver of the webhook pipeline in the tests: a
// route per test decides each call's status, and every call is counted.
type hookServer struct {
	srv    *http.Server
	ln     net.Listener
	mu     sync.Mutex
	routes map[string]func(key string, attempt int) int
	byReq  map[string]func(r *http.Request) int // routes deciding on the whole request (routeRequest)
	// byAnswer: routes that also set the answer's headers (routeAnswer).
	byAnswer map[string]func(w http.ResponseWriter, r *http.Request, key string, body []byte) int
	calls    map[string]map[string]int
	header   map[string]http.Header // the last request's headers per route
	// inputs holds, per route of routeInput, each item's request bodies
	// (its input) in arrival order; byInput decides those routes' calls.
	inputs  map[string]map[string][]string
	byInput map[string]func(key string, input []byte) int
	// span holds, per route, when its first and its last call arrived
	// (the receiver's own clock), for tests that time a batch by its
	// calls (callSpan).
	span map[string][2]time.Time
}

func newHookServer() (*hookServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hookServer{ln: ln, routes: map[string]func(string, int) int{}, calls: map[string]map[string]int{}, header: map[string]http.Header{},
		byReq: map[string]func(*http.Request) int{}, byAnswer: map[string]func(http.ResponseWriter, *http.Request, string, []byte) int{},
		inputs: map[string]map[string][]string{}, byInput: map[string]func(string, []byte) int{}, span: map[string][2]time.Time{}}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go h.srv.Serve(ln)
	return h, nil
}

func (h *hookServer) close() { _ = h.srv.Close() }

// route registers a route and returns its URL; decide gives the status of
// each call (nil: always 200).
func (h *hookServer) route(name string, decide func(key string, attempt int) int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.routes[name] = decide
	h.calls[name] = map[string]int{}
	return "http://" + h.ln.Addr().String() + "/" + url.PathEscape(name)
}

// routeOwn is route on a listener of its own, closed when t ends: its
// receiver is a downstream of its own (a batch with no rate is paced on
// its webhook's host and port, docs/adr/0036), so that the 429 and 503
// it answers pace no other test's batches.
func (h *hookServer) routeOwn(t *testing.T, name string, decide func(key string, attempt int) int) string {
	t.Helper()
	u := h.route(name, decide)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return strings.Replace(u, h.ln.Addr().String(), ln.Addr().String(), 1)
}

// routeInput is route whose calls are decided by the item's input (the
// request body) and whose inputs are kept (inputsOf).
func (h *hookServer) routeInput(name string, decide func(key string, input []byte) int) string {
	u := h.route(name, nil)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byInput[name], h.inputs[name] = decide, map[string][]string{}
	return u
}

// inputsOf returns the inputs a routeInput route received for key.
func (h *hookServer) inputsOf(name, key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.inputs[name][key]...)
}

// routeRequest is route with a decision on the whole request (its
// headers, say).
func (h *hookServer) routeRequest(name string, decide func(r *http.Request) int) string {
	u := h.route(name, nil)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byReq[name] = decide
	return u
}

// routeAnswer is route with a decision on the whole request that may set
// the answer's headers on w (before the status is written).
func (h *hookServer) routeAnswer(name string, decide func(w http.ResponseWriter, r *http.Request, key string, body []byte) int) string {
	u := h.route(name, nil)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byAnswer[name] = decide
	return u
}

// counts returns a copy of the calls per item key of a route.
func (h *hookServer) counts(name string) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.calls[name] {
		out[k] = v
	}
	return out
}

// callSpan returns when the route's first and last calls arrived; zero
// times when it had none.
func (h *hookServer) callSpan(name string) (first, last time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := h.span[name]
	return sp[0], sp[1]
}

// lastHeader returns the headers of the route's last request.
func (h *hookServer) lastHeader(name string) http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.header[name]
}

func (h *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, _ := url.PathUnescape(strings.Trim(r.URL.EscapedPath(), "/"))
	key, _ := url.PathUnescape(r.Header.Get("Bulkrun-Item-Key"))
	attempt, _ := strconv.Atoi(r.Header.Get("Bulkrun-Attempt"))
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	h.mu.Lock()
	decide, ok := h.routes[name]
	byInput := h.byInput[name]
	byReq := h.byReq[name]
	byAnswer := h.byAnswer[name]
	if ok {
		h.calls[name][key]++
		h.header[name] = r.Header.Clone()
		now, sp := time.Now(), h.span[name]
		if sp[0].IsZero() {
			sp[0] = now
		}
		sp[1] = now
		h.span[name] = sp
		if byInput != nil {
			h.inputs[name][key] = append(h.inputs[name][key], string(body))
		}
	}
	h.mu.Unlock()
	status := http.StatusOK
	switch {
	case !ok:
		status = http.StatusNotFound
	case byInput != nil:
		status = byInput(key, body)
	case byReq != nil:
		status = byReq(r)
	case byAnswer != nil:
		status = byAnswer(w, r, key, body)
	case decide != nil:
		status = decide(key, attempt)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"key": key, "status": status})
}

// wait polls the batch until its run is finished (3 minutes at most).
func wait(t *testing.T, id string) handler.BatchView {
	t.Helper()
	return waitWithin(t, id, 3*time.Minute)
}

// waitWithin is wait with its own bound, for a batch whose pace makes it
// run for minutes by design. The bound catches a batch that never
// finishes; it is not a measure of speed.
func waitWithin(t *testing.T, id string, limit time.Duration) handler.BatchView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	v, err := env.api.Wait(ctx, id, 500*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	return v
}
