package api

import (
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// StallAttention is how long a running run may end no item before it
// needs attention (LiveView.Attention): longer than the default retry
// policy's longest wait (DefaultRetryPolicy: 900 s × 1.5), so that a run
// whose items all wait for their last retry is not called stalled for
// that alone. The stack's stall alarm has the same default (infra,
// RunnerProps.StallAlarm).
const StallAttention = 30 * time.Minute

// DefaultItemTimeout is the item function's timeout unless the stack
// sets another (config.DefaultItemTimeout; ItemTimeout in infra): the
// longest one invocation of it runs.
const DefaultItemTimeout = 5 * time.Minute

// ProgressSlack is how much longer than the item function's timeout a
// running run with items in flight (none waiting for a retry, not
// paused) may count no item ended before its live view calls it stalled
// (LiveView.Stalled). An invocation counts what it ended at least every
// 2 s while it runs (worker.DefaultProgressEvery) and ends within that
// timeout (Lambda's quota: at most 900 s), so by then every invocation
// that held one of the run's items when it last counted has ended
// without ending another; the minute covers the counter write and a
// message's way back to an invocation.
const ProgressSlack = time.Minute

// LiveView is a running run's live view, from its counter partitions only
// (Store.Progress: one Query per counter partition, whatever the batch's
// size; counters lag the item rows by at most worker.DefaultProgressEvery,
// 2 s — worker.TrackProgressEvery, 10 s, for a run with max_concurrency —
// plus the rest of a pack while its last item runs, and a lost
// counter write loses its share until the report's exact census).
//
// Every item of the run is in exactly one of: ended (Progress.Done, by
// outcome in the census), NotFannedOut (its chunk's item messages are not
// all sent: the fan-out is queued, running, or waiting after a failed or
// timed-out invocation), RetryWaiting (its last attempt failed
// transiently or was interrupted and its message comes back at the
// latest by NextRetryAt's minute), or InFlight (its message was sent and
// it has not ended: queued, running now, or due for its retry), or
// Withheld, Exhausted, Suspended or HeldForApproval (taken out of
// InFlight).
type LiveView struct {
	InFlight     int64 `json:"in_flight"`
	RetryWaiting int64 `json:"retry_waiting"`
	// NextRetryAt is the start of the minute after which the earliest
	// waiting item's retry is due (retries are counted by the minute,
	// rounded up). Absent when none waits.
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	// Throttled is how many of RetryWaiting only wait out a throttling:
	// the downstream's own rate (an HTTP 429 or 503, and the Retry-After
	// it asked for; Lambda's TooManyRequestsException). Such a wait uses
	// no attempt, so these items alone do not need attention.
	Throttled int64 `json:"throttled"`
	// RetryCause is the most common cause of the other waiting items:
	// those whose last attempt failed transiently (or was interrupted).
	// Absent when none waits after a failure.
	RetryCause *RetryCause `json:"retry_cause,omitempty"`
	// Interrupted counts this run's attempts whose outcome is unknown: cut
	// off at the invocation's deadline margin, or taken over after their
	// holder died or timed out (each one may have reached the pipeline's
	// receiver).
	Interrupted int64 `json:"interrupted"`
	// TimedOut counts this run's attempts whose call reached the
	// downstream and was given up without an answer (a webhook call past
	// its timeout_ms, a call cut off at the deadline margin): the
	// downstream may still have finished them. Absent when none.
	TimedOut int64 `json:"timed_out,omitempty"`
	// Withheld counts this run's items withheld under a halt (a refused
	// credential), from the counters: they wait, without a call, for the
	// halt to be lifted (Batch.Halts, POST /batches/{id}/halts/lift).
	// Not in InFlight. Absent when none.
	Withheld int64 `json:"withheld,omitempty"`
	// Exhausted counts this run's items held at a per-item ceiling
	// (OutcomeExhausted), from the counters: they wait for a caller to
	// raise the ceilings (POST /batches/{id}/ceilings). Not in InFlight.
	// Absent when none.
	Exhausted int64 `json:"exhausted,omitempty"`
	// Suspended counts this run's suspended items, from the counters:
	// they wait for a signal, their wake time or a cancel. Not in
	// InFlight. Absent when none.
	Suspended int64 `json:"suspended,omitempty"`
	// HeldForApproval counts the items of messages already sent that lie
	// past a sampled first run's sample while the run holds them
	// (Approval.Holds: sampling, or awaiting approval), and after an
	// approval until it reaches them (ApprovalReachesBy: the hold's next
	// check): they wait on the queue unstarted, so they are not in
	// InFlight and the census counts them pending. A lower bound: the sample's
	// messages hold at most Sample + items per message − 1 items (a
	// message is in the sample when its first item is), all taken as the
	// sample's here. Absent when none.
	HeldForApproval int64 `json:"held_for_approval,omitempty"`
	// AwaitingTrack counts the items of a run with max_concurrency N that
	// wait for a track to take them: their fan-out chunk was begun (its
	// first slice started, or, in a run sent before tracks, its messages
	// were sent), but no track holds them yet. They wait in the manifest
	// (or, before tracks, on the queue for a slot), unstarted, so they
	// are not in InFlight, which counts at most N × items per message
	// (the units the tracks hold), and the census counts them pending.
	// Absent when none.
	AwaitingTrack int64 `json:"awaiting_track,omitempty"`
	NotFannedOut  int64 `json:"not_fanned_out"`
	// LastProgressAt is when the run last counted an item ended (its
	// start when none).
	LastProgressAt time.Time `json:"last_progress_at"`
	// Stalled: the run ends no item. No item ended for longer than
	// a call can run (the item function's timeout + ProgressSlack: 6 min
	// at the defaults) while items are in flight, none waits for a retry
	// and the batch is not paused; or for StallAttention, whatever its
	// items do. Attention says for how long. Absent when not.
	Stalled bool `json:"stalled,omitempty"`
	// Attention says why the run needs attention now; empty when it does
	// not (see NeedsAttention).
	Attention []string `json:"attention,omitempty"`
	// Estimate is the run's pace, estimated finish and projected cost
	// (see Estimate); absent before it ended an item and while paused.
	Estimate *Estimate `json:"estimate,omitempty"`
	// AdaptivePace is the adaptive pace the run's downstream holds it to
	// (see AdaptivePace); absent while the downstream is not paced, and
	// for a batch with a rate of its own, which is paced by that.
	AdaptivePace *AdaptivePace `json:"adaptive_pace,omitempty"`
	// RateBooked is how far ahead the calls of the batch's rate key, or
	// its token budget, are booked (see RateBooked); absent for a batch
	// with no rate, and while neither is booked past now.
	RateBooked *RateBooked `json:"rate_booked,omitempty"`
	// RateConflict is the latest other batch noted naming the batch's
	// rate key at another rate or token budget (see RateConflict), while
	// that batch runs; absent when none was noted, and once the latest
	// noted has finished.
	RateConflict *RateConflict `json:"rate_conflict,omitempty"`
}

// MaxRateConflicts bounds the other batches noted on a batch's row as
// naming its rate key at another rate (RateConflict.Batches): 16, so
// that the note adds at most ≈ 16 × 64 bytes to the row, which every
// later write of it is billed by (DynamoDB bills a write by the item's
// size, "Read/write capacity mode", DynamoDB developer guide). Batches
// past them are not noted.
const MaxRateConflicts = 16

// RateConflict is another batch naming a batch's rate key at another
// request rate or token budget. Batches on one key share its schedule,
// but each lease is spaced at the rate of the batch that takes it
// (docs/pipelines.md, "Rates"), so the downstream gets each batch's
// calls at that batch's own rate. A submit whose key running batches
// name at another rate is accepted with a warning (the submit's
// warnings), and it notes itself on each of those batches' rows and the
// first it found of each other rate on its own, so that either batch's
// status says so while both run:
//
//	{"key": "api.example.com", "batch_id": "B", "rate": {"key": "api.example.com", "requests_per_second": 20},
//	 "noted_at": "2026-12-07T10:05:00Z", "batches": 1}
//
// Key is the rate key; BatchID, Rate and NotedAt the latest batch noted
// and its rate; Batches how many were noted on the row (at most
// MaxRateConflicts).
type RateConflict struct {
	Key     string    `json:"key"`
	BatchID string    `json:"batch_id"`
	Rate    Rate      `json:"rate"`
	NotedAt time.Time `json:"noted_at"`
	Batches int       `json:"batches"`
}

// RateBooked is how far ahead a rate key's calls are booked: every batch
// naming the key leases its calls first come, first served
// (docs/pipelines.md, "Rates"), so a unit leasing now starts its calls
// after the calls booked before it on the row it leases — by this batch
// or another on the key. A token budget books the same way on the key's
// token row (docs/adr/0035); a unit needs both, so the later of the two
// is shown, By naming it. JSON: {"key": "api.example.com",
// "requests_per_second": 20, "tokens_per_second": 150, "by": "requests",
// "until": RFC 3339, "ahead_seconds": 14.2}.
type RateBooked struct {
	Key string `json:"key"`
	// RequestsPerSecond is the batch's request rate (0: a token budget
	// alone), TokensPerSecond its token budget a second (0: none).
	RequestsPerSecond float64 `json:"requests_per_second"`
	TokensPerSecond   float64 `json:"tokens_per_second,omitempty"`
	// By is what books furthest ahead: BookedByRequests (the key's bucket
	// rows) or BookedByTokens (its token budget's row).
	By string `json:"by"`
	// Until is, for the requests, the earliest Next of the key's bucket
	// rows (a unit leases one of them at random: it starts no earlier);
	// for the tokens, the token row's Next. AheadSeconds is how far past
	// the read that is.
	Until        time.Time `json:"until"`
	AheadSeconds float64   `json:"ahead_seconds"`
}

// RateBooked.By's values.
const (
	BookedByRequests = "requests"
	BookedByTokens   = "tokens"
)

// AdaptivePace is the pace a downstream that throttled holds every
// batch calling it to (docs/adr/0036), for a batch with no rate: read
// from the downstream key's adaptive row (one strongly consistent read
// per view) and shown while the key is paced — from its first throttled
// answer (an HTTP 429 or 503, Lambda's TooManyRequestsException) until
// its limit climbs past the ceiling (500 requests a second) or 10
// minutes pass with no further throttled answer.
//
// JSON: {"key": "api.example.com", "limit_per_second": 14.2,
// "cut_at": RFC 3339, "hold_until": RFC 3339, "slow_start": true,
// "step_per_second": 1.4, "booked_ahead": 312, "clear_at": RFC 3339}.
type AdaptivePace struct {
	// Key is the downstream key every batch calling it shares: the
	// host (and port) of a webhook's url, "lambda:{function}", or
	// "pipeline:{name}".
	Key string `json:"key"`
	// LimitPerSecond is the limit at the read, in requests a second:
	// cut by 30 % (or to the share of calls the downstream took) at each
	// throttled answer, at most once a second.
	LimitPerSecond float64 `json:"limit_per_second"`
	// CutAt is the last cut: the last throttled answer that lowered the
	// limit, or the resume that restarted the pace (Cause).
	CutAt time.Time `json:"cut_at"`
	// Cause is why the key is paced since CutAt: AdaptCauseThrottled (the
	// downstream throttled a call) or AdaptCauseResumed (a batch calling
	// it resumed after a pause, and the pace restarts in slow start so
	// that the units that waited come back spread).
	Cause string `json:"cause"`
	// HoldUntil is the downstream's Retry-After: no call of the key
	// starts before it. Absent when none is ahead.
	HoldUntil *time.Time `json:"hold_until,omitempty"`
	// SlowStart: the limit doubles every 2 s (after a Retry-After, when
	// the pace started, or after an unpause) until the next throttled
	// answer or SlowStartTo; else it grows by StepPerSecond each second.
	SlowStart bool `json:"slow_start,omitempty"`
	// SlowStartTo is where slow start ends after a Retry-After from a
	// downstream that had stopped taking calls: the limit the key had when
	// it closed (RFC 5681 §3.1's ssthresh), past which the limit grows by
	// its step. Absent: slow start goes on to 500 requests a second, where
	// the key is no longer paced.
	SlowStartTo float64 `json:"slow_start_to,omitempty"`
	// StepPerSecond is what the limit grows by each second while no
	// call is throttled (requests a second, per second); absent in slow
	// start.
	StepPerSecond float64 `json:"step_per_second,omitempty"`
	// BookedAhead is how many calls of the key, of every batch calling
	// it, are booked past what the limit allowed by the read: they wait,
	// unstarted and using no attempt, for their turn.
	BookedAhead int64 `json:"booked_ahead"`
	// ClearAt is when the last call booked is due at LimitPerSecond held
	// as it is (from HoldUntil when one is ahead): the limit grows only
	// until the next throttled answer, so its growth is not counted.
	// Absent when none is booked ahead.
	ClearAt *time.Time `json:"clear_at,omitempty"`
}

// The causes of an adaptive pace (AdaptivePace.Cause).
const (
	AdaptCauseThrottled = "throttled"
	AdaptCauseResumed   = "resumed"
)

// NeedsAttention reports whether the running run needs a look now: it
// is paused or halted, an item failed, was quarantined or is withheld,
// an item waits for a retry after a failure (not only a throttling), an
// attempt was interrupted or timed out, or it is stalled (Stalled).
func (l LiveView) NeedsAttention() bool { return len(l.Attention) > 0 }

// Booked sets l's rate booking (RateBooked) and keeps its estimate's
// finish no earlier than the booking's end: the items not ended start
// their calls after what the key has booked, whatever the run's pace so
// far (a batch waiting for its token budget ran its first items at
// once). A booking past the estimate's finish marks it (FinishBooked).
func (l *LiveView) Booked(r *RateBooked) {
	l.RateBooked = r
	if e := l.Estimate; e != nil && r != nil && e.Remaining > 0 && e.FinishAt.Before(r.Until) {
		e.FinishAt, e.FinishBooked = r.Until.UTC().Truncate(time.Second).Add(time.Second), true
	}
}

// RetryCause is why items wait for a retry (LiveView.RetryCause): the
// failure class of their last attempt ("http 502", "connection refused",
// "timeout", a pipeline's own class, or "interrupted"), one failure's
// text, and how many wait for it. JSON: {"class": "connection refused",
// "error": "webhook: …: connect: connection refused", "items": 980}.
type RetryCause struct {
	Class string `json:"class"`
	Error string `json:"error,omitempty"`
	Items int64  `json:"items"`
}

// Text is the cause in words: "connection refused (980 items)".
func (c RetryCause) Text() string {
	return c.Class + " (" + Count(c.Items, "item") + ")"
}

// Estimate is a running run's pace and what it projects at its end
// (LiveView.Estimate), from the counters the live view already read — no
// item row is read for it. The pace is the run's over the last 60 s
// (RateBasis RateBasisRecent: from a sample of its counters taken 30 to
// 60 s before the read, kept by the API's batch view, at most one every
// 15 s: docs/design/control.md, "The recent pace") or, when no such sample is kept or the window
// ended no item, the run's so far (RateBasisRunAverage: the items it
// ended over the time since it started). Absent before the run ended an
// item, and while it is paused.
//
// JSON: {"rate_basis": "recent_60s", "since": RFC 3339, "ended": n,
// "rate_per_second": r, "run_rate_per_second": r, "remaining": n,
// "finish_at": RFC 3339, "projected_cost": {name: decimal},
// "projected_run_spent": {…}, "projected_usage": {…}}.
type Estimate struct {
	// RateBasis is what RatePerSecond is measured over: RateBasisRecent
	// or RateBasisRunAverage.
	RateBasis RateBasis `json:"rate_basis"`
	// Since is the start of the window the rate is measured over: the
	// sample's time (RateBasisRecent) or the run's start
	// (Batch.RunStartedAt).
	Since time.Time `json:"since"`
	// Ended is the run's items ended in the window (Progress.Done, less
	// the sample's).
	Ended int64 `json:"ended"`
	// RatePerSecond is Ended over the seconds from Since to the read.
	RatePerSecond float64 `json:"rate_per_second"`
	// RunRatePerSecond is the run's average: its items ended over the
	// seconds since its start (RatePerSecond when RateBasis is
	// RateBasisRunAverage).
	RunRatePerSecond float64 `json:"run_rate_per_second"`
	// Remaining is the run's items not ended yet and not held: in
	// flight, waiting for a retry or not fanned out.
	Remaining int64 `json:"remaining"`
	// Held is the run's items held (suspended, withheld, exhausted): they
	// wait for a signal, a lift or a raise, not for the pace, so they are
	// neither in Remaining nor in FinishAt, and the run does not end
	// before they are moved on. 0 (absent): none.
	Held int64 `json:"held,omitempty"`
	// FinishAt is when the run's last item not held ends at
	// RatePerSecond: the read plus Remaining / RatePerSecond, to the
	// second; no earlier than the end of the rate key's bookings
	// (FinishBooked).
	FinishAt time.Time `json:"finish_at"`
	// FinishBooked is true when FinishAt is the end of the rate key's
	// bookings (LiveView.RateBooked), later than the pace alone gives.
	FinishBooked bool `json:"finish_booked,omitempty"`
	// ProjectedCost is the run's cost at its end (Census.Cost: what the
	// pipeline reported, by cost name, exact decimals to 9 places): its
	// cost so far plus Remaining × the cost per item of the window's
	// items (RateBasisRecent, when the sample kept its cost), else of all
	// its ended items (× items / ended). ProjectedRunSpent is its
	// run_spent (Census.RunSpent: every attempt, retried ones included)
	// projected the same way: what it spent so far plus Remaining × what
	// it spent per item ended over the window, else scaled from its
	// ended items to all of them — so a burst of throttled calls early
	// in the run is not scaled to the whole run once it has passed.
	// ProjectedUsage is its DynamoDB units (Report.Usage) so far scaled
	// from its ended items to all of them. Both are absent where they
	// would be scaled from the run's average before a tenth of its items
	// ended (eta.MinAveragedShare): its first items carry its early
	// waste (throttled calls, the takes of every item in flight).
	ProjectedCost     pipeline.CostSum `json:"projected_cost,omitempty"`
	ProjectedRunSpent pipeline.CostSum `json:"projected_run_spent,omitempty"`
	ProjectedUsage    *Usage           `json:"projected_usage,omitempty"`
}

// RateBasis is what an estimate's rate is measured over
// (Estimate.RateBasis).
type RateBasis string

const (
	// RateBasisRecent: the run's last 60 s, from a sample of its counters
	// taken 30 to 60 s before the read.
	RateBasisRecent RateBasis = "recent_60s"
	// RateBasisRunAverage: the run so far, from its start; when no
	// sample of the last 60 s is kept (nobody read the run's batch view
	// in the last minute) or the window ended no item.
	RateBasisRunAverage RateBasis = "run_average"
)

// RateBases lists the rate bases.
func RateBases() []RateBasis { return []RateBasis{RateBasisRecent, RateBasisRunAverage} }
