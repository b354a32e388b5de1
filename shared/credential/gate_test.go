package credential

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestGatesProbeOneAtATime guards Gates: the first unit under a gate
// probes and the others wait; a refused probe answers every waiting unit
// refused (withheld without a call), and a unit that comes within
// RefusedHold too, unless its credential was lifted since; past the hold
// the next unit probes again; an Unknown verdict lets one waiting unit
// probe; an accepted probe opens the gate for good; gates are per key.
func TestGatesProbeOneAtATime(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var g Gates
	p, refused := g.Enter(ctx, "b/1/s", t0, time.Time{})
	if p == nil || refused {
		t.Fatalf("first unit: probe %v, refused %v; want a probe", p, refused)
	}
	const waiting = 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[bool]int{}
	for range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, r := g.Enter(ctx, "b/1/s", t0, time.Time{})
			if q != nil {
				q.Done(Unknown, t0)
			}
			mu.Lock()
			answers[r]++
			mu.Unlock()
		}()
	}
	if q, r := g.Enter(ctx, "other/1/s", t0, time.Time{}); q == nil || r {
		t.Errorf("another key: probe %v, refused %v; want its own probe", q, r)
	} else {
		q.Done(Accepted, t0)
	}
	time.Sleep(20 * time.Millisecond) // the waiting units wait
	p.Done(Refused, t0)
	p.Done(Accepted, t0) // idempotent: the first verdict stands
	wg.Wait()
	if answers[true] != waiting {
		t.Fatalf("after a refused probe: %v; want all %d waiting units refused", answers, waiting)
	}
	if q, r := g.Enter(ctx, "b/1/s", t0.Add(RefusedHold/2), time.Time{}); q != nil || !r {
		t.Errorf("within the hold: probe %v, refused %v; want refused", q, r)
	}
	q, r := g.Enter(ctx, "b/1/s", t0.Add(RefusedHold/2), t0.Add(time.Millisecond))
	if q == nil || r {
		t.Fatalf("lifted since the refusal: probe %v, refused %v; want a probe", q, r)
	}
	// An Unknown verdict (the secret had changed) lets a waiting unit probe.
	done := make(chan *Probe)
	go func() {
		w, _ := g.Enter(ctx, "b/1/s", t0, t0.Add(time.Millisecond)) // lifted since, as the prober
		done <- w
	}()
	time.Sleep(20 * time.Millisecond)
	q.Done(Unknown, t0)
	w := <-done
	if w == nil {
		t.Fatal("after an unknown verdict: the waiting unit did not probe")
	}
	w.Done(Accepted, t0)
	if q, r := g.Enter(ctx, "b/1/s", t0.Add(time.Hour), time.Time{}); q != nil || r {
		t.Errorf("after an accepted probe: probe %v, refused %v; want the gate open", q, r)
	}
	// Past the hold, a refused gate probes again.
	if p, _ := g.Enter(ctx, "c/1/s", t0, time.Time{}); p != nil {
		p.Done(Refused, t0)
	}
	if q, r := g.Enter(ctx, "c/1/s", t0.Add(RefusedHold), time.Time{}); q == nil || r {
		t.Errorf("past the hold: probe %v, refused %v; want a probe", q, r)
	}
}

// TestGatesWaitEndsWithItsContext guards a unit waiting on a probe whose
// context ends: it goes on without a probe, as it would have called.
func TestGatesWaitEndsWithItsContext(t *testing.T) {
	var g Gates
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	p, _ := g.Enter(context.Background(), "k", t0, time.Time{})
	defer p.Done(Unknown, t0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if q, r := g.Enter(ctx, "k", t0, time.Time{}); q != nil || r {
		t.Errorf("context ended while waiting: probe %v, refused %v; want neither", q, r)
	}
}
