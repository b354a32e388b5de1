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
// answer that was not a throttle came (open): the call out since since
// under claim gen, its end closing done — an answer (throttled says
// whether it was a throttle) or a release by a claimant that did not
// call.
type firstCall struct {
	open      bool
	out       bool
	since     time.Time
	done      chan struct{}
	gen       int64
	throttled bool
}

// FirstClaim is a unit's claim of its process's first call of a key
// (Pacer.First); the zero FirstClaim claims nothing.
type FirstClaim struct {
	key string
	gen int64
}

// First holds an unpaced call of b's downstream key (a batch with no
// rate) while its process has not yet had an answer from the key that
// was not a throttle: one such call goes at a time, its unit holding the
// claim it returns, and the units that come to call meanwhile wait (at
// most FirstWait in all) for its answer. A throttled answer cuts the key
// (Observe), and they give their calls back (true), as a unit whose
// lease came late does, to come back at a place on the key's pace; so
// does every unit that comes to call while the process's copy of the
// key's row says it is paced (its lease was decided before the cut). A
// unit that comes once the key is no longer paced calls alone again.
// Any other answer lets every unit
// of the process call from then on. A claimant that ends without a call
// (a bad row, a stop, a halt, a refusal before the call) releases its
// claim (Release), and a waiting unit takes it at once. So a receiver
// that throttles from its first call is refused about once per process,
// where every unit a process ran called it at once (a new user's
// 2,000-item batch: 359 refused calls in its first 4 s on the emulator,
// each item's next call a median 43 s later). A paced call (l.Paced) is
// the pace's: false at once. A unit whose wait reaches margin before
// ctx's deadline (the invocation's end) gives its call back too, as one
// that comes to its call that late does. Safe for concurrent use.
func (p *Pacer) First(ctx context.Context, b ledger.Batch, l *Lease, margin time.Duration) (bool, FirstClaim) {
	if b.Rate != nil || l.Paced() {
		return false, FirstClaim{}
	}
	key := DownstreamKey(b)
	s := p.adapts().of(key)
	end, late := time.Now().Add(FirstWait), false
	if dl, ok := ctx.Deadline(); ok && dl.Add(-margin).Before(end) {
		end, late = dl.Add(-margin), true
	}
	for {
		now := p.now()
		s.mu.Lock()
		f := &s.first
		if f.open {
			s.mu.Unlock()
			return false, FirstClaim{}
		}
		if s.row.Paced(now) {
			// A throttled answer paced the key since this unit's lease
			// was decided (unpaced): it gives its call back, to come
			// back at a place on the pace, instead of calling alone once
			// more — one refused call after another, each answered in
			// a millisecond, is every unit of the process calling.
			s.mu.Unlock()
			return true, FirstClaim{}
		}
		if !f.out || now.Sub(f.since) >= FirstWait {
			// No call out, or one that never answered nor was released
			// (its unit died): this one goes, alone.
			f.gen++
			f.out, f.since, f.done = true, now, make(chan struct{})
			c := FirstClaim{key: key, gen: f.gen}
			s.mu.Unlock()
			return false, c
		}
		done := f.done
		s.mu.Unlock()
		t := time.NewTimer(max(time.Until(end), 0))
		select {
		case <-done:
			t.Stop()
		case <-t.C:
			return late, FirstClaim{}
		case <-ctx.Done():
			t.Stop()
			return true, FirstClaim{}
		}
		s.mu.Lock()
		open, throttled := f.open, f.throttled
		s.mu.Unlock()
		switch {
		case open:
			return false, FirstClaim{}
		case throttled:
			return true, FirstClaim{}
		}
		// Released without a call: claim it, or wait for who did.
	}
}

// Release ends claim c when its unit did not call (no answer ended it):
// a unit waiting for it takes the next claim at once. A claim that an
// answer ended, or the zero FirstClaim, is left as it is.
func (p *Pacer) Release(c FirstClaim) {
	if c.gen == 0 {
		return
	}
	s := p.adapts().of(c.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.first
	if f.out && f.gen == c.gen {
		f.out, f.throttled = false, false
		close(f.done)
	}
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
		f.out, f.throttled = false, throttled
		close(f.done)
	}
}
