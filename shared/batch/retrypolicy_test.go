package batch

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestDefaultRetryPolicySpansAnOutage guards the promise of the defaults:
// with the default 3 attempts an item's attempts span at least 15 minutes
// whatever the jitter draws (jitter only lengthens a wait), so a
// downstream outage of 5 (or up to 15) minutes fails no item, and the
// stated bound on waiting holds.
func TestDefaultRetryPolicySpansAnOutage(t *testing.T) {
	p := DefaultRetryPolicy
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := p.NominalSpan(3); got != 15*time.Minute {
		t.Fatalf("nominal span of 3 attempts %s, want 15m", got)
	}
	if got := p.MaxWait(3); got != 22*time.Minute+30*time.Second {
		t.Fatalf("max wait of 3 attempts %s, want 22m30s", got)
	}
	for range 1000 {
		span := p.Delay(1) + p.Delay(2)
		if span < 15*time.Minute || span > p.MaxWait(3) {
			t.Fatalf("a drawn span %s outside [15m, %s]", span, p.MaxWait(3))
		}
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := RetryPolicy{IntervalSeconds: 2, BackoffRate: 3, MaxDelaySeconds: 30}
	for n, want := range map[int]time.Duration{1: 2 * time.Second, 2: 6 * time.Second, 3: 18 * time.Second, 4: 30 * time.Second, 9: 30 * time.Second} {
		if got := p.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	if got := (RetryPolicy{IntervalSeconds: 5, BackoffRate: 1, MaxDelaySeconds: 5}).Delay(4); got != 5*time.Second {
		t.Errorf("rate 1: Delay(4) = %s, want 5s", got)
	}
	if got := (RetryPolicy{BackoffRate: 1}).Delay(3); got != 0 {
		t.Errorf("zero interval: %s", got)
	}
}

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

// A repeated submit with another retry policy is another plan.
func TestSameSettingsRetry(t *testing.T) {
	a, b := Batch{Retry: new(DefaultRetryPolicy)}, Batch{Retry: &RetryPolicy{IntervalSeconds: 1, BackoffRate: 2, MaxDelaySeconds: 2}}
	if field, _, _ := sameSettings(a, b); field != "retry" {
		t.Fatalf("field %q, want retry", field)
	}
	if field, _, _ := sameSettings(a, Batch{Retry: new(DefaultRetryPolicy)}); field != "" {
		t.Fatalf("the same policy differs in %q", field)
	}
}

// A webhook timeout_ms at or above what an item invocation leaves a call
// is accepted with a warning naming the option and the bound.
func TestSubmitWarnsOfATimeoutAboveTheItemTimeout(t *testing.T) {
	s := &Submitter{ItemTimeout: 5 * time.Minute}
	for opts, warned := range map[string]bool{`{"timeout_ms":290000}`: true, `{"timeout_ms":289999}`: false, `{"url":"x"}`: false, `{"timeout_ms":900000}`: true} {
		w := s.Warnings(SubmitRequest{Options: []byte(opts)})
		if (len(w) == 1) != warned || warned && !strings.Contains(w[0], "pipeline_options.timeout_ms") {
			t.Errorf("%s: warnings %q, want warned %v", opts, w, warned)
		}
	}
	if w := (&Submitter{}).Warnings(SubmitRequest{Options: []byte(`{"timeout_ms":900000}`)}); len(w) != 0 {
		t.Errorf("unknown item timeout: %q", w)
	}
}
