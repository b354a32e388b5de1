package lambdafn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"go.opentelemetry.io/otel/propagation"
)

// SDK is the Invoker of an AWS SDK Lambda client. Safe for concurrent use.
type SDK struct{ Client *lambda.Client }

var _ Invoker = SDK{}

// Invoke calls Lambda's Invoke (RequestResponse). Lambda's error answers
// become an *InvokeError with their HTTP status and code; a call that got
// no answer (a timeout, a lost connection) one with status 0. The
// context's own cancellation is returned as is.
func (s SDK) Invoke(ctx context.Context, function string, payload []byte) (Result, error) {
	in := &lambda.InvokeInput{
		FunctionName:   aws.String(function),
		InvocationType: types.InvocationTypeRequestResponse,
		Payload:        payload,
	}
	if cc := clientContext(ctx); cc != "" {
		in.ClientContext = aws.String(cc)
	}
	out, err := s.Client.Invoke(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		ie := &InvokeError{Err: err}
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && re.Response != nil {
			ie.Status = re.Response.StatusCode
		}
		var ae smithy.APIError
		if errors.As(err, &ae) {
			ie.Code = ae.ErrorCode()
			if ie.Status == 0 && ae.ErrorFault() == smithy.FaultClient {
				ie.Status = http.StatusBadRequest
			}
		}
		return Result{}, ie
	}
	return Result{Payload: out.Payload, FunctionError: aws.ToString(out.FunctionError)}, nil
}

// MaxClientContextBytes is the largest ClientContext Invoke takes: 3,583
// bytes, base64-encoded (Lambda API reference, "Invoke", ClientContext).
const MaxClientContextBytes = 3583

// clientContext is Invoke's ClientContext for ctx's W3C trace context
// (traceparent, and tracestate when there is one), base64-encoded JSON
// with the headers under both "Custom" and "custom": OpenTelemetry's AWS
// SDK instrumentation puts them under "Custom", and its Lambda
// instrumentation reads them there (Node.js), the Python runtime reads
// "custom", Go's lambdacontext.ClientContext either. "" when ctx carries
// no span context, or the context would not fit MaxClientContextBytes.
func clientContext(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if carrier["traceparent"] == "" {
		return ""
	}
	js, err := json.Marshal(map[string]map[string]string{"Custom": carrier, "custom": carrier})
	if err != nil {
		return ""
	}
	if s := base64.StdEncoding.EncodeToString(js); len(s) <= MaxClientContextBytes {
		return s
	}
	return ""
}
