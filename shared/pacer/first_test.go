package pacer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestFirstCallGoesAlone guards Pacer.First: of a process's units that
// come to call a downstream key it has had no answer from, the first
// calls and the others wait for its answer. After a throttle they give
// their calls back, as does every unpaced unit that comes while the key
// is paced, and once it is no longer paced the next unit to come calls
// alone again; after
// any other answer every unit calls; a paced unit never waits. A first
// call that never answers holds the others FirstWait at most.
// back is Pacer.First's answer alone: whether the unit gives its call
// back.
func back(p *Pacer, ctx context.Context, b ledger.Batch, l *Lease, margin time.Duration) bool {
	giveBack, _ := p.First(ctx, b, l, margin)
	return giveBack
}

func TestFirstCallGoesAlone(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	refused := pipeline.Throttled("http", "429", 2*time.Second, errors.New("429"))
	for _, tc := range []struct {
		name   string
		answer error
		want   bool // the waiting units give their calls back
	}{
		{"throttled", refused, true},
		{"taken", nil, false},
		{"failed otherwise", errors.New("webhook: HTTP 502"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := now
			st := &adaptUnitRows{a: &adaptStub{}}
			p := &Pacer{Store: st, Clock: at{&clock}, Adapts: &Adapts{}}
			var first Lease
			if back(p, ctx, b, &first, 0) {
				t.Fatal("the first call was given back, want it to go")
			}
			const waiting = 5
			var wg sync.WaitGroup
			backs := make(chan bool, waiting)
			for range waiting {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var l Lease
					backs <- back(p, ctx, b, &l, 0)
				}()
			}
			time.Sleep(50 * time.Millisecond) // they wait for the first call's answer
			if len(backs) != 0 {
				t.Fatalf("%d units did not wait for the first call's answer", len(backs))
			}
			p.Observe(ctx, log, b, clock, &first, tc.answer)
			wg.Wait()
			close(backs)
			for back := range backs {
				if back != tc.want {
					t.Errorf("a waiting unit gave its call back: %v, want %v", back, tc.want)
				}
			}
			var later Lease
			if got := back(p, ctx, b, &later, 0); got != tc.want {
				t.Errorf("an unpaced unit after the answer gave its call back: %v, want %v (after a throttle the key is paced: its call goes back to a place on the pace)", got, tc.want)
			}
			if tc.want {
				// The cut forgotten, the key is no longer paced: an unpaced
				// unit calls alone again, and the next one waits for it.
				clock = clock.Add(pace.AdaptForget + time.Second)
				if back(p, ctx, b, &later, 0) {
					t.Error("an unpaced unit once the key was no longer paced gave its call back, want it to call alone")
				}
				gave := make(chan bool)
				go func() {
					var next Lease
					gave <- back(p, ctx, b, &next, 0)
				}()
				time.Sleep(50 * time.Millisecond) // it waits for the call out
				p.Observe(ctx, log, b, clock, &later, refused)
				if !<-gave {
					t.Error("a unit that waited for the next call's throttled answer called, want it given back")
				}
			}
			paced := Lease{Leased: clock}
			if back(p, ctx, b, &paced, 0) {
				t.Error("a paced unit gave its call back, want it to call at its place")
			}
		})
	}
	t.Run("no answer", func(t *testing.T) {
		clock := now
		p := &Pacer{Store: &adaptUnitRows{a: &adaptStub{}}, Clock: at{&clock}, Adapts: &Adapts{}}
		var first, next Lease
		p.First(ctx, b, &first, 0) // its unit dies without a call: no Observe, no Release
		start := time.Now()
		if back(p, ctx, b, &next, 0) {
			t.Error("a unit whose first call never answered gave its call back, want it to call")
		}
		if waited := time.Since(start); waited < FirstWait/2 || waited > 2*FirstWait {
			t.Errorf("it waited %v, want about FirstWait (%v)", waited, FirstWait)
		}
		clock = clock.Add(FirstWait) // the call out is stale: the next one goes at once
		start = time.Now()
		if back(p, ctx, b, &next, 0) || time.Since(start) > FirstWait/2 {
			t.Errorf("after FirstWait a unit waited %v for a call that never answered", time.Since(start))
		}
	})
	t.Run("deadline", func(t *testing.T) {
		clock := now
		p := &Pacer{Store: &adaptUnitRows{a: &adaptStub{}}, Clock: at{&clock}, Adapts: &Adapts{}}
		var first, next Lease
		back(p, ctx, b, &first, 0)
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if !back(p, dctx, b, &next, 200*time.Millisecond) {
			t.Error("a unit whose invocation's margin came while it waited called, want it given back")
		}
		if waited := time.Since(start); waited >= FirstWait {
			t.Errorf("it waited %v, for the whole FirstWait past its margin (100 ms)", waited)
		}
	})
}

// TestFirstClaimReleased: a unit that took its process's first call of a
// key and ended without making it (a bad row, a stop, a halt) releases
// its claim, and a waiting unit takes it at once — not after FirstWait —
// while the others wait for that one's answer; a release after an
// answer changes nothing.
func TestFirstClaimReleased(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	clock := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	b := ledger.Batch{Batch: api.Batch{ID: "b1", Run: 1}}
	p := &Pacer{Store: &adaptUnitRows{a: &adaptStub{}}, Clock: at{&clock}, Adapts: &Adapts{}}
	var first Lease
	giveBack, claim := p.First(ctx, b, &first, 0)
	if giveBack || claim == (FirstClaim{}) {
		t.Fatalf("the first unit: back %v, claim %+v; want it to go with the claim", giveBack, claim)
	}
	type answer struct {
		back  bool
		claim FirstClaim
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			var l Lease
			gb, c := p.First(ctx, b, &l, 0)
			answers <- answer{gb, c}
		}()
	}
	time.Sleep(50 * time.Millisecond) // both wait for the first call
	start := time.Now()
	p.Release(claim) // its unit ended without a call
	a := <-answers
	if a.back || a.claim == (FirstClaim{}) || time.Since(start) > FirstWait/2 {
		t.Fatalf("after the release a waiting unit: back %v, claim %+v after %v; want it to take the claim at once", a.back, a.claim, time.Since(start))
	}
	select {
	case other := <-answers:
		t.Fatalf("the other waiting unit went on (%+v) before the new claim's answer", other)
	case <-time.After(50 * time.Millisecond):
	}
	p.Observe(ctx, log, b, clock, &Lease{}, nil) // the new claimant's call answered
	if other := <-answers; other.back || other.claim != (FirstClaim{}) {
		t.Fatalf("after the answer the other unit: %+v; want it to call, claiming nothing", other)
	}
	p.Release(a.claim) // answered already: nothing to release
	if gb, c := p.First(ctx, b, &Lease{}, 0); gb || c != (FirstClaim{}) {
		t.Fatalf("after the answer a new unit: back %v, claim %+v; want it to call at once", gb, c)
	}
}
