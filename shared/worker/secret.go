package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/credential"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Secrets, FreshSecrets and ErrSecret are shared/credential's: how the
// item function's secret references are read (internal/secret).
type (
	Secrets      = credential.Secrets
	FreshSecrets = credential.FreshSecrets
)

// ErrSecret marks a secret reference that could not be resolved
// (credential.ErrSecret).
var ErrSecret = credential.ErrSecret

// resolveSecrets returns headers and options with every secret reference
// replaced by its value (credential.Resolve, from the cache).
func resolveSecrets(ctx context.Context, s Secrets, headers map[string]string, options json.RawMessage) (map[string]string, json.RawMessage, error) {
	return credential.Resolve(ctx, s, headers, options, false)
}

// runPipeline runs p once for req (pipeline.RunSafely) and bounds the result's
// cost record (pipeline.BoundCost): names beyond the contract's limits
// are folded under pipeline.FoldedCost, never a reason to fail the item,
// whose work was done. When the call fails because the receiver rejected
// a credential (pipeline.IsCredentialRejected: a webhook's 401 or 403)
// and the batch's headers or options hold secret references, the
// references are read again bypassing the cache (FreshSecrets); rotated
// reports that a value changed (the secret was rotated since it was
// cached): the attempt ends there, and its retry, which counts no
// attempt (ledger.Attempt.Rotated), sends the new value, now cached. One
// attempt is one call: the receiver never gets two requests with the
// same Bulkrun-Attempt. An unchanged value withholds the item under a
// halt on the credential (ledger.Attempt.Withhold); a reference that
// cannot be read again leaves the call's error to fail the item.
func (w *Worker) runPipeline(ctx context.Context, log *slog.Logger, p pipeline.Pipeline, b ledger.Batch, req pipeline.Request) (res pipeline.Result, rr credential.Reread, err error) {
	res, err = pipeline.RunSafely(ctx, p, req)
	if c, folded := pipeline.BoundCost(res.Cost); folded > 0 {
		log.WarnContext(ctx, "cost record beyond its limits; names folded", "folded_names", folded,
			"max_cost_names", pipeline.MaxCostNames, "max_cost_name_bytes", pipeline.MaxCostNameBytes)
		res.Cost = c
	}
	if err != nil && pipeline.IsCredentialRejected(err) {
		rr = credential.Recheck(ctx, log, w.Secrets, b.Headers, b.Options, req.Headers, req.Options)
	}
	return res, rr, err
}

// liftedSecrets is the batch's headers and options resolved for a unit
// of a batch whose halt on its secret references a caller lifted
// (ledger.Batch.LiftedAt: any unit, a woken item's or one of a run
// resumed after the lift), or with an item withheld under such a halt and
// woken by a lift (hold.lifted, for a batch row a release before lift
// times wrote): read past the cache once per process and lift
// (credential.Lifts), so that no call sends the refused value still
// cached. ok false when neither holds, or the read failed (the values
// resolved before the take stand, and a refusal reads them again as any
// does).
func (w *Worker) liftedSecrets(ctx context.Context, log *slog.Logger, b ledger.Batch, h *hold, subject string) (map[string]string, json.RawMessage, bool) {
	if w.Secrets == nil || b.LiftedAt.IsZero() && h.lifted.IsZero() || subject == "" {
		return nil, nil, false
	}
	headers, options, err := made(&w.lifts).Resolve(ctx, w.Secrets, subject, b.LiftedAt, h.lifted, w.Clock.Now(), b.Headers, b.Options)
	if err != nil {
		log.WarnContext(ctx, "lifted halt's secret not read again; the cached value is sent", "subject", subject, "error", pipeline.ErrorText(err))
		return nil, nil, false
	}
	return headers, options, true
}

// passGate is gate, then, for a call that waited there, the batch row's
// stop read again (call.recheck): a stop recorded while it waited for
// the process's first call under its credential (as long as that call
// ran) is returned, and the call does not start.
func (w *Worker) passGate(ctx context.Context, b ledger.Batch, h *hold, c call) (p *credential.Probe, refused bool, stop api.Status) {
	p, refused, waited := w.gate(ctx, b, h, c)
	if waited && !refused && c.recheck != nil {
		stop = c.recheck()
	}
	return p, refused, stop
}

// gate holds a call under b's credential from a secret reference while
// another call of the process under it, not yet answered, is the first
// (credential.Gates, per batch run and subject): a probe to end with the
// call's verdict, or refused true when the call waited for was refused
// (the item is withheld without a call); waited reports that the gate
// was not open when it came, so that it may have waited for that call's
// answer (as long as the call ran). Nothing for a call under no secret
// reference or a halt already standing.
func (w *Worker) gate(ctx context.Context, b ledger.Batch, h *hold, c call) (p *credential.Probe, refused, waited bool) {
	if c.subject == "" || c.halted != "" || w.Secrets == nil {
		return nil, false, false
	}
	after := b.LiftedAt
	if h.lifted.After(after) {
		after = h.lifted
	}
	g, key := made(&w.gates), b.ID+"\x00"+strconv.Itoa(b.Run)+"\x00"+c.subject
	open := g.Open(key)
	p, refused = g.Enter(ctx, key, w.Clock.Now(), after)
	return p, refused, !open && p == nil
}
