package dynamo

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/config"
)

// TableInput is the table the Store needs, as a CreateTable request
// (on-demand billing): pk/sk strings, the list and attention GSIs with
// all attributes projected, and the batches GSI projecting
// config.BatchesProjection. The CDK stack declares the same table; its
// template test checks the names against config.
func TableInput(name string) *dynamodb.CreateTableInput {
	s := func(n string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeTypeS}
	}
	keys := func(pk, sk string) []types.KeySchemaElement {
		return []types.KeySchemaElement{
			{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(sk), KeyType: types.KeyTypeRange},
		}
	}
	all := &types.Projection{ProjectionType: types.ProjectionTypeAll}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			s(config.AttrPK), s(config.AttrSK), s(config.AttrListPK), s(config.AttrListSK), s(config.AttrAttentionPK), s(config.AttrAttentionSK),
			s(config.AttrBatchesPK), s(config.AttrBatchesSK),
		},
		KeySchema: keys(config.AttrPK, config.AttrSK),
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{IndexName: aws.String(config.IndexList), KeySchema: keys(config.AttrListPK, config.AttrListSK), Projection: all},
			{IndexName: aws.String(config.IndexAttention), KeySchema: keys(config.AttrAttentionPK, config.AttrAttentionSK), Projection: all},
			{IndexName: aws.String(config.IndexBatches), KeySchema: keys(config.AttrBatchesPK, config.AttrBatchesSK),
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: config.BatchesProjection()}},
		},
	}
}
