package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/internal/keyset"
	"github.com/bulkrun/bulkrun/internal/metric"
	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/lifecycle"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/validate"
)

// SubmitResult is what Submit returns: the batch, and whether this call
// created it (false: an identical submit had, and this one is idempotent).
type SubmitResult struct {
	Batch   ledger.Batch `json:"batch"`
	Created bool         `json:"created"`
}

// Submitter streams a source into a manifest, creates the batch row
// conditionally and starts the fan-out. Safe for concurrent use.
type Submitter struct {
	Store     Store
	Blobs     ledger.Blobs
	Queue     ledger.Queue
	Trigger   ledger.Trigger
	Clock     ledger.Clock
	Log       *slog.Logger
	Pipelines []string // accepted pipeline names
	// Traces makes the submit's span (tracing.Provider.StartSubmit), whose
	// context each new batch stores; nil: none recorded, the context still
	// stored (the caller's, or a new root).
	Traces *tracing.Provider
	// Registry, when set, lets submit check a batch's pipeline options with
	// the pipeline's own rules (pipeline.OptionsValidator) before any item
	// runs. Pipelines it does not hold are accepted by name only.
	Registry    *pipeline.Registry
	MaxAttempts int // default per item
	// ItemTimeout is the item function's timeout (config.EnvItemTimeoutSeconds),
	// for Warnings; 0: unknown.
	ItemTimeout time.Duration
	// TickPeriod is the longest time between two finalize ticks, which
	// send task heartbeats (config.EnvTickSeconds): a task_heartbeat_seconds
	// shorter than twice it is refused. 0: config.DefaultTickPeriod.
	TickPeriod time.Duration
	// Retry is the retry policy of a request that sets none (the stack's,
	// config.EnvRetryPolicy); nil stores none, and the worker's default
	// applies.
	Retry *api.RetryPolicy
	// ItemsPerMessage is the items per message of a request that sets
	// none (0 or 1: one). The stack sets it from
	// config.EnvItemsPerMessage.
	ItemsPerMessage int
	// SecretPrefixes are the ARNs (or ARN prefixes ending in "*") of the
	// SSM parameters and Secrets Manager secrets a batch may reference
	// (see SecretRef); the item function's role may read exactly these.
	// Empty: no reference is accepted.
	SecretPrefixes []string
	// MaxReceiveCount is the items queue's redrive limit: a batch's
	// max_attempts must stay below it, or a message would be dead-lettered
	// while its item still has attempts left. 0: unchecked.
	MaxReceiveCount int
	ChunkItems      int // items per fan-out message; 0 = DefaultChunkItems
	// FanOutHere is the most item messages submit sends itself for a
	// batch in one manifest chunk (fanOutHere), rather than a fan-out
	// message the item function expands; 0: none, every chunk gets a
	// fan-out message. The stack sets DefaultFanOutHere.
	FanOutHere int
	// Metrics counts the item messages submit sends itself
	// (metric.FannedOut, as the item function's fan-out does); nil for
	// none.
	Metrics *metric.Emitter
	// ItemsPerSecond is the most items per second the stack's item
	// function can finish (StackFlow of its event source's maximum
	// concurrency and batch size); it sizes a batch's shards (ListShards,
	// CounterShards). 0 means DefaultItemsPerSecond.
	ItemsPerSecond int
	TempDir        string // where duplicate-key detection spills; "" = OS temp dir
	// Keys tunes duplicate-key detection (memory budget, fault injection);
	// its Dir defaults to TempDir, its MemoryBytes to
	// SubmitKeysMemoryBytes.
	Keys keyset.Options
	// TempLimitBytes is the size of the disk under TempDir (the submit
	// function's ephemeral storage), named when it fills up; 0: unknown.
	TempLimitBytes int64
	// Parts, when set, reads a large JSON Lines or CSV object in parts, each its
	// own invocation, at once (see PartsConfig); nil reads every source in
	// one invocation.
	Parts *PartsConfig
	// Handoff starts the background read of a batch accepted by Accept;
	// nil makes Accept read the source in the call, as Submit does.
	Handoff Handoff
	// MaxSubmitAttempts bounds the background reads of one batch's source
	// before the tick refuses it; 0 means DefaultMaxSubmitAttempts.
	MaxSubmitAttempts int
	// Retention is how long a refused batch is kept; 0 means 30 days.
	Retention time.Duration
	// Sources limits the S3 objects and prefixes a source may name (see
	// SourcePolicy); the zero value allows any.
	Sources source.SourcePolicy
	// Regions and Region, when both set, refuse an S3 source in a bucket
	// of another Region than Region (the stack's, AWS_REGION) at submit,
	// naming both Regions (checkSourceRegion); each bucket's Region is
	// read once per process.
	Regions BucketRegions
	Region  string
	// UploadRepeatWindow is how long an upload's content is remembered:
	// the same items for the same pipeline and options uploaded under
	// another name within it are not run again (ClaimUpload). 0 remembers
	// nothing. The stack sets it from config.EnvUploadRepeatDays.
	UploadRepeatWindow time.Duration
	// Bus gets the Batch State Change events of the changes submit makes:
	// submitted, running (a first run, a resume, a rerun, a correction
	// run) and refused (a background read's refusal); nil for none.
	// Delivery is best effort (a failed put is logged).
	Bus ledger.EventBus
	// Tasks answers the task token of a batch refused before its first
	// run (ledger.TaskEnd, api.TaskErrorRefused); nil for none. Best
	// effort: a failure is logged (the batch's status says refused).
	Tasks ledger.Tasks
}

// announce puts the Batch State Change event of b's change, at the change's
// own time at (for its event id) and now.
func (s *Submitter) announce(ctx context.Context, b ledger.Batch, change api.StateChange, at time.Time) {
	e := ledger.StateChangeOf(b, change, at, s.Clock.Now())
	if change == api.ChangeRefused && b.Refusal != nil {
		r := *b.Refusal
		r.Message = pipeline.CutText(r.Message, pipeline.MaxErrorTextBytes)
		e.Refusal = &r
	}
	ledger.AnnounceChange(ctx, s.Bus, s.Log, e)
}

// SubmitKeysMemoryBytes is the duplicate-key detector's buffer in a
// submit (keyset.Options.MemoryBytes): 8 MiB. The buffer weighs about
// 2.6 times its budget at submit's peak (its index is grown by copying,
// and the Go heap reaches about twice what is live between collections):
// a submit of 10^6 items of 1 KB with 110-byte keys peaks at ≈ 104 MiB
// with it, ≈ 125 MiB at 16 MiB and ≈ 134 MiB at keyset's 32 MiB default,
// in the same CPU time; spilling more runs costs ≈ 1 ms per 1,000 keys
// (docs/design/measured.md, "Measured").
const SubmitKeysMemoryBytes = 8 << 20

// Validate checks the request and names the field at fault (an *InputError).
func (s *Submitter) Validate(req *api.SubmitRequest) error {
	if req.BatchID != "" && !api.ValidBatchID(req.BatchID) {
		return &api.InputError{Field: "batch_id", Reason: fmt.Sprintf("%q is not 1–128 bytes of [A-Za-z0-9_-]", api.Truncate(req.BatchID, 140))}
	}
	if req.Pipeline == "" {
		return &api.InputError{Field: "pipeline", Reason: "required"}
	}
	if len(s.Pipelines) > 0 && !slices.Contains(s.Pipelines, req.Pipeline) {
		return &api.InputError{Field: "pipeline", Reason: fmt.Sprintf("%q is not a registered pipeline (have %s); %s", req.Pipeline, strings.Join(s.Pipelines, ", "), api.RegisterPipelineHint)}
	}
	if err := req.Source.Validate(req.KeyField); err != nil {
		return err
	}
	if err := s.Sources.CheckSource(req.Source); err != nil {
		return err
	}
	if len(req.TaskToken) > api.MaxTaskTokenBytes || strings.ContainsAny(req.TaskToken, "\x00\r\n") {
		return &api.InputError{Field: "task_token", Reason: fmt.Sprintf("not a Step Functions task token (1–%d bytes, one line)", api.MaxTaskTokenBytes)}
	}
	if req.TaskToken != "" && req.Rerun {
		return &api.InputError{Field: "task_token", Reason: "only a batch's first run answers a task token; a rerun cannot carry one"}
	}
	if err := checkHeartbeat(*req, s.TickPeriod); err != nil {
		return err
	}
	if req.KeyField != "" && (len(req.KeyField) > 256) {
		return &api.InputError{Field: "key_field", Reason: "longer than 256 bytes"}
	}
	if err := req.Threshold.Validate(); err != nil {
		return err
	}
	if req.OnInterrupt != "" && req.OnInterrupt != api.InterruptRetry && req.OnInterrupt != api.InterruptQuarantine {
		return &api.InputError{Field: "on_interrupt", Reason: fmt.Sprintf("%q: want retry or quarantine", req.OnInterrupt)}
	}
	if req.MaxAttempts < 0 || req.MaxAttempts > 100 {
		return &api.InputError{Field: "max_attempts", Reason: fmt.Sprintf("%d is not within 1–100", req.MaxAttempts)}
	}
	if req.BudgetUSD != nil {
		if err := api.CheckBudget("budget_usd", *req.BudgetUSD); err != nil {
			return err
		}
	}
	if req.Ceilings != nil {
		if err := req.Ceilings.Check("ceilings"); err != nil {
			return err
		}
	}
	if req.MaxConcurrency < 0 || req.MaxConcurrency > api.MaxBatchConcurrency {
		return &api.InputError{Field: "max_concurrency", Reason: fmt.Sprintf("%d is not within 1–%d (0: unlimited)", req.MaxConcurrency, api.MaxBatchConcurrency)}
	}
	if req.Priority < 0 || req.Priority > api.MaxPriority {
		return &api.InputError{Field: "priority", Reason: fmt.Sprintf("%d is not within 1–%d (0: 1)", req.Priority, api.MaxPriority)}
	}
	if err := checkSample(*req); err != nil {
		return err
	}
	if req.Rate != nil {
		if err := req.Rate.Validate(); err != nil {
			return err
		}
	}
	if req.ItemsPerMessage < 0 || req.ItemsPerMessage > ledger.MaxItemsPerMessage {
		return &api.InputError{Field: "items_per_message", Reason: fmt.Sprintf("%d is not within 1–%d (0: the stack's default, %d)", req.ItemsPerMessage, ledger.MaxItemsPerMessage, max(1, min(s.ItemsPerMessage, ledger.MaxItemsPerMessage)))}
	}
	if req.Retry != nil {
		if err := req.Retry.Validate(); err != nil {
			return err
		}
	}
	if err := validateChecks(req); err != nil {
		return err
	}
	if s.MaxReceiveCount > 0 && req.MaxAttempts >= s.MaxReceiveCount {
		return &api.InputError{Field: "max_attempts", Reason: fmt.Sprintf("%d is not below the items queue's receive limit (%d): a message would be dead-lettered while its item has attempts left", req.MaxAttempts, s.MaxReceiveCount)}
	}
	size := 0
	for k, v := range req.Headers {
		if strings.HasPrefix(strings.ToLower(k), api.ReservedHeaderPrefix) {
			return &api.InputError{Field: "headers." + k, Reason: fmt.Sprintf("the %q prefix is reserved", api.ReservedHeaderPrefix)}
		}
		if !headerNameRE.MatchString(k) {
			return &api.InputError{Field: "headers." + k, Reason: "a header name is 1–256 token characters (RFC 9110 §5.1)"}
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return &api.InputError{Field: "headers." + k, Reason: "a header value may not hold CR, LF or NUL"}
		}
		size += len(k) + len(v)
	}
	if size > api.MaxHeaderBytes {
		return &api.InputError{Field: "headers", Reason: fmt.Sprintf("%d bytes, more than %d", size, api.MaxHeaderBytes)}
	}
	if err := secretref.Check(s.SecretPrefixes, req.Headers, req.Options); err != nil {
		return err
	}
	if len(req.Options) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(req.Options, &obj); err != nil && string(req.Options) != "null" {
			return &api.InputError{Field: "pipeline_options", Reason: "want a JSON object", Err: err}
		}
	}
	if s.Registry != nil {
		if p, ok := s.Registry.Lookup(req.Pipeline); ok {
			if v, ok := p.(pipeline.OptionsValidator); ok {
				opts := req.Options
				if len(opts) == 0 {
					opts = json.RawMessage("{}")
				}
				if err := v.ValidateOptions(opts); err != nil {
					if oe := (*pipeline.OptionError)(nil); errors.As(err, &oe) && oe.Option != "" {
						return &api.InputError{Field: "pipeline_options." + oe.Option, Reason: fmt.Sprintf("refused by pipeline %q", req.Pipeline), Err: err}
					}
					return &api.InputError{Field: "pipeline_options", Reason: err.Error()}
				}
			}
		}
	}
	return nil
}

// validateChecks checks a request's bad_rows, max_invalid_percent and
// schema (compiled: a schema that does not compile is refused naming the
// keyword).
func validateChecks(req *api.SubmitRequest) error {
	switch req.BadRows {
	case "", api.BadRowsRefuse, api.BadRowsFail:
	default:
		return &api.InputError{Field: "bad_rows", Reason: fmt.Sprintf("%q: want refuse or fail", req.BadRows)}
	}
	if p := req.MaxInvalidPercent; p != nil && (*p <= 0 || *p > 100) {
		return &api.InputError{Field: "max_invalid_percent", Reason: fmt.Sprintf("%v is not within (0, 100]", *p)}
	}
	if len(req.Schema) > 0 && string(req.Schema) != "null" {
		if _, err := validate.Compile(req.Schema); err != nil {
			return &api.InputError{Field: "schema", Reason: err.Error()}
		}
	} else {
		req.Schema = nil
	}
	return nil
}

var headerNameRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]{1,256}$")

// checkHeartbeat checks req's TaskHeartbeatSeconds: 0, or with a task
// token between twice the tick that sends the heartbeats (tick, the
// stack's finalize tick period; 0: config.DefaultTickPeriod), and at least
// api.MinTaskHeartbeatSeconds, and api.MaxTaskHeartbeatSeconds.
func checkHeartbeat(req api.SubmitRequest, tick time.Duration) error {
	if tick <= 0 {
		tick = time.Duration(api.MinTaskHeartbeatSeconds/2) * time.Second // the default tick, config.DefaultTickPeriod
	}
	least := max(api.MinTaskHeartbeatSeconds, int(2*tick/time.Second))
	h := req.TaskHeartbeatSeconds
	switch {
	case h == 0:
		return nil
	case req.TaskToken == "":
		return &api.InputError{Field: "task_heartbeat_seconds", Reason: "heartbeats are sent for a task token: give task_token too"}
	case h < least || h > api.MaxTaskHeartbeatSeconds:
		return &api.InputError{Field: "task_heartbeat_seconds", Reason: fmt.Sprintf(
			"%s is out of range: %d to %d (bulkrun sends a heartbeat on each tick of the stack's finalize schedule, every %s, so the Task state's HeartbeatSeconds must allow two)",
			api.Count(h, "second"), least, api.MaxTaskHeartbeatSeconds, api.Count(int(tick/time.Second), "second"))}
	}
	return nil
}

// Submit creates a batch, or returns the existing identical one.
//
// Steps: validate; stream the source into a new manifest object (multipart),
// hashing it and detecting duplicate keys; put the batch row only if absent;
// send the fan-out messages; mark the batch fanned out. On bad input the
// manifest upload is aborted and nothing is written (an *InputError names
// the field or line); a source without items is refused the same way, its
// error matching ErrEmptySource. If the id exists with the same digest and pipeline,
// the new manifest is deleted and the stored batch returned (Created false);
// a fan-out interrupted by a crash is resumed. Another digest or pipeline is
// a *MismatchError (ErrBatchMismatch). Idempotent per (id, manifest).
//
// An id whose batch has expired (Batch.Expired: its retention ended, swept
// or not), is pending deletion or was refused starts a fresh batch: the
// stale batch is forgotten first (objects and rows), then the submit is
// made again.
func (s *Submitter) Submit(ctx context.Context, req api.SubmitRequest) (res SubmitResult, err error) {
	ctx, end := s.Traces.StartSubmit(ctx)
	defer func() { end(res.Batch.ID, err) }()
	res, err = s.submit(ctx, req)
	if errors.Is(err, errStaleCleared) {
		return s.submit(ctx, req)
	}
	return res, err
}

// errStaleCleared says that submit found the id held by an expired batch
// and forgot it: the submit is to be made again.
var errStaleCleared = errors.New("stale batch cleared")

// stale reports whether the stored batch of a submitted id no longer holds
// the id: expired, pending deletion, or refused. A refused batch ran
// nothing and froze no manifest, so its id is free for the corrected
// request, as it was when a bad source was refused within the submit call:
// the next submit under the id (the same request or another) forgets the
// refusal and starts afresh; repeating a request whose source is still bad
// is refused again, by the same rule.
func (s *Submitter) stale(stored ledger.Batch) bool {
	return stored.Expired(s.Clock.Now()) || stored.PendingDeletion || stored.Status == api.StatusRefused
}

// clearStale forgets a stale batch (objects and rows) so that its id can
// start a fresh batch.
func (s *Submitter) clearStale(ctx context.Context, stored ledger.Batch) error {
	why := "expired"
	if stored.Status == api.StatusRefused {
		why = "refused"
	}
	if err := lifecycle.ForgetStale(ctx, s.Store, s.Blobs, stored, s.Log); err != nil && !errors.Is(err, api.ErrNotFound) {
		return fmt.Errorf("submit %s: clear the %s batch first: %w", stored.ID, why, err)
	}
	s.Log.InfoContext(ctx, why+" batch cleared; its id starts a fresh batch", "batch_id", stored.ID, "expired_at", stored.ExpiresAt.Format(time.RFC3339))
	return nil
}

func (s *Submitter) submit(ctx context.Context, req api.SubmitRequest) (SubmitResult, error) {
	if err := s.prepare(&req); err != nil {
		return SubmitResult{}, err
	}
	if err := s.checkSourceRegion(ctx, req.Source); err != nil {
		return SubmitResult{}, err
	}
	log := s.Log.With("batch_id", req.BatchID)
	start := s.Clock.Now()

	manifestKey, sum, checked, err := s.writeManifest(ctx, req, false)
	if err != nil {
		return SubmitResult{}, err
	}
	b := planOf(req, s.Clock.Now())
	traced(ctx, &b)
	b.Freeze(manifestKey, sum, s.ItemsPerSecond)
	b.Checked = checked
	stored, err := s.Store.CreateBatch(ctx, b)
	if errors.Is(err, api.ErrBatchExists) && stored.ManifestKey == manifestKey {
		// Our own row: the SDK retried a put whose first try was written
		// but whose answer was lost.
		err = nil
	}
	created := err == nil
	switch {
	case created:
		stored = b
		s.announce(ctx, stored, api.ChangeSubmitted, stored.CreatedAt)
		s.announce(ctx, stored, api.ChangeRunning, stored.RunStartedAt)
	case errors.Is(err, api.ErrBatchExists):
		// Another submit's row: this manifest is nobody's.
		if derr := s.Blobs.Delete(ctx, manifestKey); derr != nil {
			log.WarnContext(ctx, "delete duplicate manifest", "error", derr.Error())
		}
		if checked != nil {
			if derr := s.Blobs.Delete(ctx, checked.Object); derr != nil {
				log.WarnContext(ctx, "delete duplicate invalid-items file", "error", derr.Error())
			}
		}
		if s.stale(stored) {
			if err := s.clearStale(ctx, stored); err != nil {
				return SubmitResult{}, err
			}
			return SubmitResult{}, errStaleCleared
		}
		if stored.Status == api.StatusSubmitting {
			// Accepted earlier and read in the background: compare the requests.
			return s.repeated(ctx, stored, req)
		}
		if field, was, now := stored.DiffPlan(b); field != "" {
			return SubmitResult{}, &api.MismatchError{BatchID: b.ID, Field: field, Stored: was, Given: now}
		}
		if req.Rerun && allSucceeded(stored) {
			// Nothing to run: answered as it stands, as a repeated submit
			// is (a resume of it is refused: ErrConflict).
			log.InfoContext(ctx, "rerun of a batch whose every item succeeded starts no run", "run", stored.Run)
			return SubmitResult{Batch: stored, Created: false}, nil
		}
		if req.Rerun {
			resumed, err := s.Resume(ctx, b.ID)
			if err != nil {
				return SubmitResult{}, err
			}
			return SubmitResult{Batch: resumed, Created: false}, nil
		}
		if stored.FannedOut || stored.Run != 1 || stored.Status != api.StatusRunning {
			log.InfoContext(ctx, "duplicate submit", "run", stored.Run, "status", string(stored.Status))
			return SubmitResult{Batch: stored, Created: false}, nil
		}
		log.InfoContext(ctx, "duplicate submit resumes an interrupted fan-out")
	default:
		// The put's outcome is unknown (it may have been written): keep the
		// manifest, which the row may name. A retry finds the row and
		// answers from it; an orphan under batches/{id}/ goes with the
		// batch's forget or retention.
		return SubmitResult{}, fmt.Errorf("submit %s: create batch row: %w", b.ID, err)
	}

	// The chunks are a function of the manifest bytes, so a resumed fan-out
	// sends the same chunks as the interrupted one (re-sent items are
	// deduplicated by their reservation).
	if err := s.fanout(ctx, stored, sum.Chunks); err != nil {
		return SubmitResult{}, err
	}
	stored.FannedOut = true
	log.InfoContext(ctx, "batch submitted", "items", sum.Count, "chunks", len(sum.Chunks), "created", created,
		"duration_ms", s.Clock.Now().Sub(start).Milliseconds())
	return SubmitResult{Batch: stored, Created: created}, nil
}

// prepare validates req and fills its defaults: a new ULID batch id, the
// stack's max attempts and retry policy, the retry interrupt policy,
// empty options.
func (s *Submitter) prepare(req *api.SubmitRequest) error {
	if err := s.Validate(req); err != nil {
		return err
	}
	if req.BatchID == "" {
		req.BatchID = ledger.NewBatchID()
	}
	if req.MaxAttempts == 0 {
		req.MaxAttempts = s.MaxAttempts
	}
	if req.Retry == nil && s.Retry != nil {
		req.Retry = new(*s.Retry)
	}
	if req.OnInterrupt == "" {
		req.OnInterrupt = api.InterruptRetry
	}
	if req.ItemsPerMessage == 0 {
		req.ItemsPerMessage = 1
		if s.ItemsPerMessage > 1 {
			req.ItemsPerMessage = min(s.ItemsPerMessage, ledger.MaxItemsPerMessage)
		}
	}
	if len(req.Options) == 0 || string(req.Options) == "null" {
		req.Options = json.RawMessage("{}")
	}
	return nil
}

// writeManifest streams req's source into a new manifest object (its own
// key: a repeated submit never touches another's manifest), hashing it,
// detecting duplicate keys and checking every row (see checking): the
// schema, and the bad-rows policy. Every problem goes to an
// invalid-items file of this attempt (api.InvalidKey, written only when
// there is one), summed up in the returned *api.CheckSummary. Under
// bad_rows fail with duplicate keys the source is read a second time,
// leaving their later rows out. On error the manifest upload is aborted
// and nothing is left (the invalid-items file is kept when keepInvalid
// and the source was refused for its problems, so that a refused batch
// lists them): an *InputError names the field or line (for problems, the
// first, wrapping an *api.ProblemsError), a *StorageFullError says the
// temporary disk was too small.
func (s *Submitter) writeManifest(ctx context.Context, req api.SubmitRequest, keepInvalid bool) (string, source.ManifestSummary, *api.CheckSummary, error) {
	attempt := ledger.NewBatchID()
	invalid := &lazyObject{ctx: ctx, blobs: s.Blobs, key: api.InvalidKey(req.BatchID, attempt)}
	c, err := newChecking(req, invalid)
	if err != nil {
		return "", source.ManifestSummary{}, nil, err
	}
	object := func() string {
		if invalid.written() {
			return invalid.key
		}
		return ""
	}
	verdict := func(sum source.ManifestSummary) error {
		named := "" // a refusal names the file only when it is kept
		if keepInvalid {
			named = object()
		}
		if err := c.refusal(named); err != nil {
			return err
		}
		if sum.Count == 0 {
			// A batch of nothing is almost always a wrong file or prefix, and
			// would "succeed" doing nothing: refuse it before anything exists.
			return &api.InputError{Field: sourceField(req.Source), Reason: "holds no items (blank and whitespace-only lines are not items)", Err: api.ErrEmptySource}
		}
		return nil
	}
	manifestKey := api.ManifestKey(req.BatchID, attempt)
	sum, err := s.writeChecked(ctx, req, c, manifestKey, true, verdict)
	if err == nil && c.drop != nil {
		// The later rows of duplicate keys are not items: read again
		// without them, into a manifest of its own.
		manifestKey = api.ManifestKey(req.BatchID, ledger.NewBatchID())
		sum, err = s.writeChecked(ctx, req, c, manifestKey, false, verdict)
	}
	var pe *api.ProblemsError
	switch {
	case err == nil, errors.As(err, &pe) && keepInvalid:
		if kerr := invalid.keep(); kerr != nil {
			s.Log.WarnContext(ctx, "complete invalid-items file", "batch_id", req.BatchID, "error", kerr.Error())
			if err == nil {
				err = fmt.Errorf("submit %s: complete invalid-items file: %w", req.BatchID, kerr)
			}
		}
	default:
		invalid.discard()
	}
	if err != nil {
		return "", source.ManifestSummary{}, nil, err
	}
	return manifestKey, sum, c.summary(object()), nil
}

// writeChecked reads req's source through c into the manifest object
// manifestKey (record: the first read, which records the problems; else
// the second, leaving c.drop's rows out) and completes it, unless the
// last read's verdict refuses it. On error the upload is aborted.
func (s *Submitter) writeChecked(ctx context.Context, req api.SubmitRequest, c *checking, manifestKey string, record bool,
	verdict func(source.ManifestSummary) error) (source.ManifestSummary, error) {
	w, err := s.Blobs.Create(ctx, manifestKey, "application/x-ndjson")
	if err != nil {
		return source.ManifestSummary{}, fmt.Errorf("submit %s: create manifest: %w", req.BatchID, err)
	}
	mw := source.NewManifestWriterOptions(w, source.ManifestOptions{ChunkItems: s.ChunkItems, Keys: s.keysOptions(), TempLimitBytes: s.TempLimitBytes})
	defer mw.Close()
	err = s.readSource(ctx, req, c, mw)
	var sum source.ManifestSummary
	if err == nil {
		var drop map[int64]bool
		sum, drop, err = c.finish(mw, record)
		if record {
			c.drop = drop
		} else if drop != nil {
			err = fmt.Errorf("submit %s: the second read still repeats %s", req.BatchID, api.Count(len(drop), "key"))
		}
	}
	if err == nil && (!record || c.drop == nil) {
		err = verdict(sum)
	}
	if err != nil {
		if aerr := w.Abort(); aerr != nil {
			s.Log.WarnContext(ctx, "abort manifest upload", "batch_id", req.BatchID, "error", aerr.Error())
		}
		var ie *api.InputError
		if errors.As(err, &ie) && ie.Field == "" && req.Source.Object != "" {
			ie.Field = "source.object"
		}
		return source.ManifestSummary{}, fmt.Errorf("submit %s: %w", req.BatchID, err)
	}
	if err := w.Close(); err != nil {
		return source.ManifestSummary{}, fmt.Errorf("submit %s: complete manifest: %w", req.BatchID, err)
	}
	if err := s.keepSchema(ctx, manifestKey, req.Schema); err != nil {
		return source.ManifestSummary{}, fmt.Errorf("submit %s: %w", req.BatchID, err)
	}
	return sum, nil
}

// keepSchema keeps schema (none: nothing) beside the manifest at
// manifestKey (api.SchemaKey), for the corrections of the batch to be
// checked and typed as its source was.
func (s *Submitter) keepSchema(ctx context.Context, manifestKey string, schema json.RawMessage) error {
	if len(schema) == 0 {
		return nil
	}
	if err := s.Blobs.Put(ctx, api.SchemaKey(manifestKey), "application/schema+json", schema); err != nil {
		return fmt.Errorf("keep the schema: %w", err)
	}
	return nil
}

// keysOptions is the duplicate-key detection of a submit: s.Keys, its
// Dir defaulting to TempDir, its budget to SubmitKeysMemoryBytes.
func (s *Submitter) keysOptions() keyset.Options {
	keys := s.Keys
	if keys.Dir == "" {
		keys.Dir = s.TempDir
	}
	if keys.MemoryBytes == 0 {
		keys.MemoryBytes = SubmitKeysMemoryBytes
	}
	return keys
}

// readSource reads req's source into mw through c: by parts, one after
// the other, when it is a source read in parts (planParts), so that its
// manifest and digest are the ones its parts give; else whole.
func (s *Submitter) readSource(ctx context.Context, req api.SubmitRequest, c *checking, mw *source.ManifestWriter) error {
	plan, err := s.planParts(ctx, req)
	if err != nil {
		return err
	}
	if plan != nil {
		return readWholeByParts(ctx, s.Blobs.(PartBlobs), plan, mw)
	}
	if err := s.wholeReadFits(ctx, req); err != nil {
		return err
	}
	return c.read(ctx, s.Blobs, mw, c.drop == nil)
}

// planOf is the batch row a prepared request asks for, before its
// manifest is known (see freeze): its plan but the digest, and run 1.
func planOf(req api.SubmitRequest, now time.Time) ledger.Batch {
	return ledger.Batch{
		Batch: api.Batch{
			ID: req.BatchID,
			Plan: api.Plan{
				Pipeline:        req.Pipeline,
				Threshold:       req.Threshold,
				MaxAttempts:     req.MaxAttempts,
				Retry:           req.Retry,
				MaxConcurrency:  req.MaxConcurrency,
				Rate:            req.Rate,
				Priority:        req.Priority,
				Sample:          req.Sample,
				AutoApproveUSD:  autoApproveOf(req),
				ItemsPerMessage: req.ItemsPerMessage,
				OnInterrupt:     req.OnInterrupt,
				Headers:         req.Headers,
				Options:         req.Options,
				StopOnThreshold: new(req.StopOnThreshold == nil || *req.StopOnThreshold),
			},
			BudgetUSD:    budgetOf(req),
			Ceilings:     ceilingsOf(req),
			Run:          1,
			Status:       api.StatusRunning,
			KeyField:     req.KeyField,
			Source:       req.Source.Describe(),
			SubmittedBy:  req.SubmittedBy,
			SourceFormat: sourceFormat(req.Source),
			CreatedAt:    now,
			RunStartedAt: now,
		},
		HiddenPlan: ledger.HiddenPlan{
			TaskToken:     req.TaskToken,
			TaskHeartbeat: req.TaskHeartbeatSeconds,
			CheckPlan:     ledger.CheckPlanOf(req),
		},
	}
}

// ceilingsOf is req's per-item ceilings, nil for none.
func ceilingsOf(req api.SubmitRequest) *api.Ceilings {
	if req.Ceilings == nil || req.Ceilings.IsZero() {
		return nil
	}
	c := *req.Ceilings
	return &c
}

// checkSample checks req's sample and auto-approval (api.SubmitRequest.
// Sample, AutoApproveUSD): an *api.InputError naming sample or
// auto_approve_usd.
func checkSample(req api.SubmitRequest) error {
	switch {
	case req.Sample < 0 || req.Sample > api.MaxSample:
		return &api.InputError{Field: "sample", Reason: fmt.Sprintf("%d is not within 1–%d (0: no sample)", req.Sample, api.MaxSample)}
	case req.AutoApproveUSD != nil && req.Sample == 0:
		return &api.InputError{Field: "auto_approve_usd", Reason: "approves a sample's estimate: give a sample too"}
	case req.AutoApproveUSD != nil:
		return api.CheckBudget("auto_approve_usd", *req.AutoApproveUSD)
	}
	return nil
}

// autoApproveOf is req's auto-approval limit in US dollars, 0 for none.
func autoApproveOf(req api.SubmitRequest) float64 {
	if req.AutoApproveUSD == nil {
		return 0
	}
	return *req.AutoApproveUSD
}

// budgetOf is req's budget in US dollars, 0 for none.
func budgetOf(req api.SubmitRequest) float64 {
	if req.BudgetUSD == nil {
		return 0
	}
	return *req.BudgetUSD
}

// sourceFormat is the Batch.SourceFormat of a source.
func sourceFormat(src api.SourceSpec) string {
	switch {
	case src.Items != nil:
		return "inline"
	case src.Prefix != "":
		return "prefix"
	case src.Format != "":
		return src.Format
	}
	_, key, _ := api.ParseS3URI(src.Object)
	return api.FormatOf(key)
}

// sourceField names the request field of a source, for errors.
func sourceField(src api.SourceSpec) string {
	switch {
	case src.Object != "":
		return "source.object"
	case src.Prefix != "":
		return "source.prefix"
	case src.Items != nil:
		return "source.items"
	}
	return "source"
}

func (s *Submitter) fanout(ctx context.Context, b ledger.Batch, chunks []source.Chunk) error {
	if b.ItemCount == 0 {
		// Nothing to run (a batch of 0 items stored before empty sources
		// were refused, resumed): finalize writes the (empty) report now.
		if err := s.Trigger.Finalize(ctx, b.ID, b.Run); err != nil {
			return fmt.Errorf("submit %s: trigger finalize: %w", b.ID, err)
		}
	} else if b.MaxConcurrency > 0 {
		if err := s.sendTracks(ctx, b, chunks); err != nil {
			return fmt.Errorf("submit %s: send tracks: %w", b.ID, err)
		}
	} else {
		bodies := make([][]byte, 0, len(chunks))
		for i := range chunks {
			m := ledger.Message{Kind: ledger.KindFanout, BatchID: b.ID, Run: b.Run, ManifestKey: b.RunManifestKey(), Chunk: &chunks[i], Priority: priorityOf(b)}
			if len(chunks) == 1 && s.fanOutHere(ctx, b, &m) {
				continue
			}
			body, err := m.Body()
			if err != nil {
				return err
			}
			bodies = append(bodies, body)
		}
		if len(bodies) > 0 {
			if err := s.Queue.Send(ctx, bodies); err != nil {
				return fmt.Errorf("submit %s: send fan-out: %w", b.ID, err)
			}
		}
	}
	if err := s.Store.SetFannedOut(ctx, b.ID, b.Run); err != nil {
		return fmt.Errorf("submit %s: mark fanned out: %w", b.ID, err)
	}
	return nil
}

// priorityOf is the Priority b's messages carry: its weight above 1,
// else 0 (none written).
func priorityOf(b ledger.Batch) int {
	if w := b.Weight(); w > 1 {
		return w
	}
	return 0
}

// sendTracks starts a run of a batch with max_concurrency N on its
// tracks (shared/pace): it writes the run's chunk table beside its
// manifest (ledger.ChunksKey) and sends min(N, slices) track messages,
// track j starting on slice j; the tracks claim the others, from
// pace.Counters claim counters, track j from counter j mod counters
// first. Sent again
// (a fan-out interrupted, the finalize tick's), the tracks are the same
// (Seq 1): a track's fence row keeps one delivery of each running.
func (s *Submitter) sendTracks(ctx context.Context, b ledger.Batch, chunks []source.Chunk) error {
	key := b.RunManifestKey()
	if err := putJSON(ctx, s.Blobs, ledger.ChunksKey(key), chunks); err != nil {
		return err
	}
	spans := make([]pace.Span, len(chunks))
	for i, c := range chunks {
		spans[i] = pace.Span{First: c.FirstIndex, Count: c.Count}
	}
	l := pace.NewLayout(spans, b.Pack(), b.MaxConcurrency)
	n := pace.Tracks(b.MaxConcurrency, l.Slices())
	counters := pace.Counters(n)
	bodies := make([][]byte, 0, n)
	for j := range n {
		ci, _, _, _, _ := l.Slice(int64(j))
		body, err := ledger.Message{Kind: ledger.KindFanout, BatchID: b.ID, Run: b.Run, ManifestKey: key, Chunk: &chunks[ci],
			Track: &ledger.Track{Index: j, Tracks: n, Counters: counters, Counter: pace.HomeCounter(j, counters), Size: l.Size, Seq: 1, Slice: int64(j)}, Priority: priorityOf(b)}.Body()
		if err != nil {
			return err
		}
		bodies = append(bodies, body)
	}
	return s.Queue.Send(ctx, bodies)
}

// Warnings says what in a request that Validate accepts will likely go
// wrong: a pipeline option timeout_ms (the webhook's per-call timeout) at
// or above what an item invocation leaves a call — the item timeout
// (ItemTimeout) less the worker's 10-second margin — so that a hanging
// receiver is cut off by the invocation's deadline (an interruption,
// outcome unknown) instead of ending the attempt as a timeout; a rate
// key that running batches name at another rate (rateKeyWarnings, which
// reads the running batches and notes the conflict on their rows and the
// batch's own: call it once the batch is accepted).
func (s *Submitter) Warnings(ctx context.Context, req api.SubmitRequest) []string {
	warnings := s.rateKeyWarnings(ctx, req)
	var opts struct {
		TimeoutMS *float64 `json:"timeout_ms"`
	}
	if s.ItemTimeout > 0 && len(req.Options) > 0 && json.Unmarshal(req.Options, &opts) == nil && opts.TimeoutMS != nil {
		leaves := s.ItemTimeout - 10*time.Second
		if t := time.Duration(*opts.TimeoutMS * float64(time.Millisecond)); t >= leaves {
			warnings = append(warnings, fmt.Sprintf("pipeline_options.timeout_ms %v is at or above what an item invocation leaves a call (%s: the item timeout %s less a 10 s margin): a receiver that hangs is cut off by the invocation, its outcome unknown (an interruption), instead of timing out; keep timeout_ms below %d",
				*opts.TimeoutMS, leaves, s.ItemTimeout, leaves.Milliseconds()))
		}
	}
	return warnings
}
