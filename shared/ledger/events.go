package ledger

import (
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
)

// SubmitEvent is the submit function's internal event that hands off the
// background read of an accepted batch: {"bulkrun_submit": "{batch id}"}.
type SubmitEvent struct {
	BatchID string `json:"bulkrun_submit"`
}

// EventID identifies a run's completion event for subscribers to dedupe
// on: "{batch_id}:{run}:{created_at epoch ms}", the same for every
// delivery of the run, and different for a later batch that reuses the id
// after the first was forgotten or expired.
func EventID(r api.Report) string {
	return fmt.Sprintf("%s:%d:%d", r.BatchID, r.Run, r.CreatedAt.UnixMilli())
}

// Part steps (PartEvent.Step).
const (
	PartStepRead  = "read"
	PartStepKeys  = "keys"
	PartStepCount = "count" // a source without key field: count a part's items first
)

// PartEvent is the submit function's internal event of one step of a
// source read in parts: {"bulkrun_submit_part": "read", "batch_id": …,
// "plan": …, "index": …, "start": …}. Index is the part (read) or the key
// partition (keys); Start, of a CSV part's read, says whether the part's
// first byte lies inside a quoted field (source.PartStartUnknown,
// source.PartStartOutside, source.PartStartInside).
type PartEvent struct {
	Step    string `json:"bulkrun_submit_part"`
	BatchID string `json:"batch_id"`
	Plan    string `json:"plan"`
	Index   int    `json:"index"`
	Start   int    `json:"start,omitempty"`
	// Base is the positional index of the part's first item (a source
	// without key field, whose keys are item-{index in the source}): the
	// items of the parts before it, which their counts tell.
	Base int64 `json:"base,omitempty"`
}

// FinalizeEvent is the finalize function's payload: a run to finalize, or a
// scheduled tick ({"tick": true}). Chain is how many finalize invocations
// came before this one in a chain of chunks, each invoking the next
// (finalize.Chainer): 0 for a trigger from the item function or submit. Part
// (1-based) and Plan name one part of a run read in parts
// (finalize.Finalizer.FinalizePart); Range (1-based) and Plan (the
// checkpoint that planned it) one key range of its merge
// (finalize.Finalizer.FinalizeRange). JSON: {"batch_id", "run", "tick",
// "chain", "part", "plan", "range"}, each omitted when zero.
type FinalizeEvent struct {
	BatchID string `json:"batch_id,omitempty"`
	Run     int    `json:"run,omitempty"`
	Tick    bool   `json:"tick,omitempty"`
	Chain   int    `json:"chain,omitempty"`
	Part    int    `json:"part,omitempty"`
	Plan    int    `json:"plan,omitempty"`
	Range   int    `json:"range,omitempty"`
}
