package ledger

import (
	"math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/internal/retry"
	"github.com/bulkrun/bulkrun/shared/api"
)

// retrySchedule is p's nominal schedule (no jitter).
func retrySchedule(p api.RetryPolicy) retry.Schedule {
	return retry.Schedule{Interval: seconds(p.IntervalSeconds), BackoffRate: p.BackoffRate, MaxDelay: seconds(p.MaxDelaySeconds)}
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// RetryNominal is the wait before retry n (n ≥ 1) of policy p without
// jitter: interval_seconds × backoff_rate^(n−1), at most max_delay_seconds.
func RetryNominal(p api.RetryPolicy, n int) time.Duration {
	return retrySchedule(p).Delay(n)
}

// RetryDelay is the wait before retry n (n ≥ 1) of policy p:
// RetryNominal stretched by a random factor in [1, 1 + jitter], at most
// api.MaxRetryDelaySeconds.
func RetryDelay(p api.RetryPolicy, n int) time.Duration {
	d := RetryNominal(p, n)
	if p.Jitter > 0 {
		d += time.Duration(rand.Float64() * p.Jitter * float64(d))
	}
	return min(d, api.MaxRetryDelaySeconds*time.Second)
}

// RetrySpan is the least time between an item's first and last attempt
// when every attempt fails transiently: the nominal waits before retries
// 1 … maxAttempts−1.
func RetrySpan(p api.RetryPolicy, maxAttempts int) time.Duration {
	var d time.Duration
	for n := 1; n < maxAttempts; n++ {
		d += RetryNominal(p, n)
	}
	return d
}

// RetryMaxWait is the most an item waits between its first and last
// attempt for its retries under policy p: RetrySpan × (1 + jitter). A receiver's Retry-After
// may ask for more (at most pipeline.MaxRetryAfter a retry), and a
// throttled attempt waits besides (at most pipeline.MaxThrottleWait a
// streak, see Conclude).
func RetryMaxWait(p api.RetryPolicy, maxAttempts int) time.Duration {
	return time.Duration(float64(RetrySpan(p, maxAttempts)) * (1 + p.Jitter))
}
