package submit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestSecretsMismatchDoesNotEcho guards the product line "a 409's message
// never shows a stored header or option value" (a probe printed a stored
// bearer token): the differing setting is named and shown by digest.
func TestSecretsMismatchDoesNotEcho(t *testing.T) {
	stored := ledger.Batch{Batch: api.Batch{ID: "b", Plan: api.Plan{Pipeline: "webhook", Headers: map[string]string{"Authorization": "Bearer stored-token"}, Options: json.RawMessage(`{"url":"https://a.example/?k=stored-key"}`)}}}
	for _, given := range []ledger.Batch{
		{Batch: api.Batch{ID: "b", Plan: api.Plan{Pipeline: "webhook", Headers: map[string]string{"Authorization": "Bearer given-token"}, Options: stored.Options}}},
		{Batch: api.Batch{ID: "b", Plan: api.Plan{Pipeline: "webhook", Headers: stored.Headers, Options: json.RawMessage(`{"url":"https://a.example/?k=given-key"}`)}}},
	} {
		field, was, now := stored.DiffPlan(given)
		msg := (&api.MismatchError{BatchID: "b", Field: field, Stored: was, Given: now}).Error()
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
