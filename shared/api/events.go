package api

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
)

// AlarmDetailTypes returns the detail types an on-call engineer must hear
// of: a run stopped by its failure threshold, a start refused, a batch
// paused, a batch halted on a refused credential. The stack routes them to its alarm topic (rule
// BatchEventsAlarmRule, unless RunnerProps.NoBatchEventAlarms). The slice
// is new on every call.
func AlarmDetailTypes() []string {
	return []string{DetailThresholdExceeded, DetailRefused, DetailPaused, DetailHalted}
}
