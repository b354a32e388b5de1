package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// markable is the condition of MarkRevision on an item's state, its
// attributes named by outcome, run and rev (an item row's, or a pack
// entry's o, r and rv):
//
//	rev = :rev OR (run < :run AND outcome IN (failed, quarantined, cancelled))
func markable(outcome, run, rev expression.NameBuilder, atRun, atRev int) expression.ConditionBuilder {
	return expression.Or(
		rev.Equal(expression.Value(atRev)),
		expression.And(run.LessThan(expression.Value(atRun)),
			expression.In(outcome, expression.Value(string(api.OutcomeFailed)), expression.Value(string(api.OutcomeQuarantined)),
				expression.Value(string(api.OutcomeCancelled)))),
	)
}

// markWorkers is how many MarkRevision updates go at once.
const markWorkers = 16

// MarkRevision sets rev on each item of marks with one conditional
// UpdateItem each, markWorkers at a time: an item row's rev attribute, or
// entry i{Index}.rv of its pack row (conditioned also on the entry's key),
// under markable (see ledger.Store). A lost condition names the key and
// wraps api.ErrConflict; the marks made stay (they are idempotent).
func (s *Store) MarkRevision(ctx context.Context, b ledger.Batch, rev int, marks []ledger.RevisionMark) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(markWorkers)
	for _, m := range marks {
		g.Go(func() error { return s.mark(ctx, b, rev, m) })
	}
	return g.Wait()
}

// mark is MarkRevision's update of one item.
func (s *Store) mark(ctx context.Context, b ledger.Batch, rev int, m ledger.RevisionMark) error {
	var cond expression.ConditionBuilder
	var set expression.UpdateBuilder
	var k map[string]types.AttributeValue
	if m.Pack {
		item := expression.Name(layout.PackItemAttr(m.Index))
		at := func(n string) expression.NameBuilder { return item.AppendName(expression.Name(n)) }
		cond = expression.And(at("k").Equal(expression.Value(m.Key)), markable(at("o"), at("r"), at("rv"), b.Run, rev))
		set = expression.Set(at("rv"), expression.Value(rev))
		k = layout.PackKey(ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: m.PackFirst})
	} else {
		cond = expression.And(expression.AttributeExists(expression.Name(config.AttrPK)),
			markable(expression.Name(layout.AttrOutcome), expression.Name(layout.AttrRun), expression.Name(layout.AttrRevision), b.Run, rev))
		set = expression.Set(expression.Name(layout.AttrRevision), expression.Value(rev))
		k = layout.ItemKey(b.ID, b.ListShards, m.Key)
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(set).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, k, expr, types.ReturnValueNone); err != nil {
		if errors.Is(err, api.ErrConflict) {
			return fmt.Errorf("mark %s/%s with revision %d: not failed, quarantined or cancelled in an earlier run: %w", b.ID, m.Key, rev, err)
		}
		return fmt.Errorf("mark %s/%s with revision %d: %w", b.ID, m.Key, rev, err)
	}
	return nil
}

// ReadItems reads the item rows of keys with strongly consistent
// BatchGetItem calls of at most 100 keys, re-asking for the keys DynamoDB
// leaves unprocessed (see ledger.Store).
func (s *Store) ReadItems(ctx context.Context, batchID string, listShards int, keys []string) ([]ledger.Item, error) {
	var out []ledger.Item
	for start := 0; start < len(keys); start += 100 {
		var ks []map[string]types.AttributeValue
		for _, k := range keys[start:min(start+100, len(keys))] {
			ks = append(ks, layout.ItemKey(batchID, listShards, k))
		}
		for tries := 0; len(ks) > 0; tries++ {
			if tries == 10 {
				return nil, fmt.Errorf("read items of %s: %d keys left unprocessed: %w", batchID, len(ks), ledger.ErrUnavailable)
			}
			c, cancel := s.ctx(ctx)
			res, err := s.db.BatchGetItem(c, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: ks, ConsistentRead: aws.Bool(true)}}})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("read items of %s: %w", batchID, err)
			}
			for _, av := range res.Responses[s.table] {
				it, err := layout.ItemFrom(batchID, av)
				if err != nil {
					return nil, err
				}
				out = append(out, it)
			}
			ks = res.UnprocessedKeys[s.table].Keys
		}
	}
	return out, nil
}
