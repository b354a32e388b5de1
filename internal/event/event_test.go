package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestPublishCarriesStableEventID guards the product line "every delivery
// of a run's completion event carries the same event id, for subscribers
// to dedupe on; a later batch reusing the id gets another". PutEvents is
// answered by a local server standing in for EventBridge; the test reads
// the detail as subscribers get it.
func TestPublishCarriesStableEventID(t *testing.T) {
	var mu sync.Mutex
	var details []event.Detail
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in struct {
			Entries []struct{ Detail, DetailType, Source string }
		}
		if err := json.Unmarshal(body, &in); err != nil || len(in.Entries) != 1 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var d event.Detail
		if err := json.Unmarshal([]byte(in.Entries[0].Detail), &d); err != nil {
			http.Error(w, "bad detail", http.StatusBadRequest)
			return
		}
		mu.Lock()
		details = append(details, d)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = w.Write([]byte(`{"FailedEntryCount":0,"Entries":[{"EventId":"` + time.Now().String() + `"}]}`))
	}))
	defer srv.Close()
	client := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}})
	bus := event.New(client, "", "bucket")

	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rep := api.Report{BatchID: "orders", Run: 2, Status: api.StatusCompleted, CreatedAt: created}
	again := rep
	again.FinishedAt = created.Add(time.Hour) // a later delivery of the same run
	reused := rep
	reused.CreatedAt = created.Add(48 * time.Hour) // the id reused after the first batch expired
	for _, r := range []api.Report{rep, again, reused} {
		if err := bus.Publish(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	want := "orders:2:" + "1796040000000"
	if len(details) != 3 || details[0].EventID != want || details[1].EventID != want || details[2].EventID == want || details[2].EventID == "" {
		t.Fatalf("event ids %q, %q, %q; want %q twice, then another", details[0].EventID, details[1].EventID, details[2].EventID, want)
	}
}

// The completion event stays within EventBridge's 256 KB entry limit
// whatever the census holds: a run whose items named 10,000 costs (the
// issue's ≈ 400 KB detail) is announced with at most
// api.MaxCensusCostNames names per rollup, the number left out, and the
// report's URI, where every name is.
func TestCompletionDetailWithinEntryLimit(t *testing.T) {
	c := api.Census{Total: 10000, Succeeded: 10000, Cost: pipeline.CostSum{}, RunSpent: pipeline.CostSum{}}
	for i := range 10000 {
		name := fmt.Sprintf("tokens.model-%05d.%s", i, strings.Repeat("x", 16))
		c.Cost.Add(pipeline.Cost{name: 1.5})
		c.RunSpent.Add(pipeline.Cost{name: 3})
	}
	r := api.Report{BatchID: "b1", Run: 1, Status: api.StatusCompleted, Census: c}
	d, err := event.CompletionDetail(r, "bkt")
	if err != nil {
		t.Fatal(err)
	}
	n := event.EntryBytes(api.EventSource, event.DetailType(r.Status), d, nil)
	var got event.Detail
	if err := json.Unmarshal([]byte(d), &got); err != nil {
		t.Fatal(err)
	}
	if n > event.MaxEntryBytes || len(got.Census.Cost) != api.MaxCensusCostNames || got.Census.CostNamesOmitted != 2*(10000-api.MaxCensusCostNames) ||
		got.Report != "s3://bkt/"+api.ReportKey("b1", 1) {
		t.Fatalf("entry %d bytes, %d names, %d omitted, report %q", n, len(got.Census.Cost), got.Census.CostNamesOmitted, got.Report)
	}
	full, _ := json.Marshal(event.Detail{Census: c})
	t.Logf("entry %d bytes (the census in full: %d bytes)", n, len(full))
}

// An EventBridge throttling that outlasts the SDK's tries is
// ledger.ErrUnavailable (awsfault.Table: backoff), as every adapter's is,
// so that finalize does not count it toward ending a run finalize_failed.
func TestPutThrottledIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"ThrottlingException","message":"Rate exceeded"}`))
	}))
	defer srv.Close()
	client := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{}, Retryer: aws.NopRetryer{}})
	err := event.New(client, "", "bucket").Put(context.Background(), api.DetailPaused, map[string]string{"batch_id": "b"})
	f, ok := ledger.FaultOf(err)
	if !errors.Is(err, ledger.ErrUnavailable) || !ok || f.Service != "events" || f.Operation != "PutEvents" || f.Class != ledger.FaultBackoff {
		t.Fatalf("err %v (%+v), want an unavailable backoff fault of events PutEvents", err, f)
	}
}
