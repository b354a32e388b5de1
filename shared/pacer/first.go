package pacer

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// FirstWait is the longest a unit waits for the answer to its process's
// first call of a downstream key (Pacer.First) before it calls anyway:
// 2 s, longer than a receiver takes to refuse a call it throttles (a 429
// is answered before any work), short enough that a slow receiver that
// takes calls delays each process's other units once, by at most that.
const FirstWait = 2 * time.Second

// firstCall is a process's first call of a downstream key, while no
// answer that was not a throttle came (open): the call out since since,
// its answer closing done.
type firstCall struct {
	open  bool
	out   bool
	since time.Time
	done  chan struct{}
}

// First holds an unpaced call of b's downstream key (a batch with no
// rate) while its process has not yet had an answer from the key that
// was not a throttle: one such call goes at a time, and the units that
// come to call meanwhile wait (at most FirstWait) for its answer. A
// throttled answer cuts the key (Observe), and they give their calls
// back (true), as a unit whose lease came late does, to come back at a
// place on the key's pace; the next unit to come calls alone again. Any
// other answer lets every unit of the process call from then on. So a
// receiver that throttles from its first call is refused about once per
// process, where every unit a process ran called it at once (a new
// user's 2,000-item batch: 359 refused calls in its first 4 s on the
// emulator, each item's next call a median 43 s later). A paced call
// (l.Paced) is the pace's: false at once. A unit whose wait reaches
// margin before ctx's deadline (the invocation's end) gives its call
// back too, as one that comes to its call that late does. Safe for
// concurrent use.
func (p *Pacer) First(ctx context.Context, b ledger.Batch, l *Lease, margin time.Duration) bool {
	if b.Rate != nil || l.Paced() {
		return false
	}
	key := DownstreamKey(b)
	s := p.adapts().of(key)
	now := p.now()
	s.mu.Lock()
	f := &s.first
	if f.open {
		s.mu.Unlock()
		return false
	}
	if !f.out || now.Sub(f.since) >= FirstWait {
		// No call out, or one that never answered (its unit ended
		// without a call): this one goes, alone.
		f.out, f.since, f.done = true, now, make(chan struct{})
		s.mu.Unlock()
		return false
	}
	done := f.done
	s.mu.Unlock()
	wait, late := FirstWait, false
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)-margin < wait {
		wait, late = max(time.Until(dl)-margin, 0), true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return late
	case <-ctx.Done():
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !f.open
}

// answered ends key's first call with its answer (Observe): any answer
// but a throttle opens the key's calls for the process's life.
func (as *Adapts) answered(key string, throttled bool) {
	s := as.of(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.first
	if f.open {
		return
	}
	if !throttled {
		f.open = true
	}
	if f.out {
		f.out = false
		close(f.done)
	}
}
