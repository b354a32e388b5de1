// Package retry is bulkrun's one retry schedule: exponential delays with
// jitter, computed by cenkalti/backoff's ExponentialBackOff, in the shape
// of a Step Functions Retry field (IntervalSeconds, BackoffRate,
// MaxDelaySeconds and a jitter; AWS Step Functions developer guide,
// "Handling errors in Step Functions workflows",
// https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).
// Every backoff in bulkrun's code is a Schedule: an item's retry after a
// transient error, a message sent again while AWS is unavailable, an
// outcome write tried again, a message for an item under another lease,
// a wait for a concurrency slot, an SQS batch resend, the client's submit
// retries. Not API.
package retry

import (
	"math"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Schedule is an exponential retry schedule: the delay before retry n
// (n ≥ 1) is Interval × BackoffRate^(n−1), at most MaxDelay, then
// randomized uniformly within ±Jitter of itself (cenkalti/backoff's
// RandomizationFactor: with Jitter 0.5 a 2 s delay is one of [1 s, 3 s]).
// The zero Schedule retries at once.
type Schedule struct {
	// Interval is the first delay.
	Interval time.Duration
	// BackoffRate multiplies the delay after each retry; below 1 (0
	// included) it is 2.
	BackoffRate float64
	// MaxDelay caps the delay before jitter; 0: no cap.
	MaxDelay time.Duration
	// Jitter is the randomization factor, 0–1; 0: exact delays.
	Jitter float64
}

// Delay returns the delay before retry n; n < 1 counts as 1. Safe for
// concurrent use (each call has its own generator).
func (s Schedule) Delay(n int) time.Duration {
	if s.Interval <= 0 {
		return 0
	}
	rate := s.BackoffRate
	if rate < 1 {
		rate = 2
	}
	maxDelay := s.MaxDelay
	if maxDelay <= 0 {
		maxDelay = time.Duration(math.MaxInt64 / 4)
	}
	b := &backoff.ExponentialBackOff{InitialInterval: min(s.Interval, maxDelay), RandomizationFactor: min(max(s.Jitter, 0), 1),
		Multiplier: rate, MaxInterval: maxDelay}
	b.Reset()
	d := b.NextBackOff()
	for i := 1; i < n; i++ {
		d = b.NextBackOff()
	}
	return d
}
