package apigw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/wire"
)

var secrets = map[string]string{"test": "test"}

// keys are item keys of every character class a path can carry.
var keys = []string{"plain", "a/b", "a%2Fb", "100%", "%", "a+b", "a b", "a  b", "naïve/日本語", "émoji 🎉", "?x#y", "&=;:@$,!'()*",
	"~-_.", ".", "..", "a//b", "/lead", "trail/", "tab\tnl\n", "x/release", `back\slash "quote"`}

// signed is a request to base+path, signed by the AWS SDK for Go's v4
// signer as shared/client signs it (execute-api, us-east-1, path escaping
// on unless single), then received by a server: what the verifier sees.
func signed(t *testing.T, method, path, body string, single bool) *http.Request {
	t.Helper()
	out, err := http.NewRequest(method, "http://127.0.0.1:4566/restapis/a1/v1/_user_request_"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256([]byte(body))
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = single })
	if err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, out,
		hex.EncodeToString(sum[:]), Service, "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	// On the wire: the request target as Go's client writes it.
	in := httptest.NewRequest(method, out.URL.RequestURI(), strings.NewReader(body))
	in.Host = out.URL.Host
	in.Header = out.Header.Clone()
	return in
}

// TestVerifyAgreesWithTheSDK: the verifier computes the canonical request
// as the SDK's v4 signer does (each path segment encoded twice), so every
// release and items call shared/client makes, with keys of every
// character class and the queries it sends, verifies; a key signed with
// its path encoded once (DisableURIPathEscaping, S3's way), a tampered
// path or body, another secret do not.
func TestVerifyAgreesWithTheSDK(t *testing.T) {
	for _, k := range keys {
		r := signed(t, http.MethodPost, wire.ItemPath("b-1", k, "release"), "", false)
		if err := Verify(r, nil, secrets); err != nil {
			t.Errorf("release %q: %v", k, err)
		}
	}
	q := url.Values{"outcome": {"quarantined"}, "cursor": {"a2V5IHdpdGggLyBhbmQgKw"}, "limit": {"100"}}
	if err := Verify(signed(t, http.MethodGet, "/batches/b-1/items?"+q.Encode(), "", false), nil, secrets); err != nil {
		t.Errorf("items: %v", err)
	}
	body := `{"batch_id":"b-1"}`
	if err := Verify(signed(t, http.MethodPost, "/batches", body, false), []byte(body), secrets); err != nil {
		t.Errorf("submit: %v", err)
	}

	r := signed(t, http.MethodPost, wire.ItemPath("b-1", "a/b", "release"), "", true)
	if err := Verify(r, nil, secrets); err == nil || !strings.Contains(err.Error(), MismatchMessage) || !strings.Contains(err.Error(), "a%252Fb") {
		t.Errorf("a path encoded once in the signature: %v, want a mismatch naming a%%252Fb", err)
	}
	r = signed(t, http.MethodPost, wire.ItemPath("b-1", "a", "release"), "", false)
	r.RequestURI = strings.Replace(r.RequestURI, "/items/a/", "/items/b/", 1)
	if err := Verify(r, nil, secrets); err == nil {
		t.Error("another path verified")
	}
	if err := Verify(signed(t, http.MethodPost, "/batches", body, false), []byte(`{"batch_id":"b-2"}`), secrets); err == nil {
		t.Error("another body verified")
	}
	if err := Verify(signed(t, http.MethodPost, "/batches", body, false), []byte(body), map[string]string{"test": "other"}); err == nil {
		t.Error("another secret verified")
	}
	if err := Verify(signed(t, http.MethodPost, "/batches", body, false), []byte(body), map[string]string{}); err == nil ||
		!strings.Contains(err.Error(), "security token") {
		t.Errorf("an unknown access key: %v", err)
	}
}

// TestCanonicalQueryTakesPlusAsAPlus: in the query as sent, "+" is a
// plus (the canonical form writes a space %20), so a value with a space
// must be sent %20.
func TestCanonicalQueryTakesPlusAsAPlus(t *testing.T) {
	for in, want := range map[string]string{
		"b=2&a=1":            "a=1&b=2",
		"source=a+b":         "source=a%2Bb",
		"source=a%20b":       "source=a%20b",
		"k=%2F&k=%2B":        "k=%2B&k=%2F",
		"a-b=1&a=2":          "a=2&a-b=1",
		"x=%C3%A9&flag":      "flag=&x=%C3%A9",
		"cursor=a2V5_-":      "cursor=a2V5_-",
		"since=2026-11-30T0": "since=2026-11-30T0",
	} {
		if got := CanonicalQuery(in); got != want {
			t.Errorf("CanonicalQuery(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestGate: through the fault proxy, an execute-api call with a bad
// signature is answered 403 with API Gateway's message and never reaches
// the emulator; a good one does; an answer over Lambda's 6 MB response
// limit becomes API Gateway's 502.
func TestGate(t *testing.T) {
	var reached int
	big := strings.Repeat("x", ResponsePayloadBytes)
	emu := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/report") {
			_, _ = io.WriteString(w, `{"big":"`+big+`"}`)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer emu.Close()
	p, err := faultproxy.New(emu.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.SetGate(&Gate{Secrets: secrets})
	srv := httptest.NewServer(p)
	defer srv.Close()
	send := func(path string, secret string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/restapis/a1/v1/_user_request_"+path, nil)
		sum := sha256.Sum256(nil)
		if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "test", SecretAccessKey: secret}, req,
			hex.EncodeToString(sum[:]), Service, "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := send(wire.ItemPath("b", "a/b c", "x"), "test"); code != 200 || reached != 1 {
		t.Errorf("a good signature: %d %s (reached %d)", code, body, reached)
	}
	if code, body := send("/batches/b", "wrong"); code != 403 || !strings.Contains(body, "does not match") || reached != 1 {
		t.Errorf("a bad signature: %d %.200s (reached %d), want 403 unseen by the emulator", code, body, reached)
	}
	if code, body := send("/batches/b/report", "test"); code != 502 || body != `{"message": "Internal server error"}` {
		t.Errorf("an answer over 6 MB: %d %.100s, want 502", code, body)
	}
}

// TestResponseSize: the function's response as aws-lambda-go writes it,
// the body a JSON string with its quotes, newlines and HTML characters
// escaped.
func TestResponseSize(t *testing.T) {
	want := `{"statusCode":200,"headers":{"Content-Type":"application/json"},"multiValueHeaders":null,"body":"{\"a\":\"\u003cx\u003e\"}\n"}`
	if n := ResponseSize(200, "application/json", []byte(`{"a":"<x>"}`+"\n")); n != len(want) {
		t.Errorf("ResponseSize = %d, want %d (%s)", n, len(want), want)
	}
}
