// Package apigw applies to the calls of a bulkrun REST API on the
// emulator (SigV4 service execute-api) the rules of API Gateway and Lambda
// that MiniStack does not apply (localstack/README.md):
//
//   - SigV4 signatures are verified (Verify): MiniStack checks only that
//     an Authorization header is there. A signature that does not match
//     is answered 403 with API Gateway's message, as API Gateway answers
//     a REST API with IAM authorization.
//   - A Lambda proxy integration's answer is at most ResponsePayloadBytes
//     as the function returns it (its JSON: status, headers, body): Lambda
//     refuses a larger synchronous response (Function.ResponseSizeTooLarge;
//     "Lambda quotas", "Invocation payload (request and response)": 6 MB
//     each for synchronous invocations,
//     https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html),
//     and API Gateway then answers 502 {"message": "Internal server
//     error"}.
//
// Gate applies both in the fault proxy (integration/testbed/faultproxy,
// integration/testbed/cmd/faultproxy -verify-sigv4).
package apigw

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
)

// Service is the SigV4 signing name of a REST API's calls.
const Service = "execute-api"

// ResponsePayloadBytes is the largest response of a synchronous Lambda
// invocation: 6 MB (6,291,456 bytes), "Lambda quotas".
const ResponsePayloadBytes = 6 << 20

// Gate applies the package's rules to execute-api calls and lets every
// other call through; a faultproxy.Gate and faultproxy.ResponseRewriter.
// Safe for concurrent use.
type Gate struct {
	// Secrets are the callers' secret access keys by access key id (the
	// emulator's callers sign with test/test).
	Secrets map[string]string
}

var (
	_ faultproxy.Gate             = (*Gate)(nil)
	_ faultproxy.ResponseRewriter = (*Gate)(nil)
)

// Admit refuses an execute-api call whose signature does not verify:
// 403, API Gateway's error type and message.
func (g *Gate) Admit(r *http.Request, c faultproxy.Call, body []byte) *faultproxy.Refusal {
	if c.Service != Service {
		return nil
	}
	var se *SignatureError
	if err := Verify(r, body, g.Secrets); errors.As(err, &se) {
		code := "InvalidSignatureException"
		if se.CanonicalString == "" {
			code = "IncompleteSignatureException"
		}
		if se.Reason == "The security token included in the request is invalid." {
			code = "UnrecognizedClientException"
		}
		return &faultproxy.Refusal{Status: http.StatusForbidden, Code: code, Message: se.Error()}
	}
	return nil
}

// Answered keeps every answer.
func (g *Gate) Answered(*http.Request, faultproxy.Call, int, http.Header) *faultproxy.Refusal {
	return nil
}

// Rewrite turns the emulator's answer to an execute-api call into API
// Gateway's 502 when the function's response was larger than Lambda
// returns (ResponseSize).
func (g *Gate) Rewrite(resp *http.Response, c faultproxy.Call) {
	if c.Service != Service {
		return
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil && ResponseSize(resp.StatusCode, resp.Header.Get("Content-Type"), body) <= ResponsePayloadBytes {
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return
	}
	out := []byte(`{"message": "Internal server error"}`)
	resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
	resp.Header = http.Header{"Content-Type": {"application/json"}, "X-Amzn-Errortype": {"InternalServerErrorException"},
		"Content-Length": {strconv.Itoa(len(out))}}
	resp.ContentLength = int64(len(out))
	resp.Body = io.NopCloser(bytes.NewReader(out))
}

// ResponseSize is the size of the response a Lambda proxy integration's
// function returns for an answer of status, content type and body: the
// JSON of events.APIGatewayProxyResponse as aws-lambda-go writes it
// (encoding/json: the body a JSON string, its quotes, control and HTML
// characters escaped).
func ResponseSize(status int, contentType string, body []byte) int {
	b, err := json.Marshal(events.APIGatewayProxyResponse{StatusCode: status, Headers: map[string]string{"Content-Type": contentType}, Body: string(body)})
	if err != nil {
		return len(body)
	}
	return len(b)
}

// ServeHTTP answers 404: the gate has no control endpoint.
func (g *Gate) ServeHTTP(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }
