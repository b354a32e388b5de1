package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger/fanrows"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Batch is the stored row: the API's Batch and bulkrun's own bookkeeping.
type Batch struct {
	api.Batch
	// CounterLanes is the run's counter lanes (see CounterLanes), the same
	// in every run; 0 on rows written before lanes, whose runs count per
	// fan-out chunk (Store.CountChunk).
	CounterLanes int `json:"-"`
	// Chunks is the number of fan-out chunks of the manifest (the same in
	// every run): a run is done when this many chunk counters reached
	// their item counts (Store.CountChunk). 0 on rows written before
	// chunk counters: their runs end by the finalize tick.
	Chunks int `json:"-"`
	// FanRows is the fan rows per counter partition (fanrows.Of, set by
	// Freeze); 0 on rows frozen before fan rows: one row (FAN).
	FanRows int `json:"-"`
	// Request is the accepted submit request (JSON, defaults filled) of a
	// batch whose source is read in the background; the read and a
	// repeated submit use it. Empty for a batch submitted in one call.
	Request          json.RawMessage `json:"-"`
	SubmitDeadline   time.Time       `json:"-"`
	FinalizeFailures int             `json:"-"`
	// PublishedRun is the last run whose completion event was put (set
	// after PutEvents answered); finalize and its tick publish a finished
	// run's event until it is marked, so it is delivered at least once.
	PublishedRun int `json:"-"`
	// HiddenPlan is the part of the batch's plan the API never shows
	// (see HiddenPlan); never in JSON.
	HiddenPlan `json:"-"`
	// ForgettingAt and ForgettingBy are when the latest forget marked the
	// batch and that forget's token (ForgetMark.Now, ForgetMark.Token):
	// the forget whose mark it is deletes the batch row
	// (Store.DeleteBatch); zero when none has.
	ForgettingAt time.Time `json:"-"`
	ForgettingBy string    `json:"-"`
	// TaskGone is set (Store.SetTaskGone) when a heartbeat found the task
	// no longer awaited (ErrTaskGone): no more heartbeats are sent.
	TaskGone bool `json:"-"`
	// RateConflict is the latest other batch noted naming the batch's rate
	// key at another rate, with how many were noted
	// (Store.NoteRateConflict); nil when none was. The view shows it while
	// that batch runs (LiveView.RateConflict).
	RateConflict *api.RateConflict `json:"-"`
	// LiftedAt is when a caller last lifted a halt on the batch
	// (Store.Lift; zero: never): an item function process that read the
	// batch's secret references before then reads them again past its
	// cache before its next call under them, once per process and lift
	// (credential.Lifts), so that no call sends a value cached before the
	// fix. A batch's items act under one credential subject
	// (SecretSubject), so one time serves.
	LiftedAt time.Time `json:"-"`
	// TraceParent and TraceState are the W3C trace context of the submit
	// that created the batch (https://www.w3.org/TR/trace-context/): its
	// span's traceparent ("00-{trace id}-{span id}-{flags}", 55 bytes) and
	// the caller's tracestate (usually empty), or a new root's traceparent
	// when the caller sent none. Every item attempt's span is its child
	// (internal/tracing). Set at creation, the same in every run, not part
	// of the plan (a repeated submit keeps the first one's); empty on rows
	// written before traces.
	TraceParent string `json:"-"`
	TraceState  string `json:"-"`
	// PausedMs is the time the run's ended pauses took in all, in
	// milliseconds, and LastPause the last of them (Store.Unpause adds
	// each); both reset when a run starts. Rows written before them hold
	// neither: their runs' reports say only the pauses' number.
	PausedMs  int64          `json:"-"`
	LastPause *api.PauseSpan `json:"-"`
	// Lifts counts the halts callers lifted on the batch, and LastLift is
	// the last of them (Store.Lift sets both, in every run: a halt kept
	// past a cancel is lifted before the resume that runs under it).
	Lifts    int             `json:"-"`
	LastLift *api.LiftedHalt `json:"-"`
}

// LiftedSummary is what callers lifted of b's halts (api.Report.Lifted);
// nil when none was lifted.
func (b Batch) LiftedSummary() *api.LiftedSummary {
	if b.Lifts == 0 && b.LastLift == nil {
		return nil
	}
	return &api.LiftedSummary{Lifts: max(b.Lifts, 1), Last: b.LastLift}
}

// PausedSummary is what b's run's pauses took by end (api.Report.Paused):
// the ended pauses (PausedMs, LastPause) and one standing at end, counted
// to end; nil when the run never paused.
func (b Batch) PausedSummary(end time.Time) *api.PausedSummary {
	if b.Pauses == 0 && b.Pause == nil {
		return nil
	}
	ms, last := b.PausedMs, b.LastPause
	if p := b.Pause; p != nil {
		ms += max(0, end.Sub(p.Since).Milliseconds())
		last = &api.PauseSpan{By: p.By, Since: p.Since, Until: end, Class: p.Class, Error: p.Error, Probes: p.Probes}
	}
	return &api.PausedSummary{Pauses: max(b.Pauses, 1), Seconds: float64(ms) / 1000, Last: last}
}

// HiddenPlan is the part of a batch's plan (api.Plan) that the API never
// shows: compared on a repeated submit with the rest (Batch.DiffPlan),
// the same in every run, kept on the row only.
type HiddenPlan struct {
	// TaskToken is the submit's Step Functions task token
	// (api.SubmitRequest.TaskToken), 1–api.MaxTaskTokenBytes bytes of one
	// line, answered when run 1 ends (TaskEnd); empty when none was given.
	// A 409 shows only whether there is one.
	TaskToken string `json:"-"`
	// TaskHeartbeat is api.SubmitRequest.TaskHeartbeatSeconds, in
	// seconds: 0 for none, else api.MinTaskHeartbeatSeconds–
	// api.MaxTaskHeartbeatSeconds, with a TaskToken. While run TaskRun
	// goes, each tick sends the token a heartbeat (TaskBeat).
	TaskHeartbeat int `json:"-"`
	// CheckPlan is the hex SHA-256 of the batch's checks (CheckPlanOf:
	// its schema, bad_rows and max_invalid_percent): a repeated submit
	// with other checks is another plan (409 naming schema). "" for a
	// batch with none (and on rows written before checks).
	CheckPlan string `json:"-"`
}

// CheckPlanOf is the CheckPlan of a request: "" when it sets no schema,
// no bad_rows other than refuse and no max_invalid_percent; else the hex
// SHA-256 of its compacted schema, bad_rows and max_invalid_percent.
func CheckPlanOf(req api.SubmitRequest) string {
	if len(req.Schema) == 0 && (req.BadRows == "" || req.BadRows == api.BadRowsRefuse) && req.MaxInvalidPercent == nil {
		return ""
	}
	var schema bytes.Buffer
	if json.Compact(&schema, req.Schema) != nil {
		schema.Reset()
		schema.Write(req.Schema)
	}
	mode := req.BadRows
	if mode == "" {
		mode = api.BadRowsRefuse
	}
	pct := "default"
	if req.MaxInvalidPercent != nil {
		pct = strconv.FormatFloat(*req.MaxInvalidPercent, 'g', -1, 64)
	}
	sum := sha256.Sum256([]byte(string(mode) + "\n" + pct + "\n" + schema.String()))
	return hex.EncodeToString(sum[:])
}

// Live returns b, or an error wrapping ErrExpired (HTTP 404 expired) when
// its retention has ended at now.
func Live(b Batch, now time.Time) (Batch, error) {
	if b.Expired(now) {
		return Batch{}, fmt.Errorf("batch %s: retention ended at %s: %w", b.ID, b.ExpiresAt.Format(time.RFC3339), api.ErrExpired)
	}
	return b, nil
}

// TTLGrace is how long after a finished batch's retention ends its rows
// carry DynamoDB's TTL (config.AttrExpiresAt, epoch seconds): the sweep
// deletes the batch first; TTL removes what a failing sweep leaves behind.
// DynamoDB deletes expired items "typically within a few days" (DynamoDB
// developer guide, "Using time to live (TTL) in DynamoDB",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TTL.html),
// never before their TTL.
const TTLGrace = 24 * time.Hour

// Item is the stored row: the API's Item and bulkrun's own bookkeeping.
type Item struct {
	api.Item
	BatchID string `json:"-"`
	// Interrupted is set by Store.Reserve when it took the item over from
	// an attempt whose lease expired without an outcome or a scheduled
	// retry (a crash or a timeout): that attempt's effect is unknown.
	Interrupted bool `json:"-"`
	// RetryScheduled: in flight with a scheduled retry (ItemState.Retry);
	// an item row's lease then runs until the retry is due
	// (Record.RetryAt).
	RetryScheduled bool `json:"-"`
	// Resumed is set by Store.Reserve and Store.Settle when they took an
	// item held in this run (woken): its held outcome; ResumedAt its row's
	// last write before the take (its wake, ItemState.UpdatedAt; zero when
	// the store does not tell).
	Resumed   api.Outcome `json:"-"`
	ResumedAt time.Time   `json:"-"`
	SpentRun  int         `json:"-"`
	// Signalled is ItemState.Signalled.
	Signalled int `json:"-"`
	// ExpiresAt is the row's TTL (when DynamoDB may delete it); zero when
	// it has none.
	ExpiresAt time.Time `json:"-"`
	// Pos is the item's position in a scan of its batch's rows
	// (shardmerge.Merge): its key for an item row, PackPos for an item of a
	// pack row (Packed, in the pack starting at manifest index PackFirst).
	Pos       string `json:"-"`
	Packed    bool   `json:"-"`
	PackFirst int64  `json:"-"`
}

// ScanPos is the item's position in a scan: Pos, or its key when Pos is unset.
func (it Item) ScanPos() string {
	if it.Pos != "" {
		return it.Pos
	}
	return it.Key
}

// Freeze sets the manifest fields of b.
func (b *Batch) Freeze(manifestKey string, sum source.ManifestSummary, itemsPerSecond int) {
	b.Digest = sum.Digest
	b.ManifestKey = manifestKey
	b.ManifestBytes = sum.Bytes
	b.ItemCount = sum.Count
	b.ListShards = ListShards(sum.Count, itemsPerSecond)
	b.CounterLanes = CounterLanes(sum.Count, itemsPerSecond)
	b.CounterShards = b.CounterLanes // lane p lives in counter partition p
	b.Chunks = len(sum.Chunks)
	b.FanRows = fanrows.Of(b.Chunks, b.CounterShards)
	b.CSV = sum.CSV
}
