package dynamo

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
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

const (
	skBatch   = "BATCH"
	skRun     = "RUN"
	skSlot    = "SLOT"
	pkRunning = "RUNNING"
	pkRetain  = "RETENTION"
	pkPublish = "PUBLISH"
)

func publishSK(id string, run int) string { return fmt.Sprintf("%s#%010d", id, run) }

func batchPK(id string) string { return "BATCH#" + id }

func shardKey(id string, shard int) string { return id + "#" + strconv.Itoa(shard) }

// itemPK is the partition key of the item rows of one shard.
func itemPK(id string, shard int) string { return "ITEM#" + shardKey(id, shard) }

// itemKey is the key of item itemKey's row in a batch of shards shards.
func itemKey(id string, shards int, itemKey string) map[string]types.AttributeValue {
	return itemKeyAt(id, ledger.Shard(itemKey, shards), itemKey)
}

// itemKeyAt is the key of item itemKey's row in item shard `shard`.
func itemKeyAt(id string, shard int, itemKey string) map[string]types.AttributeValue {
	return key(itemPK(id, shard), itemKey)
}

// countPK is the partition key of the chunk counters of one counter shard.
func countPK(id string, run, shard int) string {
	return "COUNT#" + id + "#" + strconv.Itoa(run) + "#" + strconv.Itoa(shard)
}

// runPK is the partition key of the run's chunks-done row.
func runPK(id string, run int) string { return "COUNT#" + id + "#" + strconv.Itoa(run) }

// skLane is the sort key of a counter lane (in counter partition = lane).
const skLane = "LANE"

// chunkSK is the sort key of the counter of the chunk starting at first.
func chunkSK(first int64) string { return fmt.Sprintf("CHUNK#%012d", first) }

// markPK is the partition key of the rerun count marks of one item shard.
func markPK(id string, run, shard int) string {
	return "MARK#" + id + "#" + strconv.Itoa(run) + "#" + strconv.Itoa(shard)
}

func slotPK(id string, slot int) string { return config.PKSlot + id + "#" + strconv.Itoa(slot) }

// RetentionSK is the sort key of a retention marker: the expiry in epoch
// milliseconds, zero-padded to 20 digits so that byte order is time order.
func RetentionSK(expiresAt time.Time, id string) string {
	return fmt.Sprintf("%020d#%s", expiresAt.UnixMilli(), id)
}

// attrFormat is every ledger row's format version (ledger.FormatVersion;
// absent: 0, the release before versions).
const attrFormat = "fv"

// formatValue is attrFormat's value on every row written today.
func formatValue() types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.Itoa(ledger.FormatVersion)}
}

// Attributes of item rows (itemRow), named in condition and update
// expressions; itemRow's dynamodbav tags spell the same names.
const (
	attrAttempt        = "attempt"
	attrCost           = "cost"
	attrError          = "error"
	attrFirstAttempt   = "first_attempt"
	attrLeaseUntilMs   = "lease_until_ms"
	attrOutcome        = "outcome"
	attrOutput         = "output"
	attrOutputRef      = "output_ref"
	attrReason         = "reason"
	attrReleased       = "released"
	attrRevision       = "rev" // api.Item.Revision
	attrRetryScheduled = "retry_scheduled"
	attrThrottledMs    = "throttled_ms" // api.Item.ThrottledSince, epoch ms
	attrRun            = "run"
	attrSpent          = "spent"
	attrSpentRun       = "spent_run"
	attrUpdatedAtMs    = "updated_at_ms"
	attrHoldSubject    = "hold_subject"  // api.Hold.Subject of a held item
	attrHoldSinceMs    = "hold_since_ms" // api.Hold.Since, epoch ms
	attrWoken          = "woken"         // api.Hold.Woken
)

// Attributes of the batch row (batchRow) and of the markers, named in
// condition and update expressions; batchRow's dynamodbav tags spell the
// same names. attrRun is shared with item rows.
const (
	attrBatchID          = "batch_id"
	attrCensus           = "census"
	attrChunks           = "chunks"
	attrCounterShards    = "counter_shards"
	attrCounterLanes     = "counter_lanes"
	attrExpiresAtMs      = "expires_at_ms"
	attrFannedOut        = "fanned_out"
	attrFinishedAtMs     = "finished_at_ms"
	attrForgetting       = "forgetting"
	attrRevisions        = "revisions"
	attrRunRevision      = "run_revision"
	attrItemCount        = "item_count"
	attrListShards       = "list_shards"
	attrManifestBytes    = "manifest_bytes"
	attrManifestDigest   = "manifest_digest"
	attrManifestKey      = "manifest_key"
	attrNeedsAttention   = "needs_attention"
	attrPublishedRun     = "published_run"
	attrRefusal          = "refusal"
	attrReportKey        = "report_key"
	attrRunStartedAtMs   = "run_started_at_ms"
	attrStatus           = "status"
	attrStop             = "stop"
	attrStopDetail       = "stop_detail"
	attrStopRan          = "stop_ran"
	attrStopFailures     = "stop_failures"
	attrFailure          = "failure"
	attrFinalizeFailures = "finalize_failures"
	attrSubmitAttempts   = "submit_attempts"
	attrSubmitDeadlineMs = "submit_deadline_ms"
	attrPauseBy          = "pause_by"
	attrPausedAtMs       = "paused_at_ms"
	attrPauseClass       = "pause_class"
	attrPauseError       = "pause_error"
	attrProbes           = "probes"
	attrPauses           = "pauses"
	attrChecked          = "checked"
	attrSourceFormat     = "source_format"
)

// haltRow is the stored shape of api.Halt, in the batch row's halts map
// under haltKey(subject): a subject (an ARN) may hold dots, which an
// expression's document path would split.
type haltRow struct {
	Subject string `dynamodbav:"subject"`
	SinceMs int64  `dynamodbav:"since_ms"`
	Reason  string `dynamodbav:"reason,omitempty"`
}

// haltKey is the key of subject's halt in the batch row's halts map: "h"
// and the first 16 hex digits of its SHA-256.
func haltKey(subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "h" + hex.EncodeToString(sum[:8])
}

// attrHalts is the batch row's map of halts by subject.
const attrHalts = "halts"

// Attributes of slot rows.
const (
	attrHolder = "holder"
)

// batchRow is the stored shape of api.Batch.
type batchRow struct {
	PK             string             `dynamodbav:"pk"`
	SK             string             `dynamodbav:"sk"`
	ID             string             `dynamodbav:"batch_id"`
	Pipeline       string             `dynamodbav:"pipeline"`
	Digest         string             `dynamodbav:"manifest_digest"`
	ManifestKey    string             `dynamodbav:"manifest_key"`
	ManifestBytes  int64              `dynamodbav:"manifest_bytes"`
	ItemCount      int64              `dynamodbav:"item_count"`
	ListShards     int                `dynamodbav:"list_shards"`
	CounterShards  int                `dynamodbav:"counter_shards"`
	CounterLanes   int                `dynamodbav:"counter_lanes,omitempty"` // 0: counted per chunk
	Chunks         int                `dynamodbav:"chunks,omitempty"`
	Run            int                `dynamodbav:"run"`
	Status         string             `dynamodbav:"status"`
	Threshold      string             `dynamodbav:"threshold"` // JSON
	MaxAttempts    int                `dynamodbav:"max_attempts"`
	Retry          string             `dynamodbav:"retry,omitempty"` // JSON api.RetryPolicy; absent: the worker's default
	MaxConcurrency int                `dynamodbav:"max_concurrency,omitempty"`
	ItemsPerMsg    int                `dynamodbav:"items_per_message,omitempty"`
	OnInterrupt    string             `dynamodbav:"on_interrupt,omitempty"`
	Headers        map[string]string  `dynamodbav:"headers,omitempty"`
	Options        string             `dynamodbav:"pipeline_options"` // JSON
	KeyField       string             `dynamodbav:"key_field,omitempty"`
	Source         string             `dynamodbav:"source"`
	SubmittedBy    string             `dynamodbav:"submitted_by,omitempty"`
	FannedOut      bool               `dynamodbav:"fanned_out"`
	CreatedAtMs    int64              `dynamodbav:"created_at_ms"`
	RunStartedAtMs int64              `dynamodbav:"run_started_at_ms"`
	FinishedAtMs   int64              `dynamodbav:"finished_at_ms,omitempty"`
	ReportKey      string             `dynamodbav:"report_key,omitempty"`
	Census         string             `dynamodbav:"census,omitempty"` // JSON
	NeedsAttention bool               `dynamodbav:"needs_attention"`
	Stop           string             `dynamodbav:"stop,omitempty"`
	StopDetail     string             `dynamodbav:"stop_detail,omitempty"`
	StopRan        int64              `dynamodbav:"stop_ran,omitempty"`
	StopFailures   int64              `dynamodbav:"stop_failures,omitempty"`
	ExpiresAtMs    int64              `dynamodbav:"expires_at_ms,omitempty"`
	Request        string             `dynamodbav:"request,omitempty"` // JSON
	SubmitAttempts int                `dynamodbav:"submit_attempts,omitempty"`
	SubmitDeadMs   int64              `dynamodbav:"submit_deadline_ms,omitempty"`
	Refusal        string             `dynamodbav:"refusal,omitempty"` // JSON
	Failure        string             `dynamodbav:"failure,omitempty"`
	FinalizeFails  int                `dynamodbav:"finalize_failures,omitempty"`
	Forgetting     bool               `dynamodbav:"forgetting,omitempty"`
	PublishedRun   int                `dynamodbav:"published_run,omitempty"`
	TaskToken      string             `dynamodbav:"task_token,omitempty"` // ledger.Batch.TaskToken
	PauseBy        string             `dynamodbav:"pause_by,omitempty"`   // absent: not paused
	PausedAtMs     int64              `dynamodbav:"paused_at_ms,omitempty"`
	PauseClass     string             `dynamodbav:"pause_class,omitempty"`
	PauseError     string             `dynamodbav:"pause_error,omitempty"`
	Probes         int                `dynamodbav:"probes,omitempty"`
	Pauses         int                `dynamodbav:"pauses,omitempty"`
	Revisions      string             `dynamodbav:"revisions,omitempty"` // JSON: []api.Revision
	RunRevision    int                `dynamodbav:"run_revision,omitempty"`
	Halts          map[string]haltRow `dynamodbav:"halts,omitempty"` // api.Batch.Halts, by haltKey
	Format         int                `dynamodbav:"fv,omitempty"`    // ledger.FormatVersion; absent: 0
	SourceFormat   string             `dynamodbav:"source_format,omitempty"`
	CheckPlan      string             `dynamodbav:"check_plan,omitempty"`
	Checked        string             `dynamodbav:"checked,omitempty"` // JSON api.CheckSummary; absent: no problem

	StopOnThreshold *bool `dynamodbav:"stop_on_threshold,omitempty"` // absent: true

	// Keys of the batches index (see BatchesPK), set at creation.
	BatchesPK string `dynamodbav:"bpk,omitempty"`
	BatchesSK string `dynamodbav:"bsk,omitempty"`
	// Key of the sources index (see SourcesPK), set at creation for an S3
	// source.
	SourcesPK string `dynamodbav:"spk,omitempty"`
}

func toRow(b ledger.Batch) (batchRow, error) {
	th, err := json.Marshal(b.Threshold)
	if err != nil {
		return batchRow{}, err
	}
	r := batchRow{
		PK: batchPK(b.ID), SK: skBatch, ID: b.ID, Pipeline: b.Pipeline, Digest: b.Digest,
		ManifestKey: b.ManifestKey, ManifestBytes: b.ManifestBytes, ItemCount: b.ItemCount,
		ListShards: b.ListShards, CounterShards: b.CounterShards, CounterLanes: b.CounterLanes, Chunks: b.Chunks, Run: b.Run, Status: string(b.Status),
		Threshold: string(th), MaxAttempts: b.MaxAttempts, MaxConcurrency: b.MaxConcurrency, ItemsPerMsg: b.ItemsPerMessage, OnInterrupt: string(b.OnInterrupt), Headers: b.Headers, Options: string(b.Options),
		KeyField: b.KeyField, Source: b.Source, SubmittedBy: b.SubmittedBy, FannedOut: b.FannedOut, CreatedAtMs: ms(b.CreatedAt),
		RunStartedAtMs: ms(b.RunStartedAt), FinishedAtMs: ms(b.FinishedAt), ReportKey: b.ReportKey,
		NeedsAttention: b.NeedsAttention, Stop: string(b.Stop), StopDetail: b.StopDetail, StopRan: b.StopRan, StopFailures: b.StopFailures, ExpiresAtMs: ms(b.ExpiresAt),
		Request: string(b.Request), SubmitAttempts: b.SubmitAttempts, SubmitDeadMs: ms(b.SubmitDeadline),
		StopOnThreshold: b.StopOnThreshold, Format: ledger.FormatVersion, Failure: b.Failure, FinalizeFails: b.FinalizeFailures,
		Pauses: b.Pauses, RunRevision: b.RunRevision, TaskToken: b.TaskToken, SourceFormat: b.SourceFormat, CheckPlan: b.CheckPlan,
	}
	if b.Checked != nil {
		c, err := json.Marshal(b.Checked)
		if err != nil {
			return batchRow{}, err
		}
		r.Checked = string(c)
	}
	if len(b.Revisions) > 0 {
		rv, err := json.Marshal(b.Revisions)
		if err != nil {
			return batchRow{}, err
		}
		r.Revisions = string(rv)
	}
	if p := b.Pause; p != nil {
		r.PauseBy, r.PausedAtMs, r.PauseClass, r.PauseError, r.Probes = string(p.By), ms(p.Since), p.Class, p.Error, p.Probes
	}
	for subject, h := range b.Halts {
		if r.Halts == nil {
			r.Halts = map[string]haltRow{}
		}
		r.Halts[haltKey(subject)] = haltRow{Subject: subject, SinceMs: ms(h.Since), Reason: h.Reason}
	}
	if !b.CreatedAt.IsZero() {
		r.BatchesPK, r.BatchesSK = BatchesPK(b.ID, b.CreatedAt), BatchesSK(b.ID, b.CreatedAt)
		r.SourcesPK = SourcesPK(b.Source)
	}
	if b.Retry != nil {
		rp, err := json.Marshal(b.Retry)
		if err != nil {
			return batchRow{}, err
		}
		r.Retry = string(rp)
	}
	if b.Refusal != nil {
		rf, err := json.Marshal(b.Refusal)
		if err != nil {
			return batchRow{}, err
		}
		r.Refusal = string(rf)
	}
	if b.FinalCensus != nil {
		c, err := json.Marshal(b.FinalCensus)
		if err != nil {
			return batchRow{}, err
		}
		r.Census = string(c)
	}
	return r, nil
}

func fromRow(r batchRow) (ledger.Batch, error) {
	if err := ledger.CheckFormat("batch row "+r.ID, r.Format); err != nil {
		return ledger.Batch{}, err
	}
	b := ledger.Batch{
		Batch: api.Batch{
			ID:              r.ID,
			Pipeline:        r.Pipeline,
			Digest:          r.Digest,
			ManifestKey:     r.ManifestKey,
			ManifestBytes:   r.ManifestBytes,
			ItemCount:       r.ItemCount,
			ListShards:      r.ListShards,
			CounterShards:   r.CounterShards,
			Run:             r.Run,
			Status:          api.Status(r.Status),
			MaxAttempts:     r.MaxAttempts,
			MaxConcurrency:  r.MaxConcurrency,
			ItemsPerMessage: r.ItemsPerMsg,
			OnInterrupt:     api.InterruptPolicy(r.OnInterrupt),
			Headers:         r.Headers,
			KeyField:        r.KeyField,
			Source:          r.Source,
			SubmittedBy:     r.SubmittedBy,
			FannedOut:       r.FannedOut,
			CreatedAt:       fromMs(r.CreatedAtMs),
			RunStartedAt:    fromMs(r.RunStartedAtMs),
			FinishedAt:      fromMs(r.FinishedAtMs),
			ReportKey:       r.ReportKey,
			NeedsAttention:  r.NeedsAttention,
			Stop:            api.Status(r.Stop),
			StopDetail:      r.StopDetail,
			StopRan:         r.StopRan,
			StopFailures:    r.StopFailures,
			ExpiresAt:       fromMs(r.ExpiresAtMs),
			SubmitAttempts:  r.SubmitAttempts,
			PendingDeletion: r.Forgetting,
			Failure:         r.Failure,
			StopOnThreshold: r.StopOnThreshold,
			Pauses:          r.Pauses,
			RunRevision:     r.RunRevision,
			SourceFormat:    r.SourceFormat,
		},
		CounterLanes:     r.CounterLanes,
		Chunks:           r.Chunks,
		SubmitDeadline:   fromMs(r.SubmitDeadMs),
		PublishedRun:     r.PublishedRun,
		TaskToken:        r.TaskToken,
		FinalizeFailures: r.FinalizeFails,
		CheckPlan:        r.CheckPlan,
	}
	if r.Revisions != "" {
		if err := json.Unmarshal([]byte(r.Revisions), &b.Revisions); err != nil {
			return b, fmt.Errorf("batch %s: revisions: %w", r.ID, err)
		}
	}
	if r.PauseBy != "" {
		b.Pause = &api.Pause{By: api.PauseBy(r.PauseBy), Since: fromMs(r.PausedAtMs), Class: r.PauseClass, Error: r.PauseError, Probes: r.Probes}
	}
	for _, h := range r.Halts {
		if b.Halts == nil {
			b.Halts = map[string]api.Halt{}
		}
		b.Halts[h.Subject] = api.Halt{Subject: h.Subject, Since: fromMs(h.SinceMs), Reason: h.Reason}
	}
	if r.Request != "" {
		b.Request = json.RawMessage(r.Request)
	}
	if r.Retry != "" {
		b.Retry = &api.RetryPolicy{}
		if err := json.Unmarshal([]byte(r.Retry), b.Retry); err != nil {
			return b, fmt.Errorf("batch %s: retry: %w", r.ID, err)
		}
	}
	if r.Checked != "" {
		b.Checked = &api.CheckSummary{}
		if err := json.Unmarshal([]byte(r.Checked), b.Checked); err != nil {
			return b, fmt.Errorf("batch %s: checked: %w", r.ID, err)
		}
	}
	if r.Refusal != "" {
		b.Refusal = &api.SubmitRefusal{}
		if err := json.Unmarshal([]byte(r.Refusal), b.Refusal); err != nil {
			return b, fmt.Errorf("batch %s: refusal: %w", r.ID, err)
		}
	}
	if r.Options != "" {
		b.Options = json.RawMessage(r.Options)
	}
	if r.Threshold != "" {
		if err := json.Unmarshal([]byte(r.Threshold), &b.Threshold); err != nil {
			return b, fmt.Errorf("batch %s: threshold: %w", r.ID, err)
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

// itemRow is the stored shape of api.Item. The batch id and the item key
// are the row's keys (pk ITEM#{id}#{shard}, sk {key}) and the run id
// derives from them (api.RunID), so the row stores none of them again:
// every byte of it is billed on each of its two writes.
type itemRow struct {
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
}

// itemFrom reads an item row of batch batchID.
func itemFrom(batchID string, av map[string]types.AttributeValue) (ledger.Item, error) {
	if len(av) == 0 {
		return ledger.Item{}, nil
	}
	var r itemRow
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
			LeaseUntil:     fromMs(r.LeaseUntilMs),
			OutputRef:      r.OutputRef,
			Error:          r.Error,
			Reason:         api.Reason(r.Reason),
			UpdatedAt:      fromMs(r.UpdatedAtMs),
			Released:       r.Released,
			RunAttempts:    max(0, r.Attempt-max(r.FirstAttempt, 1)+1),
			ThrottledSince: fromMs(r.ThrottledMs),
			Revision:       r.Revision,
		},
		BatchID: batchID,
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
		it.Hold = &api.Hold{Subject: r.HoldSubject, Since: fromMs(r.HoldSinceMs), Woken: api.Wake(r.Woken)}
	}
	return it, nil
}

// Counter-row attributes.
const (
	attrDone       = "done"
	attrFailures   = "failures"
	attrItems      = "items"
	attrChunksDone = "chunks_done"
	attrLanesDone  = "lanes_done"
	attrWriteUnits = "wcu" // DynamoDB units attributed to the run (see Capacity)
	attrReadUnits  = "rcu"
)

// outcomeAttr is the counter attribute counting items of outcome o
// ("n_succeeded", ...).
func outcomeAttr(o api.Outcome) string { return "n_" + string(o) }
