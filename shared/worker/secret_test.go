package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

type fakeSecrets map[string]string

const (
	ssmRef = "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/hook-token"
	smRef  = "secret:arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/api-key-AbCdEf"
)

func (f fakeSecrets) Resolve(_ context.Context, arn string) (string, error) {
	if v, ok := f[arn]; ok {
		return v, nil
	}
	if strings.Contains(arn, "throttled") {
		return "", fmt.Errorf("ssm: %w", ledger.ErrUnavailable)
	}
	return "", errors.New("ParameterNotFound")
}

// TestSecretsResolved guards "references are resolved by the item function
// at run time": the pipeline gets the values, the batch keeps references;
// an unavailable AWS is retryable, a missing secret fails the item.
func TestSecretsResolved(t *testing.T) {
	ssmARN, _ := secretref.Parse(ssmRef)
	smARN, _ := secretref.Parse(smRef)
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
	if _, _, err := resolveSecrets(context.Background(), s, missing, nil); !errors.Is(err, ErrSecret) || errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("missing: err = %v, want ErrSecret", err)
	}
	throttled := map[string]string{"A": "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/throttled"}
	if _, _, err := resolveSecrets(context.Background(), s, throttled, nil); !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("throttled: err = %v, want ErrUnavailable", err)
	}
	if _, _, err := resolveSecrets(context.Background(), nil, headers, nil); !errors.Is(err, ErrSecret) {
		t.Errorf("no resolver: err = %v, want ErrSecret", err)
	}
}
