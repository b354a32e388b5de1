//go:build integration

package integration

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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/apigw"
	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// gatewayProxy stands in front of the emulator's API as API Gateway does
// when an integration outlives its 29 s timeout: it forwards each request
// and waits for the answer, but answers the first timeouts POST /batches
// with 504 {"message": "Endpoint request timed out"}, so the caller never
// learns what the submit did. Being the gateway the caller talks to, it
// checks the caller's signature for its own address (apigw.Verify) and
// signs what it forwards for the emulator's.
type gatewayProxy struct {
	upstream string // the API base URL
	timeouts int
	srv      *http.Server
	ln       net.Listener

	mu    sync.Mutex
	posts []forwarded
}

// forwarded is one POST /batches the proxy forwarded: the request body and
// the API's real answer, and what the caller got.
type forwarded struct {
	body     []byte
	status   int // the API's
	answer   []byte
	answered int // the caller's
}

func newGatewayProxy(t *testing.T, upstream string, timeouts int) *gatewayProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gatewayProxy{upstream: strings.TrimRight(upstream, "/"), timeouts: timeouts, ln: ln}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go p.srv.Serve(ln)
	t.Cleanup(func() { p.srv.Close() })
	return p
}

func (p *gatewayProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *gatewayProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := apigw.Verify(r, body, map[string]string{"test": "test"}); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": err.Error()})
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
	creds, err := env.aws.Credentials.Retrieve(r.Context())
	sum := sha256.Sum256(body)
	if err == nil {
		err = v4.NewSigner().SignHTTP(r.Context(), creds, req, hex.EncodeToString(sum[:]), apigw.Service, env.aws.Region, time.Now())
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	status := resp.StatusCode
	if r.Method == http.MethodPost && r.URL.Path == "/batches" {
		p.mu.Lock()
		f := forwarded{body: body, status: status, answer: answer, answered: status}
		if len(p.posts) < p.timeouts {
			f.answered = http.StatusGatewayTimeout
		}
		p.posts = append(p.posts, f)
		p.mu.Unlock()
		if f.answered == http.StatusGatewayTimeout {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = w.Write([]byte(`{"message": "Endpoint request timed out"}`))
			return
		}
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

func (p *gatewayProxy) forwarded() []forwarded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]forwarded(nil), p.posts...)
}

// apiBase is the emulator's URL of the stack's API (what shared/client
// derives from AWS_ENDPOINT_URL).
func apiBase(t *testing.T) string {
	id, err := env.stack.Get(config.OutputAPIID)
	if err != nil {
		t.Fatal(err)
	}
	stage := env.stack[config.OutputAPIStage]
	if stage == "" {
		stage = config.DefaultAPIStage
	}
	return strings.TrimRight(os.Getenv("AWS_ENDPOINT_URL"), "/") + "/restapis/" + id + "/" + stage + "/_user_request_"
}

// Submit past the gateway timeout, point 1: the real CLI submits a local
// file of 40 items through a proxy that answers 504 to its first two tries
// after the API got them (as API Gateway does past 29 s). The CLI prints
// the batch id it chose before the first try, retries with that same id,
// and watches the batch to the end: one batch, one manifest, and exactly
// one webhook call per item. Guards docs/cli.md "Reaching the stack, submitting, watching" (retries)
// and docs/design.md invariant 1 (one id, one plan).
func TestSubmitRetriedPastGatewayTimeout(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	proxy := newGatewayProxy(t, apiBase(t), 2)
	route := "retried-" + newID(t)
	hook := env.hook.route(route, nil)
	var src bytes.Buffer
	const n = 40
	for i := range n {
		fmt.Fprintf(&src, "{\"k\":\"order-%02d\",\"qty\":%d}\n", i, i)
	}
	file := filepath.Join(t.TempDir(), "orders.jsonl")
	if err := os.WriteFile(file, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "submit", file, "--pipeline", "webhook", "--key-field", "k",
		"--options", fmt.Sprintf(`{"url":%q}`, hook), "--watch", "--output", "json")
	cmd.Env = append(os.Environ(), client.EnvAPIURL+"="+proxy.url())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("bulkrun submit → %v\n%s", err, stderr.String())
	if err != nil {
		t.Fatalf("submit --watch failed: %v", err)
	}
	var v handler.BatchView
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
		t.Fatalf("printed %q: %v", stdout.String(), err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), v.ID) })
	if first, _, _ := strings.Cut(stderr.String(), "\n"); first != "batch "+v.ID+": submitting" {
		t.Errorf("first line on stderr %q, want the batch id before the first try", first)
	}

	posts := proxy.forwarded()
	if len(posts) < 3 {
		t.Fatalf("%d submits reached the API, want the two that timed out and a retry", len(posts))
	}
	for i, p := range posts {
		var req api.SubmitRequest
		if err := json.Unmarshal(p.body, &req); err != nil || req.BatchID != v.ID {
			t.Errorf("try %d named batch %q (%v), want %s", i+1, req.BatchID, err, v.ID)
		}
		var got handler.BatchView
		if err := json.Unmarshal(p.answer, &got); err != nil || p.status/100 != 2 || got.Created == nil || *got.Created != (i == 0) {
			t.Errorf("try %d: the API answered %d %s, want 2xx created=%v", i+1, p.status, p.answer, i == 0)
		}
	}
	if posts[0].status != http.StatusAccepted || posts[0].answered != http.StatusGatewayTimeout || posts[1].answered != http.StatusGatewayTimeout {
		t.Errorf("first tries: API %d, caller %d and %d; want 202 answered 504 twice", posts[0].status, posts[0].answered, posts[1].answered)
	}

	if v.Status != api.StatusCompleted || v.ItemCount != n || v.Census == nil || v.Census.Succeeded != n {
		t.Fatalf("batch %s: %s, %d items, census %+v", v.ID, v.Status, v.ItemCount, v.Census)
	}
	calls := env.hook.counts(route)
	total := 0
	for k, c := range calls {
		total += c
		if c != 1 {
			t.Errorf("item %s: %d calls", k, c)
		}
	}
	if len(calls) != n || total != n {
		t.Errorf("%d items called %d times, want %d once each", len(calls), total, n)
	}
	out, err := env.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String("batches/" + v.ID + "/manifests/")})
	if err != nil || len(out.Contents) != 1 {
		t.Errorf("manifests of %s: %d (%v), want 1", v.ID, len(out.Contents), err)
	}
}

// Submit past the gateway timeout, point 1: while a batch is submitting, a
// submit with the same id and another request is refused naming the field
// (409), and the same request answers the same batch (202, created false).
// Here the accepted batch's hand-off was lost (the row is put directly), so
// that repeat also hands the read off again: the batch then runs, each
// item once. Guards docs/api.md "Using it" (POST /batches answers).
func TestRepeatedSubmitWhileSubmitting(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	hook := env.hook.route(id, nil)
	uri := putObject(t, "it-sources/"+id+".jsonl", "{\"k\":\"a\"}\n{\"k\":\"b\"}\n{\"k\":\"c\"}\n")
	otherURI := putObject(t, "it-sources/"+id+"-other.jsonl", "{\"k\":\"a\"}\n")
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", Source: api.SourceSpec{Object: uri},
		Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, hook))}
	stored := req
	// the stack's defaults, as submit fills them
	stored.MaxAttempts, stored.OnInterrupt, stored.ItemsPerMessage = 3, api.InterruptRetry, config.DefaultItemsPerMessage
	raw, _ := json.Marshal(stored)
	now := time.Now().UTC()
	if _, err := env.store.CreateBatch(ctx, ledger.Batch{
		Batch: api.Batch{
			ID:           id,
			Plan:         api.Plan{Pipeline: "webhook", MaxAttempts: 3, ItemsPerMessage: config.DefaultItemsPerMessage, OnInterrupt: api.InterruptRetry, Options: stored.Options},
			Run:          1,
			Status:       api.StatusSubmitting,
			KeyField:     "k",
			Source:       uri,
			CreatedAt:    now,
			RunStartedAt: now,
		},
		Request: raw,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })

	for _, tt := range []struct {
		field string
		edit  func(*api.SubmitRequest)
	}{
		{"key_field", func(r *api.SubmitRequest) { r.KeyField = "other" }},
		{"source", func(r *api.SubmitRequest) { r.Source.Object = otherURI }},
		{"max_attempts", func(r *api.SubmitRequest) { r.MaxAttempts = 2 }},
	} {
		other := req
		tt.edit(&other)
		_, err := env.api.Submit(ctx, other)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 409 || ae.Body.Code != "batch_mismatch" || ae.Body.Field != tt.field {
			t.Errorf("other %s: err = %v, want 409 batch_mismatch naming %s", tt.field, err, tt.field)
		}
	}
	if v, err := env.api.Status(ctx, id); err != nil || v.Status != api.StatusSubmitting {
		t.Fatalf("after refused repeats: %+v %v, want still submitting", v.Status, err)
	}
	var v handler.BatchView
	code, err := env.api.Do(ctx, http.MethodPost, "/batches", req, &v)
	if err != nil || code != http.StatusAccepted || v.Created == nil || *v.Created || v.Status != api.StatusSubmitting {
		t.Fatalf("same request: %d %+v %v, want 202 created false submitting", code, v, err)
	}
	v = wait(t, id)
	if v.Status != api.StatusCompleted || v.Census.Succeeded != 3 || v.SubmitAttempts < 1 {
		t.Fatalf("%s %+v attempts %d", v.Status, v.Census, v.SubmitAttempts)
	}
	for _, k := range []string{"a", "b", "c"} {
		if c := env.hook.counts(id)[k]; c != 1 {
			t.Errorf("item %s: %d calls", k, c)
		}
	}
}

// handoffs records the hand-offs a Submitter makes.
type handoffs struct {
	mu  sync.Mutex
	ids []string
}

func (h *handoffs) StartSubmit(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids = append(h.ids, id)
	return nil
}

// Submit past the gateway timeout, point 1: the tick's backstop. A
// submitting batch whose read never started is handed off again after the
// grace; one whose read may still run (deadline ahead) is left alone; one
// whose last allowed read died is refused with code internal, visibly and
// for good (running marker gone, resume refused). Guards docs/design/submit.md
// "Submitting past the gateway timeout" (no accepted batch is lost or stuck).
func TestSubmitTickHandsOffOrRefuses(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	ho := &handoffs{}
	h.submitter.Handoff = ho
	now := time.Now().UTC()
	row := func(id string, attempts int, created, deadline time.Time) {
		raw, _ := json.Marshal(api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Object: "s3://" + h.blobs.Bucket() + "/missing.jsonl"}})
		if _, err := h.store.CreateBatch(ctx, ledger.Batch{
			Batch: api.Batch{
				ID:             id,
				Plan:           api.Plan{Pipeline: "counted", MaxAttempts: 3},
				Run:            1,
				Status:         api.StatusSubmitting,
				CreatedAt:      created,
				RunStartedAt:   created,
				SubmitAttempts: attempts,
			},
			Request:        raw,
			SubmitDeadline: deadline,
		}); err != nil {
			t.Fatal(err)
		}
	}
	row("lost", 0, now.Add(-10*time.Minute), time.Time{})
	row("fresh", 0, now, time.Time{})
	row("going", 1, now.Add(-10*time.Minute), now.Add(5*time.Minute))
	row("dead", 1, now.Add(-30*time.Minute), now.Add(-5*time.Minute))
	row("spent", 3, now.Add(-60*time.Minute), now.Add(-5*time.Minute))

	res, err := h.submitter.TickSubmitting(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Submitting != 5 || res.HandedOff != 2 || res.Refused != 1 {
		t.Errorf("tick %+v, want 5 submitting, 2 handed off, 1 refused", res)
	}
	if got := strings.Join(ho.ids, ","); got != "lost,dead" && got != "dead,lost" {
		t.Errorf("handed off %q, want lost and dead", got)
	}
	spent, err := h.store.GetBatch(ctx, "spent")
	if err != nil || spent.Status != api.StatusRefused || spent.Refusal == nil || spent.Refusal.Code != api.RefusalInternal ||
		!strings.Contains(spent.Refusal.Message, "3 attempts") {
		t.Fatalf("spent: %+v %v, want refused internal after 3 attempts", spent, err)
	}
	ids, err := h.store.RunningBatches(ctx)
	if err != nil || strings.Contains(strings.Join(ids, ","), "spent") {
		t.Errorf("running markers %v (%v): the refused batch's must be gone", ids, err)
	}
	if _, err := h.submitter.Resume(ctx, "spent"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("resume of a refused batch: %v, want conflict", err)
	}
	if _, err := h.submitter.Resume(ctx, "going"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("resume of a submitting batch: %v, want conflict", err)
	}
	// A background read of a source that is not there is a refusal that
	// names the field; another read of the same batch then does nothing.
	b, err := h.submitter.Complete(ctx, "dead")
	if err != nil || b.Status != api.StatusRefused || b.Refusal == nil || b.Refusal.Field != "source.object" {
		t.Fatalf("complete of a missing source: %+v %v, want refused naming source.object", b.Refusal, err)
	}
	if b, err = h.submitter.Complete(ctx, "dead"); err != nil || b.Status != api.StatusRefused || b.SubmitAttempts != 2 {
		t.Errorf("second complete: %s attempts %d %v, want refused untouched", b.Status, b.SubmitAttempts, err)
	}
}
