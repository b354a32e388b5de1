// Package describe holds the words bulkrun's CLI prints for a batch's
// state: its status, live view, estimate, approval, pause, threshold and
// verdict, retries, ceilings and corrections, each a line (or a few) a
// person reads, and Escape, which makes a text inert on a terminal. They
// are pure functions of shared/api and shared/wire values: no I/O, no
// clock read (a function that needs the time is given it).
package describe

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Stamp is how the CLI writes an instant, in every output alike: RFC 3339
// in UTC, "2026-12-04T10:05:00Z", as the API's own texts (the attention
// lines, a pause's since) write it.
func Stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// LimitText is a rate in requests a second with a precision that suits
// it: "0.7", "14.2", "120".
func LimitText(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}

// RateText is a rate in items a second, with a precision that suits it.
func RateText(per float64) string {
	if per >= 100 {
		return fmt.Sprintf("%.0f items/s", per)
	}
	return fmt.Sprintf("%.1f items/s", per)
}

// NeedsCheck reports whether a finished batch needs attention as the
// exit status says it (cli.ExitNeedsCheck): it did not complete, or it
// left items failed or quarantined.
func NeedsCheck(v wire.BatchView) bool {
	c := v.Census
	return v.Status != api.StatusCompleted || c != nil && (c.Failed > 0 || c.Quarantined > 0)
}

// EndedText is how a finished batch ended, in words: "completed, run 1:
// 2 succeeded, 1 failed; needs attention (bulkrun status ID)".
func EndedText(v wire.BatchView) string {
	t := fmt.Sprintf("%s, run %d", v.Status, v.Run)
	if c := v.Census; c != nil {
		var parts []string
		for _, o := range []struct {
			n    int64
			name string
		}{{c.Succeeded, "succeeded"}, {c.Failed, "failed"}, {c.Quarantined, "quarantined"}, {c.Cancelled, "cancelled"}, {c.InFlight, "in flight"}} {
			if o.n > 0 || o.name == "succeeded" {
				parts = append(parts, fmt.Sprintf("%d %s", o.n, o.name))
			}
		}
		t += ": " + strings.Join(parts, ", ")
	}
	if NeedsCheck(v) {
		t += fmt.Sprintf("; needs attention (bulkrun status %s)", v.ID)
	}
	return t
}

// RateBookedText is status's line for how far ahead the batch's rate key
// is booked (api.RateBooked): "rate key api.example.com (this batch: 20
// requests/s): calls booked until 2026-12-06T10:15:30Z, 14.2 s ahead, by
// this batch or others naming the key; a unit that leases now starts
// after them (first come, first served)". A token budget booked further says "(… 150
// tokens/s): its token budget booked until …".
func RateBookedText(r api.RateBooked) string {
	var limits []string
	if r.RequestsPerSecond > 0 {
		limits = append(limits, strconv.FormatFloat(r.RequestsPerSecond, 'f', -1, 64)+" requests/s")
	}
	if r.TokensPerSecond > 0 {
		limits = append(limits, strconv.FormatFloat(r.TokensPerSecond, 'f', -1, 64)+" tokens/s")
	}
	what := "calls"
	if r.By == api.BookedByTokens {
		what = "its token budget"
	}
	return fmt.Sprintf("rate key %s (this batch: %s): %s booked until %s, %s s ahead, by this batch or others naming the key; a unit that leases now starts after them (first come, first served)",
		r.Key, strings.Join(limits, ", "), what, Stamp(r.Until), strconv.FormatFloat(r.AheadSeconds, 'f', -1, 64))
}

// RateConflictText is status's line for another batch naming the
// batch's rate key at another rate (api.RateConflict), own the batch's
// rate: "rate key api.example.com: batch B also names it, at 20/s (this
// batch: 5/s; noted 2026-12-07T10:05:00Z); each lease is spaced at its own
// batch's rate, so the downstream gets B's calls at 20/s while both run;
// give every batch on the key the same rate". More than one noted adds
// "(the latest of 3 batches noted at other rates)".
func RateConflictText(c api.RateConflict, own api.Rate) string {
	of := ""
	if c.Batches > 1 {
		of = fmt.Sprintf(" (the latest of %d batches noted at other rates)", c.Batches)
	}
	return fmt.Sprintf("rate key %s: batch %s%s also names it, at %s (this batch: %s; noted %s); each lease is spaced at its own batch's rate, so the downstream gets %s's calls at %s while both run; give every batch on the key the same rate",
		c.Key, c.BatchID, of, limitsText(c.Rate), limitsText(own), Stamp(c.NotedAt), c.BatchID, limitsText(c.Rate))
}

// RateConflictClause is watch's clause for another batch naming the
// batch's rate key at another rate: "rate key api.example.com also named
// at 20/s by B".
func RateConflictClause(c api.RateConflict) string {
	return fmt.Sprintf("rate key %s also named at %s by %s", c.Key, limitsText(c.Rate), c.BatchID)
}

// limitsText is a rate's limits without its key, as api.Rate.String
// gives them: "20/s", "20/s, 90000 tokens/min".
func limitsText(r api.Rate) string {
	r.Key = ""
	return r.String()
}

// BookedText is how far ahead a batch's rate key is booked, in a clause
// of list's note and watch's line: "rate key api.example.com booked
// until 2026-12-06T10:15:30Z (14.2 s ahead)", or "token budget of
// api.example.com booked until …" when the token budget books further.
func BookedText(r api.RateBooked) string {
	what := "rate key " + r.Key
	if r.By == api.BookedByTokens {
		what = "token budget of " + r.Key
	}
	return fmt.Sprintf("%s booked until %s (%s s ahead)", what, Stamp(r.Until), strconv.FormatFloat(r.AheadSeconds, 'f', -1, 64))
}

// AdaptivePaceText is status's line for the adaptive pace a throttling
// downstream holds the batch to (api.AdaptivePace): "adaptive pace:
// api.example.com throttled bulkrun's calls; every batch with no rate
// calling it is held to 14.2 requests/s (cut 2026-12-05T10:00:03Z, +1.4
// requests/s each second no call is throttled); 312 calls booked ahead,
// the last due by 2026-12-05T10:00:40Z at this limit". A hold adds "no call before …
// (its Retry-After)"; slow start says "doubling every 2 s" (with "up to
// R requests/s" when it ends there, api.AdaptivePace.SlowStartTo)
// instead of the step. A pace a resume restarted (Cause
// api.AdaptCauseResumed) says so: "adaptive pace: api.example.com
// restarted as a batch calling it resumed from a pause; every batch …
// (since 2026-12-05T10:00:03Z, doubling …)".
func AdaptivePaceText(p api.AdaptivePace) string {
	why, at := "throttled bulkrun's calls", "cut"
	if p.Cause == api.AdaptCauseResumed {
		why, at = "restarted as a batch calling it resumed from a pause", "since"
	}
	s := fmt.Sprintf("adaptive pace: %s %s; every batch with no rate calling it is held to %s requests/s (%s %s, ",
		p.Key, why, LimitText(p.LimitPerSecond), at, Stamp(p.CutAt))
	switch {
	case p.SlowStart && p.SlowStartTo > 0:
		s += fmt.Sprintf("doubling every 2 s up to %s requests/s while no call is throttled)", LimitText(p.SlowStartTo))
	case p.SlowStart:
		s += "doubling every 2 s while no call is throttled)"
	default:
		s += fmt.Sprintf("+%s requests/s each second no call is throttled)", LimitText(p.StepPerSecond))
	}
	if p.HoldUntil != nil {
		s += "; no call before " + Stamp(*p.HoldUntil) + " (its Retry-After)"
	}
	if p.BookedAhead > 0 && p.ClearAt != nil {
		s += fmt.Sprintf("; %s booked ahead, the last due by %s at this limit", api.Count(p.BookedAhead, "call"), Stamp(*p.ClearAt))
	}
	return s
}

// LiveText is a running batch's live view on one line: "live: in flight
// 20  waiting for a retry 980 (next at 19:16:00Z; 960 after http 502, 20
// waiting out a throttling)  interrupted 3  not fanned out 0  last
// progress 19:05:12Z", with "  timed out N" after the interrupted
// attempts when some timed out.
func LiveText(l api.LiveView) string {
	var why []string
	if c := l.RetryCause; c != nil {
		why = append(why, fmt.Sprintf("%d after %s", c.Items, c.Class))
	}
	if l.Throttled > 0 {
		why = append(why, fmt.Sprintf("%d waiting out a throttling", l.Throttled))
	}
	next := ""
	if l.NextRetryAt != nil {
		next = " (next at " + Stamp(*l.NextRetryAt)
		if len(why) > 0 {
			next += "; " + strings.Join(why, ", ")
		}
		next += ")"
	}
	timed := ""
	if l.TimedOut > 0 {
		timed = fmt.Sprintf("  timed out %d", l.TimedOut)
	}
	if l.Withheld > 0 {
		timed += fmt.Sprintf("  withheld %d", l.Withheld)
	}
	if l.Exhausted > 0 {
		timed += fmt.Sprintf("  exhausted %d", l.Exhausted)
	}
	if l.Suspended > 0 {
		timed += fmt.Sprintf("  suspended %d", l.Suspended)
	}
	if l.HeldForApproval > 0 {
		timed += fmt.Sprintf("  held for approval %d", l.HeldForApproval)
	}
	if l.AwaitingTrack > 0 {
		timed += fmt.Sprintf("  waiting for a track %d", l.AwaitingTrack)
	}
	return fmt.Sprintf("live: in flight %d  waiting for a retry %d%s  interrupted %d%s  not fanned out %d  last progress %s",
		l.InFlight, l.RetryWaiting, next, l.Interrupted, timed, l.NotFannedOut, Stamp(l.LastProgressAt))
}

// ConcurrencyText is a batch's max_concurrency in a line, with what its
// live view's in flight may reach: "max_concurrency: 150 items at once
// (150 tracks at most, each holding one unit of 10 items: in flight up to
// 1500)"; "" without a limit.
func ConcurrencyText(b api.Batch) string {
	n := b.MaxConcurrency
	if n <= 0 {
		return ""
	}
	k := max(1, b.ItemsPerMessage)
	if k == 1 {
		return fmt.Sprintf("max_concurrency: %s at once (%s at most, one item each)", api.Count(int64(n), "item"), api.Count(int64(n), "track"))
	}
	return fmt.Sprintf("max_concurrency: %s at once (%s at most, each holding one unit of %s: in flight up to %d)",
		api.Count(int64(n), "item"), api.Count(int64(n), "track"), api.Count(int64(k), "item"), n*k)
}

// EstimateText is a running run's estimate (api.Estimate) in a line:
// "estimate: 25.0 items/s over the run so far (2500 ended since
// 10:00:00Z); 7500 to go, finish ≈ 10:06:40Z; projected at the end: cost
// tokens=5000 usd=0.28, run_spent usd=0.4, 21000 DynamoDB write units, 50
// read units" (the projections it has); over the recent window (rate
// basis recent_60s) "estimate: 30.0 items/s over the last 60 s (1200
// ended since 10:01:00Z; run average 25.0 items/s); …". A finish held
// to the rate key's bookings (FinishBooked) adds "(no earlier: the rate
// key is booked until then)".
func EstimateText(e api.Estimate) string {
	var b strings.Builder
	over, avg := "the run so far", ""
	if e.RateBasis == api.RateBasisRecent {
		over, avg = "the last 60 s", "; run average "+RateText(e.RunRatePerSecond)
	}
	b.WriteString(fmt.Sprintf("estimate: %s over %s (%d ended since %s%s); %d to go, finish ≈ %s",
		RateText(e.RatePerSecond), over, e.Ended, Stamp(e.Since), avg, e.Remaining, Stamp(e.FinishAt)))
	if e.FinishBooked {
		b.WriteString(" (no earlier: the rate key is booked until then)")
	}
	if e.Held > 0 {
		b.WriteString(fmt.Sprintf(" (%s held, not in it: the run ends once they are moved on)", api.Count(e.Held, "item")))
	}
	var proj []string
	if len(e.ProjectedCost) > 0 {
		proj = append(proj, "cost "+ProjectedText(e.ProjectedCost))
	}
	if len(e.ProjectedRunSpent) > 0 {
		proj = append(proj, "run_spent "+ProjectedText(e.ProjectedRunSpent))
	}
	if u := e.ProjectedUsage; u != nil {
		proj = append(proj, fmt.Sprintf("%.0f DynamoDB write units, %.0f read units", u.DynamoDBWriteUnits, u.DynamoDBReadUnits))
	}
	if len(proj) > 0 {
		b.WriteString("; projected at the end: " + strings.Join(proj, ", "))
	}
	return b.String()
}

// ProjectedText is a projected cost sum as status says it: each name's
// amount to 4 significant digits ("calls=3487", "usd=12.35"), a
// projection being no more exact than that; the API keeps every digit.
func ProjectedText(s pipeline.CostSum) string {
	parts := make([]string, 0, len(s))
	for _, k := range s.Names() {
		v, _ := s[k].Float64()
		if r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64); err == nil {
			v = r
		}
		parts = append(parts, k+"="+strconv.FormatFloat(v, 'f', -1, 64))
	}
	return strings.Join(parts, " ")
}

// ApprovalText is how status shows a sampled batch's approval (batch
// id): its state and sample, then its estimate when written —
//
//	sample: 200 items, awaiting approval (bulkrun approve b1, or reject b1)
//	estimate from 200 sample items: $12.4 for 20000 items (pipeline $12, DynamoDB $0.4; Lambda and SQS not counted); failures 1.5 % (95 % interval 0.5–4.3 %, ≈ 300 items); the rest ≈ 3m20s at 99 items/s (the sample's pace …)
//
// open is whether a decision can still be made (a running first run not
// stopping); on a batch that ended undecided the state is said as it
// stood, with no next move.
func ApprovalText(id string, ap api.Approval, auto float64, open bool) []string {
	state := strings.ReplaceAll(string(ap.State), "_", " ")
	switch {
	case !open && (ap.State == api.ApprovalSampling || ap.State == api.ApprovalAwaiting):
		// The state, not Decision: the API's view carries no Decision.
		state = "undecided (" + state + " when the run stopped or ended)"
	case ap.State == api.ApprovalSampling:
		state += ": the rest waits for the sample's items to end"
	case ap.State == api.ApprovalAwaiting:
		state += fmt.Sprintf(" (bulkrun approve %s, or reject %s)", id, id)
	default:
		state += fmt.Sprintf(" by %s at %s", strings.ReplaceAll(ap.DecidedBy, "_", "-"), Stamp(ap.DecidedAt))
	}
	if auto > 0 && open && (ap.State == api.ApprovalSampling || ap.State == api.ApprovalAwaiting) {
		state += fmt.Sprintf("; approved without asking at an estimate up to $%s", api.USDText(auto))
	}
	out := []string{fmt.Sprintf("sample: %s, %s", api.Count(int64(ap.Sample), "item"), state)}
	if e := ap.Estimate; e != nil {
		out = append(out, fmt.Sprintf("estimate from %s at %s: $%s for %s (pipeline $%s, DynamoDB $%s; Lambda and SQS not counted); failures %.1f %% (95 %% interval %.1f–%.1f %%, ≈ %s); the rest ≈ %s at %s (%s)",
			api.Count(e.SampleItems, "sample item"), Stamp(e.MadeAt), api.USDText(e.CostUSD), api.Count(e.Items, "item"),
			api.USDText(e.PipelineUSD), api.USDText(e.InfraUSD), 100*e.FailureRate, 100*e.FailureLow, 100*e.FailureHigh,
			api.Count(e.ProjectedFailures, "item"), (time.Duration(e.Seconds)*time.Second).String(), RateText(e.ItemsPerSecond), e.Pace))
	}
	return out
}

// FinishedAttention is what finished batch b's failed and quarantined
// items (census c) need, a line each, with where to list them and their next move
// (api.NextMove): "3 items failed (bulkrun items ID --outcome failed):
// correct its input (bulkrun correct) or resume the batch (bulkrun
// resume)". None for a batch still running (its live view says what its
// items wait for) or without a census.
func FinishedAttention(b api.Batch, c *api.Census) []string {
	if c == nil || !b.Status.Finished() {
		return nil
	}
	var lines []string
	for _, o := range []struct {
		outcome api.Outcome
		n       int64
	}{{api.OutcomeFailed, c.Failed}, {api.OutcomeQuarantined, c.Quarantined}} {
		if o.n > 0 {
			lines = append(lines, fmt.Sprintf("%s %s (bulkrun items %s --outcome %s): %s", api.Count(o.n, "item"), o.outcome, b.ID, o.outcome, api.NextMove(o.outcome, nil, true)))
		}
	}
	return lines
}

// HaltText is status's line for the batch's halt on subject when no live
// view names it: "halted on secret:… since 2026-12-05T10:00:00Z: kept
// after the run ended, so a resume would withhold its items without a
// call; fix the credential's secret, then bulkrun lift ID before bulkrun
// resume ID" for a finished batch, "…: its items are withheld without a
// call; fix the credential's secret first, then bulkrun lift ID" for a
// running one.
func HaltText(b api.Batch, subject string) string {
	s := fmt.Sprintf("halted on %s since %s: ", subject, Stamp(b.Halts[subject].Since))
	if b.Status.Finished() {
		return s + fmt.Sprintf("kept after the run ended, so a resume would withhold its items without a call; fix the credential's secret, then bulkrun lift %s before bulkrun resume %s", b.ID, b.ID)
	}
	return s + fmt.Sprintf("its items are withheld without a call; fix the credential's secret first, then bulkrun lift %s", b.ID)
}

// ApprovedRestText is status's estimate line for a sampled first run
// approved on its estimate before the live estimate has a pace of the
// rest of its own (live.Estimate waits for 30 s of the rest): the
// sample's projection, counted from when the approval reaches the rest
// (api.ApprovalReachesBy) — "estimate: the sample's: the rest ≈ 3s at
// 1230 items/s from 10:00:14Z, finish ≈ 2026-12-04T10:00:17Z"; "" for any
// other batch.
func ApprovedRestText(v api.Batch) string {
	ap := v.Approval
	if ap == nil || ap.State != api.ApprovalApproved || ap.Estimate == nil || ap.DecidedAt.IsZero() || v.Run != 1 || v.Status != api.StatusRunning || v.Stop != "" {
		return ""
	}
	e := ap.Estimate
	from := v.ApprovalReaches()
	rest := time.Duration(e.Seconds) * time.Second
	return fmt.Sprintf("estimate: the sample's: the rest ≈ %s at %s from %s, finish ≈ %s", rest, RateText(e.ItemsPerSecond),
		Stamp(from), Stamp(from.Add(rest)))
}

// RestStartsText is the line approve prints under the batch for an
// approval that has still to reach the held rest, or "": the time the
// rest starts by (api.ApprovalReachesBy: the hold's next check after the
// decision, plus the held units' grace), counted from the estimate, or
// from the run's start when the sample had not ended.
func RestStartsText(v api.Batch, now time.Time) string {
	ap := v.Approval
	if ap == nil || ap.State != api.ApprovalApproved || ap.DecidedAt.IsZero() || v.Run != 1 || v.Status != api.StatusRunning || v.Stop != "" {
		return ""
	}
	by := v.ApprovalReaches()
	if !by.After(now) {
		return ""
	}
	return fmt.Sprintf("the rest starts by %s (in %s): the held units come back at the hold's next check", Stamp(by), by.Sub(now).Round(time.Second))
}

// RetriesText is a report's retries in a line: "retries (from the
// counters, at least): 412 scheduled, 380 of them throttled by the
// downstream (no attempt used); 2 interrupted; 1 timed out; causes: http
// 502 (30), connection refused (2)".
func RetriesText(rc api.RetryCounts) string {
	line := fmt.Sprintf("retries (from the counters, at least): %d scheduled, %d of them throttled by the downstream (no attempt used); %d interrupted; %d timed out",
		rc.Scheduled, rc.Throttled, rc.Interrupted, rc.TimedOut)
	for i, c := range rc.Causes {
		sep := ", "
		if i == 0 {
			sep = "; causes: "
		}
		line += sep + fmt.Sprintf("%s (%d)", c.Class, c.Items)
	}
	return line
}

// LiftedText is a report's lifted halts in a line: "halts lifted: 1; the
// last on secret:arn:… (halted 2026-12-06T10:00:40Z: webhook: …: HTTP
// 401 …), lifted 2026-12-06T10:01:30Z".
func LiftedText(l api.LiftedSummary) string {
	line := "halts lifted: " + strconv.Itoa(l.Lifts)
	h := l.Last
	if h == nil {
		return line
	}
	line += "; the last on " + h.Subject + " (halted " + Stamp(h.Since)
	if h.Reason != "" {
		line += ": " + h.Reason
	}
	return line + "), lifted " + Stamp(h.LiftedAt)
}

// PausedText is a report's pauses in a line, their time to a tenth of a
// second (a millisecond under one): "paused 2 times, 1m35.5s
// in all; the last by an outage (http 502, 3 probes) from
// 2026-12-06T10:01:02Z to 2026-12-06T10:02:00Z, ended by its probe
// answered". A pause standing when the run ended (a cancel while
// paused) is "… to the run's end at …".
func PausedText(ps api.PausedSummary) string {
	took := time.Duration(ps.Seconds*1000) * time.Millisecond
	if took >= time.Second {
		took = took.Round(100 * time.Millisecond) // "1m31.2s", not "1m31.189s"
	}
	line := fmt.Sprintf("paused %s, %s in all", api.Count(int64(ps.Pauses), "time"), took)
	l := ps.Last
	if l == nil {
		return line
	}
	line += "; the last by " + l.By.Who()
	var why []string
	if l.Class != "" && l.By != api.PauseByBudget { // a budget pause's class is "budget"
		why = append(why, l.Class)
	}
	if l.Probes > 0 {
		why = append(why, api.Count(int64(l.Probes), "probe"))
	}
	if len(why) > 0 {
		line += " (" + strings.Join(why, ", ") + ")"
	}
	switch l.EndedBy {
	case "":
		return line + fmt.Sprintf(" from %s to the run's end at %s", Stamp(l.Since), Stamp(l.Until))
	case api.PauseByOutage:
		return line + fmt.Sprintf(" from %s to %s, ended by its probe answered", Stamp(l.Since), Stamp(l.Until))
	case api.PauseByBudget:
		return line + fmt.Sprintf(" from %s to %s, ended by a raise of the budget", Stamp(l.Since), Stamp(l.Until))
	}
	return line + fmt.Sprintf(" from %s to %s, ended by %s", Stamp(l.Since), Stamp(l.Until), l.EndedBy.Who()+"'s unpause")
}

// SampleCheckText is a report's sample check in a line: "sample estimate
// against the run: cost $20.0004 estimated, $21.0005 spent (+5.0 %);
// failures 4.0 % (95 % interval 1.6–9.8 %) estimated, 6.0 % (120 of 2000)
// ran: within; the rest ≈ 20s estimated, 30s from the approval (+50.0 %,
// which counts the held messages' wait for their next check)".
func SampleCheckText(sc api.SampleCheck) string {
	e := sc.Estimate
	within := "within"
	if !sc.FailureInInterval {
		within = "outside"
	}
	return fmt.Sprintf("sample estimate against the run: cost $%s estimated, $%s spent with DynamoDB (%+.1f %%); failures %.1f %% (95 %% interval %.1f–%.1f %%) estimated, %.1f %% (%d of %d) ran: %s; the rest ≈ %s estimated + %s for the approval to reach the held items, %s from the approval (%+.1f %%)",
		api.USDText(e.CostUSD), api.USDText(sc.CostUSD), unsignedZero(100*sc.CostDiff), 100*e.FailureRate, 100*e.FailureLow, 100*e.FailureHigh,
		100*sc.FailureRate, sc.Failed, sc.Ended, within,
		(time.Duration(e.Seconds) * time.Second).String(), (time.Duration(sc.ReachSeconds*1000) * time.Millisecond).Round(100*time.Millisecond).String(),
		(time.Duration(sc.RestSeconds*1000) * time.Millisecond).Round(100*time.Millisecond).String(), unsignedZero(100*sc.RestDiff))
}

// unsignedZero is x, or 0 when it would print as −0.0 with one decimal
// (a difference of a few millionths below zero reads "+0.0 %").
func unsignedZero(x float64) float64 {
	if x > -0.05 && x < 0 {
		return 0
	}
	return x
}

// ThresholdText says what a threshold tolerates, in words: "more than 5 %
// of the items or more than 100 failures (failed + quarantined) fail the
// run; it stops at the threshold", or "none: any number of failures is
// tolerated". stop is whether the run stops as soon as failures exceed it
// (Batch.EarlyStop).
func ThresholdText(t api.Threshold, stop bool) string {
	if !t.Limited() {
		return "none: any number of failures is tolerated (needs_attention tells)"
	}
	var parts []string
	if p := t.FailurePercent; p != nil {
		parts = append(parts, fmt.Sprintf("more than %s %% of the items", strconv.FormatFloat(*p, 'f', -1, 64)))
	}
	if c := t.FailureCount; c != nil {
		parts = append(parts, "more than "+api.Count(*c, "item"))
	}
	how := "the run stops as soon as they do"
	if !stop {
		how = "every item runs and the run is judged at the end"
	}
	return "failures (failed + quarantined) of " + strings.Join(parts, " or ") + " fail the run; " + how
}

// VerdictText is threshold t's judgement v in words: "verdict: within the
// threshold (3 failures of 5000 items)" or "verdict: threshold exceeded
// (…detail)"; for a batch without a threshold, which no number of
// failures exceeds, "verdict: no threshold (3 failures of 5000 items)",
// or "every item failed" when every one did. "so far" for a run still
// going (judged on its counters).
func VerdictText(t api.Threshold, v api.Verdict, sofar bool) string {
	label := "verdict"
	if sofar {
		label = "verdict so far"
	}
	counts := api.Count(v.Failures, "failure") + " of " + api.Count(v.Total, "item")
	switch {
	case v.Exceeded:
		return fmt.Sprintf("%s: threshold exceeded (%s)", label, v.Detail)
	case !t.Limited() && v.Total > 0 && v.Failures == v.Total && !sofar:
		return fmt.Sprintf("%s: no threshold; every item failed (%s)", label, counts)
	case !t.Limited():
		return fmt.Sprintf("%s: no threshold (%s)", label, counts)
	}
	return fmt.Sprintf("%s: within the threshold (%s)", label, counts)
}

// PauseText is a paused run's line: "paused by an outage since
// 2026-12-01T19:00:00Z (http 502: webhook: k1: HTTP 502); 2 probes, next
// check 19:03:30Z; no item starts until a probe is answered or `bulkrun
// unpause ID`"; a budget pause's: "paused: budget $25 reached ($25.03
// spent: pipeline $25.03, DynamoDB $0.0001; Lambda and SQS not counted),
// since …; no item starts until the budget is raised above the spend".
func PauseText(p api.Pause) string {
	next := ""
	if !p.NextCheckAt.IsZero() {
		next = ", next check " + Stamp(p.NextCheckAt)
	}
	switch p.By {
	case api.PauseByCaller:
		return fmt.Sprintf("paused by a caller since %s%s; no item starts until unpause", p.Since.UTC().Format(time.RFC3339), next)
	case api.PauseByBudget:
		return fmt.Sprintf("paused: %s, since %s; no item starts until the budget is raised above the spend (bulkrun budget ID --usd N)", p.Error, p.Since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("paused by an outage since %s (%s: %s); %s%s; no item starts until a probe is answered or unpause",
		p.Since.UTC().Format(time.RFC3339), p.Class, p.Error, api.Count(p.Probes, "probe"), next)
}

// CeilingsText is c in words: "$0.5 spend, 20000 tokens per item", or
// "none".
func CeilingsText(c api.Ceilings) string {
	var parts []string
	if c.SpendUSD > 0 {
		parts = append(parts, "$"+api.USDText(c.SpendUSD)+" spend")
	}
	if c.Tokens > 0 {
		parts = append(parts, api.USDText(c.Tokens)+" tokens")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ") + " per item and run (bulkrun ceilings ID raises them)"
}

// CorrectionText is the line that says what a correction did: the
// revision, its corrected items and its run — started, or (the same
// corrections again) found.
func CorrectionText(v wire.CorrectionView) string {
	r := v.Revision
	if v.Batch.Created == nil || !*v.Batch.Created {
		return fmt.Sprintf("batch %s: these corrections are revision %d already (%s, run %d); nothing new started", v.Batch.ID, r.N, api.Count(r.Items, "item"), r.Run)
	}
	them := "them"
	if r.Items == 1 {
		them = "it"
	}
	also := ""
	if n := r.RunItems - r.Items; n > 0 {
		// Items share a queue message and a row in packs; a person who
		// corrected items need not know the word: the others travel
		// with the corrected ones and keep their outcome.
		also = fmt.Sprintf("; the %s stored with %s keep their outcome (counted, not run again)", api.Count(n, "other item"), them)
		if n == 1 {
			also = fmt.Sprintf("; the other item stored with %s keeps its outcome (counted, not run again)", them)
		}
	}
	return fmt.Sprintf("batch %s: revision %d corrects %s; run %d runs %s%s", v.Batch.ID, r.N, api.Count(r.Items, "item"), r.Run, them, also)
}

// RevisionText is one line of `bulkrun status` per correction of b: the
// revision, its items, its run (and whether it is the run going), when
// and from what.
func RevisionText(b api.Batch, r api.Revision) string {
	now := ""
	if b.RunRevision == r.N && b.Run == r.Run {
		now = ", this run"
	}
	return fmt.Sprintf("revision %d: %s, run %d%s  (%s, from %s)", r.N, api.Count(r.Items, "corrected item"), r.Run, now,
		Stamp(r.CreatedAt), r.Source)
}
