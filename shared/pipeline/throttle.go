package pipeline

import (
	"errors"
	"time"
)

// Errors of the services a pipeline calls on the item's behalf (Lambda
// Invoke, the webhook's HTTP receiver, Secrets Manager, SSM Parameter
// Store) are classified from each service's documentation into four
// kinds; docs/pipelines.md, "Errors of the services bulkrun calls", has
// the table with every code and its source:
//
//   - throttled (*ThrottledError): the service refused the call for its
//     rate or capacity (Lambda's 429 TooManyRequestsException, an HTTP 429
//     or 503, Secrets Manager's and SSM's ThrottlingException). Nothing is
//     wrong with the item: it backs off, at most MaxThrottleWait in all and
//     never past the item's deadline.
//   - credential rejected (*CredentialRejectedError, under a
//     *PermanentError): the receiver refused the credential the call
//     carried (HTTP 401 or 403). When that credential came from a secret
//     reference that reads another value now (bypassing the cache: a
//     secret rotated mid-batch), the attempt ends there and its retry,
//     which counts no attempt, sends the new value; else the item fails.
//   - permanent (*PermanentError): the call will fail the same way every
//     time (a function that does not exist, a payload over Lambda's 6 MB,
//     a KMS key that is disabled, an HTTP 4xx).
//   - transient (any other error): a retry may succeed (a 5xx, a timeout,
//     a lost connection, a function being updated).

// MaxThrottleWait is the documented ceiling of the back-off a throttled
// item waits in all before its throttling counts as an ordinary transient
// failure: 15 minutes, the longest a Lambda invocation may run (AWS Lambda
// quotas, "Function timeout", 900 seconds,
// https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html),
// so a service throttling for longer than any one item may take is
// reported rather than waited out for ever.
const MaxThrottleWait = 15 * time.Minute

// ThrottledError is a service refusing a call made on the item's behalf
// for its rate or capacity: Service names it ("lambda", "http",
// "secretsmanager", "ssm"), Code is the service's error code or HTTP
// status ("TooManyRequestsException", "429"), Delay the wait the service
// asked for (Retry-After; 0 when it named none). Classify reports it as
// transient; a worker that can back off without using an attempt branches
// on it with errors.As (ThrottleOf).
type ThrottledError struct {
	Service string
	Code    string
	Delay   time.Duration
	Err     error
}

func (e *ThrottledError) Error() string { return e.Err.Error() }
func (e *ThrottledError) Unwrap() error { return e.Err }

// Throttled wraps err as a *ThrottledError of service and code, asking
// for delay (clamped to 0–MaxRetryAfter). nil stays nil.
func Throttled(service, code string, delay time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &ThrottledError{Service: service, Code: code, Delay: min(max(delay, 0), MaxRetryAfter), Err: err}
}

// ThrottleOf returns the first *ThrottledError in err's chain, unless a
// *PermanentError or *QuarantineError wraps it (the pipeline decided).
func ThrottleOf(err error) (*ThrottledError, bool) {
	var t *ThrottledError
	if !errors.As(err, &t) || Classify(err) != ClassTransient {
		return nil, false
	}
	return t, true
}

// CredentialRejectedError is a receiver refusing the credential a call
// carried (HTTP 401 Unauthorized or 403 Forbidden, RFC 9110 §15.5.2 and
// §15.5.4). It is returned under a *PermanentError: a credential the
// receiver refuses fails every retry, unless it changed, which is why a
// worker that resolved it from a secret reference reads it again
// (bypassing its cache) and, when it changed, retries the item with the
// new value in its next attempt (one call per attempt), counting none.
type CredentialRejectedError struct{ Err error }

func (e *CredentialRejectedError) Error() string { return e.Err.Error() }
func (e *CredentialRejectedError) Unwrap() error { return e.Err }

// CredentialRejected wraps err as a permanent *CredentialRejectedError.
// nil stays nil.
func CredentialRejected(err error) error {
	if err == nil {
		return nil
	}
	return Permanent(&CredentialRejectedError{Err: err})
}

// IsCredentialRejected reports whether err's chain holds a
// *CredentialRejectedError.
func IsCredentialRejected(err error) bool {
	var c *CredentialRejectedError
	return errors.As(err, &c)
}
