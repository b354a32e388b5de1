package handler

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestInputsRoute guards GET /batches/{id}/inputs end to end through the
// handler and through API Gateway's event (Serve): a CSV batch's failed
// inputs with its ; delimiter and text/csv, the count and next cursor in
// the headers, the next page from that cursor, a JSON Lines batch's as
// application/x-ndjson; a bad id is 400 naming id before any read.
func TestInputsRoute(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	store, blobs := memstore.NewStore(), memblobs.New()
	mk := func(id, format string, shape *api.CSVShape, manifest string, failed ...string) {
		b := ledger.Batch{Batch: api.Batch{ID: id, Plan: api.Plan{Pipeline: "echo", Digest: "d", MaxAttempts: 1, OnInterrupt: api.InterruptRetry},
			ManifestKey: "batches/" + id + "/m.jsonl", ManifestBytes: 1, ItemCount: 3, ListShards: 1, CounterShards: 1, KeyField: "id",
			Run: 1, Status: api.StatusRunning, Source: "s3://in/x", SourceFormat: format, CSV: shape, CreatedAt: now, RunStartedAt: now}, Chunks: 1}
		if _, err := store.CreateBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := blobs.Put(ctx, b.ManifestKey, "application/x-ndjson", []byte(manifest)); err != nil {
			t.Fatal(err)
		}
		for _, k := range failed {
			it, err := store.Reserve(ctx, ledger.Reservation{BatchID: id, Key: k, RunID: ledger.RunID(id, k), Run: 1, ListShards: 1, Now: now, Lease: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Record(ctx, ledger.Record{BatchID: id, Key: k, RunID: ledger.RunID(id, k), Run: 1, ListShards: 1, Attempt: it.Attempt,
				FirstAttempt: it.Attempt, Outcome: api.OutcomeFailed, Error: "no", Reason: api.ReasonPermanent, Now: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("csv-1", api.FormatCSV, &api.CSVShape{Delimiter: ";", Header: []string{"id", "name"}},
		`{"key":"b","input":{"id":"b","name":"Bo; \"B\""}}`+"\n"+`{"key":"a","input":{"id":"a","name":"Al"}}`+"\n"+`{"key":"c","input":{"id":"c","name":"ok"}}`+"\n", "a", "b")
	mk("json-1", api.FormatJSONL, nil, `{"key":"a","input":{"id":"a", "x":[1, 2]}}`+"\n", "a")
	a := NewAPI(nil, store, blobs, slog.New(slog.NewTextHandler(io.Discard, nil)))

	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	rec := get("/batches/csv-1/inputs?limit=1")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != api.ContentTypeCSV || rec.Header().Get(api.HeaderInputCount) != "1" {
		t.Fatalf("first page: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
	if rec.Body.String() != "id;name\na;Al\n" {
		t.Errorf("first page body %q", rec.Body.String())
	}
	cursor := rec.Header().Get(api.HeaderNextCursor)
	if cursor == "" {
		t.Fatal("first page of 1 of 2: no next cursor")
	}
	rec = get("/batches/csv-1/inputs?limit=1&cursor=" + cursor)
	if rec.Code != 200 || rec.Body.String() != "id;name\nb;\"Bo; \"\"B\"\"\"\n" || rec.Header().Get(api.HeaderNextCursor) != "" {
		t.Errorf("second page: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}

	out, err := a.Serve(ctx, events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/batches/json-1/inputs", Resource: "/batches/{proxy+}",
		PathParameters: map[string]string{"proxy": "json-1/inputs"}, QueryStringParameters: map[string]string{"outcome": "failed"}})
	if err != nil || out.StatusCode != 200 || out.Headers["Content-Type"] != api.ContentTypeNDJSON || out.Body != `{"id":"a","x":[1,2]}`+"\n" {
		t.Errorf("through Serve: %+v, %v", out, err)
	}

	rec = getWith(NewAPI(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil))), "/batches/a%20b/inputs")
	var eb ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || rec.Code != 400 || eb.Field != "id" || !strings.Contains(eb.Message, "batch id") {
		t.Errorf("bad id: %d %s", rec.Code, rec.Body.String())
	}
}

// getWith answers GET path with a (no store: nothing may be read).
func getWith(a *API, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}
