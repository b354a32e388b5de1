package pacer

import (
	"context"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Relet leases the i-th call of l's unit of b again, when it came to its
// call late for its place (Lease.Late: a slow take, a loaded function),
// instead of giving it back: one request of b's key from now, on one of
// its bucket rows at random, granted only when it starts within
// pace.LeaseSleep (a row booked further books nothing, so no place is
// leased and lost). It sleeps until that start and reports true: the
// call starts at a place of its own, so the key's rate holds. It
// reports false — the caller gives the call back unstarted, no attempt
// used, as before — for a unit not under a request rate's lease (an
// adaptive place, a token budget alone), a key booked past
// pace.LeaseSleep, a start past l's Until or within margin of ctx's
// deadline, or a store error (logged). Given back, every late call went
// to the end of the key's schedule and its unit came back to lease
// again: on a loaded emulator, where the take alone often passed the
// grace, 19,714 such sends for a 1,000-item batch at 50 a second.
func (p *Pacer) Relet(ctx context.Context, log *slog.Logger, b ledger.Batch, l *Lease, i int, margin time.Duration) bool {
	if b.Rate == nil || b.Rate.RequestsPerSecond <= 0 || !l.Paced() || l.placed {
		return false
	}
	key := b.Rate.KeyOf(b.ID)
	bk, err := leaseRequests(ctx, p.Store, key, b.Rate.RequestsPerSecond, 1, p.now(), time.Time{}, pace.LeaseSleep)
	if err != nil {
		log.WarnContext(ctx, "lease a late call again; given back", "rate_key", key, "error", pipeline.ErrorText(err))
		return false
	}
	if !bk.Granted {
		return false
	}
	wait := bk.Start.Sub(p.now())
	if !l.Until.IsZero() && bk.Start.After(l.Until) {
		return false
	}
	if dl, has := ctx.Deadline(); has && time.Until(dl) < margin+wait {
		return false
	}
	if wait > 0 {
		p.sleep(ctx, wait)
	}
	log.DebugContext(ctx, "late call leased again", "rate_key", key, "call", i, "wait_ms", wait.Milliseconds())
	return true
}
