package worker

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/stopcheck"
)

// StopCheck bounds how old the batch row a pipeline call starts under may
// be: stopcheck.Every (1 s), unless the Worker's StopCheck sets another.
const StopCheck = stopcheck.Every

func (w *Worker) callSpeeds() *stopcheck.Speeds { return made(&w.speeds) }

// beforeCall returns the batch row the next call of b's run starts under
// (stopcheck.Reads.Before, with the invocation's reads).
func (w *Worker) beforeCall(ctx context.Context, inv *invocation, b ledger.Batch) ledger.Batch {
	if inv.checks == nil {
		return b
	}
	return inv.checks.Before(ctx, b, inv.start, w.Clock.Now(), w.StopCheck, w.callSpeeds(), w.Store.GetBatch)
}

// afterCall notes how long a call of batch id took (0: it did not run):
// a batch whose calls take StopCheck or more reads its row before every
// call, in this invocation and the process's next ones.
func (w *Worker) afterCall(id string, took time.Duration) {
	w.callSpeeds().Note(id, took, w.StopCheck)
}
