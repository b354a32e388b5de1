package api

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Rate paces a batch's calls to its downstream in requests a second, in
// tokens a second or a minute, or both, shared by every batch naming the
// same Key (docs/pipelines.md, "Rates"; docs/adr/0031, 0035). JSON:
// {"key": "api.example.com", "requests_per_second": 50,
// "tokens_per_minute": 90000}. Tokens are what the pipeline reports per
// call under the cost name TokensCostName ("tokens": an LLM's usage,
// bytes, any unit).
type Rate struct {
	// Key names the downstream the rate is for: 1–128 characters of
	// [A-Za-z0-9._:/@-], not starting with "batch:" (ownKeyPrefix). Batches
	// naming the same key share one schedule across every item invocation.
	// "" (the default) paces the batch on its own (the key "batch:{id}",
	// which no other batch can name).
	Key string `json:"key,omitempty"`
	// RequestsPerSecond is the most calls a second the key receives:
	// MinRequestsPerSecond–MaxRequestsPerSecond (0.01–10,000); 0 (left
	// out) when the rate is a token budget alone. Batches on one key
	// should give the same; each lease is spaced at its own batch's rate,
	// so a key shared at two rates gets each batch's calls at that
	// batch's rate (a submit naming a key running batches name at another
	// rate is warned).
	RequestsPerSecond float64 `json:"requests_per_second,omitempty"`
	// TokensPerSecond and TokensPerMinute are the key's token budget —
	// the tokens its calls may use, as the pipeline reports them under
	// TokensCostName — a second or a minute: at most one of the two,
	// MinTokensPerSecond–MaxTokensPerSecond a second (a minute: 60 times
	// those). 0 (left out): no budget. The budget is debited after each
	// unit's calls with what they reported; a unit books its expected
	// use before (docs/adr/0035).
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
	TokensPerMinute float64 `json:"tokens_per_minute,omitempty"`
	// keyGivenEmpty is set by UnmarshalJSON when the JSON named "key" as
	// "": Validate refuses it (leave key out to pace the batch on its own),
	// as ParseRate refuses "50@".
	keyGivenEmpty bool
}

// UnmarshalJSON reads a Rate, noting a "key" given as "" (or blanks) for
// Validate to refuse: an absent key and an empty one would otherwise read
// the same, and only the absent one means "this batch on its own".
func (r *Rate) UnmarshalJSON(b []byte) error {
	type plain Rate
	var aux struct {
		plain
		Key *string `json:"key"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*r = Rate(aux.plain)
	if aux.Key != nil {
		r.Key = *aux.Key
		r.keyGivenEmpty = strings.TrimSpace(*aux.Key) == ""
	}
	return nil
}

// Bounds of Rate.RequestsPerSecond (shared/pace: the bucket rows are
// sized for the highest).
const (
	MinRequestsPerSecond = 0.01
	MaxRequestsPerSecond = 10000
)

// Bounds of a token budget, in tokens a second (Rate.TokensPerSecond;
// Rate.TokensPerMinute: 60 times these): 0.001 (3.6 an hour) to 10^9.
const (
	MinTokensPerSecond = 0.001
	MaxTokensPerSecond = 1e9
)

// Budgeted reports whether r carries a token budget.
func (r Rate) Budgeted() bool { return r.TokensPerSecond > 0 || r.TokensPerMinute > 0 }

// TokenBudget is r's token budget in tokens a second (TokensPerMinute /
// 60), 0 when it has none.
func (r Rate) TokenBudget() float64 {
	if r.TokensPerMinute > 0 {
		return r.TokensPerMinute / 60
	}
	return r.TokensPerSecond
}

var rateKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:/@-]{1,128}$`)

// ownKeyPrefix starts the key of a batch paced on its own (KeyOf): a
// batch may not name it, so that no batch takes leases from another
// batch's own schedule.
const ownKeyPrefix = "batch:"

// Validate returns an *InputError naming rate.key or
// rate.requests_per_second when r is out of bounds.
// A key given as "" (JSON "key": "") is refused naming rate.key: leave
// key out to pace the batch on its own.
func (r Rate) Validate() error {
	if r.keyGivenEmpty {
		return &InputError{Field: "rate.key", Reason: fmt.Sprintf("%q: an empty key; leave key out to pace the batch on its own, or name the downstream (api.example.com)", r.Key)}
	}
	if r.Key != "" && !rateKeyRE.MatchString(r.Key) {
		return &InputError{Field: "rate.key", Reason: fmt.Sprintf("%q is not 1–128 characters of A–Z, a–z, 0–9 and . _ : / @ -", r.Key)}
	}
	if strings.HasPrefix(r.Key, ownKeyPrefix) {
		return &InputError{Field: "rate.key", Reason: fmt.Sprintf("%q: keys starting with %q are the batches' own (a batch without a key is paced as %s{id})", r.Key, ownKeyPrefix, ownKeyPrefix)}
	}
	switch {
	case r.TokensPerSecond != 0 && r.TokensPerMinute != 0:
		return &InputError{Field: "rate.tokens_per_minute", Reason: "give the token budget a second or a minute, not both"}
	case r.TokensPerSecond != 0 && !(r.TokensPerSecond >= MinTokensPerSecond && r.TokensPerSecond <= MaxTokensPerSecond):
		return &InputError{Field: "rate.tokens_per_second", Reason: fmt.Sprintf("%v is not within %v–%v", r.TokensPerSecond, MinTokensPerSecond, MaxTokensPerSecond)}
	case r.TokensPerMinute != 0 && !(r.TokensPerMinute >= 60*MinTokensPerSecond && r.TokensPerMinute <= 60*MaxTokensPerSecond):
		return &InputError{Field: "rate.tokens_per_minute", Reason: fmt.Sprintf("%v is not within %v–%v", r.TokensPerMinute, 60*MinTokensPerSecond, 60*MaxTokensPerSecond)}
	case r.RequestsPerSecond == 0 && !r.Budgeted():
		return &InputError{Field: "rate.requests_per_second", Reason: fmt.Sprintf("a rate needs requests_per_second (%v–%v) or a token budget (tokens_per_second or tokens_per_minute)", MinRequestsPerSecond, MaxRequestsPerSecond)}
	case r.RequestsPerSecond != 0 && !(r.RequestsPerSecond >= MinRequestsPerSecond && r.RequestsPerSecond <= MaxRequestsPerSecond):
		return &InputError{Field: "rate.requests_per_second", Reason: fmt.Sprintf("%v is not within %v–%v", r.RequestsPerSecond, MinRequestsPerSecond, MaxRequestsPerSecond)}
	}
	return nil
}

// KeyOf is the key batch id's rate paces: Key, or "batch:{id}".
func (r Rate) KeyOf(id string) string {
	if r.Key != "" {
		return r.Key
	}
	return ownKeyPrefix + id
}

// String is the rate as the CLI and the console show it: "50/s",
// "50/s, 90000 tokens/min on api.example.com", "300 tokens/s".
func (r Rate) String() string {
	var parts []string
	if r.RequestsPerSecond > 0 {
		parts = append(parts, num(r.RequestsPerSecond)+"/s")
	}
	if r.TokensPerSecond > 0 {
		parts = append(parts, num(r.TokensPerSecond)+" tokens/s")
	}
	if r.TokensPerMinute > 0 {
		parts = append(parts, num(r.TokensPerMinute)+" tokens/min")
	}
	s := strings.Join(parts, ", ")
	if r.Key != "" {
		s += " on " + r.Key
	}
	return s
}

// Spec is the rate as ParseRate reads it: "50", "50,90000tokens/min@api.example.com".
func (r Rate) Spec() string {
	var parts []string
	if r.RequestsPerSecond > 0 {
		parts = append(parts, num(r.RequestsPerSecond))
	}
	if r.TokensPerSecond > 0 {
		parts = append(parts, num(r.TokensPerSecond)+"tokens/s")
	}
	if r.TokensPerMinute > 0 {
		parts = append(parts, num(r.TokensPerMinute)+"tokens/min")
	}
	s := strings.Join(parts, ",")
	if r.Key != "" {
		s += "@" + r.Key
	}
	return s
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// ParseRate reads a rate as the CLI flag --rate and the upload metadata
// x-amz-meta-rate give it: comma-separated parts — requests a second
// (optionally followed by "/s"), a token budget ("90000tokens/min" or
// "300tokens/s"), or both — then optionally "@" and the key ("50",
// "50/s", "50@api.example.com", "50,90000tokens/min@api.openai.com",
// "90000tokens/min"). field names the flag or metadata in the error.
func ParseRate(field, s string) (Rate, error) {
	spec, key, at := strings.Cut(strings.TrimSpace(s), "@")
	bad := func(why string, args ...any) (Rate, error) {
		return Rate{}, &InputError{Field: field, Reason: fmt.Sprintf("%q: %s; want requests a second, a token budget or both, then optionally @key (50, 50/s, 50@api.example.com, 50,90000tokens/min@api.example.com, 300tokens/s)", s, fmt.Sprintf(why, args...))}
	}
	if at && strings.TrimSpace(key) == "" {
		return bad("no key after @")
	}
	r := Rate{Key: strings.TrimSpace(key)}
	seen := map[string]bool{}
	parts := strings.Split(spec, ",")
	for i, part := range parts {
		part = strings.ReplaceAll(strings.TrimSpace(part), " ", "")
		if part == "" {
			if len(parts) == 1 {
				return bad("no rate before @")
			}
			return bad("part %d of %d is empty", i+1, len(parts))
		}
		kind, n := "requests", strings.TrimSuffix(part, "/s")
		switch {
		case strings.HasSuffix(part, "tokens/min"):
			kind, n = "tokens/min", strings.TrimSuffix(part, "tokens/min")
		case strings.HasSuffix(part, "tokens/s"):
			kind, n = "tokens/s", strings.TrimSuffix(part, "tokens/s")
		}
		v, err := strconv.ParseFloat(n, 64)
		switch {
		case err != nil && strings.Contains(part, "tokens"):
			return bad("%q is not a token budget (a number, then tokens/min or tokens/s)", part)
		case err != nil:
			return bad("%q is not a number of requests a second (a number, optionally /s)", part)
		case math.IsNaN(v) || math.IsInf(v, 0):
			return bad("%q is not a finite number", part)
		case seen[kind] && kind == "requests":
			return bad("two request rates")
		case kind != "requests" && seen["tokens"]:
			return bad("two token budgets")
		case !(v > 0):
			return bad("%q: a rate must be over 0", part)
		}
		seen[kind] = true
		switch kind {
		case "requests":
			r.RequestsPerSecond = v
		case "tokens/min":
			seen["tokens"], r.TokensPerMinute = true, v
		case "tokens/s":
			seen["tokens"], r.TokensPerSecond = true, v
		}
	}
	if err := r.Validate(); err != nil {
		return Rate{}, &InputError{Field: field, Reason: fmt.Sprintf("%q: %s", s, err.(*InputError).Reason)}
	}
	return r, nil
}
