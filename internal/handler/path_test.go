package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// releaseStore is the part of ledger.Store that release touches: it
// records which item key reached the store.
type releaseStore struct {
	ledger.Store
	released []string
}

func (s *releaseStore) GetBatch(_ context.Context, id string) (ledger.Batch, error) {
	return ledger.Batch{Batch: api.Batch{ID: id, Status: api.StatusCompleted, Run: 1}}, nil
}

func (s *releaseStore) ReleaseItem(_ context.Context, _ string, _ int, key string) error {
	s.released = append(s.released, key)
	return nil
}

// awkwardKeys are item keys that paths mangle when decoded zero times or
// twice: "/" and a literal "%2F", "%", "+", spaces, non-ASCII, "?" and "#",
// dot segments, route words and slashes at either end.
var awkwardKeys = []string{
	"a/b", "a%2Fb", "100%", "%", "%zz", "a+b", "a b", "  ", "naïve/日本語", "émoji 🎉",
	"?x#y", ".", "..", "/lead", "trail/", "a//b", "release", "x/release", "items/y", "report",
}

// restEvent is a REST API proxy event as API Gateway sends it for a
// request to path under the stack's /batches/{proxy+} resource: `path`
// still percent-encoded, `pathParameters` decoded.
func restEvent(method, path string) events.APIGatewayProxyRequest {
	decoded := mustUnescape(path)
	return events.APIGatewayProxyRequest{
		Resource:       "/batches/{proxy+}",
		Path:           path,
		HTTPMethod:     method,
		Headers:        map[string]string{"content-type": "application/json"},
		PathParameters: map[string]string{"proxy": strings.TrimPrefix(decoded, "/batches/")},
		RequestContext: events.APIGatewayProxyRequestContext{ResourcePath: "/batches/{proxy+}", HTTPMethod: method, Path: "/v1" + path, Stage: "v1"},
	}
}

// mustUnescape decodes p once, as API Gateway decodes path parameters;
// a malformed escape is kept as is.
func mustUnescape(p string) string {
	d, err := url.PathUnescape(p)
	if err != nil {
		return p
	}
	return d
}

// Item keys in paths: POST /batches/{id}/items/{key}/release acts on
// exactly the item named, whatever its key holds, whether the request
// arrives as an API Gateway REST event (path encoded, parameters decoded),
// as MiniStack's event (path decoded) or as plain HTTP. Guards "release"
// (docs/api.md "Using it"): releasing a/b must never release a%2Fb.
func TestItemKeysInPaths(t *testing.T) {
	for _, key := range awkwardKeys {
		t.Run(key, func(t *testing.T) {
			path := ItemPath("b-1", key, "release")
			if strings.Count(path, "/") != 5 {
				t.Fatalf("ItemPath(%q) = %s: the key is not one segment", key, path)
			}
			shapes := map[string]func(*API) int{
				"aws rest event": func(api *API) int {
					resp, err := api.Serve(context.Background(), restEvent("POST", path))
					if err != nil {
						t.Fatal(err)
					}
					return resp.StatusCode
				},
				"emulator event (path decoded)": func(api *API) int {
					ev := restEvent("POST", path)
					ev.Path = mustUnescape(path)
					resp, err := api.Serve(context.Background(), ev)
					if err != nil {
						t.Fatal(err)
					}
					return resp.StatusCode
				},
				"event without resource": func(api *API) int {
					ev := restEvent("POST", path)
					ev.Resource, ev.PathParameters = "", nil
					resp, err := api.Serve(context.Background(), ev)
					if err != nil {
						t.Fatal(err)
					}
					return resp.StatusCode
				},
				"http": func(api *API) int {
					rec := httptest.NewRecorder()
					api.ServeHTTP(rec, httptest.NewRequest("POST", "http://api.example"+path, nil))
					return rec.Code
				},
			}
			for name, send := range shapes {
				store := &releaseStore{}
				api := NewAPI(nil, store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if status := send(api); status != http.StatusNoContent || len(store.released) != 1 || store.released[0] != key {
					t.Errorf("%s: %s answered %d, released %q; want 204 releasing %q", name, path, status, store.released, key)
				}
			}
		})
	}
}

// Paths that name no item are refused without touching the store, and the
// other routes still match.
func TestItemPathsRefused(t *testing.T) {
	tests := []struct {
		name, method, path string
		status             int
		field              string
	}{
		{"empty key", "POST", "/batches/b-1/items//release", 404, ""},
		{"no release", "POST", "/batches/b-1/items/a/b", 404, ""},
		{"GET release", "GET", "/batches/b-1/items/a/release", 404, ""},
		{"bad batch id", "POST", "/batches/b%201/items/a/release", 400, "id"},
		{"invalid UTF-8 key", "POST", "/batches/b-1/items/%FF/release", 400, "key"},
		{"key too long", "POST", ItemPath("b-1", strings.Repeat("k", api.MaxKeyBytes+1), "release"), 400, "key"},
		{"bad escape (plain path)", "POST", "/batches/b-1/items/%zz/release", 400, "path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &releaseStore{}
			api := NewAPI(nil, store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			ev := restEvent(tt.method, tt.path)
			ev.Resource = ""
			resp, err := api.Serve(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			var body ErrorBody
			if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
				t.Fatalf("answer %q: %v", resp.Body, err)
			}
			if resp.StatusCode != tt.status || body.Field != tt.field || len(store.released) != 0 {
				t.Errorf("%d %+v, released %q; want %d field %q, nothing released", resp.StatusCode, body, store.released, tt.status, tt.field)
			}
		})
	}
}

// An event as API Gateway's REST API sends it, field for field: `path` as
// the client sent it (percent-encoded), `pathParameters` and the
// requestContext decoded. Releasing a/b releases a/b and releasing a%2Fb
// (a key holding the three characters "%2F") releases that one.
func TestItemKeysInPathsAWSEventJSON(t *testing.T) {
	const tmpl = `{
  "resource": "/batches/{proxy+}",
  "path": %q,
  "httpMethod": "POST",
  "headers": {"Host": "abc123.execute-api.us-east-1.amazonaws.com", "Content-Type": "application/json"},
  "multiValueHeaders": {"Host": ["abc123.execute-api.us-east-1.amazonaws.com"]},
  "queryStringParameters": null,
  "multiValueQueryStringParameters": null,
  "pathParameters": {"proxy": %q},
  "stageVariables": null,
  "requestContext": {"resourcePath": "/batches/{proxy+}", "httpMethod": "POST", "path": %q, "stage": "v1", "apiId": "abc123"},
  "body": null,
  "isBase64Encoded": false
}`
	for _, tt := range []struct{ path, proxy, key string }{
		{"/batches/b-1/items/a%2Fb/release", "b-1/items/a/b/release", "a/b"},
		{"/batches/b-1/items/a%252Fb/release", "b-1/items/a%2Fb/release", "a%2Fb"},
		{"/batches/b-1/items/100%25%20off+more/release", "b-1/items/100% off+more/release", "100% off+more"},
		{"/batches/b-1/items/na%C3%AFve%2F%E6%97%A5/release", "b-1/items/naïve/日/release", "naïve/日"},
	} {
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal([]byte(fmt.Sprintf(tmpl, tt.path, tt.proxy, "/v1"+tt.path)), &ev); err != nil {
			t.Fatal(err)
		}
		store := &releaseStore{}
		api := NewAPI(nil, store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		resp, err := api.Serve(context.Background(), ev)
		if err != nil || resp.StatusCode != http.StatusNoContent || len(store.released) != 1 || store.released[0] != tt.key {
			t.Errorf("%s: %d %v, released %q; want 204 releasing %q", tt.path, resp.StatusCode, err, store.released, tt.key)
		}
	}
}
