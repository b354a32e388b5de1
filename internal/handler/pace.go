package handler

import (
	"context"
	"errors"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// paceSampler is the store's pace-row write (internal/dynamo's
// Store.SamplePace). A store without it keeps no samples: its estimates
// are the run's average (api.RateBasisRunAverage).
type paceSampler interface {
	SamplePace(ctx context.Context, batchID string, run int, ring []eta.Sample, now time.Time) error
}

// samplePace adds the counters p, read at now, to b's run's ring of pace
// samples when its newest is eta.SampleEvery old or more (eta.Next): at
// most one write unit per read, one kept write per run per 15 s. A
// failed write is logged and the view goes on: the estimate only falls
// back to the run's average.
func (a *API) samplePace(ctx context.Context, b ledger.Batch, p ledger.Progress, now time.Time) {
	ps, ok := a.Store.(paceSampler)
	if !ok {
		return
	}
	ring, write := eta.Next(p.Pace, now, p.Done, p.Cost, p.Spent)
	if !write {
		return
	}
	if err := ps.SamplePace(ctx, b.ID, b.Run, ring, now); err != nil && !errors.Is(err, api.ErrConflict) && a.Log != nil {
		a.Log.WarnContext(ctx, "pace sample not written", "batch_id", b.ID, "run", b.Run, "error", err.Error())
	}
}
