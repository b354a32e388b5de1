package dynamo

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// A pack item that turns failed or quarantined has its error text on
// its attention row alone (WritePack): its entry in the pack row keeps
// the outcome, reason, attempts and cost, not the text. A pack row is
// written in full twice per delivery at least (the take and the
// outcomes), so each text it carried was billed on each of those writes
// and on the next delivery's, and a pack of ten items every one of them
// failing passed 1 KB (2 write units a write instead of 1); the attention
// row is written once. Readers that give the text — ScanPacks (the
// results, the partial results), ListItems and LocateItem — take it from
// the attention row: ListItems and LocateItem read that row anyway;
// ScanPacks reads the attention rows of the failed and quarantined items
// it returns (eventually consistent, 0.5 read units each under 4 KB, one
// BatchGetItem per 100). GetPack, the item engine's read, leaves the
// text out. Rows written before this (the text in the pack) read as
// they did.

// errorOnAttentionRow reports whether pack item write iw leaves its error
// text to the attention row it puts (attentionChange +1): a failed or
// quarantined item. A held item's hold moves it between outcomes without
// a new attention row, so its text stays on the pack.
func errorOnAttentionRow(iw ledger.PackItemWrite) bool {
	o := iw.Item.Outcome
	return (o == api.OutcomeFailed || o == api.OutcomeQuarantined) && attentionChange(iw) == 1
}

// listShardsSeen caches a batch's list_shards (fixed at its creation) by
// table and batch id, for ScanPacks, which is given a pack shard, not the
// batch.
var listShardsSeen sync.Map

// listShards is batch id's list_shards: the cached value, else one
// eventually consistent read of the batch row's attribute.
func (s *Store) listShards(ctx context.Context, id string) (int, error) {
	k := s.table + "\x00" + id
	if n, ok := listShardsSeen.Load(k); ok {
		return n.(int), nil
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: layout.Key(layout.BatchPK(id), layout.SKBatch),
		ProjectionExpression: aws.String("#ls"), ExpressionAttributeNames: map[string]string{"#ls": layout.AttrListShards}})
	if err != nil {
		return 0, fmt.Errorf("list shards of %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return 0, fmt.Errorf("list shards of %s: %w", id, api.ErrNotFound)
	}
	var r struct {
		ListShards int `dynamodbav:"list_shards"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &r); err != nil {
		return 0, fmt.Errorf("list shards of %s: %w", id, err)
	}
	n := max(1, r.ListShards)
	listShardsSeen.Store(k, n)
	return n, nil
}

// attentionErrors sets the error text of each failed or quarantined pack
// item of items that has none from its attention row, when that row is
// of the item's run (eventually consistent BatchGetItem calls of at most
// 100 keys, re-asking for those DynamoDB leaves unprocessed).
func (s *Store) attentionErrors(ctx context.Context, batchID string, items []ledger.Item) error {
	at := map[string]int{}
	var keys []map[string]types.AttributeValue
	listShards := 0
	for i, it := range items {
		if !it.Packed || it.Error != "" || it.Outcome != api.OutcomeFailed && it.Outcome != api.OutcomeQuarantined {
			continue
		}
		if listShards == 0 {
			n, err := s.listShards(ctx, batchID)
			if err != nil {
				return err
			}
			listShards = n
		}
		at[it.Key] = i
		keys = append(keys, layout.Key(layout.AttentionPK(batchID, ledger.Shard(it.Key, listShards)), it.Key))
	}
	for start := 0; start < len(keys); start += 100 {
		ks := keys[start:min(start+100, len(keys))]
		for tries := 0; len(ks) > 0; tries++ {
			if tries == 10 {
				return fmt.Errorf("error texts of %s: %d attention rows left unread: %w", batchID, len(ks), ledger.ErrUnavailable)
			}
			c, cancel := s.ctx(ctx)
			res, err := s.db.BatchGetItem(c, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: ks, ConsistentRead: aws.Bool(false)}}})
			cancel()
			if err != nil {
				return fmt.Errorf("error texts of %s: %w", batchID, err)
			}
			for _, av := range res.Responses[s.table] {
				var r struct {
					Key   string `dynamodbav:"sk"`
					Run   int    `dynamodbav:"run"`
					Error string `dynamodbav:"error"`
				}
				if err := attributevalue.UnmarshalMap(av, &r); err != nil {
					return fmt.Errorf("error texts of %s: %w", batchID, err)
				}
				if i, ok := at[r.Key]; ok && items[i].Run == r.Run {
					items[i].Error = r.Error
				}
			}
			ks = res.UnprocessedKeys[s.table].Keys
		}
	}
	return nil
}
