// Package credential resolves the credentials an item's call acts under:
// a batch's headers and options with their secret references
// (shared/secretref) replaced by the values a Secrets store reads, read
// again past the store's cache when a receiver refused the value
// (Compare) or when a lift says the secret was fixed (Lifts). The item
// engine (shared/worker) calls it around each unit's calls; it holds no
// AWS SDK (internal/secret implements Secrets).
package credential

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

// Secrets resolves a secret reference's ARN to its value. Implementations
// return an error wrapping ledger.ErrUnavailable when AWS was unavailable
// (throttling, 5xx), and any other error when the reference cannot be
// resolved (missing, access denied); they are safe for concurrent use.
type Secrets interface {
	Resolve(ctx context.Context, arn string) (string, error)
}

// FreshSecrets is a Secrets with a cache that can be bypassed:
// ResolveFresh reads the value from its service whatever is cached (and
// caches it). Used when a receiver rejected a credential resolved from a
// reference (pipeline.IsCredentialRejected) and after a lift; a Secrets
// without it is read with Resolve again.
type FreshSecrets interface {
	Secrets
	ResolveFresh(ctx context.Context, arn string) (string, error)
}

// ErrSecret marks a secret reference that could not be resolved: the item
// fails permanently with a message naming the reference, never the value.
var ErrSecret = errors.New("secret reference not resolved")

// Resolve returns headers and options with every secret reference
// replaced by its value (unchanged when they hold none); fresh reads
// every reference from its service, bypassing the cache (FreshSecrets).
// An error wraps ledger.ErrUnavailable (retry later) or ErrSecret (fail
// the item), naming the reference, never a value.
func Resolve(ctx context.Context, s Secrets, headers map[string]string, options json.RawMessage, fresh bool) (map[string]string, json.RawMessage, error) {
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

// Reread is what reading a refused credential's secrets again found.
type Reread int

const (
	// RereadNone: not read again (no secret reference, no secrets
	// store, or the read failed).
	RereadNone Reread = iota
	// RereadRotated: a value changed since the call's was read.
	RereadRotated
	// RereadUnchanged: every value reads as the call sent it: the
	// credential itself is refused (the item is withheld).
	RereadUnchanged
)

// Recheck is Compare for a call the receiver refused, logged on log:
// the read's failure (RereadNone), the same values (RereadUnchanged: the
// item is withheld under a halt), or a rotation (RereadRotated: the next
// attempt sends the new value).
func Recheck(ctx context.Context, log *slog.Logger, s Secrets, headers map[string]string, options json.RawMessage, sentHeaders map[string]string, sentOptions json.RawMessage) Reread {
	rr, err := Compare(ctx, s, headers, options, sentHeaders, sentOptions)
	switch {
	case err != nil:
		log.WarnContext(ctx, "credential rejected; reading its secret again failed", "error", pipeline.ErrorText(err))
	case rr == RereadUnchanged:
		log.WarnContext(ctx, "credential rejected; its secret reads the same again: the item is withheld under a halt on it")
	case rr == RereadRotated:
		log.InfoContext(ctx, "credential rejected; its secret changed since it was cached: the next attempt sends the new value")
	}
	return rr
}

// Compare reads the secret references of headers and options again,
// bypassing the cache, and compares the values with what a refused call
// was sent with (sentHeaders, sentOptions); err is the read's failure
// (RereadNone).
func Compare(ctx context.Context, s Secrets, headers map[string]string, options json.RawMessage, sentHeaders map[string]string, sentOptions json.RawMessage) (Reread, error) {
	if refs, rerr := secretref.Refs(headers, options); rerr != nil || len(refs) == 0 || s == nil {
		return RereadNone, nil
	}
	h, o, err := Resolve(ctx, s, headers, options, true)
	switch {
	case err != nil:
		return RereadNone, err
	case maps.Equal(h, sentHeaders) && bytes.Equal(o, sentOptions):
		return RereadUnchanged, nil
	default:
		return RereadRotated, nil
	}
}
