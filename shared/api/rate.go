package api

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Rate paces a batch's calls to its downstream in requests a second,
// shared by every batch naming the same Key (docs/pipelines.md, "Rates";
// docs/adr/0031). JSON: {"key": "api.example.com", "requests_per_second":
// 50}.
type Rate struct {
	// Key names the downstream the rate is for: 1–128 characters of
	// [A-Za-z0-9._:/@-], not starting with "batch:" (ownKeyPrefix). Batches
	// naming the same key share one schedule across every item invocation.
	// "" (the default) paces the batch on its own (the key "batch:{id}",
	// which no other batch can name).
	Key string `json:"key,omitempty"`
	// RequestsPerSecond is the most calls a second the key receives:
	// MinRequestsPerSecond–MaxRequestsPerSecond (0.01–10,000). Batches on
	// one key should give the same; each lease is spaced at its own
	// batch's rate, so a key shared at two rates runs between them.
	RequestsPerSecond float64 `json:"requests_per_second"`
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
	if !(r.RequestsPerSecond >= MinRequestsPerSecond && r.RequestsPerSecond <= MaxRequestsPerSecond) {
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

// String is the rate as ParseRate reads it and the CLI shows it:
// "50/s" or "50/s on api.example.com".
func (r Rate) String() string {
	s := strconv.FormatFloat(r.RequestsPerSecond, 'f', -1, 64) + "/s"
	if r.Key != "" {
		s += " on " + r.Key
	}
	return s
}

// Spec is the rate as ParseRate reads it: "50" or "50@api.example.com".
func (r Rate) Spec() string {
	s := strconv.FormatFloat(r.RequestsPerSecond, 'f', -1, 64)
	if r.Key != "" {
		s += "@" + r.Key
	}
	return s
}

// ParseRate reads a rate as the CLI flag --rate and the upload metadata
// x-amz-meta-rate give it: requests a second, optionally followed by
// "/s", then optionally "@" and the key ("50", "50/s", "50@api.example.com").
// field names the flag or metadata in the error.
func ParseRate(field, s string) (Rate, error) {
	num, key, at := strings.Cut(strings.TrimSpace(s), "@")
	num = strings.TrimSuffix(strings.TrimSpace(num), "/s")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || at && strings.TrimSpace(key) == "" {
		return Rate{}, &InputError{Field: field, Reason: fmt.Sprintf("%q: want requests a second, then optionally @key (50, 50/s, 50@api.example.com)", s)}
	}
	r := Rate{Key: strings.TrimSpace(key), RequestsPerSecond: n}
	if err := r.Validate(); err != nil {
		return Rate{}, &InputError{Field: field, Reason: err.(*InputError).Reason}
	}
	return r, nil
}
