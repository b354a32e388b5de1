package live

import (
	"math"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// TestAdaptiveShowsAPacedKey guards the live view's adaptive pace
// (api.AdaptivePace): none for a key never throttled or forgotten; a
// throttled key's limit, cut and hold while its Retry-After is ahead,
// slow start with no step; after a cut out of slow start the limit grown
// by its step; slow start's end while on the way to it, the step past
// it; and the calls booked past the allowance with when the
// last of them is due at the limit as it stands.
func TestAdaptiveShowsAPacedKey(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	if p := Adaptive("api.example.com", pace.Adapt{}, t0); p != nil {
		t.Fatalf("a key never throttled: %+v, want none", *p)
	}
	a, _ := pace.Adapt{}.Throttled(t0, 100, pace.AdaptBackoff, 2*time.Second, time.Time{})
	p := Adaptive("api.example.com", a, t0.Add(time.Second))
	if p == nil {
		t.Fatal("a key throttled a second ago: no pace shown")
	}
	if p.Key != "api.example.com" || p.LimitPerSecond != 70 || !p.CutAt.Equal(t0) || !p.SlowStart || p.StepPerSecond != 0 ||
		p.HoldUntil == nil || !p.HoldUntil.Equal(t0.Add(2*time.Second)) || p.BookedAhead != 0 || p.ClearAt != nil {
		t.Errorf("within its Retry-After: %+v, want limit 70 in slow start, cut t0, held to t0+2s, nothing booked", *p)
	}
	if p.Cause != api.AdaptCauseThrottled {
		t.Errorf("a throttled key's cause %q, want %q", p.Cause, api.AdaptCauseThrottled)
	}
	if r, _ := (pace.Adapt{}).Resumed(t0); Adaptive("api.example.com", r, t0.Add(time.Second)).Cause != api.AdaptCauseResumed {
		t.Errorf("a key restarted by a resume: cause %q, want %q", Adaptive("api.example.com", r, t0.Add(time.Second)).Cause, api.AdaptCauseResumed)
	}
	b := pace.Adapt{Limit: 98, Step: 9.8, Cut: t0.Add(4 * time.Second), Base: 200} // a cut to 98, +9.8/s
	b.Booked = b.Allowance(t0.Add(5*time.Second)) + 300
	p = Adaptive("api.example.com", b, t0.Add(5*time.Second))
	if p == nil {
		t.Fatal("a key cut a second ago: no pace shown")
	}
	if math.Abs(p.LimitPerSecond-107.8) > 1e-6 || p.SlowStart || math.Abs(p.StepPerSecond-9.8) > 1e-6 || p.HoldUntil != nil {
		t.Errorf("a second after a cut to 98: %+v, want limit 107.8 growing by 9.8/s, no hold", *p)
	}
	if p.BookedAhead != 300 || p.ClearAt == nil {
		t.Fatalf("300 calls booked past the allowance: %+v", *p)
	}
	if want := t0.Add(5*time.Second + 2783*time.Millisecond); p.ClearAt.Sub(want).Abs() > 600*time.Millisecond {
		t.Errorf("clear at %v, want %v: 300 calls at 107.8 a second (2.78 s), the limit held as it is", *p.ClearAt, want)
	}
	if p := Adaptive("api.example.com", b, t0.Add(4*time.Second+pace.AdaptForget)); p != nil {
		t.Errorf("a cut %v old: %+v, want none", pace.AdaptForget, *p)
	}
	// Slow start up to the pace the key had when it closed: where it ends
	// is shown while on the way, the step once past it.
	s := pace.Adapt{Limit: 16.8, Step: 2.4, Slow: true, Thresh: 24, Cut: t0}
	if p := Adaptive("api.example.com", s, t0.Add(500*time.Millisecond)); p == nil || !p.SlowStart || p.SlowStartTo != 24 || p.StepPerSecond != 0 {
		t.Errorf("in slow start to 24: %+v, want slow start up to 24, no step", p)
	}
	if p := Adaptive("api.example.com", s, t0.Add(5*time.Second)); p == nil || p.SlowStart || p.SlowStartTo != 0 || p.StepPerSecond != 2.4 {
		t.Errorf("past slow start's end: %+v, want no slow start, step 2.4", p)
	}
}
