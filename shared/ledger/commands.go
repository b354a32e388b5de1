package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// BatchDeleter is what Forget needs of the store (ledger.Store documents
// each method).
type BatchDeleter interface {
	GetBatch(ctx context.Context, id string) (Batch, error)
	MarkForgetting(ctx context.Context, m ForgetMark) error
	DeleteBatch(ctx context.Context, b Batch) error
}

// ForgetMark is a forget's mark on the batch row (Store.MarkForgetting).
type ForgetMark struct {
	BatchID string
	// CreatedAt is the creation time of the batch the forget read: a row
	// of another batch of the id (the id submitted again meanwhile) is
	// not marked. Zero: any.
	CreatedAt time.Time
	// Now stamps the mark (Batch.ForgettingAt).
	Now time.Time
	// Token is the forget's own (NewTakeToken): the batch row is deleted
	// by the forget whose token the row holds (Batch.ForgettingBy).
	Token string
	// Quiet > 0 refuses the mark (ErrForgetGoing) while another forget
	// marked the batch less than Quiet before Now: that forget may still
	// be deleting (ForgetQuiet).
	Quiet time.Duration
}

// ErrForgetGoing says another forget of the batch may still be deleting
// its rows and objects: a forget that must be the only one (ForgetStale)
// was refused its mark, or a forget's batch row was marked since by
// another, which deletes it. It wraps api.ErrConflict.
var ErrForgetGoing = fmt.Errorf("another forget of the batch is going: %w", api.ErrConflict)

// ForgetQuiet is how long after another forget's mark a forget that must
// be the only one (ForgetStale) is refused: a forget runs within one
// function invocation (the control API's, the sweep's, submit's), which
// Lambda ends at its timeout, at most 900 s ("Lambda quotas", Lambda
// developer guide: function timeout), plus a minute for a request sent
// at its end.
const ForgetQuiet = 16 * time.Minute

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
func Forget(ctx context.Context, store BatchDeleter, blobs Blobs, id string, log *slog.Logger) error {
	return forget(ctx, store, blobs, id, log, 0)
}

// ForgetStale is Forget for a submit that reuses the id of a stale batch
// and creates a new batch under it once the old one is gone: it must be
// the only forget of the batch, or another, still deleting, would delete
// the new batch's rows and objects (its item and counter rows and its
// manifest share the old one's keys). So it is refused (ErrForgetGoing)
// while another forget marked the batch within ForgetQuiet, and when
// another forget marks it while it deletes (that one then deletes the
// batch row).
func ForgetStale(ctx context.Context, store BatchDeleter, blobs Blobs, id string, log *slog.Logger) error {
	return forget(ctx, store, blobs, id, log, ForgetQuiet)
}

func forget(ctx context.Context, store BatchDeleter, blobs Blobs, id string, log *slog.Logger, quiet time.Duration) error {
	b, err := store.GetBatch(ctx, id)
	if err != nil {
		return err
	}
	if b.Status == api.StatusRunning {
		return fmt.Errorf("forget %s: run %d is going; cancel it first: %w", id, b.Run, api.ErrConflict)
	}
	if b.Status == api.StatusSubmitting {
		return fmt.Errorf("forget %s: its source is still being read; forget it once it runs or is refused: %w", id, api.ErrConflict)
	}
	// From here no resume can start a run (StartRun refuses a batch being
	// forgotten), so nothing is deleted under a new run's feet.
	mark := ForgetMark{BatchID: id, CreatedAt: b.CreatedAt, Now: time.Now().UTC().Truncate(time.Millisecond), Quiet: quiet, Token: NewTakeToken()}
	if err := store.MarkForgetting(ctx, mark); err != nil {
		switch {
		case errors.Is(err, ErrForgetGoing):
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
func StopRun(ctx context.Context, store RunStopper, b Batch, run int, status api.Status, detail string) error {
	m := StopMark{BatchID: b.ID, Run: run, Status: status, Detail: detail}
	if p, err := store.Progress(ctx, b.ID, run, max(1, b.CounterShards)); err == nil {
		m.Ran = p.Done - p.ByOutcome[api.OutcomeCancelled]
		m.Failures = p.ByOutcome[api.OutcomeFailed] + p.ByOutcome[api.OutcomeQuarantined]
	}
	return store.Stop(ctx, m)
}

// RunStopper is what StopRun needs of the store (Store documents each
// method): the run's counters, to record how far it had got, and the stop.
type RunStopper interface {
	Progress(ctx context.Context, batchID string, run, shards int) (Progress, error)
	Stop(ctx context.Context, m StopMark) error
}
