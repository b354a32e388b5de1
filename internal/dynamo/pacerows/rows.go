// Package pacerows is the DynamoDB adapter's half for the pacing rows of
// downstream keys (pace.Rows): a rate's bucket rows (RATE#{key}#{shard}),
// a token budget's row (TOKENS#{key}) and the adaptive pace's row
// (ADAPT#{key}), their keys and images in internal/dynamo/layout. Every
// call goes through the Store's own row calls (its client, retryer,
// timeout, consumed-capacity count and row TTL), handed to New.
package pacerows

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// Item is one row's attributes.
type Item = map[string]types.AttributeValue

// Get reads one row strongly consistent (nil, nil: no row).
type Get func(ctx context.Context, key Item) (Item, error)

// Update runs one UpdateItem with expr on key, answering the attributes
// rv asks for and, when the condition failed (an error wrapping
// api.ErrConflict), the stored row.
type Update func(ctx context.Context, key Item, expr expression.Expression, rv types.ReturnValue) (attrs, old Item, err error)

// Stamp sets the row's format version and TTL on an update at now.
type Stamp func(u expression.UpdateBuilder, now time.Time) expression.UpdateBuilder

// Rows implements pace.Rows on one table through the Store's row calls.
// The zero Rows is not usable: make it with New.
type Rows struct {
	get    Get
	update Update
	stamp  Stamp
}

var _ pace.Rows = Rows{}

// New returns the pacing rows reached through get, update and stamp.
func New(get Get, update Update, stamp Stamp) Rows {
	return Rows{get: get, update: update, stamp: stamp}
}
