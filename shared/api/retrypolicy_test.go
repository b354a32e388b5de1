package api

import (
	"errors"
	"testing"
)

func TestParseRetryPolicy(t *testing.T) {
	p, err := ParseRetryPolicy(" interval_seconds=60, jitter=0 ")
	if err != nil || p != (RetryPolicy{IntervalSeconds: 60, BackoffRate: 2, MaxDelaySeconds: 900, Jitter: 0}) {
		t.Fatalf("pairs: %+v %v", p, err)
	}
	if back, err := ParseRetryPolicy(p.String()); err != nil || back != p {
		t.Fatalf("String round trip: %+v %v", back, err)
	}
	p, err = ParseRetryPolicy(`{"interval_seconds":1,"backoff_rate":2,"max_delay_seconds":20,"jitter":0.5}`)
	if err != nil || p.MaxDelaySeconds != 20 {
		t.Fatalf("JSON: %+v %v", p, err)
	}
	for in, field := range map[string]string{
		"interval_seconds=-1":                      "retry.interval_seconds",
		"interval_seconds=50000":                   "retry.interval_seconds",
		"backoff_rate=0.5":                         "retry.backoff_rate",
		"interval_seconds=100,max_delay_seconds=5": "retry.max_delay_seconds",
		"jitter=2":                                 "retry.jitter",
		"jitter=x":                                 "retry.jitter",
		"tries=3":                                  "retry",
		`{"interval_seconds":1}`:                   "retry.backoff_rate",
		`{"interval_seconds":1,"max_attempts":3}`:  "retry",
	} {
		_, err := ParseRetryPolicy(in)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: %v, want an InputError naming %s", in, err, field)
		}
	}
}
