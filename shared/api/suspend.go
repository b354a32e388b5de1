package api

import (
	"fmt"
	"time"
)

// The bounds of a suspension and of its signal (docs/adr/0034).
const (
	// MaxSignalPayloadBytes is the largest signal payload: 4 KiB of JSON,
	// so that a webhook's next request carries it in one header
	// (Bulkrun-Signal, base64url: ≈ 5.5 KB, within the 8 KB most HTTP
	// servers take for a request's headers).
	MaxSignalPayloadBytes = 4 << 10
	// MaxSuspendTokenBytes is the longest token a pipeline may return
	// with its suspension: 256 bytes.
	MaxSuspendTokenBytes = 256
	// MaxSuspendWait is the furthest wake time a suspension may ask for:
	// 24 hours after the attempt. A later one is taken as 24 hours.
	MaxSuspendWait = 24 * time.Hour
	// MaxWakeHop is the longest single wait of a wake time's timer: SQS's
	// largest DelaySeconds, 15 minutes (Amazon SQS developer guide,
	// "Amazon SQS delay queues"). A longer wait takes several hops, at
	// most MaxWakeHops.
	MaxWakeHop = 15 * time.Minute
	// MaxWakeHops is how many timer messages the longest wait takes:
	// MaxSuspendWait / MaxWakeHop. A chain of them is bounded by the
	// message's Requeued (ledger.MaxResends), as every loop of the item
	// function: it may outlive its suspension (docs/design/faults.md).
	MaxWakeHops = int(MaxSuspendWait / MaxWakeHop)
	// MaxWakePrecision is how late after its wake time a suspended item
	// is woken at most, while the items queue is not backed up: SQS
	// delivers a delayed message at its delay's end, and the item
	// function's poller takes it within its long poll (20 s).
	MaxWakePrecision = 20 * time.Second
)

// SignalResult is the answer of a signal (POST
// /batches/{id}/items/{key}/signal): the item, Woken true when this
// signal moved it on, and otherwise By, what had moved it on already (a
// repeated signal, its timer, a cancel): the answer to a signal that
// came second. JSON: {"key": "k", "woken": true} or {"key": "k",
// "woken": false, "by": "timer"}.
type SignalResult struct {
	Key   string `json:"key"`
	Woken bool   `json:"woken"`
	By    Wake   `json:"by,omitempty"`
}

// suspendedMove is NextMove's text for a suspended item waiting.
func suspendedMove(h *Hold) string {
	token := ""
	if h.Subject != "" {
		token = fmt.Sprintf(" --token %s", h.Subject)
	}
	move := fmt.Sprintf("signal it (bulkrun signal ID KEY%s [--payload JSON]), which runs it once more; or cancel the batch", token)
	if !h.WakeAt.IsZero() {
		move = fmt.Sprintf("none until %s, when its timer wakes it; or %s", h.WakeAt.UTC().Format(time.RFC3339), move)
	}
	return move
}
