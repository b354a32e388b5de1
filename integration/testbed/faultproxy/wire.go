package faultproxy

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"
)

// An errorShape is one AWS error answer as the service sends it.
type errorShape struct {
	status  int
	code    string
	message string
}

// throttleCodes lists, per service, the throttling error codes a rule may
// choose (Rule.Code); the first is the default. Sources, all "Common
// Errors" or the operation's "Errors" section of each API reference:
//   - DynamoDB: ProvisionedThroughputExceededException (400),
//     ThrottlingException (400), RequestLimitExceeded (400)
//     https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html
//   - SQS: RequestThrottled (403 in the SQS service model),
//     ThrottlingException (400)
//     https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/CommonErrors.html
//   - S3: SlowDown (503)
//     https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html
//   - Lambda: TooManyRequestsException (429)
//     https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html
//
// Every one of them is in the AWS SDK for Go v2's default throttle codes
// (aws/retry: DefaultThrottleErrorCodes).
var throttleCodes = map[string][]errorShape{
	"dynamodb": {
		{400, "ProvisionedThroughputExceededException", "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."},
		{400, "ThrottlingException", "Rate of requests exceeds the allowed throughput."},
		{400, "RequestLimitExceeded", "Throughput exceeds the current throughput limit for your account."},
	},
	"sqs": {
		{403, "RequestThrottled", "Request is throttled."},
		{400, "ThrottlingException", "Rate exceeded"},
	},
	"s3":     {{503, "SlowDown", "Please reduce your request rate."}},
	"lambda": {{429, "TooManyRequestsException", "Rate Exceeded."}},
	// API Gateway: its stage throttle's answer (APIGateway).
	"execute-api": {{429, "TooManyRequestsException", "Too Many Requests"}},
	"":            {{400, "ThrottlingException", "Rate exceeded"}},
}

// serverErrors gives each service's 500 answer.
var serverErrors = map[string]errorShape{
	"dynamodb": {500, "InternalServerError", "Internal server error"},
	"sqs":      {500, "InternalError", "We encountered an internal error. Please try again."},
	"s3":       {500, "InternalError", "We encountered an internal error. Please try again."},
	"lambda":   {500, "ServiceException", "The AWS Lambda service encountered an internal error."},
	// API Gateway's answer when the integration fails.
	"execute-api": {502, "InternalServerErrorException", "Internal server error"},
	"":            {500, "InternalFailure", "The request processing has failed because of an unknown error, exception or failure."},
}

// throttleShape returns the throttling answer of the call's service with
// the given code ("" for the default), or false if the service has no
// such code.
func throttleShape(service, code string) (errorShape, bool) {
	shapes, ok := throttleCodes[service]
	if !ok {
		shapes = throttleCodes[""]
	}
	if code == "" {
		return shapes[0], true
	}
	for _, s := range shapes {
		if s.code == code {
			return s, true
		}
	}
	return errorShape{}, false
}

func serverShape(service string) errorShape {
	if s, ok := serverErrors[service]; ok {
		return s
	}
	return serverErrors[""]
}

// writeError answers r with e in the wire format of the call's service and
// protocol.
func writeError(w http.ResponseWriter, r *http.Request, c Call, e errorShape, requestID string) {
	h := w.Header()
	var body []byte
	switch {
	case c.Service == "s3":
		h.Set("Content-Type", "application/xml")
		h.Set("X-Amz-Request-Id", requestID)
		h.Set("X-Amz-Id-2", requestID)
		if r.Method != http.MethodHead {
			body = fmt.Appendf([]byte(xml.Header), "<Error><Code>%s</Code><Message>%s</Message><RequestId>%s</RequestId><HostId>%s</HostId></Error>",
				e.code, escapeXML(e.message), requestID, requestID)
		}
	case c.Service == "dynamodb":
		h.Set("Content-Type", "application/x-amz-json-1.0")
		h.Set("X-Amzn-Requestid", requestID)
		ns := "com.amazonaws.dynamodb.v20120810#"
		if e.code == "ThrottlingException" {
			ns = "com.amazon.coral.availability#"
		}
		body, _ = json.Marshal(map[string]string{"__type": ns + e.code, "message": e.message})
		h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	case c.Service == "execute-api":
		// API Gateway's own answers: {"message": …}, the error type in
		// x-amzn-ErrorType.
		h.Set("Content-Type", "application/json")
		h.Set("X-Amzn-Requestid", requestID)
		h.Set("X-Amzn-Errortype", e.code)
		body, _ = json.Marshal(map[string]string{"message": e.message})
	case c.Service == "lambda":
		h.Set("Content-Type", "application/json")
		h.Set("X-Amzn-Requestid", requestID)
		h.Set("X-Amzn-Errortype", e.code)
		m := map[string]string{"Type": "Service", "message": e.message}
		if e.status < 500 {
			m["Type"] = "User"
		}
		if e.status == http.StatusTooManyRequests {
			m["Type"], m["Reason"] = "User", "ReservedFunctionConcurrentInvocationLimitExceeded"
		}
		body, _ = json.Marshal(m)
	case c.Service == "execute-api":
		// API Gateway's own answers: {"message"}, the error type in a header.
		h.Set("Content-Type", "application/json")
		h.Set("X-Amzn-Requestid", requestID)
		h.Set("X-Amzn-Errortype", e.code)
		body, _ = json.Marshal(map[string]string{"message": e.message})
	case r.Header.Get("X-Amz-Target") != "":
		// JSON protocol; SQS is query-compatible and also names the code in
		// x-amzn-query-error as "Code;Fault".
		h.Set("Content-Type", "application/x-amz-json-1.0")
		h.Set("X-Amzn-Requestid", requestID)
		ns := "com.amazon.coral.availability#"
		if c.Service == "sqs" && e.code != "ThrottlingException" {
			ns = "com.amazonaws.sqs#"
		}
		if c.Service == "sqs" {
			fault := "Sender"
			if e.status >= 500 {
				fault = "Receiver"
			}
			h.Set("X-Amzn-Query-Error", e.code+";"+fault)
		}
		body, _ = json.Marshal(map[string]string{"__type": ns + e.code, "message": e.message})
	default:
		// Query protocol (SQS Query, STS, CloudFormation, …).
		h.Set("Content-Type", "text/xml")
		fault := "Sender"
		if e.status >= 500 {
			fault = "Receiver"
		}
		body = fmt.Appendf([]byte(xml.Header), "<ErrorResponse><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>",
			fault, e.code, escapeXML(e.message), requestID)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}

func escapeXML(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
