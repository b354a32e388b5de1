package held

import (
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

func TestReached(t *testing.T) {
	c := api.Ceilings{SpendUSD: 0.3, Tokens: 1000}
	for _, tc := range []struct {
		name    string
		spent   pipeline.Cost
		subject string
	}{
		{"nothing spent", nil, ""},
		{"under both", pipeline.Cost{"usd": 0.29, "tokens": 999}, ""},
		{"usd exactly at, as decimals (0.1 + 0.2)", pipeline.Cost{"usd": 0.1 + 0.2}, api.CeilingSpendUSD},
		{"tokens past", pipeline.Cost{"usd": 0.1, "tokens": 1200}, api.CeilingTokens},
		{"both: spend first", pipeline.Cost{"usd": 1, "tokens": 5000}, api.CeilingSpendUSD},
		{"other names do not count", pipeline.Cost{"calls": 1e6}, ""},
	} {
		subject, text, ok := Reached(c, tc.spent)
		if subject != tc.subject || ok != (tc.subject != "") || ok && text == "" {
			t.Errorf("%s: %q %q %v; want %q", tc.name, subject, text, ok, tc.subject)
		}
		if Below(c, tc.spent) == ok {
			t.Errorf("%s: Below %v, Reached %v", tc.name, !ok, ok)
		}
	}
	if _, _, ok := Reached(api.Ceilings{}, pipeline.Cost{"usd": 1e9}); ok {
		t.Error("no ceiling reached something")
	}
}

func TestExhaustOnlyRetries(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	c := &api.Ceilings{Tokens: 100}
	s := ledger.ItemState{Key: "k", Run: 2, Spent: pipeline.Cost{"tokens": 150}, SpentRun: 2}
	retry := ledger.Ending{Outcome: api.OutcomeInFlight, Error: "HTTP 503", Wait: time.Second, Class: "http-503"}
	e, ok := Exhaust(c, s, retry, 2, now)
	if !ok || e.Outcome != api.OutcomeExhausted || e.Reason != api.ReasonCeiling || e.Hold.Subject != api.CeilingTokens ||
		!e.Hold.Since.Equal(now) || e.Retry() || e.Wait != 0 || e.Class != "" {
		t.Fatalf("a retry past the tokens ceiling: %+v %v; want exhausted at %s, no failure class", e, ok, api.CeilingTokens)
	}
	// A throttled retry counts no attempt held either: the attempt a
	// raise wakes is then not past max attempts.
	throttled := ledger.Ending{Outcome: api.OutcomeInFlight, Error: "HTTP 429", Wait: time.Second, Throttled: true, ThrottledSince: now}
	if e, ok := Exhaust(c, s, throttled, 2, now); !ok || e.Outcome != api.OutcomeExhausted || !e.Throttled ||
		ledger.Ended(ledger.ItemState{Attempt: 3, FirstAttempt: 1}, e, now).RunAttempts() != 2 {
		t.Errorf("a throttled retry past the ceiling: %+v %v; want exhausted, its attempt not counted", e, ok)
	}
	for _, end := range []ledger.Ending{
		{Outcome: api.OutcomeSucceeded},
		{Outcome: api.OutcomeFailed, Reason: api.ReasonPermanent},
		{Outcome: api.OutcomeFailed, Reason: api.ReasonMaxAttempts},
		{Outcome: api.OutcomeQuarantined, Reason: api.ReasonQuarantine},
	} {
		if got, ok := Exhaust(c, s, end, 2, now); ok || got.Outcome != end.Outcome || got.Reason != end.Reason {
			t.Errorf("%s (%s) past the ceiling: %+v %v; want it as it was", end.Outcome, end.Reason, got, ok)
		}
	}
	if _, ok := Exhaust(c, s, retry, 3, now); ok {
		t.Error("an earlier run's spend reached this run's ceiling")
	}
	if _, ok := Exhaust(nil, s, retry, 2, now); ok {
		t.Error("a batch without ceilings exhausted an item")
	}
}

func TestCeilingsCheckNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		c     api.Ceilings
		field string
	}{
		{api.Ceilings{SpendUSD: 0.5, Tokens: 10}, ""},
		{api.Ceilings{SpendUSD: -1}, "ceilings.spend_usd"},
		{api.Ceilings{SpendUSD: 2e9}, "ceilings.spend_usd"},
		{api.Ceilings{Tokens: 0.5}, "ceilings.tokens"},
	} {
		err := tc.c.Check("ceilings")
		ie, _ := err.(*api.InputError)
		if tc.field == "" && err != nil || tc.field != "" && (ie == nil || ie.Field != tc.field) {
			t.Errorf("%+v: %v; want field %q", tc.c, err, tc.field)
		}
	}
	if got := (api.Ceilings{SpendUSD: 1, Tokens: 5}).Merge(api.Ceilings{Tokens: 9}); got != (api.Ceilings{SpendUSD: 1, Tokens: 9}) {
		t.Errorf("merge: %+v", got)
	}
}
