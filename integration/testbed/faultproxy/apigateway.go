package faultproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIGateway is what the proxy does as API Gateway to execute-api calls
// (bulkrun's REST API), where the emulator lets everything through. Every
// execute-api call is checked, in API Gateway's order, against:
//
//  1. the payload quota: a body over APIMaxBodyBytes (10 MB, "Amazon API
//     Gateway quotas", payload size:
//     https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-execution-service-limits-table.html)
//     is answered 413 "HTTP content length exceeded 10485760 bytes.";
//  2. the signature's time: an X-Amz-Date more than SignatureWindow (5
//     minutes) from the proxy's clock — the machine's plus ClockOffset —
//     is answered 403 InvalidSignatureException, "Signature expired: {t}
//     is now earlier than {now − 5 min} ({now} - 5 min.)" or "Signature
//     not yet current: {t} is still later than {now + 5 min} ({now} + 5
//     min.)" (Signature Version 4: "the signature is valid for 5 minutes",
//     IAM user guide, "AWS Signature Version 4 for API requests":
//     https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv.html);
//  3. the stage's throttle, when RateLimit > 0: a token bucket of
//     BurstLimit requests refilled at RateLimit a second, one per API and
//     stage ("Throttle requests to your REST APIs for better throughput in
//     API Gateway":
//     https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-request-throttling.html);
//     a call without a token is answered 429 TooManyRequestsException,
//     {"message": "Too Many Requests"};
//  4. Lambda's invocation payload limit: a call whose proxy event would be
//     over LambdaEventBytes (6 MB: Lambda quotas, "Invocation payload
//     (request and response)":
//     https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html)
//     never reaches the function: 413 BadRequestException, {"message":
//     "Request Too Long"}, as API Gateway answers when Lambda refuses the
//     invocation.
//
// None of these reach the emulator. Every execute-api answer, the
// emulator's and these, carries the proxy's clock in its Date header, as
// API Gateway's do: a client learns the offset of its own clock from it.
// JSON names in brackets.
type APIGateway struct {
	// RateLimit [rate_limit] is the stage's steady rate, requests per
	// second; 0 (the default) throttles nothing.
	RateLimit float64 `json:"rate_limit,omitempty"`
	// BurstLimit [burst_limit] is the bucket's size, requests; at least 1
	// with a RateLimit.
	BurstLimit int `json:"burst_limit,omitempty"`
	// ClockOffset [clock_offset_seconds] is how far the proxy's clock runs
	// ahead of the machine's (negative: behind), in seconds in JSON, at
	// most a day either way: 360 stands for a caller whose clock is 6
	// minutes behind AWS's.
	ClockOffset Seconds `json:"clock_offset_seconds,omitempty"`
}

// Limits of API Gateway and Lambda the proxy applies to execute-api calls
// (see APIGateway).
const (
	APIMaxBodyBytes  = 10 << 20
	LambdaEventBytes = 6 << 20
	SignatureWindow  = 5 * time.Minute
)

// Seconds is a duration written in JSON as a number of seconds.
type Seconds time.Duration

// MarshalJSON writes whole seconds.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(int64(time.Duration(s) / time.Second))
}

// UnmarshalJSON reads a number of seconds.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("seconds: %w", err)
	}
	*s = Seconds(time.Duration(secs * float64(time.Second)))
	return nil
}

// validate returns an error naming the field at fault.
func (g APIGateway) validate() error {
	switch {
	case math.IsNaN(g.RateLimit) || g.RateLimit < 0:
		return fmt.Errorf("api.rate_limit: %v, want requests per second ≥ 0", g.RateLimit)
	case g.BurstLimit < 0:
		return fmt.Errorf("api.burst_limit: %d, want ≥ 0", g.BurstLimit)
	case g.RateLimit > 0 && g.BurstLimit < 1:
		return fmt.Errorf("api.burst_limit: %d, want at least 1 request with a rate_limit", g.BurstLimit)
	case time.Duration(g.ClockOffset).Abs() > 24*time.Hour:
		return fmt.Errorf("api.clock_offset_seconds: %v, want at most a day either way", time.Duration(g.ClockOffset))
	}
	return nil
}

// bucket is one stage's token bucket.
type bucket struct {
	tokens float64
	at     time.Time
}

// clock is the proxy's clock for execute-api calls: the machine's (or a
// test's) plus the configured offset.
func (p *Proxy) clock() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now().Add(time.Duration(p.cfg.API.ClockOffset)).UTC()
}

// apiGateway applies APIGateway's rules to an execute-api call with body
// (read whole): it answers the call itself and returns true when a rule
// refuses it.
func (p *Proxy) apiGateway(w http.ResponseWriter, r *http.Request, body []byte) bool {
	now := p.clock()
	refuse := func(kind string, status int, errorType, message string) bool {
		p.countGateway(kind)
		writeError(w, r, Call{Service: "execute-api"}, errorShape{status: status, code: errorType, message: message}, "faultproxy-"+kind)
		return true
	}
	w.Header().Set("Date", now.Format(http.TimeFormat))
	if len(body) > APIMaxBodyBytes || r.ContentLength > APIMaxBodyBytes {
		p.countGateway(GatewayTooLarge)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprintf(w, "HTTP content length exceeded %d bytes.", APIMaxBodyBytes)
		return true
	}
	const amz = "20060102T150405Z"
	if signed, err := time.Parse(amz, r.Header.Get("X-Amz-Date")); err == nil {
		early, late := now.Add(-SignatureWindow), now.Add(SignatureWindow)
		switch {
		case signed.Before(early):
			return refuse(GatewaySignature, http.StatusForbidden, "InvalidSignatureException", fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 5 min.)",
				signed.Format(amz), early.Format(amz), now.Format(amz)))
		case signed.After(late):
			return refuse(GatewaySignature, http.StatusForbidden, "InvalidSignatureException", fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 5 min.)",
				signed.Format(amz), late.Format(amz), now.Format(amz)))
		}
	}
	if !p.takeToken(stageOf(r)) {
		return refuse(GatewayThrottled, http.StatusTooManyRequests, "TooManyRequestsException", "Too Many Requests")
	}
	if n := proxyEventBytes(r, body); n > LambdaEventBytes {
		return refuse(GatewayTooLarge, http.StatusRequestEntityTooLarge, "BadRequestException", "Request Too Long")
	}
	return false
}

// Kinds of the answers APIGateway gives, counted in Status.Gateway.
const (
	GatewayThrottled = "throttled"
	GatewaySignature = "signature_time"
	GatewayTooLarge  = "too_large"
)

func (p *Proxy) countGateway(kind string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gateway[kind]++
}

// takeToken takes a token of stage's bucket; false when it has none. With
// no RateLimit every call has one.
func (p *Proxy) takeToken(stage string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.cfg.API
	if g.RateLimit <= 0 {
		return true
	}
	now := p.now()
	b, ok := p.buckets[stage]
	if !ok {
		b = &bucket{tokens: float64(g.BurstLimit), at: now}
		p.buckets[stage] = b
	}
	b.tokens = min(float64(g.BurstLimit), b.tokens+now.Sub(b.at).Seconds()*g.RateLimit)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// stageOf names the API and stage of an execute-api call: "{api id}/{stage}"
// from the emulator's path /restapis/{api id}/{stage}/_user_request_/…,
// else the host (one stage per host, as an API's own domain).
func stageOf(r *http.Request) string {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/restapis/"); ok {
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) >= 2 {
			return parts[0] + "/" + parts[1]
		}
	}
	return r.Host
}

// proxyEventBytes is the size of the Lambda proxy event API Gateway makes
// of r ("Input format of a Lambda function for proxy integration",
// https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html):
// the body as a JSON string (the stack declares no binary media types, so
// a body is text), the headers twice (headers, multiValueHeaders), the
// path, query and request context with an IAM caller's identity, encoded
// as JSON without HTML escaping.
func proxyEventBytes(r *http.Request, body []byte) int {
	headers := map[string]string{}
	multi := map[string][]string{}
	for k, vs := range r.Header {
		headers[k] = strings.Join(vs, ",")
		multi[k] = vs
	}
	for k, v := range map[string]string{ // added by API Gateway's front end
		"CloudFront-Forwarded-Proto": "https", "CloudFront-Is-Desktop-Viewer": "true", "CloudFront-Viewer-Country": "US",
		"Via": "2.0 0123456789abcdef0123456789abcdef.cloudfront.net (CloudFront)", "X-Amz-Cf-Id": strings.Repeat("x", 56),
		"X-Amzn-Trace-Id": "Root=1-00000000-000000000000000000000000", "X-Forwarded-For": "203.0.113.10, 198.51.100.20",
		"X-Forwarded-Port": "443", "X-Forwarded-Proto": "https",
	} {
		headers[k], multi[k] = v, []string{v}
	}
	query := map[string]string{}
	for k, vs := range r.URL.Query() {
		query[k] = strings.Join(vs, ",")
	}
	path := r.URL.Path
	if _, rest, ok := strings.Cut(path, "/_user_request_"); ok {
		path = rest
	}
	arn := "arn:aws:iam::000000000000:user/" + strings.Repeat("x", 64)
	event := map[string]any{
		"resource": "/batches/{proxy+}", "path": path, "httpMethod": r.Method,
		"headers": headers, "multiValueHeaders": multi,
		"queryStringParameters": query, "multiValueQueryStringParameters": r.URL.Query(),
		"pathParameters": map[string]string{"proxy": strings.TrimPrefix(path, "/batches/")}, "stageVariables": nil,
		"requestContext": map[string]any{
			"resourceId": "abcdef", "resourcePath": "/batches/{proxy+}", "httpMethod": r.Method,
			"extendedRequestId": "AbCdEfGhIjKlMnO=", "requestTime": "02/Dec/2026:19:00:00 +0000", "path": "/v1" + path,
			"accountId": "000000000000", "protocol": "HTTP/1.1", "stage": "v1", "domainPrefix": "abcdefghij",
			"requestTimeEpoch": 1796238000000, "requestId": "00000000-0000-0000-0000-000000000000",
			"domainName": "abcdefghij.execute-api.us-east-1.amazonaws.com", "apiId": "abcdefghij",
			"identity": map[string]any{
				"cognitoIdentityPoolId": nil, "accountId": "000000000000", "cognitoIdentityId": nil, "caller": "AIDA" + strings.Repeat("X", 17),
				"sourceIp": "203.0.113.10", "principalOrgId": nil, "accessKey": "AKIA" + strings.Repeat("X", 16), "cognitoAuthenticationType": nil,
				"cognitoAuthenticationProvider": nil, "userArn": arn, "userAgent": r.UserAgent(), "user": "AIDA" + strings.Repeat("X", 17),
			},
		},
		"body": string(body), "isBase64Encoded": false,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(event); err != nil {
		return len(body) + 2*len(strconv.Itoa(len(body)))
	}
	return b.Len() - 1 // the encoder's newline
}
