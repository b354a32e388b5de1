package pacetest

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// adaptCuts guards Store.ReadAdapt and CutAdapt (docs/adr/0036): no row
// reads as the zero Adapt; a cut from what was read is written whole (at
// microseconds) and read back; a cut from a row that changed since is
// refused, nothing written, the stored row answered; a zero Hold (and a
// zero Thresh) removes the one stored; a cut leaves the positions booked
// as they are; and of cuts made at once from the same read exactly one is
// written. Keys are random: adaptive rows belong to no batch.
func adaptCuts(t *testing.T, s ledger.Store) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	key := "suite-" + hex.EncodeToString(nonce[:])
	same := func(what string, got, want pace.Adapt) {
		t.Helper()
		if got.Limit != want.Limit || got.Step != want.Step || got.Slow != want.Slow || got.Thresh != want.Thresh || got.Base != want.Base || got.Booked != want.Booked ||
			got.Restarted != want.Restarted ||
			got.Cut.UnixMicro() != want.Cut.UnixMicro() || got.Hold.UnixMicro() != want.Hold.UnixMicro() ||
			got.Cut.IsZero() != want.Cut.IsZero() || got.Hold.IsZero() != want.Hold.IsZero() {
			t.Errorf("%s = %+v, want %+v", what, got, want)
		}
	}
	read := func() pace.Adapt {
		t.Helper()
		a, err := s.ReadAdapt(ctx, key)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return a
	}
	cut := func(was, row pace.Adapt) (pace.Adapt, bool) {
		t.Helper()
		got, ok, err := s.CutAdapt(ctx, pace.AdaptCut{Key: key, Was: was, Row: row, Now: T0})
		if err != nil {
			t.Fatalf("cut: %v", err)
		}
		return got, ok
	}
	same("no row", read(), pace.Adapt{})
	r1 := pace.Adapt{Limit: 70.5, Step: 7.05, Slow: true, Thresh: 100.75, Cut: T0.Add(1234567 * time.Nanosecond), Hold: T0.Add(2 * time.Second), Restarted: true}
	want1 := r1
	want1.Cut = r1.Cut.Truncate(time.Microsecond)
	got, ok := cut(pace.Adapt{}, r1)
	check(t, "first cut written", ok, true)
	same("first cut's answer", got, want1)
	same("first cut read back", read(), want1)
	got, ok = cut(pace.Adapt{}, pace.Adapt{Limit: 1, Step: 1, Cut: T0})
	check(t, "a cut from no row, once there is one: written", ok, false)
	same("a refused cut's answer", got, want1)
	g, err := s.LeaseAdapt(ctx, pace.AdaptLease{Key: key, N: 10, At: 5, Ahead: 100, Now: T0})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	check(t, "a lease on a row never leased: granted", g.Granted, true)
	check(t, "a lease on a row never leased: from the allowance", g.Pos, 5.0)
	want1.Booked = 15
	same("the lease's row", g.Row, want1)
	r2 := pace.Adapt{Limit: 49.35, Step: 4.935, Base: 12.5, Cut: T0.Add(3 * time.Second), Booked: 999}
	got, ok = cut(want1, r2)
	check(t, "a cut from the row read: written", ok, true)
	r2.Booked = 15
	same("second cut, its Hold, Thresh and Restarted removed, its Booked left", got, r2)
	same("second cut read back", read(), r2)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row := pace.Adapt{Limit: float64(10 + i), Step: 1, Cut: T0.Add(5 * time.Second), Hold: T0.Add(time.Duration(6+i) * time.Second)}
			if _, ok, err := s.CutAdapt(ctx, pace.AdaptCut{Key: key, Was: r2, Row: row, Now: T0}); err != nil {
				t.Errorf("cut at once: %v", err)
			} else if ok {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	check(t, "cuts at once from one read, written", wins.Load(), int32(1))
}

// adaptLeases guards Store.LeaseAdapt: a row booked below the allowance
// (At) starts a lease at At; a busy row at its Booked; a row booked past
// At + Ahead books nothing and answers its Booked; and leases taken at
// once from many goroutines share no position and lose none.
func adaptLeases(t *testing.T, s ledger.Store) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	key := "suite-" + hex.EncodeToString(nonce[:])
	lease := func(n int, at, ahead float64) pace.AdaptGrant {
		t.Helper()
		g, err := s.LeaseAdapt(ctx, pace.AdaptLease{Key: key, N: n, At: at, Ahead: ahead, Now: T0})
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		return g
	}
	g := lease(10, 100, 50)
	check(t, "no row: granted", g.Granted, true)
	check(t, "no row: from At", g.Pos, 100.0)
	g = lease(10, 105, 50)
	check(t, "busy: from Booked", g.Pos, 110.0)
	check(t, "busy: Booked after", g.Row.Booked, 120.0)
	g = lease(1, 200, 50)
	check(t, "idle (Booked below At): from At", g.Pos, 200.0)
	g = lease(10, 100, 50)
	check(t, "past At + Ahead: not granted", g.Granted, false)
	check(t, "past At + Ahead: Booked answered", g.Row.Booked, 201.0)
	var mu sync.Mutex
	var got []float64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := s.LeaseAdapt(ctx, pace.AdaptLease{Key: key, N: 3, At: 190, Ahead: 1000, Now: T0})
			if err != nil || !g.Granted {
				t.Errorf("lease at once: %v (granted %v)", err, g.Granted)
				return
			}
			mu.Lock()
			got = append(got, g.Pos)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(got)
	for i, p := range got {
		if want := 201 + 3*float64(i); p != want {
			t.Fatalf("leases at once start at %v, want 201, 204, … (each 3 after the last)", got)
		}
	}
}
