package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/config"
)

// TableInput is the table the Store needs, as a CreateTable request
// (on-demand billing): pk/sk strings, the sparse attention GSI with all
// attributes projected (failed and quarantined item rows only, which
// carry no output), and the batches and sources GSIs projecting
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
			s(config.AttrPK), s(config.AttrSK), s(config.AttrAttentionPK), s(config.AttrAttentionSK),
			s(config.AttrBatchesPK), s(config.AttrBatchesSK), s(config.AttrSourcesPK),
		},
		KeySchema: keys(config.AttrPK, config.AttrSK),
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{IndexName: aws.String(config.IndexAttention), KeySchema: keys(config.AttrAttentionPK, config.AttrAttentionSK), Projection: all},
			{IndexName: aws.String(config.IndexBatches), KeySchema: keys(config.AttrBatchesPK, config.AttrBatchesSK),
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: config.BatchesProjection()}},
			{IndexName: aws.String(config.IndexSources), KeySchema: keys(config.AttrSourcesPK, config.AttrBatchesSK),
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: config.BatchesProjection()}},
		},
	}
}

// CreateTokenTag is the tag key CreateTable writes on the table it
// creates; its value is unique to the call.
const CreateTokenTag = "bulkrun:create-token"

// CreateTable creates the table name as TableInput describes it, and is
// safe for the SDK to retry. The SDK sends a CreateTable again when its
// answer was lost (a reset connection, a 5xx) even if the first request
// created the table, and the retry is then refused with
// ResourceInUseException. So the request carries a tag (CreateTokenTag)
// whose value is unique to this call, and the refusal counts as success
// only when the existing table carries this call's value: it is the table
// this very call created. A table of that name made by anything else is
// still an error (the ResourceInUseException, wrapped). It does not wait
// for the table to become ACTIVE (the emulator creates it ACTIVE; on AWS
// use dynamodb.NewTableExistsWaiter). Tags: DynamoDB developer guide,
// "Adding tags and labels to resources"
// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Tagging.html).
func CreateTable(ctx context.Context, db *dynamodb.Client, name string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("create table %s: token: %w", name, err)
	}
	token := hex.EncodeToString(b[:])
	in := TableInput(name)
	in.Tags = append(in.Tags, types.Tag{Key: aws.String(CreateTokenTag), Value: aws.String(token)})
	_, err := db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		if err != nil {
			return fmt.Errorf("create table %s: %w", name, err)
		}
		return nil
	}
	d, derr := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if derr != nil {
		return fmt.Errorf("create table %s: %w (describe: %v)", name, err, derr)
	}
	tags, terr := db.ListTagsOfResource(ctx, &dynamodb.ListTagsOfResourceInput{ResourceArn: d.Table.TableArn})
	if terr != nil {
		return fmt.Errorf("create table %s: %w (list tags: %v)", name, err, terr)
	}
	for _, t := range tags.Tags {
		if aws.ToString(t.Key) == CreateTokenTag && aws.ToString(t.Value) == token {
			return nil // created by this call; its first answer was lost
		}
	}
	return fmt.Errorf("create table %s: a table of that name already exists, not created by this call: %w", name, err)
}
