package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// fakeBatchAPI serves GET /batches/{id} with view and GET
// /batches/{id}/report with rep, counting the requests.
func fakeBatchAPI(t *testing.T, view wire.BatchView, rep api.Report) (*client.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/batches/"+view.ID:
			_ = json.NewEncoder(w).Encode(view)
		case r.Method == http.MethodGet && r.URL.Path == "/batches/"+view.ID+"/report":
			_ = json.NewEncoder(w).Encode(rep)
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(wire.ErrorBody{Code: "not_found", Message: r.URL.Path})
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv(client.EnvAPIURL, srv.URL)
	c, err := client.New(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}, client.Stack{})
	if err != nil {
		t.Fatal(err)
	}
	return c, &n
}

// Guards docs/cli.md "Reaching the stack, submitting, watching" (Ctrl-C):
// Ctrl-C while `bulkrun watch` (or `submit --watch`) follows a running
// batch stops the command, not the batch: it says that the batch keeps
// running and how to follow it again, and exits 130.
func TestWatchInterrupted(t *testing.T) {
	view := wire.BatchView{Batch: api.Batch{ID: "orders-1", Status: api.StatusRunning, Run: 1, ItemCount: 5000, Plan: api.Plan{Pipeline: "lambda"}},
		Census: &api.Census{Total: 5000, Succeeded: 120, Pending: 4880}, CensusSource: wire.CensusFromCounters}
	c, polls := fakeBatchAPI(t, view, api.Report{})
	var out, errw bytes.Buffer
	a := &app{out: &out, errw: &errw, output: "text", api: c, loaded: true}
	// Ctrl-C once the watch has polled twice.
	a.interrupt = func(ctx context.Context) (context.Context, context.CancelFunc) {
		ictx, cancel := context.WithCancel(ctx)
		go func() {
			for polls.Load() < 2 {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
		}()
		return ictx, cancel
	}
	cmd := a.watchCmd()
	cmd.SetArgs([]string{"orders-1"})
	err := cmd.Execute()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 130 {
		t.Fatalf("watch interrupted: %v, want exit 130", err)
	}
	for _, want := range []string{"stopped watching batch orders-1; the batch keeps running", "bulkrun watch orders-1", "bulkrun cancel orders-1"} {
		if !strings.Contains(errw.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errw.String())
		}
	}
	if out.Len() != 0 {
		t.Errorf("stdout %q: an interrupted watch prints no census", out.String())
	}
}

// Guards `bulkrun report` (docs/cli.md): it prints what its help says —
// text by default, with the threshold and the verdict; -o json the
// report as stored.
func TestReportTextAndJSON(t *testing.T) {
	pct := 5.0
	rep := api.Report{BatchID: "orders-1", Run: 2, Status: api.StatusThresholdExceeded, NeedsAttention: true,
		Census:    api.Census{Total: 5000, Succeeded: 4700, Failed: 300},
		Threshold: api.Threshold{FailurePercent: &pct},
		Verdict:   api.Threshold{FailurePercent: &pct}.Judge(300, 5000),
		Results:   api.Results{Manifest: "s3://b/batches/orders-1/runs/2/results/manifest.json"},
		Retries: &api.RetryCounts{Scheduled: 412, Throttled: 380, Interrupted: 2, TimedOut: 1,
			Causes: []api.RetryCause{{Class: "http 502", Items: 30}, {Class: "connection refused", Items: 2}}},
		Halts: []api.Halt{{Subject: "secret:hook", Since: time.Date(2026, 11, 30, 20, 2, 0, 0, time.UTC), Reason: "HTTP 401 with the secret read again"}}}
	c, _ := fakeBatchAPI(t, wire.BatchView{Batch: api.Batch{ID: "orders-1"}}, rep)
	cmd := (&app{}).reportCmd()
	if !strings.Contains(cmd.Short, "text") || !strings.Contains(cmd.Short, "-o json") {
		t.Errorf("report's help %q does not say it prints text, and JSON with -o json", cmd.Short)
	}
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text", api: c, loaded: true}
	cmd = a.reportCmd()
	cmd.SetArgs([]string{"orders-1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"batch orders-1 run 2: threshold_exceeded", "census: total 5000  succeeded 4700  failed 300",
		"threshold: failures (failed + quarantined) of more than 5 % of the items fail the run",
		"verdict: threshold exceeded (300 failures of 5000 items = 6% > 5% tolerated)",
		"retries (from the counters, at least): 412 scheduled, 380 of them throttled by the downstream (no attempt used); 2 interrupted; 1 timed out; causes: http 502 (30), connection refused (2)",
		"halt kept on secret:hook since 2026-11-30T20:02:00Z: HTTP 401 with the secret read again; fix its secret, then bulkrun lift orders-1 before a resume"} {
		if !strings.Contains(text, want) {
			t.Errorf("report text lacks %q:\n%s", want, text)
		}
	}
	if json.Valid(out.Bytes()) {
		t.Errorf("report printed JSON by default:\n%s", text)
	}
	out.Reset()
	a = &app{out: &out, errw: &out, output: "json", api: c, loaded: true}
	cmd = a.reportCmd()
	cmd.SetArgs([]string{"orders-1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var back api.Report
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.BatchID != "orders-1" || back.Verdict != rep.Verdict {
		t.Errorf("-o json: %v %+v\n%s", err, back, out.String())
	}
}

// Guards `bulkrun status` (docs/cli.md): the threshold and the verdict
// are shown — judged on the final census once finished, "so far" on the
// counters while the run goes.
func TestStatusShowsThresholdAndVerdict(t *testing.T) {
	count := int64(20)
	th := api.Threshold{FailureCount: &count}
	finished := wire.BatchView{Batch: api.Batch{ID: "b", Status: api.StatusCompleted, Run: 1, ItemCount: 5000, Plan: api.Plan{Threshold: th}},
		Census: &api.Census{Total: 5000, Succeeded: 4980, Failed: 20}, CensusSource: wire.CensusFromReport}
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	if err := a.show(finished); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"threshold: failures (failed + quarantined) of more than 20 items fail the run; the run stops as soon as they do",
		"verdict: within the threshold (20 failures of 5000 items)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	stop := false
	running := wire.BatchView{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1, ItemCount: 5000, Plan: api.Plan{Threshold: th, StopOnThreshold: &stop}},
		Census: &api.Census{Total: 5000, Succeeded: 100, Failed: 21, Pending: 4879}, CensusSource: wire.CensusFromCounters}
	if err := a.show(running); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"every item runs and the run is judged at the end", "verdict so far: threshold exceeded (21 failures > 20 tolerated)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status of a running batch lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := a.show(wire.BatchView{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "threshold: none: any number of failures is tolerated") {
		t.Errorf("status without a threshold:\n%s", out.String())
	}
}

// Guards `bulkrun items` text (docs/cli.md): a header, then each item's
// key, outcome, reason, run, attempts and error in aligned columns.
func TestItemsTextHeaderAndReason(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	a.printItems([]api.Item{
		{Key: "order-17", Outcome: api.OutcomeFailed, Reason: api.ReasonPermanent, Run: 1, RunAttempts: 1, Error: "400: no such account"},
		{Key: "order-2041", Outcome: api.OutcomeQuarantined, Reason: api.ReasonQuarantine, Run: 2, Revision: 2, RunAttempts: 3, Error: "set aside"},
	})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("items:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"KEY", "OUTCOME", "REASON", "RUN", "REVISION", "ATTEMPTS", "ERROR"},
		{"order-17", "failed", "permanent", "1", "1", "1", "400:", "no", "such", "account"},
		{"order-2041", "quarantined", "quarantine", "2", "2", "3", "set", "aside"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d: %q, want fields %q", i, lines[i], want)
		}
	}
	// Aligned: every column starts at the same offset on every line.
	if strings.Index(lines[0], "REASON") != strings.Index(lines[1], "permanent") || strings.Index(lines[1], "permanent") != strings.Index(lines[2], "quarantine ") {
		t.Errorf("columns not aligned:\n%s", out.String())
	}
}

// Guards docs/cli.md "Reaching the stack, submitting, watching" (local
// files checked before uploading): a local CSV whose header lacks the
// --key-field column, a JSON Lines file whose first line is not JSON or
// lacks the key field, a file that is not UTF-8 and a name whose format
// cannot be told are refused before any byte is uploaded, naming what is
// wrong; good files pass, gzip included.
func TestCheckLocalSource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		name, body, format, keyField, delim, wantErr string
	}{
		{"records.csv", "order_id,amount\n1,2\n", "", "order_id", "", ""},
		{"records.csv", "\ufefforder_id;amount\n1;2\n", "", "order_id", "", ""},
		{"records.csv", "id,amount\n1,2\n", "", "order_id", "", `"order_id" is not a column of the CSV header (id,amount`},
		{"records.csv", "order_id;amount\n1;2\n", "", "order_id", ",", "looks separated by ';'"},
		{"records.txt", "order_id,amount\n1,2\n", "", "order_id", "", "cannot tell the format"},
		{"records.txt", "order_id,amount\n1,2\n", "csv", "order_id", "", ""},
		{"orders.jsonl", `{"order_id": 1}` + "\n", "", "order_id", "", ""},
		{"orders.jsonl", `{"id": 1}` + "\n", "", "order_id", "", "order_id"},
		{"orders.jsonl", "{not json\n", "", "", "", "line 1"},
		{"orders.jsonl", "\n\n", "", "", "", "holds no items"},
		{"latin.csv", "id,name\n1,caf\xe9\n", "", "id", "", "UTF-8"},
	} {
		err := CheckLocalSource(write(tt.name, tt.body), tt.format, tt.keyField, tt.delim)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %q: %v, want no error", tt.name, tt.body, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s %q: %v, want an error with %q", tt.name, tt.body, err, tt.wantErr)
		}
	}

	// submit refuses such a file before uploading it: the stack is never
	// reached (no request, no bucket needed).
	c, requests := fakeBatchAPI(t, wire.BatchView{Batch: api.Batch{ID: "x"}}, api.Report{})
	var out, errw bytes.Buffer
	a := &app{out: &out, errw: &errw, output: "text", api: c, loaded: true}
	cmd := a.submitCmd()
	cmd.SetArgs([]string{write("bad.csv", "id,amount\n1,2\n"), "--pipeline", "lambda", "--key-field", "order_id"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "order_id") || !strings.Contains(err.Error(), "nothing was uploaded") || requests.Load() != 0 {
		t.Errorf("submit of a CSV without its key column: %v (%d requests), want a refusal naming order_id before any upload", err, requests.Load())
	}
}

// Guards `bulkrun upload` (docs/cli.md "Uploading a file"): the key under
// incoming/, and the object metadata its flags set — only the flags given,
// the options as compact JSON (no shell quoting to get right), rerun.
func TestUploadKeyAndMetadata(t *testing.T) {
	for _, tt := range []struct{ file, name, want string }{
		{"/tmp/x/records (1).csv", "", "incoming/records (1).csv"},
		{"records.csv", "exports/2026/records.csv", "incoming/exports/2026/records.csv"},
		{"records.csv", "incoming/records.csv", "incoming/records.csv"},
		{"records.csv", "/../../etc/records.csv", "incoming/etc/records.csv"},
	} {
		if got := UploadKey(tt.file, tt.name); got != tt.want {
			t.Errorf("UploadKey(%q, %q) = %q, want %q", tt.file, tt.name, got, tt.want)
		}
	}
	cmd := (&app{}).uploadCmd()
	if err := cmd.ParseFlags([]string{"--pipeline", "lambda", "--key-field", "order_id", "--options", "{ \"function\": \"score\",\n \"params\": {\"model\": \"v2\"} }",
		"--tolerated-failure-percent", "5", "--stop-on-threshold=false", "--budget", "40.5", "--rerun", "--priority", "3"}); err != nil {
		t.Fatal(err)
	}
	o := uploadOptions{pipeline: "lambda", keyField: "order_id", options: "{ \"function\": \"score\",\n \"params\": {\"model\": \"v2\"} }", percent: 5, budget: 40.5, stop: false, rerun: true, priority: 3}
	meta, err := o.metadata(cmd.Flags().Changed)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pipeline": "lambda", "key-field": "order_id", "pipeline-options": `{"function":"score","params":{"model":"v2"}}`,
		"tolerated-failure-percent": "5", "stop-on-threshold": "false", "budget-usd": "40.5", "rerun": "true", "priority": "3"}
	if len(meta) != len(want) {
		t.Errorf("metadata %v, want %v", meta, want)
	}
	for k, v := range want {
		if meta[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, meta[k], v)
		}
	}
	o.options = "{not json"
	var ee *ExitError
	if _, err := o.metadata(cmd.Flags().Changed); !errors.As(err, &ee) || ee.Code != ExitUsage {
		t.Errorf("bad --options: %v, want a usage error", err)
	}
	// --corrects: the corrections' own reading options only; a submit
	// option is a usage error naming it (the batch's settings apply).
	cmd = (&app{}).uploadCmd()
	if err := cmd.ParseFlags([]string{"--corrects", "orders-7", "--key-field", "order_id"}); err != nil {
		t.Fatal(err)
	}
	meta, err = uploadOptions{corrects: "orders-7", keyField: "order_id"}.metadata(cmd.Flags().Changed)
	if err != nil || len(meta) != 2 || meta["corrects"] != "orders-7" || meta["key-field"] != "order_id" {
		t.Errorf("--corrects metadata %v (%v), want corrects and key-field only", meta, err)
	}
	cmd = (&app{}).uploadCmd()
	if err := cmd.ParseFlags([]string{"--corrects", "orders-7", "--max-attempts", "5"}); err != nil {
		t.Fatal(err)
	}
	if _, err := (uploadOptions{corrects: "orders-7", maxAttempts: 5}).metadata(cmd.Flags().Changed); !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "--max-attempts") {
		t.Errorf("--corrects with --max-attempts: %v, want a usage error naming it", err)
	}
}

// LocalManifest reads a whole local file as submit will: its digest and
// count, and every line's errors — a duplicate key anywhere, not only in
// the first line.
func TestLocalManifest(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "a.csv")
	if err := os.WriteFile(good, []byte("id,x\nk1,1\nk2,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err := LocalManifest(good, "", "id", "")
	if err != nil || sum.Count != 2 || len(sum.Digest) != 64 {
		t.Fatalf("LocalManifest: %+v %v", sum, err)
	}
	crlf := filepath.Join(dir, "b.csv")
	if err := os.WriteFile(crlf, []byte("id,x\r\nk1,1\r\nk2,2\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if again, err := LocalManifest(crlf, "", "id", ""); err != nil || again.Digest != sum.Digest {
		t.Errorf("the same items with CRLF line ends: %+v %v, want digest %s (the items as read)", again, err, sum.Digest)
	}
	dup := filepath.Join(dir, "c.csv")
	if err := os.WriteFile(dup, []byte("id,x\nk1,1\nk2,2\nk1,3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalManifest(dup, "", "id", ""); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("a duplicate key on line 4: %v", err)
	}
}

// TestStatusShowsTheRate guards status's rate line: requests, a token
// budget and the key they are shared on, as ParseRate reads them back;
// and its priority line, only above 1.
func TestStatusShowsTheRate(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	v := wire.BatchView{Batch: api.Batch{ID: "b", Status: api.StatusRunning, Run: 1,
		Plan: api.Plan{Rate: &api.Rate{Key: "api.openai.com", RequestsPerSecond: 50, TokensPerMinute: 90000}}}}
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	if want := "rate: 50/s, 90000 tokens/min on api.openai.com\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "priority") {
		t.Errorf("status of a batch of priority 1 names one:\n%s", out.String())
	}
	// Another running batch names its key at another rate: status says
	// which, at what, and what to do.
	out.Reset()
	v.Live = &api.LiveView{RateConflict: &api.RateConflict{Key: "api.openai.com", BatchID: "later", Rate: api.Rate{Key: "api.openai.com", RequestsPerSecond: 200},
		NotedAt: time.Date(2026, 12, 7, 10, 5, 0, 0, time.UTC), Batches: 1}}
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	if want := "rate key api.openai.com: batch later also names it, at 200/s (this batch: 50/s, 90000 tokens/min; noted 2026-12-07T10:05:00Z)"; !strings.Contains(out.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, out.String())
	}
	v.Live = nil
	out.Reset()
	v.Priority = 3
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	if want := "priority: 3 (3 shares of the items queue while other batches wait with it)\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, out.String())
	}
}

// TestStatusShowsTheSample guards status's sample lines: the state and
// what to run next while it awaits approval, then the estimate in words;
// and upload's --sample and --auto-approve-usd as metadata.
func TestStatusShowsTheSample(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	v := wire.BatchView{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusRunning, ItemCount: 20000}}
	v.Sample = 200
	v.Live = &api.LiveView{InFlight: 2, HeldForApproval: 4791, NotFannedOut: 15000}
	v.Approval = api.ApprovalOf(200, "", "", time.Time{}, &api.SampleEstimate{MadeAt: time.Date(2026, 12, 4, 10, 2, 10, 0, time.UTC),
		Items: 20000, SampleItems: 200, Failed: 3, FailureRate: 0.015, FailureLow: 0.0051, FailureHigh: 0.0432, ProjectedFailures: 300,
		CostUSD: 12.4, PipelineUSD: 12, InfraUSD: 0.4, ItemsPerSecond: 99, Seconds: 200, Pace: "the sample's pace"})
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"sample: 200 items, awaiting approval (bulkrun approve b1, or reject b1)\n",
		"live: in flight 2  waiting for a retry 0  interrupted 0  held for approval 4791  not fanned out 15000",
		"estimate from 200 sample items at 2026-12-04T10:02:10Z: $12.4 for 20000 items (pipeline $12, DynamoDB $0.4; Lambda and SQS not counted); failures 1.5 % (95 % interval 0.5–4.3 %, ≈ 300 items); the rest ≈ 3m20s at 99.0 items/s (the sample's pace)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	// Ended undecided (cancelled while awaiting): no next move offered.
	out.Reset()
	v.Status, v.Live = api.StatusCancelled, nil
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	if want := "sample: 200 items, undecided (awaiting approval when the run stopped or ended)\n"; !strings.Contains(out.String(), want) || strings.Contains(out.String(), "bulkrun approve") {
		t.Errorf("status of a cancelled batch lacks %q or offers approve:\n%s", want, out.String())
	}
	// Ended after a decision, read as a client reads it (the JSON
	// carries the state, not the stored decision): the decision, not
	// "undecided".
	for _, tc := range []struct {
		state  api.ApprovalState
		status api.Status
		want   string
	}{
		{api.ApprovalApproved, api.StatusCompleted, "sample: 200 items, approved by caller at 2026-12-04T10:05:00Z\n"},
		{api.ApprovalRejected, api.StatusCancelled, "sample: 200 items, rejected by caller at 2026-12-04T10:05:00Z\n"},
	} {
		body, err := json.Marshal(api.ApprovalOf(200, tc.state, api.DecidedByCaller, time.Date(2026, 12, 4, 10, 5, 0, 0, time.UTC), nil))
		if err != nil {
			t.Fatal(err)
		}
		var ap api.Approval
		if err := json.Unmarshal(body, &ap); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		v.Status, v.Approval = tc.status, &ap
		if err := a.show(v); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) || strings.Contains(out.String(), "undecided") {
			t.Errorf("status of a %s batch %s by a caller lacks %q:\n%s", tc.status, tc.state, tc.want, out.String())
		}
	}
	cmd := (&app{}).uploadCmd()
	if err := cmd.ParseFlags([]string{"--pipeline", "webhook", "--sample", "200", "--auto-approve-usd", "15"}); err != nil {
		t.Fatal(err)
	}
	meta, err := uploadOptions{pipeline: "webhook", sample: 200, autoApprove: 15}.metadata(cmd.Flags().Changed)
	if err != nil {
		t.Fatal(err)
	}
	if meta["sample"] != "200" || meta["auto-approve-usd"] != "15" {
		t.Errorf("metadata %v: want sample 200, auto-approve-usd 15", meta)
	}
}

// TestReportShowsTheSampleCheck guards the report's line setting a
// sample's estimate beside the run it was approved for.
func TestReportShowsTheSampleCheck(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	r := api.Report{BatchID: "b1", Run: 1, Status: api.StatusCompleted, Census: api.Census{Total: 2000, Succeeded: 1880, Failed: 120},
		Sample: &api.SampleCheck{Estimate: api.SampleEstimate{CostUSD: 20.000439, FailureRate: 0.04, FailureLow: 0.0157, FailureHigh: 0.0984, Seconds: 20},
			CostUSD: 21.000478, CostDiff: 0.05, Ended: 2000, Failed: 120, FailureRate: 0.06, FailureInInterval: true, RestSeconds: 30.04, ReachSeconds: 4, RestDiff: 0.2511}}
	a.printReport(r)
	want := "sample estimate against the run: cost $20.000439 estimated, $21.000478 spent with DynamoDB (+5.0 %); failures 4.0 % (95 % interval 1.6–9.8 %) estimated, 6.0 % (120 of 2000) ran: within; the rest ≈ 20s estimated + 4s for the approval to reach the held items, 30s from the approval (+25.1 %)\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("report lacks\n%q:\n%s", want, out.String())
	}
}

// TestStatusShowsItemsWaitingForATrack guards the live line of a run with
// max_concurrency: the items its tracks do not hold yet are said apart
// from those in flight (a user read "in flight 1499" at max_concurrency
// 150 as the limit broken).
func TestStatusShowsItemsWaitingForATrack(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	v := wire.BatchView{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusRunning, ItemCount: 3000,
		Plan: api.Plan{MaxConcurrency: 150, ItemsPerMessage: 10}}}
	v.Live = &api.LiveView{InFlight: 1500, AwaitingTrack: 1349, NotFannedOut: 0}
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"max_concurrency: 150 items at once (150 tracks at most, each holding one unit of 10 items: in flight up to 1500)\n",
		"live: in flight 1500  waiting for a retry 0  interrupted 0  waiting for a track 1349  not fanned out 0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// TestStatusAndListShowTheAdaptivePace guards where a batch held down by
// its downstream's adaptive pace says so: status's own line, and the
// listing's note beside the batch.
func TestStatusAndListShowTheAdaptivePace(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	cut := time.Date(2026, 12, 5, 10, 0, 3, 0, time.UTC)
	p := &api.AdaptivePace{Key: "api.example.com", LimitPerSecond: 14.24, CutAt: cut, StepPerSecond: 1.42}
	v := wire.BatchView{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusRunning, ItemCount: 3000}}
	v.Live = &api.LiveView{InFlight: 100, AdaptivePace: p}
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	if want := "adaptive pace: api.example.com throttled bulkrun's calls; every batch with no rate calling it is held to 14.2 requests/s"; !strings.Contains(out.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, out.String())
	}
	s := api.BatchSummary{ID: "b1", Status: api.StatusRunning, Run: 1, ItemCount: 3000, Live: v.Live}
	if got, want := note(s), "paced by api.example.com at 14.2 requests/s"; !strings.Contains(got, want) {
		t.Errorf("list note %q lacks %q", got, want)
	}
}

// TestStatusShowsAHaltKeptAfterTheRun guards status on a batch cancelled
// while its items were withheld: the halt stays on the batch, so its
// resume would withhold its items again; status says so and what to do
// first (a user resumed without knowing, and every item was withheld
// again). A running batch's live view names its halts itself, so status
// prints them once.
func TestStatusShowsAHaltKeptAfterTheRun(t *testing.T) {
	const subject = "secret:arn:aws:secretsmanager:us-east-1:123456789012:secret:hook"
	since := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	v := wire.BatchView{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusCancelled, ItemCount: 40,
		Halts: map[string]api.Halt{subject: {Subject: subject, Since: since}}}}
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	want := "halted on " + subject + " since 2026-12-05T10:00:00Z: kept after the run ended, so a resume would withhold its items without a call; fix the credential's secret, then bulkrun lift b1 before bulkrun resume b1"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status of the cancelled batch lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	v.Status = api.StatusRunning
	v.Live = &api.LiveView{Attention: []string{"halted on " + subject + " since 2026-12-05T10:00:00Z: its items are withheld; …"}}
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "halted on "); n != 1 {
		t.Errorf("status of the running batch names its halt %d times, want once (its live view's):\n%s", n, out.String())
	}
}

// TestStatusSaysAStopWaitsForRetries guards status while a cancel
// settles a run whose items wait for a retry: they end cancelled only
// when their retry comes due, which can be minutes (a user watched one
// take 8), and the line says so and when the next is due.
func TestStatusSaysAStopWaitsForRetries(t *testing.T) {
	next := time.Date(2026, 12, 5, 19, 36, 0, 0, time.UTC)
	v := wire.BatchView{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusRunning, Stop: api.StatusCancelled, StopDetail: "cancelled by a caller", ItemCount: 100},
		Live: &api.LiveView{RetryWaiting: 30, NextRetryAt: &next}}
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	want := "stopping: cancelled (cancelled by a caller); items already in flight finish after the stop; 30 items waiting for a retry end cancelled without a call, when it comes due at the latest (the next at 2026-12-05T19:36:00Z), sooner when another item of their message is settled first"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, out.String())
	}
	// Held items the stop's wake could not reach wait for the tick.
	v.Live = &api.LiveView{Suspended: 21}
	out.Reset()
	if err := a.show(v); err != nil {
		t.Fatal(err)
	}
	want = "; 21 items held (suspended, withheld or exhausted) end cancelled without a call as the stop's wake reaches them, or the next finalize tick (every 5 minutes by default)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, out.String())
	}
}

// TestLiftWithNoHaltSaysSo guards bulkrun lift on a batch that holds no
// halt (a second lift, or a lift before any refusal): it lifts nothing,
// says so and what would, and exits 0 — a script that lifts after every
// fix must not fail on a halt already gone.
func TestLiftWithNoHaltSaysSo(t *testing.T) {
	for _, tc := range []struct {
		status   api.Status
		withheld int64
		args     []string
		want     string
	}{
		{api.StatusCompleted, 0, nil, "batch b1: the batch is completed and holds no halt, so nothing was lifted; no item of a finished run waits under one"},
		{api.StatusCompleted, 0, []string{"secret:arn:x"}, "batch b1: the batch is completed and holds no halt, so nothing was lifted; no item of a finished run waits under one"},
		{api.StatusRunning, 0, nil, "batch b1: the batch is running and holds no halt, so nothing was lifted; no item is withheld"},
		{api.StatusRunning, 3, nil, "batch b1: the batch is running and holds no halt, so nothing was lifted; name the SUBJECT its 3 withheld items show (bulkrun items b1 --outcome withheld) to wake them"},
	} {
		view := wire.BatchView{Batch: api.Batch{ID: "b1", Run: 1, Status: tc.status, ItemCount: 40}, Census: &api.Census{Total: 40, Withheld: tc.withheld}}
		c, _ := fakeBatchAPI(t, view, api.Report{})
		var out, errw bytes.Buffer
		a := &app{out: &out, errw: &errw, output: "text", api: c, loaded: true}
		cmd := a.liftCmd()
		cmd.SetArgs(append([]string{"b1"}, tc.args...))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("lift %v of a %s batch with no halt: %v, want exit 0", tc.args, tc.status, err)
		}
		if strings.TrimSpace(out.String()) != tc.want {
			t.Errorf("lift %v of a %s batch with no halt printed %q, want %q", tc.args, tc.status, out.String(), tc.want)
		}
		out.Reset()
		a.output = "json"
		cmd = a.liftCmd()
		cmd.SetArgs([]string{"b1"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), `"lifts": []`) {
			t.Errorf("lift -o json with no halt: %s, want an empty lifts list", out.String())
		}
	}
	// A subject the batch holds no halt on, where it holds another: the
	// error names the halts it holds.
	view := wire.BatchView{Batch: api.Batch{ID: "b1", Run: 1, Status: api.StatusCancelled, Halts: map[string]api.Halt{"secret:arn:right": {Subject: "secret:arn:right"}}}}
	c, _ := fakeBatchAPI(t, view, api.Report{})
	a := &app{out: io.Discard, errw: io.Discard, output: "text", api: c, loaded: true}
	cmd := a.liftCmd()
	cmd.SetArgs([]string{"b1", "secret:arn:other"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "it holds halts on: secret:arn:right") {
		t.Errorf("lift of a subject without a halt: %v, want an error naming the halt the batch holds", err)
	}
}

// TestItemsRefusesAnOutcomeItDoesNotList guards bulkrun items --outcome:
// an outcome it does not list is a usage error (exit 2) before any
// call, and succeeded or cancelled items are pointed to the results.
func TestItemsRefusesAnOutcomeItDoesNotList(t *testing.T) {
	for o, hint := range map[string]string{"cancelled": "bulkrun results b1 --outcome cancelled", "succeeded": "bulkrun results b1 --outcome succeeded", "bogus": "want failed, quarantined"} {
		var out bytes.Buffer
		a := &app{out: &out, errw: &out, output: "text"} // no API: a call would fail otherwise
		cmd := a.itemsCmd()
		cmd.SetArgs([]string{"b1", "--outcome", o})
		err := cmd.Execute()
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), hint) {
			t.Errorf("items --outcome %s: %v, want exit %d naming %q", o, err, ExitUsage, hint)
		}
	}
}
