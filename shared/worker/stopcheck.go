package worker

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// StopCheck bounds how old the batch row a pipeline call starts under may
// be. A message's batch row is read once per message batch, and a unit's
// items may wait their turn for minutes (a pack's, a slot's, the
// invocation's concurrency): before a call the worker reads the row again
// (strongly consistent) once the last read is StopCheck old, so that a
// cancel, a threshold stop or a pause recorded meanwhile keeps the call
// from starting. The message batch's own read serves the calls that
// start within StopCheck of the invocation's start; once a call of the
// batch took StopCheck or more, every call reads (one read per call of a
// second or more costs little beside it). So a call may start at most
// StopCheck (plus, for the invocation's first calls, DynamoDB's
// eventually consistent read's lag) after a stop is recorded, and once
// the batch's calls are slow, none starts after it. Reads: at most one
// per second per invocation and batch for short calls, one per call for
// long ones; none for an invocation that ends within a second.
const StopCheck = time.Second

// runChecks are an invocation's latest reads of the batch rows its calls
// start under, by batch id. Safe for concurrent use.
type runChecks struct {
	mu sync.Mutex
	m  map[string]*runCheck
}

type runCheck struct {
	b    ledger.Batch
	at   time.Time
	slow bool // a call of the batch took StopCheck or more
}

// beforeCall returns the batch row the next call of b's run starts under:
// b as read at most StopCheck ago (or just now, for a batch whose calls
// are slow). A read that fails, or finds another run, leaves b as it was
// read: the call starts as it would have.
func (w *Worker) beforeCall(ctx context.Context, inv *invocation, b ledger.Batch) ledger.Batch {
	c := inv.checks
	if c == nil {
		return b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*runCheck{}
	}
	r := c.m[b.ID]
	if r == nil {
		// The row the message batch was read with serves the first calls.
		r = &runCheck{b: b, at: inv.start}
		c.m[b.ID] = r
	}
	now := w.Clock.Now()
	if r != nil && !r.slow && w.StopCheck >= 0 && now.Sub(r.at) < cmp.Or(w.StopCheck, StopCheck) {
		return r.b
	}
	nb, err := w.Store.GetBatch(ctx, b.ID)
	if err != nil || nb.Run != b.Run {
		return r.b
	}
	r.b, r.at = nb, now
	return nb
}

// afterCall notes how long a call of batch id took: a batch whose calls
// take StopCheck or more reads its row before every call.
func (w *Worker) afterCall(inv *invocation, id string, took time.Duration) {
	c := inv.checks
	if c == nil || took < cmp.Or(w.StopCheck, StopCheck) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.m[id]; r != nil {
		r.slow = true
	}
}
