package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// DefaultSweepLimit is how many retention markers one sweep pass reads.
const DefaultSweepLimit = 100

// Sweeper deletes batches whose retention has passed, oldest first
// (docs/design.md, "What bulkrun guarantees"): it reads the retention markers that expired, forgets
// each batch (objects, rows, the batch row, and its marker last, only once
// everything else is gone). It stops at the first unexpired marker (the
// query is bounded by now). A batch that failed to delete keeps its
// marker, so the next pass retries; one partly deleted is counted and
// logged as pending deletion. A malformed marker is removed and logged; a
// stale marker (the batch is running again, or expires later after a
// newer run) is removed. A marker whose batch row is gone is removed after
// its objects are deleted if TTL may have removed the rows (TTLGrace after
// the expiry), so objects never outlive their rows.
// Safe for concurrent use; two sweeps may delete the same batch twice,
// which is harmless.
type Sweeper struct {
	Store   Store
	Control *Control
	Clock   ledger.Clock
	Log     *slog.Logger
	Limit   int // markers per pass; 0 means DefaultSweepLimit
}

// Run is one scheduled sweep: passes (RunOnce) until a pass finds fewer
// expired markers than its limit, or fails every batch it read, or the
// context's deadline is within a minute (the invocation keeps a minute to
// answer). It returns the passes' counts summed; the errors of single
// batches are logged and left to the next sweep (their markers stay), so
// it returns none.
func (s *Sweeper) Run(ctx context.Context) api.SweepResult {
	var total api.SweepResult
	limit := s.Limit
	if limit <= 0 {
		limit = DefaultSweepLimit
	}
	for {
		res, err := s.RunOnce(ctx)
		total.Add(res)
		if err != nil {
			s.Log.ErrorContext(ctx, "sweep pass", "error", err.Error())
		}
		dl, ok := ctx.Deadline()
		if res.Expired < limit || res.Failed+res.PendingDeletion == res.Expired || ok && time.Until(dl) < time.Minute || ctx.Err() != nil {
			break
		}
	}
	s.Log.InfoContext(ctx, "sweep", "expired", total.Expired, "deleted", total.Deleted, "stale", total.Stale, "malformed", total.Malformed, "failed", total.Failed, "pending_deletion", total.PendingDeletion)
	return total
}

// RunOnce sweeps up to Limit expired markers. It returns the counts and the
// errors of the batches that failed (joined); the pass goes on after each.
func (s *Sweeper) RunOnce(ctx context.Context) (api.SweepResult, error) {
	limit := s.Limit
	if limit <= 0 {
		limit = DefaultSweepLimit
	}
	now := s.Clock.Now()
	markers, err := s.Store.ExpiredMarkers(ctx, now, limit)
	if err != nil {
		return api.SweepResult{}, err
	}
	res := api.SweepResult{Expired: len(markers)}
	var errs []error
	for _, m := range markers {
		if err := ctx.Err(); err != nil {
			return res, errors.Join(append(errs, err)...)
		}
		if m.Malformed {
			s.Log.ErrorContext(ctx, "malformed retention marker removed", "marker", m.Key)
			if err := s.Store.DeleteMarker(ctx, m.Key); err != nil {
				errs = append(errs, err)
				continue
			}
			res.Malformed++
			continue
		}
		log := s.Log.With("batch_id", m.BatchID)
		b, err := s.Store.GetBatch(ctx, m.BatchID)
		gone := errors.Is(err, api.ErrNotFound)
		stale := gone || err == nil && (b.Status == api.StatusRunning || b.ExpiresAt.After(m.ExpiresAt))
		if gone && !now.Before(m.ExpiresAt.Add(ledger.TTLGrace)) {
			// TTL may have deleted the rows before the sweep came: the
			// objects have no TTL, delete them before the marker goes.
			n, err := s.Control.Blobs.DeletePrefix(ctx, api.BatchesPrefix(m.BatchID))
			if err != nil {
				log.ErrorContext(ctx, "sweep: objects of a batch without rows left; the marker stays", "error", err.Error())
				errs = append(errs, fmt.Errorf("sweep %s: %w", m.BatchID, err))
				res.PendingDeletion++
				continue
			}
			if n > 0 {
				log.WarnContext(ctx, "sweep: deleted the objects of a batch whose rows expired by TTL", "objects", n)
			}
		}
		switch {
		case stale:
			if err := s.Store.DeleteMarker(ctx, m.Key); err != nil {
				errs = append(errs, err)
				continue
			}
			res.Stale++
			continue
		case err != nil:
			errs = append(errs, err)
			res.Failed++
			continue
		}
		if err := s.Control.Forget(ctx, m.BatchID); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", m.BatchID, err))
			if errors.Is(err, api.ErrPendingDeletion) {
				log.ErrorContext(ctx, "sweep: batch partly deleted, pending deletion; the marker stays for the next pass", "error", err.Error())
				res.PendingDeletion++
				continue
			}
			log.ErrorContext(ctx, "sweep: delete failed; the marker stays for the next pass", "error", err.Error())
			res.Failed++
			continue
		}
		// Forget removed the batch's current marker; this one may be an
		// older duplicate of it.
		if err := s.Store.DeleteMarker(ctx, m.Key); err != nil {
			errs = append(errs, err)
		}
		log.InfoContext(ctx, "batch swept", "expired_at", m.ExpiresAt.Format(time.RFC3339))
		res.Deleted++
	}
	return res, errors.Join(errs...)
}
