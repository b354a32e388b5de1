package awsfault_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// wire is one error answer in a service's wire shape.
type wire struct {
	status  int
	header  map[string]string
	body    string
	okAfter int // answer success from this try on (0: never)
}

func (w wire) server(t *testing.T, tries *atomic.Int64, ok string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := tries.Add(1)
		if w.okAfter > 0 && int(n) >= w.okAfter {
			rw.Header().Set("Content-Type", "application/x-amz-json-1.0")
			fmt.Fprint(rw, ok)
			return
		}
		for k, v := range w.header {
			rw.Header().Set(k, v)
		}
		rw.WriteHeader(w.status)
		fmt.Fprint(rw, w.body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func ddbError(code, extra string) wire {
	return wire{status: 400, header: map[string]string{"Content-Type": "application/x-amz-json-1.0"},
		body: `{"__type":"com.amazonaws.dynamodb.v20120810#` + code + `","message":"m"` + extra + `}`}
}

func cancelled(reasons ...string) wire {
	var rs []string
	for _, r := range reasons {
		rs = append(rs, `{"Code":"`+r+`","Message":"m"}`)
	}
	w := ddbError("TransactionCanceledException", `,"CancellationReasons":[`+strings.Join(rs, ",")+`]`)
	w.body = strings.Replace(w.body, `"message":"m"`, `"Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [`+strings.Join(reasons, ", ")+`]"`, 1)
	return w
}

var creds = credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")

// transact sends one TransactWriteItems through bulkrun's retryer and
// Tag to a server answering w.
func transact(t *testing.T, w wire, tries *atomic.Int64) error {
	t.Helper()
	srv := w.server(t, tries, `{}`)
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: creds,
		Retryer: awsfault.Retryer(), APIOptions: []func(*middleware.Stack) error{awsfault.Tag("dynamodb")}})
	_, err := db.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String("t"), ConditionExpression: aws.String("attribute_exists(pk)"),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "a"}}}}}})
	return err
}

// TestRetryerFollowsTheTable: the retryer sends again in place what the
// table says is retried — a transaction cancelled for a conflicting one,
// which the SDK's own checks never retry (a 400) — and nothing it says is
// not: a failed condition, a refusal as written, a Lambda 502 that is
// the function's configuration (the SDK's checks retry every 502).
func TestRetryerFollowsTheTable(t *testing.T) {
	t.Run("transaction conflict is retried in place", func(t *testing.T) {
		var tries atomic.Int64
		w := cancelled("TransactionConflict")
		w.okAfter = 3
		if err := transact(t, w, &tries); err != nil || tries.Load() != 3 {
			t.Fatalf("err %v after %d tries, want success at the third", err, tries.Load())
		}
	})
	t.Run("transaction conflict past the tries is unavailable", func(t *testing.T) {
		var tries atomic.Int64
		err := transact(t, cancelled("None", "TransactionConflict"), &tries)
		f, ok := ledger.FaultOf(err)
		if tries.Load() != awsfault.MaxAttempts || !errors.Is(err, ledger.ErrUnavailable) || !ok || f.Class != ledger.FaultRetry ||
			f.Code != "TransactionCanceledException[TransactionConflict]" || f.Operation != "TransactWriteItems" {
			t.Fatalf("%d tries, err %v (%+v), want %d tries and an unavailable retry fault", tries.Load(), err, f, awsfault.MaxAttempts)
		}
	})
	for _, tc := range []struct {
		name string
		w    wire
	}{
		{"failed condition", cancelled("ConditionalCheckFailed", "TransactionConflict")},
		{"validation", cancelled("ValidationError")},
		{"throttled reason", cancelled("ThrottlingError")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tries atomic.Int64
			err := transact(t, tc.w, &tries)
			want := int64(1)
			if tc.name == "throttled reason" {
				want = awsfault.MaxAttempts
			}
			var tce *types.TransactionCanceledException
			if tries.Load() != want || !errors.As(err, &tce) {
				t.Fatalf("%d tries (want %d), err %v", tries.Load(), want, err)
			}
			if got := errors.Is(err, ledger.ErrUnavailable); got != (want > 1) {
				t.Fatalf("unavailable %v: %v", got, err)
			}
		})
	}
	t.Run("lambda InvalidRuntimeException 502 is not retried", func(t *testing.T) {
		var tries atomic.Int64
		srv := wire{status: 502, header: map[string]string{"Content-Type": "application/json", "X-Amzn-ErrorType": "InvalidRuntimeException"},
			body: `{"Type":"User","message":"The runtime parameter of python2.7 is no longer supported"}`}.server(t, &tries, `{}`)
		c := lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: creds, Retryer: awsfault.Retryer()})
		_, err := c.Invoke(context.Background(), &lambda.InvokeInput{FunctionName: aws.String("f")})
		if err == nil || tries.Load() != 1 {
			t.Fatalf("%d tries, err %v; want one try", tries.Load(), err)
		}
	})
	t.Run("S3 ConditionalRequestConflict is retried", func(t *testing.T) {
		var tries atomic.Int64
		srv := wire{status: 409, header: map[string]string{"Content-Type": "application/xml"}, okAfter: 2,
			body: `<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting operation occurred.</Message></Error>`}.server(t, &tries, ``)
		c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: creds, UsePathStyle: true, Retryer: awsfault.Retryer()})
		_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), IfNoneMatch: aws.String("*")})
		if err != nil || tries.Load() != 2 {
			t.Fatalf("%d tries, err %v; want success at the second", tries.Load(), err)
		}
	})
}

// TestClassify: each class from errors as the SDK returns them for each
// service's wire shape, through the client with bulkrun's Tag (classes
// retry, backoff and pause become ledger.ErrUnavailable, permanent and
// conflict do not).
func TestClassify(t *testing.T) {
	sqsJSON := func(status int, code, queryCode string) wire {
		h := map[string]string{"Content-Type": "application/x-amz-json-1.0"}
		if queryCode != "" {
			h["X-Amzn-Query-Error"] = queryCode + ";Sender"
		}
		return wire{status: status, header: h, body: `{"__type":"com.amazonaws.sqs#` + code + `","message":"m"}`}
	}
	s3XML := func(status int, code, msg string) wire {
		return wire{status: status, header: map[string]string{"Content-Type": "application/xml"},
			body: `<Error><Code>` + code + `</Code><Message>` + msg + `</Message></Error>`}
	}
	for _, tc := range []struct {
		name, service, code string
		w                   wire
		want                ledger.FaultClass
	}{
		{"dynamodb throttled", "dynamodb", "ProvisionedThroughputExceededException", ddbError("ProvisionedThroughputExceededException", ""), ledger.FaultBackoff},
		{"dynamodb 500", "dynamodb", "InternalServerError", wire{status: 500, header: map[string]string{"Content-Type": "application/x-amz-json-1.0"}, body: `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"m"}`}, ledger.FaultRetry},
		{"dynamodb condition", "dynamodb", "ConditionalCheckFailedException", ddbError("ConditionalCheckFailedException", ""), ledger.FaultConflict},
		{"dynamodb expired token", "dynamodb", "ExpiredTokenException", ddbError("ExpiredTokenException", ""), ledger.FaultPause},
		{"dynamodb signature expired", "dynamodb", "InvalidSignatureException", wire{status: 400, header: map[string]string{"Content-Type": "application/x-amz-json-1.0"},
			body: `{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"Signature expired: 20260101T000000Z is now earlier than 20260101T000500Z (20260101T001000Z - 5 min.)"}`}, ledger.FaultRetry},
		{"dynamodb wrong key", "dynamodb", "InvalidSignatureException", ddbError("InvalidSignatureException", ""), ledger.FaultPermanent},
		{"dynamodb validation", "dynamodb", "ValidationException", ddbError("ValidationException", ""), ledger.FaultPermanent},
		{"sqs kms disabled (query code)", "sqs", "KMS.DisabledException", sqsJSON(400, "KmsDisabled", "KMS.DisabledException"), ledger.FaultPause},
		{"sqs kms disabled (JSON code)", "sqs", "KmsDisabled", sqsJSON(400, "KmsDisabled", ""), ledger.FaultPause},
		{"sqs kms throttled", "sqs", "KMS.ThrottlingException", sqsJSON(400, "KmsThrottled", "KMS.ThrottlingException"), ledger.FaultBackoff},
		{"sqs throttled", "sqs", "RequestThrottled", sqsJSON(403, "RequestThrottled", "RequestThrottled"), ledger.FaultBackoff},
		{"sqs no queue", "sqs", "AWS.SimpleQueueService.NonExistentQueue", sqsJSON(400, "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"), ledger.FaultPermanent},
		{"s3 slow down", "s3", "SlowDown", s3XML(503, "SlowDown", "Please reduce your request rate."), ledger.FaultBackoff},
		{"s3 kms denied", "s3", "AccessDenied", s3XML(403, "AccessDenied", "User: arn:aws:sts::1:assumed-role/r/f is not authorized to perform: kms:GenerateDataKey on resource: arn:aws:kms:us-east-1:1:key/k"), ledger.FaultPause},
		{"s3 denied", "s3", "AccessDenied", s3XML(403, "AccessDenied", "Access Denied"), ledger.FaultPermanent},
		{"s3 skewed", "s3", "RequestTimeTooSkewed", s3XML(403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large."), ledger.FaultRetry},
		{"s3 expired token", "s3", "ExpiredToken", s3XML(400, "ExpiredToken", "The provided token has expired."), ledger.FaultPause},
		{"s3 precondition", "s3", "PreconditionFailed", s3XML(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold"), ledger.FaultConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tries atomic.Int64
			srv := tc.w.server(t, &tries, ``)
			opts := []func(*middleware.Stack) error{awsfault.Tag(tc.service)}
			var err error
			op := ""
			switch tc.service {
			case "dynamodb":
				op = "UpdateItem"
				db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: creds, Retryer: aws.NopRetryer{}, APIOptions: opts})
				_, err = db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "a"}},
					UpdateExpression: aws.String("SET v = :v"), ConditionExpression: aws.String("attribute_exists(pk)"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "1"}}})
			case "sqs":
				op = "SendMessage"
				c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: creds, Retryer: aws.NopRetryer{}, APIOptions: opts})
				_, err = c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(srv.URL + "/1/q"), MessageBody: aws.String("b")})
			case "s3":
				op = "PutObject"
				c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: creds, UsePathStyle: true, Retryer: aws.NopRetryer{}, APIOptions: opts})
				_, err = c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), IfNoneMatch: aws.String("*")})
			}
			row, ok := awsfault.Classify(tc.service, op, err)
			if !ok || row.Class != tc.want || awsfault.ClassOf(tc.service, op, err) != tc.want || awsfault.CodeOf(tc.service, op, err) != tc.code {
				t.Fatalf("%v: row %+v (%v), code %q; want class %s, code %s", err, row, ok, awsfault.CodeOf(tc.service, op, err), tc.want, tc.code)
			}
			f, tagged := ledger.FaultOf(err)
			if tagged != tc.want.Unavailable() || errors.Is(err, ledger.ErrUnavailable) != tc.want.Unavailable() || tagged && (f.Class != tc.want || f.Code != tc.code || f.Service != tc.service || f.Operation != op) {
				t.Fatalf("tagged %v (%+v), unavailable %v; want %v", tagged, f, errors.Is(err, ledger.ErrUnavailable), tc.want.Unavailable())
			}
		})
	}
}

// TestClassifyByAnswer: an error no row names is classified by what AWS
// answered; a cancelled context is nobody's fault.
func TestClassifyByAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want ledger.FaultClass
	}{
		{"cancelled", context.Canceled, ""},
		{"deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), ledger.FaultRetry},
		{"unknown client error", errors.New("serialization failed"), ledger.FaultPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := awsfault.ClassOf("dynamodb", "GetItem", tc.err); got != tc.want {
				t.Fatalf("ClassOf(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
	if r, ok := awsfault.ClassifyFunction("Runtime.ExitError", "RequestId: 1 Error: Runtime exited with error: exit status 1"); !ok || r.Class != ledger.FaultPermanent {
		t.Fatalf("exit status: %+v", r)
	}
	if r, ok := awsfault.ClassifyFunction("Runtime.ExitError", "RequestId: 1 Error: Runtime exited with error: signal: killed"); !ok || r.Class != ledger.FaultRetry {
		t.Fatalf("signal: %+v", r)
	}
	if _, ok := awsfault.ClassifyFunction("ValueError", "x"); ok {
		t.Fatal("a function's own error type has no row")
	}
}
