// Package itemexpr holds the item rows' expressions: the conditions under
// which a write takes, settles or fences an item row (each the DynamoDB
// form of a rule of ledger.Plan), the updates of an outcome, and the
// recognition of a take or settle the SDK sent again after its answer was
// lost (its token on the row). The DynamoDB adapter (internal/dynamo)
// writes with them; they read and build rows in layout's attributes.
package itemexpr

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Fresh is the condition under which an item starts a new run (ledger.Plan):
// no row; a failed, cancelled, held (or interrupted) row of an earlier
// run; a quarantined row of an earlier run that was released.
//
//	attribute_not_exists(pk)
//	OR (run < :run AND (outcome IN (failed, cancelled, in_flight, withheld, exhausted, suspended)
//	                    OR (outcome = quarantined AND released = true)))
//
// In a correction run (rev ≥ 2), exactly a row of an earlier run marked
// with its revision (Store.MarkRevision):
//
//	attribute_not_exists(pk) OR (run < :run AND rev = :rev)
func Fresh(run, rev int) expression.ConditionBuilder {
	out := expression.Name(layout.AttrOutcome)
	if rev >= 2 {
		return expression.Or(
			expression.AttributeNotExists(expression.Name(config.AttrPK)),
			expression.And(expression.Name(layout.AttrRun).LessThan(expression.Value(run)), expression.Name(layout.AttrRevision).Equal(expression.Value(rev))),
		)
	}
	return expression.Or(
		expression.AttributeNotExists(expression.Name(config.AttrPK)),
		expression.And(
			expression.Name(layout.AttrRun).LessThan(expression.Value(run)),
			expression.Or(
				expression.In(out, expression.Value(string(api.OutcomeFailed)), append([]expression.OperandBuilder{expression.Value(string(api.OutcomeCancelled)),
					expression.Value(string(api.OutcomeInFlight))}, HeldValues()...)...),
				expression.And(out.Equal(expression.Value(string(api.OutcomeQuarantined))), expression.Name(layout.AttrReleased).Equal(expression.Value(true))),
			),
		),
	)
}

// Expired is the condition of a takeover: the item is in flight in this
// run and its lease has expired.
//
//	run = :run AND outcome = in_flight AND lease_until_ms < :now
func Expired(run int, now time.Time) expression.ConditionBuilder {
	return expression.And(
		expression.Name(layout.AttrRun).Equal(expression.Value(run)),
		expression.Name(layout.AttrOutcome).Equal(expression.Value(string(api.OutcomeInFlight))),
		expression.Name(layout.AttrLeaseUntilMs).LessThan(expression.Value(now.UnixMilli())),
	)
}

// IsHeld is the condition of a held row (api.HeldOutcomes):
//
//	outcome IN (withheld, exhausted, suspended)
func IsHeld() expression.ConditionBuilder {
	v := HeldValues()
	return expression.In(expression.Name(layout.AttrOutcome), v[0], v[1:]...)
}

// HeldValues are the held outcomes (api.HeldOutcomes) as operands.
func HeldValues() []expression.OperandBuilder {
	var v []expression.OperandBuilder
	for _, o := range api.HeldOutcomes() {
		v = append(v, expression.Value(string(o)))
	}
	return v
}

// Woken is the condition under which a held item moves on in its run
// (ledger.ItemState.Woken): woken by a caller.
//
//	run = :run AND outcome IN (withheld, exhausted, suspended) AND attribute_exists(woken)
func Woken(run int) expression.ConditionBuilder {
	return expression.And(
		expression.Name(layout.AttrRun).Equal(expression.Value(run)),
		IsHeld(),
		expression.AttributeExists(expression.Name(layout.AttrWoken)),
	)
}

// RemoveHold removes a held item's hold attributes.
func RemoveHold(u expression.UpdateBuilder) expression.UpdateBuilder {
	return u.Remove(expression.Name(layout.AttrHoldSubject)).Remove(expression.Name(layout.AttrHoldSinceMs)).Remove(expression.Name(layout.AttrWoken)).
		Remove(expression.Name(layout.AttrHoldWakeAtMs))
}

// RemoveSignalled removes the attempt a signal ended (an outcome is
// recorded, or a new run starts).
func RemoveSignalled(u expression.UpdateBuilder) expression.UpdateBuilder {
	return u.Remove(expression.Name(layout.AttrSignalled))
}

// Fenced is the condition of Record and Release:
//
//	outcome = in_flight AND attempt = :attempt AND run = :run
func Fenced(run, attempt int) expression.ConditionBuilder {
	return expression.And(
		expression.Name(layout.AttrOutcome).Equal(expression.Value(string(api.OutcomeInFlight))),
		expression.Name(layout.AttrAttempt).Equal(expression.Value(attempt)),
		expression.Name(layout.AttrRun).Equal(expression.Value(run)),
	)
}

// Identity sets the run and the time of a write of an item row.
func Identity(u expression.UpdateBuilder, run int, now time.Time) expression.UpdateBuilder {
	return u.Set(expression.Name(layout.AttrRun), expression.Value(run)).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(now.UnixMilli()))
}

// Kind is which of the adapter's take or settle conditions a write is;
// stored after its token (layout.AttrTakeToken: "{token}.{kind}"), so that a resend, which may
// come through another of the conditions (Reserve tries them in turn),
// knows what the take found.
type Kind byte

const (
	TakeFresh  Kind = 'f'
	TakeOver   Kind = 'o'
	TakeResume Kind = 'r'
)

// SetToken stores a take's or settle's token and kind on the row
// (layout.AttrTakeToken: "{token}.{kind}"); an empty token stores none.
func SetToken(u expression.UpdateBuilder, token string, kind Kind) expression.UpdateBuilder {
	if token == "" {
		return u
	}
	return u.Set(expression.Name(layout.AttrTakeToken), expression.Value(token+"."+string(kind)))
}

// TakenBefore recognises a take sent again after its answer was lost
// (ledger.Reservation.Token): the row refused it, but it is in flight in
// r's run under r's token, so the first try was applied. It answers what
// that try would have: the item as taken, with what the take found
// (interrupted, resumed, throttled, spent, signalled) read from the row,
// where the take kept it or copied it (layout.AttrTookRetry …), by the kind of
// take stored with the token.
func TakenBefore(r ledger.Reservation, stored map[string]types.AttributeValue) (ledger.Item, bool) {
	if r.Token == "" || len(stored) == 0 {
		return ledger.Item{}, false
	}
	var row layout.ItemRow
	if err := attributevalue.UnmarshalMap(stored, &row); err != nil || row.Run != r.Run ||
		row.Outcome != string(api.OutcomeInFlight) || ledger.CheckFormat("item row", row.Format) != nil {
		return ledger.Item{}, false
	}
	token, k, ok := strings.Cut(row.Token, ".")
	if !ok || token != r.Token || len(k) != 1 {
		return ledger.Item{}, false
	}
	kind := Kind(k[0])
	it := ledger.Item{
		Item: api.Item{
			Key:         r.Key,
			RunID:       r.RunID,
			Run:         r.Run,
			Outcome:     api.OutcomeInFlight,
			Attempt:     row.Attempt,
			LeaseUntil:  layout.FromMs(row.LeaseUntilMs),
			UpdatedAt:   layout.FromMs(row.UpdatedAtMs),
			Revision:    row.Revision,
			RunAttempts: 1,
		},
		BatchID: r.BatchID,
	}
	if kind == TakeFresh {
		return it, true // a Fresh take found no attempt of this run
	}
	it.RunAttempts = row.Attempt - max(row.FirstAttempt, 1) + 1
	it.Signalled = row.Signalled
	if row.SpentRun == r.Run && len(row.Spent) > 0 {
		it.Spent, it.SpentRun = row.Spent, r.Run
	}
	switch kind {
	case TakeOver:
		it.Interrupted = !row.TookRetry
		it.ThrottledSince = layout.FromMs(row.ThrottledMs)
	case TakeResume:
		it.Resumed, it.ResumedAt = api.Outcome(row.TookOutcome), layout.FromMs(row.TookUpdatedMs)
		it.ThrottledSince = layout.FromMs(row.TookThrottledMs)
	}
	return it, true
}

// OutcomeUpdate is the update of an outcome r writes (Record, Settle):
// the outcome, output, error, reason, cost and spent, the attention
// index's keys while failed, quarantined or held, and the hold; an error
// for an outcome that is neither terminal nor held.
func OutcomeUpdate(r ledger.Record) (expression.UpdateBuilder, error) {
	u := Identity(expression.UpdateBuilder{}, r.Run, r.Now).
		Set(expression.Name(layout.AttrOutcome), expression.Value(string(r.Outcome)))
	set := func(name, v string) {
		if v != "" {
			u = u.Set(expression.Name(name), expression.Value(v))
		} else {
			u = u.Remove(expression.Name(name))
		}
	}
	set("output", string(r.Output))
	set("output_ref", r.OutputRef)
	set("error", ledger.CutError(r.Error))
	set("reason", string(r.Reason))
	if len(r.Cost) > 0 {
		u = u.Set(expression.Name(layout.AttrCost), expression.Value(map[string]float64(r.Cost)))
	} else {
		u = u.Remove(expression.Name(layout.AttrCost))
	}
	u = SetSpent(u, r)
	if !ledger.KeepsSignal(r.Outcome) {
		u = RemoveSignalled(u)
	}
	if r.Outcome == api.OutcomeFailed || r.Outcome == api.OutcomeQuarantined || r.Outcome.Held() {
		u = u.Set(expression.Name(config.AttrAttentionPK), expression.Value(layout.ShardKey(r.BatchID, ledger.Shard(r.Key, r.ListShards)))).
			Set(expression.Name(config.AttrAttentionSK), expression.Value(r.Key))
	} else {
		u = u.Remove(expression.Name(config.AttrAttentionPK)).Remove(expression.Name(config.AttrAttentionSK))
	}
	if r.Outcome.Held() {
		h := r.Hold
		u = u.Set(expression.Name(layout.AttrHoldSinceMs), expression.Value(h.Since.UnixMilli())).Remove(expression.Name(layout.AttrWoken))
		set(layout.AttrHoldSubject, h.Subject)
		if !h.WakeAt.IsZero() {
			u = u.Set(expression.Name(layout.AttrHoldWakeAtMs), expression.Value(h.WakeAt.UnixMilli()))
		} else {
			u = u.Remove(expression.Name(layout.AttrHoldWakeAtMs))
		}
	} else {
		u = RemoveHold(u)
	}
	if !r.Outcome.Terminal() && !r.Outcome.Held() {
		return u, fmt.Errorf("record %s/%s: %q is not a terminal or held outcome", r.BatchID, r.Key, r.Outcome)
	}
	return u, nil
}

// SetSpent writes what r.Run's attempts spent (spent, spent_run) when r
// carries it, in the same write as the outcome or release, so it costs
// no extra request. An empty Spent leaves the stored one: a row settled
// without running keeps its earlier run's figure, which the census reads
// only for that run.
func SetSpent(u expression.UpdateBuilder, r ledger.Record) expression.UpdateBuilder {
	if len(r.Spent) == 0 {
		return u
	}
	return u.Set(expression.Name(layout.AttrSpent), expression.Value(map[string]float64(r.Spent))).
		Set(expression.Name(layout.AttrSpentRun), expression.Value(r.Run))
}

// The kinds of settle, stored after the settle's token (layout.AttrTakeToken),
// as a take's kind.
const (
	SettleFresh Kind = 's' // a fresh row or an expired lease: nothing resumed
	SettleHeld  Kind = 'h' // a Woken held row: resumed from it (layout.AttrTookOutcome, layout.AttrTookUpdatedMs)
)

// SettledBefore recognises a settle sent again after its answer was lost
// (ledger.Record.Token): the row refused it, but it holds r's outcome in
// r's run under r's token, so the first try was applied; it answers what
// that try did.
func SettledBefore(r ledger.Record, stored map[string]types.AttributeValue) (ledger.Item, bool) {
	if r.Token == "" || len(stored) == 0 {
		return ledger.Item{}, false
	}
	var row layout.ItemRow
	if err := attributevalue.UnmarshalMap(stored, &row); err != nil || row.Run != r.Run || row.Outcome != string(r.Outcome) {
		return ledger.Item{}, false
	}
	token, k, ok := strings.Cut(row.Token, ".")
	if !ok || token != r.Token || len(k) != 1 {
		return ledger.Item{}, false
	}
	if Kind(k[0]) == SettleHeld {
		return ledger.Item{Resumed: api.Outcome(row.TookOutcome), ResumedAt: layout.FromMs(row.TookUpdatedMs)}, true
	}
	return ledger.Item{}, true
}
