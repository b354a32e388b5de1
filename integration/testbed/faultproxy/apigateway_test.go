package faultproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatewayRig is a proxy with a settable clock in front of an upstream
// that answers every call 200 and counts them.
type gatewayRig struct {
	proxy *Proxy
	url   string
	mu    sync.Mutex
	now   time.Time
	calls int
}

func newGatewayRig(t *testing.T, g APIGateway) *gatewayRig {
	t.Helper()
	r := &gatewayRig{now: time.Date(2026, 12, 2, 19, 0, 0, 0, time.UTC)}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.calls++
		r.mu.Unlock()
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(up.Close)
	p, err := New(up.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.now = func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now }
	if err := p.Set(Config{API: g}); err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(p)
	t.Cleanup(ps.Close)
	r.proxy, r.url = p, ps.URL
	return r
}

func (r *gatewayRig) advance(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = r.now.Add(d)
}

// call sends an execute-api request for stage signed at signedAt (its
// X-Amz-Date; the signature itself is not checked, as on the emulator)
// and returns the answer's status, x-amzn-ErrorType, message and Date.
func (r *gatewayRig) call(t *testing.T, stage string, signedAt time.Time, body []byte) (int, string, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.url+"/restapis/"+stage+"/_user_request_/batches", bytes.NewReader(body))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261202/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
	req.Header.Set("X-Amz-Date", signedAt.UTC().Format("20060102T150405Z"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m struct{ Message string }
	if json.Unmarshal(data, &m) != nil {
		m.Message = string(data)
	}
	return resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), m.Message, resp.Header.Get("Date")
}

// The stage's throttle as API Gateway applies it: a token bucket per API
// and stage, BurstLimit deep, refilled at RateLimit a second; a call
// without a token is answered 429 TooManyRequestsException and does not
// reach the emulator. The clock is the test's: no waiting.
func TestAPIGatewayThrottle(t *testing.T) {
	r := newGatewayRig(t, APIGateway{RateLimit: 1, BurstLimit: 2})
	var got []int
	for range 3 {
		s, _, _, _ := r.call(t, "api1/v1", r.now, nil)
		got = append(got, s)
	}
	s, typ, msg, _ := r.call(t, "api1/v1", r.now, nil)
	if fmt.Sprint(got) != "[200 200 429]" || s != 429 || typ != "TooManyRequestsException" || msg != "Too Many Requests" || r.calls != 2 {
		t.Fatalf("a burst of 4: %v then %d %s %q, %d reached the emulator; want 2 let through, then 429 TooManyRequestsException", got, s, typ, msg, r.calls)
	}
	if s, _, _, _ := r.call(t, "api2/v1", r.now, nil); s != 200 {
		t.Fatalf("another API's stage: %d, want its own bucket", s)
	}
	r.advance(time.Second)
	if s, _, _, _ := r.call(t, "api1/v1", r.now, nil); s != 200 {
		t.Fatalf("a second later: %d, want a new token", s)
	}
	if s, _, _, _ := r.call(t, "api1/v1", r.now, nil); s != 429 {
		t.Fatalf("and again: %d, want 429", s)
	}
	if st := r.proxy.Status(); st.Gateway[GatewayThrottled] != 3 {
		t.Fatalf("status %+v, want 3 throttled", st.Gateway)
	}
}

// The signature's time as API Gateway judges it: more than 5 minutes
// from the proxy's clock, before or after, is 403 InvalidSignatureException
// with API Gateway's message; every answer carries the proxy's clock in
// Date. With a clock offset the proxy's clock runs ahead (a caller whose
// clock is behind).
func TestAPIGatewaySignatureTime(t *testing.T) {
	r := newGatewayRig(t, APIGateway{})
	now := r.now
	for _, tt := range []struct {
		name   string
		signed time.Time
		status int
		prefix string
	}{
		{"now", now, 200, ""},
		{"4m59s behind", now.Add(-299 * time.Second), 200, ""},
		{"4m59s ahead", now.Add(299 * time.Second), 200, ""},
		{"6 minutes behind", now.Add(-6 * time.Minute), 403, "Signature expired: 20261202T185400Z is now earlier than 20261202T185500Z (20261202T190000Z - 5 min.)"},
		{"6 minutes ahead", now.Add(6 * time.Minute), 403, "Signature not yet current: 20261202T190600Z is still later than 20261202T190500Z (20261202T190000Z + 5 min.)"},
	} {
		s, typ, msg, date := r.call(t, "api/v1", tt.signed, nil)
		if s != tt.status || (s == 403 && (typ != "InvalidSignatureException" || msg != tt.prefix)) || date != now.Format(http.TimeFormat) {
			t.Errorf("%s: %d %s %q, Date %q; want %d %q and Date %q", tt.name, s, typ, msg, date, tt.status, tt.prefix, now.Format(http.TimeFormat))
		}
	}
	if err := r.proxy.Set(Config{API: APIGateway{ClockOffset: Seconds(6 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	s, _, msg, date := r.call(t, "api/v1", now, nil)
	if s != 403 || !strings.HasPrefix(msg, "Signature expired") || date != now.Add(6*time.Minute).Format(http.TimeFormat) {
		t.Fatalf("clock 6 minutes ahead: %d %q, Date %q; want refused, Date 6 minutes ahead", s, msg, date)
	}
	if s, _, _, _ := r.call(t, "api/v1", now.Add(6*time.Minute), nil); s != 200 {
		t.Fatalf("signed at the proxy's time: %d, want 200", s)
	}
}

// Lambda's invocation payload limit on the event API Gateway makes: a
// 5.95 MB body whose JSON-escaped event is over 6 MB never reaches the
// function (413 BadRequestException "Request Too Long"), a 5 MB body of
// plain text does; a body over 10 MB is refused by API Gateway itself.
func TestAPIGatewayPayloadLimits(t *testing.T) {
	r := newGatewayRig(t, APIGateway{})
	var quoted bytes.Buffer
	quoted.WriteString(`{"pipeline":"webhook","source":{"items":[`)
	for i := 0; quoted.Len() < 5_950_000; i++ {
		fmt.Fprintf(&quoted, `{"key":"k%07d","text":"a \"quoted\" word"},`, i)
	}
	quoted.WriteString(`{}]}}`)
	if n := proxyEventBytes(httptest.NewRequest("POST", "/batches", nil), quoted.Bytes()); n <= LambdaEventBytes {
		t.Fatalf("the event of a %d-byte body with quotes is %d bytes, want over 6 MB", quoted.Len(), n)
	}
	s, typ, msg, _ := r.call(t, "api/v1", r.now, quoted.Bytes())
	if s != 413 || typ != "BadRequestException" || msg != "Request Too Long" || r.calls != 0 {
		t.Fatalf("a 5.95 MB body: %d %s %q, %d reached the emulator; want 413 Request Too Long", s, typ, msg, r.calls)
	}
	if s, _, _, _ := r.call(t, "api/v1", r.now, bytes.Repeat([]byte("a"), 5<<20)); s != 200 || r.calls != 1 {
		t.Fatalf("a 5 MiB body: %d, want it let through", s)
	}
	s, _, msg, _ = r.call(t, "api/v1", r.now, bytes.Repeat([]byte("a"), APIMaxBodyBytes+1))
	if s != 413 || msg != "HTTP content length exceeded 10485760 bytes." || r.calls != 1 {
		t.Fatalf("a body over 10 MB: %d %q, want API Gateway's 413", s, msg)
	}
	if st := r.proxy.Status(); st.Gateway[GatewayTooLarge] != 2 {
		t.Fatalf("status %+v, want 2 too large", st.Gateway)
	}
}

// A bad api section is refused naming its field.
func TestAPIGatewayConfig(t *testing.T) {
	for _, tt := range []struct {
		g    APIGateway
		want string
	}{
		{APIGateway{RateLimit: -1}, "api.rate_limit"},
		{APIGateway{RateLimit: 1}, "api.burst_limit"},
		{APIGateway{ClockOffset: Seconds(25 * time.Hour)}, "api.clock_offset_seconds"},
	} {
		if err := (Config{API: tt.g}).Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error naming %s", tt.g, err, tt.want)
		}
	}
	var c Config
	if err := json.Unmarshal([]byte(`{"api": {"rate_limit": 1, "burst_limit": 1, "clock_offset_seconds": -360}}`), &c); err != nil || c.API.ClockOffset != Seconds(-6*time.Minute) || c.Validate() != nil {
		t.Fatalf("%+v %v", c.API, err)
	}
}
