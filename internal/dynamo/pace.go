package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/eta"
)

// SamplePace stores ring (eta.Next's) as run's pace row, in its first
// counter partition, with one UpdateItem:
//
//	SET pace = :ring, pace_at_ms = :now, fv, expires_at
//	IF attribute_not_exists(pace_at_ms) OR pace_at_ms <= :now − eta.SampleEvery
//
// on COUNT#{id}#{run}#0, PACE: at most one sample per eta.SampleEvery
// whatever the readers. The row stays under 1 KB (eta.MaxRingBytes), so
// the write, kept or refused, costs 1 write unit. A lost condition (a
// reader sampled the run within SampleEvery) returns api.ErrConflict.
// Safe for concurrent use; not idempotent (a write sent again after
// SampleEvery stores the ring again, with its own time).
func (s *Store) SamplePace(ctx context.Context, batchID string, run int, ring []eta.Sample, now time.Time) error {
	b, err := eta.Encode(ring)
	if err != nil {
		return err
	}
	u := expression.Set(expression.Name(layout.AttrPace), expression.Value(string(b))).
		Set(expression.Name(layout.AttrPaceAtMs), expression.Value(now.UnixMilli()))
	cond := expression.Or(expression.AttributeNotExists(expression.Name(layout.AttrPaceAtMs)),
		expression.Name(layout.AttrPaceAtMs).LessThanEqual(expression.Value(now.Add(-eta.SampleEvery).UnixMilli())))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, now)).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.CountPK(batchID, run, 0), layout.SKPace), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("sample the pace of %s run %d: %w", batchID, run, err)
	}
	return nil
}
