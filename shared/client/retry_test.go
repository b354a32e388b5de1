package client

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
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
)

// fastRetryer is NewRetryer with a 1 ms backoff: the tests count tries,
// they do not wait.
func fastRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = MaxAttempts
		o.RateLimiter = ratelimit.None
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

// testClient is a client of the API at srv (BULKRUN_API_URL), with the
// test's credentials and fastRetryer.
func testClient(t *testing.T, srv *httptest.Server) *Client {
	t.Helper()
	t.Setenv(EnvAPIURL, srv.URL)
	c, err := New(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("id", "secret", "")}, Stack{})
	if err != nil {
		t.Fatal(err)
	}
	c.Retryer = fastRetryer
	return c
}

// gatewayError answers as API Gateway does: {"message": …} with its error
// type in x-amzn-ErrorType.
func gatewayError(w http.ResponseWriter, status int, errorType, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-Errortype", errorType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": message})
}

// Every API call, not only submit, is retried by the SDK's standard
// retryer on what API Gateway answers while the call's outcome is unknown
// or it was not let through: the stage's throttle (429
// TooManyRequestsException), 502, 503, 504 and a lost connection, one
// after another, and then succeeds on its sixth try. Guards docs/cli.md
// "Reaching the stack, submitting, watching" (every command retries).
func TestEveryCallRetries(t *testing.T) {
	faults := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { gatewayError(w, 429, "TooManyRequestsException", "Too Many Requests") },
		func(w http.ResponseWriter) {
			gatewayError(w, 502, "InternalServerErrorException", "Internal server error")
		},
		func(w http.ResponseWriter) {
			gatewayError(w, 503, "ServiceUnavailableException", "Service Unavailable")
		},
		func(w http.ResponseWriter) { gatewayError(w, 504, "", "Endpoint request timed out") },
		func(w http.ResponseWriter) { // a lost connection
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		},
	}
	var mu sync.Mutex
	tries := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := r.Method + " " + r.URL.Path
		mu.Lock()
		n := tries[call]
		tries[call] = n + 1
		mu.Unlock()
		if n < len(faults) {
			faults[n](w)
			return
		}
		if r.Method == http.MethodDelete || strings.HasSuffix(r.URL.Path, "/release") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	c := testClient(t, srv)
	ctx := context.Background()
	calls := map[string]func() error{
		"GET /batches/b":          func() error { _, err := c.Status(ctx, "b"); return err },
		"GET /batches/b/report":   func() error { _, err := c.Report(ctx, "b"); return err },
		"GET /batches/b/items":    func() error { _, err := c.Items(ctx, "b", api.OutcomeFailed, "", 0); return err },
		"GET /batches":            func() error { _, err := c.ListBatches(ctx, api.ListBatchesRequest{}); return err },
		"POST /batches/b/resume":  func() error { _, err := c.Resume(ctx, "b"); return err },
		"POST /batches/b/cancel":  func() error { _, err := c.Cancel(ctx, "b"); return err },
		"POST /batches/b/pause":   func() error { _, err := c.Pause(ctx, "b"); return err },
		"POST /batches/b/unpause": func() error { _, err := c.Unpause(ctx, "b"); return err },
		"POST /batches/b/corrections": func() error {
			_, err := c.Correct(ctx, "b", api.CorrectRequest{Source: api.SourceSpec{Object: "s3://x/k.jsonl"}})
			return err
		},
		"POST /batches/b/items/k/release": func() error { return c.Release(ctx, "b", "k") },
		"DELETE /batches/b":               func() error { return c.Forget(ctx, "b") },
		"POST /batches": func() error {
			_, err := c.Submit(ctx, api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Object: "s3://x/k.jsonl"}})
			return err
		},
	}
	for call, do := range calls {
		if err := do(); err != nil {
			t.Errorf("%s: %v", call, err)
		}
		mu.Lock()
		if tries[call] != MaxAttempts {
			t.Errorf("%s: %d tries, want %d (five faults, then the answer)", call, tries[call], MaxAttempts)
		}
		mu.Unlock()
	}
}

// A call that keeps being throttled ends after MaxAttempts tries with the
// gateway's 429, which Retryable names: a refusal (400) ends at once.
func TestRetriesAreBounded(t *testing.T) {
	var mu sync.Mutex
	n := 0
	status, errorType := 429, "TooManyRequestsException"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		gatewayError(w, status, errorType, "Too Many Requests")
	}))
	defer srv.Close()
	c := testClient(t, srv)
	_, err := c.Status(context.Background(), "b")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 429 || ae.Type != "TooManyRequestsException" || ae.Body.Message != "Too Many Requests" || !Retryable(err) || n != MaxAttempts {
		t.Fatalf("throttled: %d tries, err %v; want %d tries and the gateway's 429", n, err, MaxAttempts)
	}
	n, status, errorType = 0, 400, "BadRequestException"
	if _, err := c.Status(context.Background(), "b"); err == nil || n != 1 || Retryable(err) {
		t.Fatalf("400: %d tries, err %v; want one try", n, err)
	}
}

// skewedGateway is an API that judges a request's signing time as API
// Gateway does: X-Amz-Date more than 5 minutes from its own clock — the
// machine's plus offset — is refused with 403 InvalidSignatureException
// and API Gateway's message; every answer carries Date in its clock,
// unless noDate. tries counts the requests; refuseAll refuses every one.
type skewedGateway struct {
	offset    time.Duration
	noDate    bool
	refuseAll bool
	mu        sync.Mutex
	tries     int
}

func (g *skewedGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.tries++
	g.mu.Unlock()
	now := time.Now().Add(g.offset).UTC()
	if g.noDate {
		w.Header()["Date"] = nil
	} else {
		w.Header().Set("Date", now.Format(http.TimeFormat))
	}
	const amz = "20060102T150405Z"
	signed, err := time.Parse(amz, r.Header.Get("X-Amz-Date"))
	switch {
	case err != nil:
		gatewayError(w, 403, "IncompleteSignatureException", "no X-Amz-Date")
	case g.refuseAll || signed.Before(now.Add(-5*time.Minute)):
		gatewayError(w, 403, "InvalidSignatureException", fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 5 min.)",
			signed.Format(amz), now.Add(-5*time.Minute).Format(amz), now.Format(amz)))
	case signed.After(now.Add(5 * time.Minute)):
		gatewayError(w, 403, "InvalidSignatureException", fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 5 min.)",
			signed.Format(amz), now.Add(5*time.Minute).Format(amz), now.Format(amz)))
	default:
		_, _ = io.WriteString(w, `{"batch_id": "b"}`)
	}
}

// A machine whose clock is 6 minutes off the API's, either way: the first
// call is refused for its signing time, sent again signed at the time the
// refusal's Date header gives and answered; the next call is signed
// right at once (the offset is kept).
func TestClockSkewCorrected(t *testing.T) {
	for _, offset := range []time.Duration{6 * time.Minute, -6 * time.Minute} {
		t.Run(offset.String(), func(t *testing.T) {
			g := &skewedGateway{offset: offset}
			srv := httptest.NewServer(g)
			defer srv.Close()
			c := testClient(t, srv)
			if _, err := c.Status(context.Background(), "b"); err != nil || g.tries != 2 {
				t.Fatalf("first call: %v after %d tries; want it answered on the second", err, g.tries)
			}
			if _, err := c.Status(context.Background(), "b"); err != nil || g.tries != 3 {
				t.Fatalf("second call: %v, %d tries in all; want one more", err, g.tries)
			}
		})
	}
}

// When the correction cannot help — the refusal carries no Date header,
// or the API keeps refusing the corrected time — the error is a
// *ClockError that tells to set the machine's clock right.
func TestClockErrorNamesTheClock(t *testing.T) {
	for name, g := range map[string]*skewedGateway{
		"no Date":        {offset: 6 * time.Minute, noDate: true},
		"still refused":  {offset: 6 * time.Minute, refuseAll: true},
		"refused behind": {offset: -7 * time.Minute, refuseAll: true},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(g)
			defer srv.Close()
			c := testClient(t, srv)
			_, err := c.Status(context.Background(), "b")
			var ce *ClockError
			var ae *APIError
			if !errors.As(err, &ce) || !errors.As(err, &ae) || ae.Status != 403 || !strings.Contains(err.Error(), "machine's clock") {
				t.Fatalf("err = %v, want a *ClockError naming the machine's clock", err)
			}
		})
	}
}
