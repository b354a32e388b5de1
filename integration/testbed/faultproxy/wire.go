package faultproxy

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"

	"github.com/bulkrun/bulkrun/internal/awsfault"
)

// An errorShape is one AWS error answer as the service sends it.
type errorShape struct {
	status  int
	code    string
	message string
	// shape is the error's shape name in a JSON protocol's __type when it
	// differs from code (SQS: KmsDisabled for KMS.DisabledException,
	// whose code travels in X-Amzn-Query-Error).
	shape string
	// reasons are a DynamoDB TransactionCanceledException's cancellation
	// reasons.
	reasons []string
}

// validateError checks a KindError rule: its code is one of bulkrun's
// error table (awsfault.Table) for its service, and reasons go only with
// DynamoDB's TransactionCanceledException.
func validateError(r Rule) error {
	if r.Code == "" {
		return fmt.Errorf("code: kind error needs one (a code of awsfault.Table for %q)", r.Service)
	}
	if _, ok := tableRow(strings.ToLower(r.Service), r.Code); !ok {
		return fmt.Errorf("code: %q is not an error of %q in awsfault.Table", r.Code, r.Service)
	}
	if r.Status != 0 && (r.Status < 400 || r.Status > 599) {
		return fmt.Errorf("status: %d is not an error status", r.Status)
	}
	if len(r.Reasons) > 0 && (r.Code != "TransactionCanceledException" || !strings.EqualFold(r.Service, "dynamodb")) {
		return fmt.Errorf("reasons: only for dynamodb's TransactionCanceledException")
	}
	return nil
}

// tableRow returns the first row of awsfault.Table of service with code
// (or its alias).
func tableRow(service, code string) (awsfault.Row, bool) {
	for _, r := range awsfault.Table {
		if r.Service == service && !r.Function && (r.Code == code || r.Alias == code) {
			return r, true
		}
	}
	return awsfault.Row{}, false
}

// tableShape is the answer of a KindError rule to a call of service with
// request body body.
func tableShape(service string, rule Rule, body []byte) errorShape {
	row, _ := tableRow(service, rule.Code)
	e := errorShape{status: row.Status, code: rule.Code, message: rule.Message}
	if rule.Status != 0 {
		e.status = rule.Status
	}
	if e.status == 0 {
		e.status = http.StatusBadRequest
	}
	if e.message == "" {
		e.message = rule.Code
	}
	if service == "sqs" && row.Alias != "" && row.Code == rule.Code && strings.Contains(row.Code, ".") {
		e.shape = row.Alias
	}
	if rule.Code == "TransactionCanceledException" {
		var in struct{ TransactItems []json.RawMessage }
		_ = json.Unmarshal(body, &in)
		for i := range max(len(in.TransactItems), len(rule.Reasons)) {
			reason := "None"
			if i < len(rule.Reasons) {
				reason = rule.Reasons[i]
			}
			e.reasons = append(e.reasons, reason)
		}
		e.message = "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(e.reasons, ", ") + "]"
	}
	return e
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
		{status: 400, code: "ProvisionedThroughputExceededException", message: "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."},
		{status: 400, code: "ThrottlingException", message: "Rate of requests exceeds the allowed throughput."},
		{status: 400, code: "RequestLimitExceeded", message: "Throughput exceeds the current throughput limit for your account."},
	},
	"sqs": {
		{status: 403, code: "RequestThrottled", message: "Request is throttled."},
		{status: 400, code: "ThrottlingException", message: "Rate exceeded"},
	},
	"s3":     {{status: 503, code: "SlowDown", message: "Please reduce your request rate."}},
	"lambda": {{status: 429, code: "TooManyRequestsException", message: "Rate Exceeded."}},
	// API Gateway: its stage throttle's answer (APIGateway).
	"execute-api": {{status: 429, code: "TooManyRequestsException", message: "Too Many Requests"}},
	"":            {{status: 400, code: "ThrottlingException", message: "Rate exceeded"}},
}

// serverErrors gives each service's 500 answer.
var serverErrors = map[string]errorShape{
	"dynamodb": {status: 500, code: "InternalServerError", message: "Internal server error"},
	"sqs":      {status: 500, code: "InternalError", message: "We encountered an internal error. Please try again."},
	"s3":       {status: 500, code: "InternalError", message: "We encountered an internal error. Please try again."},
	"lambda":   {status: 500, code: "ServiceException", message: "The AWS Lambda service encountered an internal error."},
	// API Gateway's answer when the integration fails.
	"execute-api": {status: 502, code: "InternalServerErrorException", message: "Internal server error"},
	"":            {status: 500, code: "InternalFailure", message: "The request processing has failed because of an unknown error, exception or failure."},
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
		switch e.code {
		case "ThrottlingException":
			ns = "com.amazon.coral.availability#"
		case "ExpiredTokenException", "InvalidSignatureException", "UnrecognizedClientException":
			ns = "com.amazon.coral.service#"
		}
		if len(e.reasons) > 0 {
			type reason struct{ Code, Message string }
			rs := make([]reason, len(e.reasons))
			for i, c := range e.reasons {
				rs[i] = reason{Code: c}
				if c != "None" {
					rs[i].Message = c
				}
			}
			body, _ = json.Marshal(struct {
				Type    string   `json:"__type"`
				Message string   `json:"Message"`
				Reasons []reason `json:"CancellationReasons"`
			}{ns + e.code, e.message, rs})
		} else {
			body, _ = json.Marshal(map[string]string{"__type": ns + e.code, "message": e.message})
		}
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
		typ := e.code
		if e.shape != "" {
			typ = e.shape
		}
		if c.Service == "sqs" {
			fault := "Sender"
			if e.status >= 500 {
				fault = "Receiver"
			}
			h.Set("X-Amzn-Query-Error", e.code+";"+fault)
		}
		body, _ = json.Marshal(map[string]string{"__type": ns + typ, "message": e.message})
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
