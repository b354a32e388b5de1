package flow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

// keySecrets resolves every reference, unless its KMS key is off: then
// it answers as internal/secret does for Secrets Manager's
// DecryptionFailure, a *ledger.FaultError of class pause.
type keySecrets struct{ off atomic.Bool }

func (s *keySecrets) Resolve(context.Context, string) (string, error) {
	if s.off.Load() {
		return "", &ledger.FaultError{Service: "secretsmanager", Operation: "GetSecretValue", Code: "DecryptionFailure", Class: ledger.FaultPause,
			Err: errors.New("Secrets Manager can't decrypt the protected secret text using the provided KMS key.")}
	}
	return "Bearer v1", nil
}

// An AWS fault of class pause (the KMS key of a batch's secret disabled)
// fails no item and uses no attempt: the first message that meets it
// pauses the batch (an outage pause of class "aws secretsmanager
// DecryptionFailure"), every message waits, and once the key is back the
// first probe gets through, ends the pause, and every item succeeds with
// one attempt.
func TestMemPauseFaultPausesTheBatch(t *testing.T) {
	ctx := context.Background()
	const arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hook-token"
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	secrets := &keySecrets{}
	secrets.off.Store(true)
	r.worker.Secrets = secrets
	r.sub.SecretPrefixes = []string{arn}
	const id = "kms-off"
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(5)},
		Headers: map[string]string{"Authorization": secretref.Prefix + arn}}); err != nil {
		t.Fatal(err)
	}
	r.worker.Handle(ctx, r.queue.take()) // the fan-out
	for round := range 3 {
		ds := r.queue.take()
		if len(ds) != 5 {
			t.Fatalf("round %d: %d messages, want the 5 items' (none acknowledged as done, none lost)", round, len(ds))
		}
		if failed := r.worker.Handle(ctx, ds); len(failed) != 0 {
			t.Fatalf("round %d: %d deliveries failed; want each sent again as a new message", round, len(failed))
		}
	}
	b, err := r.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if b.Pause == nil || b.Pause.By != api.PauseByOutage || b.Pause.Class != "aws secretsmanager DecryptionFailure" {
		t.Fatalf("pause %+v, want an outage pause of class aws secretsmanager DecryptionFailure", b.Pause)
	}
	for i := range 5 {
		if n := r.callsOf(api.PositionalKey(int64(i))); n != 0 {
			t.Fatalf("item %d ran %d times under the pause", i, n)
		}
	}
	secrets.off.Store(false)
	r.clock.T = r.clock.T.Add(31 * time.Second) // the first check
	r.drain(t, ctx, 1)
	b, err = r.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if b.Pause != nil {
		t.Fatalf("still paused: %+v", b.Pause)
	}
	if err := r.store.ScanItems(ctx, id, b.ListShards, func(it ledger.Item) error {
		if it.Outcome != api.OutcomeSucceeded || it.RunAttempts != 1 {
			t.Errorf("%s: %s after %d attempts, want succeeded after 1", it.Key, it.Outcome, it.RunAttempts)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
