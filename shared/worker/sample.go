package worker

import (
	"cmp"
	"context"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/judge"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// approvalWait is how long a unit held for b's approval waits before it
// looks again (api.ApprovalWait), from the estimate's time once the
// sample has ended, else from the run's start.
func approvalWait(b ledger.Batch, now time.Time) time.Duration {
	return api.ApprovalWait(b.ApprovalHoldSince(), now, mrand.Float64())
}

// holdForApproval handles a delivery of a unit outside its batch's
// sample, or of a fan-out chunk wholly outside it, while the batch holds
// the rest (api.Approval.Holds): it takes nothing and uses no attempt;
// its message is sent again to come back at the next check of the hold
// (api.ApprovalWait: every 10 s for the first 10 minutes after the
// sample's end — or after the run's start while the sample runs — then
// every minute to the hour, then every 5 minutes), or, past MaxResends,
// delayed on the queue. So a decision given in those 10 minutes reaches
// the held messages within about 14 s (api.ApprovalReachesBy), and a
// batch left awaiting costs 110 re-sends in the first hour per held
// message (one per fan-out chunk not wholly in the sample: the chunk
// of the sample's end sends the sample's messages only, fanout), then 12
// an hour. A rejection cancels the run (the held
// items end cancelled when their messages come back).
func (w *Worker) holdForApproval(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, d Delivery) (bool, []done) {
	now := w.Clock.Now()
	wait := approvalWait(b, now)
	if !w.waitOnQueue(ctx, log, m, d, wait) {
		return false, nil
	}
	if b.Approval.Estimate == nil {
		// The counter writes after the sample's last items may all have
		// come within a judge's spacing of an earlier read (or read a
		// partition before a write reached it): the held messages, back
		// at every check, judge again, so the estimate cannot be missed.
		w.judges().Sample(ctx, log, b, false)
	}
	w.Metrics.Resent(b.Pipeline, "sample", b.ID, b.Run)
	log.InfoContext(ctx, "batch samples: a message outside the sample waits for an approval", "retry_in_ms", wait.Milliseconds(), "requeued", *m.requeued)
	return true, nil
}

// holdTrack handles a track of b whose next unit m lies outside b's
// sample while b holds the rest (api.Approval.Holds): the track puts m
// back (trackRun.unread) and sends itself on to come back at the hold's
// next check (api.ApprovalWait, as a held message does; at most
// pace.TrackLookEvery later, and no later than its earliest retry, so
// that the sample's own waiting units still run), and judges the
// sample as a held message does. So a batch with max_concurrency N
// samples on its N tracks: no unit past the sample starts, and the held
// rest costs one message per track and check — the rest of its manifest
// is not read.
func (w *Worker) holdTrack(ctx context.Context, log *slog.Logger, tr *trackRun, b ledger.Batch, m *unitMessage, d Delivery, moved bool) bool {
	now := w.Clock.Now()
	wait := approvalWait(b, now)
	tr.unread(m, wait)
	for _, r := range tr.msg.Track.Retries {
		wait = min(wait, max(r.Due().Sub(now), time.Second))
	}
	if b.Approval.Estimate == nil {
		w.judges().Sample(ctx, log, b, false)
	}
	log.InfoContext(ctx, "batch samples: the track's next unit lies outside the sample and waits for an approval", "first", m.ref.First, "retry_in_ms", wait.Milliseconds())
	return w.sendTrack(ctx, log, tr, d, wait, moved)
}

// judges is a judge.Judge on w's Store, Clock, Bus, Metrics, BudgetEvery
// and Parallel, with this process's record of its counter reads
// (w.reads, made on first use; a Worker copied before that keeps its
// own).
func (w *Worker) judges() *judge.Judge {
	return &judge.Judge{Store: w.Store, Clock: w.Clock, Bus: w.Bus, Metrics: w.Metrics, Every: w.BudgetEvery, Parallel: w.Parallel, PerInvocation: w.PerInvocation, Ramp: w.Ramp,
		ItemConcurrency: cmp.Or(max(0, w.ItemConcurrency), DefaultItemConcurrency), Reads: made(&w.reads)}
}
