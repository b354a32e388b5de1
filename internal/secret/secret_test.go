package secret

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

const (
	smARN  = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hook-token-AbCdEf"
	ssmARN = "arn:aws:ssm:us-east-1:123456789012:parameter/hooks/token"
)

// awsJSON answers every call as Secrets Manager and SSM do (both
// awsJson1_1): a 200 with the value, or status and {"__type", "message"}.
func awsJSON(t *testing.T, answer func() (int, string, string)) (*Store, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		status, code, value := answer()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		switch {
		case status != 200:
			fmt.Fprintf(w, `{"__type":%q,"message":"%s"}`, code, code+" from the service")
		case strings.Contains(r.Header.Get("X-Amz-Target"), "secretsmanager"):
			fmt.Fprintf(w, `{"ARN":%q,"Name":"hook-token","SecretString":%q,"VersionId":"v"}`, smARN, value)
		default:
			fmt.Fprintf(w, `{"Parameter":{"ARN":%q,"Name":"/hooks/token","Type":"SecureString","Value":%q,"Version":3}}`, ssmARN, value)
		}
	}))
	t.Cleanup(srv.Close)
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: func() aws.Retryer { return aws.NopRetryer{} },
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}
	return New(cfg, time.Minute), &calls
}

// Secrets Manager's and SSM's errors in their own shape, classified as
// awsfault.Table says (docs/design/errors.md): ThrottlingException is
// throttled and, with the 5xx, unavailable (the item waits without an
// attempt); DecryptionFailure (the secret's KMS key) is a pause, also
// unavailable; the rest fail the same way every time.
func TestResolveErrorsClassified(t *testing.T) {
	for _, tc := range []struct {
		arn    string
		status int
		code   string
		want   string // throttled, unavailable, paused, permanent
	}{
		{smARN, 400, "ThrottlingException", "throttled"},
		{smARN, 500, "InternalServiceError", "unavailable"},
		{smARN, 400, "ResourceNotFoundException", "permanent"},
		{smARN, 400, "DecryptionFailure", "paused"},
		{smARN, 400, "InvalidRequestException", "permanent"},
		{smARN, 400, "AccessDeniedException", "permanent"},
		{ssmARN, 400, "ThrottlingException", "throttled"},
		{ssmARN, 500, "InternalServerError", "unavailable"},
		{ssmARN, 400, "ParameterNotFound", "permanent"},
		{ssmARN, 400, "ParameterVersionNotFound", "permanent"},
		{ssmARN, 400, "InvalidKeyId", "permanent"},
		{ssmARN, 400, "AccessDeniedException", "permanent"},
	} {
		t.Run(tc.code+" "+tc.arn[8:11], func(t *testing.T) {
			s, _ := awsJSON(t, func() (int, string, string) { return tc.status, tc.code, "" })
			_, err := s.Resolve(context.Background(), tc.arn)
			if err == nil || !strings.Contains(err.Error(), tc.code) || !strings.Contains(err.Error(), tc.arn) {
				t.Fatalf("err %v, want one naming %s and the ARN", err, tc.code)
			}
			th, throttled := pipeline.ThrottleOf(err)
			unavailable := errors.Is(err, ledger.ErrUnavailable)
			got := "permanent"
			switch {
			case throttled && unavailable:
				got = "throttled"
			case unavailable && isPause(err):
				got = "paused"
			case unavailable:
				got = "unavailable"
			}
			if got != tc.want {
				t.Fatalf("%s: %s (throttled %v, unavailable %v), want %s", tc.code, got, throttled, unavailable, tc.want)
			}
			if throttled && th.Code != "ThrottlingException" {
				t.Errorf("throttle code %q", th.Code)
			}
		})
	}
}

func isPause(err error) bool {
	_, ok := ledger.PauseFault(err)
	return ok
}

// The cache holds a value for its TTL; ResolveFresh reads past it (the
// worker's re-read after a rejected credential) and caches what it read.
func TestResolveFreshBypassesTheCache(t *testing.T) {
	var value atomic.Value
	value.Store("Bearer v1")
	s, calls := awsJSON(t, func() (int, string, string) { return 200, "", value.Load().(string) })
	ctx := context.Background()
	for _, arn := range []string{smARN, ssmARN} {
		value.Store("Bearer v1")
		if v, err := s.Resolve(ctx, arn); err != nil || v != "Bearer v1" {
			t.Fatalf("%s: %q %v", arn, v, err)
		}
		value.Store("Bearer v2") // rotated
		before := calls.Load()
		if v, _ := s.Resolve(ctx, arn); v != "Bearer v1" || calls.Load() != before {
			t.Fatalf("%s: cached read %q with %d calls, want the cached v1 and no call", arn, v, calls.Load()-before)
		}
		if v, err := s.ResolveFresh(ctx, arn); err != nil || v != "Bearer v2" {
			t.Fatalf("%s: fresh %q %v, want v2", arn, v, err)
		}
		if v, _ := s.Resolve(ctx, arn); v != "Bearer v2" {
			t.Fatalf("%s: after a fresh read the cache holds %q, want v2", arn, v)
		}
	}
}

// The adapter implements the engines' ports (compile-time checks, kept
// in a test so that the adapter imports no engine).
var (
	_ worker.Secrets      = (*Store)(nil)
	_ worker.FreshSecrets = (*Store)(nil)
)
