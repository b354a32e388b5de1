package api

import (
	"strconv"
	"time"
)

// The events bulkrun puts on the account's default event bus (Amazon
// EventBridge; docs/api.md, "Events"): their source and detail types, the
// names a rule matches on.

// EventSource is the source field of every event bulkrun puts.
const EventSource = "bulkrun"

// Detail types. A finished run's event is one of the first three, by its
// final status; a start that did not happen (an upload or a schedule tick
// whose submit was refused or failed, the detail its error report) is
// DetailRefused; a run paused (by an outage of its downstream, or by a
// caller: the detail's "by") and unpaused are DetailPaused and
// DetailUnpaused; a halt put on a credential and lifted, DetailHalted and
// DetailHaltLifted.
const (
	DetailCompleted         = "Batch Completed"
	DetailThresholdExceeded = "Batch Threshold Exceeded"
	DetailCancelled         = "Batch Cancelled"
	DetailRefused           = "Batch Refused"
	DetailPaused            = "Batch Paused"
	DetailUnpaused          = "Batch Unpaused"
	// DetailHalted: a receiver refused the credential of a secret
	// reference read again unchanged; the batch's items acting under it
	// are withheld until a caller lifts the halt (DetailHaltLifted).
	DetailHalted     = "Batch Halted"
	DetailHaltLifted = "Batch Halt Lifted"
	// DetailItemsExhausted: an item function's write recorded items of a
	// batch exhausted at a per-item ceiling (one event per write, its
	// items counted; held.ExhaustedEvent). Not routed to the alarm topic
	// (a run at a ceiling would send one per write): the alarm
	// {stack}-items-exhausted pages once per period.
	DetailItemsExhausted = "Items Exhausted"
)

// AlarmDetailTypes returns the detail types an on-call engineer must hear
// of: a run stopped by its failure threshold, a start refused, a batch
// paused, a batch halted on a refused credential. The stack routes them to its alarm topic (rule
// BatchEventsAlarmRule, unless RunnerProps.NoBatchEventAlarms). The slice
// is new on every call.
func AlarmDetailTypes() []string {
	return []string{DetailThresholdExceeded, DetailRefused, DetailPaused, DetailHalted}
}

// DetailStateChange is the detail type of the one event bulkrun puts on
// every change of a batch's state, whatever the change (StateChange): its
// detail is a StateChangeEvent, whose JSON Schema is
// docs/events/batch-state-change.schema.json (docs/api.md, "Events"). It
// comes besides the detail types above, which stay as they are.
const DetailStateChange = "Batch State Change"

// StateChangeSchemaVersion is StateChangeEvent.SchemaVersion: the version
// of docs/events/batch-state-change.schema.json the detail follows. Within
// a version the schema only grows: fields are added, optional, never
// removed, renamed, retyped or made required; a change that is not an
// addition is a new version.
const StateChangeSchemaVersion = 1

// StateChange is what changed in a batch's state: the "change" of a Batch
// State Change event.
type StateChange string

// The state changes, in the order a batch meets them.
const (
	// ChangeSubmitted: a batch was created (by POST /batches, an upload
	// under incoming/ or a schedule's tick). Put by submit; status
	// submitting (an S3 source read in the background) or running.
	ChangeSubmitted StateChange = "submitted"
	// ChangeRunning: a run started over a frozen manifest: the first run
	// (after submitted, or when a background read froze the manifest), a
	// resume, a rerun or a correction run. Put by submit.
	ChangeRunning StateChange = "running"
	// ChangeAwaitingApproval: a sampled batch's sample ended and its
	// estimate was written (Approval.State awaiting_approval, with
	// Approval.Estimate; Plan.Sample). Put by item. First run only;
	// status running.
	ChangeAwaitingApproval StateChange = "awaiting_approval"
	// ChangeApproved: a sampled batch was approved (Approval.State
	// approved), by a caller (Approval.DecidedBy caller, POST
	// /batches/{id}/approve) or by its estimate within
	// Plan.AutoApproveUSD (auto_approve); the rest of its items runs. Put
	// by submit (a caller) or item (auto_approve). A rejection has no
	// change of its own: the run's finished event (verdict cancelled)
	// tells it.
	ChangeApproved StateChange = "approved"
	// ChangePaused: a running batch paused, by a caller or on an outage of
	// its downstream (Pause.By). Put by submit (a caller) or item (an
	// outage).
	ChangePaused StateChange = "paused"
	// ChangeUnpaused: a pause ended, by a caller or an answered probe.
	ChangeUnpaused StateChange = "unpaused"
	// ChangeFinished: a run ended with Verdict (completed,
	// threshold_exceeded, cancelled, finalize_failed). Put by finalize.
	ChangeFinished StateChange = "finished"
	// ChangeRefused: a start was refused: a background read of the
	// batch's source that refused it (status refused), or an upload or a
	// schedule tick refused for good (the batch id when known). Put by
	// submit.
	ChangeRefused StateChange = "refused"
)

// StateChanges returns every StateChange, in the order a batch meets
// them. The slice is new on every call.
func StateChanges() []StateChange {
	return []StateChange{ChangeSubmitted, ChangeRunning, ChangeAwaitingApproval, ChangeApproved, ChangePaused, ChangeUnpaused, ChangeFinished, ChangeRefused}
}

// StateChangeEvent is the detail of a Batch State Change event, version
// StateChangeSchemaVersion of docs/events/batch-state-change.schema.json:
//
//	{"schema_version": 1, "event_id": "b1:1:finished:1796065200000", "change": "finished",
//	 "batch_id": "b1", "run": 1, "status": "completed", "verdict": "completed",
//	 "pipeline": "webhook", "item_count": 3, "needs_attention": false,
//	 "census": {…}, "report": "s3://…/report.json", "at": "2026-11-30T20:04:11Z"}
//
// EventID ("{batch_id}:{run}:{change}:{epoch ms}", the epoch milliseconds
// of the change's own time: the run's creation for finished, the pause's
// start for paused and unpaused, the estimate's MadeAt for
// awaiting_approval, the decision's DecidedAt for approved) is the same
// on every delivery of one change: subscribers dedupe on it, not on
// EventBridge's "id". EventBridge does not keep the order of events; At
// orders them. Fields that do not apply to a change are absent. Every
// event is within EventBridge's 256 KB entry (internal/event.MaxEntryBytes):
// texts are cut to 4 KiB, and the census's cost rollups and an approval
// estimate's projected costs are bounded as on the batch row's census.
type StateChangeEvent struct {
	SchemaVersion int         `json:"schema_version"`
	EventID       string      `json:"event_id"`
	Change        StateChange `json:"change"`
	BatchID       string      `json:"batch_id,omitempty"` // absent only for a refused start whose id is unknown
	Run           int         `json:"run"`                // 0 until the first run starts
	Status        Status      `json:"status"`             // the batch's status after the change
	// Verdict is how the run ended (finished only): completed,
	// threshold_exceeded, cancelled or finalize_failed; Status too.
	Verdict        Status  `json:"verdict,omitempty"`
	Pipeline       string  `json:"pipeline,omitempty"`
	ItemCount      int64   `json:"item_count,omitempty"` // once the manifest is frozen
	SubmittedBy    string  `json:"submitted_by,omitempty"`
	NeedsAttention *bool   `json:"needs_attention,omitempty"` // finished
	Census         *Census `json:"census,omitempty"`          // finished, but finalize_failed: bounded (Census.Bounded)
	Report         string  `json:"report,omitempty"`          // finished, but finalize_failed: s3:// URI of report.json
	Failure        string  `json:"failure,omitempty"`         // finalize_failed: finalize's last error, at most 4 KiB
	Pause          *Pause  `json:"pause,omitempty"`           // paused and unpaused: the pause that began or ended
	// UnpausedBy is who ended the pause (unpaused): a caller, or an
	// answered probe (outage).
	UnpausedBy PauseBy `json:"unpaused_by,omitempty"`
	// Approval is the batch's sample and decision after the change
	// (awaiting_approval and approved): state awaiting_approval with the
	// estimate, or approved with decided_by and decided_at (to the
	// millisecond) and the estimate when one was written before the
	// approval; the estimate's projected_cost at most
	// MaxCensusCostNames names, the first in byte order (the batch view
	// has every one).
	Approval *Approval      `json:"approval,omitempty"`
	Refusal  *SubmitRefusal `json:"refusal,omitempty"` // refused: why, naming the line, field or key
	Start    *StartOrigin   `json:"start,omitempty"`   // refused: the upload or tick that was refused
	At       time.Time      `json:"at"`                // when the change happened, UTC
}

// StartOrigin names the start a refused upload or schedule tick would have
// been (StateChangeEvent.Start): Source "upload" (Bucket, Key) or
// "schedule" (Schedule), and the error report left for it (Report, an
// s3:// URI).
type StartOrigin struct {
	Source   string `json:"source"`
	Bucket   string `json:"bucket,omitempty"`
	Key      string `json:"key,omitempty"`
	Schedule string `json:"schedule,omitempty"`
	Report   string `json:"report,omitempty"`
}

// StateChangeEventID is the event id of change of run of batch id at t:
// "{id}:{run}:{change}:{t epoch ms}".
func StateChangeEventID(id string, run int, change StateChange, t time.Time) string {
	return id + ":" + strconv.Itoa(run) + ":" + string(change) + ":" + strconv.FormatInt(t.UnixMilli(), 10)
}
