package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestPlan guards the item rules every unit shares: for every state an
// item can hold, what a delivery of run 2 does with it in each mode —
// Reserve's fresh and takeover conditions, Settle's and SettleUnstarted's,
// the count mark of an item answered from an earlier run, an item
// held under another delivery's live lease, and a held item (withheld),
// which moves only once woken.
func TestPlan(t *testing.T) {
	const run = 2
	tests := []struct {
		name                string
		s                   ItemState
		live                bool
		run, settle, unstrt Step
		interrupted         bool
	}{
		{"never reserved", ItemState{}, false, StepRun, StepSettle, StepSettle, false},
		{"failed in run 1", ItemState{Run: 1, Outcome: api.OutcomeFailed}, false, StepRun, StepSettle, StepSettle, false},
		{"cancelled in run 1", ItemState{Run: 1, Outcome: api.OutcomeCancelled}, false, StepRun, StepSettle, StepSettle, false},
		{"in flight in run 1", ItemState{Run: 1, Outcome: api.OutcomeInFlight}, false, StepRun, StepSettle, StepSettle, false},
		{"in flight in run 1, lease live", ItemState{Run: 1, Outcome: api.OutcomeInFlight}, true, StepRun, StepSettle, StepSettle, false},
		{"released quarantined in run 1", ItemState{Run: 1, Outcome: api.OutcomeQuarantined, Released: true}, false, StepRun, StepSettle, StepSettle, false},
		{"succeeded in run 1", ItemState{Run: 1, Outcome: api.OutcomeSucceeded}, false, StepCount, StepCount, StepNone, false},
		{"succeeded in run 1, counted", ItemState{Run: 1, Outcome: api.OutcomeSucceeded, CountedRun: 2}, false, StepNone, StepNone, StepNone, false},
		{"quarantined in run 1", ItemState{Run: 1, Outcome: api.OutcomeQuarantined}, false, StepCount, StepCount, StepNone, false},
		{"in flight, retry scheduled", ItemState{Run: 2, Outcome: api.OutcomeInFlight, Retry: true}, false, StepRun, StepSettle, StepNone, false},
		{"in flight, holder gone", ItemState{Run: 2, Outcome: api.OutcomeInFlight}, false, StepRun, StepSettle, StepNone, true},
		{"in flight, lease live", ItemState{Run: 2, Outcome: api.OutcomeInFlight}, true, StepHeld, StepHeld, StepNone, false},
		{"succeeded in run 2", ItemState{Run: 2, Outcome: api.OutcomeSucceeded}, false, StepNone, StepNone, StepNone, false},
		{"failed in run 2", ItemState{Run: 2, Outcome: api.OutcomeFailed}, false, StepNone, StepNone, StepNone, false},
		{"quarantined in run 2", ItemState{Run: 2, Outcome: api.OutcomeQuarantined}, false, StepNone, StepNone, StepNone, false},
		{"cancelled in run 2", ItemState{Run: 2, Outcome: api.OutcomeCancelled}, false, StepNone, StepNone, StepNone, false},
		{"withheld in run 1", ItemState{Run: 1, Outcome: api.OutcomeWithheld}, false, StepRun, StepSettle, StepSettle, false},
		{"withheld in run 2", ItemState{Run: 2, Outcome: api.OutcomeWithheld, Hold: api.Hold{Subject: "secret:x"}}, false, StepNone, StepNone, StepNone, false},
		{"withheld in run 2, lifted", ItemState{Run: 2, Outcome: api.OutcomeWithheld, Hold: api.Hold{Subject: "secret:x", Woken: api.WakeLift}}, false, StepRun, StepSettle, StepNone, false},
		{"withheld in run 2, woken to cancel", ItemState{Run: 2, Outcome: api.OutcomeWithheld, Hold: api.Hold{Subject: "secret:x", Woken: api.WakeCancel}}, false, StepRun, StepSettle, StepNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for mode, want := range map[Mode]Step{ModeRun: tt.run, ModeSettle: tt.settle, ModeUnstarted: tt.unstrt} {
				got, interrupted := Plan(tt.s, run, 0, mode, tt.live)
				if got != want || mode == ModeRun && interrupted != tt.interrupted {
					t.Errorf("mode %d: step %d interrupted %v, want %d %v", mode, got, interrupted, want, tt.interrupted && mode == ModeRun)
				}
			}
		})
	}
}

// TestPlanCorrectionRun guards the item rules of a correction run (its
// revision 3, run 2): exactly the items an earlier run left marked with
// its revision run (or are settled when the run stops); every other item
// of its messages — succeeded, failed, quarantined or cancelled, marked
// with an earlier revision or none — keeps its outcome and is counted
// once; an item of this run follows the rules of any run.
func TestPlanCorrectionRun(t *testing.T) {
	const run, rev = 2, 3
	tests := []struct {
		name                string
		s                   ItemState
		run, settle, unstrt Step
	}{
		{"failed in run 1, marked", ItemState{Run: 1, Outcome: api.OutcomeFailed, Revision: rev}, StepRun, StepSettle, StepSettle},
		{"quarantined in run 1, marked", ItemState{Run: 1, Outcome: api.OutcomeQuarantined, Revision: rev}, StepRun, StepSettle, StepSettle},
		{"cancelled in run 1, marked", ItemState{Run: 1, Outcome: api.OutcomeCancelled, Revision: rev}, StepRun, StepSettle, StepSettle},
		{"failed in run 1, not marked", ItemState{Run: 1, Outcome: api.OutcomeFailed}, StepCount, StepCount, StepNone},
		{"failed in run 1, an earlier revision", ItemState{Run: 1, Outcome: api.OutcomeFailed, Revision: 2}, StepCount, StepCount, StepNone},
		{"cancelled in run 1, not marked", ItemState{Run: 1, Outcome: api.OutcomeCancelled}, StepCount, StepCount, StepNone},
		{"released quarantined in run 1, not marked", ItemState{Run: 1, Outcome: api.OutcomeQuarantined, Released: true}, StepCount, StepCount, StepNone},
		{"succeeded in run 1", ItemState{Run: 1, Outcome: api.OutcomeSucceeded}, StepCount, StepCount, StepNone},
		{"failed in run 1, not marked, counted", ItemState{Run: 1, Outcome: api.OutcomeFailed, CountedRun: 2}, StepNone, StepNone, StepNone},
		{"succeeded in run 2 (the marked item ran)", ItemState{Run: 2, Outcome: api.OutcomeSucceeded, Revision: rev}, StepNone, StepNone, StepNone},
		{"in flight in run 2, retry scheduled", ItemState{Run: 2, Outcome: api.OutcomeInFlight, Retry: true, Revision: rev}, StepRun, StepSettle, StepNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for mode, want := range map[Mode]Step{ModeRun: tt.run, ModeSettle: tt.settle, ModeUnstarted: tt.unstrt} {
				if got, _ := Plan(tt.s, run, rev, mode, false); got != want {
					t.Errorf("mode %d: step %d, want %d", mode, got, want)
				}
			}
		})
	}
	// Start and Settled keep the revision: the item runs with its input.
	marked := ItemState{Key: "k", Run: 1, Outcome: api.OutcomeFailed, Attempt: 1, FirstAttempt: 1, Revision: rev}
	if s := Start(marked, run, time.Time{}); s.Revision != rev {
		t.Errorf("Start dropped the revision: %+v", s)
	}
	if s := Settled(marked, run, api.OutcomeCancelled, api.ReasonCancel, "stop", time.Time{}); s.Revision != rev {
		t.Errorf("Settled dropped the revision: %+v", s)
	}
}

// TestStartAndSettled guards the states a take leaves: a reservation new
// to the run starts the run's attempts and drops the earlier ending; a
// takeover keeps them; a settlement of an item new to the run makes no
// attempt in it.
func TestStartAndSettled(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	old := ItemState{Key: "k", Run: 1, Outcome: api.OutcomeFailed, Attempt: 3, FirstAttempt: 1, Error: "x", Reason: api.ReasonPermanent, Cost: pipeline.Cost{"c": 1}}
	s := Start(old, 2, now)
	if s.Outcome != api.OutcomeInFlight || s.Attempt != 4 || s.FirstAttempt != 4 || s.RunAttempts() != 1 || s.Error != "" || s.Cost != nil || s.Run != 2 {
		t.Errorf("Start of a new run: %+v", s)
	}
	s.Retry = true
	if n := Start(s, 2, now); n.Attempt != 5 || n.FirstAttempt != 4 || n.RunAttempts() != 2 || n.Retry {
		t.Errorf("Start of a retry: %+v", n)
	}
	if n := Settled(old, 2, api.OutcomeCancelled, api.ReasonCancel, "stop", now); n.Outcome != api.OutcomeCancelled || n.Attempt != 3 || n.RunAttempts() != 0 || n.Run != 2 {
		t.Errorf("Settled new to the run: %+v, %d attempts", n, n.RunAttempts())
	}
}

// TestConclude guards the one decision chain every attempt ends by, in
// its order: interrupted under a quarantining batch, past max attempts,
// refused, then the pipeline's result by class, an interruption, max
// attempts, and the retry's wait.
func TestConclude(t *testing.T) {
	boom := errors.New("boom")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	policy := api.RetryPolicy{IntervalSeconds: 2, BackoffRate: 2, MaxDelaySeconds: 60}
	base := Attempt{Number: 2, RunAttempts: 1, MaxAttempts: 3, OnInterrupt: api.InterruptRetry, Retry: policy, Now: now}
	throttled := pipeline.Throttled("lambda", "TooManyRequestsException", 0, boom)
	with := func(f func(a *Attempt)) Attempt { a := base; f(&a); return a }
	tests := []struct {
		name    string
		a       Attempt
		outcome api.Outcome
		reason  api.Reason
		text    string
		wait    time.Duration
	}{
		{"may run", base, "", "", "", 0},
		{"interrupted, quarantining batch", with(func(a *Attempt) { a.Interrupted, a.OnInterrupt = true, api.InterruptQuarantine }), api.OutcomeQuarantined, api.ReasonInterrupted, "attempt 1 was interrupted", 0},
		{"interrupted, retrying batch", with(func(a *Attempt) { a.Interrupted = true }), "", "", "", 0},
		{"past max attempts", with(func(a *Attempt) { a.RunAttempts = 4 }), api.OutcomeFailed, api.ReasonMaxAttempts, "interrupted: attempt 4 exceeds max attempts 3", 0},
		{"refused", with(func(a *Attempt) { a.Refusal = boom }), api.OutcomeFailed, api.ReasonPermanent, "boom", 0},
		{"cancelled before the call", with(func(a *Attempt) { a.Stop = api.StatusCancelled }), api.OutcomeCancelled, api.ReasonCancel, "the run was cancelled before this item's call started", 0},
		{"threshold stop before the call", with(func(a *Attempt) { a.Stop, a.Refusal = api.StatusThresholdExceeded, boom }), api.OutcomeCancelled, api.ReasonThreshold, "the run's failures exceeded its threshold", 0},
		{"stopped, interrupted, quarantining batch", with(func(a *Attempt) {
			a.Stop, a.Interrupted, a.OnInterrupt = api.StatusCancelled, true, api.InterruptQuarantine
		}), api.OutcomeQuarantined, api.ReasonInterrupted, "attempt 1 was interrupted", 0},
		{"stopped while it ran: its outcome stands", with(func(a *Attempt) { a.Stop, a.Ran = api.StatusCancelled, true }), api.OutcomeSucceeded, "", "", 0},
		{"succeeded", with(func(a *Attempt) { a.Ran = true }), api.OutcomeSucceeded, "", "", 0},
		{"permanent", with(func(a *Attempt) { a.Ran, a.Err = true, pipeline.Permanent(boom) }), api.OutcomeFailed, api.ReasonPermanent, "boom", 0},
		{"quarantine", with(func(a *Attempt) { a.Ran, a.Err = true, pipeline.Quarantine(boom) }), api.OutcomeQuarantined, api.ReasonQuarantine, "boom", 0},
		{"transient", with(func(a *Attempt) { a.Ran, a.Err = true, boom }), api.OutcomeInFlight, "", "boom", 2 * time.Second},
		{"transient, longer retry-after", with(func(a *Attempt) { a.Ran, a.Err = true, pipeline.RetryAfter(boom, time.Minute) }), api.OutcomeInFlight, "", "boom", time.Minute},
		{"transient at max attempts", with(func(a *Attempt) { a.Ran, a.Err, a.RunAttempts = true, boom, 3 }), api.OutcomeFailed, api.ReasonMaxAttempts, "attempt 3 of 3: boom", 0},
		{"transient, second retry doubles", with(func(a *Attempt) { a.Ran, a.Err, a.RunAttempts = true, boom, 2 }), api.OutcomeInFlight, "", "boom", 4 * time.Second},
		{"throttled at max attempts: retried, uncounted", with(func(a *Attempt) { a.Ran, a.Err, a.RunAttempts = true, throttled, 3 }), api.OutcomeInFlight, "", "boom", -1},
		{"throttled past the ceiling, at max attempts", with(func(a *Attempt) {
			a.Ran, a.Err, a.RunAttempts, a.ThrottledSince = true, throttled, 3, now.Add(-pipeline.MaxThrottleWait)
		}), api.OutcomeFailed, api.ReasonMaxAttempts, "attempt 3 of 3: throttled for 15m0s, past pipeline.MaxThrottleWait", 0},
		{"throttled past the ceiling: counted retry", with(func(a *Attempt) {
			a.Ran, a.Err, a.ThrottledSince = true, throttled, now.Add(-pipeline.MaxThrottleWait-time.Second)
		}), api.OutcomeInFlight, "", "throttled for 15m1s", 2 * time.Second},
		{"throttled but permanent", with(func(a *Attempt) { a.Ran, a.Err = true, pipeline.Permanent(throttled) }), api.OutcomeFailed, api.ReasonPermanent, "boom", 0},
		{"throttled, cut off: an interruption", with(func(a *Attempt) { a.Ran, a.Err, a.CutOff = true, throttled, true }), api.OutcomeInFlight, "", "interrupted at the invocation's deadline", 2 * time.Second},
		{"cut off, retrying batch", with(func(a *Attempt) { a.Ran, a.Err, a.CutOff = true, boom, true }), api.OutcomeInFlight, "", "interrupted at the invocation's deadline", 2 * time.Second},
		{"cut off, quarantining batch", with(func(a *Attempt) { a.Ran, a.Err, a.CutOff, a.OnInterrupt = true, boom, true, api.InterruptQuarantine }), api.OutcomeQuarantined, api.ReasonInterrupted, "interrupted at the invocation's deadline", 0},
		{"cut off, permanent", with(func(a *Attempt) { a.Ran, a.Err, a.CutOff = true, pipeline.Permanent(boom), true }), api.OutcomeFailed, api.ReasonPermanent, "boom", 0},
		{"timed out after 10 s: twice the timeout, longer than the policy", with(func(a *Attempt) { a.Ran, a.Err = true, pipeline.TimedOut(boom, 10*time.Second) }), api.OutcomeInFlight, "", "boom", 20 * time.Second},
		{"timed out again: four times the timeout", with(func(a *Attempt) { a.Ran, a.Err, a.RunAttempts = true, pipeline.TimedOut(boom, 10*time.Second), 2 }), api.OutcomeInFlight, "", "boom", 40 * time.Second},
		{"timed out after 100 ms: the policy's wait is longer", with(func(a *Attempt) { a.Ran, a.Err = true, pipeline.TimedOut(boom, 100*time.Millisecond) }), api.OutcomeInFlight, "", "boom", 2 * time.Second},
		{"timed out at max attempts", with(func(a *Attempt) { a.Ran, a.Err, a.RunAttempts = true, pipeline.TimedOut(boom, 10*time.Second), 3 }), api.OutcomeFailed, api.ReasonMaxAttempts, "attempt 3 of 3: boom", 0},
		{"credential rejected, not rotated", with(func(a *Attempt) { a.Ran, a.Err = true, pipeline.CredentialRejected(boom) }), api.OutcomeFailed, api.ReasonPermanent, "boom", 0},
		{"credential rejected, read again unchanged: withheld", with(func(a *Attempt) { a.Ran, a.Err, a.Withhold = true, pipeline.CredentialRejected(boom), "secret:x" }),
			api.OutcomeWithheld, api.ReasonCredential, "credential refused, and its secret read again is unchanged: boom", 0},
		{"another error, secret read again: its class", with(func(a *Attempt) { a.Ran, a.Err, a.Withhold = true, pipeline.Permanent(boom), "secret:x" }), api.OutcomeFailed, api.ReasonPermanent, "boom", 0},
		{"under a halt: withheld without a call", with(func(a *Attempt) { a.Halted = "secret:x" }), api.OutcomeWithheld, api.ReasonCredential, "withheld without a call: the batch holds a halt on secret:x", 0},
		{"under a halt, stopped: cancelled", with(func(a *Attempt) { a.Halted, a.Stop = "secret:x", api.StatusCancelled }), api.OutcomeCancelled, api.ReasonCancel, "the run was cancelled", 0},
		{"credential rejected and rotated, at max attempts: retried, uncounted", with(func(a *Attempt) {
			a.Ran, a.Err, a.Rotated, a.RunAttempts = true, pipeline.CredentialRejected(boom), true, 3
		}), api.OutcomeInFlight, "", "credential rejected; its secret changed since it was read", MinThrottleDelay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Conclude(tt.a)
			if tt.wait < 0 { // throttled: a jittered wait within the throttle bounds
				if !e.Throttled || e.Wait < MinThrottleDelay || e.Wait > MaxThrottleDelay*3/2 || !e.ThrottledSince.Equal(now) {
					t.Errorf("Conclude = %+v, want a throttled retry since %s", e, now)
				}
				tt.wait = e.Wait
			} else if e.Throttled {
				t.Errorf("Conclude = %+v, want an attempt that counts", e)
			}
			if e.Outcome != tt.outcome || e.Reason != tt.reason || !strings.HasPrefix(e.Error, tt.text) || e.Wait != tt.wait {
				t.Errorf("Conclude = %+v, want %s %s %q… wait %s", e, tt.outcome, tt.reason, tt.text, tt.wait)
			}
		})
	}
}

// TestStoppedAttemptIsNotCounted guards the cancel's promise at the rules'
// level: an attempt a stop ends before its call is cancelled and counts no
// attempt, so the item's results line says 0 attempts in its run (its
// earlier ones, had it retried, still count).
func TestStoppedAttemptIsNotCounted(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fresh := Start(ItemState{Key: "k"}, 1, now)
	e := Conclude(Attempt{Number: fresh.Attempt, RunAttempts: fresh.RunAttempts(), MaxAttempts: 3, Stop: api.StatusCancelled, Now: now})
	if !e.Unrun || e.Retry() {
		t.Fatalf("Conclude = %+v, want an unrun ending", e)
	}
	if got := Ended(fresh, e, now); got.Outcome != api.OutcomeCancelled || got.RunAttempts() != 0 {
		t.Fatalf("a fresh item cancelled before its call: %s, %d attempts, want cancelled, 0", got.Outcome, got.RunAttempts())
	}
	retried := Start(ItemState{Key: "k", Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, Retry: true}, 1, now)
	if got := Ended(retried, e, now); got.RunAttempts() != 1 {
		t.Fatalf("a retried item cancelled before its second call: %d attempts, want its first", got.RunAttempts())
	}
}

// TestTimeoutWait: the least wait after a call that timed out after d at
// the run's attempt n is d × 2^n, at most pipeline.MaxRetryAfter.
func TestTimeoutWait(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		n    int
		want time.Duration
	}{
		{0, 1, 0},
		{10 * time.Second, 0, 20 * time.Second},
		{10 * time.Second, 1, 20 * time.Second},
		{10 * time.Second, 3, 80 * time.Second},
		{15 * time.Minute, 5, pipeline.MaxRetryAfter},
		{time.Second, 1000, pipeline.MaxRetryAfter},
	} {
		if got := TimeoutWait(tt.d, tt.n); got != tt.want {
			t.Errorf("TimeoutWait(%s, %d) = %s, want %s", tt.d, tt.n, got, tt.want)
		}
	}
}

// TestHeldEndingAndWake guards a held item's states: a withheld ending
// keeps its hold and counts no attempt; once woken, Start takes it with
// the run's attempts, spend and time kept and the hold dropped; Settled
// keeps its attempts too.
func TestHeldEndingAndWake(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := ItemState{Key: "k", Run: 2, Outcome: api.OutcomeInFlight, Attempt: 5, FirstAttempt: 4, Spent: pipeline.Cost{"usd": 0.5}, SpentRun: 2}
	e := Conclude(Attempt{Number: 5, RunAttempts: 2, MaxAttempts: 3, Ran: true, Err: pipeline.CredentialRejected(errors.New("HTTP 401")), Withhold: "secret:x", Now: now})
	n := Ended(s, e, now)
	if n.Outcome != api.OutcomeWithheld || n.Hold.Subject != "secret:x" || !n.Hold.Since.Equal(now) || n.RunAttempts() != 1 || !n.Attention() {
		t.Fatalf("withheld: %+v, %d attempts", n, n.RunAttempts())
	}
	if n.Woken() {
		t.Fatal("a withheld item moves on before it is woken")
	}
	n.Hold.Woken = api.WakeLift
	if !n.Woken() {
		t.Fatal("a lifted item does not move on")
	}
	r := Start(n, 2, now)
	if r.Outcome != api.OutcomeInFlight || r.Attempt != 6 || r.FirstAttempt != n.FirstAttempt || r.Hold != (api.Hold{}) ||
		r.Spent["usd"] != 0.5 || r.Error != "" {
		t.Errorf("Start of a woken item: %+v", r)
	}
	c := Settled(n, 2, api.OutcomeCancelled, api.ReasonCancel, "stop", now)
	if c.RunAttempts() != n.RunAttempts() || c.Hold != (api.Hold{}) {
		t.Errorf("Settled of a woken item: %+v", c)
	}
}

// TestSuspendedEnding guards a suspension's ending: suspended, counted
// as no attempt, its token kept (cut to its bound) and its wake time held
// within [now, now + api.MaxSuspendWait]; a resumption keeps the attempt
// its signal ended through a retry and drops it with its outcome.
func TestSuspendedEnding(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	s := ItemState{Key: "k", Run: 1, Outcome: api.OutcomeInFlight, Attempt: 3, FirstAttempt: 2}
	for _, tt := range []struct {
		name       string
		wake, want time.Time
	}{
		{"no wake time", time.Time{}, time.Time{}},
		{"ahead", now.Add(time.Hour), now.Add(time.Hour)},
		{"past: now", now.Add(-time.Hour), now},
		{"too far: the bound", now.Add(48 * time.Hour), now.Add(api.MaxSuspendWait)},
	} {
		e := Conclude(Attempt{Number: 3, RunAttempts: 2, MaxAttempts: 3, Ran: true, Now: now,
			Err: &pipeline.SuspendError{Reason: "awaiting approval", WakeAt: tt.wake, Token: strings.Repeat("t", 300)}})
		n := Ended(s, e, now)
		if n.Outcome != api.OutcomeSuspended || n.Reason != api.ReasonSuspend || n.Error != "suspended: awaiting approval" ||
			!n.Hold.WakeAt.Equal(tt.want) || len(n.Hold.Subject) > api.MaxSuspendTokenBytes || n.RunAttempts() != 1 || !n.Attention() {
			t.Errorf("%s: %s %s %q wake %s token %d bytes, %d attempts; want suspended, wake at %s", tt.name, n.Outcome, n.Reason, n.Error, n.Hold.WakeAt, len(n.Hold.Subject), n.RunAttempts(), tt.want)
		}
	}
	r := Start(ItemState{Key: "k", Run: 1, Outcome: api.OutcomeSuspended, Attempt: 3, Hold: api.Hold{Woken: api.WakeSignal}, Signalled: 3}, 1, now)
	retry := Ended(r, Ending{Outcome: api.OutcomeInFlight, Wait: time.Second}, now)
	done := Ended(retry, Ending{Outcome: api.OutcomeSucceeded}, now)
	if r.Signalled != 3 || retry.Signalled != 3 || done.Signalled != 0 {
		t.Errorf("signalled through start %d, retry %d, outcome %d; want 3, 3, 0", r.Signalled, retry.Signalled, done.Signalled)
	}
}

// TestEndedKeepsASignalWhileItsResumptionStands guards ItemState.Signalled
// across an attempt's end: a retry, a withheld and an exhausted item keep
// the signal that resumed them (their next attempt, after a lift or a
// raise, gets its payload); a settled item and a new suspension drop it.
func TestEndedKeepsASignalWhileItsResumptionStands(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := ItemState{Key: "k", Run: 1, Attempt: 3, FirstAttempt: 1, Outcome: api.OutcomeInFlight, Signalled: 2}
	for o, keep := range map[api.Outcome]bool{
		api.OutcomeInFlight: true, api.OutcomeWithheld: true, api.OutcomeExhausted: true,
		api.OutcomeSuspended: false, api.OutcomeSucceeded: false, api.OutcomeFailed: false,
	} {
		e := Ending{Outcome: o}
		if o.Held() {
			e.Hold = api.Hold{Subject: "s", Since: now}
		}
		if got := Ended(s, e, now).Signalled; (got == 2) != keep {
			t.Errorf("%s: Signalled %d, want kept %v", o, got, keep)
		}
	}
}
