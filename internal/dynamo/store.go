// Package dynamo is the DynamoDB adapter of ledger.Store: one table, string
// keys pk/sk, two GSIs (config.IndexAttention, config.IndexBatches). It is the
// only importer of the DynamoDB SDK; it translates
// ConditionalCheckFailedException and TransactionCanceledException into
// api.ErrConflict / api.ErrBatchExists, each cancellation reason by the
// class internal/awsfault's table gives it (a conflicting transaction is
// retried in place, never a conflict), and never leaks SDK errors.
// The table's layout (its rows' keys, attribute names and stored shapes,
// and their codecs to and from the ledger's types) is package layout; here
// one file per concern: batch.go (the batch row), items.go (reservations
// and outcomes), counters.go, listing.go, retention.go, slots.go; the
// ledger.Store contract is ledgertest.Run (integration/testbed/ledgertest),
// run on the emulator.
//
// TTL: config.AttrExpiresAt (epoch seconds) is DynamoDB's TTL attribute.
// Item, counter and slot rows carry now + RowTTL from every write; finalize
// extends any that would end less than half of ledger.TTLGrace after the
// batch's retention to its end plus ledger.TTLGrace, the time the batch row
// gets when its run finishes (removed when a run starts). Markers carry
// none: the sweep deletes them.
//
// No partition key receives more than DynamoDB's 1,000 write units/s at the
// stack's flow: item rows are spread over list_shards partition keys and
// a run's counts over counter_lanes lanes, both sized from the flow
// (api.ListShards, ledger.CounterLanes; DynamoDB developer guide,
// "Partitions and data distribution"). An item row is written twice in a
// clean run (reservation, outcome) and never after its outcome by the
// ledger itself: no index copies its output, rerun counting writes MARK
// rows, and completion is detected on counters.
package dynamo

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/internal/dynamo/pacerows"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Store implements ledger.Store on one DynamoDB table. Safe for concurrent use.
type Store struct {
	db    *dynamodb.Client
	table string
	// Timeout bounds every DynamoDB call (default 10 s).
	Timeout time.Duration
	// RowTTL is the TTL item and counter rows get from each write (their
	// config.AttrExpiresAt is set to the write's time + RowTTL); 0 writes
	// none (finalize then sets every row's). Set it to the retention plus
	// ledger.TTLGrace so that finalize rarely has to extend a row.
	RowTTL   time.Duration
	capacity capacity
	// Rows are the pacing rows of downstream keys (pace.Rows), reached
	// through this Store's row calls.
	pacerows.Rows
}

var _ ledger.Store = (*Store)(nil)

// DB returns the DynamoDB client (for tests and tools).
func (s *Store) DB() *dynamodb.Client { return s.db }

// Table returns the table's name.
func (s *Store) Table() string { return s.table }

// New returns a Store on table. It uses a copy of db with bulkrun's
// retryer (no client-side retry quota, so that throttling is retried with
// backoff instead of failing at once), AWS's transient faults tagged
// ledger.ErrUnavailable (internal/awsfault) and every call asking for its
// consumed capacity (see Capacity); db itself is not changed.
func New(db *dynamodb.Client, table string) *Store {
	s := &Store{table: table, Timeout: 10 * time.Second}
	s.Rows = pacerows.New(s.getRow, s.updateRow, s.stamp)
	s.db = dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.Retryer = awsfault.Retryer()
		o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("dynamodb"), s.consumed)
	})
	return s
}

// stamp sets the row's format version (ledger.FormatVersion) and its TTL
// to now + RowTTL (when RowTTL is set) on update u.
func (s *Store) stamp(u expression.UpdateBuilder, now time.Time) expression.UpdateBuilder {
	u = u.Set(expression.Name(layout.AttrFormat), expression.Value(ledger.FormatVersion))
	if s.RowTTL <= 0 {
		return u
	}
	return u.Set(expression.Name(config.AttrExpiresAt), expression.Value(now.Add(s.RowTTL).Unix()))
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.Timeout)
}

// conflict reports whether err is a lost condition, returning the old item
// when DynamoDB sent it back.
func conflict(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// transact runs one TransactWriteItems whose first operation carries the
// condition. When that condition fails it returns the stored item that
// DynamoDB sent back (if asked for) and api.ErrConflict. A cancellation
// for a conflicting transaction or throttling was sent again in place by
// the retryer (awsfault.Retryer) and, past its tries, is
// ledger.ErrUnavailable (a *ledger.FaultError of class retry or backoff);
// other cancellations and errors come back as they are (use
// awsfault.ClassOf to tell a later operation's failed condition).
func (s *Store) transact(ctx context.Context, items ...types.TransactWriteItem) (map[string]types.AttributeValue, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.db.TransactWriteItems(c, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) && len(tce.CancellationReasons) > 0 &&
		awsfault.ReasonClass("dynamodb", "TransactWriteItems", aws.ToString(tce.CancellationReasons[0].Code)) == ledger.FaultConflict {
		return tce.CancellationReasons[0].Item, api.ErrConflict
	}
	return nil, err
}

// updateRow runs one UpdateItem of the row at k with expr (its condition,
// if any), returning the attributes asked for by rv. A lost condition
// returns the stored row (empty when there is none) and api.ErrConflict.
func (s *Store) updateRow(ctx context.Context, k map[string]types.AttributeValue, expr expression.Expression, rv types.ReturnValue) (attrs, old map[string]types.AttributeValue, err error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: k,
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValues:                        rv,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, ok := conflict(err); ok {
		return nil, old, api.ErrConflict
	}
	if err != nil {
		return nil, nil, err
	}
	return out.Attributes, nil, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// queryAll calls fn with every row under partition key pk, in sort-key
// order, reading every page.
func (s *Store) queryAll(ctx context.Context, pk string, consistent bool, fn func(map[string]types.AttributeValue) error) error {
	var start map[string]types.AttributeValue
	for {
		c, cancel := s.ctx(ctx)
		out, err := s.db.Query(c, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": config.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: pk}},
			ExclusiveStartKey:         start,
			ConsistentRead:            aws.Bool(consistent),
		})
		cancel()
		if err != nil {
			return err
		}
		for _, av := range out.Items {
			if err := fn(av); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		start = out.LastEvaluatedKey
	}
}

// queryKeys returns the keys (pk, sk) of every row under partition key pk.
func (s *Store) queryKeys(ctx context.Context, pk string) ([]map[string]types.AttributeValue, error) {
	var keys []map[string]types.AttributeValue
	err := s.queryAll(ctx, pk, false, func(av map[string]types.AttributeValue) error {
		keys = append(keys, map[string]types.AttributeValue{config.AttrPK: av[config.AttrPK], config.AttrSK: av[config.AttrSK]})
		return nil
	})
	return keys, err
}
