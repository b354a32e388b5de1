package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// ClaimUpload puts the claim row UPLOAD#{content}, UPLOAD with one
// PutItem conditioned on
//
//	attribute_not_exists(pk) OR until_ms <= :claimed OR source = :source
//
// (no condition with force), the TTL a day past the claim's end
// (ledger.TTLGrace). A lost condition returns the stored claim, which
// DynamoDB sends back (ALL_OLD), and api.ErrConflict.
func (s *Store) ClaimUpload(ctx context.Context, c api.UploadClaim, force bool) (api.UploadClaim, error) {
	av, err := attributevalue.MarshalMap(layout.UploadRow{PK: layout.UploadPK(c.Content), SK: layout.SKUpload, BatchID: c.BatchID, Source: c.Source,
		ClaimedAtMs: layout.Ms(c.ClaimedAt), UntilMs: layout.Ms(c.Until), ExpiresAt: c.Until.Add(ledger.TTLGrace).Unix(), Format: ledger.FormatVersion})
	if err != nil {
		return api.UploadClaim{}, err
	}
	in := &dynamodb.PutItemInput{TableName: &s.table, Item: av, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	if !force {
		cond := expression.AttributeNotExists(expression.Name(config.AttrPK)).
			Or(expression.Name("until_ms").LessThanEqual(expression.Value(layout.Ms(c.ClaimedAt)))).
			Or(expression.Name("source").Equal(expression.Value(c.Source)))
		expr, err := expression.NewBuilder().WithCondition(cond).Build()
		if err != nil {
			return api.UploadClaim{}, err
		}
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = expr.Condition(), expr.Names(), expr.Values()
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.db.PutItem(cctx, in)
	if old, ok := conflict(err); ok {
		var r layout.UploadRow
		if uerr := attributevalue.UnmarshalMap(old, &r); uerr != nil || r.BatchID == "" {
			return api.UploadClaim{}, fmt.Errorf("claim upload %s: lost to a claim that does not read back (%v): %w", c.Source, uerr, api.ErrConflict)
		}
		return api.UploadClaim{Content: c.Content, BatchID: r.BatchID, Source: r.Source, ClaimedAt: layout.FromMs(r.ClaimedAtMs), Until: layout.FromMs(r.UntilMs)}, api.ErrConflict
	}
	if err != nil {
		return api.UploadClaim{}, fmt.Errorf("claim upload %s: %w", c.Source, err)
	}
	return c, nil
}
