// Package awsfault classifies every error of every AWS call bulkrun
// makes, from one table (Table: each operation's errors that matter to
// bulkrun, with their class and the AWS documentation that says so; the
// same table is docs/design/errors.md), and sets how bulkrun's clients
// retry from it: the retryer retries in place what the table says is
// retried (a DynamoDB transaction cancelled for a conflicting one, which
// no SDK retries) and nothing it says is not (a Lambda 502
// InvalidRuntimeException), and the adapters tag what outlasts the tries
// as ledger.ErrUnavailable with its class (*ledger.FaultError), so that
// the domain treats it as "not the item's fault".
//
// The SDK's standard retryer keeps a client-side retry quota (a token
// bucket of 500, 5 tokens per throttled retry, 14 per other retry): under
// sustained DynamoDB throttling a busy client drains it within seconds, and
// from then on every retry fails at once with "retry quota exceeded". The
// AWS SDK for Go v2 developer guide, "Retries and Timeouts"
// (https://docs.aws.amazon.com/sdk-for-go/v2/developer-guide/configure-retries-timeouts.html,
// client-side rate limiting), and package retry's documentation describe
// turning the quota off with ratelimit.None; the retryer here does that
// and keeps the standard retryer's exponential backoff with jitter and its
// retryable-error classification (package retry, DefaultRetryables), with
// the table's decision before the SDK's own code and status checks.
package awsfault

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Retry settings of Retryer.
const (
	// MaxAttempts is how many times the SDK sends one request (first try
	// included) before returning a retryable error: 6.
	MaxAttempts = 6
	// MaxBackoff caps the SDK's delay between two tries: 5 s (the standard
	// retryer's default is 20 s, too long inside an invocation).
	MaxBackoff = 5 * time.Second
)

// Retryer returns the retryer of bulkrun's clients: retry.NewStandard with
// the client-side retry quota off (ratelimit.None), MaxAttempts tries,
// backoff capped at MaxBackoff, and Table's decision (retryable) after the
// SDK's checks of a cancelled call and of an error that says itself
// whether to retry (a clock skew the SDK corrects) and before its checks
// of codes, statuses and connections. Safe for concurrent use; one per
// client.
func Retryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.RateLimiter = ratelimit.None
		o.MaxAttempts = MaxAttempts
		o.MaxBackoff = MaxBackoff
		checks := make([]retry.IsErrorRetryable, 0, len(o.Retryables)+1)
		checks = append(checks, retry.NoRetryCanceledError{}, retry.RetryableError{}, retry.IsErrorRetryableFunc(retryable))
		for _, c := range o.Retryables {
			switch c.(type) {
			case retry.NoRetryCanceledError, retry.RetryableError:
			default:
				checks = append(checks, c)
			}
		}
		o.Retryables = checks
	})
}

// Unavailable reports whether err is a transient AWS fault after the
// SDK's own tries: a *ledger.FaultError of class retry, backoff or pause
// (Tag), an error the standard retryer would retry (throttling codes such
// as ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded, SlowDown; HTTP 429, 500, 502, 503, 504; timeouts;
// connection errors) unless Table says it is not, or a client-side
// retry-quota error. A cancelled or expired context is not (the caller
// gave up).
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if f, ok := ledger.FaultOf(err); ok {
		return f.Class.Unavailable()
	}
	var quota ratelimit.QuotaExceededError
	if errors.As(err, &quota) {
		return true
	}
	switch retryable(err) {
	case aws.TrueTernary:
		return true
	case aws.FalseTernary:
		return false
	}
	return retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}

// Tag returns a client API option for the clients of service (Row.Service's
// names: "dynamodb", "s3", …; append it to the client's APIOptions) that
// wraps every operation error whose class (ClassOf) is retry, backoff or
// pause in a *ledger.FaultError naming the service, the operation and the
// code, so that errors.Is(err, ledger.ErrUnavailable) holds; so is every
// error of an operation whose context's deadline passed (the service did
// not answer, retries included, within the time the caller allowed, e.g.
// a store's per-call timeout), as class retry with no code. The SDK error
// stays in the chain (errors.As still finds it). An explicitly cancelled
// context is not tagged, nor an error of class permanent or conflict,
// which the adapters translate.
func Tag(service string) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		operation := stack.ID()
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("bulkrunTagUnavailable",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if err == nil {
					return out, md, nil
				}
				class := ClassOf(service, operation, err)
				if errors.Is(ctx.Err(), context.DeadlineExceeded) && !class.Unavailable() {
					class = ledger.FaultRetry
				}
				var quota ratelimit.QuotaExceededError
				if errors.As(err, &quota) {
					class = ledger.FaultBackoff
				}
				if class.Unavailable() {
					err = &ledger.FaultError{Service: service, Operation: operation, Code: CodeOf(service, operation, err), Class: class, Err: err}
				}
				return out, md, err
			}), middleware.Before)
	}
}
