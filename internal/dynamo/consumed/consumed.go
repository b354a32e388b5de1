// Package consumed asks the Store's DynamoDB calls for the capacity they
// consume and reads it from their outputs (ReturnConsumedCapacity
// INDEXES; "ConsumedCapacity" in the DynamoDB API Reference,
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ConsumedCapacity.html).
// The sums are the Store's (internal/dynamo, capacity.go).
package consumed

import (
	"reflect"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Ask sets ReturnConsumedCapacity INDEXES on a call's input: every
// DynamoDB input with the field (GetItem, BatchGetItem, Query, Scan,
// PutItem, UpdateItem, DeleteItem, BatchWriteItem, TransactWriteItems,
// TransactGetItems, and PartiQL's, which the Store does not call) has it
// as types.ReturnConsumedCapacity. Other inputs are left as they are.
func Ask(params any) {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return
	}
	f := v.Elem().FieldByName("ReturnConsumedCapacity")
	if f.IsValid() && f.CanSet() && f.Type() == returnCapacityType {
		f.Set(reflect.ValueOf(types.ReturnConsumedCapacityIndexes))
	}
}

var returnCapacityType = reflect.TypeFor[types.ReturnConsumedCapacity]()

// Of is the capacity a call's output reports, and whether the call
// writes; none for an output without it (or another call's).
func Of(result any) ([]types.ConsumedCapacity, bool) {
	switch o := result.(type) {
	case *dynamodb.GetItemOutput:
		return one(o.ConsumedCapacity), false
	case *dynamodb.BatchGetItemOutput:
		return o.ConsumedCapacity, false
	case *dynamodb.QueryOutput:
		return one(o.ConsumedCapacity), false
	case *dynamodb.ScanOutput:
		return one(o.ConsumedCapacity), false
	case *dynamodb.TransactGetItemsOutput:
		return o.ConsumedCapacity, false
	case *dynamodb.PutItemOutput:
		return one(o.ConsumedCapacity), true
	case *dynamodb.UpdateItemOutput:
		return one(o.ConsumedCapacity), true
	case *dynamodb.DeleteItemOutput:
		return one(o.ConsumedCapacity), true
	case *dynamodb.BatchWriteItemOutput:
		return o.ConsumedCapacity, true
	case *dynamodb.TransactWriteItemsOutput:
		return o.ConsumedCapacity, true
	}
	return nil, false
}

func one(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

// Units is a reported figure, 0 when absent.
func Units(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
