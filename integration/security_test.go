//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// TestSSRFRefusedAtSubmit guards the product line "the webhook may not
// reach loopback, link-local, private or unique-local addresses unless the
// stack's allow-list names them", through the deployed API: the metadata
// service, a private and a unique-local address get a 400 naming
// pipeline_options.url and leave no batch, while the test receiver on
// 127.0.0.1 — which the emulator stack allow-lists by default — is reached.
func TestSSRFRefusedAtSubmit(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/iam/security-credentials/",
		"http://[::ffff:169.254.169.254]/latest/meta-data/",
		"http://10.0.0.5/hook",
		"http://[fd00::5]/hook",
	} {
		id := newID(t)
		opts, _ := json.Marshal(map[string]string{"url": u})
		_, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: opts, Source: api.SourceSpec{Items: inlineItems(1)}})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "pipeline_options.url" || !strings.Contains(ae.Body.Message, "allow-list does not name") {
			t.Errorf("submit url %s: err = %v (%+v), want 400 on pipeline_options.url", u, err, ae)
			continue
		}
		t.Logf("%s → %d %s", u, ae.Status, ae.Body.Message)
		if _, err := env.api.Status(ctx, id); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("status after a refused submit: %v, want not found", err)
		}
	}

	id := newID(t)
	route := env.hook.route(id, nil)
	opts, _ := json.Marshal(map[string]string{"url": route})
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: opts, Source: api.SourceSpec{Items: inlineItems(2)}}); err != nil {
		t.Fatalf("submit to the allow-listed receiver: %v", err)
	}
	v := wait(t, id)
	if v.Census == nil || v.Census.Succeeded != 2 || len(env.hook.counts(id)) != 2 {
		t.Fatalf("census %+v, calls %v: want 2 succeeded and 2 calls", v.Census, env.hook.counts(id))
	}
}
