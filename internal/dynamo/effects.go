package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// stagedWrites is what the worker's Staging hands Record and WritePack as
// ledger.StagedEffects: DynamoDB transaction writes
// (shared/pipeline/effects.Writes), matched by method so that the adapter
// imports no pipeline package.
type stagedWrites interface {
	TransactWriteItems() []types.TransactWriteItem
}

// recordWithEffects writes the outcome update (k, expr: the attempt's
// fence and the outcome) and the attempt's staged writes in one
// TransactWriteItems: all applied, or none.
//
// The request carries a client token derived from the item's batch id,
// key, run, attempt and recording time (effectsToken), so the SDK's resend
// of a transaction whose answer was lost is answered as the first one
// within DynamoDB's 10-minute idempotency window, and applies nothing twice
// (DynamoDB API reference, TransactWriteItems, ClientRequestToken,
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html).
// Past that window the outcome's fence refuses the resend, and Record's
// check of the stored row recognises its own write.
//
// bulkrun's own table is refused by name and by table ARN (TransactWriteItems
// takes either in TableName).
//
// Errors: the outcome's fence lost → the stored row and api.ErrConflict
// (nothing applied); a staged write's condition did not hold, DynamoDB
// refused a staged write as written, or the transaction names a table
// that does not exist or that the function may not write
// (ResourceNotFoundException, AccessDeniedException) → *ledger.EffectsError
// (permanent but for a condition); a transaction
// conflict with a concurrent writer or throttling → sent again in place by
// the retryer, then ledger.ErrUnavailable (the worker tries the same
// commit again). Each cancellation reason's class is awsfault.Table's.
func (s *Store) recordWithEffects(ctx context.Context, r ledger.Record, k map[string]types.AttributeValue, expr expression.Expression, w []types.TransactWriteItem) (map[string]types.AttributeValue, error) {
	items := make([]types.TransactWriteItem, 0, 1+len(w))
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName: &s.table, Key: k,
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	for i, e := range w {
		if s.ownTable(tableOf(e)) {
			return nil, &ledger.EffectsError{Index: i, Table: s.table, Permanent: true, Err: errors.New("bulkrun's own table takes no staged writes")}
		}
		items = append(items, e)
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.db.TransactWriteItems(c, &dynamodb.TransactWriteItemsInput{
		TransactItems:      items,
		ClientRequestToken: aws.String(effectsToken(r)),
	})
	if err == nil {
		return nil, nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		reasons := tce.CancellationReasons
		if len(reasons) > 0 && awsfault.ReasonClass("dynamodb", "TransactWriteItems", aws.ToString(reasons[0].Code)) == ledger.FaultConflict {
			return reasons[0].Item, api.ErrConflict
		}
		if errors.Is(err, ledger.ErrUnavailable) {
			// A conflicting transaction or throttling, sent again in place
			// past the retryer's tries (awsfault.Tag): the worker tries the
			// same commit again.
			return nil, err
		}
		for i := 1; i < len(reasons) && i < len(items); i++ {
			code := aws.ToString(reasons[i].Code)
			if code == "" || code == "None" {
				continue
			}
			switch awsfault.ReasonClass("dynamodb", "TransactWriteItems", code) {
			case ledger.FaultRetry, ledger.FaultBackoff, ledger.FaultPause:
			case ledger.FaultConflict:
				return nil, &ledger.EffectsError{Index: i - 1, Table: tableOf(items[i]), Err: errors.New("its condition did not hold; nothing was applied")}
			default:
				return nil, &ledger.EffectsError{Index: i - 1, Table: tableOf(items[i]), Permanent: true, Err: fmt.Errorf("%s: %s", code, aws.ToString(reasons[i].Message))}
			}
		}
		return nil, err
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ValidationException", "ResourceNotFoundException", "AccessDeniedException":
			// Refused as written, a staged write's table does not exist, or
			// the item function may not write it: the same commit would be
			// refused again.
			return nil, &ledger.EffectsError{Index: -1, Permanent: true, Err: fmt.Errorf("%s: %s", api.ErrorCode(), api.ErrorMessage())}
		}
	}
	return nil, err
}

// effectsToken is the ClientRequestToken of an attempt's commit: 36 hex
// digits (DynamoDB allows 1–36 characters) of SHA-256 over the batch id,
// item key, run, attempt and the record's time in epoch milliseconds —
// the same for every resend of this commit (the worker resends the same
// Record), different for any other attempt, and different for a batch of
// the same id submitted again after a forget: its run 1, attempt 1 is
// another request, which DynamoDB would refuse with
// IdempotentParameterMismatchException within 10 minutes under the same
// token (its timestamps differ).
func effectsToken(r ledger.Record) string {
	h := sha256.New()
	for _, p := range []string{r.BatchID, r.Key, strconv.Itoa(r.Run), strconv.Itoa(r.Attempt), strconv.FormatInt(r.Now.UnixMilli(), 10)} {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:36]
}

// tableOf is the table a transaction write acts on.
func tableOf(w types.TransactWriteItem) string {
	switch {
	case w.Put != nil:
		return aws.ToString(w.Put.TableName)
	case w.Update != nil:
		return aws.ToString(w.Update.TableName)
	case w.Delete != nil:
		return aws.ToString(w.Delete.TableName)
	case w.ConditionCheck != nil:
		return aws.ToString(w.ConditionCheck.TableName)
	}
	return ""
}

// ownTable reports whether table names bulkrun's own table: its name, or
// an ARN whose resource is table/NAME.
func (s *Store) ownTable(table string) bool {
	if table == s.table {
		return true
	}
	if !strings.HasPrefix(table, "arn:") {
		return false
	}
	res, ok := strings.CutPrefix(table[strings.LastIndex(table, ":")+1:], "table/")
	return ok && res == s.table
}
