package api

import (
	"encoding/json"
	"maps"
	"slices"
)

// Plan is what a batch id names besides its items: the manifest's digest
// and the settings every run of the batch keeps. A repeated submit under
// the id is the same batch only with the same plan; another is refused
// (409 batch_mismatch, a *MismatchError naming the first field that
// differs: ledger.Batch.DiffPlan compares it whole, in the order of the
// fields below). Embedded in Batch, so its JSON names are the batch's.
// bulkrun's own plan fields that the API never shows (a task token, its
// heartbeat, the checks' digest) are ledger.HiddenPlan.
//
// The key field and the source are not in it: they decide the manifest's
// items, which the digest covers (a batch still submitting, with no
// digest yet, compares them with its stored request).
type Plan struct {
	// Pipeline is the registered pipeline run per item (shared/pipeline):
	// a name the stack declares (RegisterPipelineHint). Required.
	Pipeline string `json:"pipeline"`
	// Digest is the manifest's digest: 64 hex digits of the SHA-256 of
	// its bytes, or of its parts for a source read in parts (see
	// docs/design/submit.md); "" while the source is being read
	// (submitting). Corrections keep it (see Revision).
	Digest string `json:"manifest_digest"`
	// Threshold is the tolerated failures of a run (see Threshold): a
	// percent 0–100 and/or a count ≥ 0; neither set tolerates any.
	Threshold Threshold `json:"threshold"`
	// MaxAttempts is the attempts per item, 1–100 and below the items
	// queue's receive limit (config.EnvMaxReceiveCount); a request's 0
	// takes the stack's (config.EnvMaxAttempts, default 3).
	MaxAttempts int `json:"max_attempts"`
	// Retry is the batch's retry policy (with MaxAttempts; see
	// RetryPolicy for its bounds); a request's nil takes the stack's
	// (config.EnvRetryPolicy, else api.DefaultRetryPolicy); nil on rows written before policies existed,
	// which take the worker's default. Read it with
	// ledger.RetryPolicyOf.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// MaxConcurrency is the most items of the batch whose pipeline runs at
	// once, across every invocation (shared/worker, shared/pace),
	// 1–MaxBatchConcurrency (1,000); 0 (the default) is unlimited.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Rate paces the batch's calls in requests a second, shared with the
	// other batches naming its key (see Rate); nil (the default) is
	// unpaced.
	Rate *Rate `json:"rate,omitempty"`
	// Priority is the batch's weight in the items queue's fair share,
	// 1–MaxPriority (SubmitRequest.Priority); 0 (the default, and rows
	// written before the option) is 1. Read it with Plan.Weight.
	Priority int `json:"priority,omitempty"`
	// Sample is how many items the batch's first run runs before it waits
	// for an approval (SubmitRequest.Sample, see sample.go): 1–MaxSample;
	// 0 (the default) runs every item at once.
	Sample int `json:"sample,omitempty"`
	// AutoApproveUSD approves the rest of a sampled batch without a
	// caller when the sample's estimate for the whole run
	// (SampleEstimate.CostUSD) is at most it, in US dollars; 0 (the
	// default) waits for a caller's approval.
	AutoApproveUSD float64 `json:"auto_approve_usd,omitempty"`
	// ItemsPerMessage is how many consecutive manifest items share one
	// items-queue message and one ledger row (a pack), 1–
	// MaxItemsPerMessage (ledger, 100); a request's 0 takes the stack's
	// (config.EnvItemsPerMessage, default 10). 0 on rows written before
	// the option: 1. Read it with ledger.Batch.Pack.
	ItemsPerMessage int `json:"items_per_message,omitempty"`
	// OnInterrupt is what becomes of an item whose attempt was
	// interrupted (see InterruptPolicy): retry (a request's "") or
	// quarantine; "" on rows written before the option, which retry.
	OnInterrupt InterruptPolicy `json:"on_interrupt"`
	// Headers reach the pipeline: names of 1–256 token characters, not
	// starting with ReservedHeaderPrefix; at most MaxHeaderBytes (16 KiB)
	// of names and values; values may be secret references. Shown
	// redacted (secretref.Redacted).
	Headers map[string]string `json:"headers,omitempty"`
	// Options is the pipeline's own JSON object (e.g. webhook's url),
	// checked by the pipeline at submit; a request's none is {}. Shown
	// redacted (secretref.Redacted).
	Options json.RawMessage `json:"pipeline_options,omitempty"`
	// StopOnThreshold: see SubmitRequest.StopOnThreshold; nil (rows
	// written before the option existed) means true. Read it with EarlyStop.
	StopOnThreshold *bool `json:"stop_on_threshold,omitempty"`
}

// Weight is p's priority, 1 when unset.
func (p Plan) Weight() int { return max(1, p.Priority) }

// EarlyStop reports whether the run stops as soon as its failures exceed
// the threshold (the default, as Distributed Map does), rather than running
// every item and judging at the end.
func (p Plan) EarlyStop() bool { return p.StopOnThreshold == nil || *p.StopOnThreshold }

// Clone returns p sharing no memory with it: its map, bytes and pointers
// copied.
func (p Plan) Clone() Plan {
	p.Headers = maps.Clone(p.Headers)
	p.Options = slices.Clone(p.Options)
	p.Threshold.FailurePercent = clonePtr(p.Threshold.FailurePercent)
	p.Threshold.FailureCount = clonePtr(p.Threshold.FailureCount)
	p.Retry = clonePtr(p.Retry)
	p.Rate = clonePtr(p.Rate)
	p.StopOnThreshold = clonePtr(p.StopOnThreshold)
	return p
}

func clonePtr[T any](v *T) *T {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
