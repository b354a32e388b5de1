package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
)

// shardQuery is the table query of one shard of a batch's items after
// the item key after ("" from the first), at most limit rows: key
// condition pk = ITEM#{batch}#{shard} AND sk > :after. It is the one place
// that knows how a shard's items are keyed for listing.
func (s *Store) shardQuery(batchID string, shard int, after string, limit int) *dynamodb.QueryInput {
	cond := "#p = :p"
	names := map[string]string{"#p": config.AttrPK}
	values := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: itemPK(batchID, shard)}}
	if after != "" {
		cond += " AND #s > :s"
		names["#s"] = config.AttrSK
		values[":s"] = &types.AttributeValueMemberS{Value: after}
	}
	return &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		Limit:                     aws.Int32(int32(limit)),
	}
}

// ScanShard reads up to limit item rows (1–1,000; DynamoDB also ends a
// page at 1 MB) of item shard `shard` of the batch whose keys sort after
// `after` (exclusive; "" from the first), in key byte order, with one
// eventually consistent Query of the table (ITEM#{batch}#{shard}). more is false once the
// shard holds nothing past the last row returned. A row read as in flight
// or released is re-read from the table with a strongly consistent
// GetItem, as ScanItems does. Memory: the rows returned, whatever the
// shard's size.
func (s *Store) ScanShard(ctx context.Context, batchID string, shard int, after string, limit int) ([]batch.Item, bool, error) {
	limit = min(max(limit, 1), 1000)
	c, cancel := s.ctx(ctx)
	out, err := s.db.Query(c, s.shardQuery(batchID, shard, after, limit))
	cancel()
	if err != nil {
		return nil, false, fmt.Errorf("scan shard %d of %s: %w", shard, batchID, err)
	}
	items := make([]batch.Item, 0, len(out.Items))
	for _, av := range out.Items {
		it, err := itemFrom(batchID, av)
		if err != nil {
			return nil, false, fmt.Errorf("scan shard %d of %s: %w", shard, batchID, err)
		}
		if it.Outcome == batch.OutcomeInFlight || it.Released {
			if it, err = s.getItemAt(ctx, batchID, shard, it.Key); err != nil {
				return nil, false, err
			}
		}
		items = append(items, it)
	}
	// A page cut by Limit or by the 1 MB cap carries LastEvaluatedKey even
	// when nothing follows; the next call then returns no rows and more
	// false.
	return items, len(out.LastEvaluatedKey) > 0, nil
}
