package api

import (
	"testing"
	"time"
)

// TestBookedHoldsTheFinishToTheKeysBookings guards the live estimate of a
// batch waiting behind its rate key: a finish the pace puts before the
// key's bookings end is moved to their end (FinishBooked); one after it,
// a run with nothing left, or no booking, is left as it is.
func TestBookedHoldsTheFinishToTheKeysBookings(t *testing.T) {
	now := time.Date(2026, 12, 6, 13, 20, 0, 0, time.UTC)
	until := now.Add(190*time.Second + 600*time.Millisecond)
	l := LiveView{Estimate: &Estimate{Remaining: 12, FinishAt: now.Add(47 * time.Second)}}
	l.Booked(&RateBooked{Key: "hooks.local", By: BookedByTokens, Until: until})
	if e := l.Estimate; !e.FinishBooked || !e.FinishAt.Equal(now.Add(191*time.Second)) || l.RateBooked == nil {
		t.Errorf("finish %v (booked %v), want %v, booked", e.FinishAt, e.FinishBooked, now.Add(191*time.Second))
	}
	for _, e := range []*Estimate{{Remaining: 12, FinishAt: until.Add(time.Minute)}, {Remaining: 0, FinishAt: now}} {
		was := e.FinishAt
		l := LiveView{Estimate: e}
		l.Booked(&RateBooked{Until: until})
		if e.FinishBooked || !e.FinishAt.Equal(was) {
			t.Errorf("%+v moved to %v", *e, e.FinishAt)
		}
	}
	l = LiveView{Estimate: &Estimate{Remaining: 12, FinishAt: now}}
	l.Booked(nil)
	if l.Estimate.FinishBooked || l.RateBooked != nil {
		t.Errorf("no booking: %+v", l)
	}
}
