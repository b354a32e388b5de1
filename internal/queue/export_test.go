package queue

import "time"

// SetResendInterval sets the first delay between the sends of entries SQS
// failed, for tests, and returns what puts it back.
func SetResendInterval(d time.Duration) (restore func()) {
	old := resendRetry
	resendRetry.Interval = d
	return func() { resendRetry = old }
}
