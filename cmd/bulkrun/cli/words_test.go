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

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
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
	return wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusCompleted, Run: 1, ItemCount: 3, Plan: api.Plan{Pipeline: "enrich"}, NeedsAttention: true},
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

// Guards docs/cli.md "Uploading a file": a fresh upload whose batch has
// already ended when submit has read it (a small file) says how it
// ended and exits as a repeated upload of it does: 3 when it needs
// attention, not a bare "completed" and 0.
func TestUploadFinishedAtOnceExitsAsRepeated(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "texts.jsonl")
	if err := os.WriteFile(file, []byte(`{"key":"a","text":"x"}`+"\n"+`{"key":"b","text":"y"}`+"\n"+`{"key":"c"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFakeStack(t)
	sum, err := LocalManifest(file, "jsonl", "key", "")
	if err != nil {
		t.Fatal(err)
	}
	id := api.UploadBatchID("bkt", "incoming/texts.jsonl", sum.Digest)
	uploaded := false
	f.handle("PUT /bkt/incoming/texts.jsonl", func(w http.ResponseWriter, _ *http.Request) {
		uploaded = true
		w.WriteHeader(http.StatusOK)
	})
	f.handle("GET /batches/"+id, func(w http.ResponseWriter, r *http.Request) {
		if !uploaded {
			answer(http.StatusNotFound, wire.ErrorBody{Code: "not_found"})(w, r)
			return
		}
		answer(http.StatusOK, finishedView(id))(w, r)
	})
	a, _, errw := f.app(t)
	cmd := a.uploadCmd()
	cmd.SetArgs([]string{file, "--pipeline", "enrich", "--key-field", "key"})
	err = cmd.Execute()
	if code := exitCode(err); code != ExitNeedsCheck {
		t.Errorf("exit %d (%v), want %d (as a repeated upload of the same batch); stderr:\n%s", code, err, ExitNeedsCheck, errw.String())
	}
	if !strings.Contains(errw.String(), "2 succeeded, 1 failed; needs attention (bulkrun status "+id+")") {
		t.Errorf("stderr lacks how the batch ended and that it needs attention:\n%s", errw.String())
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
	refused := wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusRefused, Plan: api.Plan{Pipeline: "enrich"}, Refusal: &api.SubmitRefusal{
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

// Guards `bulkrun watch` (docs/cli.md "Reaching the stack, submitting,
// watching"): its line says how many items are still pending and in
// flight, not only those ended; it tells no rate before its polls span a
// real window (the items a first poll finds ended, ended before the
// watch began); and a finished run's line gives the run's own rate (the
// items it ended over its time), not the last polls' 0.0 items/s.
func TestWatchShowsPendingAndARealRate(t *testing.T) {
	f := newFakeStack(t)
	start := time.Now().UTC().Add(-10 * time.Second)
	views := []wire.BatchView{
		{Batch: api.Batch{ID: "orders-1", Status: api.StatusRunning, Run: 1, ItemCount: 50, RunStartedAt: start},
			Census: &api.Census{Total: 50, Succeeded: 40, InFlight: 4, Pending: 6}, CensusSource: wire.CensusFromCounters},
		{Batch: api.Batch{ID: "orders-1", Status: api.StatusRunning, Run: 1, ItemCount: 50, RunStartedAt: start},
			Census: &api.Census{Total: 50, Succeeded: 50}, CensusSource: wire.CensusFromCounters},
		{Batch: api.Batch{ID: "orders-1", Status: api.StatusCompleted, Run: 1, ItemCount: 50, RunStartedAt: start, FinishedAt: start.Add(10 * time.Second)},
			Census: &api.Census{Total: 50, Succeeded: 50}, CensusSource: wire.CensusFromReport},
	}
	var n int
	f.handle("GET /batches/orders-1", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		v := views[min(n, len(views)-1)]
		n++
		f.mu.Unlock()
		answer(http.StatusOK, v)(w, r)
	})
	// The non-terminal watch prints a line every 10 s and at the end:
	// WatchLine is what both print, the bar's description included.
	var r rateMeter
	t0 := time.Now()
	r.add(t0, 44)
	if got := watchLine(views[0], r); !strings.Contains(got, "4 in flight, 6 pending") || strings.Contains(got, "items/s") {
		t.Errorf("first poll's line %q: want in flight and pending, and no rate yet", got)
	}
	r.add(t0.Add(time.Second), 50)
	if got := watchLine(views[1], r); strings.Contains(got, "items/s") {
		t.Errorf("line %q after polls 1 s apart: want no rate before %s", got, RateMinSpan)
	}
	r.add(t0.Add(3*time.Second), 50)
	if got := watchLine(views[1], r); !strings.Contains(got, "2.0 items/s") {
		t.Errorf("line %q after 6 items in 3 s: want 2.0 items/s", got)
	}
	// A run paused at its budget says so, with the budget and the spend.
	atBudget := views[0]
	atBudget.Pause = &api.Pause{By: api.PauseByBudget, Since: start, Class: "budget", Error: "budget $5 reached ($5.01 spent: pipeline $5, DynamoDB $0.01; Lambda and SQS not counted)"}
	if got, want := watchLine(atBudget, r), "; paused: budget $5 reached ($5.01 spent: pipeline $5, DynamoDB $0.01; Lambda and SQS not counted) (bulkrun budget orders-1 --usd N)"; !strings.Contains(got, want) {
		t.Errorf("line %q paused at the budget: want %q", got, want)
	}
	// So does a run a caller paused, or an outage (a user watched a paused
	// batch's line read "0.0 items/s" with nothing saying why).
	byCaller := views[0]
	byCaller.Pause = &api.Pause{By: api.PauseByCaller, Since: start}
	if got, want := watchLine(byCaller, r), "; paused by a caller since "+describe.Stamp(start)+" (bulkrun unpause orders-1)"; !strings.Contains(got, want) {
		t.Errorf("line %q paused by a caller: want %q", got, want)
	}
	byOutage := views[0]
	byOutage.Pause = &api.Pause{By: api.PauseByOutage, Since: start, Class: "timeout", Probes: 2}
	if got, want := watchLine(byOutage, r), "; paused by an outage (timeout) since "+describe.Stamp(start)+": no item starts until a probe is answered (2 probes so far) or bulkrun unpause orders-1"; !strings.Contains(got, want) {
		t.Errorf("line %q paused by an outage: want %q", got, want)
	}
	// With its next check, as status says it; and no rate key booking,
	// which would read as calls to come.
	byOutage.Pause.NextCheckAt = start.Add(90 * time.Second)
	byOutage.Live = &api.LiveView{RateBooked: &api.RateBooked{Key: "k", By: api.BookedByTokens, Until: start.Add(time.Minute), AheadSeconds: 60}}
	if got, want := watchLine(byOutage, r), "(2 probes so far, next check "+describe.Stamp(start.Add(90*time.Second))+") or bulkrun unpause orders-1"; !strings.Contains(got, want) || strings.Contains(got, "booked") {
		t.Errorf("line %q paused by an outage: want %q and no booking", got, want)
	}
	// Items in flight that wait for a retry say so, with their cause and
	// when the first is due: a rate fallen to 0.0 items/s is explained.
	next := time.Date(2026, 12, 2, 14, 51, 0, 0, time.UTC)
	waiting := views[0]
	waiting.Live = &api.LiveView{RetryWaiting: 4, NextRetryAt: &next, RetryCause: &api.RetryCause{Class: "timeout", Items: 4}}
	if got, want := watchLine(waiting, r), "4 in flight (4 waiting for a retry after timeout; next at 2026-12-02T14:51:00Z), 6 pending"; !strings.Contains(got, want) {
		t.Errorf("line %q with items waiting for a retry: want %q", got, want)
	}
	// Throttled items are said apart, with words between the clauses (a
	// user saw "38 waiting for a retry 38 waiting out a throttling").
	waiting.Live = &api.LiveView{RetryWaiting: 38, Throttled: 38, NextRetryAt: &next}
	if got, want := watchLine(waiting, r), "(38 waiting for a retry, 38 of them waiting out a throttling; next at 2026-12-02T14:51:00Z)"; !strings.Contains(got, want) {
		t.Errorf("line %q with throttled items: want %q", got, want)
	}
	waiting.Live = &api.LiveView{RetryWaiting: 40, Throttled: 38, NextRetryAt: &next, RetryCause: &api.RetryCause{Class: "timeout", Items: 2}}
	if got, want := watchLine(waiting, r), "(40 waiting for a retry: 2 after timeout, 38 waiting out a throttling; next at 2026-12-02T14:51:00Z)"; !strings.Contains(got, want) {
		t.Errorf("line %q with failed and throttled items: want %q", got, want)
	}
	// A run held down by its downstream's adaptive pace says by whom and
	// at what limit, and from when a Retry-After lets calls start.
	hold := next.Add(-30 * time.Second)
	waiting.Live = &api.LiveView{AdaptivePace: &api.AdaptivePace{Key: "api.example.com", LimitPerSecond: 0.72, CutAt: next.Add(-time.Minute), HoldUntil: &hold}}
	if got, want := watchLine(waiting, r), "; paced by api.example.com at 0.7 requests/s, no call before 2026-12-02T14:50:30Z"; !strings.Contains(got, want) {
		t.Errorf("line %q with an adaptive pace: want %q", got, want)
	}
	// A run whose rate key is booked ahead says until when: its items in
	// flight wait behind those bookings (a batch submitted behind another
	// on its key showed "0 succeeded … 50 in flight" with no reason).
	waiting.Live = &api.LiveView{RateBooked: &api.RateBooked{Key: "api.example.com", RequestsPerSecond: 5, By: api.BookedByRequests, Until: next, AheadSeconds: 96.7}}
	if got, want := watchLine(waiting, r), "; rate key api.example.com booked until 2026-12-02T14:51:00Z (96.7 s ahead)"; !strings.Contains(got, want) {
		t.Errorf("line %q with its rate key booked ahead: want %q", got, want)
	}
	// A run whose rate key another running batch names at another rate
	// says so (each lease is spaced at its own batch's rate).
	waiting.Live = &api.LiveView{RateConflict: &api.RateConflict{Key: "api.example.com", BatchID: "later-20", Rate: api.Rate{Key: "api.example.com", RequestsPerSecond: 20}, NotedAt: next, Batches: 1}}
	if got, want := watchLine(waiting, r), "; rate key api.example.com also named at 20/s by later-20"; !strings.Contains(got, want) {
		t.Errorf("line %q with a rate conflict: want %q", got, want)
	}
	a, _, errw := f.app(t)
	cmd := a.watchCmd()
	cmd.SetArgs([]string{"orders-1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	last := strings.TrimSpace(errw.String())
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	if !strings.Contains(last, "50 items in 10s (5.0 items/s)") || strings.Contains(last, "0.0 items/s") {
		t.Errorf("the watch ends on %q, want the run's own rate (50 items in 10s, 5.0 items/s)", last)
	}
}
