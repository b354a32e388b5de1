package config

import (
	"errors"
	"testing"
	"time"
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
