package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
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

// fakeAPI records the console's calls and answers from fixed data.
type fakeAPI struct {
	mu     sync.Mutex
	calls  []string
	report api.Report
}

func (f *fakeAPI) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeAPI) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeAPI) ListBatches(_ context.Context, r api.ListBatchesRequest) (api.BatchPage, error) {
	f.record("list")
	return api.BatchPage{Batches: []api.BatchSummary{{ID: "b1", Status: api.StatusCompleted}}}, nil
}
func (f *fakeAPI) Status(_ context.Context, id string) (wire.BatchView, error) {
	f.record("status " + id)
	return wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusCompleted, Run: 1, ReportKey: api.ReportKey(id, 1)}}, nil
}
func (f *fakeAPI) Report(_ context.Context, id string) (api.Report, error) {
	f.record("report " + id)
	return f.report, nil
}
func (f *fakeAPI) Items(_ context.Context, id string, o api.Outcome, cursor string, limit int) (api.ItemPage, error) {
	f.record(fmt.Sprintf("items %s %s %q %d", id, o, cursor, limit))
	return api.ItemPage{}, nil
}
func (f *fakeAPI) Inputs(_ context.Context, id string, o api.Outcome, cursor string, limit int) (api.InputPage, error) {
	f.record(fmt.Sprintf("inputs %s %s %q %d", id, o, cursor, limit))
	switch {
	case id == "pos-1":
		return api.InputPage{}, &client.APIError{Status: 409, Body: wire.ErrorBody{Code: wire.CodeConflict, Message: "positional keys"}}
	case cursor == "":
		return api.InputPage{Format: api.FormatCSV, Body: []byte("id;name\na;\"A; x\"\n"), Count: 1, NextCursor: "c1"}, nil
	}
	return api.InputPage{Format: api.FormatCSV, Body: []byte("id;name\nb;B\n"), Count: 1}, nil
}
func (f *fakeAPI) Resume(_ context.Context, id string) (wire.BatchView, error) {
	f.record("resume " + id)
	return wire.BatchView{Batch: api.Batch{ID: id, Run: 2}}, nil
}
func (f *fakeAPI) Cancel(_ context.Context, id string) (wire.BatchView, error) {
	f.record("cancel " + id)
	return wire.BatchView{}, nil
}
func (f *fakeAPI) Pause(_ context.Context, id string) (wire.BatchView, error) {
	f.record("pause " + id)
	return wire.BatchView{}, nil
}
func (f *fakeAPI) Unpause(_ context.Context, id string) (wire.BatchView, error) {
	f.record("unpause " + id)
	return wire.BatchView{}, nil
}
func (f *fakeAPI) Approve(_ context.Context, id string) (wire.BatchView, error) {
	f.record("approve " + id)
	return wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusRunning, Run: 1, Plan: api.Plan{Sample: 200},
		Approval: api.ApprovalOf(200, api.ApprovalApproved, api.DecidedByCaller, time.Date(2026, 12, 1, 19, 4, 0, 0, time.UTC), nil)}}, nil
}
func (f *fakeAPI) Reject(_ context.Context, id string) (wire.BatchView, error) {
	f.record("reject " + id)
	if id == "approved-1" {
		return wire.BatchView{}, &client.APIError{Status: 409, Body: wire.ErrorBody{Code: wire.CodeConflict, Message: "reject approved-1: approved already (by caller); cancel it instead"}}
	}
	return wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusRunning, Run: 1, Stop: api.StatusCancelled}}, nil
}
func (f *fakeAPI) SetCeilingsAll(_ context.Context, id string, raise api.Ceilings) (api.CeilingsResult, error) {
	f.record(fmt.Sprintf("ceilings %s %g %g", id, raise.SpendUSD, raise.Tokens))
	return api.CeilingsResult{Ceilings: raise, Woken: 3, Done: true}, nil
}

func (f *fakeAPI) SetBudget(_ context.Context, id string, usd float64) (wire.BatchView, error) {
	f.record(fmt.Sprintf("budget %s %g", id, usd))
	if usd <= 4 {
		return wire.BatchView{}, &client.APIError{Status: 409, Body: wire.ErrorBody{Code: wire.CodeConflict, Message: "at or under the spend"}}
	}
	return wire.BatchView{Batch: api.Batch{ID: id, BudgetUSD: usd}}, nil
}
func (f *fakeAPI) Release(_ context.Context, id, key string) error {
	f.record("release " + id + " " + key)
	return nil
}
func (f *fakeAPI) Signal(_ context.Context, id, key, token string, payload json.RawMessage) (api.SignalResult, error) {
	f.record("signal " + id + " " + key + " token=" + token + " payload=" + string(payload))
	return api.SignalResult{Key: key, Woken: true}, nil
}
func (f *fakeAPI) Forget(_ context.Context, id string) error {
	f.record("forget " + id)
	return nil
}
func (f *fakeAPI) Correct(_ context.Context, id string, req api.CorrectRequest) (wire.CorrectionView, error) {
	f.record(fmt.Sprintf("correct %s %s %s", id, req.KeyField, req.Source.Items))
	created := true
	return wire.CorrectionView{Batch: wire.BatchView{Batch: api.Batch{ID: id, Run: 2, RunRevision: 2}, Created: &created},
		Revision: api.Revision{N: 2, Items: 2, Run: 2}}, nil
}

// fakeObjects serves objects of the stack's bucket from a map, recording
// the keys read.
type fakeObjects struct {
	mu    sync.Mutex
	objs  map[string]fakeObject
	reads []string
}

type fakeObject struct {
	body, contentType string
}

func (o *fakeObjects) GetObject(_ context.Context, key string, offset int64) (io.ReadCloser, string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads = append(o.reads, key)
	obj, ok := o.objs[key]
	if !ok {
		return nil, "", fmt.Errorf("%s: %w", key, ErrNoObject)
	}
	return io.NopCloser(strings.NewReader(obj.body[offset:])), obj.contentType, nil
}

const testPort = 8420

func newTestServer(t *testing.T, api API, objs ObjectReader) *Server {
	t.Helper()
	if objs == nil {
		objs = &fakeObjects{}
	}
	c, err := New(api, objs, "stack-bucket", testPort)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// do sends a request to the console as a browser on host would, with the
// console's session cookie unless hdr sets "Cookie" ("" for none).
func do(c *Server, method, target, host string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Host = host
	r.Header.Set("Cookie", c.cookieName()+"="+c.Token())
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	if r.Header.Get("Cookie") == "" {
		r.Header.Del("Cookie")
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w
}

const host = "127.0.0.1:8420"

// TestConsoleActionsRefuseOtherSites guards the console's protection of
// its state-changing actions (resume, cancel, release, forget) against
// cross-site requests: any web page can make a browser POST to localhost,
// so an action needs the page's per-process token, the console's own
// Origin, no cross-site Sec-Fetch-Site and a JSON body; and every request
// needs the console's Host (a rebound DNS name gets 421). None of the
// refused requests reaches the API.
func TestConsoleActionsRefuseOtherSites(t *testing.T) {
	api := &fakeAPI{}
	c := newTestServer(t, api, nil)
	good := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token(), "Sec-Fetch-Site": "same-origin"}
	with := func(k, v string) map[string]string {
		h := copyHeaders(good)
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	tests := []struct {
		name   string
		method string
		path   string
		host   string
		hdr    map[string]string
		want   int
	}{
		{"no token", "POST", "/api/batches/b1/resume", host, with(TokenHeader, ""), 403},
		{"wrong token", "POST", "/api/batches/b1/resume", host, with(TokenHeader, strings.Repeat("0", 64)), 403},
		{"another origin", "POST", "/api/batches/b1/cancel", host, with("Origin", "http://evil.example"), 403},
		{"another port on localhost", "POST", "/api/batches/b1/forget", host, with("Origin", "http://127.0.0.1:9999"), 403},
		{"no origin", "POST", "/api/batches/b1/resume", host, with("Origin", ""), 403},
		{"null origin", "POST", "/api/batches/b1/resume", host, with("Origin", "null"), 403},
		{"cross-site fetch", "POST", "/api/batches/b1/resume", host, with("Sec-Fetch-Site", "cross-site"), 403},
		{"form post (text/plain)", "POST", "/api/batches/b1/release", host, with("Content-Type", "text/plain"), 415},
		{"form post (urlencoded)", "POST", "/api/batches/b1/release", host, with("Content-Type", "application/x-www-form-urlencoded"), 415},
		{"rebound host name", "POST", "/api/batches/b1/resume", "evil.example:8420", good, 421},
		{"rebound host name reads", "GET", "/api/batches", "evil.example:8420", nil, 421},
		{"rebound host name reads the page", "GET", "/", "evil.example:8420", nil, 421},
		{"cross-site read", "GET", "/api/batches", host, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(c, tt.method, tt.path, tt.host, tt.hdr, `{"key":"k"}`)
			if w.Code != tt.want {
				t.Errorf("HTTP %d %s, want %d", w.Code, w.Body.String(), tt.want)
			}
		})
	}
	if calls := api.Calls(); len(calls) > 0 {
		t.Fatalf("refused requests reached the API: %v", calls)
	}
	// The same actions from the page itself go through, once each.
	for _, p := range []string{"resume", "cancel", "release", "forget"} {
		if w := do(c, "POST", "/api/batches/b1/"+p, host, good, `{"key":"a/b"}`); w.Code/100 != 2 {
			t.Errorf("%s from the page: HTTP %d %s", p, w.Code, w.Body.String())
		}
	}
	if w := do(c, "POST", "/api/batches/b1/resume", "localhost:8420", with("Origin", "http://localhost:8420"), `{}`); w.Code != 202 {
		t.Errorf("resume from http://localhost:8420: HTTP %d %s", w.Code, w.Body.String())
	}
	want := []string{"resume b1", "cancel b1", "release b1 a/b", "forget b1", "resume b1"}
	if calls := api.Calls(); !slices.Equal(calls, want) {
		t.Errorf("API calls %v, want %v", calls, want)
	}
}

func copyHeaders(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestConsoleNoOpenProxy guards the console's fixed set of operations: a
// path, method or parameter outside it is refused without any call to the
// API, and the thumbnail route reads only objects under the batch's own
// outputs in the stack's bucket, and serves only images.
func TestConsoleNoOpenProxy(t *testing.T) {
	api := &fakeAPI{}
	objs := &fakeObjects{objs: map[string]fakeObject{
		"batches/b1/outputs/a.png":      {"PNG", "image/png"},
		"batches/b1/outputs/x.html":     {"<script>alert(1)</script>", "text/html"},
		"batches/b1/runs/1/report.json": {"{}", "application/json"},
	}}
	c := newTestServer(t, api, objs)
	tok := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token()}
	tests := []struct {
		name, method, path string
		hdr                map[string]string
		want               int
	}{
		{"any other API path", "GET", "/api/batches/b1/report", nil, 404},
		{"a path of the API's own", "GET", "/restapis/x/v1/_user_request_/batches", nil, 404},
		{"submit", "POST", "/api/batches", tok, 405},
		{"delete", "DELETE", "/api/batches/b1", tok, 405},
		{"an asset folder", "GET", "/assets/", nil, 404},
		{"the raw page", "GET", "/assets/index.html", nil, 404},
		{"bad batch id", "GET", "/api/batches/..%2Fetc/items?outcome=failed", nil, 400},
		{"items of succeeded", "GET", "/api/batches/b1/items?outcome=succeeded", nil, 400},
		{"items limit", "GET", "/api/batches/b1/items?outcome=failed&limit=5000", nil, 400},
		{"list status", "GET", "/api/batches?status=bogus", nil, 400},
		{"thumbnail of another batch", "GET", "/api/batches/b1/thumbnail?uri=s3://stack-bucket/batches/b2/outputs/a.png", nil, 403},
		{"thumbnail of another bucket", "GET", "/api/batches/b1/thumbnail?uri=s3://other/batches/b1/outputs/a.png", nil, 403},
		{"thumbnail of the report", "GET", "/api/batches/b1/thumbnail?uri=s3://stack-bucket/batches/b1/runs/1/report.json", nil, 403},
		{"thumbnail of a prefix look-alike", "GET", "/api/batches/b1/thumbnail?uri=s3://stack-bucket/batches/b1/outputsx/a.png", nil, 403},
		{"thumbnail not an image", "GET", "/api/batches/b1/thumbnail?uri=s3://stack-bucket/batches/b1/outputs/x.html", nil, 415},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(c, tt.method, tt.path, host, tt.hdr, "{}")
			if w.Code != tt.want {
				t.Errorf("HTTP %d %s, want %d", w.Code, w.Body.String(), tt.want)
			}
		})
	}
	if calls := api.Calls(); len(calls) > 0 {
		t.Errorf("refused requests reached the API: %v", calls)
	}
	if !slices.Equal(objs.reads, []string{"batches/b1/outputs/x.html"}) {
		t.Errorf("objects read %v, want only the batch's output", objs.reads)
	}
	w := do(c, "GET", "/api/batches/b1/thumbnail?uri=s3://stack-bucket/batches/b1/outputs/a.png", host, nil, "")
	if w.Code != 200 || w.Body.String() != "PNG" || w.Header().Get("Content-Type") != "image/png" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("thumbnail: HTTP %d %q %v", w.Code, w.Body.String(), w.Header())
	}
}

// TestConsoleThumbnailPages guards the thumbnail grid's paging: pages of
// the succeeded results lines whose output names a thumbnail under the
// batch's outputs, each continuing at the byte where the previous one
// stopped, the last without a cursor; an output elsewhere is left out.
func TestConsoleThumbnailPages(t *testing.T) {
	var lines strings.Builder
	for i := range 5 {
		fmt.Fprintf(&lines, `{"key":"k%d","outcome":"succeeded","output":{"thumbnail":"s3://stack-bucket/batches/b1/outputs/k%d.png"},"attempts":1}`+"\n", i, i)
	}
	lines.WriteString(`{"key":"evil","outcome":"succeeded","output":{"thumbnail":"s3://stack-bucket/batches/b2/outputs/x.png"},"attempts":1}` + "\n")
	results := "batches/b1/runs/1/results/succeeded.jsonl"
	api := &fakeAPI{report: api.Report{BatchID: "b1", Run: 1, Results: api.Results{Files: map[api.Outcome]api.Location{
		api.OutcomeSucceeded: {URI: "s3://stack-bucket/" + results}}}}}
	c := newTestServer(t, api, &fakeObjects{objs: map[string]fakeObject{results: {lines.String(), "application/x-ndjson"}}})
	var keys []string
	cursor, pages := "", 0
	for {
		w := do(c, "GET", "/api/batches/b1/thumbnails?limit=2&cursor="+cursor, host, nil, "")
		if w.Code != 200 {
			t.Fatalf("HTTP %d %s", w.Code, w.Body.String())
		}
		var p struct {
			Thumbnails []Thumb `json:"thumbnails"`
			NextCursor string  `json:"next_cursor"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		for _, th := range p.Thumbnails {
			keys = append(keys, th.Key)
			if want := "/api/batches/b1/thumbnail?uri=s3%3A%2F%2Fstack-bucket%2Fbatches%2Fb1%2Foutputs%2F" + th.Key + ".png"; th.Src != want {
				t.Errorf("src %s, want %s", th.Src, want)
			}
		}
		pages++
		if p.NextCursor == "" || pages > 10 {
			break
		}
		cursor = p.NextCursor
	}
	if want := []string{"k0", "k1", "k2", "k3", "k4"}; !slices.Equal(keys, want) || pages != 3 {
		t.Errorf("thumbnails %v in %d pages, want %v in 3", keys, pages, want)
	}
}

// TestConsoleNeverExposesCredentials guards the console's promise that the
// page never sees the user's credentials: the API calls behind the
// console's answers are signed (SigV4) in this process, and nothing the
// browser gets — the page, its assets, the JSON answers, an API error —
// carries the access key, the secret key, the session token or the
// signature.
func TestConsoleNeverExposesCredentials(t *testing.T) {
	const akid, secret, session = "AKIDCONSOLETEST", "SECRETconsoleTEST/abc", "SESSIONconsoleTOKEN"
	var mu sync.Mutex
	var auths []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/batches":
			fmt.Fprint(w, `{"batches":[{"batch_id":"b1","status":"running","pipeline":"enrich","item_count":2,"run":1,"created_at":"2026-11-30T10:00:00Z","needs_attention":false}]}`)
		case r.URL.Path == "/batches/b1":
			fmt.Fprint(w, `{"batch_id":"b1","status":"running","pipeline":"enrich","item_count":2,"run":1,"census":{"total":2,"succeeded":1,"failed":0,"quarantined":0,"cancelled":0,"in_flight":1,"pending":0,"cost":{},"run_spent":{}}}`)
		default:
			w.WriteHeader(404)
			fmt.Fprint(w, `{"code":"not_found","message":"no such batch"}`)
		}
	}))
	defer upstream.Close()
	t.Setenv(client.EnvAPIURL, upstream.URL)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(akid, secret, session)}
	api, err := client.New(cfg, client.Stack{config.OutputBucket: "stack-bucket"})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestServer(t, api, nil)
	srv := &http.Server{Handler: c}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go srv.Serve(ln)
	var seen strings.Builder
	for _, path := range []string{"/", "/assets/app.js", "/assets/style.css", "/api/batches", "/api/batches/b1", "/api/batches/nope", "/api/batches/b1/items?outcome=failed"} {
		w := do(c, "GET", path, host, nil, "")
		fmt.Fprintf(&seen, "%s %d %v\n%s\n", path, w.Code, w.Header(), w.Body.String())
		if path == "/api/batches/nope" && w.Code != 404 {
			t.Errorf("an API error is not passed on: HTTP %d %s", w.Code, w.Body.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auths) == 0 {
		t.Fatal("the console made no API call")
	}
	for _, a := range auths {
		if !strings.HasPrefix(a, "AWS4-HMAC-SHA256 Credential="+akid+"/") {
			t.Errorf("API call not signed with the user's credentials: Authorization %q", a)
		}
	}
	out := seen.String()
	if !strings.Contains(out, `"census"`) {
		t.Fatalf("the answers hold no census:\n%s", out)
	}
	sig := auths[0][strings.LastIndex(auths[0], "Signature=")+len("Signature="):]
	for _, s := range []string{akid, secret, session, sig, "AWS4-HMAC-SHA256"} {
		if strings.Contains(out, s) {
			t.Errorf("the browser is given %q", s)
		}
	}
}

// TestConsolePage guards what the page is served with: the per-process
// token (random, 64 hex digits), a content security policy allowing only
// the console's own scripts, styles, images and connections, and no
// framing; the assets embedded in the binary.
func TestConsolePage(t *testing.T) {
	c1 := newTestServer(t, &fakeAPI{}, nil)
	c2 := newTestServer(t, &fakeAPI{}, nil)
	if c1.Token() == c2.Token() || len(c1.Token()) != 64 {
		t.Errorf("tokens %q and %q: want two different 64-hex-digit tokens", c1.Token(), c2.Token())
	}
	w := do(c1, "GET", "/", host, nil, "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `<meta name="bulkrun-token" content="`+c1.Token()+`">`) {
		t.Fatalf("page: HTTP %d, token missing:\n%s", w.Code, w.Body.String())
	}
	csp := w.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "img-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if w.Header().Get("X-Frame-Options") != "DENY" {
		t.Errorf("X-Frame-Options %q", w.Header().Get("X-Frame-Options"))
	}
	for _, a := range []string{"/assets/app.js", "/assets/style.css"} {
		if w := do(c1, "GET", a, host, nil, ""); w.Code != 200 || w.Body.Len() < 1000 {
			t.Errorf("%s: HTTP %d, %d bytes", a, w.Code, w.Body.Len())
		}
	}
	for _, a := range []string{"/", "/assets/app.js", "/assets/style.css"} {
		body := do(c1, "GET", a, host, nil, "").Body.String()
		if strings.Contains(body, "http://") || strings.Contains(body, "https://") || strings.Contains(body, "url(//") {
			t.Errorf("%s links another host", a)
		}
	}
}

// TestConsoleNeedsSession guards the console against the other users and
// processes of the machine, which can connect to 127.0.0.1 too: without
// the session cookie that only the printed address (?token=) gives, the
// page, the data and the actions are refused and nothing reaches the API
// (product line: "the console acts only for its own page", docs/console.md "The
// console"). The static assets hold no data and are served to anyone.
func TestConsoleNeedsSession(t *testing.T) {
	api := &fakeAPI{}
	c := newTestServer(t, api, nil)
	other := newTestServer(t, api, nil)
	action := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token(), "Sec-Fetch-Site": "same-origin"}
	for _, tt := range []struct {
		name, method, path, cookie string
		hdr                        map[string]string
	}{
		{"the page", "GET", "/", "", nil},
		{"the list", "GET", "/api/batches", "", nil},
		{"a batch", "GET", "/api/batches/b1", "", nil},
		{"items", "GET", "/api/batches/b1/items?outcome=failed", "", nil},
		{"a thumbnail", "GET", "/api/batches/b1/thumbnail?uri=s3://stack-bucket/batches/b1/outputs/a.png", "", nil},
		{"an action with the page's token but no session", "POST", "/api/batches/b1/forget", "", action},
		{"a wrong session", "GET", "/api/batches", c.cookieName() + "=" + strings.Repeat("0", 64), nil},
		{"another console's session", "GET", "/api/batches", c.cookieName() + "=" + other.Token(), nil},
		{"the token under another port's cookie", "GET", "/api/batches", "bulkrun_console_9999=" + c.Token(), nil},
		{"a wrong token in the address", "GET", "/?token=" + other.Token(), "", nil},
		{"an empty token in the address", "GET", "/?token=", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hdr := copyHeaders(tt.hdr)
			hdr["Cookie"] = tt.cookie
			w := do(c, tt.method, tt.path, host, hdr, "{}")
			if w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), c.Token()) {
				t.Errorf("HTTP %d %s, want 403 without the token", w.Code, w.Body.String())
			}
			if len(w.Result().Cookies()) > 0 {
				t.Errorf("a refused request got cookies %v", w.Result().Cookies())
			}
		})
	}
	if calls := api.Calls(); len(calls) > 0 {
		t.Fatalf("requests without the session reached the API: %v", calls)
	}
	for _, a := range []string{"/assets/app.js", "/assets/style.css"} {
		if w := do(c, "GET", a, host, map[string]string{"Cookie": ""}, ""); w.Code != 200 {
			t.Errorf("%s without a session: HTTP %d, want 200", a, w.Code)
		}
	}
	// The printed address: the session cookie, and a redirect that takes
	// the token out of the address bar.
	w := do(c, "GET", "/?token="+c.Token(), host, map[string]string{"Cookie": ""}, "")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/" {
		t.Fatalf("GET /?token=: HTTP %d Location %q, want 303 to /", w.Code, w.Header().Get("Location"))
	}
	var got *http.Cookie
	for _, k := range w.Result().Cookies() {
		if k.Name == c.cookieName() {
			got = k
		}
	}
	if got == nil || got.Value != c.Token() || !got.HttpOnly || got.SameSite != http.SameSiteLaxMode || got.Path != "/" {
		t.Fatalf("session cookie %+v, want %s=token, HttpOnly, SameSite=Lax, Path=/", got, c.cookieName())
	}
	if w := do(c, "GET", "/api/batches", host, map[string]string{"Cookie": got.Name + "=" + got.Value}, ""); w.Code != 200 {
		t.Errorf("the list with the session: HTTP %d %s", w.Code, w.Body.String())
	}
}

// Guards the console list's source column (docs/console.md): where each
// batch's items came from, in a few words, whatever started it.
func TestSourceOf(t *testing.T) {
	for _, tt := range []struct{ source, by, kind, label string }{
		{"s3://stack-bucket/incoming/records (1).csv", "s3-upload:AWS:AIDA", SourceKindUpload, "incoming/records (1).csv"},
		{"s3://stack-bucket/uploads/0a1b2c3d4e5f6071/texts.jsonl", "arn:aws:iam::1:user/a", SourceKindCLI, "texts.jsonl"},
		{"s3://stack-bucket/uploads/0a1b2c3d4e5f6071/*", "arn:aws:iam::1:user/a", SourceKindCLI, "local folder"},
		{"s3://stack-bucket/exports/2026/*", "", SourceKindS3, "exports/2026/*"},
		{"s3://other-bucket/in/orders.jsonl", "", SourceKindS3, "other-bucket/in/orders.jsonl"},
		{"inline", "arn:aws:iam::1:user/a", SourceKindInline, "inline items"},
		{"", "", SourceKindInline, "inline items"},
		{"s3://stack-bucket/daily/*", "schedule:nightly", SourceKindSchedule, "schedule nightly · daily/*"},
		{"s3://stack-bucket-2/incoming/x.csv", "", SourceKindS3, "stack-bucket-2/incoming/x.csv"},
	} {
		kind, label := SourceOf("stack-bucket", tt.source, tt.by)
		if kind != tt.kind || label != tt.label {
			t.Errorf("SourceOf(%q, %q) = %q, %q; want %q, %q", tt.source, tt.by, kind, label, tt.kind, tt.label)
		}
	}
}

// refusedAPI lists one refused upload and one completed batch.
type refusedAPI struct{ fakeAPI }

func (f *refusedAPI) ListBatches(_ context.Context, r api.ListBatchesRequest) (api.BatchPage, error) {
	f.record("list")
	return api.BatchPage{Batches: []api.BatchSummary{
		{ID: "up-1", Status: api.StatusRefused, Refusal: &api.SubmitRefusal{Code: "invalid_request", Line: 3}},
		{ID: "b1", Status: api.StatusCompleted},
	}}, nil
}

func (f *refusedAPI) Status(_ context.Context, id string) (wire.BatchView, error) {
	f.record("status " + id)
	v := wire.BatchView{Batch: api.Batch{ID: id, Status: api.StatusCompleted, Run: 1, Source: "inline"}}
	if id == "up-1" {
		v.Status, v.Source, v.SubmittedBy = api.StatusRefused, "s3://stack-bucket/incoming/broken.csv", "s3-upload:X"
	}
	return v, nil
}

// Guards the console list (docs/console.md): every listed batch, a refused
// upload included, carries its source and where it came from.
func TestConsoleListSources(t *testing.T) {
	api := &refusedAPI{}
	c := newTestServer(t, api, nil)
	w := do(c, "GET", "/api/batches", "127.0.0.1:8420", map[string]string{"Cookie": c.cookieName() + "=" + c.Token()}, "")
	if w.Code != 200 {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	var page Page
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Batches) != 2 {
		t.Fatalf("list: %+v", page)
	}
	up := page.Batches[0]
	if up.Source != "s3://stack-bucket/incoming/broken.csv" || up.SourceKind != SourceKindUpload || up.SourceLabel != "incoming/broken.csv" || up.Refusal == nil || up.Refusal.Line != 3 {
		t.Errorf("refused upload: %+v", up)
	}
	if b := page.Batches[1]; b.SourceKind != SourceKindInline || b.SourceLabel != "inline items" {
		t.Errorf("inline batch: %+v", b)
	}
}

// Corrections from the console (docs/console.md, "Correcting items"): the
// page sends the file it read; the console reads it with submit's readers
// — JSON lines or CSV, the key field the batch's unless named — and sends
// its items inline to the corrections route, answering 202 with the
// revision. A malformed line, a file without the key, a format it cannot
// tell or a file over ConsoleCorrectionMax is refused without any call;
// the route needs the page's token as every action does.
func TestConsoleCorrections(t *testing.T) {
	api := &fakeAPI{}
	c := newTestServer(t, api, nil)
	good := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token(), "Sec-Fetch-Site": "same-origin"}
	body := func(name, content, keyField string) string {
		b, _ := json.Marshal(Correction{FileName: name, Content: content, KeyField: keyField})
		return string(b)
	}
	for _, tt := range []struct {
		name, body string
		want       int
		says       string
	}{
		{"a line that is not JSON", body("fixed.jsonl", "{\"k\":\"a\"}\n{oops\n", "k"), 400, "line 2"},
		{"an item without the key", body("fixed.jsonl", "{\"id\":\"a\"}\n", "k"), 400, "fixed.jsonl"},
		{"a format it cannot tell", body("fixed.txt", "{\"k\":\"a\"}\n", "k"), 400, "cannot tell the format"},
		{"no items", body("fixed.jsonl", "\n", "k"), 400, "no items"},
		{"too large", body("fixed.jsonl", strings.Repeat("x", CorrectionMax+1), "k"), 413, "bulkrun correct b1 FILE"},
		{"an unknown field", `{"file":"x"}`, 400, "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := do(c, "POST", "/api/batches/b1/corrections", host, good, tt.body)
			if w.Code != tt.want || !strings.Contains(w.Body.String(), tt.says) {
				t.Errorf("HTTP %d %s, want %d saying %q", w.Code, w.Body.String(), tt.want, tt.says)
			}
		})
	}
	if w := do(c, "POST", "/api/batches/b1/corrections", host, copyHeaders(map[string]string{"Origin": "http://" + host, "Content-Type": "application/json"}), body("fixed.jsonl", "{\"k\":\"a\"}\n", "k")); w.Code != 403 {
		t.Errorf("without the page's token: HTTP %d, want 403", w.Code)
	}
	if calls := api.Calls(); len(calls) > 0 {
		t.Fatalf("refused corrections reached the API: %v", calls)
	}
	// JSON lines with the key field named; CSV with the batch's (the fake
	// batch has none: named here too).
	w := do(c, "POST", "/api/batches/b1/corrections", host, good, body("fixed.jsonl", "{\"k\":\"a\",\"text\":\"x y\"}\n{\"k\":\"b\",\"text\":\"z\"}\n", "k"))
	var v wire.CorrectionView
	if err := json.Unmarshal(w.Body.Bytes(), &v); w.Code != 202 || err != nil || v.Revision.N != 2 {
		t.Fatalf("corrections: HTTP %d %s", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b1/corrections", host, good, body("fixed.csv", "k,text\na,x y\n", "k")); w.Code != 202 {
		t.Fatalf("CSV corrections: HTTP %d %s", w.Code, w.Body.String())
	}
	want := []string{`correct b1 k [{"k":"a","text":"x y"},{"k":"b","text":"z"}]`, `correct b1 k [{"k":"a","text":"x y"}]`}
	if calls := api.Calls(); !slices.Equal(calls, want) {
		t.Errorf("API calls %q, want %q", calls, want)
	}
}

// Guards the batch page's "what to do" for a run whose items all failed
// the same way: the failed results lines are grouped by reason and error,
// an error that names its item's key being one cause whatever the key.
func TestFailureCausesGroupByReasonAndError(t *testing.T) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range 3000 {
		k := fmt.Sprintf("order-%04d", i)
		_ = enc.Encode(api.ResultLine{Key: k, Outcome: api.OutcomeFailed, Run: 1, Revision: 1, Reason: api.ReasonPermanent,
			Error: "webhook: " + k + ": HTTP 401 Unauthorized", Attempts: 1})
	}
	f, err := FailureCauses(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Complete || f.Read != 3000 || len(f.Causes) != 1 {
		t.Fatalf("3,000 items failed with one error: %+v", f)
	}
	if c := f.Causes[0]; c.Reason != api.ReasonPermanent || c.Error != "webhook: {key}: HTTP 401 Unauthorized" || c.Items != 3000 || c.Example != "order-0000" {
		t.Errorf("cause %+v", c)
	}
	b.Reset()
	for i, l := range []api.ResultLine{
		{Key: "a", Reason: api.ReasonMaxAttempts, Error: "attempt 3 of 3: timeout"},
		{Key: "b", Reason: api.ReasonPermanent, Error: "no text"},
		{Key: "c", Reason: api.ReasonPermanent, Error: "no text"},
	} {
		l.Outcome, l.Run, l.Attempts = api.OutcomeFailed, 1, i+1
		_ = enc.Encode(l)
	}
	f, err = FailureCauses(&b)
	if err != nil || len(f.Causes) != 2 || f.Causes[0].Error != "no text" || f.Causes[0].Items != 2 || f.Causes[1].Reason != api.ReasonMaxAttempts {
		t.Errorf("two causes, the commonest first: %+v, %v", f, err)
	}
}

// TestConsoleInputsDownload guards the "Failed items' inputs" download:
// every page of the API's inputs joined into one CSV file with its ;
// delimiter and the header once, named after the batch, as an attachment;
// an outcome other than failed or quarantined is refused before the API,
// and the API's refusal of the first page (positional keys) is answered.
func TestConsoleInputsDownload(t *testing.T) {
	fake := &fakeAPI{}
	c := newTestServer(t, fake, nil)
	w := do(c, "GET", "/api/batches/b1/inputs?outcome=failed", host, nil, "")
	if w.Code != 200 || w.Body.String() != "id;name\na;\"A; x\"\nb;B\n" || w.Header().Get("Content-Type") != api.ContentTypeCSV ||
		w.Header().Get("Content-Disposition") != `attachment; filename="b1-failed-inputs.csv"` {
		t.Fatalf("download: %d %v %q", w.Code, w.Header(), w.Body.String())
	}
	if got := fake.Calls(); len(got) != 2 || got[0] != `inputs b1 failed "" 1000` || got[1] != `inputs b1 failed "c1" 1000` {
		t.Errorf("calls %q", got)
	}
	if w := do(c, "GET", "/api/batches/b1/inputs?outcome=withheld", host, nil, ""); w.Code != 400 || len(fake.Calls()) != 2 {
		t.Errorf("outcome withheld: %d %s", w.Code, w.Body.String())
	}
	if w := do(c, "GET", "/api/batches/pos-1/inputs?outcome=failed", host, nil, ""); w.Code != 409 || !strings.Contains(w.Body.String(), "positional keys") {
		t.Errorf("positional keys: %d %s", w.Code, w.Body.String())
	}
	if w := do(c, "GET", "/api/batches/b1/inputs?outcome=failed", host, map[string]string{"Cookie": ""}, ""); w.Code != 403 {
		t.Errorf("without the session: %d", w.Code)
	}
}

// TestConsoleRaisesABudget: the page's budget action sends the new
// budget to the API (POST …/budget) and passes its answer on; a body
// without budget_usd is refused before the API, and the API's 409 (a
// budget at or under the spend) reaches the page as a 409.
func TestConsoleRaisesABudget(t *testing.T) {
	f := &fakeAPI{}
	c := newTestServer(t, f, nil)
	good := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token(), "Sec-Fetch-Site": "same-origin"}
	if w := do(c, "POST", "/api/batches/b1/budget", host, good, `{"budget_usd": 25.5}`); w.Code != 202 || !strings.Contains(w.Body.String(), `"budget_usd":25.5`) {
		t.Errorf("raise: HTTP %d %s, want 202 with the new budget", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b1/budget", host, good, `{}`); w.Code != 400 || !strings.Contains(w.Body.String(), "budget_usd") {
		t.Errorf("no budget_usd: HTTP %d %s, want 400 naming it", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b1/budget", host, good, `{"budget_usd": 3}`); w.Code != 409 {
		t.Errorf("a budget under the spend: HTTP %d %s, want the API's 409", w.Code, w.Body.String())
	}
	if calls, want := f.Calls(), []string{"budget b1 25.5", "budget b1 3"}; !slices.Equal(calls, want) {
		t.Errorf("API calls %v, want %v", calls, want)
	}
}

// TestConsoleRaisesCeilings: the page's ceilings action sends the
// ceilings to the API (POST …/ceilings, repeated until done) and passes
// its answer on, the woken count included; a body without ceilings is
// refused before the API.
func TestConsoleRaisesCeilings(t *testing.T) {
	f := &fakeAPI{}
	c := newTestServer(t, f, nil)
	good := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token(), "Sec-Fetch-Site": "same-origin"}
	if w := do(c, "POST", "/api/batches/b1/ceilings", host, good, `{"ceilings": {"spend_usd": 2}}`); w.Code != 200 || !strings.Contains(w.Body.String(), `"woken":3`) {
		t.Errorf("raise: HTTP %d %s, want 200 with the woken items", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b1/ceilings", host, good, `{}`); w.Code != 400 || !strings.Contains(w.Body.String(), "ceilings") {
		t.Errorf("no ceilings: HTTP %d %s, want 400 naming it", w.Code, w.Body.String())
	}
	if calls, want := f.Calls(), []string{"ceilings b1 2 0"}; !slices.Equal(calls, want) {
		t.Errorf("API calls %v, want %v", calls, want)
	}
}

// TestConsoleSignalsWithAPayload: the page's signal action sends the
// item's key, the payload and the suspension's token to the API (POST
// …/items/{key}/signal) as given; a body without a key is refused before
// the API, and one whose payload is not JSON is refused whole.
func TestConsoleSignalsWithAPayload(t *testing.T) {
	f := &fakeAPI{}
	c := newTestServer(t, f, nil)
	good := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token(), "Sec-Fetch-Site": "same-origin"}
	if w := do(c, "POST", "/api/batches/b1/signal", host, good, `{"key": "a/b", "payload": {"approved": true}, "token": "t-1"}`); w.Code != 200 || !strings.Contains(w.Body.String(), "signalled a/b") {
		t.Errorf("signal: HTTP %d %s, want 200 saying it was signalled", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b1/signal", host, good, `{"key": "c"}`); w.Code != 200 {
		t.Errorf("signal without a payload: HTTP %d %s, want 200", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b1/signal", host, good, `{"payload": 1}`); w.Code != 400 || !strings.Contains(w.Body.String(), "key") {
		t.Errorf("no key: HTTP %d %s, want 400 naming it", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b1/signal", host, good, `{"key": "d", "payload": {"a": }`); w.Code != 400 {
		t.Errorf("a payload that is not JSON: HTTP %d %s, want 400", w.Code, w.Body.String())
	}
	if calls, want := f.Calls(), []string{`signal b1 a/b token=t-1 payload={"approved": true}`, "signal b1 c token= payload="}; !slices.Equal(calls, want) {
		t.Errorf("API calls %q, want %q", calls, want)
	}
}

// TestConsoleListsEveryItemsTab: each items tab of the batch page (failed,
// quarantined, the held outcomes, in flight) is read through the API with
// its outcome; an outcome no tab has is refused before the API.
func TestConsoleListsEveryItemsTab(t *testing.T) {
	f := &fakeAPI{}
	c := newTestServer(t, f, nil)
	var want []string
	for _, o := range []string{"failed", "quarantined", "withheld", "exhausted", "suspended", "in_flight"} {
		if w := do(c, "GET", "/api/batches/b1/items?outcome="+o, host, nil, ""); w.Code != 200 {
			t.Errorf("%s tab: HTTP %d %s, want 200", o, w.Code, w.Body.String())
		}
		want = append(want, fmt.Sprintf("items b1 %s %q %d", o, "", 25))
	}
	if w := do(c, "GET", "/api/batches/b1/items?outcome=cancelled", host, nil, ""); w.Code != 400 || !strings.Contains(w.Body.String(), "suspended") {
		t.Errorf("cancelled: HTTP %d %s, want 400 naming the tabs' outcomes", w.Code, w.Body.String())
	}
	if calls := f.Calls(); !slices.Equal(calls, want) {
		t.Errorf("API calls %q, want %q", calls, want)
	}
}

// TestConsoleApprovesAndRejects: the batch page's Approve… and Reject…
// send a sampled batch's decision to the API (POST …/approve, …/reject)
// and pass its answer, the batch view with its approval, on as 202; the
// API's 409 (a reject after an approval) reaches the page as a 409; as
// every action, neither goes through without the page's token, and
// neither is a read.
func TestConsoleApprovesAndRejects(t *testing.T) {
	f := &fakeAPI{}
	c := newTestServer(t, f, nil)
	good := map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", TokenHeader: c.Token(), "Sec-Fetch-Site": "same-origin"}
	w := do(c, "POST", "/api/batches/b1/approve", host, good, `{}`)
	var v wire.BatchView
	if err := json.Unmarshal(w.Body.Bytes(), &v); w.Code != 202 || err != nil || v.Approval == nil || v.Approval.State != api.ApprovalApproved || v.Approval.DecidedBy != api.DecidedByCaller {
		t.Errorf("approve: HTTP %d %s, want 202 with the approval", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/b2/reject", host, good, ``); w.Code != 202 || !strings.Contains(w.Body.String(), `"stop":"cancelled"`) {
		t.Errorf("reject: HTTP %d %s, want 202 with the run stopping", w.Code, w.Body.String())
	}
	if w := do(c, "POST", "/api/batches/approved-1/reject", host, good, `{}`); w.Code != 409 || !strings.Contains(w.Body.String(), "cancel it instead") {
		t.Errorf("reject after an approval: HTTP %d %s, want the API's 409", w.Code, w.Body.String())
	}
	delete(good, TokenHeader)
	for _, r := range []struct{ method, path string }{{"POST", "/api/batches/b1/approve"}, {"POST", "/api/batches/b1/reject"},
		{"GET", "/api/batches/b1/approve"}, {"GET", "/api/batches/b1/reject"}} {
		if w := do(c, r.method, r.path, host, good, `{}`); w.Code/100 != 4 {
			t.Errorf("%s %s without the page's token: HTTP %d, want it refused", r.method, r.path, w.Code)
		}
	}
	if calls, want := f.Calls(), []string{"approve b1", "reject b2", "reject approved-1"}; !slices.Equal(calls, want) {
		t.Errorf("API calls %v, want %v", calls, want)
	}
}
