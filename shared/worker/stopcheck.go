package worker

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// StopCheck bounds how old the batch row a pipeline call starts under may
// be. A message's batch row is read once per message batch, and a unit's
// items may wait their turn for minutes (a pack's, a slot's, the
// invocation's concurrency): before a call the worker reads the row again
// (strongly consistent), so that a cancel, a threshold stop or a pause
// recorded meanwhile keeps the call from starting. While the batch's
// calls in this process are known to be short (each took under
// StopCheck), a row read at most StopCheck ago serves the call (the
// message batch's own read serves the calls that start within StopCheck
// of the invocation's start); otherwise — the process has not yet seen a
// call of the batch end, or one took StopCheck or more — every call
// starts under a row read after it was ready to start, one read serving
// the calls that were waiting for it together. So a short call may start
// at most StopCheck (plus, for the invocation's first calls, DynamoDB's
// eventually consistent read's lag) after a stop is recorded, and a call
// of a batch whose calls are slow, or not yet known to be short, starts
// under a read made after it was ready: none starts after a stop that
// read found. Reads: at most one per second per invocation and batch for
// short calls (none for an invocation that ends within a second, once
// the process has seen the batch's calls be short), about one per call
// for long ones.
const StopCheck = time.Second

// runChecks are an invocation's latest reads of the batch rows its calls
// start under, by batch id. Safe for concurrent use.
type runChecks struct {
	mu    sync.Mutex
	m     map[string]*runCheck
	reads atomic.Int64 // reads started so far
}

type runCheck struct {
	b   ledger.Batch
	at  time.Time
	gen int64 // which of the invocation's reads b is; 0: the message batch's
}

// callSpeeds remembers, per batch id, how long the batch's calls took in
// this process, across invocations: true once one took StopCheck or
// more, false while each took less. Safe for concurrent use.
type callSpeeds struct {
	mu sync.Mutex
	m  map[string]bool
}

// maxCallSpeeds bounds callSpeeds; past it the memory starts afresh (the
// batches are then read before their next calls, as new ones are).
const maxCallSpeeds = 4096

func (w *Worker) callSpeeds() *callSpeeds { return made(&w.speeds) }

func (s *callSpeeds) get(id string) (slow, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slow, known = s.m[id]
	return slow, known
}

func (s *callSpeeds) note(id string, slow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxCallSpeeds {
		s.m = map[string]bool{}
	}
	s.m[id] = s.m[id] || slow
}

// beforeCall returns the batch row the next call of b's run starts under:
// b as read at most StopCheck ago while the batch's calls are known to be
// short, otherwise a row read after this call was ready to start. A read
// that fails, or finds another run, leaves b as it was last read: the
// call starts as it would have.
func (w *Worker) beforeCall(ctx context.Context, inv *invocation, b ledger.Batch) ledger.Batch {
	c := inv.checks
	if c == nil {
		return b
	}
	// Reads started before this call was ready do not serve it.
	ready := c.reads.Load()
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
	if slow, known := w.callSpeeds().get(b.ID); known && !slow && w.StopCheck >= 0 && now.Sub(r.at) < cmp.Or(w.StopCheck, StopCheck) {
		return r.b
	}
	if r.gen > ready {
		return r.b // read after this call was ready, while it waited
	}
	gen := c.reads.Add(1)
	nb, err := w.Store.GetBatch(ctx, b.ID)
	if err != nil || nb.Run != b.Run {
		return r.b
	}
	r.b, r.at, r.gen = nb, now, gen
	return nb
}

// afterCall notes how long a call of batch id took (0: it did not run):
// a batch whose calls take StopCheck or more reads its row before every
// call, in this invocation and the process's next ones.
func (w *Worker) afterCall(id string, took time.Duration) {
	if took <= 0 {
		return
	}
	w.callSpeeds().note(id, took >= cmp.Or(w.StopCheck, StopCheck))
}
