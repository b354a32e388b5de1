package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/metric"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// RunPrefix is where a run's report and results live.
func RunPrefix(batchID string, run int) string {
	return fmt.Sprintf("batches/%s/runs/%d/", batchID, run)
}

// ReportKey is the key of a run's report.
func ReportKey(batchID string, run int) string { return RunPrefix(batchID, run) + "report.json" }

// ResultsKey is the key of a run's results file for one outcome.
func ResultsKey(batchID string, run int, o Outcome) string {
	return RunPrefix(batchID, run) + "results/" + string(o) + ".jsonl"
}

// ResultsManifestKey is the key of a run's results manifest.json.
func ResultsManifestKey(batchID string, run int) string {
	return RunPrefix(batchID, run) + "results/manifest.json"
}

// CensusOf counts a run's items by outcome from their rows (never from
// counters), calling each (optional) with every row that belongs to the run
// and its outcome in the run. Items without a row, and failed, cancelled or
// released quarantined rows of an earlier run, are pending in this run;
// succeeded and (unreleased) quarantined rows of an earlier run keep their
// outcome.
func CensusOf(ctx context.Context, store Store, b Batch, each func(Item, Outcome) error) (Census, error) {
	c := Census{Cost: pipeline.CostSum{}, RunSpent: pipeline.CostSum{}}
	var rows int64
	err := store.ScanItems(ctx, b.ID, b.ListShards, func(it Item) error {
		o := it.Outcome
		if it.Run < b.Run && (o == OutcomeFailed || o == OutcomeCancelled || o == OutcomeInFlight || o == OutcomeQuarantined && it.Released) {
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
		return Census{}, err
	}
	c.Total = b.ItemCount
	c.Pending = b.ItemCount - rows
	return c, nil
}

// Finalizer writes a run's results and report once every item is terminal,
// and moves the batch to its final status. Safe for concurrent use; any
// number of concurrent or repeated calls for one run write one report.
type Finalizer struct {
	Store     Store
	Blobs     Blobs
	Clock     Clock
	Log       *slog.Logger
	Retention time.Duration // how long a finished batch is kept
	Events    Events        // where finished runs are announced; nil for none
	// Stall is how long a running batch's counters may stand still before
	// Tick counts its items from the rows (the backstop for lost counter
	// writes), and how long after its start a run may stay not fanned out
	// before Tick sends its fan-out again. Default 5 minutes.
	Stall time.Duration
	// FanOut re-sends a run's fan-out (Submitter.FanOut); nil disables that
	// part of the tick.
	FanOut func(ctx context.Context, b Batch) error
	// Metrics receives the finalize lag and tick failures; nil for none.
	Metrics *metric.Emitter
}

// FinalizeResult says what Finalize did.
type FinalizeResult struct {
	Report Report
	// Wrote is true for the one call that wrote the report; false when the
	// report already existed.
	Wrote bool
}

// Finalize finishes run of batch id. It returns ErrNotFinished (wrapped)
// when an item is still pending or in flight, ErrNotFound for an unknown
// batch, and the stored report (Wrote false) when the run was finalized
// already. Steps: census and results in one pass over the rows, the report
// written only if absent (S3 If-None-Match), then the batch row moved from
// running to its final status only if still running this run.
func (f *Finalizer) Finalize(ctx context.Context, id string, run int) (FinalizeResult, error) {
	b, err := f.Store.GetBatch(ctx, id)
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s: %w", id, err)
	}
	if run != b.Run {
		if run < b.Run {
			rep, err := f.readReport(ctx, id, run)
			return FinalizeResult{Report: rep}, err
		}
		return FinalizeResult{}, fmt.Errorf("finalize %s: run %d has not started (current %d): %w", id, run, b.Run, ErrNotFound)
	}
	log := f.Log.With("batch_id", id, "run", run)
	if b.Status == StatusSubmitting {
		return FinalizeResult{}, fmt.Errorf("finalize %s: its source is still being read: %w", id, ErrNotFinished)
	}
	if b.Status.Finished() {
		rep, err := f.readReport(ctx, id, run)
		if err == nil && b.PublishedRun < run {
			// An earlier call moved the run and died before its event was
			// marked published: publish it (at least once).
			f.announce(ctx, log, rep)
		}
		return FinalizeResult{Report: rep}, err
	}

	// Rows whose TTL ends less than half the grace after the retention
	// (written long before the finish, or without a TTL) get it extended
	// to the full grace below; rows written with the stack's row TTL
	// (retention + grace) during the last half grace before the finish
	// need no write.
	keepBefore := f.Clock.Now().Add(f.Retention + TTLGrace/2)
	var keep []string
	var lastOutcomeAt time.Time // the finalize lag runs from here
	rw := newResultsWriter(ctx, f.Blobs, id, run)
	census, err := CensusOf(ctx, f.Store, b, func(it Item, o Outcome) error {
		if !o.Terminal() {
			return fmt.Errorf("item %q is %s: %w", it.Key, o, ErrNotFinished)
		}
		if it.UpdatedAt.After(lastOutcomeAt) {
			lastOutcomeAt = it.UpdatedAt
		}
		if it.ExpiresAt.Before(keepBefore) {
			keep = append(keep, it.Key)
		}
		return rw.add(it, o)
	})
	if err == nil && !census.Done() {
		err = fmt.Errorf("%d items pending: %w", census.Pending, ErrNotFinished)
	}
	if err != nil {
		rw.abort()
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: %w", id, run, err)
	}
	results, err := rw.close()
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: results: %w", id, run, err)
	}

	progress, err := f.Store.Progress(ctx, id, run, max(1, b.CounterShards))
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: usage: %w", id, run, err)
	}
	now := f.Clock.Now()
	verdict := b.Threshold.Judge(census.Failed+census.Quarantined, census.Total)
	status := StatusCompleted
	switch {
	case b.Stop != "":
		status = b.Stop
	case verdict.Exceeded:
		status = StatusThresholdExceeded
	}
	bucket := f.Blobs.Bucket()
	rep := Report{
		BatchID: id, Run: run, Pipeline: b.Pipeline, SubmittedBy: b.SubmittedBy, Status: status, StopDetail: b.StopDetail,
		NeedsAttention: census.NeedsAttention(), Census: census,
		Threshold: b.Threshold, Verdict: verdict,
		Manifest:     Location{URI: "s3://" + bucket + "/" + b.ManifestKey, Digest: b.Digest, Bytes: b.ManifestBytes},
		Results:      results,
		Outputs:      "s3://" + bucket + "/" + OutputsPrefix(id),
		CreatedAt:    b.CreatedAt,
		RunStartedAt: b.RunStartedAt,
		FinishedAt:   now,
		Usage:        progress.Usage,
	}
	body, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return FinalizeResult{}, err
	}
	wrote := true
	key := ReportKey(id, run)
	if err := f.Blobs.PutIfAbsent(ctx, key, "application/json", append(body, '\n')); err != nil {
		if !errors.Is(err, ErrConflict) {
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
	// Every row of the finished batch carries a TTL past its retention
	// (the second line of defence behind the sweep), set before the run
	// is moved so that no finished batch lacks it.
	expires := rep.FinishedAt.Add(f.Retention)
	rowsExpire := expires.Add(TTLGrace)
	if err := f.Store.KeepRows(ctx, b, keep, rowsExpire); err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: row TTL: %w", id, run, err)
	}
	err = f.Store.FinishRun(ctx, id, run, Finish{
		Status: rep.Status, ReportKey: key, Census: rep.Census, FinishedAt: rep.FinishedAt,
		ExpiresAt: expires, RowsExpireAt: rowsExpire,
	})
	if err != nil && !errors.Is(err, ErrConflict) {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: finish: %w", id, run, err)
	}
	// The call that moved the run announces it (even if another call wrote
	// the report); if it dies first, a retried finalize or the tick does.
	if err == nil {
		f.announce(ctx, log, rep)
	}
	if wrote {
		log.Info("run finalized", "status", string(rep.Status), "succeeded", census.Succeeded, "failed", census.Failed,
			"quarantined", census.Quarantined, "cancelled", census.Cancelled)
	}
	return FinalizeResult{Report: rep, Wrote: wrote}, nil
}

// announce publishes the run's completion event and then marks it
// published. A failure is logged and left to the tick, which retries
// until the mark is set: delivery is at least once, and every delivery of
// one run carries the same EventID.
func (f *Finalizer) announce(ctx context.Context, log *slog.Logger, rep Report) bool {
	if f.Events != nil {
		if err := f.Events.Publish(ctx, rep); err != nil {
			log.Warn("publish event; the tick retries", "error", err.Error())
			return false
		}
	}
	if err := f.Store.SetPublished(ctx, rep.BatchID, rep.Run); err != nil {
		log.Warn("mark event published; the tick retries", "error", err.Error())
		return false
	}
	return true
}

// EventID identifies a run's completion event for subscribers to dedupe
// on: "{batch_id}:{run}:{created_at epoch ms}", the same for every
// delivery of the run, and different for a later batch that reuses the id
// after the first was forgotten or expired.
func EventID(r Report) string {
	return fmt.Sprintf("%s:%d:%d", r.BatchID, r.Run, r.CreatedAt.UnixMilli())
}

func (f *Finalizer) readReport(ctx context.Context, id string, run int) (Report, error) {
	body, err := f.Blobs.Get(ctx, ReportKey(id, run))
	if err != nil {
		return Report{}, fmt.Errorf("read report %s run %d: %w", id, run, err)
	}
	var rep Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return Report{}, fmt.Errorf("read report %s run %d: %w", id, run, err)
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
}

// Tick is the scheduled backstop: for each running batch whose counters say
// it is done, or have not moved for Stall, it tries Finalize; then it
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
	res := TickResult{Running: len(ids)}
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
			if !errors.Is(err, ErrNotFound) {
				errs = append(errs, err)
			}
			continue
		}
		if b.Status.Finished() || b.Status == StatusSubmitting { // submit's own tick looks after submitting batches
			continue
		}
		if !b.FannedOut && b.ItemCount > 0 {
			// The submit (or resume) that started the run died before its
			// fan-out was sent: send it again.
			if f.FanOut != nil && now.Sub(b.RunStartedAt) >= stall {
				if err := f.FanOut(ctx, b); err != nil {
					errs = append(errs, fmt.Errorf("tick: fan out %s run %d: %w", id, b.Run, err))
				} else {
					res.FannedOut++
					f.Log.Warn("tick re-sent a lost fan-out", "batch_id", id, "run", b.Run)
				}
			}
			continue
		}
		p, err := f.Store.Progress(ctx, id, b.Run, max(1, b.CounterShards))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		last := p.UpdatedAt
		if last.Before(b.RunStartedAt) {
			last = b.RunStartedAt
		}
		if p.Done < b.ItemCount && now.Sub(last) < stall {
			continue
		}
		res.Checked++
		r, err := f.Finalize(ctx, id, b.Run)
		switch {
		case err == nil && r.Wrote:
			res.Finalized++
		case err != nil && !errors.Is(err, ErrNotFinished):
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
		case errors.Is(err, ErrNotFound), err == nil && b.PublishedRun >= ref.Run:
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
		if f.announce(ctx, log, rep) {
			log.Warn("tick published a lost completion event", "event_id", EventID(rep))
			n++
		}
	}
	return n, errors.Join(errs...)
}

// resultsWriter streams one JSONL file per outcome and the manifest.json.
type resultsWriter struct {
	ctx     context.Context
	blobs   Blobs
	id      string
	run     int
	writers map[Outcome]BlobWriter
	bytes   map[Outcome]int64
}

func newResultsWriter(ctx context.Context, blobs Blobs, id string, run int) *resultsWriter {
	return &resultsWriter{ctx: ctx, blobs: blobs, id: id, run: run, writers: map[Outcome]BlobWriter{}, bytes: map[Outcome]int64{}}
}

func (r *resultsWriter) add(it Item, o Outcome) error {
	w := r.writers[o]
	if w == nil {
		var err error
		if w, err = r.blobs.Create(r.ctx, ResultsKey(r.id, r.run, o), "application/x-ndjson"); err != nil {
			return err
		}
		r.writers[o] = w
	}
	line, err := json.Marshal(ResultLine{Key: it.Key, Outcome: o, Output: it.Output, OutputRef: it.OutputRef,
		Error: it.Error, Reason: it.Reason, Attempts: it.RunAttempts, Cost: it.Cost})
	if err != nil {
		return err
	}
	line = append(line, '\n')
	n, err := w.Write(line)
	r.bytes[o] += int64(n)
	return err
}

func (r *resultsWriter) abort() {
	for _, w := range r.writers {
		_ = w.Abort()
	}
}

// resultFile is one entry of manifest.json (Distributed Map's ResultWriter
// manifest shape: {"Key", "Size"}).
type resultFile struct {
	Key  string `json:"Key"`
	Size int64  `json:"Size"`
}

func (r *resultsWriter) close() (Results, error) {
	bucket := r.blobs.Bucket()
	res := Results{Manifest: "s3://" + bucket + "/" + ResultsManifestKey(r.id, r.run), Files: map[Outcome]Location{}}
	files := map[string][]resultFile{}
	for _, o := range TerminalOutcomes() {
		files[strings.ToUpper(string(o))] = []resultFile{}
	}
	files["PENDING"] = []resultFile{}
	for _, o := range TerminalOutcomes() {
		w := r.writers[o]
		if w == nil {
			continue
		}
		if err := w.Close(); err != nil {
			r.abort()
			return Results{}, err
		}
		key := ResultsKey(r.id, r.run, o)
		res.Files[o] = Location{URI: "s3://" + bucket + "/" + key, Bytes: r.bytes[o]}
		files[strings.ToUpper(string(o))] = []resultFile{{Key: key, Size: r.bytes[o]}}
	}
	manifest, err := json.MarshalIndent(struct {
		DestinationBucket string                  `json:"DestinationBucket"`
		BatchID           string                  `json:"BatchId"`
		Run               int                     `json:"Run"`
		ResultFiles       map[string][]resultFile `json:"ResultFiles"`
	}{bucket, r.id, r.run, files}, "", "  ")
	if err != nil {
		return Results{}, err
	}
	if err := r.blobs.Put(r.ctx, ResultsManifestKey(r.id, r.run), "application/json", manifest); err != nil {
		return Results{}, err
	}
	return res, nil
}

// ReadResults parses a results file (JSONL of ResultLine), calling fn per line.
func ReadResults(r io.Reader, fn func(ResultLine) error) error {
	dec := json.NewDecoder(r)
	for {
		var l ResultLine
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("results: %w", err)
		}
		if err := fn(l); err != nil {
			return err
		}
	}
}
