package ledger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

// WakeMark is a wake of a held item row (Store.WakeItem).
type WakeMark struct {
	BatchID    string
	ListShards int
	Key        string
	Run        int
	// Outcome and Subject, when not empty, are the held outcome and the
	// hold's subject the row must have; Attempt, when > 0, the attempt
	// that held it.
	Outcome api.Outcome
	Subject string
	Attempt int
	// By is what wakes it (Hold.Woken); a signal (api.WakeSignal) also
	// sets the row's Signalled to Attempt.
	By  api.Wake
	Now time.Time
}

// HaltMark is a halt to put on a batch (Store.Halt).
type HaltMark struct {
	BatchID string
	Run     int
	Subject string
	Reason  string // cut to pipeline.MaxErrorTextBytes
	Now     time.Time
}

// LiftMark is a caller's lift of a batch's halt (Store.Lift): the halt
// as the caller read it (its Subject names the one to remove; its Since
// and Reason are kept as the batch's LastLift) and when it was lifted.
type LiftMark struct {
	BatchID string
	Halt    api.Halt
	At      time.Time
}

// Lifted is m as the batch's LastLift: its halt, lifted at At to the
// millisecond.
func (m LiftMark) Lifted() api.LiftedHalt {
	return api.LiftedHalt{Halt: m.Halt, LiftedAt: m.At.UTC().Truncate(time.Millisecond)}
}

// SecretSubjectPrefix starts the subject of a credential read from secret
// references (SecretSubject).
const SecretSubjectPrefix = "secret:"

// SecretSubject is the subject of the credential a batch's items act
// under when its headers and options hold secret references: "secret:"
// and the references' ARNs, sorted and joined by ","; "" when they hold
// none (or a malformed one, which submit refuses). A refusal of that
// credential withholds the item under it (Attempt.Withhold), and the
// batch's halt on it (api.Halt) withholds every other item without a
// call until a caller lifts it.
func SecretSubject(headers map[string]string, options []byte) string {
	refs, err := secretref.Refs(headers, options)
	if err != nil || len(refs) == 0 {
		return ""
	}
	arns := slices.Sorted(maps.Values(refs))
	return SecretSubjectPrefix + strings.Join(slices.Compact(arns), ",")
}

// HaltOn returns the subject of b's halt that stands on subject, and
// whether one does.
func HaltOn(b Batch, subject string) (string, bool) {
	if subject == "" {
		return "", false
	}
	_, ok := b.Halts[subject]
	return subject, ok
}

// Listable reports whether sel selects a listing of Store.ListItems:
// failed, quarantined, a held outcome, in_flight, or api.NeedsAttention
// (every failed, quarantined and held item).
func Listable(sel api.Outcome) bool {
	return sel == api.OutcomeFailed || sel == api.OutcomeQuarantined || sel.Held() || sel == api.OutcomeInFlight || sel == api.NeedsAttention
}

// ListedAs reports whether an item of outcome o belongs to the listing
// sel selects (Listable).
func ListedAs(o, sel api.Outcome) bool {
	if sel == api.NeedsAttention {
		return o == api.OutcomeFailed || o == api.OutcomeQuarantined || o.Held()
	}
	return o == sel
}

// HaltEvent is the detail of a Batch Halted or Batch Halt Lifted event:
// a halt put on a batch's subject (its items withheld) or lifted (they
// resume). EventID is "{batch_id}:{run}:halted:{subject}:{since epoch
// ms}" (or lifted), the same on every delivery of one change.
type HaltEvent struct {
	EventID string    `json:"event_id"`
	BatchID string    `json:"batch_id"`
	Run     int       `json:"run"`
	Halted  bool      `json:"halted"`
	Subject string    `json:"subject"`
	Since   time.Time `json:"since"`
	Reason  string    `json:"reason,omitempty"`
	// Woken is how many withheld items a lift moved on (Halted false).
	Woken int64     `json:"woken,omitempty"`
	At    time.Time `json:"at"`
}

// AnnounceHalt puts the event of a halt's change; a failure is logged.
func AnnounceHalt(ctx context.Context, bus EventBus, log interface {
	Warn(string, ...any)
}, e HaltEvent) {
	if bus == nil {
		return
	}
	what, dt := "lifted", api.DetailHaltLifted
	if e.Halted {
		what, dt = "halted", api.DetailHalted
	}
	if e.EventID == "" {
		e.EventID = fmt.Sprintf("%s:%d:%s:%s:%d", e.BatchID, e.Run, what, e.Subject, e.Since.UnixMilli())
	}
	if err := bus.Put(ctx, dt, e); err != nil {
		log.Warn("put halt event", "batch_id", e.BatchID, "error", err.Error())
	}
}

// Suspended is the ending of an attempt whose pipeline answered s at now
// (Conclude): held, its token cut to api.MaxSuspendTokenBytes, its wake
// time (if any) within [now, now + api.MaxSuspendWait].
func Suspended(s *pipeline.SuspendError, now time.Time) Ending {
	at := s.WakeAt
	if !at.IsZero() {
		at = time.UnixMilli(min(max(at.UnixMilli(), now.UnixMilli()), now.Add(api.MaxSuspendWait).UnixMilli())).UTC()
	}
	return Ending{Outcome: api.OutcomeSuspended, Reason: api.ReasonSuspend, Error: pipeline.CutText(s.Error(), pipeline.MaxErrorTextBytes),
		Hold: api.Hold{Subject: pipeline.CutText(s.Token, api.MaxSuspendTokenBytes), Since: now, WakeAt: at}}
}
