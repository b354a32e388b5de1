package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddle "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/bulkrun/bulkrun/shared/wire"
)

// Retry settings of NewRetryer.
const (
	// MaxAttempts is how many times a call is sent (the first try
	// included) before its retryable error is returned: 6.
	MaxAttempts = 6
	// MaxBackoff caps the delay between two tries: 20 s, the standard
	// retryer's default (retry.DefaultMaxBackoff).
	MaxBackoff = retry.DefaultMaxBackoff
)

// NewRetryer returns the retryer of the client's calls: the AWS SDK's
// standard retryer (retry.NewStandard) with MaxAttempts tries, its
// exponential backoff with full jitter (before try n+1 a random delay in
// [0, 2^n s), at most MaxBackoff: six tries span at most about 50 s) and
// no client-side retry quota (ratelimit.None: a stage throttled for
// minutes would empty the quota and fail calls that a wait would have
// let through). It retries what the SDK retries for an AWS service — HTTP
// 429 (API Gateway's stage throttle, TooManyRequestsException), 500, 502,
// 503 and 504, timeouts and lost connections — and, once, a request
// refused for a signing time too far from the API's clock (see
// [Client.Do]). Each call gets a new one.
func NewRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = MaxAttempts
		o.MaxBackoff = MaxBackoff
		o.RateLimiter = ratelimit.None
	})
}

// answer is a 2xx or 303 (a report's link) answer of the API.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// send sends one API call through the AWS SDK's middleware stack: the
// retryer's Attempt middleware (retry.NewAttemptMiddleware) with the
// client's learned clock offset (ClientSkew), SigV4 signing at the
// machine's time plus that offset, the answer's Date recorded
// (RecordResponseTiming, which measures the offset) and the answer read.
// A non-2xx answer is an *APIError; after the retries the SDK's
// *retry.MaxAttemptsError wraps the last error. It returns how many tries
// were made.
func (c *Client) send(ctx context.Context, method, path string, payload []byte) (answer, int, error) {
	stack := middleware.NewStack("bulkrun-api", smithyhttp.NewStackRequest)
	err := errors.Join(
		stack.Serialize.Add(middleware.SerializeMiddlewareFunc("BuildRequest",
			func(ctx context.Context, in middleware.SerializeInput, next middleware.SerializeHandler) (middleware.SerializeOutput, middleware.Metadata, error) {
				req := in.Request.(*smithyhttp.Request)
				u, err := url.Parse(c.base + path)
				if err != nil {
					return middleware.SerializeOutput{}, middleware.Metadata{}, err
				}
				req.Method, req.URL = method, u
				req.Header.Set("Content-Type", "application/json")
				if len(payload) > 0 {
					if req, err = req.SetStream(bytes.NewReader(payload)); err != nil {
						return middleware.SerializeOutput{}, middleware.Metadata{}, err
					}
					in.Request = req
				}
				return next.HandleSerialize(ctx, in)
			}), middleware.After),
		stack.Finalize.Add(retry.NewAttemptMiddleware(c.retryer(), smithyhttp.RequestCloner, func(a *retry.Attempt) {
			a.ClientSkew = &c.skew
		}), middleware.After),
		stack.Finalize.Add(&signing{c: c, payloadHash: payloadHash(payload)}, middleware.After),
		stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("ReadAnswer", readAnswer), middleware.After),
		stack.Deserialize.Add(&awsmiddle.RecordResponseTiming{}, middleware.After),
	)
	if err != nil {
		return answer{}, 0, err
	}
	h := middleware.DecorateHandler(smithyhttp.NewClientHandlerWithOptions(c.http), stack)
	out, md, err := h.Handle(ctx, nil)
	tries := 1
	if r, ok := retry.GetAttemptResults(md); ok {
		tries = len(r.Results)
	}
	if err != nil {
		return answer{}, tries, err
	}
	a, _ := out.(answer)
	return a, tries, nil
}

func (c *Client) retryer() aws.Retryer {
	if c.Retryer != nil {
		return c.Retryer()
	}
	return NewRetryer()
}

func payloadHash(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// signing is the SigV4 step of send (service execute-api): it signs each
// try at the machine's time plus the clock offset the client has learned
// from the API's answers (the AWS SDK's clock-skew correction: an answer's
// Date header gives the offset, RecordResponseTiming measures it, and the
// SDK's own service clients sign with it the same way), and keeps the
// offset the try's answer measured for the next try and the next call.
type signing struct {
	c           *Client
	payloadHash string
}

func (s *signing) ID() string { return "Signing" }

func (s *signing) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	req, ok := in.Request.(*smithyhttp.Request)
	if !ok {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, fmt.Errorf("sign: request of type %T", in.Request)
	}
	creds, err := s.c.aws.Credentials.Retrieve(ctx)
	if err != nil {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, fmt.Errorf("credentials: %w", err)
	}
	at := time.Now().Add(time.Duration(s.c.skew.Load()))
	if err := s.c.signer.SignHTTP(ctx, creds, req.Request, s.payloadHash, "execute-api", s.c.aws.Region, at); err != nil {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, fmt.Errorf("sign: %w", err)
	}
	out, md, err := next.HandleFinalize(ctx, in)
	if skew, ok := awsmiddle.GetAttemptSkew(md); ok {
		s.c.skew.Store(int64(skew))
	}
	return out, md, err
}

// readAnswer reads the API's answer: a 2xx answer's body becomes the
// output, any other an *APIError. A body that breaks off is a lost
// connection (retried like one).
func readAnswer(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleDeserialize(ctx, in)
	if err != nil {
		return out, md, err
	}
	resp, ok := out.RawResponse.(*smithyhttp.Response)
	if !ok {
		return out, md, fmt.Errorf("answer of type %T", out.RawResponse)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return out, md, &smithyhttp.RequestSendError{Err: fmt.Errorf("read the answer: %w", err)}
	}
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusSeeOther {
		return out, md, newAPIError(resp.StatusCode, resp.Header, data)
	}
	out.Result = answer{status: resp.StatusCode, header: resp.Header, body: data}
	return out, md, nil
}

// newAPIError is the error of a non-2xx answer: bulkrun's JSON error
// body, or API Gateway's own ({"message": "…"}, its error type in the
// x-amzn-ErrorType header: "TooManyRequestsException" for the stage's
// throttle, "InvalidSignatureException" for a signature it refuses).
func newAPIError(status int, header http.Header, data []byte) *APIError {
	ae := &APIError{Status: status, Type: errorType(header.Get("X-Amzn-Errortype"))}
	if json.Unmarshal(data, &ae.Body) != nil || ae.Body.Code == "" {
		var gw struct {
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &gw) == nil && gw.Message != "" {
			msg = gw.Message
		}
		ae.Body = wire.ErrorBody{Code: "http_" + fmt.Sprint(status), Message: msg}
	}
	return ae
}

// errorType is the error type of an x-amzn-ErrorType header, which may
// carry a colon and more after it ("TooManyRequestsException:http://…").
func errorType(h string) string {
	t, _, _ := strings.Cut(h, ":")
	return strings.TrimSpace(t)
}
