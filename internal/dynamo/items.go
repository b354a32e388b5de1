package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/itemexpr"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Reserve takes the item under a new attempt and lease (see ledger.Store).
// Attempts count across runs (the attempt is the fence); first_attempt
// marks where this run's attempts start, so Item.RunAttempts counts them.
//
// First one UpdateItem conditioned on fresh: SET outcome = in_flight,
// attempt = if_not_exists(attempt, 0) + 1, first_attempt = the same,
// lease_until_ms = now + lease. If that condition fails and the stored row
// is in flight in this run with an expired lease, a second UpdateItem
// conditioned on expired takes it over: attempt + 1, first_attempt kept.
// For a redelivered message (r.Redelivered: a scheduled retry or a
// takeover, whose row is in flight) the takeover is tried first and the
// fresh start only when its condition fails on a row that fresh would
// take, so that the usual case costs one write, not a failed condition
// (billed at the row's size) and a write. When fresh fails on a row held
// in this run, a third UpdateItem conditioned on woken takes it (resume).
func (s *Store) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Item, error) {
	if r.Redelivered {
		it, err := s.takeover(ctx, r)
		if !errors.Is(err, api.ErrConflict) || it.Outcome == api.OutcomeInFlight && it.Run == r.Run {
			return it, err
		}
	}
	next := expression.Plus(expression.IfNotExists(expression.Name(layout.AttrAttempt), expression.Value(0)), expression.Value(1))
	u := itemexpr.Identity(expression.UpdateBuilder{}, r.Run, r.Now).
		Set(expression.Name(layout.AttrOutcome), expression.Value(string(api.OutcomeInFlight))).
		Set(expression.Name(layout.AttrAttempt), next).
		Set(expression.Name(layout.AttrFirstAttempt), next).
		Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(r.Now.Add(r.Lease).UnixMilli())).
		Remove(expression.Name(layout.AttrOutput)).Remove(expression.Name(layout.AttrOutputRef)).Remove(expression.Name(layout.AttrReason)).
		Remove(expression.Name(layout.AttrError)).Remove(expression.Name(layout.AttrReleased)).Remove(expression.Name(layout.AttrRetryScheduled)).
		Remove(expression.Name(layout.AttrCost)).Remove(expression.Name(config.AttrAttentionPK)).Remove(expression.Name(config.AttrAttentionSK)).
		Remove(expression.Name(layout.AttrThrottledMs))
	it, err := s.reserve(ctx, r, itemexpr.TakeFresh, itemexpr.Fresh(r.Run, r.Revision), s.stamp(itemexpr.RemoveSignalled(itemexpr.RemoveHold(u)), r.Now))
	if errors.Is(err, api.ErrConflict) && it.Run == r.Run && it.Outcome.Held() {
		return s.resume(ctx, r)
	}
	if r.Redelivered || !errors.Is(err, api.ErrConflict) || it.Outcome != api.OutcomeInFlight || it.Run != r.Run || !it.LeaseUntil.Before(r.Now) {
		return it, err
	}
	return s.takeover(ctx, r)
}

// resume is Reserve's third condition: the item is held in this run and
// woken (see woken); attempt + 1, first_attempt and spent kept, the
// hold removed.
func (s *Store) resume(ctx context.Context, r ledger.Reservation) (ledger.Item, error) {
	u := expression.Set(expression.Name(layout.AttrOutcome), expression.Value(string(api.OutcomeInFlight))).
		Set(expression.Name(layout.AttrAttempt), expression.Plus(expression.Name(layout.AttrAttempt), expression.Value(1))).
		Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(r.Now.Add(r.Lease).UnixMilli())).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(r.Now.UnixMilli())).
		Remove(expression.Name(layout.AttrError)).Remove(expression.Name(layout.AttrReason)).Remove(expression.Name(layout.AttrCost)).
		Remove(expression.Name(layout.AttrRetryScheduled)).Remove(expression.Name(layout.AttrThrottledMs)).
		Remove(expression.Name(config.AttrAttentionPK)).Remove(expression.Name(config.AttrAttentionSK)).
		// What the resume found, for a resend of it (itemexpr.TakenBefore): the
		// operands are the row as it was before this update.
		Set(expression.Name(layout.AttrTookOutcome), expression.Name(layout.AttrOutcome)).
		Set(expression.Name(layout.AttrTookUpdatedMs), expression.Name(layout.AttrUpdatedAtMs).IfNotExists(expression.Value(0))).
		Set(expression.Name(layout.AttrTookThrottledMs), expression.Name(layout.AttrThrottledMs).IfNotExists(expression.Value(0)))
	return s.reserve(ctx, r, itemexpr.TakeResume, itemexpr.Woken(r.Run), s.stamp(itemexpr.RemoveHold(u), r.Now))
}

// takeover is Reserve's second condition: the item is in flight in this
// run with an expired lease; attempt + 1, first_attempt kept.
func (s *Store) takeover(ctx context.Context, r ledger.Reservation) (ledger.Item, error) {
	take := expression.Set(expression.Name(layout.AttrAttempt), expression.Plus(expression.Name(layout.AttrAttempt), expression.Value(1))).
		Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(r.Now.Add(r.Lease).UnixMilli())).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(r.Now.UnixMilli())).
		Remove(expression.Name(layout.AttrRetryScheduled)).
		// Whether the attempt taken over had its retry scheduled, for a
		// resend of this takeover (itemexpr.TakenBefore).
		Set(expression.Name(layout.AttrTookRetry), expression.Name(layout.AttrRetryScheduled).IfNotExists(expression.Value(false)))
	return s.reserve(ctx, r, itemexpr.TakeOver, itemexpr.Expired(r.Run, r.Now), s.stamp(take, r.Now))
}

func (s *Store) reserve(ctx context.Context, r ledger.Reservation, kind itemexpr.Kind, cond expression.ConditionBuilder, u expression.UpdateBuilder) (ledger.Item, error) {
	u = itemexpr.SetToken(u, r.Token, kind)
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return ledger.Item{}, err
	}
	attrs, old, err := s.updateRow(ctx, layout.ItemKey(r.BatchID, r.ListShards, r.Key), expr, types.ReturnValueAllOld)
	if errors.Is(err, api.ErrConflict) {
		if it, ok := itemexpr.TakenBefore(r, old); ok {
			return it, nil
		}
		it, uerr := layout.ItemFrom(r.BatchID, old)
		if uerr != nil {
			return ledger.Item{}, uerr
		}
		return it, fmt.Errorf("reserve %s/%s: %w", r.BatchID, r.Key, err)
	}
	if err != nil {
		return ledger.Item{}, fmt.Errorf("reserve %s/%s: %w", r.BatchID, r.Key, err)
	}
	// The row as written, from the row as it was: one round trip, and the
	// old row tells whether this reservation interrupted an attempt.
	var prev layout.ItemRow
	if len(attrs) > 0 {
		if err := attributevalue.UnmarshalMap(attrs, &prev); err != nil {
			return ledger.Item{}, fmt.Errorf("reserve %s/%s: %w", r.BatchID, r.Key, err)
		}
	}
	it := ledger.Item{
		Item: api.Item{
			Key:        r.Key,
			RunID:      r.RunID,
			Run:        r.Run,
			Outcome:    api.OutcomeInFlight,
			Attempt:    prev.Attempt + 1,
			LeaseUntil: layout.FromMs(r.Now.Add(r.Lease).UnixMilli()),
			UpdatedAt:  layout.FromMs(r.Now.UnixMilli()),
			Revision:   prev.Revision,
		},
		BatchID: r.BatchID,
	}
	if prev.Run == r.Run && api.Outcome(prev.Outcome).Held() {
		it.Resumed, it.ResumedAt = api.Outcome(prev.Outcome), layout.FromMs(prev.UpdatedAtMs)
	}
	if prev.Run == r.Run && (prev.Outcome == string(api.OutcomeInFlight) || api.Outcome(prev.Outcome).Held()) {
		it.Interrupted = prev.Outcome == string(api.OutcomeInFlight) && !prev.Retry // a takeover, not a scheduled retry
		it.RunAttempts = it.Attempt - max(prev.FirstAttempt, 1) + 1
		it.ThrottledSince = layout.FromMs(prev.ThrottledMs)
		it.Signalled = prev.Signalled // kept by a resume and a takeover
		if prev.SpentRun == r.Run && len(prev.Spent) > 0 {
			// What this run's earlier attempts spent; the fence makes it
			// current (an earlier attempt can no longer write).
			it.Spent, it.SpentRun = prev.Spent, r.Run
		}
	} else {
		it.RunAttempts = 1
	}
	return it, nil
}

// Record writes a terminal outcome under the attempt fence (see ledger.Store).
// Safe for the SDK to retry: a retry of a write that was applied but whose
// answer was lost finds this run and attempt already holding this outcome,
// reason and error, and Record returns nil; any other row that fails the
// fence is api.ErrConflict.
func (s *Store) Record(ctx context.Context, r ledger.Record) error {
	u, err := itemexpr.OutcomeUpdate(r)
	if err != nil {
		return err
	}
	u = s.stamp(u.Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(0)), r.Now)
	if r.FirstAttempt > 0 {
		u = u.Set(expression.Name(layout.AttrFirstAttempt), expression.Value(r.FirstAttempt))
	}
	expr, err := expression.NewBuilder().WithCondition(itemexpr.Fenced(r.Run, r.Attempt)).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	k := layout.ItemKey(r.BatchID, r.ListShards, r.Key)
	var old map[string]types.AttributeValue
	if w, ok := r.Effects.(stagedWrites); ok && len(w.TransactWriteItems()) > 0 && r.Outcome == api.OutcomeSucceeded {
		old, err = s.recordWithEffects(ctx, r, k, expr, w.TransactWriteItems())
	} else if r.Effects != nil && r.Effects.Len() > 0 {
		return fmt.Errorf("record %s/%s attempt %d: staged writes of type %T with outcome %s: only DynamoDB transaction writes with a succeeded outcome are committed", r.BatchID, r.Key, r.Attempt, r.Effects, r.Outcome)
	} else {
		_, old, err = s.updateRow(ctx, k, expr, types.ReturnValueNone)
	}
	if errors.Is(err, api.ErrConflict) {
		// The SDK sends a write again when its answer was lost (a reset
		// connection, a 5xx), also when the first try was applied: the
		// retry then fails the fence on this attempt's own outcome. A row
		// of this run and attempt holding this outcome, reason and error
		// is that write, not a later attempt's: success.
		if it, ierr := layout.ItemFrom(r.BatchID, old); ierr == nil && it.Run == r.Run && it.Attempt == r.Attempt &&
			it.Outcome == r.Outcome && it.Reason == r.Reason && it.Error == ledger.CutError(r.Error) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("record %s/%s attempt %d: %w", r.BatchID, r.Key, r.Attempt, err)
	}
	return nil
}

// Release ends the attempt's lease without an outcome, keeping the error
// text, under the attempt fence: lease_until = r.Now, or, when r.RetryAt
// is later, 1 ms before it (a delivery before the retry's due time is
// held off; the takeover's lease_until < :now lets one at it take it).
// r.FirstAttempt (when > 0) and r.ThrottledSince are written as given
// (absolute values, so a Release the SDK sends again writes the same
// row): a throttled attempt moves first_attempt past itself and is not
// counted toward max attempts.
func (s *Store) Release(ctx context.Context, r ledger.Record) error {
	until := r.Now
	if r.RetryAt.After(until) {
		until = r.RetryAt.Add(-time.Millisecond)
	}
	u := expression.Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(until.UnixMilli())).
		Set(expression.Name(layout.AttrRetryScheduled), expression.Value(true)).
		Set(expression.Name(layout.AttrError), expression.Value(ledger.CutError(r.Error))).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(r.Now.UnixMilli()))
	if r.FirstAttempt > 0 {
		u = u.Set(expression.Name(layout.AttrFirstAttempt), expression.Value(r.FirstAttempt))
	}
	if r.ThrottledSince.IsZero() {
		u = u.Remove(expression.Name(layout.AttrThrottledMs))
	} else {
		u = u.Set(expression.Name(layout.AttrThrottledMs), expression.Value(r.ThrottledSince.UnixMilli()))
	}
	u = itemexpr.SetSpent(s.stamp(u, r.Now), r)
	expr, err := expression.NewBuilder().WithCondition(itemexpr.Fenced(r.Run, r.Attempt)).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	return s.update(ctx, "release", r, expr)
}

// Settle writes a terminal outcome for an item that did not run: under the
// fresh condition, or, when the stored row is in flight in r.Run with an
// expired lease, under the expired condition (a second conditional write,
// which keeps the run's attempts), or, when it is held in r.Run, under
// the woken condition (the same). It returns the stored row on conflict.
func (s *Store) Settle(ctx context.Context, r ledger.Record) (ledger.Item, error) {
	// UpdateBuilder shares its operations between copies: build each
	// variant from scratch.
	update := func(newRun bool) (expression.UpdateBuilder, error) {
		u, err := itemexpr.OutcomeUpdate(r)
		if err != nil {
			return u, err
		}
		u = u.Set(expression.Name(layout.AttrAttempt), expression.IfNotExists(expression.Name(layout.AttrAttempt), expression.Value(0))).
			Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(0)).
			Remove(expression.Name(layout.AttrReleased)).Remove(expression.Name(layout.AttrRetryScheduled))
		if newRun {
			// A row new to this run starts the run's attempts here (none
			// made); a row in flight in this run keeps them.
			u = u.Set(expression.Name(layout.AttrFirstAttempt), expression.Plus(expression.IfNotExists(expression.Name(layout.AttrAttempt), expression.Value(0)), expression.Value(1)))
		}
		return s.stamp(u, r.Now), nil
	}
	u, err := update(true)
	if err != nil {
		return ledger.Item{}, err
	}
	it, err := s.settle(ctx, r, itemexpr.SettleFresh, itemexpr.Fresh(r.Run, r.Revision), u)
	switch {
	case errors.Is(err, api.ErrConflict) && it.Outcome == api.OutcomeInFlight && it.Run == r.Run && it.LeaseUntil.Before(r.Now):
		if u, err = update(false); err != nil {
			return ledger.Item{}, err
		}
		it, err = s.settle(ctx, r, itemexpr.SettleFresh, itemexpr.Expired(r.Run, r.Now), u)
	case errors.Is(err, api.ErrConflict) && it.Outcome.Held() && it.Run == r.Run:
		// Held in this run: settled once woken, its attempts kept; what
		// it was held as is copied for a resend (itemexpr.SettledBefore).
		held, heldAt := it.Outcome, it.UpdatedAt
		if u, err = update(false); err != nil {
			return ledger.Item{}, err
		}
		u = u.Set(expression.Name(layout.AttrTookOutcome), expression.Name(layout.AttrOutcome)).
			Set(expression.Name(layout.AttrTookUpdatedMs), expression.Name(layout.AttrUpdatedAtMs).IfNotExists(expression.Value(0)))
		if it, err = s.settle(ctx, r, itemexpr.SettleHeld, itemexpr.Woken(r.Run), u); err == nil {
			it.Resumed, it.ResumedAt = held, heldAt
		}
	}
	return it, err
}

// SettleUnstarted writes a terminal outcome for an item not reserved in
// r.Run, under the fresh condition only (see ledger.Store); it returns the
// stored row on conflict.
func (s *Store) SettleUnstarted(ctx context.Context, r ledger.Record) (ledger.Item, error) {
	u, err := itemexpr.OutcomeUpdate(r)
	if err != nil {
		return ledger.Item{}, err
	}
	u = u.Set(expression.Name(layout.AttrAttempt), expression.IfNotExists(expression.Name(layout.AttrAttempt), expression.Value(0))).
		Set(expression.Name(layout.AttrFirstAttempt), expression.Plus(expression.IfNotExists(expression.Name(layout.AttrAttempt), expression.Value(0)), expression.Value(1))).
		Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(0)).
		Remove(expression.Name(layout.AttrReleased)).Remove(expression.Name(layout.AttrRetryScheduled))
	return s.settle(ctx, r, itemexpr.SettleFresh, itemexpr.Fresh(r.Run, r.Revision), u)
}

func (s *Store) settle(ctx context.Context, r ledger.Record, kind itemexpr.Kind, cond expression.ConditionBuilder, u expression.UpdateBuilder) (ledger.Item, error) {
	u = itemexpr.SetToken(u, r.Token, kind)
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return ledger.Item{}, err
	}
	_, old, err := s.updateRow(ctx, layout.ItemKey(r.BatchID, r.ListShards, r.Key), expr, types.ReturnValueNone)
	if errors.Is(err, api.ErrConflict) {
		if it, ok := itemexpr.SettledBefore(r, old); ok {
			return it, nil
		}
		it, uerr := layout.ItemFrom(r.BatchID, old)
		if uerr != nil {
			return ledger.Item{}, uerr
		}
		return it, fmt.Errorf("settle %s/%s: %w", r.BatchID, r.Key, err)
	}
	if err != nil {
		return ledger.Item{}, fmt.Errorf("settle %s/%s: %w", r.BatchID, r.Key, err)
	}
	return ledger.Item{}, nil
}

func (s *Store) update(ctx context.Context, op string, r ledger.Record, expr expression.Expression) error {
	if _, _, err := s.updateRow(ctx, layout.ItemKey(r.BatchID, r.ListShards, r.Key), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("%s %s/%s attempt %d: %w", op, r.BatchID, r.Key, r.Attempt, err)
	}
	return nil
}

// GetItem reads an item row with a strongly consistent read; ErrNotFound
// when the item has no row. It reads the batch row (eventually consistent)
// to find the row's shard; for tests and tools.
func (s *Store) GetItem(ctx context.Context, batchID, itemKey string) (ledger.Item, error) {
	b, err := s.getBatch(ctx, batchID, false)
	if err != nil {
		return ledger.Item{}, err
	}
	return s.getItem(ctx, batchID, b.ListShards, itemKey)
}

func (s *Store) getItem(ctx context.Context, batchID string, shards int, key string) (ledger.Item, error) {
	return s.getItemAt(ctx, batchID, ledger.Shard(key, shards), key)
}

// getItemAt reads the row of item key in item shard `shard` with a
// strongly consistent read; ErrNotFound when it has no row.
func (s *Store) getItemAt(ctx context.Context, batchID string, shard int, key string) (ledger.Item, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: layout.ItemKeyAt(batchID, shard, key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return ledger.Item{}, fmt.Errorf("get item %s/%s: %w", batchID, key, err)
	}
	if len(out.Item) == 0 {
		return ledger.Item{}, fmt.Errorf("item %s/%s: %w", batchID, key, api.ErrNotFound)
	}
	return layout.ItemFrom(batchID, out.Item)
}

// ReleaseItem marks a quarantined item released, so that the next run
// runs it again: condition outcome = quarantined. api.ErrNotFound when
// the item has no row, api.ErrConflict when it is not quarantined.
func (s *Store) ReleaseItem(ctx context.Context, batchID string, listShards int, key string) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.Name(layout.AttrOutcome).Equal(expression.Value(string(api.OutcomeQuarantined)))).
		WithUpdate(expression.Set(expression.Name(layout.AttrReleased), expression.Value(true))).Build()
	if err != nil {
		return err
	}
	_, old, err := s.updateRow(ctx, layout.ItemKey(batchID, listShards, key), expr, types.ReturnValueNone)
	if errors.Is(err, api.ErrConflict) && len(old) == 0 {
		// No item row: an item of a pack row, found by its attention row.
		if found, perr := s.releasePackItem(ctx, batchID, listShards, key); found {
			return perr
		}
	}
	switch {
	case errors.Is(err, api.ErrConflict) && len(old) == 0:
		return fmt.Errorf("item %s/%s: %w", batchID, key, api.ErrNotFound)
	case errors.Is(err, api.ErrConflict):
		return fmt.Errorf("release %s/%s: not quarantined: %w", batchID, key, err)
	case err != nil:
		return fmt.Errorf("release %s/%s: %w", batchID, key, err)
	}
	return nil
}

// MarkCounted puts the count mark MARK#{id}#{run}#{shard}, {key} under the
// condition attribute_not_exists(pk) and reports whether it did (false:
// already counted in this run, a duplicate delivery). The caller has read
// the item row (its reservation was refused with the row): succeeded, or
// quarantined and not released, in an earlier run. The mark is its own
// small row, so that counting never writes the item row again (which
// would bill its output once more); it carries the row TTL from now.
func (s *Store) MarkCounted(ctx context.Context, batchID string, listShards int, key string, run int, now time.Time) (bool, error) {
	item := map[string]types.AttributeValue{
		config.AttrPK:     &types.AttributeValueMemberS{Value: layout.MarkPK(batchID, run, ledger.Shard(key, listShards))},
		config.AttrSK:     &types.AttributeValueMemberS{Value: key},
		layout.AttrFormat: &types.AttributeValueMemberN{Value: strconv.Itoa(ledger.FormatVersion)},
	}
	if s.RowTTL > 0 {
		item[config.AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(s.RowTTL).Unix(), 10)}
	}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(config.AttrPK))).Build()
	if err != nil {
		return false, err
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.db.PutItem(c, &dynamodb.PutItemInput{TableName: &s.table, Item: item,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names()})
	if _, ok := conflict(err); ok {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark counted %s/%s: %w", batchID, key, err)
	}
	return true, nil
}

// WakeItem wakes a held item row (see ledger.Store) with one UpdateItem:
//
//	run = :run AND outcome IN (withheld, exhausted, suspended)
//	AND attribute_not_exists(woken)
//	[AND outcome = :outcome] [AND hold_subject = :subject] [AND attempt = :attempt]
//	SET woken = :by, updated_at_ms = :now [, signal_attempt = attempt (a signal)]
//
// It returns the row as written (ALL_NEW), or the stored row and
// api.ErrConflict.
func (s *Store) WakeItem(ctx context.Context, w ledger.WakeMark) (ledger.Item, error) {
	cond := expression.And(
		expression.Name(layout.AttrRun).Equal(expression.Value(w.Run)),
		itemexpr.IsHeld(),
		expression.AttributeNotExists(expression.Name(layout.AttrWoken)),
	)
	if w.Outcome != "" {
		cond = cond.And(expression.Name(layout.AttrOutcome).Equal(expression.Value(string(w.Outcome))))
	}
	if w.Subject != "" {
		cond = cond.And(expression.Name(layout.AttrHoldSubject).Equal(expression.Value(w.Subject)))
	}
	if w.Attempt > 0 {
		cond = cond.And(expression.Name(layout.AttrAttempt).Equal(expression.Value(w.Attempt)))
	}
	u := expression.Set(expression.Name(layout.AttrWoken), expression.Value(string(w.By))).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(w.Now.UnixMilli()))
	if w.By == api.WakeSignal {
		u = u.Set(expression.Name(layout.AttrSignalled), expression.Name(layout.AttrAttempt))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, w.Now)).Build()
	if err != nil {
		return ledger.Item{}, err
	}
	attrs, old, err := s.updateRow(ctx, layout.ItemKey(w.BatchID, w.ListShards, w.Key), expr, types.ReturnValueAllNew)
	if errors.Is(err, api.ErrConflict) {
		it, uerr := layout.ItemFrom(w.BatchID, old)
		if uerr != nil {
			return ledger.Item{}, uerr
		}
		return it, fmt.Errorf("wake %s/%s: %w", w.BatchID, w.Key, err)
	}
	if err != nil {
		return ledger.Item{}, fmt.Errorf("wake %s/%s: %w", w.BatchID, w.Key, err)
	}
	return layout.ItemFrom(w.BatchID, attrs)
}

// LocateItem reads item key (see ledger.Store): its item row (GetItem,
// consistent); else its attention row (pk ATTN#{id}#{shard}, sk key) and
// the pack row it names, whose entry is the item's state.
func (s *Store) LocateItem(ctx context.Context, batchID string, listShards int, itemKey string) (ledger.Item, error) {
	it, err := s.getItem(ctx, batchID, listShards, itemKey)
	if !errors.Is(err, api.ErrNotFound) {
		return it, err
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, gerr := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: layout.Key(layout.AttentionPK(batchID, ledger.Shard(itemKey, listShards)), itemKey), ConsistentRead: aws.Bool(true)})
	if gerr != nil {
		return ledger.Item{}, fmt.Errorf("locate %s/%s: %w", batchID, itemKey, gerr)
	}
	if len(out.Item) == 0 {
		return ledger.Item{}, err
	}
	var loc struct {
		First int64  `dynamodbav:"pack_first"`
		Index int    `dynamodbav:"pack_index"`
		Run   int    `dynamodbav:"run"`
		Error string `dynamodbav:"error"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &loc); err != nil {
		return ledger.Item{}, fmt.Errorf("locate %s/%s: %w", batchID, itemKey, err)
	}
	p, perr := s.GetPack(ctx, ledger.PackRef{BatchID: batchID, ListShards: listShards, First: loc.First})
	if perr != nil {
		return ledger.Item{}, fmt.Errorf("locate %s/%s: %w", batchID, itemKey, perr)
	}
	if loc.Index >= len(p.Items) || p.Items[loc.Index].Key != itemKey {
		return ledger.Item{}, err
	}
	it = p.Item(loc.Index)
	if it.Error == "" && it.Run == loc.Run {
		it.Error = loc.Error // left to the attention row (packerrors.go)
	}
	return it, nil
}
