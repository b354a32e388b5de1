package api

import (
	"errors"
	"testing"
)

// TestParseRate guards the CLI's --rate and the upload's x-amz-meta-rate:
// requests a second, optionally /s, optionally @key; bad input names the
// field given.
func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Rate
	}{{"50", Rate{RequestsPerSecond: 50}}, {"50/s", Rate{RequestsPerSecond: 50}}, {" 0.5@api.example.com ", Rate{Key: "api.example.com", RequestsPerSecond: 0.5}},
		{"10000@a:b/c_d-e@f", Rate{Key: "a:b/c_d-e@f", RequestsPerSecond: 10000}}, {"NaN", Rate{}}} {
		got, err := ParseRate("--rate", c.in)
		if c.want == (Rate{}) {
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != "--rate" {
				t.Errorf("ParseRate(%q) = %+v, %v; want an error naming --rate", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if back, err := ParseRate("x", got.Spec()); err != nil || back != got {
			t.Errorf("ParseRate(Spec(%+v)) = %+v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", "fast", "0", "-1", "10001", "0.001", "50@", "50@a b", "50@a#b", "50@batch:other-batch"} {
		if r, err := ParseRate("x-amz-meta-rate", bad); err == nil {
			t.Errorf("ParseRate(%q) = %+v, want an error", bad, r)
		}
	}
}
