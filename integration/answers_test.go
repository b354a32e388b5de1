//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/bulkrun/bulkrun/integration/testbed/apigw"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// stackBatch submits items (a JSON array, keys in field "k") at
// itemsPerMessage in this process on the stack's own table and bucket, so
// that the deployed API reads it, runs every item with run, finalizes it,
// and returns its id and report; the batch is forgotten when the test
// ends.
func stackBatch(t *testing.T, items json.RawMessage, itemsPerMessage int, run pipeline.Func) (string, api.Report) {
	t.Helper()
	ctx := context.Background()
	h := newHarness(t, run)
	h.submitter.Store, h.submitter.Blobs = env.store, env.blobs
	h.worker.Store, h.worker.Blobs = env.store, env.blobs
	h.finalizer.Store, h.finalizer.Blobs = env.store, env.blobs
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "k", ItemsPerMessage: itemsPerMessage,
		Source: api.SourceSpec{Items: items}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })
	for {
		ds := h.receive(t, 10)
		if len(ds) == 0 {
			break
		}
		h.worker.Handle(ctx, ds)
	}
	for range 100 {
		res, err := finalizeBeside(ctx, h.finalizer, id, 1) // the stack's tick may finalize it too
		if err != nil {
			t.Fatalf("finalize %s: %v", id, err)
		}
		if !res.Continued {
			return id, res.Report
		}
	}
	t.Fatalf("finalize %s does not end", id)
	return "", api.Report{}
}

// rawAPI sends a request to the deployed API signed as shared/client
// signs it and returns the answer as the API gave it (no redirect
// followed).
func rawAPI(t *testing.T, method, path string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, apiBase(t)+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := env.aws.Credentials.Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(nil)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), apigw.Service, env.aws.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// TestAnswersWithinLambdasResponseLimit guards Lambda's 6 MB limit on a
// synchronous response ("Lambda quotas"; API Gateway answers 502 past
// it, which the fault proxy's API Gateway rules apply on the emulator,
// integration/testbed/apigw), on the two answers that can grow past it:
//
//   - a page of 1,000 failed items whose errors are 4 KiB of HTML (a
//     receiver's error page: every <, > and " escaped in the item's JSON
//     and again in Lambda's): each page's response is within the limit,
//     and the pages, cut by bytes, continue where each was cut, so every
//     item is listed once, in key order;
//   - a report of 70,000 cost names (7,000 items of 10 distinct names):
//     answered with a link to the object, which the client follows to the
//     whole report.
func TestAnswersWithinLambdasResponseLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("items", func(t *testing.T) {
		t.Parallel() // its own batch: the two at once
		const n = 1000
		page := strings.Repeat(`<p class="error">&lt;"bad"&gt;</p>`, pipeline.MaxErrorTextBytes/34+1)
		items := make([]map[string]string, n)
		for i := range items {
			items[i] = map[string]string{"k": fmt.Sprintf("item-%05d", i)}
		}
		src, _ := json.Marshal(items)
		id, rep := stackBatch(t, src, 100, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{}, pipeline.Permanent(errors.New(page[:pipeline.MaxErrorTextBytes-len(req.Key)] + req.Key))
		})
		if rep.Census.Failed != n {
			t.Fatalf("census %+v, want %d failed", rep.Census, n)
		}
		var keys []string
		cursor, pages := "", 0
		for {
			path := "/batches/" + id + "/items?outcome=failed&limit=1000"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			status, header, body := rawAPI(t, http.MethodGet, path)
			size := apigw.ResponseSize(status, header.Get("Content-Type"), body)
			if status != http.StatusOK || size > apigw.ResponsePayloadBytes {
				t.Fatalf("page %d: %d, Lambda's response %d bytes (limit %d): %.200s", pages+1, status, size, apigw.ResponsePayloadBytes, body)
			}
			var p api.ItemPage
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			pages++
			t.Logf("page %d: %d items, body %d bytes, Lambda's response %d bytes", pages, len(p.Items), len(body), size)
			for _, it := range p.Items {
				keys = append(keys, it.Key)
			}
			if cursor = p.NextCursor; cursor == "" {
				break
			}
		}
		if len(keys) != n {
			t.Fatalf("%d items listed in %d pages, want %d", len(keys), pages, n)
		}
		for i, k := range keys {
			if want := fmt.Sprintf("item-%05d", i); k != want {
				t.Fatalf("item %d listed is %s, want %s (each once, in key order)", i, k, want)
			}
		}
	})
	t.Run("report", func(t *testing.T) {
		t.Parallel() // its own batch: the two at once
		const n, names = 7000, 10
		items := make([]map[string]string, n)
		for i := range items {
			items[i] = map[string]string{"k": fmt.Sprintf("item-%05d", i)}
		}
		src, _ := json.Marshal(items)
		id, rep := stackBatch(t, src, 100, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
			cost := pipeline.Cost{}
			for j := range names {
				cost[fmt.Sprintf("%s-%d-%s", req.Key, j, strings.Repeat("c", pipeline.MaxCostNameBytes-len(req.Key)-3))] = 1
			}
			return pipeline.Result{Cost: cost}, nil
		})
		if len(rep.Census.Cost) != n*names {
			t.Fatalf("report with %d cost names, want %d", len(rep.Census.Cost), n*names)
		}
		stored, err := env.blobs.Get(ctx, api.ReportKey(id, 1))
		if err != nil {
			t.Fatal(err)
		}
		status, header, body := rawAPI(t, http.MethodGet, "/batches/"+id+"/report")
		size := apigw.ResponseSize(status, header.Get("Content-Type"), body)
		t.Logf("report.json %d bytes: answered %d, Lambda's response %d bytes, Location %.80s…", len(stored), status, size, header.Get("Location"))
		if size > apigw.ResponsePayloadBytes {
			t.Fatalf("GET report: %d, Lambda's response %d bytes (limit %d)", status, size, apigw.ResponsePayloadBytes)
		}
		got, err := env.api.Report(ctx, id)
		if err != nil {
			t.Fatalf("the client's report: %v", err)
		}
		if got.BatchID != id || len(got.Census.Cost) != n*names || got.Census.Succeeded != n {
			t.Fatalf("the client's report: %s, %d cost names, census %+v", got.BatchID, len(got.Census.Cost), got.Census)
		}
	})
}
