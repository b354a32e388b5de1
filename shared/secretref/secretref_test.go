package secretref

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

const (
	ssmRef = "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/hook-token"
	smRef  = "secret:arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/api-key-AbCdEf"
)

// TestSecretsRedacted guards the product line "views, errors, logs and
// reports show header names and a digest of the values, never the values":
// Redacted keeps names, structure and references, and no value survives.
func TestSecretsRedacted(t *testing.T) {
	b := api.Batch{
		Plan: api.Plan{Headers: map[string]string{"Authorization": "Bearer s3cr3t-token", "X-Key": ssmRef}, Options: json.RawMessage(`{"url":"https://h.example/x?token=q5ecret","n":42,"deep":{"list":["pw1",{"secret":"arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/x"}]},"none":null}`)},
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
		{"exact secret", nil, `{"key":{"secret":"` + strings.TrimPrefix(smRef, Prefix) + `"}}`, ""},
		{"string form in options", nil, `{"a":[1,"` + smRef + `"]}`, ""},
		{"outside prefix", map[string]string{"X-Token": "secret:arn:aws:ssm:us-east-1:000000000000:parameter/other/p"}, ``, "headers.X-Token"},
		{"malformed", map[string]string{"X-Token": "secret:not-an-arn"}, ``, "headers.X-Token"},
		{"option outside prefix", nil, `{"a":[1,"secret:arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/other"]}`, "pipeline_options.a[1]"},
		{"option object not an ARN", nil, `{"k":{"secret":"x"}}`, "pipeline_options.k"},
		{"plain values", map[string]string{"Authorization": "Bearer x"}, `{"url":"https://x"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(prefixes, tt.headers, json.RawMessage(tt.options))
			var ie *api.InputError
			switch {
			case tt.wantField == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantField != "" && (!errors.As(err, &ie) || ie.Field != tt.wantField):
				t.Fatalf("err = %v, want an InputError on %s", err, tt.wantField)
			}
		})
	}
	if err := Check(nil, map[string]string{"X": ssmRef}, nil); err == nil {
		t.Error("no prefixes: a reference was accepted")
	}
}
