package awsfault

// Call is one AWS operation bulkrun's functions or CLI call, and the
// packages that call it (their paths in the module).
type Call struct {
	Service   string // the SigV4 signing name, as Row.Service
	Operation string
	Callers   []string // the packages making the call, such as "internal/dynamo"
}

// Calls is every AWS operation bulkrun's functions and CLI call:
// TestCallsAreEveryCallSite finds each operation an SDK input is built
// for in the product's packages (go/ast over every call site; the S3
// transfer manager's upload counts as the S3 operations it makes, and a
// request signed for "execute-api" as a call of bulkrun's own REST API,
// the IAM action execute-api:Invoke) and
// holds this list equal to them, and TestEveryCallHasRows that every one
// has rows in Table. An adapter that starts calling another operation
// fails both until it is listed here with its errors' rows.
var Calls = []Call{
	{"dynamodb", "BatchGetItem", []string{"internal/dynamo"}},
	{"dynamodb", "BatchWriteItem", []string{"internal/dynamo"}},
	{"dynamodb", "CreateTable", []string{"internal/dynamo"}},
	{"dynamodb", "DeleteItem", []string{"internal/dynamo"}},
	{"dynamodb", "DescribeTable", []string{"internal/dynamo", "internal/setup"}},
	{"dynamodb", "GetItem", []string{"internal/dynamo"}},
	{"dynamodb", "ListTagsOfResource", []string{"internal/dynamo"}},
	{"dynamodb", "PutItem", []string{"internal/dynamo"}},
	{"dynamodb", "Query", []string{"internal/dynamo"}},
	{"dynamodb", "TransactWriteItems", []string{"internal/dynamo"}},
	{"dynamodb", "UpdateItem", []string{"internal/dynamo"}},
	{"dynamodb", "UpdateTable", []string{"internal/setup"}},
	{"s3", "AbortMultipartUpload", []string{"internal/blob"}},
	{"s3", "CompleteMultipartUpload", []string{"internal/blob"}},
	{"s3", "CreateMultipartUpload", []string{"internal/blob"}},
	{"s3", "DeleteObject", []string{"internal/blob"}},
	{"s3", "DeleteObjects", []string{"internal/blob"}},
	{"s3", "GetBucketEncryption", []string{"cmd/bulkrun/doctor"}},
	{"s3", "GetBucketLocation", []string{"internal/blob"}},
	{"s3", "GetObject", []string{"cmd/bulkrun/cli", "internal/blob"}},
	{"s3", "HeadBucket", []string{"cmd/bulkrun/doctor"}},
	{"s3", "HeadObject", []string{"cmd/bulkrun/cli", "internal/blob"}},
	{"s3", "ListObjectsV2", []string{"internal/blob"}},
	{"s3", "ListParts", []string{"internal/blob"}},
	{"s3", "PutObject", []string{"internal/blob"}},
	{"s3", "UploadPart", []string{"internal/blob"}},
	{"s3", "UploadPartCopy", []string{"internal/blob"}},
	{"sqs", "ChangeMessageVisibility", []string{"internal/queue"}},
	{"sqs", "GetQueueAttributes", []string{"cmd/bulkrun/doctor"}},
	{"sqs", "SendMessage", []string{"internal/queue"}},
	{"sqs", "SendMessageBatch", []string{"internal/queue"}},
	{"lambda", "GetAccountSettings", []string{"cmd/bulkrun/doctor"}},
	{"lambda", "GetFunctionConcurrency", []string{"cmd/bulkrun/doctor"}},
	{"lambda", "Invoke", []string{"cmd/bulkrun/cli", "internal/pipeline/lambdafn", "internal/trigger"}},
	{"lambda", "ListEventSourceMappings", []string{"cmd/bulkrun/doctor"}},
	{"events", "PutEvents", []string{"internal/event"}},
	{"states", "SendTaskFailure", []string{"internal/event"}},
	{"states", "SendTaskHeartbeat", []string{"internal/event"}},
	{"states", "SendTaskSuccess", []string{"internal/event"}},
	{"ssm", "GetParameter", []string{"internal/secret"}},
	{"secretsmanager", "GetSecretValue", []string{"internal/secret"}},
	{"cloudformation", "DescribeStacks", []string{"internal/setup", "shared/client"}},
	{"cloudformation", "GetTemplate", []string{"cmd/bulkrun/doctor"}},
	{"monitoring", "DescribeAlarms", []string{"cmd/bulkrun/doctor"}},
	{"monitoring", "GetMetricStatistics", []string{"cmd/bulkrun/doctor"}},
	{"apigateway", "GetAccount", []string{"cmd/bulkrun/doctor", "internal/setup"}},
	{"apigateway", "UpdateAccount", []string{"internal/setup"}},
	{"sns", "GetTopicAttributes", []string{"cmd/bulkrun/doctor"}},
	{"kms", "DescribeKey", []string{"cmd/bulkrun/doctor"}},
	{"kms", "GetKeyPolicy", []string{"cmd/bulkrun/doctor"}},
	{"execute-api", "Invoke", []string{"shared/client"}},
}
