package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// lambdaResponseBytes is the largest response of a synchronous Lambda
// invocation, 6 MB ("Lambda quotas"); past it Lambda answers
// Function.ResponseSizeTooLarge and API Gateway 502.
const lambdaResponseBytes = 6 << 20

// lambdaServe is the handlers' test harness as Lambda runs them: ev
// through Serve, its response refused (the test fails) when the JSON
// aws-lambda-go writes of it is larger than Lambda returns.
func lambdaServe(t *testing.T, a *API, method, path string, query map[string]string) events.APIGatewayProxyResponse {
	t.Helper()
	out, err := a.Serve(context.Background(), events.APIGatewayProxyRequest{HTTPMethod: method, Path: path, QueryStringParameters: query})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > lambdaResponseBytes {
		t.Fatalf("%s %s: Lambda refuses a response of %d bytes (Function.ResponseSizeTooLarge; API Gateway answers 502): limit %d",
			method, path, len(b), lambdaResponseBytes)
	}
	return out
}

// bigStore holds one finished batch of 1,000 failed items whose errors
// are 4 KiB of HTML.
type bigStore struct {
	ledger.Store
	keys []string
	err  string
}

func (s *bigStore) GetBatch(_ context.Context, id string) (ledger.Batch, error) {
	return ledger.Batch{Batch: api.Batch{ID: id, Plan: api.Plan{Pipeline: "webhook"}, Status: api.StatusCompleted, Run: 1, ItemCount: int64(len(s.keys)),
		ReportKey: api.ReportKey(id, 1), ListShards: 1, ExpiresAt: time.Now().Add(time.Hour)}}, nil
}

func (s *bigStore) ListItems(_ context.Context, _ string, _ int, _ api.Outcome, after string, limit int) ([]ledger.Item, string, error) {
	i := sort.SearchStrings(s.keys, after)
	if i < len(s.keys) && s.keys[i] == after {
		i++
	}
	var out []ledger.Item
	for ; i < len(s.keys) && len(out) < limit; i++ {
		out = append(out, ledger.Item{Item: api.Item{Key: s.keys[i], Run: 1, Outcome: api.OutcomeFailed, Attempt: 3, RunAttempts: 3,
			Error: s.err, Reason: api.ReasonPermanent, Cost: pipeline.Cost{"calls": 3}}})
	}
	next := ""
	if i < len(s.keys) {
		next = out[len(out)-1].Key
	}
	return out, next, nil
}

// bigBlobs holds a report of 8 MiB.
type bigBlobs struct {
	ledger.Blobs
	report []byte
}

func (b *bigBlobs) Bucket() string { return "example-bucket" }
func (b *bigBlobs) HeadSource(context.Context, string, string) (source.ObjectInfo, error) {
	return source.ObjectInfo{Size: int64(len(b.report))}, nil
}
func (b *bigBlobs) Get(context.Context, string) ([]byte, error) { return b.report, nil }
func (b *bigBlobs) PresignGet(_ context.Context, key string, ttl time.Duration) (string, error) {
	return fmt.Sprintf("https://example-bucket.s3.us-east-1.amazonaws.com/%s?X-Amz-Expires=%d&X-Amz-Signature=abc", key, int(ttl.Seconds())), nil
}

// TestAnswersWithinLambdasResponseLimit: through the harness that refuses
// what Lambda refuses, a 1,000-item page of failed items whose errors are
// 4 KiB of HTML (escaped in the item's JSON, and again in Lambda's) comes
// in pages cut by bytes, each continuing where the last was cut, every
// item once and in key order; a report of 8 MiB comes as a link (303, a
// presigned URL in Location and the body).
func TestAnswersWithinLambdasResponseLimit(t *testing.T) {
	html := strings.Repeat(`<p class="error">&lt;"bad"&gt;</p>`, pipeline.MaxErrorTextBytes/34+1)[:pipeline.MaxErrorTextBytes]
	store := &bigStore{err: html}
	for i := range 1000 {
		store.keys = append(store.keys, fmt.Sprintf("item-%05d", i))
	}
	var rep strings.Builder
	rep.WriteString(`{"batch_id":"big-1","census":{"cost":{`)
	for i := 0; rep.Len() < 8<<20; i++ {
		if i > 0 {
			rep.WriteByte(',')
		}
		fmt.Fprintf(&rep, `"cost-name-%08d-%s":1`, i, strings.Repeat("c", 20))
	}
	rep.WriteString(`}}}`)
	a := NewAPI(nil, store, &bigBlobs{report: []byte(rep.String())}, slog.New(slog.NewTextHandler(io.Discard, nil)))

	var keys []string
	cursor, pages := "", 0
	for {
		q := map[string]string{"outcome": "failed", "limit": "1000"}
		if cursor != "" {
			q["cursor"] = cursor
		}
		out := lambdaServe(t, a, http.MethodGet, "/batches/big-1/items", q)
		var p api.ItemPage
		if out.StatusCode != http.StatusOK || json.Unmarshal([]byte(out.Body), &p) != nil {
			t.Fatalf("page %d: %d %.200s", pages+1, out.StatusCode, out.Body)
		}
		pages++
		for _, it := range p.Items {
			keys = append(keys, it.Key)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if pages < 2 || !sort.StringsAreSorted(keys) || len(keys) != 1000 || keys[0] != store.keys[0] || keys[999] != store.keys[999] {
		t.Fatalf("%d items in %d pages, want the 1,000 keys once each in order, in more than one page", len(keys), pages)
	}
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			t.Fatalf("%s listed twice", keys[i])
		}
	}
	t.Logf("1,000 items of 4 KiB HTML errors in %d pages", pages)

	out := lambdaServe(t, a, http.MethodGet, "/batches/big-1/report", nil)
	var link wire.ReportLink
	if out.StatusCode != http.StatusSeeOther || json.Unmarshal([]byte(out.Body), &link) != nil || link.URL == "" ||
		out.Headers["Location"] != link.URL || link.Bytes != int64(rep.Len()) || !strings.Contains(link.URL, "X-Amz-Expires=900") {
		t.Fatalf("a report of %d bytes: %d %v %.300s, want 303 and a link good for 15 minutes", rep.Len(), out.StatusCode, out.Headers, out.Body)
	}
}
