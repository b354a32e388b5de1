package api

import (
	"fmt"
	"time"
)

// Hold is what a held item (withheld, exhausted) waits for: Item.Hold, nil for any
// other outcome (Item.Next says its next move in words). JSON:
//
//	{"subject": "secret:arn:aws:ssm:…:parameter/hook", "since": "…"}
//	{"subject": "secret:arn:aws:ssm:…:parameter/hook", "since": "…", "woken": "lift"}
//
// The item's Error says why it is held (the refusal of its credential,
// or the halt it met without a call).
type Hold struct {
	// Subject names what holds the item: a suspended item's token (the
	// one its pipeline chose, "" when none); the subject of the halt it is
	// withheld under ("secret:{ARN}" for the credential read from that
	// secret reference; several ARNs sorted and joined by ","), or the
	// per-item ceiling it is exhausted at (CeilingSpendUSD,
	// CeilingTokens).
	Subject string `json:"subject,omitempty"`
	// Since is when the item was held (its attempt's end, UTC).
	Since time.Time `json:"since"`
	// WakeAt is a suspended item's wake time (UTC; absent: none): its
	// timer wakes it then, or within MaxWakePrecision after.
	WakeAt time.Time `json:"wake_at,omitzero"`
	// Woken says what moved the item on (WakeLift, WakeRaise, WakeCancel, WakeSignal, WakeTimer): its next
	// attempt (or its settling) is on its way. Empty while it waits.
	Woken Wake `json:"woken,omitempty"`
}

// Wake says what moved a held item on.
type Wake string

// What moves a held item on.
const (
	// WakeLift: a caller lifted the halt the item was withheld under.
	WakeLift Wake = "lift"
	// WakeCancel: a caller cancelled the batch: the item settles
	// cancelled.
	WakeCancel Wake = "cancel"
	// WakeRaise: a caller raised the batch's ceilings above the
	// exhausted item's totals.
	WakeRaise Wake = "raise"
	// WakeSignal: a caller signalled the suspended item (its payload goes
	// to the next attempt).
	WakeSignal Wake = "signal"
	// WakeTimer: the suspended item's wake time came.
	WakeTimer Wake = "timer"
)

// NextMove is the next move of an item of outcome o held by h (nil for
// an item that is not held), in words, for listings and the console;
// ended says the batch's run has ended (its status is finished), so a
// resume can come at once. Failed and quarantined items get theirs too;
// a succeeded, cancelled, pending or in-flight item has none ("").
func NextMove(o Outcome, h *Hold, ended bool) string {
	resume := "resume the batch once its run ends"
	if ended {
		resume = "resume the batch (bulkrun resume)"
	}
	switch o {
	case OutcomeFailed:
		return "correct its input (bulkrun correct) or " + resume
	case OutcomeQuarantined:
		return "release it (bulkrun release) and " + resume
	}
	if h == nil {
		return ""
	}
	if h.Woken != "" {
		return fmt.Sprintf("none: woken by %s, its next attempt is on its way", h.Woken)
	}
	if o == OutcomeWithheld {
		return fmt.Sprintf("fix the credential's secret first, then lift the halt on %s (bulkrun lift), which resumes every item withheld under it; or cancel the batch", h.Subject)
	}
	if o == OutcomeExhausted {
		return fmt.Sprintf("its run's attempts reached %s (its error says how far): raise that ceiling above its total (bulkrun ceilings), which resumes every item under the new ceilings; or cancel the batch", h.Subject)
	}
	if o == OutcomeSuspended {
		return suspendedMove(h)
	}
	return ""
}

// Halt is a batch's halt on a subject (Batch.Halts): the authority its
// items act under was withdrawn, so they are withheld, without a call,
// until a caller lifts it. The item function puts it when a receiver
// refuses a credential that was read again from its secret and found
// unchanged. JSON: {"subject": "secret:arn:…", "since": "…", "reason":
// "webhook: item-0000000007: HTTP 401: …"}.
type Halt struct {
	Subject string    `json:"subject"`
	Since   time.Time `json:"since"`
	// Reason is the refusal that put the halt (cut to 4 KiB).
	Reason string `json:"reason,omitempty"`
}

// LiftedSummary is what callers lifted of a batch's halts (Report.Lifted)
// by the run's end: how many, in every run so far (a halt kept past a
// cancel is lifted before the resume), and the last of them.
// JSON: {"lifts": 1, "last": {"subject": "secret:arn:…", "since": "…",
// "reason": "webhook: …: HTTP 401: …", "lifted_at": "…"}}. Absent while
// no halt was lifted (a halt still standing is in Report.Halts).
type LiftedSummary struct {
	Lifts int         `json:"lifts"`
	Last  *LiftedHalt `json:"last,omitempty"`
}

// LiftedHalt is a halt a caller lifted (LiftedSummary.Last): the halt
// as it stood (its subject, since when, the refusal that put it) and
// when it was lifted.
type LiftedHalt struct {
	Halt
	LiftedAt time.Time `json:"lifted_at"`
}

// MaxHalts is the most halts one batch holds: a batch's items act under
// the credentials of its headers and options, so a few subjects at most.
const MaxHalts = 16

// LiftResult is the answer of a lift (POST /batches/{id}/halts/lift):
// the subject, whether a halt was removed (false: none stood, the lift
// only woke items still withheld under it), how many withheld items it
// woke (or found woken by an earlier call, whose message it sent again:
// AlreadyWoken of them), and Done false when more are left for another
// call (each call wakes what it can in a bounded time; repeating the lift
// goes on). Over the calls of one lift, the first call's Woken plus each
// later call's Woken − AlreadyWoken counts every item once when no other
// wake ran before or between the calls.
type LiftResult struct {
	Subject      string `json:"subject"`
	Lifted       bool   `json:"lifted"`
	Woken        int64  `json:"woken"`
	AlreadyWoken int64  `json:"already_woken"`
	Done         bool   `json:"done"`
}

// NeedsAttention is the listing of every item a caller must look at:
// failed, quarantined and held, each with its next move (Item.Next,
// NextMove), in key order — GET /batches/{id}/items?outcome=needs_attention.
// It selects a listing; it is no outcome of an item.
const NeedsAttention Outcome = "needs_attention"
