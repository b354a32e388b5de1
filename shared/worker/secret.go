package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

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
	if refs, err := secretref.Refs(headers, options); err != nil || len(refs) == 0 {
		return headers, options, nil
	}
	if s == nil {
		return nil, nil, fmt.Errorf("%w: this item function resolves no secrets", ErrSecret)
	}
	resolve := s.Resolve
	if f, ok := s.(FreshSecrets); ok && fresh {
		resolve = f.ResolveFresh
	}
	h, o, err := secretref.Resolve(ctx, resolve, headers, options)
	var re *secretref.ResolveError
	switch {
	case err == nil:
		return h, o, nil
	case errors.As(err, &re) && errors.Is(err, ledger.ErrUnavailable):
		return nil, nil, err
	case errors.As(err, &re):
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrSecret, re.ARN, re.Err)
	default:
		return nil, nil, fmt.Errorf("%w: %v", ErrSecret, err)
	}
}

// runPipeline runs p once for req (runSafely) and bounds the result's
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
func (w *Worker) runPipeline(ctx context.Context, log *slog.Logger, p pipeline.Pipeline, b ledger.Batch, req pipeline.Request) (res pipeline.Result, rr reread, err error) {
	res, err = runSafely(ctx, p, req)
	if c, folded := pipeline.BoundCost(res.Cost); folded > 0 {
		log.WarnContext(ctx, "cost record beyond its limits; names folded", "folded_names", folded,
			"max_cost_names", pipeline.MaxCostNames, "max_cost_name_bytes", pipeline.MaxCostNameBytes)
		res.Cost = c
	}
	if err != nil && pipeline.IsCredentialRejected(err) {
		rr = w.reread(ctx, log, b, req)
	}
	return res, rr, err
}

// liftedSecrets is the batch's headers and options with their secret
// references read again bypassing the cache (FreshSecrets), when one of
// the unit's items to run was withheld under a halt on them
// (api.OutcomeWithheld) and woken by a lift (api.WakeLift; hold.lifted)
// after this process last read them so:
// the lift says the secret was fixed, and a value cached before it (up to
// the cache's life) is the refused one, which would be sent once more and
// refused before the new one (a 401 for every process's first woken
// item). Read so at most once per process every freshEvery while lifted
// items come, then from the cache it refreshed; ok false when the unit
// has no such item, or the read failed (the values resolved before the
// take stand, and a refusal reads them again as any does). A lifted item
// given back unstarted and taken again at one item a message is in
// flight, not withheld, on that take: it is not told apart, and its
// process sends what it has cached.
func (w *Worker) liftedSecrets(ctx context.Context, log *slog.Logger, b ledger.Batch, h *hold) (map[string]string, json.RawMessage, bool) {
	if w.Secrets == nil {
		return nil, nil, false
	}
	woken := h.lifted
	subject := ledger.SecretSubject(b.Headers, b.Options)
	if woken.IsZero() || subject == "" {
		return nil, nil, false
	}
	// One read per process and lift: the units that find it read since
	// take the value it left in the cache (they may have resolved theirs
	// from the cache before it).
	f := w.freshReads()
	f.mu.Lock()
	defer f.mu.Unlock()
	now := w.Clock.Now() // before the read: a lift after it starts is after it
	at, read := f.at[subject]
	fresh := !read || at.Before(woken) && now.Sub(at) >= freshEvery
	rctx, cancel := context.WithTimeout(ctx, freshReadTime)
	defer cancel()
	headers, options, err := resolveSecretsFrom(rctx, w.Secrets, b.Headers, b.Options, fresh)
	if err != nil {
		log.WarnContext(ctx, "lifted halt's secret not read again; the cached value is sent", "subject", subject, "error", pipeline.ErrorText(err))
		return nil, nil, false
	}
	if fresh {
		if len(f.at) >= maxFreshSubjects {
			clear(f.at)
		}
		f.at[subject] = now
	}
	return headers, options, true
}

// freshEvery is the least time between two reads of a subject's secrets
// past the cache by one process for lifted items: 30 s. A lift wakes its
// items in pages, each stamped with its own time, for up to 20 s
// (control's WakeTime); one read per page would be processes × pages
// reads of a parameter store that takes about 40 a second (SSM
// GetParameter's standard throughput, "AWS Systems Manager endpoints and
// quotas"). A second lift within 30 s of a read (a fix that was wrong
// too) sends the cached value: refused, it is read again as any refusal
// is.
const freshEvery = 30 * time.Second

// freshReadTime bounds one read past the cache for lifted items, which
// holds the process's other lifted units: 3 s, where a read takes tens of
// milliseconds.
const freshReadTime = 3 * time.Second

// freshReads is when a process last read each halt subject's secrets
// past the cache for a lifted item (liftedSecrets), at most
// maxFreshSubjects of them.
type freshReads struct {
	mu sync.Mutex
	at map[string]time.Time
}

// maxFreshSubjects bounds freshReads: a subject forgotten is read past
// the cache once more at its next lifted item.
const maxFreshSubjects = 256

// freshBooks guards the making of a Worker's freshReads.
var freshBooks sync.Mutex

// freshReads is w.fresh, made on first use (a Worker copied before that
// keeps its own).
func (w *Worker) freshReads() *freshReads {
	freshBooks.Lock()
	defer freshBooks.Unlock()
	if w.fresh == nil {
		w.fresh = &freshReads{at: map[string]time.Time{}}
	}
	return w.fresh
}

// reread is what reading a rejected credential's secrets again found.
type reread int

const (
	// rereadNone: not read again (no secret reference, no secrets
	// resolver, or the read failed).
	rereadNone reread = iota
	// rereadRotated: a value changed since the call's was read.
	rereadRotated
	// rereadUnchanged: every value reads as the call sent it: the
	// credential itself is refused (the item is withheld).
	rereadUnchanged
)

// reread reads the secret references of b's headers and options again,
// bypassing the cache, and compares them with what req was sent with.
func (w *Worker) reread(ctx context.Context, log *slog.Logger, b ledger.Batch, req pipeline.Request) reread {
	if refs, rerr := secretref.Refs(b.Headers, b.Options); rerr != nil || len(refs) == 0 || w.Secrets == nil {
		return rereadNone
	}
	headers, options, serr := resolveSecretsFrom(ctx, w.Secrets, b.Headers, b.Options, true)
	if serr != nil {
		log.WarnContext(ctx, "credential rejected; reading its secret again failed", "error", pipeline.ErrorText(serr))
		return rereadNone
	}
	if maps.Equal(headers, req.Headers) && bytes.Equal(options, req.Options) {
		log.WarnContext(ctx, "credential rejected; its secret reads the same again: the item is withheld under a halt on it")
		return rereadUnchanged
	}
	log.InfoContext(ctx, "credential rejected; its secret changed since it was cached: the next attempt sends the new value")
	return rereadRotated
}
