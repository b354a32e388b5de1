package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger/streak"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The item rules: what a delivery may do with an item (Plan), the state a
// reservation or a settlement leaves (Start, Settled), and how an attempt
// ends (Conclude). They are pure functions of the item's state in its
// ledger unit (an item row, or an entry of a pack row) and are the only
// statement of the rules: the worker plans and concludes every item with
// them whatever its unit, the in-memory store decides its item-row
// conditions with Plan, and the conformance suite (integration/testbed/ledgertest)
// checks that DynamoDB's condition expressions (internal/dynamo) take and
// refuse exactly what Plan does.
//
// Within a run an item moves
//
//	pending   → in_flight (reserve: attempt + 1), cancelled (stopped run), failed (dead letter, refused message)
//	in_flight → in_flight (takeover of an ended lease, or a scheduled retry: attempt + 1)
//	in_flight → succeeded, failed, quarantined (the attempt's ending, fenced by its attempt)
//	in_flight → cancelled, failed (a stopped run or a dead letter, once its lease has ended)
//	in_flight → withheld (the attempt's ending, fenced by its attempt)
//	held      → in_flight (woken: reserve, attempt + 1, the run's attempts and spend kept)
//	held      → cancelled, failed (woken, in a stopped run or a dead letter)
//
// and a terminal outcome does not move. A held item (withheld) moves
// only once woken (Hold.Woken: a lift, a cancel); nothing else takes it, so a held item's next attempt runs exactly once per
// wake, whatever the queue delivers. A new run (resume) makes failed,
// cancelled and interrupted items, and released quarantined ones, pending
// again; succeeded and unreleased quarantined items keep their outcome and
// are counted once in the new run. A correction run (revision rev ≥ 2,
// Submitter.Correct) makes pending exactly the items marked with its
// revision (Store.MarkRevision: failed, quarantined or cancelled ones,
// whose corrected input it runs); every other item of its messages (the
// others of a marked item's pack) keeps its outcome, whatever it is, and
// is counted once.

// Mode is what a delivery does with the items of its unit.
type Mode int

const (
	// ModeRun runs the items: the message's normal delivery.
	ModeRun Mode = iota
	// ModeSettle settles the items not yet terminal in the run without
	// running them: a stopped run (cancelled), a dead-lettered message
	// (failed).
	ModeSettle
	// ModeUnstarted settles only the items never reserved in the run: a
	// message the queue refused, a dead-lettered fan-out chunk.
	ModeUnstarted
)

// Step is what a delivery does with one item (Plan).
type Step int

const (
	// StepNone: terminal in this run already, or left to its own message.
	StepNone Step = iota
	// StepCount: answered from an earlier run's outcome (succeeded, or
	// quarantined and not released); counted once toward this run.
	StepCount
	// StepRun: reserved; its pipeline runs under attempt + 1.
	StepRun
	// StepSettle: settled without running (Settled).
	StepSettle
	// StepHeld: in flight in this run under another delivery's live
	// lease; its holder ends it.
	StepHeld
)

// Plan decides what a delivery of run `run` in mode does with an item
// whose state is s; rev is the run's revision (Batch.RunRevision: 0 for a
// run of the whole manifest, n ≥ 2 for a correction run); live reports
// that s's lease (the item row's, or its pack row's) has not ended.
// interrupted reports a StepRun item in flight in this run without a
// scheduled retry: its last attempt's outcome is unknown (a crash or a
// timeout).
//
// A held item of the run (withheld) runs (ModeRun) or is settled
// (ModeSettle) only once woken (ItemState.Woken);
// until then every delivery leaves it (StepNone).
//
// An item is fresh to the run when it has no state, or an earlier run
// left it failed, cancelled, in flight (interrupted), held or quarantined and
// released — in a correction run, when an earlier run left it marked with
// the run's revision, and only then. DynamoDB's conditions spell the same
// rules: Store.Reserve takes exactly the items Plan gives StepRun in
// ModeRun, Store.Settle the items it gives StepSettle in ModeSettle,
// Store.SettleUnstarted those it gives StepSettle in ModeUnstarted.
func Plan(s ItemState, run, rev int, mode Mode, live bool) (step Step, interrupted bool) {
	o := s.Outcome
	fresh := o == "" || s.Run < run && (o == api.OutcomeFailed || o == api.OutcomeCancelled || o == api.OutcomeInFlight || o.Held() || o == api.OutcomeQuarantined && s.Released)
	kept := s.Run < run && (o == api.OutcomeSucceeded || o == api.OutcomeQuarantined && !s.Released)
	if rev >= 2 {
		marked := s.Run < run && s.Revision == rev
		fresh = o == "" || marked
		kept = s.Run < run && !marked && o.Terminal()
	}
	inFlight := s.Run == run && o == api.OutcomeInFlight
	woken := s.Run == run && s.Woken()
	switch {
	case woken && mode == ModeRun:
		return StepRun, false
	case woken && mode == ModeSettle:
		return StepSettle, false
	case mode == ModeUnstarted && fresh:
		return StepSettle, false
	case mode == ModeUnstarted:
		return StepNone, false
	case fresh && mode == ModeSettle:
		return StepSettle, false
	case fresh:
		return StepRun, false
	case inFlight && live:
		return StepHeld, false
	case inFlight && mode == ModeSettle:
		return StepSettle, false
	case inFlight:
		return StepRun, !s.Retry
	case kept && s.CountedRun != run:
		return StepCount, false
	}
	return StepNone, false
}

// Start is s reserved for an attempt in run at now (Plan gave StepRun):
// in flight, attempt + 1, no scheduled retry. An item new to the run
// starts its run's attempts there and drops the earlier run's ending; a
// held item woken in the run keeps its run's attempts and spend and
// drops its hold.
func Start(s ItemState, run int, now time.Time) ItemState {
	n := s
	n.Attempt = s.Attempt + 1
	if s.Run != run || s.Outcome != api.OutcomeInFlight && !s.Outcome.Held() {
		n.FirstAttempt = n.Attempt
		n.Output, n.OutputRef, n.Error, n.Reason, n.Cost, n.Released = nil, "", "", "", nil, false
		n.ThrottledSince = time.Time{}
		n.Signalled = 0
	}
	if s.Outcome.Held() {
		// Woken: the run's attempts, spend and time go on.
		n.Error, n.Reason, n.Cost, n.Hold, n.ThrottledSince = "", "", nil, api.Hold{}, time.Time{}
	}
	n.Run, n.Outcome, n.Retry, n.RetryAt, n.UpdatedAt = run, api.OutcomeInFlight, false, time.Time{}, now
	return n
}

// Settled is s settled in run with outcome o without running (Plan gave
// StepSettle): an item new to the run makes no attempt in it; one in
// flight or held in it keeps its attempts.
func Settled(s ItemState, run int, o api.Outcome, reason api.Reason, text string, now time.Time) ItemState {
	n := s
	if s.Run != run || s.Outcome != api.OutcomeInFlight && !s.Outcome.Held() {
		n.FirstAttempt = s.Attempt + 1 // no attempt in this run
	}
	n.Hold = api.Hold{}
	n.Run, n.Outcome, n.Reason, n.Error = run, o, reason, pipeline.CutText(text, pipeline.MaxErrorTextBytes)
	n.Output, n.OutputRef, n.Cost, n.Released, n.Retry, n.RetryAt, n.UpdatedAt = nil, "", nil, false, false, time.Time{}, now
	n.ThrottledSince = time.Time{}
	return n
}

// RunAttempts is the attempts of the item's run: Attempt − FirstAttempt + 1.
func (s ItemState) RunAttempts() int { return s.Attempt - max(s.FirstAttempt, 1) + 1 }

// Attempt is what Conclude decides from: one reserved attempt of an item,
// before its pipeline runs (Ran false) and after (Ran true).
type Attempt struct {
	Number      int // the item's attempt (its fence: counts across runs)
	RunAttempts int // attempts of the run, this one included
	MaxAttempts int // the batch's max attempts
	// Interrupted: the run's previous attempt ended without an outcome or
	// a scheduled retry (its lease ran out): its effect is unknown.
	Interrupted bool
	OnInterrupt api.InterruptPolicy
	// Stop is the run's stop (api.StatusCancelled or
	// api.StatusThresholdExceeded) as read just before the call: the
	// attempt does not run, the item ends cancelled and the attempt is not
	// counted. "" when the run is not being stopped.
	Stop api.Status
	// Refusal is why the attempt cannot run at all (a secret reference that
	// does not resolve, a pipeline this function does not register): the
	// item fails permanently without running.
	Refusal error
	// Halted is the subject of a halt standing on the credential the item
	// acts under (Batch.Halts, as read just before the call): the attempt
	// does not run, the item is withheld under it, and the attempt is not
	// counted. "" when none stands.
	Halted string
	// Withhold is the subject of the credential the call sent (HoldSubject
	// of its secret references), set when the receiver rejected it
	// (pipeline.IsCredentialRejected) and its secret, read again bypassing
	// the cache, was unchanged: the item is withheld under it, the
	// attempt not counted (the credential's refusal, not the item's).
	// "" when the credential came from no secret reference.
	Withhold string
	Ran      bool
	// Err is what ended the attempt once it ran: the pipeline's error, or
	// the error of storing its output or committing its staged writes;
	// nil: succeeded.
	Err error
	// CutOff: the pipeline returned Err after its context ended at the
	// invocation's deadline margin or the lease's end, so the call's
	// outcome is unknown (an interruption).
	CutOff bool
	// Rotated: the receiver rejected the credential the call sent
	// (pipeline.IsCredentialRejected), and the secret reference it came
	// from reads another value now (rotated since it was cached): the
	// next attempt sends the new value. The retry does not count as an
	// attempt.
	Rotated bool
	// Retry is the batch's retry policy: the wait before the next attempt
	// is RetryDelay(Retry, RunAttempts).
	Retry api.RetryPolicy
	// ThrottledSince is when the item's current streak of throttled
	// attempts began (its first throttled attempt since its last counted
	// one); zero when its last attempt was not throttled.
	ThrottledSince time.Time
	// Paced: the call started at a place leased in its downstream key's
	// adaptive line (a batch with no rate, its key paced: docs/adr/0036).
	// A throttled paced call waits ThrottleDelay(0, Retry-After), not the
	// streak's doubling: its next call leases a new place, so the line —
	// cut by this very refusal — spaces it, or, when its refusal cut the
	// key, keeps its place and calls at the hold's end (pacer.Lease.
	// KeepPlace); either way a doubled wait would
	// only add the time it already waited in line (at one item a
	// message, 400 items against a quota of 20 a second: the last 10
	// came back one by one over 33 s after the other 390 had ended).
	Paced bool
	// Paused: the attempt is the probe of a paused batch (see Pause): a
	// transient failure schedules a retry after PauseWait that does not
	// count as an attempt.
	Paused    bool
	PauseWait time.Duration
	// Now is when the attempt ended.
	Now time.Time
}

// Ending is how an attempt ends: a terminal Outcome, or OutcomeInFlight
// with a retry scheduled after Wait. The zero Ending (Outcome "") means
// nothing is decided yet: the attempt may run.
type Ending struct {
	Outcome api.Outcome
	Reason  api.Reason
	Error   string // cut to pipeline.MaxErrorTextBytes
	Wait    time.Duration
	// Throttled: a retry of an attempt that a service called on the
	// item's behalf refused for its rate or capacity; the attempt does not
	// count toward max attempts (Ended moves FirstAttempt past it), and
	// ThrottledSince is when the streak began.
	Throttled      bool
	ThrottledSince time.Time
	// Paused: a retry of a paused batch's probe, which does not count as
	// an attempt either (Ended moves FirstAttempt past it).
	Paused bool
	// Unrun: the attempt ended before its pipeline was called (its run
	// is being stopped), so it counts no attempt either (Ended moves
	// FirstAttempt past it).
	Unrun bool
	// Rotated: a retry of an attempt whose credential the receiver
	// rejected after its secret was rotated (Attempt.Rotated): the next
	// attempt sends the new value; it counts no attempt either (Ended
	// moves FirstAttempt past it).
	Rotated bool
	// Class is the failure class (streak.Class) of an ending by a
	// transient error: a retry (not a throttled one), or a failure at max
	// attempts; "" for any other ending. The pause counts them.
	Class string
	// Hold is a held ending's hold (Outcome withheld): its subject and
	// Since (the attempt's end).
	Hold api.Hold
}

// Retry reports an ending that schedules another attempt.
func (e Ending) Retry() bool { return e.Outcome == api.OutcomeInFlight }

// Conclude decides how attempt a ends. Before the pipeline runs (a.Ran
// false) it ends an attempt that must not run: an interrupted attempt of
// a batch that quarantines interruptions, an attempt past max attempts
// (a takeover after the last one was interrupted), an attempt of a run
// being stopped (cancelled, not counted), a refusal, an attempt under a
// halt (withheld, not counted); otherwise it returns the zero Ending. After it ran: succeeded without an error;
// failed for a permanent error, quarantined for a quarantine; a transient
// error cut off at the deadline is an interruption (quarantined where the
// batch says so); a throttled call (pipeline.ThrottleOf: Lambda's 429, an
// HTTP 429 or 503, Secrets Manager's or SSM's ThrottlingException)
// schedules a retry that does not count as an attempt, after
// ThrottleDelay (its first wait when the call was paced, a.Paced), while the streak of such attempts is shorter than
// pipeline.MaxThrottleWait (past it, the attempt counts as any transient
// error); a transient error at max attempts fails (max_attempts); any
// other transient error schedules a retry after a.Retry's delay, or the
// pipeline's longer Retry-After, or, for a call that timed out
// (*pipeline.TimeoutError), TimeoutWait when longer.
//
// A paused batch's probe (a.Paused) that fails transiently schedules a
// retry after a.PauseWait that does not count as an attempt either; so
// does an attempt whose rejected credential was rotated (a.Rotated),
// after MinThrottleDelay. A rejected credential read again unchanged
// (a.Withhold) ends the item withheld under that subject, not counted. A
// *pipeline.SuspendError ends it suspended (Suspended), not counted. A transient ending carries its failure class
// (streak.Class).
//
// The retry policy and the pause enter only here (MaxAttempts, Retry,
// Paused).
func Conclude(a Attempt) Ending {
	end := func(o api.Outcome, r api.Reason, text string) Ending {
		return Ending{Outcome: o, Reason: r, Error: pipeline.CutText(text, pipeline.MaxErrorTextBytes)}
	}
	switch {
	case a.Interrupted && a.OnInterrupt == api.InterruptQuarantine:
		return end(api.OutcomeQuarantined, api.ReasonInterrupted, fmt.Sprintf("attempt %d was interrupted (lease expired, outcome unknown); the batch quarantines interrupted items", a.Number-1))
	case a.RunAttempts > a.MaxAttempts:
		return end(api.OutcomeFailed, api.ReasonMaxAttempts, fmt.Sprintf("interrupted: attempt %d exceeds max attempts %d", a.RunAttempts, a.MaxAttempts))
	case a.Stop != "" && !a.Ran:
		reason, why := api.ReasonThreshold, "the run's failures exceeded its threshold"
		if a.Stop == api.StatusCancelled {
			reason, why = api.ReasonCancel, "the run was cancelled"
		}
		e := end(api.OutcomeCancelled, reason, why+" before this item's call started")
		e.Unrun = true
		return e
	case a.Refusal != nil:
		return end(api.OutcomeFailed, api.ReasonPermanent, pipeline.ErrorText(a.Refusal))
	case a.Halted != "" && !a.Ran:
		e := end(api.OutcomeWithheld, api.ReasonCredential, "withheld without a call: the batch holds a halt on "+a.Halted)
		e.Unrun, e.Hold = true, api.Hold{Subject: a.Halted, Since: a.Now}
		return e
	case !a.Ran:
		return Ending{}
	case a.Err == nil:
		return Ending{Outcome: api.OutcomeSucceeded}
	}
	err := a.Err
	if a.Rotated {
		// The credential, not the item: one call per attempt, so the new
		// value goes with the next one, at once.
		e := end(api.OutcomeInFlight, "", "credential rejected; its secret changed since it was read, the next attempt sends the new value: "+pipeline.ErrorText(err))
		e.Rotated, e.Wait = true, MinThrottleDelay
		return e
	}
	if a.Withhold != "" && pipeline.IsCredentialRejected(err) {
		// Read again and unchanged: the authority is withdrawn. The item
		// waits under a halt on the credential, which a caller lifts once
		// it is fixed.
		e := end(api.OutcomeWithheld, api.ReasonCredential, WithheldText(err))
		e.Hold = api.Hold{Subject: a.Withhold, Since: a.Now}
		return e
	}
	if s, ok := pipeline.SuspendOf(err); ok {
		return Suspended(s, a.Now)
	}
	if a.CutOff && pipeline.Classify(err) == pipeline.ClassTransient {
		err = &interruptedError{err: err}
	}
	text := pipeline.ErrorText(err)
	switch pipeline.Classify(err) {
	case pipeline.ClassPermanent:
		return end(api.OutcomeFailed, api.ReasonPermanent, text)
	case pipeline.ClassQuarantine:
		return end(api.OutcomeQuarantined, api.ReasonQuarantine, text)
	}
	var interrupted *interruptedError
	if errors.As(err, &interrupted) && a.OnInterrupt == api.InterruptQuarantine {
		// An interruption, not a transient error: the receiver may have
		// acted. The batch's policy sets the item aside.
		return end(api.OutcomeQuarantined, api.ReasonInterrupted, text)
	}
	e := conclude(a, err, text)
	if !e.Throttled {
		// A throttling within its bound is the service's rate, not an
		// outage: it neither pauses a batch nor ends a streak.
		e.Class = streak.Class(err)
	}
	return e
}

// conclude is Conclude for an attempt that failed transiently (err, its
// text): a paused batch's probe, a throttling, max attempts, a retry.
func conclude(a Attempt, err error, text string) Ending {
	end := func(o api.Outcome, r api.Reason, text string) Ending {
		return Ending{Outcome: o, Reason: r, Error: pipeline.CutText(text, pipeline.MaxErrorTextBytes)}
	}
	if a.Paused {
		e := end(api.OutcomeInFlight, "", text)
		e.Paused, e.Wait = true, a.PauseWait
		return e
	}
	if t, ok := pipeline.ThrottleOf(err); ok && !a.CutOff {
		since := a.ThrottledSince
		if since.IsZero() || since.After(a.Now) {
			since = a.Now
		}
		if waited := a.Now.Sub(since); waited < pipeline.MaxThrottleWait {
			e := end(api.OutcomeInFlight, "", text)
			e.Throttled, e.ThrottledSince = true, since
			if a.Paced {
				e.Wait = ThrottleDelay(0, t.Delay)
			} else {
				e.Wait = ThrottleDelay(waited, t.Delay)
			}
			return e
		}
		text = fmt.Sprintf("throttled for %s, past pipeline.MaxThrottleWait (%s), so this attempt counts: %s",
			a.Now.Sub(since).Round(time.Second), pipeline.MaxThrottleWait, text)
	}
	if a.RunAttempts >= a.MaxAttempts {
		return end(api.OutcomeFailed, api.ReasonMaxAttempts, fmt.Sprintf("attempt %d of %d: %s", a.RunAttempts, a.MaxAttempts, text))
	}
	e := end(api.OutcomeInFlight, "", text)
	e.Wait = RetryDelay(a.Retry, a.RunAttempts)
	if ra, ok := pipeline.RetryDelay(err); ok && ra > e.Wait {
		e.Wait = ra
	}
	if d, ok := pipeline.TimeoutOf(err); ok {
		e.Wait = max(e.Wait, TimeoutWait(d, a.RunAttempts))
	}
	return e
}

// TimeoutWait is the least wait before the next attempt of an item whose
// attempt n of its run (n ≥ 1) timed out after d (a *pipeline.TimeoutError):
// d × 2^n, at most pipeline.MaxRetryAfter. The call may still run at the
// receiver: after the first timeout the next call starts at least 2d after
// bulkrun stopped waiting, so a receiver taking up to three times the
// timeout has finished the first call; each further timeout doubles the
// wait. The batch's retry policy applies when it waits longer.
func TimeoutWait(d time.Duration, n int) time.Duration {
	if d <= 0 {
		return 0
	}
	w := d
	for range min(max(n, 1), 32) {
		if w >= pipeline.MaxRetryAfter {
			break
		}
		w *= 2
	}
	return min(w, pipeline.MaxRetryAfter)
}

// The waits of throttled attempts (Conclude), which count no attempt.
const (
	// MinThrottleDelay is the first wait of a streak: 1 second.
	MinThrottleDelay = time.Second
	// MaxThrottleDelay caps one wait: 2 minutes.
	MaxThrottleDelay = 2 * time.Minute
)

// ThrottleDelay is the wait before the next attempt of an item throttled
// for waited so far in its streak: as long as it has waited (so the waits
// double: 1, 2, 4 … s), within MinThrottleDelay–MaxThrottleDelay, the
// service's own ask (Retry-After) when longer, and never past the end of
// pipeline.MaxThrottleWait (at least MinThrottleDelay). A jitter of up to
// +50 % spreads the items a service throttled together.
func ThrottleDelay(waited, asked time.Duration) time.Duration {
	d := min(max(waited, MinThrottleDelay), MaxThrottleDelay)
	d += time.Duration(rand.Float64() * 0.5 * float64(d))
	d = max(d, asked)
	return max(min(d, pipeline.MaxThrottleWait-waited), MinThrottleDelay)
}

// KeepsSignal reports whether an item's signal (ItemState.Signalled: the
// payload of the signal that resumed it) still stands after an attempt
// that ends it o: a retry's, and a withheld or exhausted item's, whose
// next attempt (after a lift or a raise) is the same resumption. Any
// other outcome ends the resumption: a new suspension waits for a new
// signal.
func KeepsSignal(o api.Outcome) bool {
	return o == api.OutcomeInFlight || o == api.OutcomeWithheld || o == api.OutcomeExhausted
}

// Ended is s (in flight under attempt a) once its attempt ended with e at
// now: its outcome, reason and error, with Output and OutputRef for a
// success, a scheduled retry for a transient failure.
//
// A throttled ending (and a paused probe's, an unrun, a rotated or a
// withheld one) moves FirstAttempt one past the attempt, so that
// RunAttempts no longer counts it: the attempt stays the fence (it never goes back), and max
// attempts counts only the attempts that were not throttled.
func Ended(s ItemState, e Ending, now time.Time) ItemState {
	n := s
	n.Outcome, n.Reason, n.Error, n.UpdatedAt = e.Outcome, e.Reason, e.Error, now
	n.Retry, n.RetryAt = e.Retry(), time.Time{}
	if e.Retry() && e.Wait > 0 {
		n.RetryAt = now.Add(e.Wait)
	}
	n.ThrottledSince = time.Time{}
	n.Hold = api.Hold{}
	if e.Outcome.Held() {
		n.Hold = e.Hold
	}
	if !e.Retry() && !KeepsSignal(e.Outcome) {
		n.Signalled = 0
	}
	if e.Throttled || e.Paused || e.Unrun || e.Rotated || e.Outcome == api.OutcomeWithheld ||
		e.Outcome == api.OutcomeSuspended {
		n.FirstAttempt = max(s.FirstAttempt, 1) + 1
		n.ThrottledSince = e.ThrottledSince
	}
	if e.Outcome != api.OutcomeSucceeded {
		n.Output, n.OutputRef = nil, ""
	}
	return n
}

// WithheldText is the error text of an item withheld because its call's
// credential, read again from its secret and unchanged, was refused with
// err; a halt put for that refusal carries it as its reason.
func WithheldText(err error) string {
	return "credential refused, and its secret read again is unchanged: " + pipeline.ErrorText(err)
}

// interruptedError is a transient pipeline error returned after the
// pipeline's context was cut off at the invocation's deadline margin or
// the lease's end: the call's outcome is unknown (an interruption).
type interruptedError struct{ err error }

func (e *interruptedError) Error() string {
	return "interrupted at the invocation's deadline (outcome unknown): " + e.err.Error()
}

func (e *interruptedError) Unwrap() error { return e.err }

// FailureQuantum is the step in which lane writes add failures to the run
// row for the early stop (Worker.count): the failures threshold t
// tolerates of n items over 8 × lanes, at least 1. The run row then
// lags the failures counted by at most lanes × (quantum − 1), an eighth
// of what is tolerated, and gets at most 8 × lanes such writes before
// the failures pass the threshold.
func FailureQuantum(t api.Threshold, n int64, lanes int) int64 {
	return max(1, t.Tolerated(n)/int64(8*max(1, lanes)))
}

// RetryPolicyOf is b's retry policy: the one stored on its row, else def
// (rows written before policies existed carry none).
func RetryPolicyOf(b Batch, def api.RetryPolicy) api.RetryPolicy {
	if b.Retry != nil {
		return *b.Retry
	}
	return def
}
