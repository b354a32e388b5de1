package pacerows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// rateTries bounds the updates of one lease when the row moved between
// an idle and a busy state under it.
const rateTries = 3

// LeaseRate implements pace.Rows with one UpdateItem, no read, in one
// of two forms, so that leases taken at once by many invocations never
// refuse each other while the row is busy:
//
//   - busy (the row's Next within the horizon): SET next_us = next_us +
//     :spacing under next_us > :now AND next_us <= :now + horizon; the
//     start is the new value − spacing (UPDATED_NEW);
//   - idle (no row, or Next passed): SET next_us = :now + :spacing under
//     attribute_not_exists(pk) OR next_us <= :now; the start is now.
//
// A lost condition returns the stored row (ReturnValuesOnConditionCheck-
// Failure ALL_OLD), which tells the right form, or that Next is past the
// horizon (not granted, nothing written). The busy form goes first (a
// key worth pacing is busy) unless the caller says it saw the row idle.
func (s Rows) LeaseRate(ctx context.Context, l pace.RateLease) (pace.RateGrant, error) {
	now := l.Now.UnixMicro()
	spacing, horizon := l.Spacing.Microseconds(), l.Horizon.Microseconds()
	key := layout.Key(layout.RatePK(l.Key, l.Shard), layout.SKRate)
	next := expression.Name(layout.AttrNextUs)
	busy := !l.Idle
	for try := 0; ; try++ {
		var cond expression.ConditionBuilder
		var u expression.UpdateBuilder
		if busy {
			cond = expression.And(next.GreaterThan(expression.Value(now)), next.LessThanEqual(expression.Value(now+horizon)))
			u = expression.Set(next, expression.Plus(next, expression.Value(spacing)))
		} else {
			cond = expression.Or(expression.AttributeNotExists(expression.Name(config.AttrPK)), next.LessThanEqual(expression.Value(now)))
			u = expression.Set(next, expression.Value(now+spacing))
		}
		expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, l.Now)).Build()
		if err != nil {
			return pace.RateGrant{}, err
		}
		attrs, old, err := s.update(ctx, key, expr, types.ReturnValueUpdatedNew)
		if err == nil {
			var n int64
			if uerr := attributevalue.Unmarshal(attrs[layout.AttrNextUs], &n); uerr != nil {
				return pace.RateGrant{}, fmt.Errorf("lease rate %s/%d: read next_us: %w", l.Key, l.Shard, uerr)
			}
			return pace.RateGrant{Granted: true, Start: time.UnixMicro(n - spacing).UTC(), Next: time.UnixMicro(n).UTC()}, nil
		}
		if !errors.Is(err, api.ErrConflict) {
			return pace.RateGrant{}, fmt.Errorf("lease rate %s/%d: %w", l.Key, l.Shard, err)
		}
		var stored int64
		if v, ok := old[layout.AttrNextUs]; ok {
			if uerr := attributevalue.Unmarshal(v, &stored); uerr != nil {
				return pace.RateGrant{}, fmt.Errorf("lease rate %s/%d: read next_us: %w", l.Key, l.Shard, uerr)
			}
		}
		switch {
		case stored > now+horizon:
			return pace.RateGrant{Next: time.UnixMicro(stored).UTC()}, nil
		case try+1 >= rateTries:
			return pace.RateGrant{}, fmt.Errorf("lease rate %s/%d: the row changed under %d tries: %w", l.Key, l.Shard, rateTries, ledger.ErrUnavailable)
		}
		busy = stored > now
	}
}

// ReadRate implements pace.Rows with one strongly consistent GetItem of
// the bucket row (no row: the zero time).
func (s Rows) ReadRate(ctx context.Context, key string, shard int) (time.Time, error) {
	attrs, err := s.get(ctx, layout.Key(layout.RatePK(key, shard), layout.SKRate))
	if err != nil {
		return time.Time{}, fmt.Errorf("read rate %s/%d: %w", key, shard, err)
	}
	v, ok := attrs[layout.AttrNextUs]
	if !ok {
		return time.Time{}, nil
	}
	var n int64
	if err := attributevalue.Unmarshal(v, &n); err != nil {
		return time.Time{}, fmt.Errorf("read rate %s/%d: next_us: %w", key, shard, err)
	}
	return time.UnixMicro(n).UTC(), nil
}
