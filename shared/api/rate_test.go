package api

import (
	"encoding/json"
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

// TestRateEmptyKeyRefused guards the API's rate: a "key" given as "" (or
// blanks) is refused naming rate.key, as the CLI refuses "50@"; a rate
// without a key, or with one, is valid and reads back the same.
func TestRateEmptyKeyRefused(t *testing.T) {
	for _, in := range []string{`{"key": "", "requests_per_second": 5}`, `{"requests_per_second": 5, "key": "  "}`} {
		var r Rate
		if err := json.Unmarshal([]byte(in), &r); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var ie *InputError
		if err := r.Validate(); !errors.As(err, &ie) || ie.Field != "rate.key" {
			t.Errorf("%s: Validate = %v, want an error naming rate.key", in, err)
		}
	}
	for in, want := range map[string]Rate{
		`{"requests_per_second": 5}`:                           {RequestsPerSecond: 5},
		`{"key": "api.example.com", "requests_per_second": 5}`: {Key: "api.example.com", RequestsPerSecond: 5},
	} {
		var r Rate
		if err := json.Unmarshal([]byte(in), &r); err != nil || r != want || r.Validate() != nil {
			t.Errorf("%s: %+v, %v, Validate %v; want %+v, valid", in, r, err, r.Validate(), want)
		}
		b, _ := json.Marshal(r)
		var back Rate
		if err := json.Unmarshal(b, &back); err != nil || back != r {
			t.Errorf("%s: round trip %s → %+v, %v", in, b, back, err)
		}
	}
}
