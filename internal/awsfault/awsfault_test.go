package awsfault_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// throttler answers DynamoDB calls: every request's first `fails` tries get
// ThrottlingException (HTTP 400, as DynamoDB sends it), later tries an
// empty GetItem answer.
func throttler(fails int, tries *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		var attempt int
		fmt.Sscanf(r.Header.Get("Amz-Sdk-Request"), "attempt=%d", &attempt)
		if attempt <= fails {
			w.Header().Set("X-Amzn-ErrorType", "ThrottlingException")
			w.WriteHeader(400)
			fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`)
			return
		}
		fmt.Fprint(w, `{}`)
	})
}

// TestRetryerHasNoQuotaThatTrips guards the throttling product line: under
// throttling that hits many calls at once, bulkrun's retryer retries every
// call with backoff and none fails with "retry quota exceeded" — the SDK's
// default retryer, whose quota the same load drains, is the control.
func TestRetryerHasNoQuotaThatTrips(t *testing.T) {
	const calls = 120
	run := func(retryer aws.Retryer) (failed int64, quota int64) {
		var tries atomic.Int64
		srv := httptest.NewServer(throttler(2, &tries))
		defer srv.Close()
		db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{}, Retryer: retryer})
		var wg sync.WaitGroup
		var nFailed, nQuota atomic.Int64
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"),
					Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: fmt.Sprint(i)}}})
				if err != nil {
					nFailed.Add(1)
					var q ratelimit.QuotaExceededError
					if errors.As(err, &q) || strings.Contains(err.Error(), "retry quota exceeded") {
						nQuota.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return nFailed.Load(), nQuota.Load()
	}
	if failed, quota := run(awsfault.Retryer()); failed != 0 {
		t.Fatalf("bulkrun's retryer: %d of %d calls failed (%d with retry quota exceeded)", failed, calls, quota)
	}
	// The control: the same load drains the default retryer's quota, so
	// the load is heavy enough to prove the point.
	if _, quota := run(nil); quota == 0 {
		t.Fatal("control: the SDK's default retryer did not exhaust its quota under this load")
	}
}

// TestUnavailableClassifiesAWSFaults: throttling, 5xx and quota errors are
// unavailable (the domain requeues the message), a lost condition, a
// validation error or a cancelled context is not.
func TestUnavailableClassifiesAWSFaults(t *testing.T) {
	api := func(code string) error { return &smithy.GenericAPIError{Code: code, Message: "m"} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"throttling", api("ThrottlingException"), true},
		{"provisioned throughput", &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}, true},
		{"request limit", api("RequestLimitExceeded"), true},
		{"S3 slow down", api("SlowDown"), true},
		{"quota", ratelimit.QuotaExceededError{Available: 0, Requested: 5}, true},
		{"wrapped quota", fmt.Errorf("reserve: %w", ratelimit.QuotaExceededError{}), true},
		{"conditional check", &types.ConditionalCheckFailedException{Message: aws.String("no")}, false},
		{"validation", api("ValidationException"), false},
		{"cancelled", context.Canceled, false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := awsfault.Unavailable(tt.err); got != tt.want {
				t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestTagMarksErrorsUnavailable: a call that stays throttled past the
// retryer's tries returns an error that is ledger.ErrUnavailable and still
// the SDK's error.
func TestTagMarksErrorsUnavailable(t *testing.T) {
	var tries atomic.Int64
	srv := httptest.NewServer(throttler(1000, &tries))
	defer srv.Close()
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{},
		Retryer: aws.NopRetryer{}, APIOptions: []func(*middleware.Stack) error{awsfault.Tag("dynamodb")}})
	_, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "a"}}})
	var ae smithy.APIError
	if !errors.Is(err, ledger.ErrUnavailable) || !errors.As(err, &ae) || ae.ErrorCode() != "ThrottlingException" {
		t.Fatalf("err = %v, want ErrUnavailable wrapping ThrottlingException", err)
	}
}
