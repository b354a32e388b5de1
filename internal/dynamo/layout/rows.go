package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// AttrFormat is every ledger row's format version (ledger.FormatVersion;
// absent: 0, the release before versions).
const AttrFormat = "fv"

// FormatValue is AttrFormat's value on every row written today.
func FormatValue() types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.Itoa(ledger.FormatVersion)}
}

// Attributes of item rows (ItemRow), named in condition and update
// expressions; ItemRow's dynamodbav tags spell the same names.
const (
	AttrAttempt        = "attempt"
	AttrCost           = "cost"
	AttrError          = "error"
	AttrFirstAttempt   = "first_attempt"
	AttrLeaseUntilMs   = "lease_until_ms"
	AttrOutcome        = "outcome"
	AttrOutput         = "output"
	AttrOutputRef      = "output_ref"
	AttrReason         = "reason"
	AttrReleased       = "released"
	AttrRevision       = "rev" // api.Item.Revision
	AttrRetryScheduled = "retry_scheduled"
	AttrThrottledMs    = "throttled_ms" // api.Item.ThrottledSince, epoch ms
	AttrRun            = "run"
	AttrSpent          = "spent"
	AttrSpentRun       = "spent_run"
	AttrUpdatedAtMs    = "updated_at_ms"
	AttrHoldSubject    = "hold_subject"    // api.Hold.Subject of a held item
	AttrHoldSinceMs    = "hold_since_ms"   // api.Hold.Since, epoch ms
	AttrWoken          = "woken"           // api.Hold.Woken
	AttrHoldWakeAtMs   = "hold_wake_at_ms" // api.Hold.WakeAt, epoch ms
	AttrSignalled      = "signal_attempt"  // ledger.ItemState.Signalled
	// AttrTakeToken is the token of the row's last take
	// (ledger.Reservation.Token; on a pack row, PackWrite.Token).
	AttrTakeToken = "tk"
	// What a takeover or a resume found, copied by the take's own update
	// from the row as it was, so that a take whose answer was lost can
	// answer as the first try would have (the old row came back only
	// with that answer): whether the attempt taken over had its retry
	// scheduled (a takeover), and the held outcome, its time and its
	// throttled time (a resume).
	AttrTookRetry       = "tk_retry"
	AttrTookOutcome     = "tk_was"
	AttrTookUpdatedMs   = "tk_was_ms"
	AttrTookThrottledMs = "tk_thr_ms"
)

// Attributes of the batch row (BatchRow) and of the markers, named in
// condition and update expressions; BatchRow's dynamodbav tags spell the
// same names. AttrRun is shared with item rows.
const (
	AttrBatchID          = "batch_id"
	AttrCensus           = "census"
	AttrChunks           = "chunks"
	AttrFanRows          = "fan_rows"
	AttrCounterShards    = "counter_shards"
	AttrCounterLanes     = "counter_lanes"
	AttrExpiresAtMs      = "expires_at_ms"
	AttrFannedOut        = "fanned_out"
	AttrFinishedAtMs     = "finished_at_ms"
	AttrForgetting       = "forgetting"
	AttrForgettingAtMs   = "forgetting_at_ms" // ledger.Batch.ForgettingAt
	AttrForgettingBy     = "forgetting_by"    // ledger.Batch.ForgettingBy
	AttrCreatedAtMs      = "created_at_ms"
	AttrRevisions        = "revisions"
	AttrRunRevision      = "run_revision"
	AttrItemCount        = "item_count"
	AttrListShards       = "list_shards"
	AttrManifestBytes    = "manifest_bytes"
	AttrManifestDigest   = "manifest_digest"
	AttrManifestKey      = "manifest_key"
	AttrNeedsAttention   = "needs_attention"
	AttrPublishedRun     = "published_run"
	AttrTaskGone         = "task_gone"
	AttrRateConflict     = "rate_conflict"  // JSON api.RateConflict: the latest noted (Store.NoteRateConflict)
	AttrRateConflicts    = "rate_conflicts" // string set: the batch ids noted
	AttrRefusal          = "refusal"
	AttrReportKey        = "report_key"
	AttrRunStartedAtMs   = "run_started_at_ms"
	AttrStatus           = "status"
	AttrStop             = "stop"
	AttrStopDetail       = "stop_detail"
	AttrStopRan          = "stop_ran"
	AttrStopFailures     = "stop_failures"
	AttrFailure          = "failure"
	AttrFinalizeFailures = "finalize_failures"
	AttrSubmitAttempts   = "submit_attempts"
	AttrSubmitDeadlineMs = "submit_deadline_ms"
	AttrPauseBy          = "pause_by"
	AttrPausedAtMs       = "paused_at_ms"
	AttrPauseClass       = "pause_class"
	AttrPauseError       = "pause_error"
	AttrProbes           = "probes"
	AttrPauses           = "pauses"
	AttrPausedMs         = "paused_ms"
	AttrLastPause        = "last_pause"
	AttrBudgetUSD        = "budget_usd"
	AttrSample           = "sample"
	AttrSampleEstimate   = "sample_estimate"
	AttrSampleDecision   = "sample_decision"
	AttrSampleDecidedBy  = "sample_decided_by"
	AttrSampleDecidedMs  = "sample_decided_ms"
	AttrCeilings         = "ceilings"
	AttrChecked          = "checked"
	attrSourceFormat     = "source_format"
	AttrCSV              = "csv"
)

// HaltRow is the stored shape of api.Halt, in the batch row's halts map
// under HaltKey(subject): a subject (an ARN) may hold dots, which an
// expression's document path would split.
type HaltRow struct {
	Subject string `dynamodbav:"subject"`
	SinceMs int64  `dynamodbav:"since_ms"`
	Reason  string `dynamodbav:"reason,omitempty"`
}

// HaltKey is the key of subject's halt in the batch row's halts map: "h"
// and the first 16 hex digits of its SHA-256.
func HaltKey(subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "h" + hex.EncodeToString(sum[:8])
}

// AttrHalts is the batch row's map of halts by subject; AttrLiftedMs
// when a caller last lifted one (epoch ms, ledger.Batch.LiftedAt);
// AttrLifts how many were lifted and AttrLastLift the last (JSON
// api.LiftedHalt; ledger.Batch.Lifts, LastLift).
const (
	AttrHalts    = "halts"
	AttrLiftedMs = "lifted_ms"
	AttrLifts    = "lifts"
	AttrLastLift = "last_lift"
)

// Attributes of slot rows.
const (
	AttrHolder = "holder"
)

// BatchRow is the stored shape of api.Batch.
type BatchRow struct {
	PK             string  `dynamodbav:"pk"`
	SK             string  `dynamodbav:"sk"`
	ID             string  `dynamodbav:"batch_id"`
	Pipeline       string  `dynamodbav:"pipeline"`
	Digest         string  `dynamodbav:"manifest_digest"`
	ManifestKey    string  `dynamodbav:"manifest_key"`
	ManifestBytes  int64   `dynamodbav:"manifest_bytes"`
	ItemCount      int64   `dynamodbav:"item_count"`
	ListShards     int     `dynamodbav:"list_shards"`
	CounterShards  int     `dynamodbav:"counter_shards"`
	CounterLanes   int     `dynamodbav:"counter_lanes,omitempty"` // 0: counted per chunk
	Chunks         int     `dynamodbav:"chunks,omitempty"`
	FanRows        int     `dynamodbav:"fan_rows,omitempty"` // 0: one fan row (frozen before fan rows)
	Run            int     `dynamodbav:"run"`
	Status         string  `dynamodbav:"status"`
	Threshold      string  `dynamodbav:"threshold"` // JSON
	MaxAttempts    int     `dynamodbav:"max_attempts"`
	Retry          string  `dynamodbav:"retry,omitempty"` // JSON api.RetryPolicy; absent: the worker's default
	MaxConcurrency int     `dynamodbav:"max_concurrency,omitempty"`
	Rate           string  `dynamodbav:"rate,omitempty"` // JSON api.Rate; absent: unpaced
	ItemsPerMsg    int     `dynamodbav:"items_per_message,omitempty"`
	Priority       int     `dynamodbav:"priority,omitempty"` // absent: 1
	Sample         int     `dynamodbav:"sample,omitempty"`   // api.Plan.Sample; absent: none
	AutoApproveUSD float64 `dynamodbav:"auto_approve_usd,omitempty"`
	// The sample's estimate (JSON api.SampleEstimate) and decision
	// (api.ApprovalState, who, when): absent until written
	// (Store.MarkApproval).
	SampleEstimate  string             `dynamodbav:"sample_estimate,omitempty"`
	SampleDecision  string             `dynamodbav:"sample_decision,omitempty"`
	SampleDecidedBy string             `dynamodbav:"sample_decided_by,omitempty"`
	SampleDecidedMs int64              `dynamodbav:"sample_decided_ms,omitempty"`
	OnInterrupt     string             `dynamodbav:"on_interrupt,omitempty"`
	Headers         map[string]string  `dynamodbav:"headers,omitempty"`
	Options         string             `dynamodbav:"pipeline_options"` // JSON
	KeyField        string             `dynamodbav:"key_field,omitempty"`
	Source          string             `dynamodbav:"source"`
	SubmittedBy     string             `dynamodbav:"submitted_by,omitempty"`
	FannedOut       bool               `dynamodbav:"fanned_out"`
	CreatedAtMs     int64              `dynamodbav:"created_at_ms"`
	RunStartedAtMs  int64              `dynamodbav:"run_started_at_ms"`
	FinishedAtMs    int64              `dynamodbav:"finished_at_ms,omitempty"`
	ReportKey       string             `dynamodbav:"report_key,omitempty"`
	Census          string             `dynamodbav:"census,omitempty"` // JSON
	NeedsAttention  bool               `dynamodbav:"needs_attention"`
	Stop            string             `dynamodbav:"stop,omitempty"`
	StopDetail      string             `dynamodbav:"stop_detail,omitempty"`
	StopRan         int64              `dynamodbav:"stop_ran,omitempty"`
	StopFailures    int64              `dynamodbav:"stop_failures,omitempty"`
	ExpiresAtMs     int64              `dynamodbav:"expires_at_ms,omitempty"`
	Request         string             `dynamodbav:"request,omitempty"` // JSON
	SubmitAttempts  int                `dynamodbav:"submit_attempts,omitempty"`
	SubmitDeadMs    int64              `dynamodbav:"submit_deadline_ms,omitempty"`
	Refusal         string             `dynamodbav:"refusal,omitempty"` // JSON
	Failure         string             `dynamodbav:"failure,omitempty"`
	FinalizeFails   int                `dynamodbav:"finalize_failures,omitempty"`
	Forgetting      bool               `dynamodbav:"forgetting,omitempty"`
	ForgettingAtMs  int64              `dynamodbav:"forgetting_at_ms,omitempty"`
	ForgettingBy    string             `dynamodbav:"forgetting_by,omitempty"`
	PublishedRun    int                `dynamodbav:"published_run,omitempty"`
	TaskToken       string             `dynamodbav:"task_token,omitempty"`             // ledger.Batch.TaskToken
	TaskHeartbeat   int                `dynamodbav:"task_heartbeat_seconds,omitempty"` // ledger.Batch.TaskHeartbeat
	TaskGone        bool               `dynamodbav:"task_gone,omitempty"`              // ledger.Batch.TaskGone
	RateConflict    string             `dynamodbav:"rate_conflict,omitempty"`          // JSON api.RateConflict, ledger.Batch.RateConflict; absent: none noted
	RateConflicts   []string           `dynamodbav:"rate_conflicts,stringset,omitempty"`
	TraceParent     string             `dynamodbav:"trace_parent,omitempty"` // ledger.Batch.TraceParent; absent: none (rows before traces)
	TraceState      string             `dynamodbav:"trace_state,omitempty"`  // ledger.Batch.TraceState
	PauseBy         string             `dynamodbav:"pause_by,omitempty"`     // absent: not paused
	PausedAtMs      int64              `dynamodbav:"paused_at_ms,omitempty"`
	PauseClass      string             `dynamodbav:"pause_class,omitempty"`
	PauseError      string             `dynamodbav:"pause_error,omitempty"`
	Probes          int                `dynamodbav:"probes,omitempty"`
	Pauses          int                `dynamodbav:"pauses,omitempty"`
	PausedMs        int64              `dynamodbav:"paused_ms,omitempty"`  // ledger.Batch.PausedMs
	LastPause       string             `dynamodbav:"last_pause,omitempty"` // JSON: api.PauseSpan, ledger.Batch.LastPause
	Revisions       string             `dynamodbav:"revisions,omitempty"`  // JSON: []api.Revision
	RunRevision     int                `dynamodbav:"run_revision,omitempty"`
	Halts           map[string]HaltRow `dynamodbav:"halts,omitempty"`     // api.Batch.Halts, by HaltKey
	Format          int                `dynamodbav:"fv,omitempty"`        // ledger.FormatVersion; absent: 0
	LiftedAtMs      int64              `dynamodbav:"lifted_ms,omitempty"` // ledger.Batch.LiftedAt
	Lifts           int                `dynamodbav:"lifts,omitempty"`     // ledger.Batch.Lifts
	LastLift        string             `dynamodbav:"last_lift,omitempty"` // JSON: api.LiftedHalt, ledger.Batch.LastLift
	SourceFormat    string             `dynamodbav:"source_format,omitempty"`
	CheckPlan       string             `dynamodbav:"check_plan,omitempty"`
	Checked         string             `dynamodbav:"checked,omitempty"` // JSON api.CheckSummary; absent: no problem
	CSV             string             `dynamodbav:"csv,omitempty"`     // JSON api.CSVShape; absent: not a CSV source (or not kept)

	StopOnThreshold *bool   `dynamodbav:"stop_on_threshold,omitempty"` // absent: true
	BudgetUSD       float64 `dynamodbav:"budget_usd,omitempty"`        // api.Plan.BudgetUSD; absent: no budget
	Ceilings        string  `dynamodbav:"ceilings,omitempty"`          // JSON api.Ceilings; absent: none

	// Keys of the batches index (see BatchesPK), set at creation.
	BatchesPK string `dynamodbav:"bpk,omitempty"`
	BatchesSK string `dynamodbav:"bsk,omitempty"`
	// Key of the sources index (see SourcesPK), set at creation for an S3
	// source.
	SourcesPK string `dynamodbav:"spk,omitempty"`
}

// ToBatchRow is the stored shape of b, written with the format version
// ledger.FormatVersion and, when b has a creation time, the keys of the
// batches and sources indexes; JSON-valued fields are marshalled here.
func ToBatchRow(b ledger.Batch) (BatchRow, error) {
	r := BatchRow{
		PK: BatchPK(b.ID), SK: SKBatch, ID: b.ID,
		ManifestKey: b.ManifestKey, ManifestBytes: b.ManifestBytes, ItemCount: b.ItemCount,
		ListShards: b.ListShards, CounterShards: b.CounterShards, CounterLanes: b.CounterLanes, Chunks: b.Chunks, FanRows: b.FanRows, Run: b.Run, Status: string(b.Status),
		KeyField: b.KeyField, Source: b.Source, SubmittedBy: b.SubmittedBy, FannedOut: b.FannedOut, CreatedAtMs: Ms(b.CreatedAt),
		RunStartedAtMs: Ms(b.RunStartedAt), FinishedAtMs: Ms(b.FinishedAt), ReportKey: b.ReportKey,
		NeedsAttention: b.NeedsAttention, Stop: string(b.Stop), StopDetail: b.StopDetail, StopRan: b.StopRan, StopFailures: b.StopFailures, ExpiresAtMs: Ms(b.ExpiresAt),
		Request: string(b.Request), SubmitAttempts: b.SubmitAttempts, SubmitDeadMs: Ms(b.SubmitDeadline),
		Format: ledger.FormatVersion, Failure: b.Failure, FinalizeFails: b.FinalizeFailures,
		Pauses: b.Pauses, RunRevision: b.RunRevision, TaskGone: b.TaskGone, SourceFormat: b.SourceFormat,
		TraceParent: b.TraceParent, TraceState: b.TraceState,
	}
	if err := r.setPlan(b.Plan, b.HiddenPlan); err != nil {
		return BatchRow{}, err
	}
	if b.Checked != nil {
		c, err := json.Marshal(b.Checked)
		if err != nil {
			return BatchRow{}, err
		}
		r.Checked = string(c)
	}
	if b.CSV != nil {
		c, err := json.Marshal(b.CSV)
		if err != nil {
			return BatchRow{}, err
		}
		r.CSV = string(c)
	}
	if len(b.Revisions) > 0 {
		rv, err := json.Marshal(b.Revisions)
		if err != nil {
			return BatchRow{}, err
		}
		r.Revisions = string(rv)
	}
	r.BudgetUSD = b.BudgetUSD
	if a := b.Approval; a != nil {
		if a.Estimate != nil {
			e, err := json.Marshal(a.Estimate)
			if err != nil {
				return r, err
			}
			r.SampleEstimate = string(e)
		}
		r.SampleDecision, r.SampleDecidedBy, r.SampleDecidedMs = string(a.Decision), a.DecidedBy, Ms(a.DecidedAt)
	}
	if b.Ceilings != nil {
		text, err := json.Marshal(b.Ceilings)
		if err != nil {
			return r, err
		}
		r.Ceilings = string(text)
	}
	if p := b.Pause; p != nil {
		r.PauseBy, r.PausedAtMs, r.PauseClass, r.PauseError, r.Probes = string(p.By), Ms(p.Since), p.Class, p.Error, p.Probes
	}
	r.PausedMs = b.PausedMs
	if b.LastPause != nil {
		text, err := json.Marshal(b.LastPause)
		if err != nil {
			return r, err
		}
		r.LastPause = string(text)
	}
	for subject, h := range b.Halts {
		if r.Halts == nil {
			r.Halts = map[string]HaltRow{}
		}
		r.Halts[HaltKey(subject)] = HaltRow{Subject: subject, SinceMs: Ms(h.Since), Reason: h.Reason}
	}
	if !b.LiftedAt.IsZero() {
		r.LiftedAtMs = Ms(b.LiftedAt)
	}
	r.Lifts = b.Lifts
	if b.LastLift != nil {
		text, err := json.Marshal(b.LastLift)
		if err != nil {
			return r, err
		}
		r.LastLift = string(text)
	}
	if !b.CreatedAt.IsZero() {
		r.BatchesPK, r.BatchesSK = BatchesPK(b.ID, b.CreatedAt), BatchesSK(b.ID, b.CreatedAt)
		r.SourcesPK = SourcesPK(b.Source)
	}
	if b.Refusal != nil {
		rf, err := json.Marshal(b.Refusal)
		if err != nil {
			return BatchRow{}, err
		}
		r.Refusal = string(rf)
	}
	if b.FinalCensus != nil {
		c, err := json.Marshal(b.FinalCensus)
		if err != nil {
			return BatchRow{}, err
		}
		r.Census = string(c)
	}
	return r, nil
}

// FromBatchRow is the ledger.Batch that r stores; a row of a newer format
// version is refused (*ledger.NewerFormatError).
func FromBatchRow(r BatchRow) (ledger.Batch, error) {
	if err := ledger.CheckFormat("batch row "+r.ID, r.Format); err != nil {
		return ledger.Batch{}, err
	}
	b := ledger.Batch{
		Batch: api.Batch{
			ID:              r.ID,
			ManifestKey:     r.ManifestKey,
			ManifestBytes:   r.ManifestBytes,
			ItemCount:       r.ItemCount,
			ListShards:      r.ListShards,
			CounterShards:   r.CounterShards,
			Run:             r.Run,
			Status:          api.Status(r.Status),
			KeyField:        r.KeyField,
			Source:          r.Source,
			SubmittedBy:     r.SubmittedBy,
			FannedOut:       r.FannedOut,
			CreatedAt:       FromMs(r.CreatedAtMs),
			RunStartedAt:    FromMs(r.RunStartedAtMs),
			FinishedAt:      FromMs(r.FinishedAtMs),
			ReportKey:       r.ReportKey,
			NeedsAttention:  r.NeedsAttention,
			Stop:            api.Status(r.Stop),
			StopDetail:      r.StopDetail,
			StopRan:         r.StopRan,
			StopFailures:    r.StopFailures,
			ExpiresAt:       FromMs(r.ExpiresAtMs),
			SubmitAttempts:  r.SubmitAttempts,
			PendingDeletion: r.Forgetting,
			Failure:         r.Failure,
			Pauses:          r.Pauses,
			RunRevision:     r.RunRevision,
			SourceFormat:    r.SourceFormat,
		},
		CounterLanes:     r.CounterLanes,
		Chunks:           r.Chunks,
		FanRows:          r.FanRows,
		SubmitDeadline:   FromMs(r.SubmitDeadMs),
		PublishedRun:     r.PublishedRun,
		ForgettingAt:     FromMs(r.ForgettingAtMs),
		ForgettingBy:     r.ForgettingBy,
		TaskGone:         r.TaskGone,
		TraceParent:      r.TraceParent,
		TraceState:       r.TraceState,
		FinalizeFailures: r.FinalizeFails,
	}
	var err error
	if b.Plan, b.HiddenPlan, err = r.plan(); err != nil {
		return b, err
	}
	if r.Revisions != "" {
		if err := json.Unmarshal([]byte(r.Revisions), &b.Revisions); err != nil {
			return b, fmt.Errorf("batch %s: revisions: %w", r.ID, err)
		}
	}
	b.BudgetUSD = r.BudgetUSD
	var est *api.SampleEstimate
	if r.SampleEstimate != "" {
		est = &api.SampleEstimate{}
		if err := json.Unmarshal([]byte(r.SampleEstimate), est); err != nil {
			return b, fmt.Errorf("batch %s: sample estimate: %w", r.ID, err)
		}
	}
	b.Approval = api.ApprovalOf(r.Sample, api.ApprovalState(r.SampleDecision), r.SampleDecidedBy, FromMs(r.SampleDecidedMs), est)
	if r.Ceilings != "" {
		b.Ceilings = &api.Ceilings{}
		if err := json.Unmarshal([]byte(r.Ceilings), b.Ceilings); err != nil {
			return b, fmt.Errorf("batch %s: ceilings: %w", r.ID, err)
		}
	}
	if r.RateConflict != "" {
		// A note is advice: one that does not read is left out, never an
		// error of the batch's read.
		var c api.RateConflict
		if json.Unmarshal([]byte(r.RateConflict), &c) == nil {
			c.Batches = len(r.RateConflicts)
			b.RateConflict = &c
		}
	}
	if r.PauseBy != "" {
		b.Pause = &api.Pause{By: api.PauseBy(r.PauseBy), Since: FromMs(r.PausedAtMs), Class: r.PauseClass, Error: r.PauseError, Probes: r.Probes}
	}
	b.PausedMs = r.PausedMs
	if r.LastPause != "" {
		b.LastPause = &api.PauseSpan{}
		if err := json.Unmarshal([]byte(r.LastPause), b.LastPause); err != nil {
			return b, fmt.Errorf("batch %s: last pause: %w", r.ID, err)
		}
	}
	for _, h := range r.Halts {
		if b.Halts == nil {
			b.Halts = map[string]api.Halt{}
		}
		b.Halts[h.Subject] = api.Halt{Subject: h.Subject, Since: FromMs(h.SinceMs), Reason: h.Reason}
	}
	b.Lifts = r.Lifts
	if r.LastLift != "" {
		b.LastLift = &api.LiftedHalt{}
		if err := json.Unmarshal([]byte(r.LastLift), b.LastLift); err != nil {
			return b, fmt.Errorf("batch %s: last lift: %w", r.ID, err)
		}
	}
	if r.LiftedAtMs != 0 {
		b.LiftedAt = FromMs(r.LiftedAtMs)
	}
	if r.Request != "" {
		b.Request = json.RawMessage(r.Request)
	}
	if r.Checked != "" {
		b.Checked = &api.CheckSummary{}
		if err := json.Unmarshal([]byte(r.Checked), b.Checked); err != nil {
			return b, fmt.Errorf("batch %s: checked: %w", r.ID, err)
		}
	}
	if r.CSV != "" {
		b.CSV = &api.CSVShape{}
		if err := json.Unmarshal([]byte(r.CSV), b.CSV); err != nil {
			return b, fmt.Errorf("batch %s: csv: %w", r.ID, err)
		}
	}
	if r.Refusal != "" {
		b.Refusal = &api.SubmitRefusal{}
		if err := json.Unmarshal([]byte(r.Refusal), b.Refusal); err != nil {
			return b, fmt.Errorf("batch %s: refusal: %w", r.ID, err)
		}
	}
	if r.Census != "" {
		b.FinalCensus = &api.Census{}
		if err := json.Unmarshal([]byte(r.Census), b.FinalCensus); err != nil {
			return b, fmt.Errorf("batch %s: census: %w", r.ID, err)
		}
	}
	return b, nil
}

// setPlan sets the attributes of r that store a batch's plan: p and h,
// whole (JSON-valued ones marshalled); FromBatchRow reads them with plan.
func (r *BatchRow) setPlan(p api.Plan, h ledger.HiddenPlan) error {
	th, err := json.Marshal(p.Threshold)
	if err != nil {
		return err
	}
	r.Pipeline, r.Digest, r.Threshold, r.MaxAttempts = p.Pipeline, p.Digest, string(th), p.MaxAttempts
	r.MaxConcurrency, r.ItemsPerMsg, r.OnInterrupt = p.MaxConcurrency, p.ItemsPerMessage, string(p.OnInterrupt)
	r.Priority, r.Sample, r.AutoApproveUSD = p.Priority, p.Sample, p.AutoApproveUSD
	r.Headers, r.Options, r.StopOnThreshold = p.Headers, string(p.Options), p.StopOnThreshold
	if p.Retry != nil {
		rp, err := json.Marshal(p.Retry)
		if err != nil {
			return err
		}
		r.Retry = string(rp)
	}
	if p.Rate != nil {
		rt, err := json.Marshal(p.Rate)
		if err != nil {
			return err
		}
		r.Rate = string(rt)
	}
	r.TaskToken, r.TaskHeartbeat, r.CheckPlan = h.TaskToken, h.TaskHeartbeat, h.CheckPlan
	return nil
}

// plan is the plan r stores (see setPlan).
func (r BatchRow) plan() (api.Plan, ledger.HiddenPlan, error) {
	p := api.Plan{
		Pipeline: r.Pipeline, Digest: r.Digest, MaxAttempts: r.MaxAttempts, MaxConcurrency: r.MaxConcurrency,
		ItemsPerMessage: r.ItemsPerMsg, OnInterrupt: api.InterruptPolicy(r.OnInterrupt), Headers: r.Headers,
		StopOnThreshold: r.StopOnThreshold, Priority: r.Priority, Sample: r.Sample, AutoApproveUSD: r.AutoApproveUSD,
	}
	h := ledger.HiddenPlan{TaskToken: r.TaskToken, TaskHeartbeat: r.TaskHeartbeat, CheckPlan: r.CheckPlan}
	if r.Rate != "" {
		p.Rate = &api.Rate{}
		if err := json.Unmarshal([]byte(r.Rate), p.Rate); err != nil {
			return p, h, fmt.Errorf("batch %s: rate: %w", r.ID, err)
		}
	}
	if r.Retry != "" {
		p.Retry = &api.RetryPolicy{}
		if err := json.Unmarshal([]byte(r.Retry), p.Retry); err != nil {
			return p, h, fmt.Errorf("batch %s: retry: %w", r.ID, err)
		}
	}
	if r.Options != "" {
		p.Options = json.RawMessage(r.Options)
	}
	if r.Threshold != "" {
		if err := json.Unmarshal([]byte(r.Threshold), &p.Threshold); err != nil {
			return p, h, fmt.Errorf("batch %s: threshold: %w", r.ID, err)
		}
	}
	return p, h, nil
}

// ItemRow is the stored shape of api.Item. The batch id and the item key
// are the row's keys (pk ITEM#{id}#{shard}, sk {key}) and the run id
// derives from them (api.RunID), so the row stores none of them again:
// every byte of it is billed on each of its two writes.
type ItemRow struct {
	SK           string             `dynamodbav:"sk"`
	Run          int                `dynamodbav:"run"`
	Outcome      string             `dynamodbav:"outcome"`
	Attempt      int                `dynamodbav:"attempt"`
	FirstAttempt int                `dynamodbav:"first_attempt"`
	Released     bool               `dynamodbav:"released"`
	Retry        bool               `dynamodbav:"retry_scheduled"`
	ThrottledMs  int64              `dynamodbav:"throttled_ms"`
	LeaseUntilMs int64              `dynamodbav:"lease_until_ms"`
	Output       string             `dynamodbav:"output"`
	OutputRef    string             `dynamodbav:"output_ref"`
	Error        string             `dynamodbav:"error"`
	Reason       string             `dynamodbav:"reason"`
	Cost         map[string]float64 `dynamodbav:"cost"`
	Spent        map[string]float64 `dynamodbav:"spent"`     // api.Item.Spent
	SpentRun     int                `dynamodbav:"spent_run"` // the run Spent counts
	UpdatedAtMs  int64              `dynamodbav:"updated_at_ms"`
	ExpiresAt    int64              `dynamodbav:"expires_at"`    // TTL, epoch seconds
	Format       int                `dynamodbav:"fv"`            // ledger.FormatVersion; absent: 0
	Revision     int                `dynamodbav:"rev,omitempty"` // api.Item.Revision; absent: 0
	HoldSubject  string             `dynamodbav:"hold_subject,omitempty"`
	HoldSinceMs  int64              `dynamodbav:"hold_since_ms,omitempty"`
	Woken        string             `dynamodbav:"woken,omitempty"`
	HoldWakeAtMs int64              `dynamodbav:"hold_wake_at_ms,omitempty"`
	Signalled    int                `dynamodbav:"signal_attempt,omitempty"`
	// The take's token and what a takeover or resume found (AttrTakeToken, AttrTookRetry …).
	Token           string `dynamodbav:"tk,omitempty"`
	TookRetry       bool   `dynamodbav:"tk_retry,omitempty"`
	TookOutcome     string `dynamodbav:"tk_was,omitempty"`
	TookUpdatedMs   int64  `dynamodbav:"tk_was_ms,omitempty"`
	TookThrottledMs int64  `dynamodbav:"tk_thr_ms,omitempty"`
}

// ItemFrom reads an item row of batch batchID (its attributes as
// GetItem or Query returns them); an empty row is the zero ledger.Item,
// a row of a newer format version is refused (*ledger.NewerFormatError).
func ItemFrom(batchID string, av map[string]types.AttributeValue) (ledger.Item, error) {
	if len(av) == 0 {
		return ledger.Item{}, nil
	}
	var r ItemRow
	if err := attributevalue.UnmarshalMap(av, &r); err != nil {
		return ledger.Item{}, fmt.Errorf("item row: %w", err)
	}
	if err := ledger.CheckFormat("item row "+batchID+"/"+r.SK, r.Format); err != nil {
		return ledger.Item{}, err
	}
	it := ledger.Item{
		Item: api.Item{
			Key:            r.SK,
			RunID:          ledger.RunID(batchID, r.SK),
			Run:            r.Run,
			Outcome:        api.Outcome(r.Outcome),
			Attempt:        r.Attempt,
			LeaseUntil:     FromMs(r.LeaseUntilMs),
			OutputRef:      r.OutputRef,
			Error:          r.Error,
			Reason:         api.Reason(r.Reason),
			UpdatedAt:      FromMs(r.UpdatedAtMs),
			Released:       r.Released,
			RunAttempts:    max(0, r.Attempt-max(r.FirstAttempt, 1)+1),
			ThrottledSince: FromMs(r.ThrottledMs),
			Revision:       r.Revision,
		},
		BatchID:        batchID,
		Signalled:      r.Signalled,
		RetryScheduled: r.Outcome == string(api.OutcomeInFlight) && r.Retry,
	}
	if r.Output != "" {
		it.Output = json.RawMessage(r.Output)
	}
	if r.ExpiresAt > 0 {
		it.ExpiresAt = time.Unix(r.ExpiresAt, 0).UTC()
	}
	if len(r.Cost) > 0 {
		it.Cost = r.Cost
	}
	if len(r.Spent) > 0 {
		it.Spent, it.SpentRun = r.Spent, r.SpentRun
	}
	if it.Outcome.Held() {
		it.Hold = &api.Hold{Subject: r.HoldSubject, Since: FromMs(r.HoldSinceMs), Woken: api.Wake(r.Woken),
			WakeAt: FromMs(r.HoldWakeAtMs)}
	}
	return it, nil
}

// Counter-row attributes.
const (
	AttrDone       = "done"
	AttrFailures   = "failures"
	AttrItems      = "items"
	AttrChunksDone = "chunks_done"
	AttrLanesDone  = "lanes_done"
	AttrWriteUnits = "wcu"     // DynamoDB units attributed to the run (package dynamo's Store.Capacity)
	AttrBusyMs     = "busy_ms" // a sample's deliveries' time, ms (ledger.LaneCount.BusyMs)
	AttrReadUnits  = "rcu"
)

// OutcomeAttr is the counter attribute counting items of outcome o
// ("n_succeeded", ...).
func OutcomeAttr(o api.Outcome) string { return "n_" + string(o) }
