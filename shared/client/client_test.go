package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Submit past the gateway timeout, point 1: Submit names the batch before
// the first try and sends that same request again on answers whose outcome
// is unknown (504, 502, 503, 500, 429) and on lost connections, within
// its bounded tries (MaxAttempts); a 507 or a 400 is final at once. Guards docs/cli.md "Reaching the stack, submitting, watching" (retries) and docs/design/submit.md "Submitting past the gateway
// timeout".
func TestSubmitRetriesWithTheSameID(t *testing.T) {
	for _, tt := range []struct {
		name      string
		statuses  []int // answers in order; past the end, 202
		wantTries int
		wantErr   int // the final status, 0 for success
	}{
		{"gateway timeouts then accepted", []int{504, 504}, 3, 0},
		{"every 5xx that may have gone through", []int{500, 502, 503, 429}, 5, 0},
		{"a lost connection", []int{-1}, 2, 0},
		{"bounded", []int{504, 504, 504, 504, 504, 504, 504}, 6, 504},
		{"disk full is final", []int{507}, 1, 507},
		{"bad request is final", []int{400}, 1, 400},
		{"mismatch is final", []int{409}, 1, 409},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var ids []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				var req api.SubmitRequest
				_ = json.Unmarshal(body, &req)
				mu.Lock()
				ids = append(ids, req.BatchID)
				n := len(ids)
				mu.Unlock()
				status := http.StatusAccepted
				if n <= len(tt.statuses) {
					status = tt.statuses[n-1]
				}
				if status < 0 { // drop the connection without an answer
					conn, _, _ := w.(http.Hijacker).Hijack()
					conn.Close()
					return
				}
				w.WriteHeader(status)
				_ = json.NewEncoder(w).Encode(map[string]any{"batch_id": req.BatchID, "status": "submitting", "created": n == 1, "code": "x", "message": "y"})
			}))
			defer srv.Close()
			t.Setenv(EnvAPIURL, srv.URL)
			c, err := New(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("id", "secret", "")}, Stack{})
			if err != nil {
				t.Fatal(err)
			}
			c.Retryer = fastRetryer
			v, err := c.Submit(context.Background(), api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Object: "s3://b/k.jsonl"}})
			if len(ids) != tt.wantTries {
				t.Errorf("%d tries, want %d", len(ids), tt.wantTries)
			}
			for _, id := range ids {
				if id == "" || id != ids[0] {
					t.Fatalf("tries named batches %q, want one id chosen before the first", ids)
				}
			}
			var ae *APIError
			switch {
			case tt.wantErr == 0 && (err != nil || v.ID != ids[0]):
				t.Errorf("Submit = %+v, %v; want batch %s", v, err, ids[0])
			case tt.wantErr != 0 && (!errors.As(err, &ae) || ae.Status != tt.wantErr):
				t.Errorf("err = %v, want HTTP %d", err, tt.wantErr)
			}
		})
	}
}

// `watch` polls with backoff: a batch that stands still is polled ever
// less often (up to MaxPollInterval), one that moves at the caller's
// interval again (the product line "watching a batch costs a few reads a
// minute, not one GET per second").
func TestWatchPollsWithBackoff(t *testing.T) {
	s := time.Second
	for _, tt := range []struct {
		name     string
		last     time.Duration
		interval time.Duration
		moved    bool
		want     time.Duration
	}{
		{"first poll", 0, s, false, s},
		{"moved: the interval again", 8 * s, s, true, s},
		{"still: doubled", s, s, false, 2 * s},
		{"still: doubled again", 4 * s, s, false, 8 * s},
		{"capped", 8 * s, s, false, MaxPollInterval},
		{"stays capped", MaxPollInterval, s, false, MaxPollInterval},
		{"an interval above the cap is kept", 20 * s, 20 * s, false, 20 * s},
	} {
		if got := NextPoll(tt.last, tt.interval, tt.moved); got != tt.want {
			t.Errorf("%s: NextPoll(%v, %v, %v) = %v, want %v", tt.name, tt.last, tt.interval, tt.moved, got, tt.want)
		}
	}
}
