package live

import (
	"math"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// Adaptive is the adaptive pace downstream key holds its batches to at
// now (api.AdaptivePace), from the key's adaptive row a; nil when the
// key is not paced (never throttled, its limit past pace.AdaptCeiling,
// or its last cut pace.AdaptForget old, with no Retry-After ahead).
func Adaptive(key string, a pace.Adapt, now time.Time) *api.AdaptivePace {
	if !a.Paced(now) {
		return nil
	}
	p := &api.AdaptivePace{Key: key, LimitPerSecond: a.LimitAt(now), CutAt: a.Cut.UTC(), SlowStart: a.Slow, Cause: api.AdaptCauseThrottled}
	if a.Restarted {
		p.Cause = api.AdaptCauseResumed
	}
	if a.Slow && a.Thresh > 0 {
		// Slow start ends at its threshold; past it, the limit grows by
		// its step.
		p.SlowStart = p.LimitPerSecond < a.Thresh
		if p.SlowStart {
			p.SlowStartTo = a.Thresh
		}
	}
	if a.Hold.After(now) {
		h := a.Hold.UTC()
		p.HoldUntil = &h
		if p.LimitPerSecond == 0 {
			p.LimitPerSecond = a.Limit // held: the limit the cut set, which the pace starts from
		}
	}
	if !p.SlowStart {
		p.StepPerSecond = a.Step
	}
	if ahead := a.Booked - a.Allowance(now); ahead >= 1 && p.LimitPerSecond > 0 {
		// At the limit as it stands, not as it would grow: a limit grows
		// only until the next throttled answer, so its growth is no
		// promise (a user read "the last due" 11 s away for calls that
		// took minutes).
		p.BookedAhead = int64(math.Floor(ahead))
		from := now
		if p.HoldUntil != nil {
			from = *p.HoldUntil
		}
		c := from.Add(time.Duration(ahead / p.LimitPerSecond * float64(time.Second))).UTC().Round(time.Second)
		p.ClearAt = &c
	}
	return p
}
