package api

import (
	"encoding/json"
	"errors"
	"strings"
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

// TestParseRateSaysWhatIsWrong guards the errors of --rate and
// x-amz-meta-rate: each names what is wrong in the value, not only the
// forms it takes.
func TestParseRateSaysWhatIsWrong(t *testing.T) {
	for in, why := range map[string]string{
		"0@k":                   `"0": a rate must be over 0`,
		"-5":                    `"-5": a rate must be over 0`,
		"5,6000tokens/hour@k":   `"6000tokens/hour" is not a token budget`,
		"5@":                    "no key after @",
		"@k":                    "no rate before @",
		"5,,@k":                 "part 2 of 3 is empty",
		"fast":                  `"fast" is not a number of requests a second`,
		"5,6":                   "two request rates",
		"5tokens/s,6tokens/min": "two token budgets",
		"10001":                 `"10001": 10001 is not within 0.01–10000`,
		"NaN@k":                 `"NaN" is not a finite number`,
		"Inf@k":                 `"Inf" is not a finite number`,
	} {
		_, err := ParseRate("--rate", in)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "--rate" || !strings.Contains(ie.Reason, why) {
			t.Errorf("ParseRate(%q) = %v; want an error naming --rate and saying %q", in, err, why)
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

// TestParseRateTokens guards the token budget in --rate and
// x-amz-meta-rate: a budget a second or a minute, alone or after the
// requests, at most one of each; Spec reads back the same; the API's
// JSON names the field out of bounds.
func TestParseRateTokens(t *testing.T) {
	for in, want := range map[string]Rate{
		"90000tokens/min":                         {TokensPerMinute: 90000},
		"300 tokens/s@api.openai.com":             {Key: "api.openai.com", TokensPerSecond: 300},
		"50/s, 90000 tokens/min @ api.openai.com": {Key: "api.openai.com", RequestsPerSecond: 50, TokensPerMinute: 90000},
		"90000tokens/min,50":                      {RequestsPerSecond: 50, TokensPerMinute: 90000},
	} {
		got, err := ParseRate("--rate", in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		if back, err := ParseRate("x", got.Spec()); err != nil || back != got {
			t.Errorf("ParseRate(Spec(%+v) = %q) = %+v, %v", got, got.Spec(), back, err)
		}
	}
	if got := (Rate{Key: "k", RequestsPerSecond: 50, TokensPerMinute: 90000}).String(); got != "50/s, 90000 tokens/min on k" {
		t.Errorf("String = %q", got)
	}
	if got := (Rate{TokensPerMinute: 90000}).TokenBudget(); got != 1500 {
		t.Errorf("TokenBudget of 90000/min = %v, want 1500/s", got)
	}
	for _, bad := range []string{"0tokens/min", "-5tokens/s", "10tokens/s,10tokens/min", "50,60", "tokens/min", "90000tokens/h", "1e10tokens/s", "0.0001tokens/s"} {
		if r, err := ParseRate("--rate", bad); err == nil {
			t.Errorf("ParseRate(%q) = %+v, want an error", bad, r)
		}
	}
	for in, field := range map[string]string{
		`{"tokens_per_second": 5, "tokens_per_minute": 300}`: "rate.tokens_per_minute",
		`{"tokens_per_second": 2e9}`:                         "rate.tokens_per_second",
		`{"tokens_per_minute": 0.01}`:                        "rate.tokens_per_minute",
		`{"key": "k"}`:                                       "rate.requests_per_second",
		`{"tokens_per_second": -5}`:                          "rate.tokens_per_second",
	} {
		var r Rate
		if err := json.Unmarshal([]byte(in), &r); err != nil {
			t.Fatal(err)
		}
		var ie *InputError
		if err := r.Validate(); !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: Validate = %v, want an error naming %s", in, err, field)
		}
	}
}
