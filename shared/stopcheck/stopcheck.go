// Package stopcheck bounds how old the batch row a pipeline call starts
// under may be, so that a cancel, a threshold stop or a pause recorded
// while an item waited its turn keeps its call from starting (the item
// function's engine, shared/worker, asks Reads.Before before each call).
package stopcheck

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Every bounds how old the batch row a pipeline call starts under may
// be: 1 s. A message's batch row is read once per message batch, and a
// unit's items may wait their turn for minutes (a pack's, a slot's, the
// invocation's concurrency): before a call the worker reads the row
// again (strongly consistent), so that a cancel, a threshold stop or a
// pause recorded meanwhile keeps the call from starting. While the
// batch's calls in this process are known to be short (each took under
// Every), a row read at most Every ago serves the call (the message
// batch's own read serves the calls that start within Every of the
// invocation's start); otherwise — the process has not yet seen a call
// of the batch end, or one took Every or more — every call starts under
// a row read after it was ready to start, one read serving the calls
// that were waiting for it together. So a short call may start at most
// Every (plus, for the invocation's first calls, DynamoDB's eventually
// consistent read's lag) after a stop is recorded, and a call of a batch
// whose calls are slow, or not yet known to be short, starts under a
// read made after it was ready: none starts after a stop that read
// found. Reads: at most one per second per invocation and batch for
// short calls (none for an invocation that ends within a second, once
// the process has seen the batch's calls be short), about one per call
// for long ones.
const Every = time.Second

// Reads are an invocation's latest reads of the batch rows its calls
// start under, by batch id. The zero Reads is ready; safe for
// concurrent use.
type Reads struct {
	mu    sync.Mutex
	m     map[string]*read
	reads atomic.Int64 // reads started so far
}

type read struct {
	b   ledger.Batch
	at  time.Time
	gen int64 // which of the invocation's reads b is; 0: the message batch's
}

// Speeds remembers, per batch id, how long the batch's calls took in
// this process, across invocations: slow once one took the bound (Every
// or the worker's own) or more, short while each took less. The zero
// Speeds is ready; safe for concurrent use.
type Speeds struct {
	mu sync.Mutex
	m  map[string]bool
}

// maxSpeeds bounds Speeds; past it the memory starts afresh (the
// batches are then read before their next calls, as new ones are).
const maxSpeeds = 4096

func (s *Speeds) get(id string) (slow, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slow, known = s.m[id]
	return slow, known
}

// Note notes how long a call of batch id took (0: it did not run) under
// the bound every (0: Every): a batch whose calls take the bound or more
// reads its row before every call, in this invocation and the process's
// next ones.
func (s *Speeds) Note(id string, took, every time.Duration) {
	if took <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxSpeeds {
		s.m = map[string]bool{}
	}
	s.m[id] = s.m[id] || took >= cmp.Or(every, Every)
}

// Getter reads a batch row, strongly consistent (ledger.Store.GetBatch).
type Getter func(ctx context.Context, id string) (ledger.Batch, error)

// Before returns the batch row the next call of b's run starts under, at
// now, in an invocation that started at start (its message batch read b
// then): b as read at most every (0: Every; negative: never) ago while
// the batch's calls are known to be short (speeds), otherwise a row read
// with get after this call was ready to start. A read that fails, or
// finds another run, leaves b as it was last read: the call starts as it
// would have.
func (r *Reads) Before(ctx context.Context, b ledger.Batch, start, now time.Time, every time.Duration, speeds *Speeds, get Getter) ledger.Batch {
	// Reads started before this call was ready do not serve it.
	ready := r.reads.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*read{}
	}
	c := r.m[b.ID]
	if c == nil {
		// The row the message batch was read with serves the first calls.
		c = &read{b: b, at: start}
		r.m[b.ID] = c
	}
	if slow, known := speeds.get(b.ID); known && !slow && every >= 0 && now.Sub(c.at) < cmp.Or(every, Every) {
		return c.b
	}
	if c.gen > ready {
		return c.b // read after this call was ready, while it waited
	}
	gen := r.reads.Add(1)
	nb, err := get(ctx, b.ID)
	if err != nil || nb.Run != b.Run {
		return c.b
	}
	c.b, c.at, c.gen = nb, now, gen
	return nb
}
