package credential

import (
	"context"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Verdict is what a probing call said of a credential (Probe.Done).
type Verdict int

const (
	// Accepted: the receiver answered without refusing the credential
	// (success, or any failure but a credential rejection).
	Accepted Verdict = iota
	// Refused: the receiver refused it, and its secret read again is the
	// same: the item is withheld under a halt on it.
	Refused
	// Unknown: the call says nothing of the credential as the next call
	// will send it (refused, and the secret had changed since it was
	// cached; or the secret could not be read again).
	Unknown
)

// VerdictOf is what a call's answer says of its credential: refused by
// the receiver (pipeline.IsCredentialRejected) and read again unchanged
// (rr, Recheck's), Refused; refused otherwise (the secret had changed, or
// could not be read again), Unknown; any other answer, Accepted.
func VerdictOf(err error, rr Reread) Verdict {
	switch {
	case !pipeline.IsCredentialRejected(err):
		return Accepted
	case rr == RereadUnchanged:
		return Refused
	}
	return Unknown
}

// maxGates bounds Gates: a gate forgotten is probed again.
const maxGates = 1024

// RefusedHold is how long a gate answers refused to the units that come
// to it after its probe was refused: 2 s, twice the time in which a
// process reads the halt that refusal put on the batch row
// (worker.StopCheck, 1 s), after which a unit finds the halt itself and
// is withheld without reaching the gate. A lift comes minutes later (the
// secret is fixed first), so no unit woken by one meets the hold.
const RefusedHold = 2 * time.Second

// Gates holds a process's first calls under a credential from a secret
// reference one at a time, per batch run and subject, until the receiver
// has answered one without refusing it. A wrong secret is then refused
// once per process before the halt that the refusal puts on the batch
// withholds the rest, where every unit the process was running called
// with it at once (a new user's 1,000-item batch with a wrong secret:
// 980 refused calls in 2 s across the emulator's processes). The
// processes the batch's first messages start each make one such call,
// and the others read the halt from the batch row about a second later
// (worker.StopCheck). The zero Gates is ready; safe for concurrent use.
type Gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	open    bool      // a call was answered without refusing the credential
	round   *round    // the probing call in flight; nil: none
	refused time.Time // when the last probe was refused (RefusedHold)
}

// round is one probing call: done is closed once it is answered, with
// its verdict.
type round struct {
	done    chan struct{}
	verdict Verdict
}

// Probe is the probing call a unit makes under a gate (Gates.Enter); its
// Done must be called once with the call's verdict.
type Probe struct {
	g   *gate
	mu  *sync.Mutex
	r   *round
	one sync.Once
}

// Done ends the probe at now: Accepted opens the gate for good, Refused
// tells the units waiting that the credential was refused (each is
// withheld without a call) and holds the gate refused for RefusedHold,
// Unknown lets the next unit probe. Idempotent.
func (p *Probe) Done(v Verdict, now time.Time) {
	if p == nil {
		return
	}
	p.one.Do(func() {
		p.mu.Lock()
		p.r.verdict = v
		switch v {
		case Accepted:
			p.g.open = true
		case Refused:
			p.g.refused = now
		}
		if p.g.round == p.r {
			p.g.round = nil
		}
		p.mu.Unlock()
		close(p.r.done)
	})
}

// Open reports whether key's gate is open: a call under its credential
// was accepted in this process, and Enter lets every call go at once.
func (g *Gates) Open(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.m[key]
	return s != nil && s.open
}

// Enter is a unit's call under key's credential (key names a batch run
// and a subject): a nil Probe and refused false once the gate is open; a
// Probe when no call under it is in flight (the caller probes, and must
// call Done); else it waits for the probing call's verdict: refused true
// for Refused, the gate open for Accepted, and it probes itself for
// Unknown. Within RefusedHold of a refused probe it answers refused at
// once, unless the unit's credential was lifted since (after: the batch's
// lift, or its item's wake by one, after the refusal): a lift says the
// secret was fixed. A ctx done while waiting answers nil and false: the
// call goes as it would have.
func (g *Gates) Enter(ctx context.Context, key string, now, after time.Time) (p *Probe, refused bool) {
	for {
		g.mu.Lock()
		s := g.m[key]
		if s == nil {
			if g.m == nil || len(g.m) >= maxGates {
				g.m = map[string]*gate{}
			}
			s = &gate{}
			g.m[key] = s
		}
		if s.open {
			g.mu.Unlock()
			return nil, false
		}
		if s.round == nil && !s.refused.IsZero() && now.Sub(s.refused) < RefusedHold && after.Before(s.refused) {
			g.mu.Unlock()
			return nil, true
		}
		if s.round == nil {
			s.round = &round{done: make(chan struct{})}
			p := &Probe{g: s, mu: &g.mu, r: s.round}
			g.mu.Unlock()
			return p, false
		}
		r := s.round
		g.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, false
		}
		switch r.verdict {
		case Refused:
			return nil, true
		case Accepted:
			return nil, false
		}
	}
}
