package awsfault

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// answer is what an error tells of AWS's answer.
type answer struct {
	code, message string
	status        int
	reasons       []string // a cancelled transaction's reasons, "None" left out
	none          bool     // no answer came: a timeout or a connection error
}

func answerOf(err error) answer {
	var a answer
	var ae smithy.APIError
	if errors.As(err, &ae) {
		a.code, a.message = ae.ErrorCode(), ae.ErrorMessage()
	}
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &st) {
		a.status = st.HTTPStatusCode()
	}
	if a.code == "TransactionCanceledException" {
		a.reasons = cancellationReasons(ae)
	}
	if a.code == "" && a.status == 0 {
		var nerr net.Error
		a.none = errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout() ||
			retry.RetryableConnectionError{}.IsErrorRetryable(err) == aws.TrueTernary
	}
	return a
}

// cancellationReasons returns the codes of a TransactionCanceledException's
// CancellationReasons ([]types.CancellationReason, each with a *string
// Code), "None" left out. It reads them by reflection so that this
// package links no DynamoDB types: the CLI, which links the S3 adapter
// and so this package, links no DynamoDB package at all
// (TestContractCLILinksNoServer).
func cancellationReasons(ae smithy.APIError) []string {
	v := reflect.ValueOf(ae)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	rs := v.FieldByName("CancellationReasons")
	if rs.Kind() != reflect.Slice {
		return nil
	}
	var out []string
	for i := range rs.Len() {
		r := reflect.Indirect(rs.Index(i))
		if r.Kind() != reflect.Struct {
			continue
		}
		c := r.FieldByName("Code")
		if c.Kind() != reflect.Pointer || c.IsNil() || c.Elem().Kind() != reflect.String {
			continue
		}
		if code := c.Elem().String(); code != "" && code != "None" {
			out = append(out, code)
		}
	}
	return out
}

// codeMatches reports whether row r (an API error's row) holds code and
// message.
func (r Row) codeMatches(code, message string) bool {
	return r.Code != "" && (r.Code == code || r.Alias != "" && r.Alias == code) &&
		(r.Message == "" || strings.Contains(message, r.Message))
}

func (r Row) appliesTo(service, operation string) bool {
	return !r.Function && r.Service == service && (r.Operations == nil || operation == "" || slices.Contains(r.Operations, operation))
}

// rank orders the classes of a cancelled transaction's reasons: the
// highest decides (a failed condition over anything else; a refusal as
// written over a fault of the moment).
func rank(c ledger.FaultClass) int {
	return map[ledger.FaultClass]int{inPlace: 1, backoff: 2, pause: 3, permanent: 4, conflict: 5}[c]
}

// Classify returns the row of Table that err, returned by operation of
// service (Row.Service's names), matches, and whether one does. A
// TransactionCanceledException is classified by its cancellation reasons
// (each by its row, or a reason with no row by the row of the code of the
// same name): the reason whose class ranks highest decides — conflict,
// permanent, pause, backoff, retry. An error that came with no answer
// matches the service's row of Status 0. A cancelled context matches
// nothing (the caller gave up).
func Classify(service, operation string, err error) (Row, bool) {
	if err == nil || errors.Is(err, context.Canceled) {
		return Row{}, false
	}
	return classifyAnswer(service, operation, answerOf(err))
}

// ClassifyCode is Classify for an error known by its parts: its code, its
// message and the HTTP status it came with (0 and code "": no answer).
func ClassifyCode(service, operation, code, message string, status int) (Row, bool) {
	return classifyAnswer(service, operation, answer{code: code, message: message, status: status, none: code == "" && status == 0})
}

func classifyAnswer(service, operation string, a answer) (Row, bool) {
	if a.code == "TransactionCanceledException" && len(a.reasons) > 0 {
		return cancellation(service, operation, a.reasons)
	}
	for _, r := range Table {
		if r.Reason == "" && r.appliesTo(service, operation) && r.codeMatches(a.code, a.message) {
			return r, true
		}
	}
	for _, r := range Table {
		if r.Code == "" && r.appliesTo(service, operation) && (r.Status != 0 && r.Status == a.status || r.Status == 0 && a.none) {
			return r, true
		}
	}
	return Row{}, false
}

func cancellation(service, operation string, reasons []string) (Row, bool) {
	var best Row
	found := false
	for _, reason := range reasons {
		var row Row
		ok := false
		for _, r := range Table {
			if r.Reason == reason && r.appliesTo(service, operation) && r.Code == "TransactionCanceledException" {
				row, ok = r, true
				break
			}
		}
		if !ok {
			row, ok = Classify(service, operation, &smithy.GenericAPIError{Code: reason})
		}
		if ok && (!found || rank(row.Class) > rank(best.Class)) {
			best, found = row, true
		}
	}
	return best, found
}

// ClassifyFunction returns the row of a Lambda function error (Invoke's
// X-Amz-Function-Error) of errorType with message, and whether one
// matches: the Lambda service's and runtimes' own error types. A
// function's own error types (an exception its code raised) have none.
func ClassifyFunction(errorType, message string) (Row, bool) {
	for _, r := range Table {
		if r.Function && r.Code == errorType && (r.Message == "" || strings.Contains(message, r.Message)) {
			return r, true
		}
	}
	return Row{}, false
}

// ClassOf returns err's class as Classify finds it; an error no row
// matches is classified by what AWS answered: no answer is retry, 429
// backoff, a 5xx retry, anything else (another 4xx, an error of the SDK
// itself) permanent. A cancelled context is "" (the caller gave up).
func ClassOf(service, operation string, err error) ledger.FaultClass {
	if err == nil || errors.Is(err, context.Canceled) {
		return ""
	}
	if r, ok := Classify(service, operation, err); ok {
		return r.Class
	}
	a := answerOf(err)
	switch {
	case a.none:
		return inPlace
	case a.status == 429:
		return backoff
	case a.status >= 500:
		return inPlace
	}
	return permanent
}

// CodeOf is the code a FaultError names for err: its error code, a
// cancelled transaction's with its deciding reason in brackets
// ("TransactionCanceledException[TransactionConflict]"), or "" for no
// answer.
func CodeOf(service, operation string, err error) string {
	a := answerOf(err)
	if a.code == "TransactionCanceledException" && len(a.reasons) > 0 {
		if r, ok := cancellation(service, operation, a.reasons); ok {
			reason := r.Reason
			if reason == "" {
				reason = r.Code
			}
			return a.code + "[" + reason + "]"
		}
	}
	return a.code
}

// retryable is the retryer's check from Table: an API error whose row
// (in any service, whatever its operation) is of class retry or backoff
// is retried, one of another class is not (a Lambda 502
// InvalidRuntimeException is refused the same way every time, a paused
// key does not come back within the tries); an error no row names is
// left to the SDK's own checks. TestRetryDecisionPerCode holds that rows
// of one code agree.
func retryable(err error) aws.Ternary {
	a := answerOf(err)
	if a.code == "" {
		return aws.UnknownTernary
	}
	decide := func(c ledger.FaultClass) aws.Ternary { return aws.BoolTernary(c == inPlace || c == backoff) }
	if a.code == "TransactionCanceledException" && len(a.reasons) > 0 {
		if r, ok := cancellation("dynamodb", "TransactWriteItems", a.reasons); ok {
			return decide(r.Class)
		}
		return aws.FalseTernary
	}
	for _, r := range Table {
		if !r.Function && r.Reason == "" && r.codeMatches(a.code, a.message) {
			return decide(r.Class)
		}
	}
	return aws.UnknownTernary
}

// ReasonClass is the class of one cancellation reason of a
// TransactionCanceledException of operation of service (its row, or the
// row of the code of the same name); "" for "None" and for a reason no
// row names.
func ReasonClass(service, operation, reason string) ledger.FaultClass {
	if reason == "" || reason == "None" {
		return ""
	}
	if r, ok := cancellation(service, operation, []string{reason}); ok {
		return r.Class
	}
	return ""
}
