package pacetest

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// tokenLeases guards Store.LeaseTokens and SettleTokens: a lease on a
// key's token row keeps LeaseRate's schedule (an idle row, none yet or
// only settled, starts it now; a busy row at its Next; a Next past the
// horizon books nothing) and answers the usage settled so far, granted
// or not; a settle adds its usage (the row made if absent) and moves
// Next by its Delta — a debt from Next while it is ahead, else from Now;
// a give-back only while Next is ahead, an idle row left as it is — and
// adds the Delta to the row's Drift when it moved Next; a read answers
// the row as it is; settles written at once from many goroutines are all
// counted. Keys are
// random: token rows belong to no batch and outlive the case.
func tokenLeases(t *testing.T, s ledger.Store) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	prefix := "suite-" + hex.EncodeToString(nonce[:])
	key := prefix + "-a"
	sp := 20 * time.Millisecond
	lease := func(key string, now time.Time, idle bool) pace.TokenGrant {
		t.Helper()
		g, err := s.LeaseTokens(ctx, pace.TokenLease{Key: key, Spacing: sp, Now: now, Horizon: time.Second, Idle: idle})
		if err != nil {
			t.Fatalf("lease %s at %v: %v", key, now, err)
		}
		return g
	}
	settle := func(key string, now time.Time, delta time.Duration, used float64, calls int) pace.TokenGrant {
		t.Helper()
		g, err := s.SettleTokens(ctx, pace.TokenSettle{Key: key, Delta: delta, Used: used, Calls: calls, Now: now})
		if err != nil {
			t.Fatalf("settle %s at %v by %v: %v", key, now, delta, err)
		}
		if !g.Granted {
			t.Errorf("settle %s at %v by %v: not granted", key, now, delta)
		}
		return g
	}
	at := func(d time.Duration) int64 { return T0.Add(d).UnixMicro() }

	g := lease(key, T0, false)
	check(t, "no row: granted", g.Granted, true)
	check(t, "no row: starts now", g.Start.UnixMicro(), at(0))
	check(t, "no row: next", g.Next.UnixMicro(), at(sp))
	check(t, "no row: used", g.Used, 0.0)
	check(t, "no row: calls", g.Calls, int64(0))
	g = lease(key, T0.Add(time.Millisecond), true)
	check(t, "busy: granted", g.Granted, true)
	check(t, "busy: starts at next", g.Start.UnixMicro(), at(sp))
	check(t, "busy: next", g.Next.UnixMicro(), at(2*sp))

	// Settles on the busy row: a debt moves Next later, a give-back
	// earlier; the usage adds up.
	g = settle(key, T0.Add(2*time.Millisecond), 100*time.Millisecond, 812.5, 2)
	check(t, "debt on a busy row: next", g.Next.UnixMicro(), at(2*sp+100*time.Millisecond))
	check(t, "debt on a busy row: used", g.Used, 812.5)
	check(t, "debt on a busy row: calls", g.Calls, int64(2))
	check(t, "debt on a busy row: drift", g.Drift, 100*time.Millisecond)
	g = settle(key, T0.Add(3*time.Millisecond), -30*time.Millisecond, 100, 1)
	check(t, "give-back on a busy row: next", g.Next.UnixMicro(), at(2*sp+70*time.Millisecond))
	check(t, "usage accumulates: used", g.Used, 912.5)
	check(t, "usage accumulates: calls", g.Calls, int64(3))
	check(t, "give-back on a busy row: drift", g.Drift, 70*time.Millisecond)
	g = lease(key, T0.Add(4*time.Millisecond), false)
	check(t, "after settles: granted", g.Granted, true)
	check(t, "after settles: starts at next", g.Start.UnixMicro(), at(2*sp+70*time.Millisecond))
	check(t, "after settles: next", g.Next.UnixMicro(), at(3*sp+70*time.Millisecond))
	check(t, "granted lease: used", g.Used, 912.5)
	check(t, "granted lease: calls", g.Calls, int64(3))
	check(t, "granted lease: drift", g.Drift, 70*time.Millisecond)

	// A debt past the horizon: leases are refused with the row's Next and
	// usage, and book nothing.
	far := 3*sp + 70*time.Millisecond + 2*time.Second
	g = settle(key, T0.Add(5*time.Millisecond), 2*time.Second, 0, 0)
	check(t, "zero usage: next", g.Next.UnixMicro(), at(far))
	check(t, "zero usage: used", g.Used, 912.5)
	for _, idle := range []bool{false, true} {
		g = lease(key, T0.Add(6*time.Millisecond), idle)
		check(t, "past the horizon: granted", g.Granted, false)
		check(t, "past the horizon: next", g.Next.UnixMicro(), at(far))
		check(t, "refused lease: used", g.Used, 912.5)
		check(t, "refused lease: calls", g.Calls, int64(3))
		check(t, "refused lease: drift", g.Drift, 2070*time.Millisecond)
	}

	// Settles on the idle row (its Next passed): a debt starts now, a
	// give-back banks nothing; both add their usage.
	g = settle(key, T0.Add(time.Minute), 50*time.Millisecond, 0.5, 1)
	check(t, "debt on an idle row: next", g.Next.UnixMicro(), at(time.Minute+50*time.Millisecond))
	check(t, "debt on an idle row: used", g.Used, 913.0)
	check(t, "debt on an idle row: calls", g.Calls, int64(4))
	check(t, "debt on an idle row: drift", g.Drift, 2120*time.Millisecond)
	g = settle(key, T0.Add(2*time.Minute), -40*time.Millisecond, 7, 1)
	check(t, "give-back on an idle row: next", g.Next.UnixMicro(), at(time.Minute+50*time.Millisecond))
	check(t, "give-back on an idle row: used", g.Used, 920.0)
	check(t, "give-back on an idle row: calls", g.Calls, int64(5))
	g = settle(key, T0.Add(2*time.Minute), 0, 1, 1)
	check(t, "no delta: next", g.Next.UnixMicro(), at(time.Minute+50*time.Millisecond))
	check(t, "no delta: used", g.Used, 921.0)
	check(t, "give-back on an idle row, no delta: drift unmoved", g.Drift, 2120*time.Millisecond)
	r, err := s.ReadTokens(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "read: next", r.Next.UnixMicro(), at(time.Minute+50*time.Millisecond))
	check(t, "read: used", r.Used, 921.0)
	check(t, "read: calls", r.Calls, int64(6))
	check(t, "read: drift", r.Drift, 2120*time.Millisecond)
	check(t, "read: not a lease", r.Granted, false)
	if r, err := s.ReadTokens(ctx, prefix+"-none"); err != nil || r.Calls != 0 || !r.Next.IsZero() || r.Drift != 0 {
		t.Errorf("read of no row: %+v %v, want the zero grant", r, err)
	}

	// No row: a give-back or no delta makes one with usage and no Next,
	// which a lease then finds idle, whichever form it tries first; a
	// debt starts now.
	for i, idle := range []bool{false, true} {
		k := prefix + "-b" + string(rune('0'+i))
		g = settle(k, T0, -10*time.Millisecond, 3, 1)
		check(t, "give-back on no row: no next", g.Next.IsZero(), true)
		check(t, "give-back on no row: used", g.Used, 3.0)
		g = settle(k, T0, 0, 2, 1)
		check(t, "no delta on a row without next: no next", g.Next.IsZero(), true)
		g = lease(k, T0.Add(time.Second), idle)
		check(t, "settled row without next: granted", g.Granted, true)
		check(t, "settled row without next: starts now", g.Start.UnixMicro(), at(time.Second))
		check(t, "settled row without next: next", g.Next.UnixMicro(), at(time.Second+sp))
		check(t, "settled row without next: used", g.Used, 5.0)
		check(t, "settled row without next: calls", g.Calls, int64(2))
	}
	g = settle(prefix+"-c", T0, 25*time.Millisecond, 4, 1)
	check(t, "debt on no row: next", g.Next.UnixMicro(), at(25*time.Millisecond))
	check(t, "debt on no row: used", g.Used, 4.0)
}

// tokenSettlesAtOnce guards settles written at once from many goroutines:
// none lost, none counted twice, in usage, Next and drift.
func tokenSettlesAtOnce(t *testing.T, s ledger.Store) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	prefix := "suite-" + hex.EncodeToString(nonce[:])
	settle := func(key string, now time.Time, delta time.Duration, used float64, calls int) pace.TokenGrant {
		t.Helper()
		g, err := s.SettleTokens(ctx, pace.TokenSettle{Key: key, Delta: delta, Used: used, Calls: calls, Now: now})
		if err != nil {
			t.Fatalf("settle %s at %v by %v: %v", key, now, delta, err)
		}
		return g
	}
	// Settles at once, 40 each of 1.25 tokens over 2 calls: none lost,
	// none counted twice. On a row 1 s ahead (it stays busy), half a debt
	// of 10 ms, half a give-back of 5 ms; on no row, 40 debts of 10 ms
	// (one starts Next now, every other moves it on from there).
	now := T0.Add(time.Hour)
	settle(prefix+"-d", now, time.Second, 0, 0)
	for _, c := range []struct {
		key        string
		back, next time.Duration
	}{{prefix + "-d", -5 * time.Millisecond, time.Second + 100*time.Millisecond}, {prefix + "-e", 10 * time.Millisecond, 400 * time.Millisecond}} {
		var wg sync.WaitGroup
		for i := range 40 {
			delta := 10 * time.Millisecond
			if i%2 == 1 {
				delta = c.back
			}
			wg.Go(func() {
				if _, err := s.SettleTokens(ctx, pace.TokenSettle{Key: c.key, Delta: delta, Used: 1.25, Calls: 2, Now: now}); err != nil {
					t.Errorf("concurrent settle of %s: %v", c.key, err)
				}
			})
		}
		wg.Wait()
		g := settle(c.key, now, 0, 0, 0)
		check(t, "concurrent settles: next", g.Next.UnixMicro(), now.Add(c.next).UnixMicro())
		check(t, "concurrent settles: used", g.Used, 50.0)
		check(t, "concurrent settles: calls", g.Calls, int64(80))
		check(t, "concurrent settles: drift (every settle moved Next)", g.Drift, c.next)
		g, err := s.LeaseTokens(ctx, pace.TokenLease{Key: c.key, Spacing: time.Millisecond, Now: now, Horizon: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		check(t, "lease after concurrent settles: used", g.Used, 50.0)
		check(t, "lease after concurrent settles: calls", g.Calls, int64(80))
	}
}
