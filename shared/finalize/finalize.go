package finalize

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/internal/metric"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/sample"
	"github.com/bulkrun/bulkrun/shared/spend"
)

// CensusOf counts a run's items by outcome from their rows (never from
// counters), calling each (optional) with every row that belongs to the run
// and its outcome in the run. Items without a row, and failed, cancelled or
// released quarantined rows of an earlier run, are pending in this run;
// succeeded and (unreleased) quarantined rows of an earlier run keep their
// outcome.
func CensusOf(ctx context.Context, store Store, b ledger.Batch, each func(ledger.Item, api.Outcome) error) (api.Census, error) {
	c := api.Census{Cost: pipeline.CostSum{}, RunSpent: pipeline.CostSum{}}
	var rows int64
	err := shardmerge.Merge(ctx, store, b.ID, b.ListShards, "", shardmerge.Options{Packed: b.Packed()}, func(it ledger.Item) error {
		o, ok := ledger.OutcomeInRun(it, b)
		if !ok {
			return nil // not yet reached in this run: pending
		}
		rows++
		c.Add(o, it.Cost)
		if it.SpentRun == b.Run {
			c.RunSpent.Add(it.Spent)
		}
		if each != nil {
			return each(it, o)
		}
		return nil
	})
	if err != nil {
		return api.Census{}, err
	}
	c.Total = b.ItemCount
	c.Pending = b.ItemCount - rows
	return c, nil
}

// runRevision is the revision of b's current run (a correction run), nil
// for a run of the whole manifest.
func runRevision(b ledger.Batch) *api.Revision {
	if r, ok := b.Revision(b.RunRevision); ok {
		return &r
	}
	return nil
}

// Finalizer writes a run's results and report once every item is terminal,
// and moves the batch to its final status. Safe for concurrent use; any
// number of concurrent or repeated calls for one run write one report.
type Finalizer struct {
	Store     Store
	Blobs     ledger.Blobs
	Clock     ledger.Clock
	Log       *slog.Logger
	Retention time.Duration // how long a finished batch is kept
	Events    ledger.Events // where finished runs are announced; nil for none
	// Bus gets the Batch State Change event of a run ended
	// finalize_failed (Events announces every other finished run); nil
	// for none.
	Bus ledger.EventBus
	// Tasks answers the task token of a batch whose first run ended
	// (ledger.TaskEnd): with the run's announcement, so exactly once per
	// run as Step Functions counts it; nil for none.
	Tasks ledger.Tasks
	// Stall is how long a running batch's counters may stand still before
	// Tick counts its items from the rows (the backstop for lost counter
	// writes), and how long after its start a run may stay not fanned out
	// before Tick sends its fan-out again. Default 5 minutes.
	Stall time.Duration
	// FanOut re-sends a run's fan-out (Submitter.FanOut); nil disables that
	// part of the tick.
	FanOut func(ctx context.Context, b ledger.Batch) error
	// Settle wakes the held items of a stopped run so that they settle
	// cancelled (held.Waker.Settle, within a time bound; idempotent). A
	// cancel or a threshold stop wakes them itself, but leaves a pack that
	// another delivery holds meanwhile (its item's retry running), and a
	// caller's call can die half-way; the tick calls it on every stopped
	// run whose counters still hold held items, so that such a run still
	// ends. nil disables that part of the tick.
	Settle func(ctx context.Context, b ledger.Batch) error
	// Metrics receives the finalize lag and tick failures; nil for none.
	Metrics *metric.Emitter
	// ChunkTime is how long one call reads rows before it writes a
	// checkpoint and leaves the rest to the next call (see chunk.go).
	// Default DefaultChunkTime.
	ChunkTime time.Duration
	// ChunkMargin is how long before the context's deadline a call stops
	// reading rows. Default DefaultChunkMargin.
	ChunkMargin time.Duration
	// ChunkRows, when > 0, also ends a call's chunk after that many rows
	// (tests; 0: no limit).
	ChunkRows int64
	// Merge bounds the memory of reading the rows (shardmerge.Merge), and of
	// merging a pack batch's sorted runs (see keysort.go).
	Merge shardmerge.Options
	// SortRunBytes is how many bytes of a pack batch's result lines are
	// sorted in memory into one run. Default SortRunBytes.
	SortRunBytes int
	// Parts starts the calls of a run read in parts (finalize_parts.go);
	// nil: the call that plans the parts reads them itself.
	Parts FinalizeParts
	// PartRows is how many rows one part of a parallel finalize is
	// planned to read; a run of fewer than twice as many is read by one
	// chain of calls. Default DefaultFinalizePartRows.
	PartRows int64
	// Waits are Trigger's pauses between census attempts of a run not
	// finished yet. Default DefaultWaits (1, 2, 4, 8 s).
	Waits []time.Duration
	// Chain, when set, is the finalize function itself: Trigger invokes
	// the next call of a run read in chunks at once (see Chainer). nil:
	// the tick goes on.
	Chain Chainer
	// MergeFanIn is how many sorted runs one merge of a finalize part
	// reads at once; more are merged in levels. Default MaxMergeFanIn
	// (tests lower it to exercise the levels).
	MergeFanIn int
	// MergeRangeBytes is how many bytes of the parts' sorted runs one
	// range of a merge split by key ranges reads; runs of fewer than
	// twice as many are merged by one call. Default
	// DefaultMergeRangeBytes (finalize_ranges.go).
	MergeRangeBytes int64
	// RunMarkBytes is how far apart a part's run index marks its
	// records. Default RunMarkBytes (tests lower it).
	RunMarkBytes int64
}

// FinalizeResult says what Finalize did.
type FinalizeResult struct {
	Report api.Report
	// Wrote is true for the one call that wrote the report; false when the
	// report already existed.
	Wrote bool
	// Continued is true when the call counted part of the rows and wrote
	// a checkpoint (or found one written by another call) without
	// finishing the run: the next call goes on from it. Report is empty.
	Continued bool
	// Parted is true (with Continued) when the run is read in parts by
	// calls of their own (Finalizer.Parts) and this call did its share:
	// the last part merges, so nothing is to be chained.
	Parted bool
}

// Finalize finishes run of batch id. It returns ErrNotFinished (wrapped)
// when an item is still pending or in flight, or another call is writing
// the chunk it would write (claim.go; call again later, as Trigger and
// the tick do), ErrNotFound for an unknown
// batch, and the stored report (Wrote false) when the run was finalized
// already. Steps: census and results in one pass over the rows in key
// order (a pack batch's rows, read in manifest order, through an external
// sort: keysort.go), in chunks across calls when the rows take longer than
// ChunkTime (a call that ends a chunk returns Continued; see chunk.go), the report
// written only if absent (S3 If-None-Match), then the batch row moved from
// running to its final status only if still running this run. Memory is
// bounded whatever the run's size: Merge's budget, two results parts of
// ResultPartBytes per outcome met, and 1,000 keys of rows whose TTL is
// extended (a pack batch's sort takes SortRunBytes of the budget).
//
// A call that fails for a reason other than AWS being unavailable (or the
// run not being done) is counted on the batch row; the
// FinalizeFailureLimit-th such failure ends the run StatusFinalizeFailed
// with the error as its Failure (Store.FinalizeFailed), so a run that
// cannot be finished is never left running in silence: the status and
// reason show in status, list and the console, the RunsFinalizeFailed
// metric alarms, and resume starts a new run once the cause is fixed.
func (f *Finalizer) Finalize(ctx context.Context, id string, run int) (FinalizeResult, error) {
	return f.finalizeAt(ctx, id, run, 0)
}

// finalizeAt is Finalize for the call at place chain of its chain of
// calls (ledger.FinalizeEvent.Chain): the parts it starts are the chain's
// next calls.
func (f *Finalizer) finalizeAt(ctx context.Context, id string, run, chain int) (FinalizeResult, error) {
	res, err := f.finalize(ctx, id, run, finalizeCall{chain: chain})
	return f.answer(ctx, id, run, res, err)
}

// answer is the answer of a finalize call of run of batch id (the whole
// run, a part, a range, or the tick's) that returned res and err: the report when err
// is a missing object and the run finished meanwhile
// (finishedMeanwhile), else res and err counted toward ending the run
// (cannotFinish).
func (f *Finalizer) answer(ctx context.Context, id string, run int, res FinalizeResult, err error) (FinalizeResult, error) {
	if errors.Is(err, api.ErrNotFound) {
		if rep, ok := f.finishedMeanwhile(ctx, id, run); ok {
			return FinalizeResult{Report: rep}, nil
		}
	}
	return res, f.cannotFinish(ctx, id, run, err)
}

// finishedMeanwhile reports whether run of batch id has finished, and its
// report: a call that finds an object of the run gone (a checkpoint, a
// results part, a sorted run listed a moment before) has lost to a call
// that finished the run and deleted them, and answers with the report
// rather than an error.
func (f *Finalizer) finishedMeanwhile(ctx context.Context, id string, run int) (api.Report, bool) {
	b, err := f.Store.GetBatch(ctx, id)
	if err != nil || b.Run != run || !b.Status.Finished() || b.Status == api.StatusFinalizeFailed {
		return api.Report{}, false
	}
	rep, err := f.readReport(ctx, id, run)
	return rep, err == nil
}

// FinalizeFailureLimit is how many failed finalize calls of one run end it
// StatusFinalizeFailed: 5, more than the 3 invocations Lambda makes of one
// asynchronous trigger (the first and two retries; AWS Lambda developer
// guide, "Asynchronous invocation"), so at least one tick (2 minutes
// apart by default) tries again after a trigger's retries failed.
const FinalizeFailureLimit = 5

// cannotFinish counts err, a failed finalize of run, toward ending the run
// StatusFinalizeFailed, unless it is no failure of the run's finish: the
// run is not done (ErrNotFinished), the batch is gone (ErrNotFound), AWS
// was unavailable (ErrUnavailable: throttling, 5xx, after the SDK's
// tries), or the call's own context ended. It returns err, noting the
// new status when it ended the run.
func (f *Finalizer) cannotFinish(ctx context.Context, id string, run int, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, api.ErrNotFinished) || errors.Is(err, api.ErrNotFound) || errors.Is(err, ledger.ErrUnavailable) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	now := f.Clock.Now()
	ended, ferr := f.Store.FinalizeFailed(ctx, ledger.FinalizeFailure{BatchID: id, Run: run, Reason: err.Error(), Limit: FinalizeFailureLimit,
		Now: now, ExpiresAt: now.Add(f.Retention)})
	log := f.Log.With("batch_id", id, "run", run)
	switch {
	case ferr != nil && !errors.Is(ferr, api.ErrConflict):
		log.WarnContext(ctx, "count a failed finalize", "error", ferr.Error())
	case ended:
		log.ErrorContext(ctx, "run could not be finished: ended "+string(api.StatusFinalizeFailed)+"; resume it once the cause is fixed",
			"failures", FinalizeFailureLimit, "error", pipeline.ErrorText(err))
		f.Metrics.RunFinalizeFailed(id, run)
		f.announceFailed(ctx, log, id, run, err, now)
		return fmt.Errorf("%w (the run is now %s; bulkrun resume %s once fixed)", err, api.StatusFinalizeFailed, id)
	}
	return err
}

// announceFailed puts the Batch State Change event of run of batch id
// ended finalize_failed at now by err (best effort: a failure is logged;
// the status, the metric and its alarm say it too).
func (f *Finalizer) announceFailed(ctx context.Context, log *slog.Logger, id string, run int, err error, now time.Time) {
	if f.Bus == nil && f.Tasks == nil {
		return
	}
	b, gerr := f.Store.GetBatch(ctx, id)
	if gerr != nil || b.Run != run {
		b = ledger.Batch{}
		b.ID, b.Run = id, run
	}
	// The call that ended the run answers its task token (FinalizeFailed
	// reports that once); a failure is logged: the status and the alarm
	// say it too.
	if terr := ledger.TaskEnd(ctx, f.Tasks, log, b, run, nil, api.TaskErrorFinalizeFailed, pipeline.ErrorText(err)); terr != nil {
		log.WarnContext(ctx, "answer the task token", "error", terr.Error())
	}
	b.Status = api.StatusFinalizeFailed
	e := ledger.StateChangeOf(b, api.ChangeFinished, now, now)
	e.Verdict = api.StatusFinalizeFailed
	e.Failure = pipeline.ErrorText(err)
	ledger.AnnounceChange(ctx, f.Bus, log, e)
}

// finalizeCall is what a finalize call is: its place in its chain of
// calls (chain, ledger.FinalizeEvent.Chain: 0 for a trigger or the tick,
// each call a call invokes one more), which the parts it starts carry on
// (FinalizeParts). The tick's call is one like any other: a chunk another
// call is writing is left to it by the chunk's claim (claim.go).
type finalizeCall struct {
	chain int
}

// finalize is Finalize without counting its failure: a run already
// finished answers its report; otherwise the run's rows are counted
// (countRows), its report made (report) and the run finished (finish).
func (f *Finalizer) finalize(ctx context.Context, id string, run int, call finalizeCall) (FinalizeResult, error) {
	b, err := f.Store.GetBatch(ctx, id)
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s: %w", id, err)
	}
	if run != b.Run {
		if run < b.Run {
			rep, err := f.readReport(ctx, id, run)
			return FinalizeResult{Report: rep}, err
		}
		return FinalizeResult{}, fmt.Errorf("finalize %s: run %d has not started (current %d): %w", id, run, b.Run, api.ErrNotFound)
	}
	log := f.Log.With("batch_id", id, "run", run)
	if b.Status == api.StatusSubmitting {
		return FinalizeResult{}, fmt.Errorf("finalize %s: its source is still being read: %w", id, api.ErrNotFinished)
	}
	if b.Status.Finished() {
		rep, err := f.readReport(ctx, id, run)
		if err == nil && b.PublishedRun < run {
			// An earlier call moved the run and died before its event was
			// marked published: publish it (at least once).
			f.announce(ctx, log, b, rep)
		}
		return FinalizeResult{Report: rep}, err
	}
	cp, res, err := f.countRows(ctx, b, log, call)
	if cp == nil || err != nil {
		return res, err
	}
	rep, err := f.report(ctx, b, cp)
	if err != nil {
		return FinalizeResult{}, err
	}
	return f.finish(ctx, b, log, rep, cp.LastOutcomeAt)
}

// countRows counts the rows of b's run, in chunks across calls from its
// checkpoint (chunk.go), and returns the checkpoint once every row is
// counted. A call that does not end the count returns no checkpoint and
// its answer: Continued (it wrote a chunk, or another call did), the
// answer of a run read in parts (finalizeInParts), or the report of a
// call that finished the run meanwhile.
func (f *Finalizer) countRows(ctx context.Context, b ledger.Batch, log *slog.Logger, call finalizeCall) (*checkpoint, FinalizeResult, error) {
	id, run := b.ID, b.Run
	cp, err := f.loadCheckpoint(ctx, id, run)
	if err != nil {
		return nil, FinalizeResult{}, fmt.Errorf("finalize %s run %d: checkpoint: %w", id, run, err)
	}
	if cp == nil {
		if parts := f.partsOf(b); parts > 0 {
			res, err := f.finalizeInParts(ctx, b, parts, call.chain)
			return nil, res, err
		}
		cp = newCheckpoint(0, f.Clock.Now())
	} else if !cp.Done && (f.Clock.Now().Sub(cp.ChainStartedAt) > ledger.TTLGrace/2 || b.Packed() && !cp.KeyOrder) {
		// Too old to go on from, or a pack batch's chain begun by the
		// release that wrote its results in manifest order: start over.
		cp = newCheckpoint(cp.Seq, f.Clock.Now())
	}
	if cp.Done {
		return cp, FinalizeResult{}, nil
	}
	if cp.Counted && len(cp.Ranges) > 0 {
		// The merge is split by key ranges, each its own call.
		return f.mergeInRanges(ctx, b, cp, call.chain)
	}
	done, err := f.scanChunk(ctx, b, cp)
	if errors.Is(err, api.ErrConflict) {
		// Another call wrote this checkpoint first: go on from it.
		cp, err = f.loadCheckpoint(ctx, id, run)
		if err == nil && cp == nil {
			// No checkpoint left: that call may have finished the run
			// and deleted them meanwhile; then its report is the answer.
			if nb, gerr := f.Store.GetBatch(ctx, id); gerr == nil && nb.Run == run && nb.Status.Finished() {
				rep, err := f.readReport(ctx, id, run)
				return nil, FinalizeResult{Report: rep}, err
			}
		}
		if err == nil && (cp == nil || !cp.Done) {
			return nil, FinalizeResult{Continued: true}, nil
		}
		done = true
	}
	if err != nil {
		return nil, FinalizeResult{}, fmt.Errorf("finalize %s run %d: %w", id, run, err)
	}
	if !done {
		log.InfoContext(ctx, "finalize chunk written; the next call goes on from it", "checkpoint", cp.Seq, "rows", cp.Rows)
		return nil, FinalizeResult{Continued: true}, nil
	}
	return cp, FinalizeResult{}, nil
}

// report is the report of b's run from cp, the checkpoint of its counted
// rows: the census (an item without a row is pending), the results' parts
// (completeResults), the usage, the threshold's verdict and the status the
// run ends in (a stop's, threshold_exceeded or completed).
func (f *Finalizer) report(ctx context.Context, b ledger.Batch, cp *checkpoint) (api.Report, error) {
	id, run := b.ID, b.Run
	census := cp.Census
	census.Total = b.ItemCount
	census.Pending = b.ItemCount - cp.Rows
	results, err := f.completeResults(ctx, id, run, cp)
	if err != nil {
		return api.Report{}, fmt.Errorf("finalize %s run %d: results: %w", id, run, err)
	}

	progress, err := f.Store.Progress(ctx, id, run, max(1, b.CounterShards))
	if err != nil {
		return api.Report{}, fmt.Errorf("finalize %s run %d: usage: %w", id, run, err)
	}
	now := f.Clock.Now()
	verdict := b.Threshold.Judge(census.Failed+census.Quarantined, census.Total)
	status := api.StatusCompleted
	switch {
	case b.Stop != "":
		status = b.Stop
	case verdict.Exceeded:
		status = api.StatusThresholdExceeded
	}
	bucket := f.Blobs.Bucket()
	var check *api.SampleCheck
	if run == 1 {
		check = sample.Check(b.Approval, sample.Done{Census: census, SpentUSD: spend.RunSpend(census.RunSpent, progress.Usage).USD, StartedAt: b.RunStartedAt, FinishedAt: now})
	}
	return api.Report{
		BatchID: id, Run: run, Pipeline: b.Pipeline, SubmittedBy: b.SubmittedBy, Status: status, StopDetail: b.StopDetail, Stop: api.StopSummaryOf(b.Batch, census),
		NeedsAttention: census.NeedsAttention() || len(b.Halts) > 0, Census: census,
		Threshold: b.Threshold, Verdict: verdict,
		Manifest:     api.Location{URI: "s3://" + bucket + "/" + b.ManifestKey, Digest: b.Digest, Bytes: b.ManifestBytes},
		Revision:     runRevision(b),
		Results:      results,
		Outputs:      "s3://" + bucket + "/" + api.OutputsPrefix(id),
		CreatedAt:    b.CreatedAt,
		RunStartedAt: b.RunStartedAt,
		FinishedAt:   now,
		Usage:        progress.Usage,
		Sample:       check,
		Retries:      retryCounts(progress),
		Paused:       b.PausedSummary(now),
		Lifted:       b.LiftedSummary(),
		Halts:        halts(b.Halts),
	}, nil
}

// retryCounts is the report's count of p's attempts that did not end their
// item; nil when there was none.
func retryCounts(p ledger.Progress) *api.RetryCounts {
	sum := func(m map[int64]int64) (n int64) {
		for _, v := range m {
			n += v
		}
		return max(0, n)
	}
	// The totals, never pruned; a run counted before them, the buckets
	// (which a store may have pruned of their past minutes).
	r := api.RetryCounts{Scheduled: max(p.Retried, sum(p.RetryDue)), Throttled: max(p.RetriedThrottled, sum(p.ThrottledDue)),
		Interrupted: max(0, p.Interrupted), TimedOut: max(0, p.TimedOut)}
	for class, c := range p.Causes {
		if n := max(c.Total, sum(c.Due)); n > 0 {
			r.Causes = append(r.Causes, api.RetryCause{Class: class, Items: n, Error: c.Error})
		}
	}
	if r.Scheduled+r.Interrupted+r.TimedOut == 0 && len(r.Causes) == 0 {
		return nil
	}
	slices.SortFunc(r.Causes, func(a, b api.RetryCause) int {
		return cmp.Or(cmp.Compare(b.Items, a.Items), cmp.Compare(a.Class, b.Class))
	})
	return &r
}

// halts is the report's list of the halts hs, by subject; nil when none.
func halts(hs map[string]api.Halt) []api.Halt {
	var out []api.Halt
	for _, subject := range slices.Sorted(maps.Keys(hs)) {
		h := hs[subject]
		h.Subject = subject
		out = append(out, h)
	}
	return out
}

// finish writes rep as the report of b's run if it is absent (a report
// another call wrote first is kept, and answered), sets the rows' TTL,
// moves the batch row from running to the report's status if still
// running this run, announces the run (the call that moved it), and
// deletes the run's checkpoints. lastOutcomeAt is when the run's last
// outcome was written: the finalize lag runs from it.
func (f *Finalizer) finish(ctx context.Context, b ledger.Batch, log *slog.Logger, rep api.Report, lastOutcomeAt time.Time) (FinalizeResult, error) {
	id, run := b.ID, b.Run
	body, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return FinalizeResult{}, err
	}
	wrote := true
	key := api.ReportKey(id, run)
	if err := f.Blobs.PutIfAbsent(ctx, key, "application/json", append(body, '\n')); err != nil {
		if !errors.Is(err, api.ErrConflict) {
			return FinalizeResult{}, fmt.Errorf("finalize %s run %d: write report: %w", id, run, err)
		}
		wrote = false
		if rep, err = f.readReport(ctx, id, run); err != nil {
			return FinalizeResult{}, err
		}
	}
	if wrote && !lastOutcomeAt.IsZero() {
		f.Metrics.FinalizeLag(rep.FinishedAt.Sub(lastOutcomeAt), id, run)
	}
	if wrote {
		// The finished run's failure rate, for the failing-items alarm: a
		// run that fails between two ticks is seen here.
		c := rep.Census
		f.Metrics.RunHealth(id, run, c.Total, c.Succeeded+c.Failed+c.Quarantined, c.Failed+c.Quarantined, 0, -1)
	}
	// Every row of the finished batch carries a TTL past its retention
	// (the second line of defence behind the sweep), set before the run
	// is moved so that no finished batch lacks it.
	expires := rep.FinishedAt.Add(f.Retention)
	rowsExpire := expires.Add(ledger.TTLGrace)
	if err := f.Store.KeepRows(ctx, b, nil, rowsExpire); err != nil { // the counter rows; item rows as they were counted
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: row TTL: %w", id, run, err)
	}
	err = f.Store.FinishRun(ctx, id, run, ledger.Finish{
		Status: rep.Status, ReportKey: key, Census: rep.Census.Bounded(), NeedsAttention: rep.NeedsAttention, FinishedAt: rep.FinishedAt,
		ExpiresAt: expires, RowsExpireAt: rowsExpire,
	})
	if err != nil && !errors.Is(err, api.ErrConflict) {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: finish: %w", id, run, err)
	}
	// The call that moved the run announces it (even if another call wrote
	// the report); if it dies first, a retried finalize or the tick does.
	if err == nil {
		f.announce(ctx, log, b, rep)
	}
	// The checkpoints served their purpose (forget deletes them too).
	if _, err := f.Blobs.DeletePrefix(ctx, FinalizePrefix(id, run)); err != nil {
		log.WarnContext(ctx, "delete finalize checkpoints", "error", err.Error())
	}
	if wrote {
		census := rep.Census
		log.InfoContext(ctx, "run finalized", "status", string(rep.Status), "succeeded", census.Succeeded, "failed", census.Failed,
			"quarantined", census.Quarantined, "cancelled", census.Cancelled)
	}
	return FinalizeResult{Report: rep, Wrote: wrote}, nil
}

// announce publishes the run's completion event, answers the task
// token of b (ledger.TaskEnd: its first run), and then marks the run
// published. A failure is logged and left to the tick, which retries
// until the mark is set: delivery is at least once, and every delivery of
// one run carries the same EventID; a token answered by a call that died
// before the mark is ErrTaskGone the next time, so Step Functions gets
// one answer per run.
func (f *Finalizer) announce(ctx context.Context, log *slog.Logger, b ledger.Batch, rep api.Report) bool {
	if f.Events != nil {
		if err := f.Events.Publish(ctx, rep); err != nil {
			log.WarnContext(ctx, "publish event; the tick retries", "error", err.Error())
			return false
		}
	}
	out, failName, cause := taskAnswer(f.Blobs.Bucket(), rep)
	if err := ledger.TaskEnd(ctx, f.Tasks, log, b, rep.Run, out, failName, cause); err != nil {
		log.WarnContext(ctx, "answer the task token; the tick retries", "error", err.Error())
		return false
	}
	if err := f.Store.SetPublished(ctx, rep.BatchID, rep.Run); err != nil {
		log.WarnContext(ctx, "mark event published; the tick retries", "error", err.Error())
		return false
	}
	return true
}

// taskAnswer is how a finished run answers its task token: a
// TaskOutput for completed and threshold_exceeded (the state machine
// branches on its status), else SendTaskFailure's error name and cause.
func taskAnswer(bucket string, rep api.Report) (*api.TaskOutput, string, string) {
	if rep.Status == api.StatusCancelled {
		cause := rep.StopDetail
		if cause == "" {
			cause = "cancelled"
		}
		return nil, api.TaskErrorCancelled, cause
	}
	return &api.TaskOutput{
		BatchID: rep.BatchID, Run: rep.Run, Status: rep.Status, Census: rep.Census, Verdict: rep.Verdict,
		Report: "s3://" + bucket + "/" + api.ReportKey(rep.BatchID, rep.Run), Results: rep.Results, Outputs: rep.Outputs,
	}, "", ""
}

func (f *Finalizer) readReport(ctx context.Context, id string, run int) (api.Report, error) {
	body, err := f.Blobs.Get(ctx, api.ReportKey(id, run))
	if err != nil {
		return api.Report{}, fmt.Errorf("read report %s run %d: %w", id, run, err)
	}
	var rep api.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return api.Report{}, fmt.Errorf("read report %s run %d: %w", id, run, err)
	}
	return rep, nil
}

// TickResult counts what one Tick did.
type TickResult struct {
	Running   int // running batches seen
	Checked   int // batches whose rows were counted
	Finalized int // runs finalized by this tick
	FannedOut int // runs whose lost fan-out this tick sent again
	Published int // finished runs whose completion event this tick published
	Beats     int // task heartbeats sent (ledger.TaskBeat)
}

// PausedStall is how often the tick counts the rows of a paused run whose
// counters stand still short of its items: once an hour, not at every
// tick (its items wait for the pause; the count is for a run whose last
// counter write was lost while every item had ended).
const PausedStall = time.Hour

// Tick is the scheduled backstop: first it sends the task heartbeat of
// every batch whose first run goes and asks for them (heartbeats); then
// for each running batch whose counters say
// it is done, or have not moved for Stall (a paused one: in one Stall-long
// window per PausedStall), it tries Finalize; then it
// publishes the completion event of every finished run not yet marked
// published (a finalize died between moving the run and publishing). It
// returns the errors after trying every batch.
func (f *Finalizer) Tick(ctx context.Context) (TickResult, error) {
	stall := f.Stall
	if stall <= 0 {
		stall = 5 * time.Minute
	}
	ids, err := f.Store.RunningBatches(ctx)
	if err != nil {
		return TickResult{}, fmt.Errorf("tick: list running: %w", err)
	}
	res := TickResult{Running: len(ids), Beats: f.heartbeats(ctx, ids)}
	var errs []error
	now := f.Clock.Now()
	// A random order, and a stop a minute before the deadline, so that no
	// batch is starved by others ahead of it in every tick.
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Minute {
			break
		}
		b, err := f.Store.GetBatch(ctx, id)
		if err != nil {
			if !errors.Is(err, api.ErrNotFound) {
				errs = append(errs, err)
			}
			continue
		}
		if b.Status.Finished() || b.Status == api.StatusSubmitting { // submit's own tick looks after submitting batches
			continue
		}
		if !b.FannedOut && b.ItemCount > 0 {
			f.Metrics.RunHealth(id, b.Run, b.RunItems(), 0, 0, 0, max(0, now.Sub(b.RunStartedAt)))
			// The submit (or resume) that started the run died before its
			// fan-out was sent: send it again.
			if f.FanOut != nil && now.Sub(b.RunStartedAt) >= stall {
				if err := f.FanOut(ctx, b); err != nil {
					errs = append(errs, fmt.Errorf("tick: fan out %s run %d: %w", id, b.Run, err))
				} else {
					res.FannedOut++
					f.Log.WarnContext(ctx, "tick re-sent a lost fan-out", "batch_id", id, "run", b.Run)
				}
			}
			continue
		}
		p, err := f.Store.Progress(ctx, id, b.Run, max(1, b.CounterShards))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if b.Stop != "" && f.Settle != nil && p.HeldItems() > 0 {
			// A stopped run's held items have no message of their own: the
			// stop's wake moves them on; what it could not reach, this
			// does (a pass over the run's attention entries, so only while
			// the counters hold some).
			if err := f.Settle(ctx, b); err != nil {
				errs = append(errs, fmt.Errorf("tick: settle the held items of stopped %s run %d: %w", id, b.Run, err))
			}
		}
		last := p.UpdatedAt
		if last.Before(b.RunStartedAt) {
			last = b.RunStartedAt
		}
		// The run's health, for the alarms on failing items, items
		// waiting for a retry and runs without progress (metric.RunHealth).
		// A paused run waits and stands still on purpose: the
		// batches-paused alarm and its event tell of an outage's pause.
		ended := p.ByOutcome[api.OutcomeSucceeded] + p.ByOutcome[api.OutcomeFailed] + p.ByOutcome[api.OutcomeQuarantined]
		waiting, stalled := p.Waiting(now), max(0, now.Sub(last))
		// A sampled run awaiting a decision waits on purpose, as a paused
		// one does: no stall alarm, rows counted rarely (a sample still
		// running is watched as any run).
		waits := b.Pause != nil || b.Run == 1 && b.Approval != nil && b.Approval.State == api.ApprovalAwaiting
		if waits {
			waiting, stalled = 0, -1
		}
		f.Metrics.RunHealth(id, b.Run, b.RunItems(), ended, p.Failures, waiting, stalled)
		if p.Done < b.RunItems() && (now.Sub(last) < stall || waits && now.Sub(last)%PausedStall >= stall) {
			// Counters still short: moving, or standing still while
			// paused or awaiting approval (its items wait, nothing is
			// lost), when the rows are counted only once per PausedStall.
			continue
		}
		res.Checked++
		// As a triggered call's: an object found gone because another
		// call finished the run meanwhile is the report, not an error.
		r, err := f.finalize(ctx, id, b.Run, finalizeCall{})
		r, err = f.answer(ctx, id, b.Run, r, err)
		switch {
		case err == nil && r.Wrote:
			res.Finalized++
		case err != nil && !errors.Is(err, api.ErrNotFinished):
			errs = append(errs, err)
		}
	}
	n, err := f.publishLost(ctx)
	res.Published = n
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		f.Metrics.TickFailed()
	}
	return res, errors.Join(errs...)
}

// heartbeats sends the task heartbeat of each batch of ids that asks for
// them (ledger.TaskBeat: submitting, running or paused in its first run)
// and returns how many were taken. It goes before the tick's other work,
// which may take the rest of the call, so every batch's task hears from
// it once per tick. A failure is logged and left to the next tick: a
// heartbeat never fails the tick nor touches the run.
func (f *Finalizer) heartbeats(ctx context.Context, ids []string) int {
	if f.Tasks == nil {
		return 0
	}
	n := 0
	for _, id := range ids {
		b, err := f.Store.GetBatch(ctx, id)
		if err != nil {
			if !errors.Is(err, api.ErrNotFound) {
				f.Log.WarnContext(ctx, "task heartbeat: read the batch; the next tick sends again", "batch_id", id, "error", err.Error())
			}
			continue
		}
		sent, err := ledger.TaskBeat(ctx, f.Tasks, f.Store, f.Log, b)
		if err != nil {
			f.Log.WarnContext(ctx, "task heartbeat; the next tick sends again", "batch_id", id, "error", err.Error())
		} else if sent {
			n++
		}
	}
	return n
}

// publishLost publishes the events of finished runs not marked published.
func (f *Finalizer) publishLost(ctx context.Context) (int, error) {
	refs, err := f.Store.Unpublished(ctx)
	if err != nil {
		return 0, fmt.Errorf("tick: list unpublished: %w", err)
	}
	n := 0
	var errs []error
	for _, ref := range refs {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Minute {
			break
		}
		log := f.Log.With("batch_id", ref.BatchID, "run", ref.Run)
		b, err := f.Store.GetBatch(ctx, ref.BatchID)
		switch {
		case errors.Is(err, api.ErrNotFound), err == nil && b.PublishedRun >= ref.Run:
			// Forgotten, or published and not yet unlisted.
			if err := f.Store.SetPublished(ctx, ref.BatchID, ref.Run); err != nil {
				errs = append(errs, err)
			}
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		rep, err := f.readReport(ctx, ref.BatchID, ref.Run)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if f.announce(ctx, log, b, rep) {
			log.WarnContext(ctx, "tick published a lost completion event", "event_id", ledger.EventID(rep))
			n++
		}
	}
	return n, errors.Join(errs...)
}

// resultFile is one entry of manifest.json (Distributed Map's ResultWriter
// manifest shape: {"Key", "Size"}).
type resultFile struct {
	Key  string `json:"Key"`
	Size int64  `json:"Size"`
}

// completeResults completes the results upload of every outcome of a done
// checkpoint and writes manifest.json. Idempotent.
func (f *Finalizer) completeResults(ctx context.Context, id string, run int, cp *checkpoint) (api.Results, error) {
	bucket := f.Blobs.Bucket()
	res := api.Results{Manifest: "s3://" + bucket + "/" + api.ResultsManifestKey(id, run), Files: map[api.Outcome]api.Location{}}
	files := map[string][]resultFile{}
	for _, o := range api.TerminalOutcomes() {
		files[strings.ToUpper(string(o))] = []resultFile{}
	}
	files["PENDING"] = []resultFile{}
	for _, o := range api.TerminalOutcomes() {
		file := cp.Files[o]
		if file == nil {
			continue
		}
		key := api.ResultsKey(id, run, o)
		if err := f.Blobs.CompleteParts(ctx, key, file.UploadID, file.Parts, file.Bytes); err != nil {
			return api.Results{}, err
		}
		res.Files[o] = api.Location{URI: "s3://" + bucket + "/" + key, Bytes: file.Bytes}
		files[strings.ToUpper(string(o))] = []resultFile{{Key: key, Size: file.Bytes}}
	}
	manifest, err := json.MarshalIndent(struct {
		DestinationBucket string                  `json:"DestinationBucket"`
		BatchID           string                  `json:"BatchId"`
		Run               int                     `json:"Run"`
		ResultFiles       map[string][]resultFile `json:"ResultFiles"`
	}{bucket, id, run, files}, "", "  ")
	if err != nil {
		return api.Results{}, err
	}
	if err := f.Blobs.Put(ctx, api.ResultsManifestKey(id, run), "application/json", manifest); err != nil {
		return api.Results{}, err
	}
	return res, nil
}
