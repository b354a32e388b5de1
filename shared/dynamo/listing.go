package dynamo

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
)

// shardIter pages through one item shard (ITEM#{id}#{shard}) in key order.
type shardIter struct {
	s       *Store
	batchID string
	pk      string
	page    []batch.Item
	next    map[string]types.AttributeValue
	done    bool
}

func (it *shardIter) fill(ctx context.Context) error {
	for len(it.page) == 0 && !it.done {
		c, cancel := it.s.ctx(ctx)
		out, err := it.s.db.Query(c, &dynamodb.QueryInput{
			TableName:                 &it.s.table,
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": config.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: it.pk}},
			ExclusiveStartKey:         it.next,
		})
		cancel()
		if err != nil {
			return fmt.Errorf("query %s: %w", it.pk, err)
		}
		for _, av := range out.Items {
			item, err := itemFrom(it.batchID, av)
			if err != nil {
				return err
			}
			it.page = append(it.page, item)
		}
		it.next = out.LastEvaluatedKey
		it.done = len(out.LastEvaluatedKey) == 0
	}
	return nil
}

type iterHeap []*shardIter

func (h iterHeap) Len() int { return len(h) }

func (h iterHeap) Less(i, j int) bool { return cmp.Less(h[i].page[0].Key, h[j].page[0].Key) }

func (h iterHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *iterHeap) Push(x any) { *h = append(*h, x.(*shardIter)) }

func (h *iterHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ScanItems merges the batch's item shards (one Query each on the table,
// pk ITEM#{id}#{shard}, whose sort key is the item key) in key byte order.
// The pages are read eventually consistent (half the read units): a row
// read as in_flight or released is re-read with a strongly consistent
// GetItem before fn sees it (those are the rows whose next write decides a
// run's end).
func (s *Store) ScanItems(ctx context.Context, batchID string, listShards int, fn func(batch.Item) error) error {
	h := &iterHeap{}
	shards := max(1, listShards)
	for i := range shards {
		it := &shardIter{s: s, batchID: batchID, pk: itemPK(batchID, i)}
		if err := it.fill(ctx); err != nil {
			return fmt.Errorf("scan items %s: %w", batchID, err)
		}
		if len(it.page) > 0 {
			*h = append(*h, it)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		it := (*h)[0]
		item := it.page[0]
		it.page = it.page[1:]
		if len(it.page) == 0 {
			if err := it.fill(ctx); err != nil {
				return fmt.Errorf("scan items %s: %w", batchID, err)
			}
		}
		if len(it.page) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
		if item.Outcome == batch.OutcomeInFlight || item.Released {
			fresh, err := s.getItem(ctx, batchID, shards, item.Key)
			if err != nil {
				return err
			}
			item = fresh
		}
		if err := fn(item); err != nil {
			return err
		}
	}
	return nil
}

// ListItems returns up to limit items of outcome in key byte order after
// the key after (exclusive; "" from the start), and the key to continue
// after ("" when there are no more). failed and quarantined items come
// from the sparse attention index, so successes are never read; in_flight
// items come from the table's item shards with a filter (DynamoDB reads and
// discards the other rows of the page). Each shard is queried for at most
// limit rows per call.
func (s *Store) ListItems(ctx context.Context, batchID string, listShards int, outcome batch.Outcome, after string, limit int) ([]batch.Item, string, error) {
	var index *string
	pkAttr, skAttr := config.AttrAttentionPK, config.AttrAttentionSK
	pkOf := func(shard int) string { return shardKey(batchID, shard) }
	switch outcome {
	case batch.OutcomeFailed, batch.OutcomeQuarantined:
		index = aws.String(config.IndexAttention)
	case batch.OutcomeInFlight:
		pkAttr, skAttr = config.AttrPK, config.AttrSK
		pkOf = func(shard int) string { return itemPK(batchID, shard) }
	default:
		return nil, "", fmt.Errorf("list items: outcome %q is not failed, quarantined or in_flight: %w", outcome, batch.ErrInvalid)
	}
	var all []batch.Item
	more := false // a shard stopped reading with rows left
	for shard := range max(1, listShards) {
		kc := expression.Key(pkAttr).Equal(expression.Value(pkOf(shard)))
		if after != "" {
			kc = kc.And(expression.Key(skAttr).GreaterThan(expression.Value(after)))
		}
		expr, err := expression.NewBuilder().WithKeyCondition(kc).
			WithFilter(expression.Name("outcome").Equal(expression.Value(string(outcome)))).Build()
		if err != nil {
			return nil, "", err
		}
		var start map[string]types.AttributeValue
		got := 0
		for got < limit {
			c, cancel := s.ctx(ctx)
			out, err := s.db.Query(c, &dynamodb.QueryInput{
				TableName: &s.table, IndexName: index,
				KeyConditionExpression: expr.KeyCondition(), FilterExpression: expr.Filter(),
				ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
				ExclusiveStartKey: start, Limit: aws.Int32(int32(min(limit*4, 1000))),
			})
			cancel()
			if err != nil {
				return nil, "", fmt.Errorf("list items %s: %w", batchID, err)
			}
			for _, av := range out.Items {
				it, err := itemFrom(batchID, av)
				if err != nil {
					return nil, "", err
				}
				all = append(all, it)
				got++
			}
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			start = out.LastEvaluatedKey
			if got >= limit {
				more = true
			}
		}
	}
	slices.SortFunc(all, func(a, b batch.Item) int { return cmp.Compare(a.Key, b.Key) })
	if len(all) > limit {
		all = all[:limit]
		return all, all[limit-1].Key, nil
	}
	if more && len(all) > 0 {
		return all, all[len(all)-1].Key, nil
	}
	return all, "", nil
}
