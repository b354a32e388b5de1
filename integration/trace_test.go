//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/bulkrun/bulkrun/integration/testbed/apigw"
	"github.com/bulkrun/bulkrun/shared/api"
)

// TestTraceparentReachesTheWebhook guards the trace context's path through
// the deployed stack (no traces exporter: the default): a batch submitted
// through API Gateway with the caller's own traceparent header runs two
// items, and the webhook receiver sees, on every call, a valid
// traceparent of the caller's trace id; the batch row stores the caller's
// traceparent (the submit's span context without an exporter).
func TestTraceparentReachesTheWebhook(t *testing.T) {
	t.Parallel()
	id := newID(t)
	var tid, sid [16]byte
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(sid[:])
	caller := "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:8]) + "-01"
	var mu sync.Mutex
	var seen []string
	u := env.hook.routeRequest(id, func(r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get("traceparent"))
		return http.StatusOK
	})
	body, err := json.Marshal(webhookRequest(id, u, inlineItems(2)))
	if err != nil {
		t.Fatal(err)
	}
	if status, text := tracedPost(t, body, caller); status != http.StatusCreated {
		t.Fatalf("submit: %d %s; want 201", status, text)
	}
	if v := wait(t, id); v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != 2 {
		t.Fatalf("status %s, census %+v; want completed, 2 succeeded", v.Status, v.Census)
	}
	b, err := env.store.GetBatch(context.Background(), id)
	if err != nil || b.TraceParent != caller {
		t.Errorf("batch row traceparent %q (%v); want the caller's %q", b.TraceParent, err, caller)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("caller traceparent %s; the receiver saw %v", caller, seen)
	if len(seen) != 2 {
		t.Fatalf("the receiver got %d calls; want 2", len(seen))
	}
	for _, tp := range seen {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[0] != "00" || parts[1] != hex.EncodeToString(tid[:]) || len(parts[2]) != 16 || parts[2] == strings.Repeat("0", 16) {
			t.Errorf("the receiver saw traceparent %q; want version 00, trace id %x and a span id", tp, tid)
		}
	}
}

// tracedPost sends body to the stack's POST /batches with a traceparent
// header, signed as shared/client signs, and returns the answer's status
// and body.
func tracedPost(t *testing.T, body []byte, traceparent string) (int, string) {
	t.Helper()
	ctx := context.Background()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiBase(t)+"/batches", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	creds, err := env.aws.Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), apigw.Service, env.aws.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}
