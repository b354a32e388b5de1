package bulkrun

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// defineStorage defines the bucket and the table.
//
// Every reference to the bucket from a function or a policy uses its name
// (r.bucketName) and ARNs built from it, never a Ref to the bucket: the
// bucket depends on the submit function through its notification, so a
// reference back from the function would be a cycle.
func (r *runner) defineStorage() {
	s := r.s
	r.bucketName = jsii.String(s.bucketName)
	if s.bucketName == "" {
		r.bucketName = GeneratedBucketName()
	}
	expire := func(id, prefix string) *awss3.LifecycleRule {
		return &awss3.LifecycleRule{
			Id:         jsii.String(id),
			Enabled:    jsii.Bool(true),
			Prefix:     jsii.String(prefix),
			Expiration: awscdk.Duration_Days(jsii.Number(float64(s.retentionDays))),
		}
	}
	r.bucket = awss3.NewBucket(r.Construct, jsii.String("Bucket"), &awss3.BucketProps{
		BucketName:        r.bucketName,
		RemovalPolicy:     r.removal,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		// SSL-only on every target: the emulator does not evaluate bucket
		// policies (see hardening.go).
		EnforceSSL: jsii.Bool(true),
		Versioned:  jsii.Bool(false),
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id:                                  jsii.String("abort-incomplete-multipart-uploads"),
			Enabled:                             jsii.Bool(true),
			AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
		},
			// Local files the CLI uploaded, and error reports of refused
			// uploads, go after the retention.
			expire("expire-uploads", config.UploadsPrefix),
			expire("expire-upload-errors", config.UploadErrorsPrefix),
			expire("expire-schedule-errors", config.ScheduleErrorsPrefix),
		},
	})

	// Table: one table for every bulkrun row.
	r.table = awsdynamodb.NewTable(r.Construct, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(config.AttrPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:             &awsdynamodb.Attribute{Name: jsii.String(config.AttrSK), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(config.AttrExpiresAt),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(s.target == TargetAWS),
		},
		RemovalPolicy: r.removal,
	})
	// Warm throughput and the write ceiling: only when set (DynamoDB's
	// own otherwise).
	cfnTable := r.table.Node().DefaultChild().(awsdynamodb.CfnTable)
	if s.warmWrites > 0 || s.warmReads > 0 {
		warm := &awsdynamodb.CfnTable_WarmThroughputProperty{}
		if s.warmWrites > 0 {
			warm.WriteUnitsPerSecond = jsii.Number(float64(s.warmWrites))
		}
		if s.warmReads > 0 {
			warm.ReadUnitsPerSecond = jsii.Number(float64(s.warmReads))
		}
		cfnTable.SetWarmThroughput(warm)
	}
	if s.maxWrites > 0 {
		cfnTable.SetOnDemandThroughput(&awsdynamodb.CfnTable_OnDemandThroughputProperty{MaxWriteRequestUnits: jsii.Number(float64(s.maxWrites))})
	}
	// Item rows are listed by the table itself (pk ITEM#{id}#{shard}, sk
	// the item key): no index copies them. The attention index is sparse:
	// only failed and quarantined rows carry its keys, and they hold no
	// output (docs/design/storage.md, "Item rows are listed by the table").
	r.table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String(config.IndexAttention),
		PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String(config.AttrAttentionPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String(config.AttrAttentionSK), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType: awsdynamodb.ProjectionType_ALL,
	})
	// The batches index lists batches newest first (GET /batches); it
	// projects only what a listing shows, so most batch-row writes do not
	// touch it (docs/design/storage.md, "The batches index").
	r.table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:        jsii.String(config.IndexBatches),
		PartitionKey:     &awsdynamodb.Attribute{Name: jsii.String(config.AttrBatchesPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:          &awsdynamodb.Attribute{Name: jsii.String(config.AttrBatchesSK), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType:   awsdynamodb.ProjectionType_INCLUDE,
		NonKeyAttributes: jsii.Strings(config.BatchesProjection()...),
	})
	// The sources index finds the batches of one file or prefix (GET
	// /batches?source=…): sparse, only batch rows of an S3 source carry
	// its key; it projects what the batches index does.
	r.table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:        jsii.String(config.IndexSources),
		PartitionKey:     &awsdynamodb.Attribute{Name: jsii.String(config.AttrSourcesPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:          &awsdynamodb.Attribute{Name: jsii.String(config.AttrBatchesSK), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType:   awsdynamodb.ProjectionType_INCLUDE,
		NonKeyAttributes: jsii.Strings(config.BatchesProjection()...),
	})
}

// The table's throughput: DynamoDB's warm throughput of a new on-demand
// table ("Understanding DynamoDB warm throughput": 4,000 write and 12,000
// read units per second), and the write units one item costs, by items
// per message, as `make bench` measured them (2,000 items, 1 KB inputs,
// small outputs, docs/design/cost.md "Delivery order and failures").
const (
	DefaultWarmWrites = 4000
	DefaultWarmReads  = 12000
)

// TableWriteUnitsPerItem are the table's write units per item at 1, 10
// and 100 items per message (docs/design/cost.md); outputs of ~1 KB add
// about 1 at one item per message.
var TableWriteUnitsPerItem = map[int]float64{1: 2.113, 10: 0.224, 100: 0.153}

// TableWritesPerSecond is the write units per second the table takes at
// the stack's full flow (ledger.StackFlow of itemsMaxConcurrency, ten
// messages per invocation: items per second) with itemsPerMessage items
// per message (the nearest measured of TableWriteUnitsPerItem at or
// below it): ≈ 21,130 at the default concurrency (100) and one item per
// message, ≈ 2,240 at ten.
func TableWritesPerSecond(itemsMaxConcurrency, itemsPerMessage int) int {
	k := 1
	for _, m := range []int{10, 100} {
		if itemsPerMessage >= m {
			k = m
		}
	}
	flow := ledger.StackFlow(itemsMaxConcurrency, config.DefaultItemBatchSize)
	return int(float64(flow)*TableWriteUnitsPerItem[k] + 0.5)
}

// GeneratedBucketName is the bucket's name when RunnerProps.BucketName is
// empty: "bulkrun-" and the UUID that ends the stack's id
// (arn:aws:cloudformation:{region}:{account}:stack/{name}/{uuid}), 44
// characters of [a-z0-9-]. CloudFormation generates it when it creates
// the stack: every stack gets its own (a bucket a destroyed stack kept is
// never in the way), and no one can know it before the stack exists to
// take it first. It is built from the stack's id rather than left to
// CloudFormation's own naming because the functions' environment and
// policies name the bucket, and a Ref to the bucket from them would be a
// dependency cycle (the bucket's notification names submit).
func GeneratedBucketName() *string {
	return awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("bulkrun-"),
		awscdk.Fn_Select(jsii.Number(2), awscdk.Fn_Split(jsii.String("/"), awscdk.Aws_STACK_ID(), nil))})
}

// s3Arn returns the ARN of bucket (when key is empty) or of key in bucket,
// built from the bucket's name so that it does not reference the bucket
// resource.
func s3Arn(bucket *string, key string) *string {
	parts := []*string{jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":s3:::"), bucket}
	if key != "" {
		parts = append(parts, jsii.String("/"+key))
	}
	return awscdk.Fn_Join(jsii.String(""), &parts)
}
