package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// ClaimSlice implements ledger.Store with one UpdateItem on the run's
// claim counter: SET claims = claims + 1, c{track} = c.Claim,
// g{track} = claims + 1 (the right-hand sides read the row before the
// update, so g{track} is the new count: "DynamoDB evaluates every action
// against the item's attribute values as they were before the update",
// DynamoDB developer guide, "Using update expressions"), under the condition
// attribute_not_exists(c{track}) OR c{track} < c.Claim. A lost
// condition with c{track} = c.Claim is this claim applied before (a
// retry after a lost answer): it answers g{track} again. One row
// attribute pair per track: at most 2 × max_concurrency of them.
func (s *Store) ClaimSlice(ctx context.Context, c ledger.SliceClaim) (int64, error) {
	mine, got := expression.Name("c"+strconv.Itoa(c.Track)), expression.Name("g"+strconv.Itoa(c.Track))
	next := expression.Plus(expression.Name(layout.AttrClaims).IfNotExists(expression.Value(0)), expression.Value(1))
	cond := expression.Or(expression.AttributeNotExists(mine), mine.LessThan(expression.Value(c.Claim)))
	u := expression.Set(expression.Name(layout.AttrClaims), next).Set(mine, expression.Value(c.Claim)).Set(got, next)
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return 0, err
	}
	attrs, old, err := s.updateRow(ctx, layout.Key(layout.ClaimPK(c.BatchID, c.Run), layout.SKClaim), expr, types.ReturnValueUpdatedNew)
	var k, n int64
	switch {
	case errors.Is(err, api.ErrConflict):
		// Applied before, or a later claim of the track: read which.
		if uerr := attributevalue.Unmarshal(old["c"+strconv.Itoa(c.Track)], &k); uerr != nil || k != c.Claim {
			return 0, fmt.Errorf("claim %d of track %d of %s run %d: the track claimed %d since: %w", c.Claim, c.Track, c.BatchID, c.Run, k, api.ErrConflict)
		}
		attrs = old
	case err != nil:
		return 0, fmt.Errorf("claim a slice of %s run %d: %w", c.BatchID, c.Run, err)
	}
	if err := attributevalue.Unmarshal(attrs["g"+strconv.Itoa(c.Track)], &n); err != nil || n < 1 {
		return 0, fmt.Errorf("claim a slice of %s run %d: answered %v (%v)", c.BatchID, c.Run, attrs["g"+strconv.Itoa(c.Track)], err)
	}
	return n, nil
}

// TakeTrack implements ledger.Store with one UpdateItem: SET seq, holder,
// lease_until_ms (and the row TTL) under the condition
// attribute_not_exists(pk) OR seq < :seq OR (seq = :seq AND
// (lease_until_ms < :now OR holder = :holder)); a lost condition reads
// the stored row that DynamoDB returns.
func (s *Store) TakeTrack(ctx context.Context, t ledger.TrackTake) (time.Time, error) {
	seq, now := expression.Value(t.Seq), expression.Value(t.Now.UnixMilli())
	cond := expression.Or(expression.AttributeNotExists(expression.Name(config.AttrPK)),
		expression.Name(layout.AttrSeq).LessThan(seq),
		expression.And(expression.Name(layout.AttrSeq).Equal(seq),
			expression.Or(expression.Name(layout.AttrLeaseUntilMs).LessThan(now), expression.Name(layout.AttrHolder).Equal(expression.Value(t.Holder)))))
	u := expression.Set(expression.Name(layout.AttrSeq), seq).
		Set(expression.Name(layout.AttrHolder), expression.Value(t.Holder)).
		Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(t.Now.Add(t.Lease).UnixMilli()))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, t.Now)).Build()
	if err != nil {
		return time.Time{}, err
	}
	_, old, err := s.updateRow(ctx, layout.Key(layout.TrackPK(t.BatchID, t.Run, t.Track), layout.SKTrack), expr, types.ReturnValueNone)
	if err == nil {
		return time.Time{}, nil
	}
	if !errors.Is(err, api.ErrConflict) {
		return time.Time{}, fmt.Errorf("take track %d of %s run %d: %w", t.Track, t.BatchID, t.Run, err)
	}
	var row struct {
		Seq          int64 `dynamodbav:"seq"`
		LeaseUntilMs int64 `dynamodbav:"lease_until_ms"`
	}
	if uerr := attributevalue.UnmarshalMap(old, &row); uerr != nil {
		return time.Time{}, fmt.Errorf("take track %d of %s run %d: read the row: %w", t.Track, t.BatchID, t.Run, uerr)
	}
	if row.Seq > t.Seq {
		return time.Time{}, fmt.Errorf("take track %d of %s run %d: seq %d is past %d: %w", t.Track, t.BatchID, t.Run, row.Seq, t.Seq, api.ErrConflict)
	}
	return layout.FromMs(row.LeaseUntilMs), fmt.Errorf("take track %d of %s run %d: held: %w", t.Track, t.BatchID, t.Run, api.ErrConflict)
}
