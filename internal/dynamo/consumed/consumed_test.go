package consumed

import (
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Ask reaches every input the Store's calls send: each asks for
// ReturnConsumedCapacity INDEXES, and an input without the field is left
// as it was.
func TestAskEveryInput(t *testing.T) {
	inputs := []any{&dynamodb.GetItemInput{}, &dynamodb.BatchGetItemInput{}, &dynamodb.QueryInput{}, &dynamodb.ScanInput{},
		&dynamodb.PutItemInput{}, &dynamodb.UpdateItemInput{}, &dynamodb.DeleteItemInput{}, &dynamodb.BatchWriteItemInput{},
		&dynamodb.TransactWriteItemsInput{}, &dynamodb.TransactGetItemsInput{}}
	for _, in := range inputs {
		Ask(in)
		if got := reflect.ValueOf(in).Elem().FieldByName("ReturnConsumedCapacity").Interface(); got != types.ReturnConsumedCapacityIndexes {
			t.Errorf("%T: ReturnConsumedCapacity %v, want INDEXES", in, got)
		}
	}
	other := &dynamodb.DescribeTableInput{TableName: aws.String("t")}
	Ask(other)
	Ask(nil)
	Ask((*dynamodb.GetItemInput)(nil))
	if aws.ToString(other.TableName) != "t" {
		t.Errorf("DescribeTable input changed: %+v", other)
	}
}
