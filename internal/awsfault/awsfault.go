// Package awsfault sets how bulkrun's AWS clients retry, and tells AWS's
// transient faults (throttling, 5xx, timeouts, connection errors) apart
// from the rest, so that the domain can treat them as "try again later,
// not the item's fault" (ledger.ErrUnavailable).
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
// retryable-error classification (package retry, DefaultRetryables).
package awsfault

import (
	"context"
	"errors"
	"fmt"
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
// the client-side retry quota off (ratelimit.None), MaxAttempts tries and
// backoff capped at MaxBackoff. Safe for concurrent use; one per client.
func Retryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.RateLimiter = ratelimit.None
		o.MaxAttempts = MaxAttempts
		o.MaxBackoff = MaxBackoff
	})
}

// Unavailable reports whether err is a transient AWS fault: one the
// standard retryer would retry (throttling codes such as
// ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded, SlowDown; HTTP 429, 500, 502, 503, 504; timeouts;
// connection errors) or a client-side retry-quota error, after the SDK's
// own tries. A cancelled or expired context is not (the caller gave up).
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var quota ratelimit.QuotaExceededError
	if errors.As(err, &quota) {
		return true
	}
	return retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}

// Tag is a client API option (append it to the client's APIOptions) that
// wraps every operation error for which Unavailable is true, and every
// error of an operation whose context's deadline passed (the service did
// not answer, retries included, within the time the caller allowed, e.g.
// a store's per-call timeout), so that errors.Is(err, ledger.ErrUnavailable)
// holds; the SDK error stays in the chain (errors.As still finds it). An
// explicitly cancelled context is not tagged.
func Tag(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("bulkrunTagUnavailable",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if err != nil && (Unavailable(err) || errors.Is(ctx.Err(), context.DeadlineExceeded)) {
				err = fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
			}
			return out, md, err
		}), middleware.Before)
}
