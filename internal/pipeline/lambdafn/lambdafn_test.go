package lambdafn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/internal/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// fake is an Invoker answering a fixed Result or error, recording calls.
type fake struct {
	res      lambdafn.Result
	err      error
	function string
	payload  []byte
	calls    int
}

func (f *fake) Invoke(_ context.Context, function string, payload []byte) (lambdafn.Result, error) {
	f.calls++
	f.function, f.payload = function, payload
	return f.res, f.err
}

func request(options string) pipeline.Request {
	return pipeline.Request{BatchID: "b1", Key: "k/1", RunID: "abc123", Attempt: 2, Input: json.RawMessage(`{"n":1}`),
		Headers: map[string]string{"Authorization": "Bearer x"}, Options: json.RawMessage(options)}
}

// TestLambdaPipelineRequest guards the product line "the function gets
// the item's request (batch id, key, run id, attempt, input, headers),
// versioned": the event is exactly the documented version-1 JSON.
func TestLambdaPipelineRequest(t *testing.T) {
	f := &fake{res: lambdafn.Result{Payload: []byte(`{"output":1}`)}}
	p := lambdafn.New(f, []string{"score"})
	if _, err := p.Run(context.Background(), request(`{"function":"score","params":{"model":"v2"}}`)); err != nil {
		t.Fatal(err)
	}
	want := `{"version":1,"batch_id":"b1","key":"k/1","run_id":"abc123","attempt":2,"input":{"n":1},"headers":{"Authorization":"Bearer x"},"params":{"model":"v2"}}`
	if string(f.payload) != want || f.function != "score" {
		t.Errorf("invoked %s with\n%s\nwant\n%s", f.function, f.payload, want)
	}
	// Without headers or params: {} and null, never absent.
	req := request(`{"function":"score"}`)
	req.Headers = nil
	if _, err := p.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(f.payload), `"headers":{},"params":null`) {
		t.Errorf("payload %s, want empty headers and null params", f.payload)
	}
}

// TestLambdaPipelineAnswers guards the product line "the answer maps to
// the outcome: a result payload is the output and cost; a function error
// is classified by its errorType (PermanentError, QuarantineError;
// anything else transient)". Function errors are shaped as Lambda sends
// them from Python, Java, Node.js and Go runtimes (the emulator reports
// every Python exception as Runtime.HandlerError, so these cases are
// built here).
func TestLambdaPipelineAnswers(t *testing.T) {
	for _, tt := range []struct {
		name       string
		res        lambdafn.Result
		err        error
		wantClass  pipeline.Class // "" for success
		wantOutput string
		wantCost   pipeline.Cost
		wantIs     error
	}{
		{name: "output and cost", res: lambdafn.Result{Payload: []byte(`{"output":{"score":0.9},"cost":{"calls":1,"tokens":812}}`)},
			wantOutput: `{"score":0.9}`, wantCost: pipeline.Cost{"calls": 1, "tokens": 812}},
		{name: "version 1, no output", res: lambdafn.Result{Payload: []byte(`{"version":1}`)}, wantOutput: `null`},
		{name: "answered permanent, with cost", res: lambdafn.Result{Payload: []byte(`{"error":{"class":"permanent","message":"no lines"},"cost":{"calls":1}}`)},
			wantClass: pipeline.ClassPermanent, wantCost: pipeline.Cost{"calls": 1}},
		{name: "answered quarantine", res: lambdafn.Result{Payload: []byte(`{"error":{"class":"quarantine","message":"odd"}}`)}, wantClass: pipeline.ClassQuarantine},
		{name: "answered transient", res: lambdafn.Result{Payload: []byte(`{"error":{"class":"transient","message":"busy"}}`)}, wantClass: pipeline.ClassTransient},
		{name: "python PermanentError", res: lambdafn.Result{FunctionError: "Unhandled",
			Payload: []byte(`{"errorMessage": "order 17 has no lines", "errorType": "PermanentError", "requestId": "5d1c", "stackTrace": ["  File \"/var/task/handler.py\", line 40, in handler\n"]}`)},
			wantClass: pipeline.ClassPermanent},
		{name: "java QuarantineError", res: lambdafn.Result{FunctionError: "Unhandled",
			Payload: []byte(`{"errorMessage":"odd","errorType":"com.example.bulkrun.QuarantineError","stackTrace":["com.example.Handler.handleRequest(Handler.java:20)"]}`)},
			wantClass: pipeline.ClassQuarantine},
		{name: "go PermanentError", res: lambdafn.Result{FunctionError: "Unhandled", Payload: []byte(`{"errorMessage":"bad","errorType":"PermanentError"}`)},
			wantClass: pipeline.ClassPermanent},
		{name: "node TypeError", res: lambdafn.Result{FunctionError: "Unhandled", Payload: []byte(`{"errorType":"TypeError","errorMessage":"x is undefined","trace":[]}`)},
			wantClass: pipeline.ClassTransient},
		{name: "timeout", res: lambdafn.Result{FunctionError: "Unhandled", Payload: []byte(`{"errorType":"Sandbox.Timedout","errorMessage":"Task timed out after 3.00 seconds"}`)},
			wantClass: pipeline.ClassTransient},
		{name: "emulator's python exception", res: lambdafn.Result{FunctionError: "Unhandled", Payload: []byte(`{"errorMessage":"boom","errorType":"Runtime.HandlerError"}`)},
			wantClass: pipeline.ClassTransient},
		{name: "function error without JSON", res: lambdafn.Result{FunctionError: "Unhandled", Payload: []byte(`Process exited`)}, wantClass: pipeline.ClassTransient},
		{name: "throttled", err: &lambdafn.InvokeError{Status: 429, Code: "TooManyRequestsException", Err: errors.New("rate exceeded")}, wantClass: pipeline.ClassTransient},
		{name: "service 5xx", err: &lambdafn.InvokeError{Status: 500, Code: "ServiceException", Err: errors.New("internal")}, wantClass: pipeline.ClassTransient},
		{name: "no answer", err: &lambdafn.InvokeError{Err: errors.New("connection reset")}, wantClass: pipeline.ClassTransient},
		{name: "function gone", err: &lambdafn.InvokeError{Status: 404, Code: "ResourceNotFoundException", Err: errors.New("not found")}, wantClass: pipeline.ClassPermanent},
		{name: "not an object", res: lambdafn.Result{Payload: []byte(`"done"`)}, wantClass: pipeline.ClassPermanent, wantIs: lambdafn.ErrBadAnswer},
		{name: "unknown member", res: lambdafn.Result{Payload: []byte(`{"result":1}`)}, wantClass: pipeline.ClassPermanent, wantIs: lambdafn.ErrBadAnswer},
		{name: "other version", res: lambdafn.Result{Payload: []byte(`{"version":2,"output":1}`)}, wantClass: pipeline.ClassPermanent, wantIs: lambdafn.ErrBadAnswer},
		{name: "bad class", res: lambdafn.Result{Payload: []byte(`{"error":{"class":"fatal","message":"x"}}`)}, wantClass: pipeline.ClassPermanent, wantIs: lambdafn.ErrBadAnswer},
		{name: "output and error", res: lambdafn.Result{Payload: []byte(`{"output":1,"error":{"class":"transient","message":"x"}}`)}, wantClass: pipeline.ClassPermanent, wantIs: lambdafn.ErrBadAnswer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := lambdafn.New(&fake{res: tt.res, err: tt.err}, []string{"score"})
			res, err := p.Run(context.Background(), request(`{"function":"score"}`))
			if tt.wantClass == "" {
				if err != nil || string(res.Output) != tt.wantOutput || fmt.Sprint(res.Cost) != fmt.Sprint(tt.wantCost) {
					t.Fatalf("Run = %s %v, %v; want %s %v", res.Output, res.Cost, err, tt.wantOutput, tt.wantCost)
				}
				return
			}
			if err == nil {
				t.Fatalf("Run = %s, want a %s error", res.Output, tt.wantClass)
			}
			if got := pipeline.Classify(err); got != tt.wantClass {
				t.Errorf("class %s (%v), want %s", got, err, tt.wantClass)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), "k/1") || !strings.Contains(err.Error(), "score") {
				t.Errorf("error %q names neither the key nor the function", err)
			}
			if tt.wantCost != nil && fmt.Sprint(res.Cost) != fmt.Sprint(tt.wantCost) {
				t.Errorf("cost %v, want %v", res.Cost, tt.wantCost)
			}
		})
	}
}

// TestLambdaPipelineAllowList guards the product line "a function is
// invoked only when allow-listed": options naming another function are
// refused at submit (naming pipeline_options.function) and fail the item
// permanently without a call; a name matches an allow-listed ARN of that
// name and the other way round.
func TestLambdaPipelineAllowList(t *testing.T) {
	allowed := []string{"score", "arn:aws:lambda:eu-west-1:123456789012:function:other:live"}
	for _, tt := range []struct {
		options string
		ok      bool
	}{
		{`{"function":"score"}`, true},
		{`{"function":"arn:aws:lambda:eu-west-1:123456789012:function:score"}`, true},
		{`{"function":"other:live"}`, true},
		{`{"function":"arn:aws:lambda:eu-west-1:123456789012:function:other:live"}`, true},
		{`{"function":"other"}`, false},
		{`{"function":"scorer"}`, false},
		{`{"function":"arn:aws:lambda:eu-west-1:123456789012:function:other"}`, false},
		{`{}`, false},
		{`{"function":"score","url":"x"}`, false},
		{`{"function":"bad name!"}`, false},
		{`[1]`, false},
	} {
		t.Run(tt.options, func(t *testing.T) {
			f := &fake{res: lambdafn.Result{Payload: []byte(`{}`)}}
			p := lambdafn.New(f, allowed)
			err := p.ValidateOptions(json.RawMessage(tt.options))
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateOptions: %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok && !errors.Is(err, lambdafn.ErrInvalidOptions) {
				t.Errorf("error %v is not ErrInvalidOptions", err)
			}
			var oe *pipeline.OptionError
			if !tt.ok && strings.Contains(tt.options, `"function"`) && !strings.Contains(tt.options, "url") && (!errors.As(err, &oe) || oe.Option != "function") {
				t.Errorf("error %v does not name the function option", err)
			}
			_, err = p.Run(context.Background(), request(tt.options))
			if tt.ok != (err == nil) || !tt.ok && (f.calls != 0 || pipeline.Classify(err) != pipeline.ClassPermanent) {
				t.Errorf("Run: %v after %d calls", err, f.calls)
			}
		})
	}
	// Without an allow-list nothing is allowed, and the error says where to add one.
	err := lambdafn.New(nil, nil).ValidateOptions(json.RawMessage(`{"function":"score"}`))
	if err == nil || !strings.Contains(err.Error(), "LambdaFunctions") {
		t.Errorf("empty allow-list: %v", err)
	}
}

// TestLambdaPipelineRefusalNamesTheFix guards docs/pipelines.md
// "Pipelines in any language": a function the stack does not allow is
// refused with the exact command that allows it — the functions allowed
// now and this one — and the prop that does it in a CDK app of one's own.
func TestLambdaPipelineRefusalNamesTheFix(t *testing.T) {
	err := lambdafn.New(nil, []string{"bulkrun-example-python"}).ValidateOptions(json.RawMessage(`{"function":"score"}`))
	for _, want := range []string{"make deploy LAMBDA_FUNCTIONS=score,bulkrun-example-python", "TARGET=aws make deploy", "LambdaFunctions prop"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %v does not say %q", err, want)
		}
	}
	err = lambdafn.New(nil, nil).ValidateOptions(json.RawMessage(`{"function":"score"}`))
	if err == nil || !strings.Contains(err.Error(), "make deploy LAMBDA_FUNCTIONS=score ") {
		t.Errorf("refusal with none allowed %v does not say make deploy LAMBDA_FUNCTIONS=score", err)
	}
}

// TestLambdaPipelineSDKErrors guards the invoke-error classification on
// the SDK's real error path: Lambda's JSON error answers (429, 500, 404)
// become *InvokeError with status and code, and only 429 and 5xx are
// transient; a function error header reaches Result.FunctionError.
func TestLambdaPipelineSDKErrors(t *testing.T) {
	for _, tt := range []struct {
		status    int
		code      string
		header    string
		body      string
		wantClass pipeline.Class
	}{
		{429, "TooManyRequestsException", "", `{"message":"Rate exceeded","Reason":"ReservedFunctionConcurrentInvocationLimitExceeded"}`, pipeline.ClassTransient},
		{500, "ServiceException", "", `{"message":"internal"}`, pipeline.ClassTransient},
		{404, "ResourceNotFoundException", "", `{"message":"Function not found: arn:aws:lambda:us-east-1:000000000000:function:score"}`, pipeline.ClassPermanent},
		{200, "", "Unhandled", `{"errorMessage":"no","errorType":"PermanentError"}`, pipeline.ClassPermanent},
		{200, "", "", `{"output":{"ok":true}}`, ""},
	} {
		t.Run(fmt.Sprint(tt.status, tt.code, tt.header), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.code != "" {
					w.Header().Set("X-Amzn-ErrorType", tt.code)
				}
				if tt.header != "" {
					w.Header().Set("X-Amz-Function-Error", tt.header)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			client := lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
				Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
			p := lambdafn.New(lambdafn.SDK{Client: client}, []string{"score"})
			res, err := p.Run(context.Background(), request(`{"function":"score"}`))
			if tt.wantClass == "" {
				if err != nil || string(res.Output) != `{"ok":true}` {
					t.Fatalf("Run = %s, %v", res.Output, err)
				}
				return
			}
			if got := pipeline.Classify(err); err == nil || got != tt.wantClass {
				t.Fatalf("Run: %v (%s), want %s", err, got, tt.wantClass)
			}
			var ie *lambdafn.InvokeError
			if tt.code != "" && (!errors.As(err, &ie) || ie.Status != tt.status || ie.Code != tt.code) {
				t.Errorf("error %v: want an InvokeError %d %s", err, tt.status, tt.code)
			}
		})
	}
}
