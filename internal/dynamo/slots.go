package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/config"
)

// AcquireSlot takes the slot row SLOT#{id}#{slot} (see ledger.Store) with
// one UpdateItem: SET holder, lease_until_ms = now + lease and the row TTL,
// under the condition attribute_not_exists(pk) OR lease_until_ms < now.
func (s *Store) AcquireSlot(ctx context.Context, batchID string, slot int, holder string, now time.Time, lease time.Duration) error {
	u := expression.Set(expression.Name(layout.AttrHolder), expression.Value(holder)).
		Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(now.Add(lease).UnixMilli()))
	cond := expression.Or(expression.AttributeNotExists(expression.Name(config.AttrPK)),
		expression.Name(layout.AttrLeaseUntilMs).LessThan(expression.Value(now.UnixMilli())))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, now)).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.SlotPK(batchID, slot), layout.SKSlot), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("take slot %d of %s: %w", slot, batchID, err)
	}
	return nil
}

// FreeSlot deletes the slot row under the condition holder = :holder (see
// ledger.Store); a lost condition is not an error.
func (s *Store) FreeSlot(ctx context.Context, batchID string, slot int, holder string) error {
	expr, err := expression.NewBuilder().WithCondition(expression.Name(layout.AttrHolder).Equal(expression.Value(holder))).Build()
	if err != nil {
		return err
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.db.DeleteItem(c, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: layout.Key(layout.SlotPK(batchID, slot), layout.SKSlot),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	if _, ok := conflict(err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("free slot %d of %s: %w", slot, batchID, err)
	}
	return nil
}
