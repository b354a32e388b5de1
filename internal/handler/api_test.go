package handler

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Request bodies the API refuses before any storage is touched.
func TestAPIRefusesMalformedBodies(t *testing.T) {
	api := NewAPI(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tests := []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"content after the object", "POST", "/batches", `{"pipeline":"webhook","source":{"items":[1]}} xyz`, 400, ""},
		{"unknown field", "POST", "/batches", `{"pipelin":"webhook"}`, 400, "pipelin"},
		{"wrong type", "POST", "/batches", `{"pipeline":7}`, 400, "pipeline"},
		{"not JSON", "POST", "/batches", `nope`, 400, ""},
		{"bad batch id", "GET", "/batches/a%20b", ``, 400, "id"},
		{"no route", "PUT", "/elsewhere", ``, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			var body ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("answer %q is not an error body: %v", rec.Body.String(), err)
			}
			if rec.Code != tt.status || body.Field != tt.field || body.Code == "" || body.Message == "" {
				t.Fatalf("%d %+v, want %d field %q", rec.Code, body, tt.status, tt.field)
			}
			if rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", rec.Header().Get("Content-Type"))
			}
		})
	}
}

func TestUploadNames(t *testing.T) {
	if got := config.UploadErrorKey("incoming/2026/orders.jsonl"); got != "incoming-errors/2026/orders.jsonl.error.json" {
		t.Errorf("UploadErrorKey = %s", got)
	}
	a := api.UploadBatchID("b", "incoming/My Orders (1).jsonl", `"etag1"`)
	if !strings.HasPrefix(a, "My-Orders-1-") || len(a) != len("My-Orders-1-")+16 || a == api.UploadBatchID("b", "incoming/My Orders (1).jsonl", `"etag2"`) {
		t.Errorf("UploadBatchID = %s", a)
	}
	if got := ScheduleBatchID("nightly", mustTime(t, "2026-11-29T02:00:00Z")); got != "nightly-20261129T020000Z" {
		t.Errorf("ScheduleBatchID = %s", got)
	}
}

func mustTime(t *testing.T, s string) (tm time.Time) {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestErrorOfExpired guards the product line "an expired batch answers 404
// with code expired" (and an unknown one 404 not_found).
func TestErrorOfExpired(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"expired", fmt.Errorf("batch b: retention ended: %w", api.ErrExpired), http.StatusNotFound, "expired"},
		{"not found", fmt.Errorf("batch b: %w", api.ErrNotFound), http.StatusNotFound, "not_found"},
		{"pending deletion", fmt.Errorf("forget b: %w: %w", api.ErrPendingDeletion, errors.New("throttled")), http.StatusInternalServerError, "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := ErrorOf(tt.err)
			if status != tt.wantStatus || body.Code != tt.wantCode {
				t.Fatalf("ErrorOf = %d %q, want %d %q", status, body.Code, tt.wantStatus, tt.wantCode)
			}
		})
	}
}

// TestHardeningRequestSizeLimit guards the request size product line: a
// request whose Lambda event is over Lambda's 6 MB invocation payload
// limit gets 413 naming the limit and field body — the event, not the
// body, is what Lambda measures: a 5.95 MB body of quoted items (its
// event JSON-escaped over 6 MB) and a 4.8 MB body sent base64 as API
// Gateway sends binary bodies are refused, as on AWS, where they never
// reach the function; an event of exactly the limit passes the size check
// (and is then judged on its content). ServeHTTP bounds the body it reads
// the same way.
func TestHardeningRequestSizeLimit(t *testing.T) {
	api := NewAPI(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	event := func(body string, b64 bool) events.APIGatewayProxyRequest {
		return events.APIGatewayProxyRequest{
			Resource: "/batches", Path: "/batches", HTTPMethod: "POST",
			Headers: map[string]string{"Content-Type": "application/json"}, Body: body, IsBase64Encoded: b64,
			RequestContext: events.APIGatewayProxyRequestContext{Stage: "v1", ResourcePath: "/batches", HTTPMethod: "POST"},
		}
	}
	head := `{"pipelin":1}`
	pad := wire.MaxEventBytes - EventBytes(event(head, false))
	atLimit := head + strings.Repeat(" ", pad)
	var quoted strings.Builder
	quoted.WriteString(`{"pipeline":"webhook","source":{"items":[`)
	for i := 0; quoted.Len() < 5_950_000; i++ {
		fmt.Fprintf(&quoted, `{"key":"k%07d","text":"a \"quoted\" word"},`, i)
	}
	quoted.WriteString(`{}]}}`)
	for _, tt := range []struct {
		name   string
		ev     events.APIGatewayProxyRequest
		status int
		field  string
	}{
		{"an event one byte over the limit", event(atLimit+" ", false), 413, "body"},
		{"a 5.95 MB body of quoted items", event(quoted.String(), false), 413, "body"},
		{"a 4.8 MB body, base64", event(base64.StdEncoding.EncodeToString([]byte(head+strings.Repeat(" ", 4_800_000))), true), 413, "body"},
		{"an event at the limit", event(atLimit, false), 400, "pipelin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := api.Serve(context.Background(), tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			var body ErrorBody
			if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
				t.Fatalf("answer %q: %v", resp.Body, err)
			}
			if resp.StatusCode != tt.status || body.Field != tt.field {
				t.Fatalf("%d %+v, want %d field %q", resp.StatusCode, body, tt.status, tt.field)
			}
			if tt.status == 413 && !strings.Contains(body.Message, "6 MB invocation payload limit (6291456 bytes") {
				t.Errorf("message %q does not name the limit", body.Message)
			}
		})
	}
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest("POST", "/batches", strings.NewReader(head+strings.Repeat(" ", MaxRequestBytes))))
	if rec.Code != 413 || !strings.Contains(rec.Body.String(), "6291456 bytes") {
		t.Fatalf("ServeHTTP of a body over the limit: %d %s", rec.Code, rec.Body.String())
	}
}
