package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// DefaultMaxSubmitAttempts is Submitter.MaxSubmitAttempts when zero: the
// background reads of one batch's source (Lambda's first asynchronous
// invocation, its two retries, and the tick's hand-offs, counted together)
// before the tick refuses the batch.
const DefaultMaxSubmitAttempts = 3

// HandoffGrace is how long an accepted batch may wait for its first
// background read to start before the tick hands it off again (the
// asynchronous invocation was lost, or the hand-off failed).
const HandoffGrace = 2 * time.Minute

// DeadlineMargin is how long after a background read's deadline the tick
// waits before it takes that read for dead.
const DeadlineMargin = time.Minute

// Handoff starts the background read of an accepted batch, asynchronously
// (the submit function invokes itself, internal/trigger). Starting it twice
// is harmless: the first read to freeze the manifest wins, the other's
// manifest is deleted.
type Handoff interface {
	StartSubmit(ctx context.Context, batchID string) error
}

// Accept answers a submit in bounded time whatever the source's size, so
// that it fits API Gateway's integration timeout for REST APIs, 29 s
// (Amazon API Gateway quotas, "Maximum integration timeout for REST APIs",
// https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html),
// past which the gateway answers 504 while the submit goes on. An
// inline source (at most the request's size) is read in the call, as
// Submit does. An S3 object or prefix is accepted: the batch row is put
// with status submitting and the request, only if the id is new, and the
// read is handed off to the background (Complete), which freezes the
// manifest and starts the run, or refuses the batch with the reason.
//
// A repeated submit with the same id: while submitting, the same request
// answers the same batch (Created false) and another is a *MismatchError
// naming the first field that differs; once refused, the id is free: the
// refused batch is forgotten and the request (the same or a corrected one)
// accepted afresh; once frozen, Submit's rules hold (the
// source is read again and its digest compared). Idempotent per (id,
// request). Errors: *InputError for a malformed request; a hand-off that
// failed is returned (retry the same request: it hands off again).
func (s *Submitter) Accept(ctx context.Context, req api.SubmitRequest) (res SubmitResult, err error) {
	ctx, end := s.Traces.StartSubmit(ctx)
	defer func() { end(res.Batch.ID, err) }()
	if s.Handoff == nil || len(req.Source.Items) > 0 {
		return s.Submit(ctx, req)
	}
	if err := s.prepare(&req); err != nil {
		return SubmitResult{}, err
	}
	if err := s.checkSourceRegion(ctx, req.Source); err != nil {
		return SubmitResult{}, err
	}
	if err := s.objectExists(ctx, req.Source); err != nil {
		return SubmitResult{}, err
	}
	// A gzip object or a JSON array too large for one invocation is
	// refused now, rather than after three reads time out.
	if plan, err := s.planParts(ctx, req); err == nil && plan == nil {
		if err := s.wholeReadFits(ctx, req); err != nil {
			return SubmitResult{}, err
		}
	}
	stored := req
	stored.Rerun = false // a property of one call, not of the batch
	raw, err := json.Marshal(stored)
	if err != nil {
		return SubmitResult{}, err
	}
	b := planOf(req, s.Clock.Now())
	traced(ctx, &b)
	b.Status = api.StatusSubmitting
	b.Request = raw
	got, err := s.Store.CreateBatch(ctx, b)
	switch {
	case err == nil:
		if err := s.Handoff.StartSubmit(ctx, b.ID); err != nil {
			return SubmitResult{}, fmt.Errorf("accept %s: hand off the source read: %w", b.ID, err)
		}
		s.Log.InfoContext(ctx, "batch accepted", "batch_id", b.ID, "source", b.Source)
		s.announce(ctx, b, api.ChangeSubmitted, b.CreatedAt)
		return SubmitResult{Batch: b, Created: true}, nil
	case !errors.Is(err, api.ErrBatchExists):
		return SubmitResult{}, fmt.Errorf("accept %s: create batch row: %w", b.ID, err)
	case s.stale(got):
		// The id's batch expired, is pending deletion or was refused:
		// clear it and accept the request as a fresh batch.
		if err := s.clearStale(ctx, got); err != nil {
			return SubmitResult{}, err
		}
		return s.Accept(ctx, req)
	case got.Status == api.StatusSubmitting:
		return s.repeated(ctx, got, req)
	}
	return s.Submit(ctx, req)
}

// objectExists refuses at once (an *InputError naming source.object) an
// object source that is not there, the commonest mistake, rather than
// accepting a batch that its background read can only refuse; and an
// object of 0 bytes or a prefix without objects (ErrEmptySource), so that
// nothing is created for them. Other errors, and a source whose lines turn
// out blank, are left to the background read. One HEAD, no body read: a
// refused HEAD (403, as S3 answers a missing key to a caller without
// s3:ListBucket) is such an other error, as a refused GET was.
func (s *Submitter) objectExists(ctx context.Context, spec api.SourceSpec) error {
	if spec.Prefix != "" {
		return prefixHasObjects(ctx, s.Blobs, spec.Prefix)
	}
	if spec.Object == "" {
		return nil
	}
	bucket, key, err := api.ParseS3URI(spec.Object)
	if err != nil {
		return nil // Validate has named it
	}
	info, err := s.Blobs.HeadSource(ctx, bucket, key)
	if errors.Is(err, api.ErrNotFound) {
		return &api.InputError{Field: "source.object", Reason: fmt.Sprintf("%s does not exist", spec.Object)}
	}
	if err == nil && info.Size == 0 {
		return &api.InputError{Field: "source.object", Reason: fmt.Sprintf("%s is empty (0 bytes)", spec.Object), Err: api.ErrEmptySource}
	}
	return nil
}

// errFound stops a listing at its first object.
var errFound = errors.New("found")

// prefixHasObjects is ErrEmptySource (an *InputError naming source.prefix)
// when no object but folder markers is under uri; one listing page at most.
func prefixHasObjects(ctx context.Context, blobs ledger.Blobs, uri string) error {
	bucket, prefix, err := api.ParseS3URI(uri)
	if err != nil {
		return nil // Validate has named it
	}
	err = blobs.List(ctx, bucket, prefix, func(o source.ObjectInfo) error {
		if strings.HasSuffix(o.Key, "/") {
			return nil
		}
		return errFound
	})
	switch {
	case err == nil:
		return &api.InputError{Field: "source.prefix", Reason: fmt.Sprintf("no object under %s", uri), Err: api.ErrEmptySource}
	case errors.Is(err, errFound):
		return nil
	}
	return nil // left to the background read
}

// repeated answers a repeated submit of a batch that was accepted for a
// background read and is not frozen yet (submitting).
func (s *Submitter) repeated(ctx context.Context, stored ledger.Batch, req api.SubmitRequest) (SubmitResult, error) {
	var was api.SubmitRequest
	if err := json.Unmarshal(stored.Request, &was); err != nil {
		return SubmitResult{}, fmt.Errorf("batch %s: stored request: %w", stored.ID, err)
	}
	if field, a, b := sameRequest(was, req); field != "" {
		return SubmitResult{}, &api.MismatchError{BatchID: stored.ID, Field: field, Stored: a, Given: b}
	}
	if stored.SubmitAttempts == 0 && s.Handoff != nil {
		// No read has started: the first hand-off may have failed.
		if err := s.Handoff.StartSubmit(ctx, stored.ID); err != nil {
			return SubmitResult{}, fmt.Errorf("accept %s: hand off the source read: %w", stored.ID, err)
		}
	}
	return SubmitResult{Batch: stored, Created: false}, nil
}

// sameRequest returns the first field in which two prepared requests
// differ ("" when none): the source, the key field, then the plan
// (ledger.Batch.DiffPlan; neither has a manifest digest yet).
func sameRequest(stored, given api.SubmitRequest) (field, was, now string) {
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if a, b := asJSON(stored.Source), asJSON(given.Source); a != b {
		return "source", a, b
	}
	if stored.KeyField != given.KeyField {
		return "key_field", stored.KeyField, given.KeyField
	}
	return planOf(stored, time.Time{}).DiffPlan(planOf(given, time.Time{}))
}

// Complete is the background read of an accepted batch: it streams the
// source into a manifest exactly as Submit does, then freezes it on the
// batch row (submitting → running, only if still submitting) and sends the
// fan-out. A malformed source or a full temporary disk refuses the batch
// (status refused, Batch.Refusal naming the line, field or limit); any
// other error is returned, to be retried (Lambda retries an asynchronous
// invocation twice; the tick hands off again after the read's deadline).
// A batch that is no longer submitting is returned as it is, so a
// duplicate invocation does nothing. Each call counts one attempt.
func (s *Submitter) Complete(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := s.Store.GetBatch(ctx, id)
	if err != nil || b.Status != api.StatusSubmitting {
		return b, err
	}
	log := s.Log.With("batch_id", id)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = s.Clock.Now().Add(15 * time.Minute)
	}
	if b, err = s.Store.BeginSubmit(ctx, id, deadline); err != nil {
		if errors.Is(err, api.ErrConflict) {
			return s.Store.GetBatch(ctx, id)
		}
		return b, err
	}
	var req api.SubmitRequest
	if err := json.Unmarshal(b.Request, &req); err != nil {
		return s.refuse(ctx, b, api.SubmitRefusal{Code: api.RefusalInternal, Message: "the stored request does not decode: " + err.Error()})
	}
	if s.Parts != nil && s.Parts.Handoff != nil {
		plan, err := s.planParts(ctx, req)
		if err != nil {
			log.ErrorContext(ctx, "background read failed; retried", "attempt", b.SubmitAttempts, "error", err.Error())
			return b, err
		}
		if plan != nil {
			return s.startParts(ctx, b, plan)
		}
	}
	start := s.Clock.Now()
	manifestKey, sum, checked, err := s.writeManifest(ctx, req, true)
	if err != nil {
		if r, ok := api.RefusalOf(err); ok {
			return s.refuse(ctx, b, r)
		}
		log.ErrorContext(ctx, "background read failed; retried", "attempt", b.SubmitAttempts, "error", err.Error())
		return b, err
	}
	b.Checked = checked
	b, err = s.freezeAndFanOut(ctx, b, manifestKey, sum, true)
	if err == nil {
		log.InfoContext(ctx, "batch submitted", "items", sum.Count, "chunks", len(sum.Chunks), "attempt", b.SubmitAttempts,
			"duration_ms", s.Clock.Now().Sub(start).Milliseconds())
	}
	return b, err
}

// freezeAndFanOut freezes the manifest a background read wrote on the
// submitting batch b (submitting → running, only if still submitting) and
// sends the fan-out. Another read that froze first wins: this manifest is
// deleted and the stored batch returned. A lost condition with this
// manifest on the row (the SDK's retry of a write that landed, or another
// invocation that froze the same manifest: two assemblies of one read in
// parts) fans out again only when refan is set; else the fan-out is left
// to the one that froze, or to the finalize tick, which re-sends a lost
// fan-out.
func (s *Submitter) freezeAndFanOut(ctx context.Context, b ledger.Batch, manifestKey string, sum source.ManifestSummary, refan bool) (ledger.Batch, error) {
	log := s.Log.With("batch_id", b.ID)
	id := b.ID
	b.Freeze(manifestKey, sum, s.ItemsPerSecond)
	b.Status = api.StatusRunning
	b.RunStartedAt = s.Clock.Now()
	if err := s.Store.Freeze(ctx, b); err != nil {
		if !errors.Is(err, api.ErrConflict) {
			// Outcome unknown (the write may have landed): keep the
			// manifest, which the row may now name.
			return b, err
		}
		// Another read froze it first, or it was refused — or this read's
		// own write landed and the SDK's retry of it lost the condition.
		stored, gerr := s.Store.GetBatch(ctx, id)
		if gerr != nil {
			return stored, gerr
		}
		if stored.ManifestKey != manifestKey {
			if derr := s.Blobs.Delete(ctx, manifestKey); derr != nil {
				log.WarnContext(ctx, "delete unused manifest", "error", derr.Error())
			}
			return stored, nil
		}
		if !refan {
			return stored, nil
		}
		b = stored
	} else {
		s.announce(ctx, b, api.ChangeRunning, b.RunStartedAt)
	}
	if err := s.fanout(ctx, b, sum.Chunks); err != nil {
		// Frozen: the finalize tick re-sends a lost fan-out.
		return b, err
	}
	b.FannedOut = true
	return b, nil
}

// refuse moves a submitting batch to refused with r; a batch that is no
// longer submitting is left as it is.
func (s *Submitter) refuse(ctx context.Context, b ledger.Batch, r api.SubmitRefusal) (ledger.Batch, error) {
	b, refused, err := s.refuseRow(ctx, b, r)
	if refused {
		s.announce(ctx, b, api.ChangeRefused, b.FinishedAt)
		if terr := ledger.TaskEnd(ctx, s.Tasks, s.Log, b, b.Run, nil, api.TaskErrorRefused, r.Code+": "+r.Message); terr != nil {
			s.Log.WarnContext(ctx, "answer the task token", "batch_id", b.ID, "error", terr.Error())
		}
	}
	return b, err
}

// refuseRow is refuse without the event: an upload's or a tick's refusal
// (RecordRefused) is announced by its handler, naming the upload.
// refused tells whether this call refused it.
func (s *Submitter) refuseRow(ctx context.Context, b ledger.Batch, r api.SubmitRefusal) (_ ledger.Batch, refused bool, _ error) {
	now := s.Clock.Now()
	retention := s.Retention
	if retention <= 0 {
		retention = 30 * 24 * time.Hour
	}
	if err := s.Store.Refuse(ctx, b.ID, r, now, now.Add(retention)); err != nil {
		if errors.Is(err, api.ErrConflict) {
			stored, err := s.Store.GetBatch(ctx, b.ID)
			return stored, false, err
		}
		return b, false, err
	}
	s.Log.WarnContext(ctx, "batch refused", "batch_id", b.ID, "code", r.Code, "error", r.Message)
	b.Status, b.Refusal, b.FinishedAt = api.StatusRefused, &r, now
	return b, true, nil
}

// SubmitTickResult counts what one TickSubmitting did.
type SubmitTickResult struct {
	Submitting int // batches seen submitting
	HandedOff  int // background reads started again
	Refused    int // batches refused after their last attempt
}

// TickSubmitting is the backstop of background reads, run on a schedule:
// a submitting batch whose read never started (HandoffGrace after it was
// accepted) or whose latest read is past its deadline (DeadlineMargin) is
// handed off again, or refused with code internal once MaxSubmitAttempts
// reads have started. So no accepted batch stays submitting for ever nor
// disappears. It returns the first error after trying every batch.
func (s *Submitter) TickSubmitting(ctx context.Context) (SubmitTickResult, error) {
	ids, err := s.Store.RunningBatches(ctx)
	if err != nil {
		return SubmitTickResult{}, fmt.Errorf("submit tick: list running: %w", err)
	}
	limit := s.MaxSubmitAttempts
	if limit <= 0 {
		limit = DefaultMaxSubmitAttempts
	}
	var res SubmitTickResult
	var errs []error
	for _, id := range ids {
		b, err := s.Store.GetBatch(ctx, id)
		if err != nil || b.Status != api.StatusSubmitting {
			if err != nil && !errors.Is(err, api.ErrNotFound) {
				errs = append(errs, err)
			}
			continue
		}
		res.Submitting++
		now := s.Clock.Now()
		switch {
		case b.SubmitAttempts == 0 && now.Sub(b.CreatedAt) < HandoffGrace:
			continue
		case b.SubmitAttempts > 0 && now.Before(b.SubmitDeadline.Add(DeadlineMargin)):
			continue // a read may still be going
		case b.SubmitAttempts >= limit:
			r := api.SubmitRefusal{Code: api.RefusalInternal, Message: fmt.Sprintf(
				"the source was not read after %s, each ended by an error or the submit function's timeout (its log names the batch id)", api.Count(b.SubmitAttempts, "attempt"))}
			if _, err := s.refuse(ctx, b, r); err != nil {
				errs = append(errs, err)
			} else {
				res.Refused++
			}
			continue
		}
		if s.Handoff == nil {
			continue
		}
		if err := s.Handoff.StartSubmit(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("submit tick: hand off %s: %w", id, err))
			continue
		}
		res.HandedOff++
		s.Log.WarnContext(ctx, "tick handed off a background read again", "batch_id", id, "attempts", b.SubmitAttempts)
	}
	return res, errors.Join(errs...)
}

// RecordRefused puts a refused batch row for a request that was refused
// before any batch existed (an upload whose file or metadata is bad), so
// that `bulkrun list` and the console show it as the refused batch it
// would have been, with r naming the line, field or key. req needs its
// BatchID; its other fields are shown as far as they were read.
//
// The row is written as submitting with no stored request (so that no
// background read can ever run it) and then refused; a crash between the
// two leaves a submitting row that the repeated call (Lambda retries the
// upload's event) refuses, or that the tick refuses (its request does not
// decode). An id held by a live batch (another upload's, an API submit's)
// is left alone: the refusal is then in the upload's error report only,
// and (Batch{}, ErrBatchExists) is returned. An id held by a stale or
// refused batch is freed first (Submit's rule). Idempotent per (id, r).
func (s *Submitter) RecordRefused(ctx context.Context, req api.SubmitRequest, r api.SubmitRefusal) (ledger.Batch, error) {
	if req.BatchID == "" {
		return ledger.Batch{}, fmt.Errorf("record refusal: %w", &api.InputError{Field: "batch_id", Reason: "required"})
	}
	b := planOf(req, s.Clock.Now())
	traced(ctx, &b)
	b.Status = api.StatusSubmitting
	got, err := s.Store.CreateBatch(ctx, b)
	switch {
	case err == nil:
	case !errors.Is(err, api.ErrBatchExists):
		return ledger.Batch{}, fmt.Errorf("record refusal of %s: create batch row: %w", b.ID, err)
	case got.Status == api.StatusRefused && got.Refusal != nil && *got.Refusal == r:
		return got, nil // this refusal, recorded already
	case s.stale(got):
		if err := s.clearStale(ctx, got); err != nil {
			return ledger.Batch{}, err
		}
		return s.RecordRefused(ctx, req, r)
	case got.Status == api.StatusSubmitting && len(got.Request) == 0:
		b = got // this call's own row, left submitting by a crash
	default:
		return ledger.Batch{}, api.ErrBatchExists
	}
	b, _, err = s.refuseRow(ctx, b, r)
	return b, err
}
