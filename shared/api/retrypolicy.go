package api

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// RetryPolicy is how a batch spaces the attempts of an item whose attempt
// failed transiently, in the shape of a Step Functions Retry field
// (IntervalSeconds, BackoffRate, MaxDelaySeconds, a jitter and MaxAttempts;
// AWS Step Functions developer guide, "Handling errors in Step Functions
// workflows", https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).
// The policy's max attempts is the batch's max_attempts (Batch.MaxAttempts).
//
// The wait before retry n (n ≥ 1) is IntervalSeconds × BackoffRate^(n−1),
// at most MaxDelaySeconds, then stretched by a random factor in
// [1, 1 + Jitter]: jitter spreads retries out and never brings one
// earlier, so the attempts of an item span at least ledger.RetrySpan and
// at most ledger.RetryMaxWait (the bound on how long an item waits
// between its first and last attempt). A waiting item uses no compute: its message is invisible
// on the items queue (ChangeMessageVisibility) until the wait ends.
//
// JSON names are the API's (`retry` in a submit and on a batch).
type RetryPolicy struct {
	// IntervalSeconds is the wait before the first retry: 0–MaxRetryDelaySeconds.
	IntervalSeconds float64 `json:"interval_seconds"`
	// BackoffRate multiplies the wait after each retry: 1–10.
	BackoffRate float64 `json:"backoff_rate"`
	// MaxDelaySeconds caps one wait (before jitter): IntervalSeconds–
	// MaxRetryDelaySeconds.
	MaxDelaySeconds float64 `json:"max_delay_seconds"`
	// Jitter stretches each wait by a random factor in [1, 1 + Jitter]: 0–1.
	Jitter float64 `json:"jitter"`
}

// MaxRetryDelaySeconds bounds a policy's interval and maximum delay: 12
// hours, the longest visibility timeout SQS allows a message (Amazon SQS
// developer guide, "Amazon SQS visibility timeout",
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html).
// A wait is one visibility change: it never sends the message again, so it
// never counts toward Lambda's recursive loop detection, and each retry is
// one receive, which max_attempts below the queue's maxReceiveCount covers.
const MaxRetryDelaySeconds = 12 * 60 * 60

// DefaultRetryPolicy is the stack's default (config.EnvRetryPolicy
// overrides it): 5 minutes, doubling, at most 15 minutes, jitter 0.5.
// With the default 3 attempts an item's attempts span 15 to 22.5 minutes
// (ledger.RetrySpan, ledger.RetryMaxWait), so a downstream outage shorter than 15 minutes
// fails no item: its last attempt comes after the outage whenever the
// first came during it.
var DefaultRetryPolicy = RetryPolicy{IntervalSeconds: 300, BackoffRate: 2, MaxDelaySeconds: 900, Jitter: 0.5}

// Validate names the field at fault (retry.interval_seconds, …).
func (p RetryPolicy) Validate() error {
	bad := func(field, why string) error { return &InputError{Field: "retry." + field, Reason: why} }
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case !finite(p.IntervalSeconds) || p.IntervalSeconds < 0 || p.IntervalSeconds > MaxRetryDelaySeconds:
		return bad("interval_seconds", fmt.Sprintf("%v is not within 0–%d (SQS's 12-hour visibility maximum)", p.IntervalSeconds, MaxRetryDelaySeconds))
	case !finite(p.BackoffRate) || p.BackoffRate < 1 || p.BackoffRate > 10:
		return bad("backoff_rate", fmt.Sprintf("%v is not within 1–10", p.BackoffRate))
	case !finite(p.MaxDelaySeconds) || p.MaxDelaySeconds < p.IntervalSeconds || p.MaxDelaySeconds > MaxRetryDelaySeconds:
		return bad("max_delay_seconds", fmt.Sprintf("%v is not within interval_seconds (%v)–%d", p.MaxDelaySeconds, p.IntervalSeconds, MaxRetryDelaySeconds))
	case !finite(p.Jitter) || p.Jitter < 0 || p.Jitter > 1:
		return bad("jitter", fmt.Sprintf("%v is not within 0–1", p.Jitter))
	}
	return nil
}

// ParseRetryPolicy reads a retry policy written as its JSON object (every
// field given) or as name=value pairs separated by commas, the form of the
// CLI's --retry, an upload's x-amz-meta-retry and the stack's retryPolicy
// context ("interval_seconds=60,jitter=0.25"; a field not named keeps
// DefaultRetryPolicy's value). The result is validated; an error names
// the field.
func ParseRetryPolicy(s string) (RetryPolicy, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		var p RetryPolicy
		if err := dec.Decode(&p); err != nil {
			return p, &InputError{Field: "retry", Reason: "not a retry policy: " + err.Error()}
		}
		return p, p.Validate()
	}
	p := DefaultRetryPolicy
	fields := map[string]*float64{"interval_seconds": &p.IntervalSeconds, "backoff_rate": &p.BackoffRate, "max_delay_seconds": &p.MaxDelaySeconds, "jitter": &p.Jitter}
	for pair := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		f := fields[strings.TrimSpace(name)]
		if !ok || f == nil {
			return p, &InputError{Field: "retry", Reason: fmt.Sprintf("%q: want name=value with a name of interval_seconds, backoff_rate, max_delay_seconds, jitter", pair)}
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return p, &InputError{Field: "retry." + strings.TrimSpace(name), Reason: fmt.Sprintf("%q is not a number", value)}
		}
		*f = v
	}
	return p, p.Validate()
}

// String is p as ParseRetryPolicy's name=value pairs.
func (p RetryPolicy) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return "interval_seconds=" + f(p.IntervalSeconds) + ",backoff_rate=" + f(p.BackoffRate) + ",max_delay_seconds=" + f(p.MaxDelaySeconds) + ",jitter=" + f(p.Jitter)
}
