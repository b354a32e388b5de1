package batch

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
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
// lasts until a caller unpauses. docs/design.md, "Pause on an outage".

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

// Pause is a running batch's pause (Batch.Pause; absent when it runs).
// JSON: {"by": "outage", "since": "…", "class": "http 502", "error":
// "webhook: k1: HTTP 502", "probes": 2, "next_check_at": "…"}.
type Pause struct {
	By    PauseBy   `json:"by"`
	Since time.Time `json:"since"`
	// Class and Error are the failure class that paused the batch and one
	// failure's text (an outage pause).
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

// The pause's constants.
const (
	// PauseAfter is how many attempts in a row, on one counter lane, must
	// fail transiently with one failure class (and no item of the lane be
	// answered since) for the batch to pause itself: 10. Lanes take
	// message batches at random, so a lane's streak is a sample of the
	// run's most recent attempts; a lane that keeps failing tries to pause
	// the batch again at each further PauseAfter failures.
	PauseAfter = 10
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
	// streakSlots is how many failure-class slots a counter lane keeps
	// (StreakSlot).
	streakSlots = 8
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

// FailureClass names the kind of a transient failure, for the pause's
// "same class" test: an error's own FailureClass() method (the webhook's
// StatusError: "http 502"), a throttling ("throttled http 503"), a
// connection refused or reset, a timeout, a DNS failure, or "transient".
// At most 64 bytes.
func FailureClass(err error) string {
	var own interface{ FailureClass() string }
	var dns *net.DNSError
	var nerr net.Error
	switch t, throttled := pipeline.ThrottleOf(err); {
	case errors.As(err, &own):
		return pipeline.CutText(own.FailureClass(), 64)
	case throttled:
		return pipeline.CutText("throttled "+t.Service+" "+t.Code, 64)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dns):
		return "dns"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	}
	return "transient"
}

// StreakSlot is the counter lane's slot of failure class c: FNV-1a(c)
// mod 8. Two classes may share a slot; their failures then count as one
// class's.
func StreakSlot(c string) int {
	h := fnv.New32a()
	h.Write([]byte(c))
	return int(h.Sum32() % streakSlots)
}

// StreakSlots is how many failure-class slots a counter lane keeps.
func StreakSlots() int { return streakSlots }

// PauseMark is a pause to write (Store.Pause).
type PauseMark struct {
	BatchID string
	Run     int
	By      PauseBy
	Class   string // outage: the failure class
	Error   string // outage: one failure's text (cut to pipeline.MaxErrorTextBytes)
	Now     time.Time
}

// UnpauseMark is a pause to end (Store.Unpause): By PauseByCaller ends
// any pause; By PauseByOutage only the outage pause that began at Since.
type UnpauseMark struct {
	BatchID string
	Run     int
	By      PauseBy
	Since   time.Time
}

// ProbeClaim claims check Probe of the outage pause of BatchID that began
// at Since (Store.ClaimProbe).
type ProbeClaim struct {
	BatchID string
	Run     int
	Since   time.Time
	Probe   int
	Now     time.Time
}

// Event detail types of a pause (source "bulkrun", the default bus).
const (
	DetailPaused   = "Batch Paused"
	DetailUnpaused = "Batch Unpaused"
)

// PauseEvent is the detail of a Batch Paused or Batch Unpaused event.
// EventID is "{batch_id}:{run}:paused:{since epoch ms}" (or unpaused),
// the same on every delivery of one change, for subscribers to dedupe on.
type PauseEvent struct {
	EventID string    `json:"event_id"`
	BatchID string    `json:"batch_id"`
	Run     int       `json:"run"`
	Paused  bool      `json:"paused"`
	By      PauseBy   `json:"by"` // who paused (Paused) or unpaused: a probe answered (outage) or a caller
	Since   time.Time `json:"since"`
	Class   string    `json:"class,omitempty"`
	Error   string    `json:"error,omitempty"`
	Probes  int       `json:"probes"`
	At      time.Time `json:"at"`
}

// PauseEventOf is the event of b's pause p beginning (paused) or ending
// at now, by by.
func PauseEventOf(b Batch, p Pause, paused bool, by PauseBy, now time.Time) PauseEvent {
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

// announce puts the event of a pause's change; a failure is logged (the
// batch's view and the metric say it too).
func announce(ctx context.Context, bus EventBus, log interface {
	Warn(string, ...any)
}, e PauseEvent) {
	if bus == nil {
		return
	}
	dt := DetailUnpaused
	if e.Paused {
		dt = DetailPaused
	}
	if err := bus.Put(ctx, dt, e); err != nil {
		log.Warn("put pause event", "batch_id", e.BatchID, "error", err.Error())
	}
}

// Pause pauses the batch's run by hand: no item starts until Unpause,
// items running finish, waiting items use no attempt. It replaces an
// outage pause. Idempotent: a batch already paused by a caller, or one
// whose run has finished, is answered as it is. Errors: ErrNotFound
// (ErrExpired past the retention); ErrConflict while the source is still
// being read (submitting).
func (c *Control) Pause(ctx context.Context, id string) (Batch, error) {
	b, err := c.Get(ctx, id)
	if err != nil {
		return Batch{}, err
	}
	switch {
	case b.Status.Finished(), b.Stop != "", b.Pause != nil && b.Pause.By == PauseByCaller:
		return b, nil
	case b.Status != StatusRunning:
		return b, fmt.Errorf("pause %s: no run is going yet (status %s): %w", id, b.Status, ErrConflict)
	}
	now := c.now()
	err = c.Store.Pause(ctx, PauseMark{BatchID: id, Run: b.Run, By: PauseByCaller, Now: now})
	switch {
	case err == nil:
		c.Log.Warn("batch paused by a caller", "batch_id", id, "run", b.Run)
		announce(ctx, c.Bus, c.Log, PauseEventOf(b, Pause{By: PauseByCaller, Since: now}, true, PauseByCaller, now))
	case !errors.Is(err, ErrConflict):
		return Batch{}, err
	}
	return c.Store.GetBatch(ctx, id)
}

// Unpause ends the batch's pause, whoever paused it: waiting items start
// again at the pause's next check (within MaxCheckInterval + 2 ×
// CheckGrace). Idempotent: a batch that is not paused is answered as it
// is. Errors: ErrNotFound (ErrExpired past the retention).
func (c *Control) Unpause(ctx context.Context, id string) (Batch, error) {
	b, err := c.Get(ctx, id)
	if err != nil {
		return Batch{}, err
	}
	if b.Pause == nil {
		return b, nil
	}
	p := *b.Pause
	err = c.Store.Unpause(ctx, UnpauseMark{BatchID: id, Run: b.Run, By: PauseByCaller, Since: p.Since})
	switch {
	case err == nil:
		now := c.now()
		c.Log.Warn("batch unpaused by a caller", "batch_id", id, "run", b.Run, "paused_ms", now.Sub(p.Since).Milliseconds())
		announce(ctx, c.Bus, c.Log, PauseEventOf(b, p, false, PauseByCaller, now))
	case !errors.Is(err, ErrConflict):
		return Batch{}, err
	}
	return c.Store.GetBatch(ctx, id)
}
