package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
)

// Guards `bulkrun list --since` (docs/cli.md "Listing batches"): durations,
// days, dates and RFC 3339 times, and a clear error otherwise.
func TestListSinceForms(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"24h", now.Add(-24 * time.Hour), false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"7d", now.AddDate(0, 0, -7), false},
		{"2026-11-01", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), false},
		{"2026-11-30T08:00:00+01:00", time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC), false},
		{"-1h", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"7 days", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := ParseSince(tt.in, now)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// fakeList serves GET /batches from pages keyed by cursor and records the
// queries it was sent.
func fakeList(t *testing.T, pages map[string]api.BatchPage) (*client.Client, *[]string) {
	t.Helper()
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/batches" {
			http.NotFound(w, r)
			return
		}
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pages[r.URL.Query().Get("cursor")])
	}))
	t.Cleanup(srv.Close)
	t.Setenv(client.EnvAPIURL, srv.URL)
	c, err := client.New(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}, client.Stack{})
	if err != nil {
		t.Fatal(err)
	}
	return c, &queries
}

// Guards `bulkrun list` (docs/cli.md "Listing batches"): the table's columns,
// following short pages up to --limit, --all following every cursor,
// --output json as the API's page, and the filters sent as the API's
// query.
func TestListCommand(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 15, 2, 0, time.UTC)
	pages := map[string]api.BatchPage{
		"": {Batches: []api.BatchSummary{
			{ID: "nightly-20261130T020000Z", Status: api.StatusCompleted, Pipeline: "webhook", ItemCount: 2000, Run: 1, CreatedAt: at, FinishedAt: at.Add(3 * time.Minute), NeedsAttention: true},
		}, NextCursor: "c1"},
		"c1": {Batches: []api.BatchSummary{}, NextCursor: "c2"}, // a short page: the API read its share
		"c2": {Batches: []api.BatchSummary{
			{ID: "orders-x", Status: api.StatusRefused, Pipeline: "webhook", CreatedAt: at.Add(-time.Hour), Refusal: &api.SubmitRefusal{Code: "invalid_request"}},
			{ID: "cli-abc", Status: api.StatusRunning, Pipeline: "thumbnail", ItemCount: 248, Run: 2, CreatedAt: at.Add(-2 * time.Hour), Stop: api.StatusCancelled},
		}, NextCursor: "c3"},
		"c3": {Batches: []api.BatchSummary{{ID: "old", Status: api.StatusSubmitting, Pipeline: "webhook", CreatedAt: at.Add(-48 * time.Hour)}}},
	}
	run := func(output string, args ...string) (string, string, []string) {
		c, queries := fakeList(t, pages)
		var out, errw bytes.Buffer
		a := &app{out: &out, errw: &errw, output: output, api: c, loaded: true}
		cmd := a.listCmd()
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("list %v: %v", args, err)
		}
		return out.String(), errw.String(), *queries
	}

	out, errw, queries := run("text", "--limit", "3", "--status", "running,refused", "--status", "completed", "--since", "2026-11-01")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "BATCH ") || !strings.Contains(lines[0], "NOTE") {
		t.Fatalf("table:\n%s", out)
	}
	for i, want := range [][]string{
		{"nightly-20261130T020000Z", "completed", "webhook", "2000", "2026-11-30T09:15:02Z", "2026-11-30T09:18:02Z", "needs attention"},
		{"orders-x", "refused", " - ", "refused: invalid_request"},
		{"cli-abc", "running", "thumbnail", "248", "stopping: cancelled"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	if !strings.Contains(errw, "--cursor c3") {
		t.Errorf("stderr %q: want the cursor to go on with", errw)
	}
	if len(queries) != 3 || !strings.Contains(queries[0], "status=running%2Crefused%2Ccompleted") ||
		!strings.Contains(queries[0], "since=2026-11-01T00%3A00%3A00Z") || !strings.Contains(queries[0], "limit=3") ||
		!strings.Contains(queries[2], "limit=2") {
		t.Errorf("queries %q", queries)
	}

	for _, bad := range [][]string{{"--status", "done"}, {"--since", "yesterday"}, {"--limit", "0"}} {
		var out, errw bytes.Buffer
		cmd := (&app{out: &out, errw: &errw, output: "text", loaded: true}).listCmd()
		cmd.SetArgs(bad)
		var ee *ExitError
		if err := cmd.Execute(); !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("list %v: %v, want a usage error naming %s", bad, err, bad[0])
		}
	}

	out, errw, _ = run("json", "--all")
	var page api.BatchPage
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(page.Batches) != 4 || page.Batches[3].ID != "old" || page.NextCursor != "" || errw != "" {
		t.Errorf("--all: %+v, stderr %q", page, errw)
	}
}

// Guards `bulkrun list --source` (docs/cli.md "Listing batches"): an
// s3:// URI is sent as it is; a key of the stack's bucket becomes its
// s3:// URI (a folder's key its prefix); a local file or folder becomes
// the object or prefix `bulkrun submit` uploads it to, so that the file
// finds the batches it started.
func TestListSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "orders.csv")
	if err := os.WriteFile(file, []byte("order_id,amount\n1,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(images, "a.png"), []byte("png"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, dirPrefix, err := uploadDirFiles(images)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ arg, want string }{
		{"s3://other/incoming/x.csv", "s3://other/incoming/x.csv"},
		{"incoming/orders (1).csv", "s3://stack-bucket/incoming/orders (1).csv"},
		{"images/", "s3://stack-bucket/images/*"},
		{file, "s3://stack-bucket/" + uploadFileKey(file, sha256.Sum256([]byte("order_id,amount\n1,2\n")))},
		{images, "s3://stack-bucket/" + dirPrefix + "*"},
	} {
		c, queries := fakeList(t, map[string]api.BatchPage{"": {Batches: []api.BatchSummary{}}})
		var out, errw bytes.Buffer
		a := &app{out: &out, errw: &errw, output: "text", api: c, loaded: true, outs: client.Stack{config.OutputBucket: "stack-bucket"}}
		cmd := a.listCmd()
		cmd.SetArgs([]string{"--source", tt.arg})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("list --source %s: %v", tt.arg, err)
		}
		if len(*queries) != 1 {
			t.Fatalf("list --source %s: %d calls", tt.arg, len(*queries))
		}
		q, _ := url.ParseQuery((*queries)[0])
		if got := q.Get("source"); got != tt.want {
			t.Errorf("list --source %s: source=%q, want %q", tt.arg, got, tt.want)
		}
	}
	if !strings.HasPrefix(uploadFileKey(file, [32]byte{}), "uploads/") || !strings.HasSuffix(uploadFileKey(file, [32]byte{}), "/orders.csv") {
		t.Errorf("upload key %q", uploadFileKey(file, [32]byte{}))
	}
}

// Guards `bulkrun sweep` (docs/operations.md, retention): one synchronous
// invocation of the stack's sweep function with the payload {}, as the
// schedule sends; its counts printed as text or as the function's JSON;
// exit 3 when batches are left for the next pass, and the function's own
// error reported when it fails.
func TestSweepCommand(t *testing.T) {
	var answer string
	var functionError string
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		calls = append(calls, r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Amz-Invocation-Type")+" "+body.String())
		if functionError != "" {
			w.Header().Set("X-Amz-Function-Error", functionError)
		}
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	run := func(output string) (string, error) {
		cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
			Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}
		var out, errw bytes.Buffer
		a := &app{out: &out, errw: &errw, output: output, aws: cfg, loaded: true,
			outs: client.Stack{config.OutputSweepFunction: "bulkrun-sweep"}}
		cmd := a.sweepCmd()
		cmd.SetArgs(nil)
		err := cmd.Execute()
		return out.String(), err
	}

	answer = `{"expired":3,"deleted":2,"stale":1,"malformed":0,"failed":0,"pending_deletion":0}`
	out, err := run("text")
	if err != nil || out != "swept: 3 expired, 2 deleted, 1 stale markers and 0 malformed ones removed, 0 failed, 0 pending deletion\n" {
		t.Fatalf("text: %q %v", out, err)
	}
	if len(calls) != 1 || calls[0] != "POST /2015-03-31/functions/bulkrun-sweep/invocations RequestResponse {}" {
		t.Fatalf("calls %q, want one synchronous invocation of the sweep function with {}", calls)
	}
	out, err = run("json")
	var res api.SweepResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Deleted != 2 || res.Stale != 1 {
		t.Fatalf("json: %q %v", out, err)
	}

	answer = `{"expired":2,"deleted":0,"stale":0,"malformed":0,"failed":1,"pending_deletion":1}`
	var ee *ExitError
	if _, err := run("text"); !errors.As(err, &ee) || ee.Code != ExitNeedsCheck || !strings.Contains(err.Error(), "2 expired batches not deleted yet") {
		t.Fatalf("batches left: %v, want exit %d naming them", err, ExitNeedsCheck)
	}

	answer, functionError = `{"errorType":"ThrottlingException","errorMessage":"rate exceeded"}`, "Unhandled"
	if _, err := run("text"); err == nil || errors.As(err, &ee) && ee.Code == ExitNeedsCheck || !strings.Contains(err.Error(), "rate exceeded") {
		t.Fatalf("function error: %v, want it reported", err)
	}
}

// TestListNotesAPause guards list's NOTE for a paused run: a paused batch
// is running (its status), and the note says who paused it and since
// when, for each of the three who pause; a finished batch's leftover pause
// says nothing.
func TestListNotesAPause(t *testing.T) {
	since := time.Date(2026, 12, 3, 8, 40, 0, 0, time.UTC)
	for by, want := range map[api.PauseBy]string{
		api.PauseByBudget: "paused by its budget since 2026-12-03T08:40:00Z",
		api.PauseByCaller: "paused by a caller since 2026-12-03T08:40:00Z",
		api.PauseByOutage: "paused by an outage since 2026-12-03T08:40:00Z",
	} {
		b := api.BatchSummary{ID: "b", Status: api.StatusRunning, Pause: &api.Pause{By: by, Since: since}}
		if got := note(b); got != want {
			t.Errorf("%s: note %q, want %q", by, got, want)
		}
	}
	done := api.BatchSummary{ID: "b", Status: api.StatusCompleted, Pause: &api.Pause{By: api.PauseByCaller, Since: since}}
	if got := note(done); strings.Contains(got, "paused") {
		t.Errorf("completed batch: note %q", got)
	}
}

// TestListNotesARateKeyBookedAhead guards list's NOTE for a running
// batch whose rate key (or token budget) is booked ahead: where its
// next unit's calls start, by which of the two, so that a batch showing
// little progress says why.
func TestListNotesARateKeyBookedAhead(t *testing.T) {
	until := time.Date(2026, 12, 6, 10, 15, 30, 0, time.UTC)
	for by, want := range map[string]string{
		api.BookedByRequests: "rate key api.example.com booked until 2026-12-06T10:15:30Z (14.2 s ahead)",
		api.BookedByTokens:   "token budget of api.example.com booked until 2026-12-06T10:15:30Z (14.2 s ahead)",
	} {
		b := api.BatchSummary{ID: "b", Status: api.StatusRunning, Live: &api.LiveView{
			RateBooked: &api.RateBooked{Key: "api.example.com", RequestsPerSecond: 20, By: by, Until: until, AheadSeconds: 14.2}}}
		if got := note(b); !strings.Contains(got, want) {
			t.Errorf("booked by %s: note %q, want it to say %q", by, got, want)
		}
	}
	b := api.BatchSummary{ID: "b", Status: api.StatusRunning, Live: &api.LiveView{}}
	if got := note(b); strings.Contains(got, "booked") {
		t.Errorf("nothing booked: note %q", got)
	}
	// Paused, the pause is why nothing moves: said once, and no booking
	// that reads as calls to come (a new user read both).
	b = api.BatchSummary{ID: "b", Status: api.StatusRunning, Pause: &api.Pause{By: api.PauseByCaller, Since: until},
		Live: &api.LiveView{Attention: []string{"paused by a caller since 2026-12-06T10:15:30Z", "3 items waiting for a retry"},
			RateBooked: &api.RateBooked{Key: "api.example.com", By: api.BookedByTokens, Until: until, AheadSeconds: 14.2}}}
	if got := note(b); strings.Count(got, "paused by") != 1 || strings.Contains(got, "booked") || !strings.Contains(got, "needs attention: 3 items waiting for a retry") {
		t.Errorf("paused: note %q, want the pause once, no booking, the other attention", got)
	}
}

// TestListNotesARateConflict guards list's NOTE for a running batch
// whose rate key another running batch names at another rate: the key,
// the other's rate and the other batch, as watch says it; none without.
func TestListNotesARateConflict(t *testing.T) {
	c := &api.RateConflict{Key: "api.example.com", BatchID: "later", Rate: api.Rate{Key: "api.example.com", RequestsPerSecond: 20}, Batches: 1}
	b := api.BatchSummary{ID: "b", Status: api.StatusRunning, Live: &api.LiveView{RateConflict: c}}
	if got, want := note(b), "rate key api.example.com also named at 20/s by later"; !strings.Contains(got, want) {
		t.Errorf("note %q, want it to say %q", got, want)
	}
	b.Live.RateConflict = nil
	if got := note(b); strings.Contains(got, "rate key") {
		t.Errorf("no conflict: note %q", got)
	}
}

// TestListNotesAKeptHalt guards bulkrun list on a finished batch that
// keeps a halt on a refused credential (a cancel of its withheld items):
// it needs attention, and its note says which halt and what to do
// before a resume; a batch without one says neither.
func TestListNotesAKeptHalt(t *testing.T) {
	const subject = "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/token"
	b := api.Batch{ID: "b1", Status: api.StatusCancelled, Run: 1, Stop: api.StatusCancelled,
		Halts: map[string]api.Halt{subject: {Subject: subject}}}
	s := api.Summary(b)
	want := "halt kept on " + subject + ": fix its secret, then bulkrun lift b1 before a resume"
	if !s.NeedsAttention || !strings.Contains(note(s), want) || !strings.Contains(note(s), "needs attention") {
		t.Errorf("a cancelled batch keeping a halt: needs_attention %v, note %q; want true and %q", s.NeedsAttention, note(s), want)
	}
	b.Halts = nil
	if s := api.Summary(b); s.NeedsAttention || strings.Contains(note(s), "halt") {
		t.Errorf("a cancelled batch without a halt: needs_attention %v, note %q", s.NeedsAttention, note(s))
	}
}
