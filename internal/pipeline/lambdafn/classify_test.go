package lambdafn_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/internal/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Lambda's Invoke errors, each in the shape Lambda answers it (REST-JSON:
// the status, X-Amzn-ErrorType naming the code, a JSON body with Type and
// message; AWS Lambda API Reference, "Invoke", Errors), through the SDK
// client and the pipeline: throttling and capacity, and a function not
// ready or being updated, are a *pipeline.ThrottledError (transient, so
// no item fails for them once the worker backs off), a 5xx is transient,
// what fails the same way every time is permanent — whatever the status
// says (KMS and runtime errors come back as 502).
func TestInvokeErrorsClassifiedByCode(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		body   string
		want   string
	}{
		{429, "TooManyRequestsException", `{"Type":"User","message":"Rate Exceeded.","Reason":"ReservedFunctionConcurrentInvocationLimitExceeded"}`, lambdafn.ClassThrottled},
		{502, "EC2ThrottledException", `{"Type":"Server","message":"Lambda was throttled by Amazon EC2"}`, lambdafn.ClassThrottled},
		{502, "ENILimitReachedException", `{"Type":"Server","message":"ENI limit reached"}`, lambdafn.ClassThrottled},
		{502, "SubnetIPAddressLimitReachedException", `{"Type":"Server","message":"no free IP"}`, lambdafn.ClassThrottled},
		{500, "ServiceException", `{"Type":"Service","message":"internal"}`, lambdafn.ClassTransient},
		{409, "ResourceConflictException", `{"Type":"User","message":"The operation cannot be performed at this time. An update is in progress for resource"}`, lambdafn.ClassThrottled},
		{502, "ResourceNotReadyException", `{"Type":"Server","message":"Functions are not ready"}`, lambdafn.ClassThrottled},
		{502, "EC2UnexpectedException", `{"Type":"Server","message":"unexpected EC2 error"}`, lambdafn.ClassTransient},
		{413, "RequestEntityTooLargeException", `{"Type":"User","message":"Request must be smaller than 6291456 bytes for the InvokeFunction operation"}`, lambdafn.ClassPermanent},
		{413, "SerializedRequestEntityTooLargeException", `{"Type":"User","message":"Request must be smaller than 6291456 bytes for the InvokeFunction operation"}`, lambdafn.ClassPermanent},
		{400, "InvalidRequestContentException", `{"Type":"User","message":"Could not parse request body into json"}`, lambdafn.ClassPermanent},
		{404, "ResourceNotFoundException", `{"Type":"User","message":"Function not found: arn:aws:lambda:us-east-1:123456789012:function:score"}`, lambdafn.ClassPermanent},
		{413, "RequestTooLargeException", `{"Type":"User","message":"Request must be smaller than 6291456 bytes for the InvokeFunction operation"}`, lambdafn.ClassPermanent},
		{403, "AccessDeniedException", `{"Message":"User is not authorized to perform: lambda:InvokeFunction"}`, lambdafn.ClassPermanent},
		{502, "KMSDisabledException", `{"Type":"User","message":"Lambda was unable to decrypt the environment variables because the KMS key used is disabled"}`, lambdafn.ClassPermanent},
		{502, "InvalidRuntimeException", `{"Type":"User","message":"The runtime parameter of python2.7 is no longer supported"}`, lambdafn.ClassPermanent},
		{400, "SomeFutureClientException", `{"message":"?"}`, lambdafn.ClassPermanent},
		{503, "SomeFutureServerException", `{"message":"?"}`, lambdafn.ClassTransient},
	} {
		t.Run(tc.code, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-ErrorType", tc.code)
				w.Header().Set("X-Amzn-RequestId", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			client := lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
			p := lambdafn.New(lambdafn.SDK{Client: client}, []string{"score"})
			_, err := p.Run(context.Background(), pipeline.Request{BatchID: "b", Key: "k", Attempt: 1, Input: json.RawMessage(`{}`), Options: json.RawMessage(`{"function":"score"}`)})
			var ie *lambdafn.InvokeError
			if !errors.As(err, &ie) || ie.Code != tc.code || ie.Status != tc.status || ie.Class() != tc.want {
				t.Fatalf("err %v (%+v), want an InvokeError %d %s of class %s", err, ie, tc.status, tc.code, tc.want)
			}
			_, throttled := pipeline.ThrottleOf(err)
			class := pipeline.Classify(err)
			switch tc.want {
			case lambdafn.ClassThrottled:
				if !throttled || class != pipeline.ClassTransient {
					t.Fatalf("class %s, throttled %v: want a transient *pipeline.ThrottledError", class, throttled)
				}
			case lambdafn.ClassTransient:
				if throttled || class != pipeline.ClassTransient {
					t.Fatalf("class %s, throttled %v: want transient", class, throttled)
				}
			default:
				if throttled || class != pipeline.ClassPermanent {
					t.Fatalf("class %s, throttled %v: want permanent", class, throttled)
				}
			}
		})
	}
}

// A request over Lambda's 6 MB synchronous payload fails before the call,
// naming the item and the limit; one just under it is sent.
func TestRequestOverPayloadLimit(t *testing.T) {
	calls := 0
	inv := invokerFunc(func(context.Context, string, []byte) (lambdafn.Result, error) {
		calls++
		return lambdafn.Result{Payload: []byte(`{"output":1}`)}, nil
	})
	p := lambdafn.New(inv, []string{"score"})
	run := func(n int) error {
		in, _ := json.Marshal(strings.Repeat("x", n))
		_, err := p.Run(context.Background(), pipeline.Request{BatchID: "b", Key: "big-1", Attempt: 1, Input: in, Options: json.RawMessage(`{"function":"score"}`)})
		return err
	}
	if err := run(lambdafn.MaxPayloadBytes); !errors.Is(err, lambdafn.ErrTooLarge) || pipeline.Classify(err) != pipeline.ClassPermanent ||
		!strings.Contains(err.Error(), "big-1") || !strings.Contains(err.Error(), "6291456") || calls != 0 {
		t.Fatalf("over the limit: %v (calls %d), want a permanent ErrTooLarge naming big-1 and 6291456, no call", err, calls)
	}
	if err := run(lambdafn.MaxPayloadBytes - 4096); err != nil || calls != 1 {
		t.Fatalf("under the limit: %v (calls %d)", err, calls)
	}
}

type invokerFunc func(context.Context, string, []byte) (lambdafn.Result, error)

func (f invokerFunc) Invoke(ctx context.Context, fn string, payload []byte) (lambdafn.Result, error) {
	return f(ctx, fn, payload)
}

// The Lambda service's and runtimes' own function error types that fail
// the same way every time (a function error: a 200 answer with
// X-Amz-Function-Error and {"errorType", "errorMessage"}) fail the item at
// once, naming the type, instead of using its attempts as transient
// errors; a runtime killed by a signal, a timeout and the function's own
// error types stay transient.
func TestFunctionErrorTypes(t *testing.T) {
	for _, tc := range []struct {
		errorType, message string
		want               pipeline.Class
	}{
		{"Function.ResponseSizeTooLarge", "Response payload size exceeded maximum allowed payload size (6291556 bytes).", pipeline.ClassPermanent},
		{"Runtime.HandlerNotFound", "index.handler is undefined or not exported", pipeline.ClassPermanent},
		{"Runtime.ImportModuleError", "Unable to import module 'app': No module named 'requests'", pipeline.ClassPermanent},
		{"Runtime.UserCodeSyntaxError", "SyntaxError: Unexpected token '}'", pipeline.ClassPermanent},
		{"Runtime.MalformedHandlerName", "Bad handler 'app': not enough values to unpack (expected 2, got 1)", pipeline.ClassPermanent},
		{"Runtime.InvalidEntrypoint", "RequestId: 1 Error: Couldn't find valid bootstrap(s): [/var/task/bootstrap /opt/bootstrap]", pipeline.ClassPermanent},
		{"Runtime.MarshalError", "Unable to marshal response: Object of type datetime is not JSON serializable", pipeline.ClassPermanent},
		{"Runtime.UnmarshalError", "Unable to unmarshal input: Expecting value: line 1 column 1 (char 0)", pipeline.ClassPermanent},
		{"Runtime.ExitError", "RequestId: 1 Error: Runtime exited with error: exit status 1", pipeline.ClassPermanent},
		{"Runtime.ExitError", "RequestId: 1 Error: Runtime exited with error: signal: killed", pipeline.ClassTransient},
		{"Sandbox.Timedout", "RequestId: 1 Error: Task timed out after 3.00 seconds", pipeline.ClassTransient},
		{"ValueError", "bad value", pipeline.ClassTransient},
		{"PermanentError", "order 17 has no lines", pipeline.ClassPermanent},
		{"com.example.QuarantineError", "look at it", pipeline.ClassQuarantine},
	} {
		t.Run(tc.errorType+" "+tc.message[len(tc.message)-8:], func(t *testing.T) {
			payload, _ := json.Marshal(lambdafn.FunctionError{ErrorType: tc.errorType, ErrorMessage: tc.message})
			calls := 0
			p := lambdafn.New(invokerFunc(func(context.Context, string, []byte) (lambdafn.Result, error) {
				calls++
				return lambdafn.Result{Payload: payload, FunctionError: "Unhandled"}, nil
			}), []string{"score"})
			_, err := p.Run(context.Background(), pipeline.Request{BatchID: "b", Key: "k", Attempt: 1, Input: json.RawMessage(`{}`), Options: json.RawMessage(`{"function":"score"}`)})
			if got := pipeline.Classify(err); got != tc.want || calls != 1 || !strings.Contains(err.Error(), tc.errorType) {
				t.Fatalf("%v: class %s after %d calls, want %s naming %s", err, got, calls, tc.want, tc.errorType)
			}
			if _, throttled := pipeline.ThrottleOf(err); throttled {
				t.Fatalf("%v: throttled", err)
			}
		})
	}
}

// A function error through the SDK client: Lambda answers 200 with
// X-Amz-Function-Error: Unhandled and the runtime's payload; the pipeline
// fails the item permanently for Runtime.ImportModuleError.
func TestFunctionErrorThroughTheSDK(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		_, _ = w.Write([]byte(`{"errorMessage": "Unable to import module 'app': No module named 'requests'", "errorType": "Runtime.ImportModuleError", "requestId": "r", "stackTrace": []}`))
	}))
	defer srv.Close()
	client := lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
	p := lambdafn.New(lambdafn.SDK{Client: client}, []string{"score"})
	_, err := p.Run(context.Background(), pipeline.Request{BatchID: "b", Key: "k", Attempt: 1, Input: json.RawMessage(`{}`), Options: json.RawMessage(`{"function":"score"}`)})
	if pipeline.Classify(err) != pipeline.ClassPermanent || !strings.Contains(err.Error(), "Runtime.ImportModuleError") {
		t.Fatalf("%v: class %s, want permanent naming Runtime.ImportModuleError", err, pipeline.Classify(err))
	}
}
