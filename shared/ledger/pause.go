package ledger

import (
	"context"
	"strconv"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// The pause's constants.
const (
	// PauseAfter is how many attempts in a row, on one counter lane, must
	// fail transiently with one failure class (and no item of the lane be
	// answered since) for the batch to pause itself: 10. Lanes take
	// message batches at random, so a lane's streak is a sample of the
	// run's most recent attempts; a lane that keeps failing tries to pause
	// the batch again at each further PauseAfter failures.
	PauseAfter = 10
)

// PauseMark is a pause to write (Store.Pause).
type PauseMark struct {
	BatchID string
	Run     int
	By      api.PauseBy
	Class   string // outage: the failure class
	Error   string // outage: one failure's text (cut to pipeline.MaxErrorTextBytes)
	// BudgetUSD, for a budget pause (PauseByBudget), is the budget the
	// spend reached: the pause is written only while the row's budget is
	// still it (a raise in between wins).
	BudgetUSD float64
	Now       time.Time
	// Replaces, for a caller's pause (PauseByCaller), is the outage pause
	// it replaces as the caller read it: written only while that pause
	// stands (its start), its time to Now added to the run's PausedMs
	// and kept as LastPause, ended by the caller. Nil: only a batch not
	// paused is paused.
	Replaces *api.Pause
}

// Replaced is the outage pause m replaces as a span to m.Now, ended by
// m's caller.
func (m PauseMark) Replaced() api.PauseSpan {
	r := m.Replaces
	return api.PauseSpan{By: r.By, Since: r.Since, Until: m.Now, Class: r.Class, Error: r.Error, Probes: r.Probes, EndedBy: m.By}
}

// UnpauseMark is a pause to end (Store.Unpause): By PauseByCaller ends
// any pause; By PauseByOutage only the outage pause that began at Since;
// By PauseByBudget only a budget pause. With Now set, only the pause
// that began at Since (whoever ends it), and the store keeps what it
// took: Now − Since added to the run's Batch.PausedMs, and Batch.LastPause
// the span of Pause (the pause as the caller read it) to Now, ended by By.
type UnpauseMark struct {
	BatchID string
	Run     int
	By      api.PauseBy
	Since   time.Time
	Now     time.Time
	Pause   api.Pause
}

// Span is the pause m ends as a span to m.Now (Batch.LastPause).
func (m UnpauseMark) Span() api.PauseSpan {
	return api.PauseSpan{By: m.Pause.By, Since: m.Since, Until: m.Now, Class: m.Pause.Class, Error: m.Pause.Error, Probes: m.Pause.Probes, EndedBy: m.By}
}

// PausedFor is how long the pause m ends took, in milliseconds (0 when
// Now is not after Since).
func (m UnpauseMark) PausedFor() int64 { return max(0, m.Now.Sub(m.Since).Milliseconds()) }

// ProbeClaim claims check Probe of the outage pause of BatchID that began
// at Since (Store.ClaimProbe).
type ProbeClaim struct {
	BatchID string
	Run     int
	Since   time.Time
	Probe   int
	Now     time.Time
}

// PauseEvent is the detail of a Batch Paused or Batch Unpaused event.
// EventID is "{batch_id}:{run}:paused:{since epoch ms}" (or unpaused),
// the same on every delivery of one change, for subscribers to dedupe on.
type PauseEvent struct {
	EventID string      `json:"event_id"`
	BatchID string      `json:"batch_id"`
	Run     int         `json:"run"`
	Paused  bool        `json:"paused"`
	By      api.PauseBy `json:"by"` // who paused (Paused) or unpaused: a probe answered (outage) or a caller
	Since   time.Time   `json:"since"`
	Class   string      `json:"class,omitempty"`
	Error   string      `json:"error,omitempty"`
	Probes  int         `json:"probes"`
	At      time.Time   `json:"at"`
}

// PauseEventOf is the event of b's pause p beginning (paused) or ending
// at now, by by.
func PauseEventOf(b Batch, p api.Pause, paused bool, by api.PauseBy, now time.Time) PauseEvent {
	what := "unpaused"
	if paused {
		what = "paused"
	}
	return PauseEvent{EventID: b.ID + ":" + strconv.Itoa(b.Run) + ":" + what + ":" + strconv.FormatInt(p.Since.UnixMilli(), 10),
		BatchID: b.ID, Run: b.Run, Paused: paused, By: by, Since: p.Since, Class: p.Class, Error: p.Error, Probes: p.Probes, At: now}
}

// EventBus puts events (internal/event.Bus). Nil means none.
type EventBus interface {
	Put(ctx context.Context, detailType string, detail any) error
}

// Announce puts the event of a pause's change; a failure is logged (the
// batch's view and the metric say it too).
func Announce(ctx context.Context, bus EventBus, log interface {
	Warn(string, ...any)
}, e PauseEvent) {
	if bus == nil {
		return
	}
	dt := api.DetailUnpaused
	if e.Paused {
		dt = api.DetailPaused
	}
	if err := bus.Put(ctx, dt, e); err != nil {
		log.Warn("put pause event", "batch_id", e.BatchID, "error", err.Error())
	}
}
