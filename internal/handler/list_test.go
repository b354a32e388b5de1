package handler

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

// Guards the listing's product line "bad input gets a clear error naming
// the field": GET /batches refuses a bad status, since, source, limit or cursor
// with 400 naming the query parameter, before any storage is read (the
// API here has no store: a read would panic).
func TestListBatchesQueryErrors(t *testing.T) {
	api := NewAPI(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tests := []struct {
		name, query, field, inMessage string
	}{
		{"unknown status", "status=done", "status", `"done"`},
		{"one bad status among good", "status=running,completd", "status", `"completd"`},
		{"repeated status, one bad", "status=running&status=nope", "status", `"nope"`},
		{"since not RFC 3339", "since=yesterday", "since", "RFC 3339"},
		{"since a bare date", "since=2026-11-30", "since", "RFC 3339"},
		{"limit not a number", "limit=ten", "limit", "whole number"},
		{"limit too large", "limit=1001", "limit", "1001"},
		{"limit negative", "limit=-1", "limit", "-1"},
		{"cursor not base64", "cursor=%21%21", "cursor", "cursor"},
		{"source not an S3 URI", "source=orders.csv", "source", `"orders.csv"`},
		{"source too long", "source=s3://b/" + strings.Repeat("k", 1100), "source", "1094 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, httptest.NewRequest("GET", "/batches?"+tt.query, nil))
			var body ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("answer %q is not an error body: %v", rec.Body.String(), err)
			}
			if rec.Code != 400 || body.Code != "invalid_request" || body.Field != tt.field || !strings.Contains(body.Message, tt.inMessage) {
				t.Fatalf("%d %+v, want 400 invalid_request field %q with %q", rec.Code, body, tt.field, tt.inMessage)
			}
		})
	}
	// Other methods on /batches are still no route.
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest("PUT", "/batches", nil))
	if rec.Code != 404 {
		t.Errorf("PUT /batches: %d, want 404", rec.Code)
	}
}
