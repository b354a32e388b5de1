package cli

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// fakeStack is one HTTP server standing in for the stack: the API's
// routes under /batches and the bucket's objects (path style, /{bucket}/
// {key}), each answered by the handler registered for "METHOD /path".
type fakeStack struct {
	srv    *httptest.Server
	mu     sync.Mutex
	routes map[string]http.HandlerFunc
	calls  []string
}

func newFakeStack(t *testing.T) *fakeStack {
	t.Helper()
	f := &fakeStack{routes: map[string]http.HandlerFunc{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		h := f.routes[r.Method+" "+r.URL.Path]
		f.calls = append(f.calls, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		if h == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(wire.ErrorBody{Code: "not_found", Message: r.URL.Path + " not found"})
			return
		}
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	t.Setenv(client.EnvAPIURL, f.srv.URL)
	return f
}

func (f *fakeStack) handle(route string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[route] = h
}

// json answers v with status.
func answer(status int, v any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
}

// app is a CLI app on the fake stack (bucket "bkt"), its stdout and
// stderr.
func (f *fakeStack) app(t *testing.T) (*app, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), BaseEndpoint: aws.String(f.srv.URL)}
	t.Setenv("AWS_ENDPOINT_URL", f.srv.URL) // the bucket path style, as on the emulator
	c, err := client.New(cfg, client.Stack{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	return &app{out: &out, errw: &errw, output: "text", api: c, aws: cfg, outs: client.Stack{config.OutputBucket: "bkt"}, loaded: true}, &out, &errw
}

// exitCode is the exit status err stands for.
func exitCode(err error) int {
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	}
	return ExitFailure
}

// finishedView is a finished batch whose run left one item failed.
func finishedView(id string) wire.BatchView {
	return wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusCompleted, Run: 1, ItemCount: 3, Pipeline: "enrich", NeedsAttention: true},
		Census: &api.Census{Total: 3, Succeeded: 2, Failed: 1}, CensusSource: wire.CensusFromReport}
}

// Guards docs/cli.md "Reaching the stack, submitting, watching": running
// the same submit again once its batch has finished submits nothing, and
// the command says so — which batch answers, how it ended, that nothing
// runs again and how to run it again — instead of "submitting"; and it
// exits as watching that batch would (3: it needs attention), as `upload`
// of a file already uploaded does.
func TestResubmitFinishedSaysWhatHappens(t *testing.T) {
	f := newFakeStack(t)
	v := finishedView("orders-1")
	f.handle("GET /batches/orders-1", answer(http.StatusOK, v))
	again := v
	again.Created = new(false)
	f.handle("POST /batches", answer(http.StatusOK, again))
	a, out, errw := f.app(t)
	cmd := a.submitCmd()
	cmd.SetArgs([]string{"s3://bkt/in/orders.jsonl", "--id", "orders-1", "--pipeline", "enrich", "--key-field", "key"})
	err := cmd.Execute()
	if code := exitCode(err); code != ExitNeedsCheck {
		t.Errorf("exit %d (%v), want %d: the batch that answers needs attention", code, err, ExitNeedsCheck)
	}
	text := errw.String()
	if strings.Contains(text, "submitting") {
		t.Errorf("stderr says the finished batch is submitting:\n%s", text)
	}
	for _, want := range []string{"batch orders-1: exists already", "completed", "run 1", "nothing runs again", "--rerun", "2 succeeded, 1 failed", "bulkrun status orders-1"} {
		if !strings.Contains(text, want) {
			t.Errorf("stderr lacks %q:\n%s", want, text)
		}
	}
	if strings.TrimSpace(out.String()) != "orders-1" {
		t.Errorf("stdout %q, want the batch id alone", out.String())
	}
}

// Guards docs/cli.md "Uploading a file": an upload of a file already
// uploaded under that name with the same options answers its batch, and
// exits as `submit` of it does: 3 when that batch needs attention.
func TestUploadAlreadyUploadedExitsAsSubmit(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "texts.jsonl")
	body := []byte(`{"key":"a","text":"x"}` + "\n" + `{"key":"b","text":"y"}` + "\n" + `{"key":"c"}` + "\n")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFakeStack(t)
	sum, err := LocalManifest(file, "jsonl", "key", "")
	if err != nil {
		t.Fatal(err)
	}
	id := api.UploadBatchID("bkt", "incoming/texts.jsonl", sum.Digest)
	md := md5.Sum(body)
	f.handle("HEAD /bkt/incoming/texts.jsonl", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("ETag", `"`+hex.EncodeToString(md[:])+`"`)
		w.Header().Set("X-Amz-Meta-Pipeline", "enrich")
		w.Header().Set("X-Amz-Meta-Key-Field", "key")
		w.WriteHeader(http.StatusOK)
	})
	f.handle("GET /batches/"+id, answer(http.StatusOK, finishedView(id)))
	a, _, errw := f.app(t)
	cmd := a.uploadCmd()
	cmd.SetArgs([]string{file, "--pipeline", "enrich", "--key-field", "key"})
	err = cmd.Execute()
	if code := exitCode(err); code != ExitNeedsCheck {
		t.Errorf("exit %d (%v), want %d (as submit of the same batch); stderr:\n%s", code, err, ExitNeedsCheck, errw.String())
	}
	if !strings.Contains(errw.String(), "2 succeeded, 1 failed") {
		t.Errorf("stderr lacks how the batch ended:\n%s", errw.String())
	}
}

// Guards docs/cli.md "Uploading a file": a renamed copy refused as a
// repeated upload tells a CLI user the flag that runs it anyway (--rerun),
// not only the object metadata an S3 uploader sets.
func TestUploadRepeatedNamesRerun(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "texts (1).jsonl")
	if err := os.WriteFile(file, []byte(`{"key":"a","text":"x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFakeStack(t)
	sum, err := LocalManifest(file, "jsonl", "key", "")
	if err != nil {
		t.Fatal(err)
	}
	id := api.UploadBatchID("bkt", "incoming/texts (1).jsonl", sum.Digest)
	f.handle("PUT /bkt/incoming/texts (1).jsonl", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	refused := wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusRefused, Pipeline: "enrich", Refusal: &api.SubmitRefusal{
		Code: api.RefusalRepeatedUpload, Field: "x-amz-meta-rerun",
		Message: (&api.RepeatedUploadError{Source: "s3://bkt/incoming/texts (1).jsonl", Claim: api.UploadClaim{BatchID: "texts-0123456789abcdef", Source: "s3://bkt/incoming/texts.jsonl", ClaimedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}, Window: 7 * 24 * time.Hour}).Error()}}}
	uploaded := false
	f.handle("GET /batches/"+id, func(w http.ResponseWriter, r *http.Request) {
		if !uploaded {
			answer(http.StatusNotFound, wire.ErrorBody{Code: "not_found"})(w, r)
			return
		}
		answer(http.StatusOK, refused)(w, r)
	})
	f.handle("PUT /bkt/incoming/texts (1).jsonl", func(w http.ResponseWriter, _ *http.Request) {
		uploaded = true
		w.WriteHeader(http.StatusOK)
	})
	a, _, errw := f.app(t)
	cmd := a.uploadCmd()
	cmd.SetArgs([]string{file, "--pipeline", "enrich", "--key-field", "key"})
	err = cmd.Execute()
	if code := exitCode(err); code != ExitFailure {
		t.Fatalf("exit %d (%v), want 1; stderr:\n%s", code, err, errw.String())
	}
	if !strings.Contains(err.Error(), "--rerun") {
		t.Errorf("the refusal %q does not name --rerun", err)
	}
}
