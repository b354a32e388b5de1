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
// its bucket rows at random, granted only when it starts within the
// horizon — pace.LeaseSleep, and no later than l's Until or margin
// before ctx's deadline — so that a row booked further books nothing and
// no place is leased and then lost. It sleeps until that start and
// reports true: the call starts at a place of its own, so the key's rate
// holds. It reports false — the caller gives the call back unstarted, no
// attempt used, as before — for a unit not under a request rate's lease
// (an adaptive place, a token budget alone), a key booked past the
// horizon, no time left before Until or the deadline's margin, or a
// store error (logged). A key this process saw booked past the horizon
// on every row (Saw; a request row's Next only moves later) is not
// asked: a late call there costs no refused write. Given back, every
// late call went to the end of the key's schedule and its unit came back
// to lease again: on a loaded emulator, where the take alone often
// passed the grace, 19,714 such sends for a 1,000-item batch at 50 a
// second.
func (p *Pacer) Relet(ctx context.Context, log *slog.Logger, b ledger.Batch, l *Lease, i int, margin time.Duration) bool {
	if b.Rate == nil || b.Rate.RequestsPerSecond <= 0 || !l.Paced() || l.placed {
		return false
	}
	now := p.now()
	horizon := pace.LeaseSleep
	if !l.Until.IsZero() {
		horizon = min(horizon, l.Until.Sub(now))
	}
	if dl, has := ctx.Deadline(); has {
		horizon = min(horizon, time.Until(dl)-margin)
	}
	key := b.Rate.KeyOf(b.ID)
	if horizon < 0 || bookedPast(key, pace.RateShards(b.Rate.RequestsPerSecond), now.Add(horizon)) {
		return false
	}
	bk, err := leaseRequests(ctx, p.Store, key, b.Rate.RequestsPerSecond, 1, now, time.Time{}, horizon)
	if err != nil {
		log.WarnContext(ctx, "lease a late call again; given back", "rate_key", key, "error", pipeline.ErrorText(err))
		return false
	}
	if !bk.Granted {
		return false
	}
	wait := bk.Start.Sub(p.now())
	if wait > 0 {
		p.sleep(ctx, wait)
	}
	log.DebugContext(ctx, "late call leased again", "rate_key", key, "call", i, "wait_ms", wait.Milliseconds())
	return true
}

// bookedPast reports whether this process saw each of key's shards rows
// booked past t (none Idle at t): a lease within t would be refused on
// any of them.
func bookedPast(key string, shards int, t time.Time) bool {
	for s := range shards {
		if Idle(Row{Key: key, Shard: s}, t) {
			return false
		}
	}
	return true
}
