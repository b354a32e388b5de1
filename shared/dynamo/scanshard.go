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

// shardQuery is the list-index query of one shard of a batch's items after
// the item key after ("" from the first), at most limit rows: key
// condition lpk = {batch}#{shard} AND lsk > :after. It is the one place
// that knows how a shard's items are keyed in the list index.
func (s *Store) shardQuery(batchID string, shard int, after string, limit int) *dynamodb.QueryInput {
	cond := "#p = :p"
	names := map[string]string{"#p": config.AttrListPK}
	values := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: shardKey(batchID, shard)}}
	if after != "" {
		cond += " AND #s > :s"
		names["#s"] = config.AttrListSK
		values[":s"] = &types.AttributeValueMemberS{Value: after}
	}
	return &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String(config.IndexList),
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		Limit:                     aws.Int32(int32(limit)),
	}
}

// ScanShard reads up to limit item rows (1–1,000; DynamoDB also ends a
// page at 1 MB) of list shard `shard` of the batch whose keys sort after
// `after` (exclusive; "" from the first), in key byte order, with one
// eventually consistent Query of the list index. more is false once the
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
		it, err := itemFrom(av)
		if err != nil {
			return nil, false, fmt.Errorf("scan shard %d of %s: %w", shard, batchID, err)
		}
		if it.Outcome == batch.OutcomeInFlight || it.Released {
			if it, err = s.GetItem(ctx, batchID, it.Key); err != nil {
				return nil, false, err
			}
		}
		it.BatchID = batchID
		items = append(items, it)
	}
	// A page cut by Limit or by the 1 MB cap carries LastEvaluatedKey even
	// when nothing follows; the next call then returns no rows and more
	// false.
	return items, len(out.LastEvaluatedKey) > 0, nil
}
