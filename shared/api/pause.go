package api

import (
	"math/rand/v2"
	"time"
)

// A paused batch is a running batch whose items do not start: its waiting
// messages are sent again to come back at the pause's next check, using
// no attempt and no compute in between; items already running finish. A
// batch pauses itself on an outage (PauseByOutage): when a counter lane
// counts PauseAfter attempts in a row that failed transiently with one
// failure class (FailureClass) and no item answered since. An outage
// pause probes: at each check (PauseCheckAt) one delivery claims the probe
// (Store.ClaimProbe) and runs one item; when the probe's attempt ends in
// anything but a transient failure (the downstream answered) the batch
// unpauses itself. A caller pauses and unpauses by hand (PauseByCaller,
// Control.Pause, Control.Unpause); a caller's pause does not probe and
// lasts until a caller unpauses. A batch with a budget pauses itself when
// its run's spend reaches it (PauseByBudget, see budget.go); raising the
// budget ends that pause. docs/design/items.md, "Pause on an outage".

// PauseBy says who paused a batch.
type PauseBy string

// Who pauses.
const (
	// PauseByOutage: the worker, when a lane counted PauseAfter transient
	// failures of one class in a row; a probe that is answered ends it.
	PauseByOutage PauseBy = "outage"
	// PauseByCaller: POST /batches/{id}/pause (bulkrun pause, the
	// console); only POST /batches/{id}/unpause ends it. It replaces an
	// outage pause.
	PauseByCaller PauseBy = "caller"
)

// Who is who paused, in words: "an outage", "a caller", "its budget"; any other
// value as it is.
func (b PauseBy) Who() string {
	switch b {
	case PauseByOutage:
		return "an outage"
	case PauseByCaller:
		return "a caller"
	case PauseByBudget:
		return "its budget"
	}
	return string(b)
}

// Pause is a running batch's pause (Batch.Pause; absent when it runs).
// JSON: {"by": "outage", "since": "…", "class": "http 502", "error":
// "webhook: k1: HTTP 502", "probes": 2, "next_check_at": "…"}.
type Pause struct {
	By    PauseBy   `json:"by"`
	Since time.Time `json:"since"`
	// Class and Error are the failure class that paused the batch and one
	// failure's text (an outage pause); for a budget pause, "budget" and
	// the spend that reached it (BudgetText).
	Class string `json:"class,omitempty"`
	Error string `json:"error,omitempty"`
	// Probes is how many probes were claimed (the number of the last
	// check that probed).
	Probes int `json:"probes"`
	// NextCheckAt is the next check after the time the view was made: an
	// outage pause probes then, and waiting messages come back after it
	// (PauseCheckAt). Computed, not stored.
	NextCheckAt time.Time `json:"next_check_at,omitzero"`
}

const (
	// FirstCheck is the first check of a pause after it began: 30 s; the
	// checks' spacing then doubles up to MaxCheckInterval.
	FirstCheck = 30 * time.Second
	// MaxCheckInterval is the longest spacing of two checks: 5 minutes, so
	// a pause ends at most ≈ 5.5 minutes after its downstream is back
	// (or a caller unpaused), and a waiting message is sent again at most
	// 12 times an hour.
	MaxCheckInterval = 5 * time.Minute
	// CheckGrace is how long after a check the waiting messages come
	// back (plus up to as much again, at random, to spread them): the
	// probe's call has likely ended by then.
	CheckGrace = 15 * time.Second
)

// PauseCheckAt is check n (n ≥ 1) of a pause that began at since: since
// + 30 s, + 1 m 30 s, + 3 m 30 s, + 7 m 30 s, + 12 m 30 s, then every 5
// minutes (FirstCheck doubling, at most MaxCheckInterval apart).
func PauseCheckAt(since time.Time, n int) time.Time {
	at, step := since, FirstCheck
	for i := 1; i <= n; i++ {
		at = at.Add(step)
		step = min(2*step, MaxCheckInterval)
	}
	return at
}

// NextCheck is the first check of p strictly after now, and its number.
func (p Pause) NextCheck(now time.Time) (int, time.Time) {
	n := 1
	if now.Sub(p.Since) > 12*time.Minute+30*time.Second {
		n = 5 + int(now.Sub(PauseCheckAt(p.Since, 5))/MaxCheckInterval) // skip the checks long past
	}
	for {
		at := PauseCheckAt(p.Since, n)
		if at.After(now) {
			return n, at
		}
		n++
	}
}

// ProbeDue returns the number of the latest check at or before now and
// whether it is due for a probe: an outage pause whose probes have not
// reached it.
func (p Pause) ProbeDue(now time.Time) (int, bool) {
	n, _ := p.NextCheck(now)
	n--
	return n, p.By == PauseByOutage && n >= 1 && n > p.Probes
}

// Wait is how long a message of the paused batch waits at now: until its
// next check plus CheckGrace and up to CheckGrace more at random, at
// most MaxResendDelay (a message sent again carries at most SQS's
// 15-minute DelaySeconds). Within 2 × CheckGrace after a check whose
// probe is out (an outage pause whose Probes reached it), it waits
// CheckGrace and up to as much more instead: the probe has likely been
// answered by then, and if it unpaused the batch the message need not
// wait a whole interval.
func (p Pause) Wait(now time.Time) time.Duration {
	n, at := p.NextCheck(now)
	jitter := time.Duration(rand.Int64N(int64(CheckGrace)))
	if last := n - 1; p.By == PauseByOutage && last >= 1 && p.Probes >= last && now.Sub(PauseCheckAt(p.Since, last)) < 2*CheckGrace {
		return CheckGrace + jitter
	}
	return min(at.Sub(now)+CheckGrace+jitter, MaxResendDelay)
}

// View is p as a view shows it at now (NextCheckAt set).
func (p Pause) View(now time.Time) *Pause {
	_, p.NextCheckAt = p.NextCheck(now)
	return &p
}

// MaxResendDelay is the longest wait a message sent again can carry: 15
// minutes, SQS's DelaySeconds maximum (Amazon SQS API reference,
// "SendMessage", DelaySeconds,
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html).
const MaxResendDelay = 15 * time.Minute

// PausedSummary is what a run's pauses took (Report.Paused): how many
// there were, how long the run stood paused in all, and the last one.
// JSON: {"pauses": 2, "seconds": 95.5, "last": {"by": "caller", "since":
// "…", "until": "…", "ended_by": "caller"}}. Absent from a report of a
// run that never paused.
type PausedSummary struct {
	// Pauses counts the run's pauses (Batch.Pauses), Seconds their time
	// in all, to the millisecond: each from its start to its end, and one
	// standing when the run ended (a cancel while paused) to the run's
	// end.
	Pauses  int     `json:"pauses"`
	Seconds float64 `json:"seconds"`
	// Last is the run's last pause: who paused it, from when to when, why
	// (an outage's failure class and one failure's text; a budget's
	// spend), its probes, and who ended it (EndedBy: "outage" for its
	// probe answered, "caller" for an unpause, "budget" for a raise; empty
	// when it stood at the run's end).
	Last *PauseSpan `json:"last,omitempty"`
}

// PauseSpan is one pause from its start to its end (PausedSummary.Last).
type PauseSpan struct {
	By      PauseBy   `json:"by"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	Class   string    `json:"class,omitempty"`
	Error   string    `json:"error,omitempty"`
	Probes  int       `json:"probes,omitempty"`
	EndedBy PauseBy   `json:"ended_by,omitempty"`
}
