package pacetest

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// rateLeases guards Store.LeaseRate: an idle row (none yet, or its Next
// passed) starts a lease now, whichever form the hint picks first; a busy
// row starts it at its Next; a Next past the horizon books nothing; and
// leases taken at once from many goroutines never overlap (each starts
// where another ended, none lost), at microsecond precision. Keys are
// random: rate rows belong to no batch and outlive the case.
func rateLeases(t *testing.T, s ledger.Store) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	key := "suite-" + hex.EncodeToString(nonce[:])
	sp := 20 * time.Millisecond
	lease := func(shard int, now time.Time, idle bool) pace.RateGrant {
		t.Helper()
		g, err := s.LeaseRate(ctx, pace.RateLease{Key: key, Shard: shard, Spacing: sp, Now: now, Horizon: time.Second, Idle: idle})
		if err != nil {
			t.Fatalf("lease at %v: %v", now, err)
		}
		return g
	}
	for _, idle := range []bool{false, true} {
		shard := 0
		if idle {
			shard = 1
		}
		g := lease(shard, T0, idle)
		check(t, "no row: granted", g.Granted, true)
		check(t, "no row: starts now", g.Start.UnixMicro(), T0.UnixMicro())
		check(t, "no row: next", g.Next.UnixMicro(), T0.Add(sp).UnixMicro())
		g = lease(shard, T0.Add(time.Millisecond), !idle)
		check(t, "busy: starts at next", g.Start.UnixMicro(), T0.Add(sp).UnixMicro())
		check(t, "busy: next", g.Next.UnixMicro(), T0.Add(2*sp).UnixMicro())
		g = lease(shard, T0.Add(time.Minute), !idle)
		check(t, "passed: starts now", g.Start.UnixMicro(), T0.Add(time.Minute).UnixMicro())
		next, err := s.ReadRate(ctx, key, shard)
		check(t, "read: the row's next", next.UnixMicro(), g.Next.UnixMicro())
		check(t, "read: no error", err, nil)
	}
	if next, err := s.ReadRate(ctx, key, 7); err != nil || !next.IsZero() {
		t.Errorf("read of a shard with no row: %v, %v; want the zero time", next, err)
	}
	// 80 leases at once at T0 + 1 h on shard 2: 50 fit in the 1 s horizon
	// (the first starts now), the others are refused with the row's Next.
	at := T0.Add(time.Hour)
	var mu sync.Mutex
	var starts []int64
	refused := 0
	var wg sync.WaitGroup
	for range 80 {
		wg.Go(func() {
			g, err := s.LeaseRate(ctx, pace.RateLease{Key: key, Shard: 2, Spacing: sp, Now: at, Horizon: time.Second})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("concurrent lease: %v", err)
			case g.Granted:
				starts = append(starts, g.Start.UnixMicro())
			default:
				refused++
				if g.Next.Sub(at) <= time.Second {
					t.Errorf("refused with next %v, within the horizon", g.Next.Sub(at))
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(starts)
	for i, st := range starts {
		if want := at.Add(time.Duration(i) * sp).UnixMicro(); st != want {
			t.Fatalf("lease %d of %d starts at +%v, want +%v (leases overlap or one was lost)", i, len(starts), time.Duration(st-at.UnixMicro())*time.Microsecond, time.Duration(want-at.UnixMicro())*time.Microsecond)
		}
	}
	check(t, "granted within the horizon", len(starts), 51)
	check(t, "refused past it", refused, 29)
}
