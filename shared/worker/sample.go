package worker

import (
	"context"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/sample"
	"github.com/bulkrun/bulkrun/shared/spend"
)

// holdForApproval handles a delivery of a unit outside its batch's
// sample, or of a fan-out chunk wholly outside it, while the batch holds
// the rest (api.Approval.Holds): it takes nothing and uses no attempt;
// its message is sent again to come back at the next check of the hold
// (api.ApprovalWait: 30 s, then every minute for the first hour after
// the sample's end — or after the run's start while the sample runs —
// then every 5 minutes), or, past MaxResends, delayed on the queue. So a
// decision given in that hour reaches the held messages within about
// 1.5 minutes, and a batch left awaiting costs 61 re-sends in that hour per
// held message (the sample's last chunk's units and one message per
// later chunk), then 12 an hour. A rejection cancels the run (the held
// items end cancelled when their messages come back).
func (w *Worker) holdForApproval(ctx context.Context, log *slog.Logger, b ledger.Batch, m *unitMessage, d Delivery) (bool, []done) {
	now := w.Clock.Now()
	since := b.RunStartedAt
	if e := b.Approval.Estimate; e != nil {
		since = e.MadeAt
	}
	wait := api.ApprovalWait(since, now, mrand.Float64())
	if !w.waitOnQueue(ctx, log, m, d, wait) {
		return false, nil
	}
	if b.Approval.Estimate == nil {
		// The counter writes after the sample's last items may all have
		// come within a judge's spacing of an earlier read (or read a
		// partition before a write reached it): the held messages, back
		// at every check, judge again, so the estimate cannot be missed.
		w.judgeSample(ctx, log, b, false)
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
	since := b.RunStartedAt
	if e := b.Approval.Estimate; e != nil {
		since = e.MadeAt
	}
	wait := api.ApprovalWait(since, now, mrand.Float64())
	tr.unread(m, wait)
	for _, r := range tr.msg.Track.Retries {
		wait = min(wait, max(r.Due().Sub(now), time.Second))
	}
	if b.Approval.Estimate == nil {
		w.judgeSample(ctx, log, b, false)
	}
	log.InfoContext(ctx, "batch samples: the track's next unit lies outside the sample and waits for an approval", "first", m.ref.First, "retry_in_ms", wait.Milliseconds())
	return w.sendTrack(ctx, log, tr, d, wait, moved)
}

// sampleJudgeEvery is how often, at most, one process reads a sampled
// run's counters to see whether its sample has ended, when a held
// message comes back: 1 s. After a counter write of the run it reads
// every time, so that the write that ends the sample is followed by a
// read (a sample of 10^5 items at K = 10 writes its counters ≈ 10^3–10^4
// times: as many Queries at most, once per batch).
const sampleJudgeEvery = time.Second

// judgeSample writes b's sample estimate (Store.MarkApproval) once the
// sample's items have ended: b samples (its first run holds the rest,
// with no estimate yet), its source is read, and the run's counters —
// read after every counter write that counted items of the run
// (counted), and by held deliveries (holdForApproval) at most once per
// sampleJudgeEvery per run in this process — count at least min(Sample,
// items) items ended or held; it then puts the Batch State Change
// awaiting_approval (ledger.ApprovalChangeOf). Then, under
// Plan.AutoApproveUSD, an estimate at most it approves the batch and
// puts approved (decided_by auto_approve). The held deliveries are the
// fallback: a read just after the last write may not see it yet (the
// counters' Query is eventually consistent). A lost race (another
// process wrote first) is left as it is, and announced by the winner.
func (w *Worker) judgeSample(ctx context.Context, log *slog.Logger, b ledger.Batch, counted bool) {
	a := b.Approval
	if b.Run != 1 || a == nil || a.Decision != "" || a.Estimate != nil || b.Stop != "" || b.Status != api.StatusRunning || b.RunItems() <= 0 {
		return
	}
	now := w.Clock.Now()
	every := sampleJudgeEvery
	if counted || w.BudgetEvery < 0 {
		every = -1
	}
	if !w.budgetBook().due("sample#"+b.ID, b.Run, now, every) {
		return
	}
	p, err := w.Store.Progress(ctx, b.ID, b.Run, max(1, b.CounterShards))
	if err != nil {
		log.WarnContext(ctx, "read the counters for the sample", "error", err.Error())
		return
	}
	ended := p.Done
	for _, n := range p.Held {
		ended += n
	}
	if ended < min(int64(b.Sample), b.RunItems()) {
		return
	}
	spent := spend.RunSpend(p.Spent, p.Usage)
	r := sample.Run{Items: b.RunItems(), Ended: ended, Failed: p.Failures, StartedAt: b.RunStartedAt, Now: now, EndedAt: p.UpdatedAt,
		PipelineUSD: spent.Pipeline, InfraUSD: spent.Infra, Cost: p.Cost, PerMessage: b.Pack(), Parallel: w.Parallel}
	if n := b.MaxConcurrency; n > 0 {
		// On max_concurrency's tracks the sample and the rest run N units
		// at once, one item at a time each.
		r.PerMessage, r.Parallel = 1, n
	}
	if b.Rate != nil {
		r.RequestsPerSecond = b.Rate.RequestsPerSecond
	}
	est := sample.Estimate(r)
	if est == nil {
		return
	}
	err = w.Store.MarkApproval(ctx, ledger.ApprovalMark{BatchID: b.ID, Run: b.Run, Estimate: est, Now: now})
	switch {
	case errors.Is(err, api.ErrConflict):
		return
	case err != nil:
		log.WarnContext(ctx, "write the sample's estimate", "error", err.Error())
		return
	}
	log.WarnContext(ctx, "batch awaits approval: its sample has ended", "sample_items", est.SampleItems, "failed", est.Failed,
		"cost_usd", est.CostUSD, "seconds", est.Seconds)
	ledger.AnnounceChange(ctx, w.Bus, log, ledger.ApprovalChangeOf(b, *api.ApprovalOf(a.Sample, "", "", time.Time{}, est), now))
	if b.AutoApproveUSD <= 0 || est.CostUSD > b.AutoApproveUSD {
		return
	}
	if ended > p.Done {
		// Held items (suspended, withheld, exhausted) spent nothing yet
		// and failed nothing yet: an estimate that counts them is no
		// ground to spend without a person.
		log.WarnContext(ctx, "not approved without asking: sample items are held", "held", ended-p.Done)
		return
	}
	m := ledger.ApprovalMark{BatchID: b.ID, Run: b.Run, Decision: api.ApprovalApproved, By: api.DecidedByAuto, Now: now}
	err = w.Store.MarkApproval(ctx, m)
	switch {
	case err == nil:
		log.WarnContext(ctx, "batch approved: the sample's estimate is within its auto-approval", "cost_usd", est.CostUSD, "auto_approve_usd", b.AutoApproveUSD)
		ledger.AnnounceChange(ctx, w.Bus, log, ledger.ApprovalChangeOf(b, *api.ApprovalOf(a.Sample, m.Decision, m.By, m.Now, est), now))
	case !errors.Is(err, api.ErrConflict):
		log.WarnContext(ctx, "auto-approve", "error", err.Error())
	}
}
