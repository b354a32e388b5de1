package handler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/internal/keyset"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/submit"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// openAPIBase is the host the requests checked against docs/openapi.yaml
// are sent to.
const openAPIBase = "https://example.execute-api.us-east-1.amazonaws.com"

// contractStore is a ledger.Store of fixed batches, enough for every route
// to give each of its answers.
type contractStore struct {
	ledger.Store // other methods are not reached
	batches      map[string]ledger.Batch
}

func (s *contractStore) GetBatch(_ context.Context, id string) (ledger.Batch, error) {
	if id == "boom-1" {
		return ledger.Batch{}, errors.New("dynamodb: connection reset")
	}
	b, ok := s.batches[id]
	if !ok {
		return ledger.Batch{}, fmt.Errorf("batch %s: %w", id, api.ErrNotFound)
	}
	return b, nil
}

func (s *contractStore) CreateBatch(_ context.Context, b ledger.Batch) (ledger.Batch, error) {
	if b.ID == "boom-1" {
		return ledger.Batch{}, errors.New("dynamodb: connection reset")
	}
	if old, ok := s.batches[b.ID]; ok {
		return old, api.ErrBatchExists
	}
	s.batches[b.ID] = b
	return b, nil
}
func (s *contractStore) SetFannedOut(context.Context, string, int) error { return nil }
func (s *contractStore) Progress(_ context.Context, id string, _, _ int) (ledger.Progress, error) {
	if id == "budget-1" { // $30 spent of a $30 budget
		return ledger.Progress{Done: 60, Spent: pipeline.CostSum{"usd": decimal.NewFromInt(30)}}, nil
	}
	return ledger.Progress{Done: 12000, Failures: 3}, nil
}
func (s *contractStore) SetLimits(_ context.Context, id string, l ledger.Limits) error {
	b := s.batches[id]
	b.BudgetUSD, b.Ceilings = cmp.Or(l.BudgetUSD, b.BudgetUSD), cmp.Or(l.Ceilings, b.Ceilings)
	s.batches[id] = b
	return nil
}
func (s *contractStore) Stop(_ context.Context, m ledger.StopMark) error {
	b := s.batches[m.BatchID]
	b.Stop, b.StopDetail = m.Status, m.Detail
	s.batches[m.BatchID] = b
	return nil
}
func (s *contractStore) Pause(_ context.Context, m ledger.PauseMark) error {
	b := s.batches[m.BatchID]
	b.Pause, b.Pauses = &api.Pause{By: m.By, Since: m.Now, Class: m.Class, Error: m.Error}, b.Pauses+1
	s.batches[m.BatchID] = b
	return nil
}
func (s *contractStore) MarkApproval(_ context.Context, m ledger.ApprovalMark) error {
	b := s.batches[m.BatchID]
	if b.Approval == nil || b.Approval.Decision != "" {
		return fmt.Errorf("approval of %s: %w", m.BatchID, api.ErrConflict)
	}
	b.Approval = api.ApprovalOf(b.Sample, m.Decision, m.By, m.Now, b.Approval.Estimate)
	s.batches[m.BatchID] = b
	return nil
}
func (s *contractStore) Unpause(_ context.Context, m ledger.UnpauseMark) error {
	b := s.batches[m.BatchID]
	b.Pause = nil
	s.batches[m.BatchID] = b
	return nil
}
func (s *contractStore) ListItems(_ context.Context, _ string, _ int, _ api.Outcome, after string, _ int) ([]ledger.Item, string, error) {
	if after != "" {
		return nil, "", nil // one page
	}
	return []ledger.Item{{Item: api.Item{Key: "a/1", RunID: "r1", Run: 1, Outcome: api.OutcomeFailed, Attempt: 3, RunAttempts: 3,
		Error: "HTTP 400", Reason: api.ReasonPermanent, Cost: pipeline.Cost{"calls": 3}, UpdatedAt: time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)}}}, "a/1", nil
}
func (s *contractStore) ScanShard(_ context.Context, _ string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	at := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	rows := map[int][]ledger.Item{
		0: {{Item: api.Item{Key: "a", Run: 2, Outcome: api.OutcomeSucceeded, Attempt: 1, RunAttempts: 1, Output: json.RawMessage(`{"words":3}`), Cost: pipeline.Cost{"usd": 0.002}, UpdatedAt: at}},
			{Item: api.Item{Key: "c", Run: 2, Outcome: api.OutcomeInFlight, Attempt: 1, UpdatedAt: at}}},
		1: {{Item: api.Item{Key: "b", Run: 2, Outcome: api.OutcomeFailed, Attempt: 3, RunAttempts: 3, Error: "HTTP 400", Reason: api.ReasonPermanent, UpdatedAt: at}}},
	}[shard]
	var out []ledger.Item
	for _, it := range rows {
		if it.Key > after && len(out) < limit {
			out = append(out, it)
		}
	}
	return out, false, nil
}

// LocateItem finds "gone" nowhere and every other key suspended in run
// 1 under the token "t1", attempt 1.
func (s *contractStore) LocateItem(_ context.Context, id string, _ int, key string) (ledger.Item, error) {
	if key == "gone" {
		return ledger.Item{}, fmt.Errorf("locate %s/%s: %w", id, key, api.ErrNotFound)
	}
	return ledger.Item{Item: api.Item{Key: key, Run: 1, Outcome: api.OutcomeSuspended, Attempt: 1, Reason: api.ReasonSuspend,
		Hold: &api.Hold{Subject: "t1", Since: time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)}}, BatchID: id}, nil
}
func (s *contractStore) WakeItem(_ context.Context, w ledger.WakeMark) (ledger.Item, error) {
	return ledger.Item{Item: api.Item{Key: w.Key, Run: w.Run, Outcome: api.OutcomeSuspended, Attempt: 1,
		Hold: &api.Hold{Subject: "t1", Woken: w.By}}, BatchID: w.BatchID}, nil
}
func (s *contractStore) Lift(_ context.Context, m ledger.LiftMark) error {
	id, subject := m.BatchID, m.Halt.Subject
	b := s.batches[id]
	if _, ok := b.Halts[subject]; !ok {
		return fmt.Errorf("lift %s: %w", subject, api.ErrConflict)
	}
	delete(b.Halts, subject)
	s.batches[id] = b
	return nil
}
func (s *contractStore) ListBatches(_ context.Context, q ledger.BatchQuery) ([]ledger.Batch, string, error) {
	if q.Before == "boom" {
		return nil, "", errors.New("dynamodb: connection reset")
	}
	return []ledger.Batch{s.batches["run-1"], s.batches["done-1"]}, "done-1", nil
}
func (s *contractStore) StartCorrection(_ context.Context, id string, from int, rev api.Revision, now time.Time) (ledger.Batch, error) {
	b := s.batches[id]
	b.Run, b.Status, b.FannedOut, b.RunStartedAt = from+1, api.StatusRunning, false, now
	b.Revisions, b.RunRevision = append(b.Revisions, rev), rev.N
	s.batches[id] = b
	return b, nil
}
func (s *contractStore) ReadItems(_ context.Context, _ string, _ int, keys []string) ([]ledger.Item, error) {
	var items []ledger.Item
	for _, k := range keys {
		items = append(items, ledger.Item{Item: api.Item{Key: k, Run: 1, Outcome: api.OutcomeFailed}})
	}
	return items, nil
}
func (s *contractStore) MarkRevision(context.Context, ledger.Batch, int, []ledger.RevisionMark) error {
	return nil
}
func (s *contractStore) ReleaseItem(context.Context, string, int, string) error  { return nil }
func (s *contractStore) MarkForgetting(context.Context, ledger.ForgetMark) error { return nil }
func (s *contractStore) DeleteBatch(_ context.Context, b ledger.Batch) error {
	delete(s.batches, b.ID)
	return nil
}

// contractBlobs serves the golden report and the objects written, and
// a fixed manifest for batch fix-1.
type contractBlobs struct {
	discardBlobs
	report  []byte
	objects map[string][]byte
}

// keptWriter is an object being written to contractBlobs.
type keptWriter struct {
	bytes.Buffer
	b   *contractBlobs
	key string
}

func (w *keptWriter) Close() error { w.b.objects[w.key] = w.Bytes(); return nil }
func (w *keptWriter) Abort() error { return nil }

func (b *contractBlobs) Create(_ context.Context, key, _ string) (ledger.BlobWriter, error) {
	return &keptWriter{b: b, key: key}, nil
}
func (b *contractBlobs) Open(_ context.Context, _, key string) (io.ReadCloser, error) {
	o, ok := b.objects[key]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, api.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(o)), nil
}

func (b *contractBlobs) Bucket() string { return "example-bucket" }
func (b *contractBlobs) PutIfAbsent(_ context.Context, key, _ string, body []byte) error {
	if _, ok := b.objects[key]; ok {
		return fmt.Errorf("%s: %w", key, api.ErrConflict)
	}
	b.objects[key] = body
	return nil
}
func (b *contractBlobs) Get(_ context.Context, key string) ([]byte, error) {
	if strings.HasPrefix(key, "batches/lost-1/") {
		return nil, errors.New("s3: connection reset")
	}
	if strings.HasSuffix(key, "/report.json") {
		return b.report, nil
	}
	if o, ok := b.objects[key]; ok || strings.Contains(key, "/held/") {
		return o, nil // a held unit's saved message: any body
	}
	return nil, api.ErrNotFound
}
func (b *contractBlobs) OpenMatch(context.Context, string, string, string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(`{"a":1}` + "\n")), nil
}
func (b *contractBlobs) HeadSource(_ context.Context, _, key string) (source.ObjectInfo, error) {
	switch {
	case strings.HasPrefix(key, "batches/lost-1/"):
		return source.ObjectInfo{}, errors.New("s3: connection reset")
	case strings.HasPrefix(key, "batches/big-1/"):
		return source.ObjectInfo{Key: key, Size: ReportInlineBytes + 1}, nil
	}
	return source.ObjectInfo{Key: key, Size: int64(len(b.report))}, nil
}
func (b *contractBlobs) PresignGet(_ context.Context, key string, _ time.Duration) (string, error) {
	return "https://example-bucket.s3.us-east-1.amazonaws.com/" + key + "?X-Amz-Expires=900&X-Amz-Signature=0", nil
}
func (b *contractBlobs) Delete(context.Context, string) error              { return nil }
func (b *contractBlobs) DeletePrefix(context.Context, string) (int, error) { return 3, nil }

func loadOpenAPI(t *testing.T) (validator.Validator, *v3.Document) {
	t.Helper()
	spec, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("docs/openapi.yaml is OpenAPI %s, want 3.1.0", v)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("docs/openapi.yaml is not valid OpenAPI: %s", e.Error())
		}
		t.FailNow()
	}
	return v, &m.Model
}

// TestContractOpenAPI guards the API contract (docs/openapi.yaml, docs/api.md
// "Using it"): the document is valid OpenAPI 3.1; it describes exactly the
// routes the handlers serve; its error codes are wire.Codes() and every
// status ErrorOf gives is documented; every answer the real handlers give
// (each route, success and error, through fixed stores) validates, status
// and body, against it, and every status it documents is one of those
// answers (two, named, are shown by integration tests); requests the
// handlers refuse by a rule the schema states are refused by the schema
// too; and the golden examples of shared/wire validate against it.
// resultCursorOf is the partial results' cursor of run after pos.
func resultCursorOf(run int, pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprint(run) + "\x00" + pos))
}

func TestContractOpenAPI(t *testing.T) {
	v, doc := loadOpenAPI(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Routes: an operation of the document is a route of the handlers,
	// and every route the handlers answer on a probe is in the document.
	documented := map[string]bool{}
	for path, item := range doc.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	a := NewAPI(nil, nil, nil, log)
	probes := []string{"/batches", "/batches/{id}", "/batches/{id}/report", "/batches/{id}/items",
		"/batches/{id}/resume", "/batches/{id}/cancel", "/batches/{id}/pause", "/batches/{id}/unpause", "/batches/{id}/approve", "/batches/{id}/reject", "/batches/{id}/budget", "/batches/{id}/items/{key}/release",
		"/batches/{id}/items/{key}", "/batches/{id}/runs", "/batches/{id}/results", "/batches/{id}/events", "/"}
	for p := range documented {
		probes = append(probes, strings.SplitN(p, " ", 2)[1])
	}
	for _, p := range probes {
		concrete := strings.NewReplacer("{id}", "b-1", "{key}", "k%2F1").Replace(p)
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			r := httptest.NewRequest(m, concrete, nil)
			routed := a.route(r) != nil
			if routed != documented[m+" "+p] {
				t.Errorf("%s %s: handlers route it: %v; docs/openapi.yaml describes it: %v", m, p, routed, documented[m+" "+p])
			}
		}
	}

	// Error codes: the document's enum is wire.Codes().
	errSchema := doc.Components.Schemas.GetOrZero("Error").Schema()
	var enum []string
	for _, n := range errSchema.Properties.GetOrZero("code").Schema().Enum {
		enum = append(enum, n.Value)
	}
	if want := wire.Codes(); !slices.Equal(sorted(enum), sorted(want)) {
		t.Errorf("Error.code enum %v, want wire.Codes() %v", enum, want)
	}
	// The enums of the document are the Go constants.
	enumOf := func(schema, prop string) []string {
		sc := doc.Components.Schemas.GetOrZero(schema).Schema()
		if prop != "" {
			sc = sc.Properties.GetOrZero(prop).Schema()
		}
		var out []string
		for _, n := range sc.Enum {
			out = append(out, n.Value)
		}
		return sorted(out)
	}
	var statuses, outcomes []string
	for _, st := range api.Statuses() {
		statuses = append(statuses, string(st))
	}
	for _, o := range api.Outcomes() {
		outcomes = append(outcomes, string(o))
	}
	for _, e := range []struct {
		schema, prop string
		want         []string
	}{
		{"Status", "", statuses},
		{"Outcome", "", outcomes},
		{"BatchView", "census_source", []string{wire.CensusFromItems, wire.CensusFromReport, wire.CensusFromCounters}},
		{"InterruptPolicy", "", []string{string(api.InterruptRetry), string(api.InterruptQuarantine)}},
		{"Reason", "", []string{string(api.ReasonPermanent), string(api.ReasonMaxAttempts), string(api.ReasonDeadLettered),
			string(api.ReasonQuarantine), string(api.ReasonInterrupted), string(api.ReasonThreshold), string(api.ReasonCancel), string(api.ReasonCredential),
			string(api.ReasonCeiling)}},
	} {
		if got := enumOf(e.schema, e.prop); !slices.Equal(got, sorted(e.want)) {
			t.Errorf("%s %s enum %v, want %v", e.schema, e.prop, got, sorted(e.want))
		}
	}

	// Every status ErrorOf gives is documented on submit, which can meet
	// every error class.
	submitCodes := map[string]bool{}
	for code := range doc.Paths.PathItems.GetOrZero("/batches").Post.Responses.Codes.KeysFromOldest() {
		submitCodes[code] = true
	}
	for _, err := range []error{
		&api.InputError{Field: "x", Reason: "bad"},
		fmt.Errorf("%w", &api.InputError{Field: "source", Reason: "no items", Err: api.ErrEmptySource}),
		&api.MismatchError{Field: "pipeline"},
		&api.BatchRefusedError{Refusal: api.SubmitRefusal{Code: api.RefusalInternal}},
		&api.BatchRefusedError{Refusal: api.SubmitRefusal{Code: api.RefusalInvalid}},
		&api.BatchRefusedError{Refusal: api.SubmitRefusal{Code: api.RefusalInsufficientStorage}},
		api.ErrInsufficientStorage, api.ErrConflict, errors.New("boom"),
	} {
		status, body := ErrorOf(err)
		if !submitCodes[fmt.Sprint(status)] || !slices.Contains(enum, body.Code) {
			t.Errorf("ErrorOf(%v) = %d %s: not documented on POST /batches", err, status, body.Code)
		}
	}

	// Answers of the real handlers.
	golden := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "shared", "wire", "testdata", name+".golden.json"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	now := time.Now().UTC().Truncate(time.Second)
	census := &api.Census{Total: 3, Succeeded: 2, Failed: 1, Cost: pipeline.CostSum{}}
	store := &contractStore{batches: map[string]ledger.Batch{
		"done-1": {
			Batch: api.Batch{
				ID:             "done-1",
				Plan:           api.Plan{Pipeline: "webhook", Headers: map[string]string{"tenant": "acme"}, OnInterrupt: api.InterruptRetry},
				Status:         api.StatusCompleted,
				Run:            1,
				ItemCount:      3,
				FinalCensus:    census,
				ReportKey:      api.ReportKey("done-1", 1),
				CreatedAt:      now,
				RunStartedAt:   now,
				FinishedAt:     now,
				ExpiresAt:      now.Add(time.Hour),
				NeedsAttention: true,
			},
		},
		"run-1": {
			Batch: api.Batch{
				ID:            "run-1",
				Plan:          api.Plan{Pipeline: "webhook"},
				Status:        api.StatusRunning,
				Run:           2,
				ItemCount:     20000,
				CounterShards: 4,
				ListShards:    2,
				FannedOut:     true,
				CreatedAt:     now,
				RunStartedAt:  now,
			},
		},
		"budget-1": {
			Batch: api.Batch{
				ID:            "budget-1",
				Plan:          api.Plan{Pipeline: "webhook"},
				Status:        api.StatusRunning,
				Run:           1,
				ItemCount:     200,
				CounterShards: 1,
				ListShards:    1,
				FannedOut:     true,
				CreatedAt:     now,
				RunStartedAt:  now,
				BudgetUSD:     30,
				Pause: &api.Pause{By: api.PauseByBudget, Since: now, Class: "budget",
					Error: "budget $30 reached ($30 spent: pipeline $30, DynamoDB $0; Lambda and SQS not counted)"},
			},
		},
		"lost-1": {
			Batch: api.Batch{
				ID:        "lost-1",
				Plan:      api.Plan{Pipeline: "webhook"},
				Status:    api.StatusCompleted,
				Run:       1,
				ReportKey: api.ReportKey("lost-1", 1),
				CreatedAt: now,
				ExpiresAt: now.Add(time.Hour),
			},
		},
		"refused-1": {
			Batch: api.Batch{
				ID:         "refused-1",
				Plan:       api.Plan{Pipeline: "webhook"},
				Status:     api.StatusRefused,
				Run:        1,
				CreatedAt:  now,
				FinishedAt: now,
				ExpiresAt:  now.Add(time.Hour),
				Refusal:    &api.SubmitRefusal{Code: api.RefusalInternal, Message: "reading the source failed 3 times"},
			},
			Request: json.RawMessage(`{"batch_id":"refused-1","pipeline":"webhook","source":{"object":"s3://example-bucket/in.jsonl"},"pipeline_options":{},"max_attempts":3,"on_interrupt":"retry"}`),
		},
		"sampled-1": {Batch: api.Batch{ID: "sampled-1", Plan: api.Plan{Pipeline: "webhook", Sample: 200, AutoApproveUSD: 0.5}, Status: api.StatusRunning, Run: 1,
			ItemCount: 3000, CounterShards: 1, ListShards: 1, FannedOut: true, CreatedAt: now, RunStartedAt: now,
			Approval: api.ApprovalOf(200, "", "", time.Time{}, &api.SampleEstimate{MadeAt: now, Items: 3000, SampleItems: 200, Failed: 3,
				FailureRate: 0.015, FailureLow: 0.005, FailureHigh: 0.043, ProjectedFailures: 45, SampleUSD: 0.056, CostUSD: 0.84,
				PipelineUSD: 0.8, InfraUSD: 0.04, ProjectedCost: pipeline.CostSum{"calls": decimal.NewFromInt(3000)}, SampleSeconds: 118.2,
				ItemsPerSecond: 16.9, Seconds: 167, Pace: "the sample's pace (1.69 items/s) × 10: 1000 messages at once against the sample's 20"})}},
		"sampling-1": {Batch: api.Batch{ID: "sampling-1", Plan: api.Plan{Pipeline: "webhook", Sample: 50}, Status: api.StatusRunning, Run: 1,
			ItemCount: 3000, CounterShards: 1, ListShards: 1, FannedOut: true, CreatedAt: now, RunStartedAt: now,
			Approval: api.ApprovalOf(50, "", "", time.Time{}, nil)}},
		"reading-1": {Batch: api.Batch{ID: "reading-1", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusSubmitting, Run: 1, CreatedAt: now}},
		"halted-1": {Batch: api.Batch{ID: "halted-1", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusRunning, Run: 1, ItemCount: 3, FannedOut: true,
			CreatedAt: now, RunStartedAt: now, Halts: map[string]api.Halt{"secret:hook": {Subject: "secret:hook", Since: now, Reason: "webhook: HTTP 401"}}}},
		"gone-1": {Batch: api.Batch{ID: "gone-1", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusCompleted, Run: 1, CreatedAt: now, ExpiresAt: now.Add(-time.Hour)}},
		"big-1": {Batch: api.Batch{ID: "big-1", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusCompleted, Run: 1, ReportKey: api.ReportKey("big-1", 1),
			CreatedAt: now, FinishedAt: now, ExpiresAt: now.Add(time.Hour)}},
		"fix-1": {
			Batch: api.Batch{
				ID:          "fix-1",
				Plan:        api.Plan{Pipeline: "webhook", ItemsPerMessage: 1},
				Status:      api.StatusCompleted,
				Run:         1,
				ItemCount:   2,
				KeyField:    "k",
				ManifestKey: "batches/fix-1/manifest.jsonl",
				CreatedAt:   now,
				FinishedAt:  now,
				ExpiresAt:   now.Add(time.Hour),
			},
		},
		"all-1": {Batch: api.Batch{ID: "all-1", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusCompleted, Run: 1, ItemCount: 3,
			FinalCensus: &api.Census{Total: 3, Succeeded: 3}, ManifestKey: "batches/all-1/manifest.jsonl", CreatedAt: now, FinishedAt: now, ExpiresAt: now.Add(time.Hour)}},
		"csvin-1": {Batch: api.Batch{ID: "csvin-1", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusCompleted, Run: 1, ItemCount: 2, KeyField: "id",
			ManifestKey: "batches/csvin-1/manifest.jsonl", SourceFormat: api.FormatCSV, CSV: &api.CSVShape{Delimiter: ";", Header: []string{"id", "name"}},
			CreatedAt: now, FinishedAt: now, ExpiresAt: now.Add(time.Hour)}},
		"jsonin-1": {Batch: api.Batch{ID: "jsonin-1", Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusCompleted, Run: 1, ItemCount: 2, KeyField: "id",
			ManifestKey: "batches/jsonin-1/manifest.jsonl", SourceFormat: api.FormatJSONL, CreatedAt: now, FinishedAt: now, ExpiresAt: now.Add(time.Hour)}},
	}}
	blobs := &contractBlobs{report: golden("report"), objects: map[string][]byte{
		"batches/fix-1/manifest.jsonl":    []byte(`{"key":"a","input":{"k":"a","v":1}}` + "\n" + `{"key":"b","input":{"k":"b","v":1}}` + "\n"),
		"batches/csvin-1/manifest.jsonl":  []byte(`{"key":"a/0","input":{"id":"a/0","name":"ok"}}` + "\n" + `{"key":"a/1","input":{"id":"a/1","name":"Ann; Jr."}}` + "\n"),
		"batches/jsonin-1/manifest.jsonl": []byte(`{"key":"a/1","input":{"id":"a/1", "n":1}}` + "\n" + `{"key":"a/2","input":{"id":"a/2"}}` + "\n"),
	}}
	sub := &submit.Submitter{Store: store, Blobs: blobs, Queue: sentQueue{}, Clock: ledger.SystemClock{}, Log: log, MaxAttempts: 3, TempDir: t.TempDir()}
	a = NewAPI(sub, store, blobs, log)
	full := &submit.Submitter{Blobs: &discardBlobs{}, Clock: ledger.SystemClock{}, Log: log, MaxAttempts: 3, TempDir: t.TempDir(),
		TempLimitBytes: 512 << 20, Keys: keyset.Options{MemoryBytes: 256, CreateRun: func(path string) (io.WriteCloser, error) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			return noSpace{f}, err
		}}}
	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf(`{"k":"key-%04d"}`, i))
	}

	tests := []struct {
		name, method, path, body string
		api                      *API
		status                   int
		code                     string
		// docRefuses: the document's schema refuses the request too
		// (the handlers' 400 is the schema's own rule).
		docRefuses bool
	}{
		{"submit inline", "POST", "/batches", `{"batch_id":"new-1","pipeline":"webhook","source":{"items":[{"a":1}]},"pipeline_options":{"url":"https://hooks.example.com/x"}}`, nil, 201, "", false},
		{"submit again", "POST", "/batches", `{"batch_id":"new-1","pipeline":"webhook","source":{"items":[{"a":1}]},"pipeline_options":{"url":"https://hooks.example.com/x"}}`, nil, 200, "", false},
		{"submit golden request", "POST", "/batches", string(golden("submit-request")), nil, 400, wire.CodeInvalidRequest, false},
		{"submit heartbeat too short", "POST", "/batches", `{"pipeline":"webhook","source":{"items":[{"a":1}]},"pipeline_options":{"url":"https://hooks.example.com/x"},"task_token":"t","task_heartbeat_seconds":60}`, nil, 400, wire.CodeInvalidRequest, true},
		{"submit heartbeat without token", "POST", "/batches", `{"pipeline":"webhook","source":{"items":[{"a":1}]},"pipeline_options":{"url":"https://hooks.example.com/x"},"task_heartbeat_seconds":600}`, nil, 400, wire.CodeInvalidRequest, false},
		{"submit unknown field", "POST", "/batches", `{"pipelin":"webhook"}`, nil, 400, wire.CodeInvalidRequest, true},
		{"submit an empty rate key", "POST", "/batches", `{"pipeline":"webhook","source":{"items":[{"a":1}]},"pipeline_options":{"url":"https://hooks.example.com/x"},"rate":{"key":"","requests_per_second":5}}`, nil, 400, wire.CodeInvalidRequest, true},
		{"submit empty source", "POST", "/batches", `{"pipeline":"webhook","source":{"items":[]}}`, nil, 400, wire.CodeEmptySource, false},
		{"submit other request, same id", "POST", "/batches", `{"batch_id":"new-1","pipeline":"thumbnail","source":{"items":[{"a":1}]}}`, nil, 409, wire.CodeBatchMismatch, false},
		{"submit too large", "POST", "/batches", `{"pipeline":"webhook","source":{"items":["` + strings.Repeat("x", MaxRequestBytes) + `"]}}`, nil, 413, wire.CodeInvalidRequest, false},
		{"submit out of disk", "POST", "/batches", `{"batch_id":"space-1","pipeline":"webhook","key_field":"k","source":{"items":[` + strings.Join(many, ",") + `]}}`, NewAPI(full, nil, nil, log), 507, wire.CodeInsufficientStorage, false},
		{"list", "GET", "/batches?status=running,completed&since=2026-11-01T00:00:00Z&limit=2", "", nil, 200, "", false},
		{"list bad since", "GET", "/batches?since=yesterday", "", nil, 400, wire.CodeInvalidRequest, false},
		{"list bad status", "GET", "/batches?status=done", "", nil, 400, wire.CodeInvalidRequest, false},
		{"get finished", "GET", "/batches/done-1", "", nil, 200, "", false},
		{"get large running", "GET", "/batches/run-1", "", nil, 200, "", false},
		{"get unknown", "GET", "/batches/nope-1", "", nil, 404, wire.CodeNotFound, false},
		{"get expired", "GET", "/batches/gone-1", "", nil, 404, wire.CodeExpired, false},
		{"get bad id", "GET", "/batches/a%20b", "", nil, 400, wire.CodeInvalidRequest, false},
		{"get store down", "GET", "/batches/boom-1", "", nil, 500, wire.CodeInternal, false},
		{"report", "GET", "/batches/done-1/report", "", nil, 200, "", false},
		{"report not yet", "GET", "/batches/run-1/report", "", nil, 404, wire.CodeNotFound, false},
		{"report over ReportInlineBytes: a link", "GET", "/batches/big-1/report", "", nil, 303, "", false},
		{"items", "GET", "/batches/done-1/items?outcome=failed&limit=10", "", nil, 200, "", false},
		{"items bad limit", "GET", "/batches/done-1/items?limit=x", "", nil, 400, wire.CodeInvalidRequest, true},
		{"items bad outcome", "GET", "/batches/done-1/items?outcome=succeeded", "", nil, 400, wire.CodeInvalidRequest, true},
		{"inputs of a CSV batch", "GET", "/batches/csvin-1/inputs", "", nil, 200, "", false},
		{"inputs of a JSON Lines batch, quarantined", "GET", "/batches/jsonin-1/inputs?outcome=quarantined&limit=1", "", nil, 200, "", false},
		{"inputs bad outcome", "GET", "/batches/jsonin-1/inputs?outcome=withheld", "", nil, 400, wire.CodeInvalidRequest, true},
		{"inputs bad limit", "GET", "/batches/jsonin-1/inputs?limit=1001", "", nil, 400, wire.CodeInvalidRequest, true},
		{"inputs bad id", "GET", "/batches/a%20b/inputs", "", nil, 400, wire.CodeInvalidRequest, false},
		{"inputs unknown", "GET", "/batches/nope-1/inputs", "", nil, 404, wire.CodeNotFound, false},
		{"inputs of positional keys", "GET", "/batches/done-1/inputs", "", nil, 409, wire.CodeConflict, false},
		{"inputs store down", "GET", "/batches/boom-1/inputs", "", nil, 500, wire.CodeInternal, false},
		{"partial results", "GET", "/batches/run-1/results/partial", "", nil, 200, "", false},
		{"partial results, a page", "GET", "/batches/run-1/results/partial?limit=1", "", nil, 200, "", false},
		{"partial results, the next page", "GET", "/batches/run-1/results/partial?limit=1&cursor=" + resultCursorOf(2, "a"), "", nil, 200, "", false},
		{"partial results bad limit", "GET", "/batches/run-1/results/partial?limit=x", "", nil, 400, wire.CodeInvalidRequest, true},
		{"partial results limit too large", "GET", "/batches/run-1/results/partial?limit=1001", "", nil, 400, wire.CodeInvalidRequest, true},
		{"partial results bad cursor", "GET", "/batches/run-1/results/partial?cursor=x", "", nil, 400, wire.CodeInvalidRequest, false},
		{"partial results unknown", "GET", "/batches/nope-1/results/partial", "", nil, 404, wire.CodeNotFound, false},
		{"partial results store down", "GET", "/batches/boom-1/results/partial", "", nil, 500, wire.CodeInternal, false},
		{"resume running", "POST", "/batches/run-1/resume", "", nil, 409, wire.CodeConflict, false},
		{"resume when every item succeeded", "POST", "/batches/all-1/resume", "", nil, 409, wire.CodeConflict, false},
		{"pause running", "POST", "/batches/run-1/pause", "", nil, 202, "", false},
		{"pause paused: as it is", "POST", "/batches/run-1/pause", "", nil, 202, "", false},
		{"unpause", "POST", "/batches/run-1/unpause", "", nil, 202, "", false},
		{"unpause not paused: as it is", "POST", "/batches/run-1/unpause", "", nil, 202, "", false},
		{"unpause a budget pause", "POST", "/batches/budget-1/unpause", "", nil, 409, wire.CodeConflict, false},
		{"budget not above the spend", "POST", "/batches/budget-1/budget", `{"budget_usd":30}`, nil, 409, wire.CodeConflict, false},
		{"budget not positive", "POST", "/batches/budget-1/budget", `{"budget_usd":-1}`, nil, 400, wire.CodeInvalidRequest, true},
		{"budget missing", "POST", "/batches/budget-1/budget", `{}`, nil, 400, wire.CodeInvalidRequest, true},
		{"budget raised: unpaused", "POST", "/batches/budget-1/budget", `{"budget_usd":45.5}`, nil, 202, "", false},
		{"budget unknown", "POST", "/batches/nope-1/budget", `{"budget_usd":10}`, nil, 404, wire.CodeNotFound, false},
		{"budget store down", "POST", "/batches/boom-1/budget", `{"budget_usd":10}`, nil, 500, wire.CodeInternal, false},
		{"approve awaiting approval", "POST", "/batches/sampled-1/approve", "", nil, 202, "", false},
		{"approve approved: as it is", "POST", "/batches/sampled-1/approve", "", nil, 202, "", false},
		{"reject approved", "POST", "/batches/sampled-1/reject", "", nil, 409, wire.CodeConflict, false},
		{"reject while sampling", "POST", "/batches/sampling-1/reject", "", nil, 202, "", false},
		{"reject rejected: as it is", "POST", "/batches/sampling-1/reject", "", nil, 202, "", false},
		{"approve rejected", "POST", "/batches/sampling-1/approve", "", nil, 409, wire.CodeConflict, false},
		{"approve without a sample", "POST", "/batches/run-1/approve", "", nil, 409, wire.CodeConflict, false},
		{"reject without a sample", "POST", "/batches/done-1/reject", "", nil, 409, wire.CodeConflict, false},
		{"approve unknown", "POST", "/batches/nope-1/approve", "", nil, 404, wire.CodeNotFound, false},
		{"reject unknown", "POST", "/batches/nope-1/reject", "", nil, 404, wire.CodeNotFound, false},
		{"approve store down", "POST", "/batches/boom-1/approve", "", nil, 500, wire.CodeInternal, false},
		{"reject store down", "POST", "/batches/boom-1/reject", "", nil, 500, wire.CodeInternal, false},
		{"pause finished: the batch as it ended", "POST", "/batches/done-1/pause", "", nil, 202, "", false},
		{"pause while the source is read", "POST", "/batches/reading-1/pause", "", nil, 409, wire.CodeConflict, false},
		{"pause unknown", "POST", "/batches/nope-1/pause", "", nil, 404, wire.CodeNotFound, false},
		{"unpause unknown", "POST", "/batches/nope-1/unpause", "", nil, 404, wire.CodeNotFound, false},
		{"pause store down", "POST", "/batches/boom-1/pause", "", nil, 500, wire.CodeInternal, false},
		{"unpause store down", "POST", "/batches/boom-1/unpause", "", nil, 500, wire.CodeInternal, false},
		{"cancel finished: the batch as it ended", "POST", "/batches/done-1/cancel", "", nil, 202, "", false},
		{"cancel while the source is read", "POST", "/batches/reading-1/cancel", "", nil, 409, wire.CodeConflict, false},
		{"cancel running", "POST", "/batches/run-1/cancel", "", nil, 202, "", false},
		{"lift", "POST", "/batches/halted-1/halts/lift", `{"subject":"secret:hook"}`, nil, 200, "", false},
		{"ceilings raised", "POST", "/batches/halted-1/ceilings", `{"spend_usd":2}`, nil, 200, "", false},
		{"ceilings of a finished batch: its next run's", "POST", "/batches/done-1/ceilings", `{"tokens":5000}`, nil, 200, "", false},
		{"ceilings none set", "POST", "/batches/halted-1/ceilings", `{}`, nil, 400, wire.CodeInvalidRequest, true},
		{"ceilings not positive", "POST", "/batches/halted-1/ceilings", `{"tokens":-1}`, nil, 400, wire.CodeInvalidRequest, true},
		{"ceilings unknown", "POST", "/batches/nope-1/ceilings", `{"spend_usd":2}`, nil, 404, wire.CodeNotFound, false},
		{"ceilings store down", "POST", "/batches/boom-1/ceilings", `{"spend_usd":2}`, nil, 500, wire.CodeInternal, false},
		{"lift no subject", "POST", "/batches/halted-1/halts/lift", `{}`, nil, 400, wire.CodeInvalidRequest, true},
		{"lift no such halt", "POST", "/batches/halted-1/halts/lift", `{"subject":"secret:other"}`, nil, 404, wire.CodeNotFound, false},
		{"lift finished, no halt", "POST", "/batches/done-1/halts/lift", `{"subject":"secret:hook"}`, nil, 404, wire.CodeNotFound, false},
		{"lift submitting", "POST", "/batches/reading-1/halts/lift", `{"subject":"secret:hook"}`, nil, 409, wire.CodeConflict, false},
		{"lift store down", "POST", "/batches/boom-1/halts/lift", `{"subject":"secret:hook"}`, nil, 500, wire.CodeInternal, false},
		{"signal", "POST", "/batches/halted-1/items/k1/signal", `{"payload":{"approved":true},"token":"t1"}`, nil, 200, "", false},
		{"signal without a body", "POST", "/batches/halted-1/items/k2/signal", "", nil, 200, "", false},
		{"signal payload not JSON", "POST", "/batches/halted-1/items/k3/signal", `{"payload":"x","token":"` + strings.Repeat("t", 257) + `"}`, nil, 400, wire.CodeInvalidRequest, true},
		{"signal another token", "POST", "/batches/halted-1/items/k4/signal", `{"token":"t2"}`, nil, 409, wire.CodeConflict, false},
		{"signal unknown item", "POST", "/batches/halted-1/items/gone/signal", "", nil, 404, wire.CodeNotFound, false},
		{"signal store down", "POST", "/batches/boom-1/items/k1/signal", "", nil, 500, wire.CodeInternal, false},
		{"release", "POST", "/batches/done-1/items/a%2F1/release", "", nil, 204, "", false},
		{"release while running", "POST", "/batches/run-1/items/k/release", "", nil, 409, wire.CodeConflict, false},
		{"release unknown batch", "POST", "/batches/nope-1/items/k/release", "", nil, 404, wire.CodeNotFound, false},
		{"forget running", "DELETE", "/batches/run-1", "", nil, 409, wire.CodeConflict, false},
		{"forget", "DELETE", "/batches/done-1", "", nil, 204, "", false},
		{"submit under a refused batch's id starts afresh", "POST", "/batches", `{"batch_id":"refused-1","pipeline":"webhook","source":{"object":"s3://example-bucket/in.jsonl"}}`, nil, 201, "", false},
		{"submit store down", "POST", "/batches", `{"batch_id":"boom-1","pipeline":"webhook","source":{"items":[{"a":1}]}}`, nil, 500, wire.CodeInternal, false},
		{"list store down", "GET", "/batches?cursor=Ym9vbQ", "", nil, 500, wire.CodeInternal, false},
		{"report store down", "GET", "/batches/boom-1/report", "", nil, 500, wire.CodeInternal, false},
		{"report object unreadable", "GET", "/batches/lost-1/report", "", nil, 500, wire.CodeInternal, false},
		{"items unknown", "GET", "/batches/nope-1/items", "", nil, 404, wire.CodeNotFound, false},
		{"items store down", "GET", "/batches/boom-1/items", "", nil, 500, wire.CodeInternal, false},
		{"resume unknown", "POST", "/batches/nope-1/resume", "", nil, 404, wire.CodeNotFound, false},
		{"resume store down", "POST", "/batches/boom-1/resume", "", nil, 500, wire.CodeInternal, false},
		{"cancel unknown", "POST", "/batches/nope-1/cancel", "", nil, 404, wire.CodeNotFound, false},
		{"cancel store down", "POST", "/batches/boom-1/cancel", "", nil, 500, wire.CodeInternal, false},
		{"release bad id", "POST", "/batches/a%20b/items/k/release", "", nil, 400, wire.CodeInvalidRequest, false},
		{"release store down", "POST", "/batches/boom-1/items/k/release", "", nil, 500, wire.CodeInternal, false},
		{"correct", "POST", "/batches/fix-1/corrections", `{"source":{"items":[{"k":"a","v":2}]}}`, nil, 202, "", false},
		{"correct again", "POST", "/batches/fix-1/corrections", `{"source":{"items":[{"k":"a","v":2}]}}`, nil, 200, "", false},
		{"correct a prefix", "POST", "/batches/fix-1/corrections", `{"source":{"prefix":"s3://example-bucket/in/"}}`, nil, 400, wire.CodeInvalidRequest, false},
		{"correct no source", "POST", "/batches/fix-1/corrections", `{"key_field":"k"}`, nil, 400, wire.CodeInvalidRequest, true},
		{"correct while running", "POST", "/batches/run-1/corrections", `{"key_field":"k","source":{"items":[{"k":"a"}]}}`, nil, 409, wire.CodeConflict, false},
		{"correct unknown", "POST", "/batches/nope-1/corrections", `{"source":{"items":[{"k":"a"}]}}`, nil, 404, wire.CodeNotFound, false},
		{"correct too large", "POST", "/batches/fix-1/corrections", `{"source":{"items":["` + strings.Repeat("x", MaxRequestBytes) + `"]}}`, nil, 413, wire.CodeInvalidRequest, false},
		{"correct store down", "POST", "/batches/boom-1/corrections", `{"source":{"items":[{"k":"a"}]}}`, nil, 500, wire.CodeInternal, false},
		{"forget unknown", "DELETE", "/batches/nope-1", "", nil, 404, wire.CodeNotFound, false},
		{"forget store down", "DELETE", "/batches/boom-1", "", nil, 500, wire.CodeInternal, false},
	}
	// Through API Gateway (Serve), a path with a malformed escape is 400
	// on every route.
	for _, route := range []struct{ method, path string }{
		{"GET", "/batches/%zz"}, {"DELETE", "/batches/%zz"}, {"GET", "/batches/%zz/report"},
		{"POST", "/batches/%zz/resume"}, {"POST", "/batches/%zz/cancel"},
		{"POST", "/batches/%zz/pause"}, {"POST", "/batches/%zz/unpause"},
		{"POST", "/batches/%zz/approve"}, {"POST", "/batches/%zz/reject"},
	} {
		tests = append(tests, struct {
			name, method, path, body string
			api                      *API
			status                   int
			code                     string
			docRefuses               bool
		}{"serve malformed " + route.method + " " + route.path, route.method, route.path, "", nil, 400, wire.CodeInvalidRequest, false})
	}
	answered := map[string]bool{} // "METHOD /template STATUS"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.api
			if h == nil {
				h = a
			}
			var rec *httptest.ResponseRecorder
			malformed := strings.Contains(tt.path, "%zz")
			if malformed {
				// As API Gateway sends a path outside the proxy resource's
				// decoding: the raw path, which Serve decodes once.
				out, err := h.Serve(context.Background(), events.APIGatewayProxyRequest{HTTPMethod: tt.method, Path: tt.path})
				if err != nil {
					t.Fatal(err)
				}
				rec = httptest.NewRecorder()
				for k, v := range out.Headers {
					rec.Header().Set(k, v)
				}
				rec.WriteHeader(out.StatusCode)
				rec.WriteString(out.Body)
			} else {
				rec = httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			}
			var eb wire.ErrorBody
			if tt.code != "" {
				_ = json.Unmarshal(rec.Body.Bytes(), &eb)
			}
			if rec.Code != tt.status || eb.Code != tt.code {
				t.Fatalf("%d %s, want %d %s: %s", rec.Code, eb.Code, tt.status, tt.code, firstBytes(rec.Body.String()))
			}
			docPath := strings.ReplaceAll(tt.path, "%zz", "x")
			answered[tt.method+" "+templateOf(documented, tt.method, docPath)+" "+fmt.Sprint(rec.Code)] = true
			req := openAPIRequest(tt.method, docPath, tt.body)
			switch {
			case malformed: // a path no client can send on purpose
			case tt.docRefuses:
				if ok, _ := verrs(v.ValidateHttpRequestSync(req)); ok {
					t.Errorf("docs/openapi.yaml accepts a request the handlers refuse by its schema")
				}
			case tt.status != 413: // that body is refused for its size, which a schema does not say
				validate(t, "request", func() (bool, []string) { return verrs(v.ValidateHttpRequestSync(req)) })
			}
			resp := rec.Result()
			validate(t, "answer", func() (bool, []string) {
				return verrs(v.ValidateHttpResponse(openAPIRequest(tt.method, docPath, ""), resp))
			})
		})
	}

	// Every status the document gives an operation is one the handlers
	// answered above, but for those that need more than fixed stores,
	// each with where it is shown instead.
	elsewhere := map[string]string{
		"POST /batches 202":             "a background read of an S3 source: integration TestSubmitRetriedPastGatewayTimeout",
		"POST /batches/{id}/resume 202": "a new run needs a stored manifest to fan out: integration TestResumeRunsOnlyWhatDidNotSucceed",
	}
	for path, item := range doc.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code := range op.Responses.Codes.KeysFromOldest() {
				k := strings.ToUpper(method) + " " + path + " " + code
				if _, ok := elsewhere[k]; !ok && !answered[k] {
					t.Errorf("docs/openapi.yaml documents %s, which no answer above gave", k)
				}
			}
		}
	}

	// Golden examples: answers and a request as the document says, and
	// the results line and event detail against their schemas.
	examples := []struct {
		name, method, path string
		status             int
	}{
		{"batch-view", "GET", "/batches/b-1", 200},
		{"report", "GET", "/batches/b-1/report", 200},
		{"report-link", "GET", "/batches/b-1/report", 303},
		{"item-page", "GET", "/batches/b-1/items", 200},
		{"result-page", "GET", "/batches/b-1/results/partial", 200},
		{"batch-page", "GET", "/batches", 200},
		{"error", "GET", "/batches/b-1", 404},
		{"correction-view", "POST", "/batches/b-1/corrections", 202},
	}
	for _, ex := range examples {
		resp := &http.Response{StatusCode: ex.status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(string(golden(ex.name))))}
		validate(t, ex.name+".golden.json", func() (bool, []string) {
			return verrs(v.ValidateHttpResponse(openAPIRequest(ex.method, ex.path, ""), resp))
		})
	}
	validate(t, "submit-request.golden.json", func() (bool, []string) {
		return verrs(v.ValidateHttpRequestSync(openAPIRequest("POST", "/batches", string(golden("submit-request")))))
	})
	validate(t, "correct-request.golden.json", func() (bool, []string) {
		return verrs(v.ValidateHttpRequestSync(openAPIRequest("POST", "/batches/b-1/corrections", string(golden("correct-request")))))
	})
	sv := schema_validation.NewSchemaValidator()
	for name, schema := range map[string]string{"result-line": "ResultLine", "event": "EventDetail"} {
		payload := golden(name)
		if name == "event" {
			var ev struct{ Detail json.RawMessage }
			if err := json.Unmarshal(payload, &ev); err != nil {
				t.Fatal(err)
			}
			payload = ev.Detail
		}
		s := doc.Components.Schemas.GetOrZero(schema).Schema()
		validate(t, name+".golden.json", func() (bool, []string) {
			ok, errs := sv.ValidateSchemaBytes(s, payload)
			return verrs(ok, errs)
		})
	}
}

// templateOf returns the documented path template of method and path
// ("{name}" matches one raw segment), or path itself when none matches.
func templateOf(documented map[string]bool, method, path string) string {
	path, _, _ = strings.Cut(path, "?")
	segs := strings.Split(path, "/")
	for op := range documented {
		m, tmpl, _ := strings.Cut(op, " ")
		ts := strings.Split(tmpl, "/")
		if m != method || len(ts) != len(segs) {
			continue
		}
		match := true
		for i := range ts {
			if !strings.HasPrefix(ts[i], "{") && ts[i] != segs[i] {
				match = false
				break
			}
		}
		if match {
			return tmpl
		}
	}
	return path
}

func openAPIRequest(method, path, body string) *http.Request {
	r := httptest.NewRequest(method, openAPIBase+path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261130/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
	return r
}

func validate(t *testing.T, what string, f func() (bool, []string)) {
	t.Helper()
	if ok, errs := f(); !ok {
		t.Errorf("%s does not match docs/openapi.yaml:\n%s", what, strings.Join(errs, "\n"))
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func firstBytes(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// verrs lists a validation's errors with their schema details.
func verrs(ok bool, errs []*verrors.ValidationError) (bool, []string) {
	var out []string
	for _, e := range errs {
		line := e.Message + ": " + e.Reason
		for _, se := range e.SchemaValidationErrors {
			line += "\n    " + se.FieldPath + " (" + se.KeywordLocation + "): " + se.Reason
		}
		out = append(out, line)
	}
	return ok && len(errs) == 0, out
}

// ReadAdapt and CutAdapt: an unpause restarts the downstream's adaptive
// pace; the contract's store keeps no such row.
func (s *contractStore) ReadAdapt(context.Context, string) (pace.Adapt, error) {
	return pace.Adapt{}, nil
}

func (s *contractStore) CutAdapt(_ context.Context, c pace.AdaptCut) (pace.Adapt, bool, error) {
	return c.Row, true, nil
}
