package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// testAllow lets the tests' receivers (httptest servers on 127.0.0.1) be reached.
var testAllow = egress.MustParse("127.0.0.1")

// received is what a test server saw of one request.
type received struct {
	method string
	header http.Header
	body   []byte
}

// server starts an httptest.Server that records requests and answers with h.
func server(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32, func() []received) {
	t.Helper()
	var calls atomic.Int32
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{method: r.Method, header: r.Header.Clone(), body: body})
		mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls, func() []received { mu.Lock(); defer mu.Unlock(); return got }
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if body != "" && strings.HasPrefix(body, "{") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func options(u string, timeoutMS int) json.RawMessage {
	o := map[string]any{"url": u}
	if timeoutMS > 0 {
		o["timeout_ms"] = timeoutMS
	}
	b, _ := json.Marshal(o)
	return b
}

func request(opts json.RawMessage) pipeline.Request {
	return pipeline.Request{
		BatchID: "batch-1",
		Key:     "item-0000000007",
		RunID:   "5f0c1c1e0c7a1d3c7e8a2b2f4e1d9c0b5a6f7e8d9c0b1a2f3e4d5c6b7a8f9e0d",
		Attempt: 1,
		Input:   json.RawMessage(`{"n": 7}`),
		Options: opts,
	}
}

func TestRunAnswers(t *testing.T) {
	long := strings.Repeat("é", 700) // 1400 bytes of 2-byte runes
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		timeoutMS int
		want      string // output JSON on success
		wantErr   error  // matched with errors.Is when set
		wantClass pipeline.Class
		wantMsg   string // exact error message when set
		wantSub   string // substring of the error message when set
		wantRetry time.Duration
	}{
		{name: "200 JSON", handler: status(200, "{\n  \"id\": 7,\n  \"ok\": true\n}\n"), want: `{"id":7,"ok":true}`},
		{name: "201 JSON array", handler: status(201, `[1, 2]`), want: `[1,2]`},
		{name: "204", handler: status(204, ""), want: `{"status":204}`},
		{name: "200 empty", handler: status(200, ""), want: `{"status":200}`},
		{name: "200 text", handler: status(200, "accepted\n"), want: `{"status":200,"body":"accepted\n"}`},
		{name: "200 invalid JSON", handler: status(200, `{"id": `), want: `{"status":200,"body":"{\"id\": "}`},
		{name: "200 long text cut to 1 KiB on a rune boundary", handler: status(200, long),
			want: `{"status":200,"body":"` + strings.Repeat("é", 512) + `"}`},
		{name: "200 JSON over 1 MiB becomes text", handler: status(200, `"`+strings.Repeat("a", 1<<20)+`"`),
			want: `{"status":200,"body":"\"` + strings.Repeat("a", 1023) + `"}`},

		{name: "400", handler: status(400, `{"error":"missing n"}`), wantClass: pipeline.ClassPermanent,
			wantMsg: `webhook: item-0000000007: HTTP 400: {"error":"missing n"}`},
		{name: "404 empty body", handler: status(404, ""), wantClass: pipeline.ClassPermanent,
			wantMsg: `webhook: item-0000000007: HTTP 404`},
		{name: "409", handler: status(409, "conflict\n"), wantClass: pipeline.ClassPermanent,
			wantMsg: `webhook: item-0000000007: HTTP 409: conflict`},
		{name: "422", handler: status(422, `{"error":"bad"}`), wantClass: pipeline.ClassPermanent,
			wantMsg: `webhook: item-0000000007: HTTP 422: {"error":"bad"}`},
		{name: "422 body cut to 200 bytes", handler: status(422, strings.Repeat("x", 500)), wantClass: pipeline.ClassPermanent,
			wantMsg: `webhook: item-0000000007: HTTP 422: ` + strings.Repeat("x", 200)},
		{name: "429 with Retry-After", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(429)
		}, wantClass: pipeline.ClassTransient, wantMsg: `webhook: item-0000000007: HTTP 429`, wantRetry: 30 * time.Second},
		{name: "503 with Retry-After date", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", time.Now().Add(2*time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(503)
		}, wantClass: pipeline.ClassTransient, wantMsg: `webhook: item-0000000007: HTTP 503`, wantRetry: pipeline.MaxRetryAfter},
		{name: "500 ignores Retry-After", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(500)
		}, wantClass: pipeline.ClassTransient, wantMsg: `webhook: item-0000000007: HTTP 500`},
		{name: "500", handler: status(500, "boom"), wantClass: pipeline.ClassTransient,
			wantMsg: `webhook: item-0000000007: HTTP 500: boom`},
		{name: "503", handler: status(503, "<html>down</html>"), wantClass: pipeline.ClassTransient,
			wantMsg: `webhook: item-0000000007: HTTP 503: <html>down</html>`},
		{name: "timeout", timeoutMS: 50, handler: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done(): // the client gave up
			case <-time.After(5 * time.Second):
			}
		}, wantErr: context.DeadlineExceeded, wantClass: pipeline.ClassTransient,
			wantSub: "webhook: item-0000000007: POST http://127.0.0.1:"},
		{name: "connection reset before an answer", handler: func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST, not FIN
				}
				_ = conn.Close()
			}
		}, wantClass: pipeline.ClassTransient, wantSub: "webhook: item-0000000007: POST http://127.0.0.1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, calls, _ := server(t, tt.handler)
			res, err := webhook.New(nil, testAllow).Run(context.Background(), request(options(srv.URL+"/hook?token=s3cr3t", tt.timeoutMS)))
			if n := calls.Load(); n != 1 {
				t.Errorf("server called %d times, want 1", n)
			}
			if tt.wantClass == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if string(res.Output) != tt.want {
					t.Errorf("output = %.200s, want %.200s", res.Output, tt.want)
				}
				if res.Cost["calls"] != 1 || len(res.Cost) != 1 {
					t.Errorf("cost = %v, want calls 1", res.Cost)
				}
				return
			}
			if err == nil {
				t.Fatalf("Run = %s, want an error", res.Output)
			}
			if got := pipeline.Classify(err); got != tt.wantClass {
				t.Errorf("Classify(%q) = %s, want %s", err, got, tt.wantClass)
			}
			var pe *pipeline.PermanentError
			if errors.As(err, &pe) != (tt.wantClass == pipeline.ClassPermanent) {
				t.Errorf("errors.As(*PermanentError) = %v for class %s", !(tt.wantClass == pipeline.ClassPermanent), tt.wantClass)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %q is not %v", err, tt.wantErr)
			}
			if tt.wantMsg != "" && err.Error() != tt.wantMsg {
				t.Errorf("error = %q, want %q", err, tt.wantMsg)
			}
			if !strings.Contains(err.Error(), tt.wantSub) {
				t.Errorf("error %q does not contain %q", err, tt.wantSub)
			}
			if testing.Verbose() {
				t.Log(err)
			}
			if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "/hook") {
				t.Errorf("error %q leaks the URL's path or query", err)
			}
			if d, ok := pipeline.RetryDelay(err); d != tt.wantRetry || ok != (tt.wantRetry > 0) {
				t.Errorf("RetryDelay = %s, %v; want %s", d, ok, tt.wantRetry)
			}
			var se *webhook.StatusError
			if errors.As(err, &se) {
				if se.Key != "item-0000000007" || se.RetryAfter != tt.wantRetry {
					t.Errorf("StatusError = %+v, want key item-0000000007, RetryAfter %s", se, tt.wantRetry)
				}
			}
		})
	}
}

// TestRetryAfterDelay guards the Retry-After product line: a receiver's
// 429/503 with Retry-After (seconds or HTTP date) sets the retry's delay,
// capped at pipeline.MaxRetryAfter.
func TestRetryAfterDelay(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, value string
		want        time.Duration
	}{
		{"seconds", "20", 20 * time.Second},
		{"zero", "0", 0},
		{"spaces", " 7 ", 7 * time.Second},
		{"over the cap", "86400", pipeline.MaxRetryAfter},
		{"huge", "99999999999999999999", 0}, // not a uint64: ignored
		{"negative", "-5", 0},
		{"fraction", "1.5", 0},
		{"empty", "", 0},
		{"IMF-fixdate", "Mon, 30 Nov 2026 12:00:20 GMT", 20 * time.Second},
		{"RFC 850 date", "Monday, 30-Nov-26 12:01:00 GMT", time.Minute},
		{"asctime date", "Mon Nov 30 12:00:05 2026", 5 * time.Second},
		{"date past", "Mon, 30 Nov 2026 11:00:00 GMT", 0},
		{"date beyond the cap", "Tue, 01 Dec 2026 12:00:00 GMT", pipeline.MaxRetryAfter},
		{"garbage", "soon", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhook.RetryAfterDelay(tt.value, now); got != tt.want {
				t.Errorf("RetryAfterDelay(%q) = %s, want %s", tt.value, got, tt.want)
			}
		})
	}
}

func TestRunTransportErrors(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	dnsFail := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "hooks.invalid", IsNotFound: true}}
		},
	}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name    string
		client  *http.Client
		ctx     context.Context
		url     string
		wantErr error
		wantMsg string // substring
	}{
		{name: "connection refused", url: closedURL, wantMsg: "connection refused"},
		{name: "DNS failure", client: dnsFail, url: "http://hooks.invalid/x", wantMsg: "webhook: item-0000000007: POST http://hooks.invalid: dial tcp: lookup hooks.invalid: no such host"},
		{name: "caller's context cancelled", ctx: cancelled, url: closedURL, wantErr: context.Canceled, wantMsg: "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			_, err := webhook.New(tt.client, testAllow).Run(ctx, request(options(tt.url, 2000)))
			if err == nil {
				t.Fatal("Run succeeded, want an error")
			}
			if got := pipeline.Classify(err); got != pipeline.ClassTransient {
				t.Errorf("Classify(%q) = %s, want transient", err, got)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %q is not %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	target, targetCalls, _ := server(t, status(404, "gone"))
	hook, hookCalls, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusFound)
	})
	for _, tc := range []struct {
		name   string
		client *http.Client
	}{{"default client", nil}, {"caller's client without CheckRedirect", &http.Client{}}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := webhook.New(tc.client, testAllow).Run(context.Background(), request(options(hook.URL, 0)))
			if got := pipeline.Classify(err); got != pipeline.ClassPermanent {
				t.Errorf("Classify(%v) = %s, want permanent", err, got)
			}
			var se *webhook.StatusError
			if !errors.As(err, &se) || se.StatusCode != http.StatusFound {
				t.Errorf("error = %v, want a StatusError with 302", err)
			}
			if tc.client != nil && tc.client.CheckRedirect != nil {
				t.Error("New modified the caller's client")
			}
		})
	}
	if n := targetCalls.Load(); n != 0 {
		t.Errorf("redirect target called %d times, want 0 (the POST body would be lost)", n)
	}
	if n := hookCalls.Load(); n != 2 {
		t.Errorf("hook called %d times, want 2", n)
	}
}

func TestRunSendsHeadersAndBody(t *testing.T) {
	srv, calls, got := server(t, status(204, ""))
	req := request(options(srv.URL, 0))
	req.Key = "photos/été 2026/a b+c%.jpg"
	req.Attempt = 3
	req.Input = json.RawMessage("{ \"n\" : 7,\n  \"s\": \"é\" }")
	req.Headers = map[string]string{
		"x-tenant":        "acme",
		"bulkrun.trace":   "t-1",
		"Content-Type":    "text/plain",   // ours wins
		"idempotency-key": "caller-chose", // ours wins
		"User-Agent":      "acme-batch/1",
	}
	if _, err := webhook.New(nil, testAllow).Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("server called %d times", calls.Load())
	}
	r := got()[0]
	if r.method != http.MethodPost {
		t.Errorf("method = %s", r.method)
	}
	if string(r.body) != string(req.Input) {
		t.Errorf("body = %q, want %q", r.body, req.Input)
	}
	for name, want := range map[string]string{
		"Content-Type":     "application/json",
		"Idempotency-Key":  req.RunID,
		"Bulkrun-Batch-Id": "batch-1",
		"Bulkrun-Item-Key": "photos%2F%C3%A9t%C3%A9%202026%2Fa%20b+c%25.jpg",
		"Bulkrun-Attempt":  "3",
		"X-Tenant":         "acme",
		"Bulkrun.trace":    "t-1",
		"User-Agent":       "acme-batch/1",
	} {
		if v := r.header.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("header %s = %q, want [%q]", name, v, want)
		}
	}
	if key, err := url.PathUnescape(r.header.Get("Bulkrun-Item-Key")); err != nil || key != req.Key {
		t.Errorf("Bulkrun-Item-Key unescapes to %q, %v; want %q", key, err, req.Key)
	}
}

func TestRunRefusesBadHeaders(t *testing.T) {
	srv, calls, _ := server(t, status(204, ""))
	tests := []struct {
		name    string
		headers map[string]string
	}{
		{"space in name", map[string]string{"Bad Header": "x"}},
		{"non-ASCII name", map[string]string{"tête": "x"}},
		{"newline in value", map[string]string{"X-Evil": "a\r\nX-Injected: 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(options(srv.URL, 0))
			req.Headers = tt.headers
			_, err := webhook.New(nil, testAllow).Run(context.Background(), req)
			if !errors.Is(err, webhook.ErrInvalidHeader) || pipeline.Classify(err) != pipeline.ClassPermanent {
				t.Errorf("err = %v, want a permanent ErrInvalidHeader", err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("server called %d times, want 0", n)
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    webhook.Options
		wantErr string // substring; the option's name
	}{
		{name: "url only", raw: `{"url":"https://example.com/h"}`, want: webhook.Options{URL: "https://example.com/h", TimeoutMS: 10000}},
		{name: "timeout", raw: `{"url":"http://10.0.0.1:8080/h","timeout_ms":900000}`, want: webhook.Options{URL: "http://10.0.0.1:8080/h", TimeoutMS: 900000}},
		{name: "empty", raw: ``, wantErr: "url is required"},
		{name: "null", raw: `null`, wantErr: "url is required"},
		{name: "no url", raw: `{}`, wantErr: "url is required"},
		{name: "url a number", raw: `{"url":5}`, wantErr: "url must be a string"},
		{name: "relative url", raw: `{"url":"/hooks"}`, wantErr: "url must be an absolute http or https URL"},
		{name: "no host", raw: `{"url":"http:///hooks"}`, wantErr: "url must be an absolute http or https URL"},
		{name: "ftp", raw: `{"url":"ftp://example.com/h"}`, wantErr: `url must be an absolute http or https URL, got scheme "ftp"`},
		{name: "unparsable url", raw: `{"url":"http://[::1"}`, wantErr: "url is not a URL"},
		{name: "timeout 0", raw: `{"url":"http://a","timeout_ms":0}`, wantErr: "timeout_ms must be 1–900000 milliseconds, got 0"},
		{name: "timeout too long", raw: `{"url":"http://a","timeout_ms":900001}`, wantErr: "timeout_ms must be 1–900000 milliseconds, got 900001"},
		{name: "timeout fractional", raw: `{"url":"http://a","timeout_ms":1.5}`, wantErr: "timeout_ms must be an integer"},
		{name: "unknown option", raw: `{"url":"http://a","timeout":5}`, wantErr: `unknown field "timeout"`},
		{name: "not an object", raw: `"http://a"`, wantErr: "want a JSON object, got JSON string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := webhook.ParseOptions(json.RawMessage(tt.raw))
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Errorf("ParseOptions = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, webhook.ErrInvalidOptions) || !strings.Contains(fmtErr(err), tt.wantErr) {
				t.Errorf("err = %v, want ErrInvalidOptions containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunBadOptionsIsPermanent(t *testing.T) {
	_, err := webhook.New(nil, testAllow).Run(context.Background(), request(json.RawMessage(`{"timeout_ms":5}`)))
	if pipeline.Classify(err) != pipeline.ClassPermanent || !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Fatalf("err = %v, want permanent ErrInvalidOptions", err)
	}
	if want := "webhook: item-0000000007: invalid options: url is required"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func BenchmarkRun(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	p := webhook.New(nil, testAllow)
	req := request(options(srv.URL, 0))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Run(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// A call answered with an error status still costs a call.
func TestFailedCallsCost(t *testing.T) {
	for _, status := range []int{422, 503} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		res, err := webhook.New(nil, testAllow).Run(context.Background(), pipeline.Request{Key: "k", Input: json.RawMessage(`{}`), Options: json.RawMessage(`{"url":"` + srv.URL + `"}`)})
		srv.Close()
		if err == nil || res.Cost["calls"] != 1 {
			t.Errorf("status %d: err %v, cost %v, want an error with calls=1", status, err, res.Cost)
		}
	}
}

// A call that reached the receiver is spent whatever ended it, so that
// the run's spent counts what the receiver counted: a call the receiver
// holds past timeout_ms, one whose caller's context ends while the
// receiver works on it (the worker's deadline margin), and one whose
// connection the receiver resets before answering each cost a call; a
// request that never went out (connection refused) costs none.
func TestCallsThatReachedTheReceiverCost(t *testing.T) {
	hold := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	arrived := make(chan struct{}, 1)
	holdAndSay := func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}
	reset := func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc // nil: the closed server
		cancel  bool             // the caller's context ends once the call arrived
		calls   float64
	}{
		{"held past timeout_ms", hold, false, 1},
		{"the caller's context ends", holdAndSay, true, 1},
		{"connection reset", reset, false, 1},
		{"connection refused", nil, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, calls := closed.URL, new(atomic.Int32)
			if tc.handler != nil {
				srv, c, _ := server(t, tc.handler)
				u, calls = srv.URL, c
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() { <-arrived; cancel() }()
			}
			res, err := webhook.New(nil, testAllow).Run(ctx, request(options(u, 50)))
			if err == nil || pipeline.Classify(err) != pipeline.ClassTransient {
				t.Fatalf("Run: %v, want a transient error", err)
			}
			if res.Cost["calls"] != tc.calls || float64(calls.Load()) != tc.calls {
				t.Fatalf("cost %v, the receiver saw %d calls; want %v calls in both (%v)", res.Cost, calls.Load(), tc.calls, err)
			}
		})
	}
}

// TestSSRFSubmitRefusesNonPublicURL guards the product line "the webhook
// may not reach loopback, link-local, private or unique-local addresses
// unless the allow-list names them", at submit: the requests that used to
// be accepted are refused with an *api.InputError naming
// pipeline_options.url (the API's 400), and accepted once allow-listed.
func TestSSRFSubmitRefusesNonPublicURL(t *testing.T) {
	recv := httptest.NewServer(http.NotFoundHandler())
	defer recv.Close()
	port := recv.Listener.Addr().(*net.TCPAddr).Port
	tests := []struct {
		name    string
		url     string
		allow   string
		wantMsg string // "" = accepted
	}{
		{"metadata service", "http://169.254.169.254/latest/meta-data/iam/security-credentials/", "",
			`pipeline_options.url: refused by pipeline "webhook": invalid options: url: 169.254.169.254 is a link-local address, which the webhook allow-list does not name`},
		{"loopback", recv.URL + "/hook", "", "127.0.0.1 is a loopback address"},
		{"IPv4-mapped loopback", fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", port), "", "127.0.0.1 is a loopback address"},
		{"private", "https://10.0.0.5/hook", "", "10.0.0.5 is a private address"},
		{"unique-local", "https://[fd00::5]/hook", "", "fd00::5 is a unique-local address"},
		{"name resolving to loopback", fmt.Sprintf("http://localhost:%d/", port), "", "localhost resolves to"},
		{"loopback allow-listed", recv.URL + "/hook", "127.0.0.1/32", ""},
		{"public", "https://8.8.8.8/hook", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := &pipeline.Registry{}
			if err := reg.Register(webhook.Name, webhook.New(nil, egress.MustParse(tt.allow))); err != nil {
				t.Fatal(err)
			}
			s := &submit.Submitter{Registry: reg}
			err := s.Validate(&api.SubmitRequest{
				Pipeline: webhook.Name,
				Source:   api.SourceSpec{Items: json.RawMessage(`[{}]`)},
				Options:  json.RawMessage(fmt.Sprintf(`{"url": %q}`, tt.url)),
			})
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want accepted", err)
				}
				return
			}
			var ie *api.InputError
			if !errors.As(err, &ie) || ie.Field != "pipeline_options.url" {
				t.Fatalf("Validate = %v, want an InputError on pipeline_options.url", err)
			}
			if !errors.Is(err, egress.ErrDenied) || !errors.Is(err, webhook.ErrInvalidOptions) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Validate = %q, want ErrDenied and ErrInvalidOptions containing %q", err, tt.wantMsg)
			}
		})
	}
}

// TestSSRFDialRefusesNonPublic guards the dial-time check (what DNS
// rebinding and a submit that skipped validation cannot get round): an item
// whose url reaches a refused address — by address or by a name that
// resolves to it — fails permanently, and the receiver is never called.
func TestSSRFDialRefusesNonPublic(t *testing.T) {
	srv, calls, _ := server(t, status(200, `{"secret":"metadata"}`))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	for _, u := range []string{srv.URL + "/x", fmt.Sprintf("http://localhost:%d/x", port)} {
		t.Run(u, func(t *testing.T) {
			res, err := webhook.New(nil, nil).Run(context.Background(), request(options(u, 2000)))
			if got := pipeline.Classify(err); got != pipeline.ClassPermanent {
				t.Fatalf("Classify(%v) = %s, want permanent", err, got)
			}
			var de *egress.DeniedError
			if !errors.As(err, &de) || de.Kind != "loopback" {
				t.Errorf("error %v is not a loopback *egress.DeniedError", err)
			}
			if res.Output != nil {
				t.Errorf("output %s, want none", res.Output)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("receiver called %d times, want 0", n)
	}
}

// The receiver's answers, classified as docs/pipelines.md's table says
// (RFC 9110 §15): 429 and 503 are its rate or capacity (a
// *pipeline.ThrottledError, with the Retry-After it sent), other 5xx
// transient, 401 and 403 a rejected credential (permanent, re-read once
// when it came from a secret reference), other 4xx permanent.
func TestStatusClassification(t *testing.T) {
	for _, tc := range []struct {
		status     int
		retryAfter string
		want       string // throttled, transient, credential, permanent
		delay      time.Duration
	}{
		{429, "", "throttled", 0},
		{429, "7", "throttled", 7 * time.Second},
		{503, "", "throttled", 0},
		{503, "20", "throttled", 20 * time.Second},
		{500, "", "transient", 0},
		{502, "", "transient", 0},
		{504, "", "transient", 0},
		{401, "", "credential", 0},
		{403, "", "credential", 0},
		{400, "", "permanent", 0},
		{404, "", "permanent", 0},
		{422, "", "permanent", 0},
	} {
		t.Run(fmt.Sprint(tc.status, tc.retryAfter), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, `{"error":"status %d"}`, tc.status)
			}))
			defer srv.Close()
			res, err := webhook.New(nil, testAllow).Run(context.Background(), request(options(srv.URL, 0)))
			var se *webhook.StatusError
			if !errors.As(err, &se) || se.StatusCode != tc.status || res.Cost["calls"] != 1 {
				t.Fatalf("err %v, cost %v: want a StatusError %d and the call counted", err, res.Cost, tc.status)
			}
			th, throttled := pipeline.ThrottleOf(err)
			class := pipeline.Classify(err)
			got := map[bool]string{true: "throttled", false: string(class)}[throttled]
			if pipeline.IsCredentialRejected(err) {
				got = "credential"
				if class != pipeline.ClassPermanent {
					t.Errorf("a rejected credential is %s, want permanent", class)
				}
			}
			if got != tc.want {
				t.Fatalf("HTTP %d: %s, want %s", tc.status, got, tc.want)
			}
			if throttled && (th.Service != "http" || th.Code != fmt.Sprint(tc.status) || th.Delay != tc.delay) {
				t.Errorf("throttle %+v, want http %d asking %s", th, tc.status, tc.delay)
			}
			if d, ok := pipeline.RetryDelay(err); ok != (tc.delay > 0) || d != tc.delay {
				t.Errorf("retry delay %s %v, want %s", d, ok, tc.delay)
			}
		})
	}
}

// One attempt is one HTTP request. Go's transport sends a request again on
// its own when a reused connection dies before the answer and the request
// is replayable — which a POST carrying an Idempotency-Key header is
// (net/http, Request.isReplayable) — so a receiver could get one attempt
// twice or more, with the same Bulkrun-Attempt. Here the receiver reads
// the second item's request on the kept-alive connection of the first and
// resets the connection: the attempt must fail as a transient error after
// exactly one request, its retry being a new attempt with its own header
// values.
func TestOneRequestPerAttemptOnAResetConnection(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Idempotency-Key") + " attempt " + r.Header.Get("Bulkrun-Attempt")
		mu.Lock()
		got[id]++
		mu.Unlock()
		if r.Header.Get("Bulkrun-Item-Key") != "reset" {
			w.WriteHeader(http.StatusOK)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not an orderly close
		}
		_ = conn.Close()
	}))
	defer srv.Close()
	p := webhook.New(nil, testAllow)
	opts := json.RawMessage(`{"url":"` + srv.URL + `"}`)
	run := func(key string) error {
		_, err := p.Run(context.Background(), pipeline.Request{BatchID: "b", Key: key, RunID: "run-" + key, Attempt: 1, Input: json.RawMessage(`{}`), Options: opts})
		return err
	}
	if err := run("first"); err != nil { // opens the connection the next request reuses
		t.Fatal(err)
	}
	err := run("reset")
	if err == nil || pipeline.Classify(err) != pipeline.ClassTransient {
		t.Fatalf("reset connection: %v, want a transient error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := got["run-reset attempt 1"]; n != 1 {
		t.Fatalf("the receiver got attempt 1 of the item %d times, want 1 (one request per attempt): %v", n, got)
	}
}

// A receiver reports what a call cost it in Bulkrun-Cost, on a success,
// an error status or a suspend alike: its pairs are added to the call.
// Pairs that are not name=amount (a bad or negative amount, no name, the
// reserved "calls", a name given twice) are left out and counted under
// bulkrun.cost_refused; the item's outcome stands.
func TestReceiverReportsItsCost(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header []string
		want   pipeline.Cost
	}{
		{"a success", 200, []string{"usd=0.0042, tokens=812"}, pipeline.Cost{"calls": 1, "usd": 0.0042, "tokens": 812}},
		{"two lines add up", 200, []string{"usd=0.5", "tokens=3"}, pipeline.Cost{"calls": 1, "usd": 0.5, "tokens": 3}},
		{"an error status", 503, []string{"usd=0.25"}, pipeline.Cost{"calls": 1, "usd": 0.25}},
		{"none", 200, nil, pipeline.Cost{"calls": 1}},
		{"refused pairs", 200, []string{"usd=abc, tokens=3, =4, calls=2, x=-1, y=NaN, tokens=5, z, w=1e400"},
			pipeline.Cost{"calls": 1, "tokens": 3, webhook.CostRefused: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				for _, v := range tt.header {
					w.Header().Add(webhook.HeaderCost, v)
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			res, err := webhook.New(nil, testAllow).Run(context.Background(), pipeline.Request{Key: "k", Input: json.RawMessage(`{}`), Options: json.RawMessage(`{"url":"` + srv.URL + `"}`)})
			if (err != nil) != (tt.status >= 300) {
				t.Fatalf("status %d: err %v", tt.status, err)
			}
			if !maps.Equal(res.Cost, tt.want) {
				t.Errorf("cost %v, want %v", res.Cost, tt.want)
			}
		})
	}
	// A suspend's answer carries its cost too.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(webhook.HeaderSuspend, "waiting for approval")
		w.Header().Set(webhook.HeaderCost, "usd=0.1")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	res, err := webhook.New(nil, testAllow).Run(context.Background(), pipeline.Request{Key: "k", Input: json.RawMessage(`{}`), Options: json.RawMessage(`{"url":"` + srv.URL + `"}`)})
	var s *pipeline.SuspendError
	if !errors.As(err, &s) || !maps.Equal(res.Cost, pipeline.Cost{"calls": 1, "usd": 0.1}) {
		t.Errorf("suspend: %v, cost %v; want a suspension costing calls=1, usd=0.1", err, res.Cost)
	}
}
