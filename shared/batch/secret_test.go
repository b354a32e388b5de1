package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	ssmRef = "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/hook-token"
	smRef  = "secret:arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/api-key-AbCdEf"
)

// TestSecretsRedacted guards the product line "views, errors, logs and
// reports show header names and a digest of the values, never the values":
// Redacted keeps names, structure and references, and no value survives.
func TestSecretsRedacted(t *testing.T) {
	b := Batch{
		Headers: map[string]string{"Authorization": "Bearer s3cr3t-token", "X-Key": ssmRef},
		Options: json.RawMessage(`{"url":"https://h.example/x?token=q5ecret","n":42,"deep":{"list":["pw1",{"secret":"arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/x"}]},"none":null}`),
	}
	r := Redacted(b)
	raw, _ := json.Marshal(r)
	for _, secret := range []string{"s3cr3t-token", "q5ecret", "pw1", "42"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("redacted batch %s holds %q", raw, secret)
		}
	}
	if got, want := r.Headers["Authorization"], Digest("Bearer s3cr3t-token"); got != want || !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+12 {
		t.Errorf("Authorization = %q, want %q (sha256: and 12 hex)", got, want)
	}
	if r.Headers["X-Key"] != ssmRef {
		t.Errorf("a reference is shown as is: got %q", r.Headers["X-Key"])
	}
	var opts map[string]any
	if err := json.Unmarshal(r.Options, &opts); err != nil {
		t.Fatal(err)
	}
	if opts["url"] != Digest(`"https://h.example/x?token=q5ecret"`) || opts["n"] != Digest("42") || opts["none"] != nil {
		t.Errorf("options = %s", r.Options)
	}
	if !strings.Contains(string(r.Options), `{"secret":"arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/x"}`) {
		t.Errorf("options reference lost: %s", r.Options)
	}
	if b.Headers["Authorization"] != "Bearer s3cr3t-token" {
		t.Error("Redacted modified its argument")
	}
}

// TestSecretsMismatchDoesNotEcho guards the product line "a 409's message
// never shows a stored header or option value" (a probe printed a stored
// bearer token): the differing setting is named and shown by digest.
func TestSecretsMismatchDoesNotEcho(t *testing.T) {
	stored := Batch{ID: "b", Pipeline: "webhook", Headers: map[string]string{"Authorization": "Bearer stored-token"}, Options: json.RawMessage(`{"url":"https://a.example/?k=stored-key"}`)}
	for _, given := range []Batch{
		{ID: "b", Pipeline: "webhook", Headers: map[string]string{"Authorization": "Bearer given-token"}, Options: stored.Options},
		{ID: "b", Pipeline: "webhook", Headers: stored.Headers, Options: json.RawMessage(`{"url":"https://a.example/?k=given-key"}`)},
	} {
		field, was, now := sameSettings(stored, given)
		msg := (&MismatchError{BatchID: "b", Field: field, Stored: was, Given: now}).Error()
		for _, secret := range []string{"stored-token", "given-token", "stored-key", "given-key"} {
			if strings.Contains(msg, secret) {
				t.Errorf("409 message %q holds %q", msg, secret)
			}
		}
		if field == "" || !strings.Contains(msg, "sha256:") || was == now {
			t.Errorf("409 message %q does not show the difference by digest", msg)
		}
	}
}

// TestSecretRefsChecked guards "a reference outside the stack's secret
// prefixes is refused at submit, naming the field".
func TestSecretRefsChecked(t *testing.T) {
	prefixes := []string{"arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/*", "arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/api-key-AbCdEf"}
	tests := []struct {
		name      string
		headers   map[string]string
		options   string
		wantField string // "" = accepted
	}{
		{"ssm under prefix", map[string]string{"X-Token": ssmRef}, ``, ""},
		{"exact secret", nil, `{"key":{"secret":"` + strings.TrimPrefix(smRef, SecretRefPrefix) + `"}}`, ""},
		{"string form in options", nil, `{"a":[1,"` + smRef + `"]}`, ""},
		{"outside prefix", map[string]string{"X-Token": "secret:arn:aws:ssm:us-east-1:000000000000:parameter/other/p"}, ``, "headers.X-Token"},
		{"malformed", map[string]string{"X-Token": "secret:not-an-arn"}, ``, "headers.X-Token"},
		{"option outside prefix", nil, `{"a":[1,"secret:arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/other"]}`, "pipeline_options.a[1]"},
		{"option object not an ARN", nil, `{"k":{"secret":"x"}}`, "pipeline_options.k"},
		{"plain values", map[string]string{"Authorization": "Bearer x"}, `{"url":"https://x"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSecretRefs(prefixes, tt.headers, json.RawMessage(tt.options))
			var ie *InputError
			switch {
			case tt.wantField == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantField != "" && (!errors.As(err, &ie) || ie.Field != tt.wantField):
				t.Fatalf("err = %v, want an InputError on %s", err, tt.wantField)
			}
		})
	}
	if err := checkSecretRefs(nil, map[string]string{"X": ssmRef}, nil); err == nil {
		t.Error("no prefixes: a reference was accepted")
	}
}

type fakeSecrets map[string]string

func (f fakeSecrets) Resolve(_ context.Context, arn string) (string, error) {
	if v, ok := f[arn]; ok {
		return v, nil
	}
	if strings.Contains(arn, "throttled") {
		return "", fmt.Errorf("ssm: %w", ErrUnavailable)
	}
	return "", errors.New("ParameterNotFound")
}

// TestSecretsResolved guards "references are resolved by the item function
// at run time": the pipeline gets the values, the batch keeps references;
// an unavailable AWS is retryable, a missing secret fails the item.
func TestSecretsResolved(t *testing.T) {
	ssmARN, _ := SecretRef(ssmRef)
	smARN, _ := SecretRef(smRef)
	s := fakeSecrets{ssmARN: "tok-1", smARN: "key-2"}
	headers := map[string]string{"Authorization": ssmRef, "X-Plain": "p"}
	opts := json.RawMessage(`{"a":"` + smRef + `","b":{"secret":"` + smARN + `"},"c":3}`)
	h, o, err := resolveSecrets(context.Background(), s, headers, opts)
	if err != nil {
		t.Fatal(err)
	}
	if h["Authorization"] != "tok-1" || h["X-Plain"] != "p" || headers["Authorization"] != ssmRef {
		t.Errorf("headers = %v (given %v)", h, headers)
	}
	if string(o) != `{"a":"key-2","b":"key-2","c":3}` {
		t.Errorf("options = %s", o)
	}
	missing := map[string]string{"A": "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/gone"}
	if _, _, err := resolveSecrets(context.Background(), s, missing, nil); !errors.Is(err, ErrSecret) || errors.Is(err, ErrUnavailable) {
		t.Errorf("missing: err = %v, want ErrSecret", err)
	}
	throttled := map[string]string{"A": "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/throttled"}
	if _, _, err := resolveSecrets(context.Background(), s, throttled, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("throttled: err = %v, want ErrUnavailable", err)
	}
	if _, _, err := resolveSecrets(context.Background(), nil, headers, nil); !errors.Is(err, ErrSecret) {
		t.Errorf("no resolver: err = %v, want ErrSecret", err)
	}
}
