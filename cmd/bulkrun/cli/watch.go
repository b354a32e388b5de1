package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/wire"
)

func (a *app) watchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Show a progress bar until the batch's run finishes, then its census; exit 3 if it needs attention",
		Args:  exactArgs(1, "a batch ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.load(cmd.Context()); err != nil {
				return err
			}
			return a.watch(cmd.Context(), args[0])
		},
	}
}

func (a *app) watch(ctx context.Context, id string) error {
	v, err := a.api.Status(ctx, id)
	if err != nil {
		return err
	}
	// A progress bar on a terminal; elsewhere (a log, a pipe) a plain line
	// every 10 seconds.
	tty := false
	if f, ok := a.errw.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	var bar *progressbar.ProgressBar
	if tty {
		bar = progressbar.NewOptions64(v.ItemCount,
			progressbar.OptionSetWriter(a.errw), progressbar.OptionSetDescription(id),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(250*time.Millisecond),
			// No prediction from the bar's own rate: its first Set jumps to the
			// items that ended before the watch began (watchLine tells a rate).
			progressbar.OptionSetPredictTime(false), progressbar.OptionSetElapsedTime(true))
	}
	var rate rateMeter
	lastLine := time.Time{}
	held := holdsTheRest(v) // the last view held the rest for an approval
	state := ""             // the last line's state (watchState)
	// Ctrl-C stops the watching, not the batch: its run goes on in the
	// stack, and the command says so and how to come back to it.
	wctx, stopWatching := a.interruptible(ctx)
	defer stopWatching()
	final, err := a.api.Wait(wctx, id, time.Second, func(v wire.BatchView) {
		if v.Status == api.StatusSubmitting {
			if time.Since(lastLine) >= 10*time.Second {
				lastLine = time.Now()
				textf(a.errw, "%s: submitting (reading the source, attempt %d)\n", id, v.SubmitAttempts)
			}
			return
		}
		done, ok := watchDone(v)
		if !ok {
			return
		}
		if h := holdsTheRest(v); held && !h {
			// Decided: the rate starts again from the rest, not from the
			// sample and the wait for a person.
			rate = rateMeter{}
		}
		held = holdsTheRest(v)
		if v.Pause != nil {
			// Paused: the pace after it starts again at its end, as the
			// API's window does (docs/cli.md).
			rate = rateMeter{}
		}
		rate.add(time.Now(), done)
		desc := watchLine(v, rate)
		if bar != nil {
			if bar.GetMax64() != v.ItemCount {
				bar.ChangeMax64(v.ItemCount) // the item count is known once the manifest is frozen
			}
			_ = bar.Set64(done)
			bar.Describe(desc)
		} else if s := watchState(v); time.Since(lastLine) >= 10*time.Second || v.Status.Finished() || s != state {
			lastLine, state = time.Now(), s
			textf(a.errw, "%s %d/%d %s\n", id, done, v.ItemCount, desc)
		}
	})
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		if bar != nil {
			_ = bar.Exit()
		}
		textf(a.errw, "\ninterrupted: stopped watching batch %s; the batch keeps running in the stack (Ctrl-C stops this command only).\n", id)
		if held {
			textf(a.errw, "  it awaits a decision on its sample: bulkrun approve %s, or bulkrun reject %s\n", id, id)
		}
		textf(a.errw, "  follow it again: bulkrun watch %s\n  its status:      bulkrun status %s\n  stop its run:    bulkrun cancel %s\n", id, id, id)
		return &ExitError{Code: ExitInterrupted}
	}
	if bar != nil {
		_ = bar.Finish()
		textln(a.errw)
	}
	if err != nil {
		return err
	}
	if err := a.show(final); err != nil {
		return err
	}
	if final.Status == api.StatusRefused {
		return refusedError(final)
	}
	return finishedExit(final)
}

// watchState is what a plain watch prints a line for as soon as it sees
// it change, whatever the time since its last line: the run, its status,
// its sample's state, its pause and its stop.
func watchState(v wire.BatchView) string {
	s := fmt.Sprintf("%d %s %s", v.Run, v.Status, v.Stop)
	if ap := v.Approval; ap != nil {
		s += " " + string(ap.State)
	}
	if p := v.Pause; p != nil {
		s += " paused " + string(p.By)
	}
	return s
}

// holdsTheRest reports whether v's first run holds the items outside its
// sample for a decision (sampling, or awaiting approval), as the API's
// view tells it (its state: the view carries no stored decision).
func holdsTheRest(v wire.BatchView) bool {
	ap := v.Approval
	return ap != nil && v.Run == 1 && v.Stop == "" && !v.Status.Finished() && (ap.State == api.ApprovalSampling || ap.State == api.ApprovalAwaiting)
}

// watchDone is how many of the run's items have ended, as the view tells
// (its census, or a large batch's counters); false when it tells none.
func watchDone(v wire.BatchView) (int64, bool) {
	switch {
	case v.Census != nil:
		c := v.Census
		return c.Total - c.Pending - c.InFlight - c.Held(), true
	case v.Progress != nil:
		return v.Progress.Done, true
	}
	return 0, false
}

// watchLine is the watch's line after the bar: the run, the items by
// outcome so far, those in flight and still pending, and the rate —
// "run 1: 12 succeeded, 1 failed, 0 quarantined, 0 cancelled; 20 in
// flight, 17 pending; 4.5 items/s", the items in flight that wait for a
// retry said after their count (waitingText). The rate is the API's over
// the run's last 60 s when its estimate has one (rate basis recent_60s:
// "; 30.0 items/s over the last 60 s, finish ≈ 10:05:00Z"), else the one
// measured over the last RateWindow of polls (none before two polls
// RateMinSpan apart);
// once the run has finished, its own: the items it ended over the time
// from its start to its end; while the run is being stopped, neither
// (its items not started settle without running).
func watchLine(v wire.BatchView, r rateMeter) string {
	var b strings.Builder
	b.WriteString(fmt.Sprintf("run %d: ", v.Run))
	switch {
	case v.Census != nil:
		c := v.Census
		b.WriteString(fmt.Sprintf("%d succeeded, %d failed, %d quarantined, %d cancelled; %d in flight%s, %d pending", c.Succeeded, c.Failed, c.Quarantined, c.Cancelled, c.InFlight, waitingText(v.Live), c.Pending))
		if c.Withheld > 0 {
			b.WriteString(fmt.Sprintf(", %d withheld (fix the secret, then bulkrun lift %s)", c.Withheld, v.ID))
		}
		if c.Exhausted > 0 {
			b.WriteString(fmt.Sprintf(", %d exhausted (bulkrun ceilings %s)", c.Exhausted, v.ID))
		}
		if c.Suspended > 0 {
			b.WriteString(fmt.Sprintf(", %d suspended (bulkrun signal %s KEY)", c.Suspended, v.ID))
		}
	case v.Progress != nil:
		p := v.Progress
		b.WriteString(fmt.Sprintf("%d ended (%s); %d pending", p.Done, api.Count(p.Failures, "failure"), max(0, v.ItemCount-p.Done)))
	}
	if l := v.Live; l != nil && l.AdaptivePace != nil && !v.Status.Finished() {
		// The downstream's throttling holds the pace down: the line says
		// why the rate is what it is.
		b.WriteString(fmt.Sprintf("; paced by %s at %s requests/s", l.AdaptivePace.Key, describe.LimitText(l.AdaptivePace.LimitPerSecond)))
		if h := l.AdaptivePace.HoldUntil; h != nil {
			b.WriteString(", no call before " + describe.Stamp(*h))
		}
	}
	if l := v.Live; l != nil && l.RateBooked != nil && !v.Status.Finished() && v.Pause == nil {
		// Its rate key is booked ahead (by it or other batches naming the
		// key): its next calls wait behind those bookings, which is why
		// items in flight may not move. Paused, the pause is why.
		b.WriteString("; " + describe.BookedText(*l.RateBooked))
	}
	if l := v.Live; l != nil && l.RateConflict != nil && !v.Status.Finished() {
		b.WriteString("; " + describe.RateConflictClause(*l.RateConflict))
	}
	if p := v.Pause; p != nil && !v.Status.Finished() {
		// No item starts until the pause ends: the line says why its rate
		// fell to nothing, and what ends it.
		switch p.By {
		case api.PauseByBudget:
			b.WriteString("; paused: " + p.Error + " (bulkrun budget " + v.ID + " --usd N)")
		case api.PauseByCaller:
			b.WriteString("; paused by a caller since " + describe.Stamp(p.Since) + " (bulkrun unpause " + v.ID + ")")
		default:
			next := ""
			if !p.NextCheckAt.IsZero() {
				next = ", next check " + describe.Stamp(p.NextCheckAt)
			}
			b.WriteString(fmt.Sprintf("; paused by an outage (%s) since %s: no item starts until a probe is answered (%s so far%s) or bulkrun unpause %s",
				p.Class, describe.Stamp(p.Since), api.Count(p.Probes, "probe"), next, v.ID))
		}
	}
	if ap := v.Approval; ap != nil && !v.Status.Finished() && v.Stop == "" {
		// The rest waits for a decision: the line says why nothing moves.
		switch ap.State {
		case api.ApprovalSampling:
			b.WriteString("; sampling " + api.Count(int64(ap.Sample), "item") + ", the rest held")
		case api.ApprovalAwaiting:
			b.WriteString(fmt.Sprintf("; awaiting approval (bulkrun status %s; approve %s or reject %s)", v.ID, v.ID, v.ID))
		}
	}
	if v.Status.Finished() {
		if done, ok := watchDone(v); ok && !v.RunStartedAt.IsZero() && v.FinishedAt.After(v.RunStartedAt) {
			b.WriteString(finishedText(v, done))
		}
		return b.String()
	}
	if v.Stop != "" {
		// A cancel or a threshold stop settles the items not started,
		// which never run: no finish to project, no cost at the end.
		b.WriteString(fmt.Sprintf("; stopping (%s): the items not started settle without a call", v.Stop))
		return b.String()
	}
	if holdsTheRest(v) || v.Pause != nil {
		// The rest waits for a decision, or for the pause to end: no
		// finish to project from the pace before it (the approval's
		// estimate says the rest's time; a pause has no end to count on).
		return b.String()
	}
	if e := estimateOf(v); e != nil && e.RateBasis == api.RateBasisRecent {
		// The API's pace over the run's last 60 s, whoever read it then.
		b.WriteString(fmt.Sprintf("; %s over the last 60 s, finish ≈ %s", describe.RateText(e.RatePerSecond), describe.Stamp(e.FinishAt)))
		if e.FinishBooked {
			b.WriteString(" (the rate key's bookings)")
		}
	} else if per, ok := r.rate(); ok {
		b.WriteString("; " + describe.RateText(per))
		if done, ok := watchDone(v); ok && per > 0 && done < v.ItemCount {
			left := time.Duration(min(float64(v.ItemCount-done)/per, 100*365*24*3600)) * time.Second
			b.WriteString(", finish ≈ " + describe.Stamp(time.Now().Add(left)))
		}
	}
	if l := v.Live; l != nil && l.Estimate != nil && len(l.Estimate.ProjectedCost) > 0 {
		b.WriteString("; projected cost " + describe.ProjectedText(l.Estimate.ProjectedCost))
	}
	return b.String()
}

// finishedText is the watch's end of a finished run: its done items over
// the time from its start to its end, and the pace of the items that ran
// — "; 50 items in 10s (5.0 items/s)" — over that time less a sampled
// run's wait for its approval and the time its pauses took, the
// cancelled items left out of it — "; 3000 items in 40s (29s of it
// awaiting approval; 3000 ran at 272.7 items/s)", "; 500 items in 5m2s
// (1m31s of it paused; 500 ran at 2.4 items/s)", "; 400 items in 14s
// (350 cancelled; 50 ran at 3.6 items/s)".
func finishedText(v wire.BatchView, done int64) string {
	took := v.FinishedAt.Sub(v.RunStartedAt)
	busy, ran := took, done
	var notes []string
	if ap := v.Approval; v.Run == 1 && ap != nil && ap.State == api.ApprovalApproved && ap.Estimate != nil && ap.DecidedAt.After(ap.Estimate.MadeAt) {
		if wait := ap.DecidedAt.Sub(ap.Estimate.MadeAt); wait < took {
			busy -= wait
			notes = append(notes, wait.Round(time.Second).String()+" of it awaiting approval")
		}
	}
	if ps := v.Paused; ps != nil && ps.Seconds > 0 {
		if wait := time.Duration(ps.Seconds * float64(time.Second)); wait < busy {
			busy -= wait
			notes = append(notes, wait.Round(time.Second).String()+" of it paused")
		}
	}
	if c := v.Census; c != nil && c.Cancelled > 0 && c.Cancelled <= done {
		ran -= c.Cancelled
		notes = append(notes, fmt.Sprintf("%d cancelled", c.Cancelled))
	}
	s := fmt.Sprintf("; %s in %s", api.Count(done, "item"), took.Round(time.Second))
	if len(notes) == 0 {
		return s + " (" + describe.RateText(float64(done)/took.Seconds()) + ")"
	}
	return s + fmt.Sprintf(" (%s; %d ran at %s)", strings.Join(notes, "; "), ran, describe.RateText(float64(ran)/busy.Seconds()))
}

// estimateOf is the view's estimate (LiveView.Estimate); nil when none.
func estimateOf(v wire.BatchView) *api.Estimate {
	if v.Live == nil {
		return nil
	}
	return v.Live.Estimate
}

// waitingText says how many of the items in flight wait for a retry,
// after what, and when the first is due — " (69 waiting for a retry
// after timeout, next at 14:51:00Z)" — so that a watch whose rate drops
// to nothing says why; empty when none waits.
func waitingText(l *api.LiveView) string {
	if l == nil || l.RetryWaiting == 0 {
		return ""
	}
	s := fmt.Sprintf(" (%d waiting for a retry", l.RetryWaiting)
	switch c := l.RetryCause; {
	case c != nil && l.Throttled > 0:
		s += fmt.Sprintf(": %d after %s, %d waiting out a throttling", c.Items, c.Class, l.Throttled)
	case c != nil:
		s += " after " + c.Class
	case l.Throttled > 0:
		s += fmt.Sprintf(", %d of them waiting out a throttling", l.Throttled)
	}
	if l.NextRetryAt != nil {
		s += "; next at " + describe.Stamp(*l.NextRetryAt)
	}
	return s + ")"
}

// The watch's rate is measured over a window of its polls.
const (
	// RateWindow is how far back the rate looks: the items ended over
	// the last 30 s of polls.
	RateWindow = 30 * time.Second
	// RateMinSpan is the shortest span of polls a rate is told over.
	RateMinSpan = 2 * time.Second
)

// rateMeter measures the rate at which a run ends items from the watch's
// polls: (items ended at the last poll − at the oldest within
// RateWindow) ÷ the time between them, told once they are RateMinSpan
// apart. A first poll alone tells no rate, however many items it finds
// ended: they ended before the watch began.
type rateMeter struct{ samples []rateSample }

type rateSample struct {
	at   time.Time
	done int64
}

// add records a poll at `at` that saw done items ended.
func (r *rateMeter) add(at time.Time, done int64) {
	r.samples = append(r.samples, rateSample{at, done})
	for len(r.samples) > 2 && at.Sub(r.samples[1].at) >= RateWindow {
		r.samples = r.samples[1:]
	}
}

// rate is the items ended a second over the window, and whether the
// polls span enough time to tell.
func (r rateMeter) rate() (float64, bool) {
	if len(r.samples) < 2 {
		return 0, false
	}
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	span := last.at.Sub(first.at)
	if span < RateMinSpan {
		return 0, false
	}
	return float64(max(0, last.done-first.done)) / span.Seconds(), true
}
