package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/streak"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// ranDone is the done of item run r of b's run: its ending, and whether
// it failed transiently (its failure class) for the pause.
func ranDone(b ledger.Batch, r *itemRun) done {
	d := doneOf(b, r.state)
	d.ran, d.class, d.attemptSpent = true, r.ending.Class, r.cost
	if d.class != "" {
		d.text = r.ending.Error
	}
	return d
}

// runPaused handles a delivery of a paused batch's unit. At a check due
// for a probe (Pause.ProbeDue) the delivery that claims it
// (Store.ClaimProbe) runs one item of its unit (Conclude does not count
// its attempt if it fails transiently); if that attempt ends in anything
// but a transient failure (a held ending too: done.answered), the
// downstream answered and the outage pause ends (Store.Unpause). Every
// other delivery takes nothing: its message is sent again to come back
// after the next check (Pause.Wait), or, past MaxResends, delayed on the
// queue, holding only the part of its pacing still ahead (pacer.Hold: a
// token booking that passes while the batch waits is made again when it
// runs). The probe runs off its rate's schedule (pacer.Lease.Probe).
func (w *Worker) runPaused(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, d Delivery, inv *invocation) (bool, []done) {
	p, now := *b.Pause, w.Clock.Now()
	if n, due := p.ProbeDue(now); due {
		err := w.Store.ClaimProbe(ctx, ledger.ProbeClaim{BatchID: b.ID, Run: b.Run, Since: p.Since, Probe: n, Now: now})
		switch {
		case err == nil:
			log.WarnContext(ctx, "batch paused: probing with one item", "probe", n, "paused_ms", now.Sub(p.Since).Milliseconds())
			m.probe, m.lease.Probe = true, true
			ack, dns := w.runUnit(ctx, log, b, m, d, inv)
			if answered(dns) {
				p.Probes = n
				w.unpauseOnAnswer(ctx, log, b, p)
			}
			return ack, dns
		case errors.Is(err, api.ErrConflict):
			p.Probes = n // another delivery probes (the row read may lag)
		default:
			log.WarnContext(ctx, "claim the probe", "error", err.Error())
		}
	}
	wait := pacer.HoldWait(p.Wait(now), pacer.Hold(m, now), now)
	if m.track != nil {
		return m.track.park(m, wait, 0), nil
	}
	if !w.waitOnQueue(ctx, log, m, d, wait) {
		return false, nil
	}
	w.Metrics.Resent(b.Pipeline, "paused", b.ID, b.Run)
	log.InfoContext(ctx, "batch paused: message waits for the next check", "retry_in_ms", wait.Milliseconds(), "requeued", *m.requeued)
	return true, nil
}

// waitOnQueue sends m again to come back after wait (Requeued grows),
// and reports true: the delivery is acknowledged. Past MaxResends (the
// loop's own bound), or when the send fails, the delivery itself is
// delayed by wait instead (a receive), and it reports false: the
// delivery is left on the queue.
func (w *Worker) waitOnQueue(ctx context.Context, log *slog.Logger, m *unitMessage, d Delivery, wait time.Duration) bool {
	if *m.requeued >= ledger.MaxResends {
		if err := w.Queue.Delay(ctx, d.ReceiptHandle, wait); err != nil {
			log.WarnContext(ctx, "delay message", "error", err.Error())
		}
		return false
	}
	if err := w.resend(ctx, m, wait); err != nil {
		log.WarnContext(ctx, "send the message again", "error", err.Error())
		if derr := w.Queue.Delay(ctx, d.ReceiptHandle, wait); derr != nil {
			log.WarnContext(ctx, "delay message", "error", derr.Error())
		}
		return false
	}
	return true
}

// answered reports whether an attempt among dns ended other than by a
// transient failure: the downstream answered (done.answered).
func answered(dns []done) bool {
	return slices.ContainsFunc(dns, done.answered)
}

// answered reports whether d is an attempt the downstream answered: it
// ran and ended with an outcome, terminal or held (an item suspended,
// exhausted at a ceiling, or withheld on a refused credential is
// answered too), not by a transient failure.
func (d done) answered() bool {
	return d.ran && d.class == "" && (d.outcome.Terminal() || d.outcome.Held())
}

// unpauseOnAnswer ends b's outage pause p: its probe was answered.
func (w *Worker) unpauseOnAnswer(ctx context.Context, log *slog.Logger, b ledger.Batch, p api.Pause) {
	now := w.Clock.Now()
	err := w.Store.Unpause(ctx, ledger.UnpauseMark{BatchID: b.ID, Run: b.Run, By: api.PauseByOutage, Since: p.Since, Now: now, Pause: p})
	switch {
	case err == nil:
		log.WarnContext(ctx, "batch unpaused: the probe was answered", "probes", p.Probes, "paused_ms", now.Sub(p.Since).Milliseconds())
		w.pacing().Resume(ctx, log, b)
		w.Metrics.Paused(b.Pipeline, false, b.ID, b.Run)
		ledger.AnnouncePause(ctx, w.Bus, log, b, p, false, api.PauseByOutage, now)
	case !errors.Is(err, api.ErrConflict):
		log.WarnContext(ctx, "unpause", "error", err.Error())
	}
}

// health is what one message batch's attempts of a run say of its
// downstream: whether any was answered, and else the transient failures
// by class (with one failure's text per class).
type health struct {
	answered bool
	fails    map[string]int64
	text     map[string]string
}

func (h *health) add(d done) {
	switch {
	case !d.ran:
	case d.answered():
		h.answered = true
	case d.class != "":
		if h.fails == nil {
			h.fails, h.text = map[string]int64{}, map[string]string{}
		}
		h.fails[d.class]++
		h.text[d.class] = d.text
	}
}

// streaks is h as a lane write's Streaks (by slot), nil when answered.
func (h health) streaks() map[int]int64 {
	if h.answered {
		return nil
	}
	return streak.BySlot(h.fails)
}

// judgeStreaks pauses b (an outage pause) when the lane write that added
// h's failures took a slot's streak past a multiple of PauseAfter: that
// many attempts in a row on the lane failed transiently with the slot's
// class, none answered since. A batch already paused or stopping, as
// read for this message batch, is left alone.
func (w *Worker) judgeStreaks(ctx context.Context, log *slog.Logger, b ledger.Batch, h health, added, after map[int]int64) {
	if b.Pause != nil || b.Stop != "" {
		return
	}
	for c := range h.fails {
		slot := streak.Slot(c)
		n, ok := after[slot]
		if !ok || n/ledger.PauseAfter <= (n-added[slot])/ledger.PauseAfter {
			continue
		}
		w.pauseOnOutage(ctx, log, b, c, h.text[c], n)
		return
	}
}

// pauseForFault pauses b's run (an outage pause) when err holds an AWS
// fault of class pause (ledger.PauseFault: a KMS key disabled or denied,
// credentials expired): every item would meet it, and none may fail for
// it. Its class is "aws {service} {code}"; its probes, as any outage
// pause's, end it once an item gets through. A batch already paused or
// stopping, as read for this message, is left alone.
func (w *Worker) pauseForFault(ctx context.Context, log *slog.Logger, b ledger.Batch, err error) {
	f, ok := ledger.PauseFault(err)
	if !ok || b.Pause != nil || b.Stop != "" || b.Status.Finished() {
		return
	}
	w.pauseOnOutage(ctx, log, b, pipeline.CutText("aws "+f.Service+" "+f.Code, 64), pipeline.ErrorText(err), 0)
}

// pauseOnOutage pauses b's run: streak attempts in a row failed with
// class (one of them with text), or (streak 0) an AWS service refuses
// bulkrun's calls until someone acts on its side (pauseForFault).
func (w *Worker) pauseOnOutage(ctx context.Context, log *slog.Logger, b ledger.Batch, class, text string, streak int64) {
	now := w.Clock.Now()
	err := w.Store.Pause(ctx, ledger.PauseMark{BatchID: b.ID, Run: b.Run, By: api.PauseByOutage, Class: class, Error: text, Now: now})
	switch {
	case err == nil:
		if streak == 0 {
			log.WarnContext(ctx, "batch paused: an AWS service refuses bulkrun's calls", "class", class, "error", text)
		} else {
			log.WarnContext(ctx, "batch paused: its downstream fails", "class", class, "streak", streak, "error", text)
		}
		w.Metrics.Paused(b.Pipeline, true, b.ID, b.Run)
		p := api.Pause{By: api.PauseByOutage, Since: now, Class: class, Error: ledger.CutError(text)}
		ledger.AnnouncePause(ctx, w.Bus, log, b, p, true, api.PauseByOutage, now)
	case !errors.Is(err, api.ErrConflict):
		log.WarnContext(ctx, "pause", "error", err.Error())
	}
}
