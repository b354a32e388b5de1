package secretref

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Secret values in a batch's headers and pipeline options.
//
// A header value or an option value (a JSON string anywhere in the options)
// may be a secret reference instead of the secret itself:
//
//	"secret:arn:aws:ssm:eu-west-1:123456789012:parameter/bulkrun/hook-token"
//	"secret:arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-token-AbCdEf"
//
// and, in the options only, the object {"secret": "arn:…"} with the same
// ARN. The item function resolves each reference when it runs an item (an
// SSM parameter's value, decrypted for a SecureString; a Secrets Manager
// secret's SecretString) and hands the pipeline the value; the batch row,
// the API, logs, errors and reports only ever hold the reference. Submit
// refuses a reference outside the stack's SecretPrefixes with a 400 naming
// the header or option. Pipelines that check their options at submit
// (OptionsValidator) see references unresolved, so an option they
// validate (the webhook's url) cannot be one.
//
// Whatever bulkrun shows of a batch (GET /batches/{id}, a submit's answer,
// a 409's message, incoming-errors/ reports) shows header names with
// Digest of each value, and every scalar option value as Digest of its
// JSON text; a secret reference is shown as is (it names, not holds, the
// secret).

// Prefix starts the string form of a secret reference.
const Prefix = "secret:"

// secretARN matches the ARNs a reference may name: an SSM parameter or a
// Secrets Manager secret (AWS General Reference, "Amazon Resource Names").
var secretARN = regexp.MustCompile(`^arn:aws[a-z-]*:(ssm:[a-z0-9-]+:\d{12}:parameter/|secretsmanager:[a-z0-9-]+:\d{12}:secret:)[A-Za-z0-9/_.+=@-]+$`)

// Parse returns the ARN of v when v is a secret reference
// ("secret:arn:…" naming an SSM parameter or a Secrets Manager secret).
func Parse(v string) (arn string, ok bool) {
	arn, ok = strings.CutPrefix(v, Prefix)
	return arn, ok && secretARN.MatchString(arn)
}

// Digest is how bulkrun shows a value it must not echo: "sha256:" and the
// first 12 hex digits of the SHA-256 of v. Equal values have equal digests,
// so two submits can be compared without showing either.
func Digest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// Redacted returns b with each header value replaced by its Digest and
// every scalar value of its pipeline options replaced by the Digest of its
// JSON text (keys and structure kept); secret references are kept as is.
// b itself is not modified.
func Redacted(b api.Batch) api.Batch {
	b.Headers = RedactHeaders(b.Headers)
	b.Options = RedactOptions(b.Options)
	return b
}

// RedactHeaders returns h with each value replaced by its Digest, secret
// references kept as they are; nil for nil.
func RedactHeaders(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if _, ok := Parse(v); ok {
			out[k] = v
		} else {
			out[k] = Digest(v)
		}
	}
	return out
}

// RedactOptions returns the pipeline options raw with every scalar value
// replaced by the Digest of its JSON text (keys and structure kept), secret
// references kept as they are.
func RedactOptions(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return json.RawMessage(`"` + Digest(string(raw)) + `"`)
	}
	out, _ := json.Marshal(redactValue(v))
	return out
}

func redactValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if ref, ok := t["secret"].(string); ok && len(t) == 1 && secretARN.MatchString(ref) {
			return t
		}
		for k, e := range t {
			t[k] = redactValue(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = redactValue(e)
		}
		return t
	case nil:
		return nil
	case string:
		if _, ok := Parse(t); ok {
			return t
		}
	}
	text, _ := json.Marshal(v)
	return Digest(string(text))
}

// Refs returns every secret reference in headers and options, each
// with the field it is in ("headers.{name}", "pipeline_options.{path}"),
// and an *InputError for a value that starts like a reference but is not
// one.
func Refs(headers map[string]string, options json.RawMessage) (map[string]string, error) {
	refs := map[string]string{} // field → ARN
	names := slices.Sorted(maps.Keys(headers))
	for _, k := range names {
		v := headers[k]
		if !strings.HasPrefix(v, Prefix) {
			continue
		}
		arn, ok := Parse(v)
		if !ok {
			return nil, &api.InputError{Field: "headers." + k, Reason: "a secret reference is secret:arn:… naming an SSM parameter or a Secrets Manager secret"}
		}
		refs["headers."+k] = arn
	}
	if len(bytes.TrimSpace(options)) == 0 {
		return refs, nil
	}
	var v any
	if json.Unmarshal(options, &v) != nil {
		return refs, nil // Validate reports bad options
	}
	var walk func(path string, v any) error
	walk = func(path string, v any) error {
		switch t := v.(type) {
		case map[string]any:
			if ref, ok := t["secret"]; ok && len(t) == 1 {
				s, _ := ref.(string)
				if !secretARN.MatchString(s) {
					return &api.InputError{Field: path, Reason: `{"secret": …} must name an SSM parameter or a Secrets Manager secret by ARN`}
				}
				refs[path] = s
				return nil
			}
			for _, k := range slices.Sorted(maps.Keys(t)) {
				if err := walk(path+"."+k, t[k]); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range t {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
					return err
				}
			}
		case string:
			if strings.HasPrefix(t, Prefix) {
				arn, ok := Parse(t)
				if !ok {
					return &api.InputError{Field: path, Reason: "a secret reference is secret:arn:… naming an SSM parameter or a Secrets Manager secret"}
				}
				refs[path] = arn
			}
		}
		return nil
	}
	return refs, walk("pipeline_options", v)
}

// Check refuses, with an *InputError naming the field, a secret
// reference that no prefix allows (a prefix ending in "*" matches any ARN
// it starts; another must equal the ARN).
func Check(prefixes []string, headers map[string]string, options json.RawMessage) error {
	refs, err := Refs(headers, options)
	if err != nil {
		return err
	}
	for _, field := range slices.Sorted(maps.Keys(refs)) {
		if !Allowed(prefixes, refs[field]) {
			return &api.InputError{Field: field, Reason: fmt.Sprintf("secret %s is outside the stack's secret prefixes (%s)", refs[field], strings.Join(prefixes, ", "))}
		}
	}
	return nil
}

// Allowed reports whether arn is under one of prefixes: a prefix
// ending in "*" matches every ARN starting with the rest, another only
// itself.
func Allowed(prefixes []string, arn string) bool {
	for _, p := range prefixes {
		if rest, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(arn, rest) || p == arn {
			return true
		}
	}
	return false
}
