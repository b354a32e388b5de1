package api

import (
	"fmt"
	"math"
)

// Ceilings are a batch's per-item ceilings (Batch.Ceilings): what one
// item's attempts of a run may use, summed over those attempts as their
// pipeline reported it (Item.Spent). An attempt that ends with the
// item's totals at or past a ceiling, and that would have been retried,
// ends the item exhausted (OutcomeExhausted), not failed: it waits for a
// caller to raise the ceiling (POST /batches/{id}/ceilings) or cancel. A
// success is never turned into anything else, and a permanent failure,
// a quarantine or a failure at max attempts stay what they are. JSON:
//
//	{"spend_usd": 0.5, "tokens": 20000}
//
// A zero field is no ceiling on that quantity. docs/adr/0033-per-item-ceilings.md.
type Ceilings struct {
	// SpendUSD bounds the US dollars an item's attempts of a run reported
	// under the cost name SpendCostName ("usd"): > 0 and ≤ MaxBudgetUSD.
	SpendUSD float64 `json:"spend_usd,omitempty"`
	// Tokens bounds the usage an item's attempts of a run reported under
	// the cost name TokensCostName ("tokens"): > 0 and ≤ MaxCeilingTokens.
	Tokens float64 `json:"tokens,omitempty"`
}

// TokensCostName is the cost name a pipeline reports its usage under
// for Ceilings.Tokens: "tokens" (pipeline.Cost{"tokens": 812}).
const TokensCostName = "tokens"

// MaxCeilingTokens is the largest Ceilings.Tokens: 10^15.
const MaxCeilingTokens = 1e15

// The hold subjects of exhausted items (Hold.Subject): the ceiling the
// item's totals reached.
const (
	CeilingSpendUSD = "ceiling:spend_usd"
	CeilingTokens   = "ceiling:tokens"
)

// IsZero reports whether c sets no ceiling.
func (c Ceilings) IsZero() bool { return c.SpendUSD == 0 && c.Tokens == 0 }

// Check is nil when every ceiling c sets is valid, else an *InputError
// naming field + "." + the ceiling's JSON name (field "ceilings":
// "ceilings.spend_usd"). A zero ceiling is none.
func (c Ceilings) Check(field string) error {
	bad := func(v float64, lo, hi float64) bool {
		return v != 0 && (math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi)
	}
	if bad(c.SpendUSD, MinBudgetUSD, MaxBudgetUSD) {
		return &InputError{Field: field + ".spend_usd", Reason: fmt.Sprintf("%v is not a ceiling in US dollars: want a number from %s to %s (0: none)",
			c.SpendUSD, USDText(MinBudgetUSD), USDText(MaxBudgetUSD))}
	}
	if bad(c.Tokens, 1, MaxCeilingTokens) {
		return &InputError{Field: field + ".tokens", Reason: fmt.Sprintf("%v is not a ceiling in tokens: want a number from 1 to %s (0: none)",
			c.Tokens, USDText(MaxCeilingTokens))}
	}
	return nil
}

// Merge is c with each ceiling that raise sets (non-zero) taken from
// raise; the others stay.
func (c Ceilings) Merge(raise Ceilings) Ceilings {
	if raise.SpendUSD != 0 {
		c.SpendUSD = raise.SpendUSD
	}
	if raise.Tokens != 0 {
		c.Tokens = raise.Tokens
	}
	return c
}

// CeilingsResult is the answer of POST /batches/{id}/ceilings: the
// batch's ceilings now, how many exhausted items the call woke (their
// totals are under every ceiling now; each runs exactly once more) or
// found woken by an earlier call, whose message it sent again
// (AlreadyWoken of them), how many stay exhausted (a ceiling still at or
// under their totals), and Done false when more are left for another
// call (each call wakes what it can in a bounded time; repeating it goes
// on). Over the calls of one raise, the first call's Woken plus each
// later call's Woken − AlreadyWoken counts every item once when no other
// wake ran before or between the calls.
type CeilingsResult struct {
	Ceilings     Ceilings `json:"ceilings"`
	Woken        int64    `json:"woken"`
	AlreadyWoken int64    `json:"already_woken"`
	Still        int64    `json:"still_exhausted"`
	Done         bool     `json:"done"`
}
