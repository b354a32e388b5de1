package dynamo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// ClaimSlice implements ledger.Store with one UpdateItem on the claim
// counter's row (layout.CounterPK): SET claims = claims + 1, c{track} = c.Claim,
// g{track} = claims + 1 (the right-hand sides read the row before the
// update, so g{track} is the new count: "DynamoDB evaluates every action
// against the item's attribute values as they were before the update",
// DynamoDB developer guide, "Using update expressions"), under the condition
// attribute_not_exists(c{track}) OR c{track} < c.Claim. A lost
// condition with c{track} = c.Claim is this claim applied before (a
// retry after a lost answer): it answers g{track} again. One row
// attribute pair per track that claimed from it: 2 × 64 of them at most
// while its tracks claim from their home counter (pace.TracksPerCounter),
// more only from the tracks that move on to it once theirs is drained.
func (s *Store) ClaimSlice(ctx context.Context, c ledger.SliceClaim) (int64, error) {
	mine, got := expression.Name("c"+strconv.Itoa(c.Track)), expression.Name("g"+strconv.Itoa(c.Track))
	next := expression.Plus(expression.Name(layout.AttrClaims).IfNotExists(expression.Value(0)), expression.Value(1))
	cond := expression.Or(expression.AttributeNotExists(mine), mine.LessThan(expression.Value(c.Claim)))
	u := expression.Set(expression.Name(layout.AttrClaims), next).Set(mine, expression.Value(c.Claim)).Set(got, next)
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return 0, err
	}
	attrs, old, err := s.updateRow(ctx, layout.Key(layout.CounterPK(c.BatchID, c.Run, c.Counters, c.Counter), layout.SKClaim), expr, types.ReturnValueUpdatedNew)
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

// SliceCounter implements ledger.Store with one strongly consistent
// GetItem of the counter's row.
func (s *Store) SliceCounter(ctx context.Context, r ledger.SliceCounterRead) (ledger.SliceCount, error) {
	row, err := s.getRow(ctx, layout.Key(layout.CounterPK(r.BatchID, r.Run, r.Counters, r.Counter), layout.SKClaim))
	if err != nil {
		return ledger.SliceCount{}, fmt.Errorf("read claim counter %d of %s run %d: %w", r.Counter, r.BatchID, r.Run, err)
	}
	var c ledger.SliceCount
	for name, into := range map[string]*int64{layout.AttrClaims: &c.Claims, "c" + strconv.Itoa(r.Track): &c.TrackClaim} {
		if v := row[name]; v != nil {
			if err := attributevalue.Unmarshal(v, into); err != nil {
				return ledger.SliceCount{}, fmt.Errorf("read claim counter %d of %s run %d: %s: %w", r.Counter, r.BatchID, r.Run, name, err)
			}
		}
	}
	return c, nil
}

// TakeTrack implements ledger.Store with one UpdateItem: SET seq, holder,
// lease_until_ms (and the row TTL), REMOVE h.{first} for each of t.Clear,
// under the condition attribute_not_exists(pk) OR seq < :seq OR (seq =
// :seq AND (lease_until_ms < :now OR holder = :holder)) — and, for a
// retire, attribute_not_exists(h) OR size(h) = len(t.Clear), so that no
// unit handed to the track is left behind (t.Clear are on the row: no
// take removed them yet) — answering the row after the update (ALL_NEW)
// for its handed units; a lost condition reads the stored row that
// DynamoDB returns.
func (s *Store) TakeTrack(ctx context.Context, t ledger.TrackTake) (ledger.TrackTaken, error) {
	seq, now := expression.Value(t.Seq), expression.Value(t.Now.UnixMilli())
	handed := expression.Name(layout.AttrHanded)
	cond := expression.Or(expression.AttributeNotExists(expression.Name(config.AttrPK)),
		expression.Name(layout.AttrSeq).LessThan(seq),
		expression.And(expression.Name(layout.AttrSeq).Equal(seq),
			expression.Or(expression.Name(layout.AttrLeaseUntilMs).LessThan(now), expression.Name(layout.AttrHolder).Equal(expression.Value(t.Holder)))))
	if t.Holder == ledger.TrackRetired {
		// Exactly the hand-offs the track merged wait on the row: as many,
		// and each of them.
		only := expression.ConditionBuilder(handed.Size().Equal(expression.Value(len(t.Clear))))
		for _, id := range t.Clear {
			only = expression.And(only, expression.AttributeExists(expression.Name(layout.AttrHanded+"."+id)))
		}
		cond = expression.And(cond, expression.Or(expression.AttributeNotExists(handed), only))
	}
	if len(t.Clear) > 0 {
		// REMOVE of a path inside a map the row lacks is refused as
		// invalid: only a row that has the map clears.
		cond = expression.And(cond, expression.AttributeExists(handed))
	}
	u := expression.Set(expression.Name(layout.AttrSeq), seq).
		Set(expression.Name(layout.AttrHolder), expression.Value(t.Holder)).
		Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(t.Now.Add(t.Lease).UnixMilli()))
	for _, id := range t.Clear {
		u = u.Remove(expression.Name(layout.AttrHanded + "." + id))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, t.Now)).Build()
	if err != nil {
		return ledger.TrackTaken{}, err
	}
	attrs, old, err := s.updateRow(ctx, layout.Key(layout.TrackPK(t.BatchID, t.Run, t.Track), layout.SKTrack), expr, types.ReturnValueAllNew)
	if err == nil {
		units, err := handedUnits(attrs)
		if err != nil {
			return ledger.TrackTaken{}, fmt.Errorf("take track %d of %s run %d: %w", t.Track, t.BatchID, t.Run, err)
		}
		return ledger.TrackTaken{Handed: units}, nil
	}
	if !errors.Is(err, api.ErrConflict) {
		return ledger.TrackTaken{}, fmt.Errorf("take track %d of %s run %d: %w", t.Track, t.BatchID, t.Run, err)
	}
	if len(t.Clear) > 0 && old[layout.AttrHanded] == nil {
		// No map on the row (none handed, or no row): nothing to clear.
		t.Clear = nil
		return s.TakeTrack(ctx, t)
	}
	var row struct {
		Seq          int64 `dynamodbav:"seq"`
		LeaseUntilMs int64 `dynamodbav:"lease_until_ms"`
	}
	if uerr := attributevalue.UnmarshalMap(old, &row); uerr != nil {
		return ledger.TrackTaken{}, fmt.Errorf("take track %d of %s run %d: read the row: %w", t.Track, t.BatchID, t.Run, uerr)
	}
	switch {
	case row.Seq > t.Seq:
		return ledger.TrackTaken{}, fmt.Errorf("take track %d of %s run %d: seq %d is past %d: %w", t.Track, t.BatchID, t.Run, row.Seq, t.Seq, api.ErrConflict)
	case t.Holder == ledger.TrackRetired && row.Seq < t.Seq:
		units, uerr := handedUnits(old)
		if uerr != nil {
			return ledger.TrackTaken{}, fmt.Errorf("take track %d of %s run %d: %w", t.Track, t.BatchID, t.Run, uerr)
		}
		return ledger.TrackTaken{Handed: units}, fmt.Errorf("retire track %d of %s run %d: %d units handed to it: %w", t.Track, t.BatchID, t.Run, len(units), api.ErrConflict)
	}
	return ledger.TrackTaken{Held: layout.FromMs(row.LeaseUntilMs)}, fmt.Errorf("take track %d of %s run %d: held: %w", t.Track, t.BatchID, t.Run, api.ErrConflict)
}

// handedUnits reads a fence row's hand-offs (layout.AttrHanded), in ID
// order.
func handedUnits(av map[string]types.AttributeValue) ([]ledger.TrackHanded, error) {
	var m map[string]string
	if v := av[layout.AttrHanded]; v != nil {
		if err := attributevalue.Unmarshal(v, &m); err != nil {
			return nil, fmt.Errorf("read the handed units: %w", err)
		}
	}
	units := make([]ledger.TrackHanded, 0, len(m))
	for k, v := range m {
		h := ledger.TrackHanded{ID: k}
		if err := json.Unmarshal([]byte(v), &h.Unit); err != nil {
			return nil, fmt.Errorf("read handed unit %s: %w", k, err)
		}
		units = append(units, h)
	}
	slices.SortFunc(units, func(a, b ledger.TrackHanded) int { return cmp.Compare(a.ID, b.ID) })
	return units, nil
}

// HandToTrack implements ledger.Store with one UpdateItem: SET
// h.{id} = :unit (JSON) under attribute_exists(seq) AND holder <>
// "done" AND attribute_exists(h) AND (attribute_exists(h.{id}) OR size(h)
// < MaxHandoffs), or, on a row without the map, SET h = {id: :unit}
// under attribute_not_exists(h) and the same (as Halt adds to its map);
// a map made by another hand-off between the two is added to.
func (s *Store) HandToTrack(ctx context.Context, h ledger.TrackHand) (bool, error) {
	body, err := json.Marshal(h.Unit)
	if err != nil {
		return false, err
	}
	k := h.ID
	if k == "" || len(k) > 32 || strings.IndexFunc(k, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') }) >= 0 {
		return false, fmt.Errorf("hand a unit to track %d of %s run %d: id %q is not 1–32 letters and digits", h.Track, h.BatchID, h.Run, k)
	}
	live := expression.And(expression.AttributeExists(expression.Name(layout.AttrSeq)),
		expression.Name(layout.AttrHolder).NotEqual(expression.Value(ledger.TrackRetired)))
	key := layout.Key(layout.TrackPK(h.BatchID, h.Run, h.Track), layout.SKTrack)
	hm := expression.Name(layout.AttrHanded)
	add, err := expression.NewBuilder().WithCondition(expression.And(live, expression.AttributeExists(hm),
		expression.Or(expression.AttributeExists(expression.Name(layout.AttrHanded+"."+k)), hm.Size().LessThan(expression.Value(ledger.MaxHandoffs))))).
		WithUpdate(s.stamp(expression.Set(expression.Name(layout.AttrHanded+"."+k), expression.Value(string(body))), h.Now)).Build()
	if err != nil {
		return false, err
	}
	first, err := expression.NewBuilder().WithCondition(expression.And(live, expression.AttributeNotExists(hm))).
		WithUpdate(s.stamp(expression.Set(hm, expression.Value(map[string]string{k: string(body)})), h.Now)).Build()
	if err != nil {
		return false, err
	}
	_, old, err := s.updateRow(ctx, key, add, types.ReturnValueNone)
	if errors.Is(err, api.ErrConflict) && len(old) > 0 && old[layout.AttrHanded] == nil {
		_, old, err = s.updateRow(ctx, key, first, types.ReturnValueNone)
		if errors.Is(err, api.ErrConflict) && old[layout.AttrHanded] != nil {
			// Another hand-off made the map meanwhile: add to it.
			_, old, err = s.updateRow(ctx, key, add, types.ReturnValueNone)
		}
	}
	if errors.Is(err, api.ErrConflict) {
		var row struct {
			Holder string `dynamodbav:"holder"`
		}
		_ = attributevalue.UnmarshalMap(old, &row)
		retired := row.Holder == ledger.TrackRetired
		return retired, fmt.Errorf("hand the unit at %d to track %d of %s run %d (retired: %t): %w", h.Unit.First, h.Track, h.BatchID, h.Run, retired, err)
	}
	if err != nil {
		return false, fmt.Errorf("hand the unit at %d to track %d of %s run %d: %w", h.Unit.First, h.Track, h.BatchID, h.Run, err)
	}
	return false, nil
}

// TakeTrackSlot implements ledger.Store with one UpdateItem: SET
// slot_holder, slot_until_ms under holder = "done" AND
// (attribute_not_exists(slot_holder) OR slot_until_ms < :now).
func (s *Store) TakeTrackSlot(ctx context.Context, t ledger.TrackSlot) error {
	cond := expression.And(expression.Name(layout.AttrHolder).Equal(expression.Value(ledger.TrackRetired)),
		expression.Or(expression.AttributeNotExists(expression.Name(layout.AttrSlotHolder)),
			expression.Name(layout.AttrSlotUntilMs).LessThan(expression.Value(t.Now.UnixMilli()))))
	u := expression.Set(expression.Name(layout.AttrSlotHolder), expression.Value(t.Holder)).
		Set(expression.Name(layout.AttrSlotUntilMs), expression.Value(t.Now.Add(t.Lease).UnixMilli()))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.TrackPK(t.BatchID, t.Run, t.Track), layout.SKTrack), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("take retired track %d of %s run %d as a slot: %w", t.Track, t.BatchID, t.Run, err)
	}
	return nil
}

// FreeTrackSlot implements ledger.Store with one UpdateItem: REMOVE
// slot_holder, slot_until_ms under slot_holder = :holder; a lost
// condition is not an error.
func (s *Store) FreeTrackSlot(ctx context.Context, t ledger.TrackSlot) error {
	expr, err := expression.NewBuilder().WithCondition(expression.Name(layout.AttrSlotHolder).Equal(expression.Value(t.Holder))).
		WithUpdate(expression.Remove(expression.Name(layout.AttrSlotHolder)).Remove(expression.Name(layout.AttrSlotUntilMs))).Build()
	if err != nil {
		return err
	}
	_, _, err = s.updateRow(ctx, layout.Key(layout.TrackPK(t.BatchID, t.Run, t.Track), layout.SKTrack), expr, types.ReturnValueNone)
	if err != nil && !errors.Is(err, api.ErrConflict) {
		return fmt.Errorf("free retired track %d of %s run %d: %w", t.Track, t.BatchID, t.Run, err)
	}
	return nil
}
