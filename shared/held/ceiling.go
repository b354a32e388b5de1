package held

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// ceiling is one per-item ceiling: its hold subject, the cost name its
// total is read from, its bound, and how its amounts read.
type ceiling struct {
	subject, cost string
	bound         float64
	unit          func(decimal.Decimal) string
}

// ceilingsOf lists the ceilings c sets, in a fixed order (spend first).
func ceilingsOf(c api.Ceilings) []ceiling {
	var out []ceiling
	if c.SpendUSD > 0 {
		out = append(out, ceiling{api.CeilingSpendUSD, api.SpendCostName, c.SpendUSD, func(d decimal.Decimal) string { return "$" + d.String() }})
	}
	if c.Tokens > 0 {
		out = append(out, ceiling{api.CeilingTokens, api.TokensCostName, c.Tokens, func(d decimal.Decimal) string { return d.String() + " tokens" }})
	}
	return out
}

// RunSpent is what item s's attempts of run spent, as their pipeline
// reported it (ItemState.Spent, kept for SpentRun): nil for another run.
func RunSpent(spent pipeline.Cost, spentRun, run int) pipeline.Cost {
	if spentRun != run {
		return nil
	}
	return spent
}

// Reached names the first ceiling of c (spend, then tokens) that spent
// (an item's totals of its run, RunSpent) has reached — at or past its
// bound, compared as exact decimals — with a sentence for the item's
// error; ok false when none is reached.
func Reached(c api.Ceilings, spent pipeline.Cost) (subject, text string, ok bool) {
	for _, x := range ceilingsOf(c) {
		total, bound := decimal.NewFromFloat(spent[x.cost]), decimal.NewFromFloat(x.bound)
		if total.GreaterThanOrEqual(bound) {
			return x.subject, fmt.Sprintf("its attempts of this run reported %s, at or past its per-item ceiling %s (%s)",
				x.unit(total), x.unit(bound), x.subject), true
		}
	}
	return "", "", false
}

// Below reports whether spent (an item's totals of its run) is under
// every ceiling c sets: an exhausted item that may run again.
func Below(c api.Ceilings, spent pipeline.Cost) bool {
	_, _, reached := Reached(c, spent)
	return !reached
}

// Exhaust is the ending of the attempt that left item s (its state after
// the attempt, Spent counting it) with e in run, under the batch's
// ceilings c (nil: none): when e would retry the item (e.Retry()) and
// its totals reached a ceiling, the item ends exhausted (held, not a
// failure) at now, its hold naming the ceiling, and ok is true. Any
// other ending — a success, a permanent failure, a quarantine, a failure
// at max attempts — is returned as it is: a ceiling never turns an
// item's ending into a failure, nor a success into anything else.
func Exhaust(c *api.Ceilings, s ledger.ItemState, e ledger.Ending, run int, now time.Time) (ledger.Ending, bool) {
	if c == nil || !e.Retry() {
		return e, false
	}
	subject, text, reached := Reached(*c, RunSpent(s.Spent, s.SpentRun, run))
	if !reached {
		return e, false
	}
	why := text + "; the attempt before it: " + e.Error
	// The retry's own marks stay: an attempt that counts none (throttled,
	// a paused batch's probe, unrun, rotated) counts none held either, so
	// that the attempt a raise wakes is not past max attempts. Its failure
	// class does not: the attempt reported what it spent, so the
	// downstream answered, and held items do not make an outage pause
	// (a paused run whose items are all held would have nothing to probe).
	x := e
	x.Outcome, x.Reason, x.Error, x.Wait, x.Class = api.OutcomeExhausted, api.ReasonCeiling, pipeline.CutText(why, pipeline.MaxErrorTextBytes), 0, ""
	x.Hold = api.Hold{Subject: subject, Since: now}
	return x, true
}

// Raise wakes the exhausted items of b's current run whose totals are
// under every ceiling of b (b.Ceilings, as just raised; Below): each
// runs exactly once more (ledger.Plan takes only woken items), keeping
// its run's attempts and spend. The others stay exhausted, counted in
// Woken.Skipped. Bounded by took as Wake; idempotent as Wake.
func (w *Waker) Raise(ctx context.Context, b ledger.Batch, took time.Duration) (Woken, error) {
	c := api.Ceilings{}
	if b.Ceilings != nil {
		c = *b.Ceilings
	}
	pick := func(it ledger.Item) bool { return Below(c, RunSpent(it.Spent, it.SpentRun, b.Run)) }
	return w.Wake(ctx, b, Filter{Outcome: api.OutcomeExhausted, By: api.WakeRaise, Pick: pick}, took)
}

// ExhaustedEvent is the detail of an Items Exhausted event
// (api.DetailItemsExhausted): one write of the item function recorded
// Items items of run Run exhausted, at the ceilings Subjects names
// (sorted), the first up to 10 keys in Keys. EventID is "{batch_id}:
// {run}:exhausted:{unit}:{attempt end epoch ms}", the same on every
// delivery of one write.
type ExhaustedEvent struct {
	EventID  string        `json:"event_id"`
	BatchID  string        `json:"batch_id"`
	Run      int           `json:"run"`
	Items    int           `json:"items"`
	Subjects []string      `json:"subjects"`
	Keys     []string      `json:"keys"`
	Ceilings *api.Ceilings `json:"ceilings,omitempty"`
	At       time.Time     `json:"at"`
}

// AnnounceExhausted puts e (bus nil: nothing); a failure is logged.
func AnnounceExhausted(ctx context.Context, bus ledger.EventBus, log interface {
	Warn(string, ...any)
}, e ExhaustedEvent) {
	if bus == nil {
		return
	}
	if err := bus.Put(ctx, api.DetailItemsExhausted, e); err != nil {
		log.Warn("put items exhausted event", "batch_id", e.BatchID, "error", err.Error())
	}
}
