package config

import (
	"errors"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Guards EnvUploadRepeatDays (docs/sources.md "Upload instead"): unset is
// DefaultUploadRepeat, 0 remembers no upload, N is N days, and anything
// else is an error naming the variable.
func TestUploadRepeatDays(t *testing.T) {
	env := func(v string) func(string) string {
		return func(name string) string {
			switch name {
			case EnvTable:
				return "t"
			case EnvBucket:
				return "b"
			case EnvUploadRepeatDays:
				return v
			}
			return ""
		}
	}
	for _, tt := range []struct {
		v    string
		want time.Duration
		bad  bool
	}{
		{"", DefaultUploadRepeat, false},
		{"0", 0, false},
		{"30", 30 * 24 * time.Hour, false},
		{"-1", 0, true},
		{"7d", 0, true},
		{"3651", 0, true},
	} {
		c, err := Load(env(tt.v))
		var ve *VarError
		isBad := errors.As(err, &ve) && ve.Var == EnvUploadRepeatDays
		if isBad != tt.bad || !tt.bad && c.UploadRepeat != tt.want {
			t.Errorf("%s=%q: %v, %v; want %v (error: %v)", EnvUploadRepeatDays, tt.v, c.UploadRepeat, err, tt.want, tt.bad)
		}
	}
}

// Guards EnvRetentionMinutes (docs/operations.md, retention): set, it
// replaces the days with whole minutes 1–1440; anything else is an error
// naming the variable.
func TestRetentionMinutes(t *testing.T) {
	env := func(days, minutes string) func(string) string {
		return func(name string) string {
			return map[string]string{EnvTable: "t", EnvBucket: "b", EnvRetentionDays: days, EnvRetentionMinutes: minutes}[name]
		}
	}
	for _, tt := range []struct {
		days, minutes string
		want          time.Duration
		bad           bool
	}{
		{"", "", DefaultRetention, false},
		{"2", "", 48 * time.Hour, false},
		{"2", "10", 10 * time.Minute, false},
		{"", "1440", 24 * time.Hour, false},
		{"", "0", 0, true},
		{"", "1441", 0, true},
		{"", "10m", 0, true},
	} {
		c, err := Load(env(tt.days, tt.minutes))
		var ve *VarError
		isBad := errors.As(err, &ve) && ve.Var == EnvRetentionMinutes
		if isBad != tt.bad || (!tt.bad && (err != nil || c.Retention != tt.want)) {
			t.Errorf("days %q minutes %q: retention %v, err %v; want %v (error %v)", tt.days, tt.minutes, c.Retention, err, tt.want, tt.bad)
		}
	}
}

// TestRetryPolicyTyped guards EnvRetryPolicy: Load reads it into a typed,
// validated api.RetryPolicy once (api.DefaultRetryPolicy when unset), and
// a policy that does not parse or validate is a *VarError naming the
// variable, so no function starts with it.
func TestRetryPolicyTyped(t *testing.T) {
	env := func(v string) func(string) string {
		return func(name string) string {
			switch name {
			case EnvTable:
				return "t"
			case EnvBucket:
				return "b"
			case EnvRetryPolicy:
				return v
			}
			return ""
		}
	}
	for _, tt := range []struct {
		v    string
		want api.RetryPolicy
		bad  bool
	}{
		{"", api.DefaultRetryPolicy, false},
		{`{"interval_seconds":1,"backoff_rate":2,"max_delay_seconds":20,"jitter":0.5}`, api.RetryPolicy{IntervalSeconds: 1, BackoffRate: 2, MaxDelaySeconds: 20, Jitter: 0.5}, false},
		{"interval_seconds=60", api.RetryPolicy{IntervalSeconds: 60, BackoffRate: 2, MaxDelaySeconds: 900, Jitter: 0.5}, false},
		{`{"interval_seconds":-1}`, api.RetryPolicy{}, true},
		{"jitter=2", api.RetryPolicy{}, true},
	} {
		c, err := Load(env(tt.v))
		var ve *VarError
		isBad := errors.As(err, &ve) && ve.Var == EnvRetryPolicy
		if isBad != tt.bad || !tt.bad && c.RetryPolicy != tt.want {
			t.Errorf("%s=%q: %+v, %v; want %+v (error: %v)", EnvRetryPolicy, tt.v, c.RetryPolicy, err, tt.want, tt.bad)
		}
	}
}

// Guards the items event source's provisioned mode
// (EnvItemsMinimumPollers, EnvItemsMaximumPollers): neither set is the
// standard mode at ItemsMaxConcurrency; both set, within Lambda's ranges
// for SQS, give PollerInvocations invocations per maximum poller; one
// without the other, or out of range, is an error naming the variable.
func TestItemsPollers(t *testing.T) {
	env := func(lo, hi string) func(string) string {
		vars := map[string]string{EnvTable: "t", EnvBucket: "b", EnvItemsMinimumPollers: lo, EnvItemsMaximumPollers: hi}
		return func(name string) string { return vars[name] }
	}
	for _, tt := range []struct {
		lo, hi      string
		provisioned bool
		concurrency int
		bad         bool
	}{
		{"", "", false, DefaultItemsMaxConcurrency, false},
		{"2", "2", true, 20, false},
		{"100", "100", true, 1000, false},
		{"20", "101", false, 0, true}, // the partitions' flow
		{"100", "2000", false, 0, true},
		{"200", "200", false, 0, true},
		{"", "50", false, 0, true},
		{"10", "", false, 0, true},
		{"1", "50", false, 0, true},
		{"201", "300", false, 0, true},
		{"20", "10", false, 0, true},
		{"20", "2001", false, 0, true},
	} {
		c, err := Load(env(tt.lo, tt.hi))
		var ve *VarError
		isBad := errors.As(err, &ve) && ve.Var == EnvItemsMaximumPollers
		if isBad != tt.bad {
			t.Errorf("pollers %q–%q: error %v, want one: %v", tt.lo, tt.hi, err, tt.bad)
			continue
		}
		if !tt.bad && (c.Provisioned() != tt.provisioned || c.ItemsConcurrency() != tt.concurrency) {
			t.Errorf("pollers %q–%q: provisioned %v, concurrency %d; want %v, %d", tt.lo, tt.hi, c.Provisioned(), c.ItemsConcurrency(), tt.provisioned, tt.concurrency)
		}
	}
}
