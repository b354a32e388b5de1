package lambdafn

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// SDK is the Invoker of an AWS SDK Lambda client. Safe for concurrent use.
type SDK struct{ Client *lambda.Client }

var _ Invoker = SDK{}

// Invoke calls Lambda's Invoke (RequestResponse). Lambda's error answers
// become an *InvokeError with their HTTP status and code; a call that got
// no answer (a timeout, a lost connection) one with status 0. The
// context's own cancellation is returned as is.
func (s SDK) Invoke(ctx context.Context, function string, payload []byte) (Result, error) {
	out, err := s.Client.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(function),
		InvocationType: types.InvocationTypeRequestResponse,
		Payload:        payload,
	})
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
