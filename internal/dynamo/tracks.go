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

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// The rows of a max_concurrency run's tracks (shared/pace, ledger.Track),
// each its own partition key under config.PKSlot, so that the item
// function's DeleteItem grant and the LeadingKeys of its role cover them
// as they cover the slot rows:
//
//   - the claim counter SLOT#{id}#r{run}, sk CLAIM: attribute claims,
//     one update per slice a track claims, which also keeps each track's
//     last claim and its answer (c{track}, g{track});
//   - a track's fence SLOT#{id}#r{run}#t{track}, sk TRACK: seq, holder,
//     lease_until_ms, one write per delivery of the track.
const (
	skClaim  = "CLAIM"
	skTrack  = "TRACK"
	attrSeq  = "seq"
	attrClms = "claims"
)

func claimPK(id string, run int) string { return config.PKSlot + id + "#r" + strconv.Itoa(run) }

func trackPK(id string, run, track int) string {
	return claimPK(id, run) + "#t" + strconv.Itoa(track)
}

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
	next := expression.Plus(expression.Name(attrClms).IfNotExists(expression.Value(0)), expression.Value(1))
	cond := expression.Or(expression.AttributeNotExists(mine), mine.LessThan(expression.Value(c.Claim)))
	u := expression.Set(expression.Name(attrClms), next).Set(mine, expression.Value(c.Claim)).Set(got, next)
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return 0, err
	}
	attrs, old, err := s.updateRow(ctx, key(claimPK(c.BatchID, c.Run), skClaim), expr, types.ReturnValueUpdatedNew)
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
		expression.Name(attrSeq).LessThan(seq),
		expression.And(expression.Name(attrSeq).Equal(seq),
			expression.Or(expression.Name(attrLeaseUntilMs).LessThan(now), expression.Name(attrHolder).Equal(expression.Value(t.Holder)))))
	u := expression.Set(expression.Name(attrSeq), seq).
		Set(expression.Name(attrHolder), expression.Value(t.Holder)).
		Set(expression.Name(attrLeaseUntilMs), expression.Value(t.Now.Add(t.Lease).UnixMilli()))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, t.Now)).Build()
	if err != nil {
		return time.Time{}, err
	}
	_, old, err := s.updateRow(ctx, key(trackPK(t.BatchID, t.Run, t.Track), skTrack), expr, types.ReturnValueNone)
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
	return fromMs(row.LeaseUntilMs), fmt.Errorf("take track %d of %s run %d: held: %w", t.Track, t.BatchID, t.Run, api.ErrConflict)
}
