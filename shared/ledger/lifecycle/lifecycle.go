// Package lifecycle holds the ledger's commands that move a batch
// through its life as a whole: stopping a run (StopRun: a cancel, an
// early stop) and forgetting a batch (Forget, ForgetStale: a caller's
// DELETE, the sweep at the end of the retention, a submit that reuses a
// stale batch's id). Each is written against the part of ledger.Store it
// needs, so that a function's store interface names only those methods.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// BatchDeleter is what Forget needs of the store (ledger.Store documents
// each method).
type BatchDeleter interface {
	GetBatch(ctx context.Context, id string) (ledger.Batch, error)
	MarkForgetting(ctx context.Context, m ledger.ForgetMark) error
	DeleteBatch(ctx context.Context, b ledger.Batch) error
}

// Forget removes everything the batch owns: it flags the batch as being
// forgotten (pending_deletion; no resume can start a run from then on),
// deletes its objects under batches/{id}/ (manifests, outputs, results,
// reports), then its rows, the batch row and its retention markers last. A
// later submit of the id starts from nothing. An expired batch may be
// forgotten. Retrying an interrupted forget finishes it. Errors:
// ErrNotFound; ErrConflict while a run is going (cancel it first) or the
// source is still being read; ErrPendingDeletion (wrapped, with the
// cause) when deleting started and did not finish. A caller's forget
// (control), the sweep at the end of the retention and a submit that
// reuses the id of a stale batch all forget with it.
func Forget(ctx context.Context, store BatchDeleter, blobs ledger.Blobs, id string, log *slog.Logger) error {
	return forget(ctx, store, blobs, id, time.Time{}, log, 0)
}

// ForgetStale is Forget for a submit that reuses the id of a stale batch
// and creates a new batch under it once the old one is gone: it must be
// the only forget of the batch, or another, still deleting, would delete
// the new batch's rows and objects (its item and counter rows and its
// manifest share the old one's keys). So it is refused (ledger.ErrForgetGoing)
// while another forget marked the batch within ledger.ForgetQuiet, and when
// another forget marks it while it deletes (that one then deletes the
// batch row). stale is the batch the submit found stale: a batch of the
// id created since (another submit cleared it first) is not forgotten
// (ErrNotFound: the submit then finds that batch). The refusal holds
// ForgetQuiet after the last mark, this call's own earlier ones
// included (a forget that failed half-way cannot be told from one still
// going).
func ForgetStale(ctx context.Context, store BatchDeleter, blobs ledger.Blobs, stale ledger.Batch, log *slog.Logger) error {
	return forget(ctx, store, blobs, stale.ID, stale.CreatedAt, log, ledger.ForgetQuiet)
}

// forget forgets batch id; with created set, only the batch of the id
// created then.
func forget(ctx context.Context, store BatchDeleter, blobs ledger.Blobs, id string, created time.Time, log *slog.Logger, quiet time.Duration) error {
	b, err := store.GetBatch(ctx, id)
	if err != nil {
		return err
	}
	if !created.IsZero() && b.CreatedAt.UnixMilli() != created.UnixMilli() {
		return fmt.Errorf("forget %s (created %s): submitted again since: %w", id, created.UTC().Format(time.RFC3339Nano), api.ErrNotFound)
	}
	if b.Status == api.StatusRunning {
		return fmt.Errorf("forget %s: run %d is going; cancel it first: %w", id, b.Run, api.ErrConflict)
	}
	if b.Status == api.StatusSubmitting {
		return fmt.Errorf("forget %s: its source is still being read; forget it once it runs or is refused: %w", id, api.ErrConflict)
	}
	// From here no resume can start a run (StartRun refuses a batch being
	// forgotten), so nothing is deleted under a new run's feet.
	mark := ledger.ForgetMark{BatchID: id, CreatedAt: b.CreatedAt, Now: time.Now().UTC().Truncate(time.Millisecond), Quiet: quiet, Token: ledger.NewTakeToken()}
	if err := store.MarkForgetting(ctx, mark); err != nil {
		switch {
		case errors.Is(err, ledger.ErrForgetGoing):
			return fmt.Errorf("forget %s: %w", id, err)
		case errors.Is(err, api.ErrConflict):
			return fmt.Errorf("forget %s: a run started; cancel it first: %w", id, err)
		}
		return err
	}
	b.ForgettingAt, b.ForgettingBy = mark.Now, mark.Token
	n, err := blobs.DeletePrefix(ctx, api.BatchesPrefix(id))
	if err != nil {
		return fmt.Errorf("forget %s: %d objects deleted: %w: %w", id, n, api.ErrPendingDeletion, err)
	}
	if err := store.DeleteBatch(ctx, b); err != nil {
		return fmt.Errorf("forget %s: %w: %w", id, api.ErrPendingDeletion, err)
	}
	log.InfoContext(ctx, "batch forgotten", "batch_id", id, "objects", n)
	return nil
}

// StopRun marks run of b as stopping with status and detail (Store.Stop),
// with how far the run had got by its counters (one Progress read, O(counter
// shards)): the items that had ended succeeded, failed or quarantined, and
// the failures among them. Items in flight when the stop is marked finish
// after it; the report tells how many (StopSummary). A counter read that
// fails marks the stop without counts (the stop matters more than them).
// ErrConflict as Store.Stop.
func StopRun(ctx context.Context, store RunStopper, b ledger.Batch, run int, status api.Status, detail string) error {
	m := ledger.StopMark{BatchID: b.ID, Run: run, Status: status, Detail: detail}
	if p, err := store.Progress(ctx, b.ID, run, max(1, b.CounterShards)); err == nil {
		m.Ran = p.Done - p.ByOutcome[api.OutcomeCancelled]
		m.Failures = p.ByOutcome[api.OutcomeFailed] + p.ByOutcome[api.OutcomeQuarantined]
	}
	return store.Stop(ctx, m)
}

// RunStopper is what StopRun needs of the store (Store documents each
// method): the run's counters, to record how far it had got, and the stop.
type RunStopper interface {
	Progress(ctx context.Context, batchID string, run, shards int) (ledger.Progress, error)
	Stop(ctx context.Context, m ledger.StopMark) error
}
