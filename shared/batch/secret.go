package batch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/bulkrun/bulkrun/shared/pipeline"
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

// SecretRefPrefix starts the string form of a secret reference.
const SecretRefPrefix = "secret:"

// secretARN matches the ARNs a reference may name: an SSM parameter or a
// Secrets Manager secret (AWS General Reference, "Amazon Resource Names").
var secretARN = regexp.MustCompile(`^arn:aws[a-z-]*:(ssm:[a-z0-9-]+:\d{12}:parameter/|secretsmanager:[a-z0-9-]+:\d{12}:secret:)[A-Za-z0-9/_.+=@-]+$`)

// SecretRef returns the ARN of v when v is a secret reference
// ("secret:arn:…" naming an SSM parameter or a Secrets Manager secret).
func SecretRef(v string) (arn string, ok bool) {
	arn, ok = strings.CutPrefix(v, SecretRefPrefix)
	return arn, ok && secretARN.MatchString(arn)
}

// Secrets resolves a secret reference's ARN to its value. Implementations
// return an error wrapping ErrUnavailable when AWS was unavailable
// (throttling, 5xx), and any other error when the reference cannot be
// resolved (missing, access denied); they are safe for concurrent use.
type Secrets interface {
	Resolve(ctx context.Context, arn string) (string, error)
}

// FreshSecrets is a Secrets with a cache that can be bypassed:
// ResolveFresh reads the value from its service whatever is cached (and
// caches it). The worker uses it when a receiver rejected a credential
// resolved from a reference (pipeline.IsCredentialRejected); a Secrets
// without it is read with Resolve again.
type FreshSecrets interface {
	Secrets
	ResolveFresh(ctx context.Context, arn string) (string, error)
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
func Redacted(b Batch) Batch {
	b.Headers = redactHeaders(b.Headers)
	b.Options = redactOptions(b.Options)
	return b
}

func redactHeaders(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if _, ok := SecretRef(v); ok {
			out[k] = v
		} else {
			out[k] = Digest(v)
		}
	}
	return out
}

func redactOptions(raw json.RawMessage) json.RawMessage {
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
		if _, ok := SecretRef(t); ok {
			return t
		}
	}
	text, _ := json.Marshal(v)
	return Digest(string(text))
}

// secretRefs returns every secret reference in headers and options, each
// with the field it is in ("headers.{name}", "pipeline_options.{path}"),
// and an *InputError for a value that starts like a reference but is not
// one.
func secretRefs(headers map[string]string, options json.RawMessage) (map[string]string, error) {
	refs := map[string]string{} // field → ARN
	names := slices.Sorted(maps.Keys(headers))
	for _, k := range names {
		v := headers[k]
		if !strings.HasPrefix(v, SecretRefPrefix) {
			continue
		}
		arn, ok := SecretRef(v)
		if !ok {
			return nil, &InputError{Field: "headers." + k, Reason: "a secret reference is secret:arn:… naming an SSM parameter or a Secrets Manager secret"}
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
					return &InputError{Field: path, Reason: `{"secret": …} must name an SSM parameter or a Secrets Manager secret by ARN`}
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
			if strings.HasPrefix(t, SecretRefPrefix) {
				arn, ok := SecretRef(t)
				if !ok {
					return &InputError{Field: path, Reason: "a secret reference is secret:arn:… naming an SSM parameter or a Secrets Manager secret"}
				}
				refs[path] = arn
			}
		}
		return nil
	}
	return refs, walk("pipeline_options", v)
}

// checkSecretRefs refuses, with an *InputError naming the field, a secret
// reference that no prefix allows (a prefix ending in "*" matches any ARN
// it starts; another must equal the ARN).
func checkSecretRefs(prefixes []string, headers map[string]string, options json.RawMessage) error {
	refs, err := secretRefs(headers, options)
	if err != nil {
		return err
	}
	for _, field := range slices.Sorted(maps.Keys(refs)) {
		if !SecretAllowed(prefixes, refs[field]) {
			return &InputError{Field: field, Reason: fmt.Sprintf("secret %s is outside the stack's secret prefixes (%s)", refs[field], strings.Join(prefixes, ", "))}
		}
	}
	return nil
}

// SecretAllowed reports whether arn is under one of prefixes: a prefix
// ending in "*" matches every ARN starting with the rest, another only
// itself.
func SecretAllowed(prefixes []string, arn string) bool {
	for _, p := range prefixes {
		if rest, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(arn, rest) || p == arn {
			return true
		}
	}
	return false
}

// ErrSecret marks a secret reference that could not be resolved: the item
// fails permanently with a message naming the reference, never the value.
var ErrSecret = errors.New("secret reference not resolved")

// resolveSecrets returns headers and options with every secret reference
// replaced by its value. An error wraps ErrUnavailable (retry later) or
// ErrSecret (fail the item).
func resolveSecrets(ctx context.Context, s Secrets, headers map[string]string, options json.RawMessage) (map[string]string, json.RawMessage, error) {
	return resolveSecretsFrom(ctx, s, headers, options, false)
}

// resolveSecretsFrom is resolveSecrets; fresh reads every reference from
// its service, bypassing the cache (FreshSecrets).
func resolveSecretsFrom(ctx context.Context, s Secrets, headers map[string]string, options json.RawMessage, fresh bool) (map[string]string, json.RawMessage, error) {
	refs, err := secretRefs(headers, options)
	if err != nil || len(refs) == 0 {
		return headers, options, nil
	}
	if s == nil {
		return nil, nil, fmt.Errorf("%w: this item function resolves no secrets", ErrSecret)
	}
	values := map[string]string{}
	for _, arn := range refs {
		if _, ok := values[arn]; ok {
			continue
		}
		resolve := s.Resolve
		if f, ok := s.(FreshSecrets); ok && fresh {
			resolve = f.ResolveFresh
		}
		v, err := resolve(ctx, arn)
		if errors.Is(err, ErrUnavailable) {
			return nil, nil, fmt.Errorf("resolve %s: %w", arn, err)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrSecret, arn, err)
		}
		values[arn] = v
	}
	h := maps.Clone(headers)
	for k, v := range h {
		if arn, ok := SecretRef(v); ok {
			h[k] = values[arn]
		}
	}
	var v any
	if json.Unmarshal(options, &v) != nil {
		return h, options, nil
	}
	var subst func(v any) any
	subst = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			if ref, ok := t["secret"].(string); ok && len(t) == 1 {
				if val, ok := values[ref]; ok {
					return val
				}
			}
			for k, e := range t {
				t[k] = subst(e)
			}
		case []any:
			for i, e := range t {
				t[i] = subst(e)
			}
		case string:
			if arn, ok := SecretRef(t); ok {
				return values[arn]
			}
		}
		return v
	}
	out, err := json.Marshal(subst(v))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrSecret, err)
	}
	return h, out, nil
}

// runPipeline runs p once for req (runSafely), and checks the result's
// cost record against the contract's limits (pipeline.CheckCost). When the
// call fails because
// the receiver rejected a credential (pipeline.IsCredentialRejected: a
// webhook's 401 or 403) and the batch's headers or options hold secret
// references, the references are read again bypassing the cache
// (FreshSecrets) and, if a value changed (the secret was rotated since it
// was cached), p runs once more with the new values, within the same
// attempt; the two calls' costs add up. A reference that cannot be read
// again, or an unchanged value, leaves the first call's error. The first
// call must have staged no writes (the built-in pipelines stage none on a
// 401 or 403).
func (w *Worker) runPipeline(ctx context.Context, log *slog.Logger, p pipeline.Pipeline, b Batch, req pipeline.Request) (pipeline.Result, error) {
	res, err := w.rejectCredential(ctx, log, p, b, req)
	if cerr := pipeline.CheckCost(res.Cost); cerr != nil {
		// Beyond the contract's limits: not recorded (it would not fit
		// the rows), and the item fails saying which limit.
		res.Cost = nil
		err = pipeline.Permanent(fmt.Errorf("item %q: %w", req.Key, cerr))
	}
	return res, err
}

// rejectCredential is runPipeline's call, made once more with freshly read
// secrets when the receiver rejected the credential.
func (w *Worker) rejectCredential(ctx context.Context, log *slog.Logger, p pipeline.Pipeline, b Batch, req pipeline.Request) (pipeline.Result, error) {
	res, err := runSafely(ctx, p, req)
	if err == nil || !pipeline.IsCredentialRejected(err) {
		return res, err
	}
	if refs, rerr := secretRefs(b.Headers, b.Options); rerr != nil || len(refs) == 0 || w.Secrets == nil {
		return res, err
	}
	headers, options, serr := resolveSecretsFrom(ctx, w.Secrets, b.Headers, b.Options, true)
	if serr != nil {
		log.Warn("credential rejected; reading its secret again failed", "error", pipeline.ErrorText(serr))
		return res, err
	}
	if maps.Equal(headers, req.Headers) && bytes.Equal(options, req.Options) {
		return res, err // the same value: not a rotation
	}
	log.Info("credential rejected; its secret changed since it was cached, calling again")
	req.Headers, req.Options = headers, options
	again, err := runSafely(ctx, p, req)
	again.Cost = res.Cost.Plus(again.Cost)
	return again, err
}
