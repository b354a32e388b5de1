package awsfault

import "github.com/bulkrun/bulkrun/shared/ledger"

// Row is one error an AWS operation answers, as bulkrun classifies it. A
// row matches an error of a call when the service is Service, the
// operation one of Operations (nil: any call of Service that bulkrun
// makes, see Calls), and the error has Code (the code the SDK reports:
// smithy.APIError's ErrorCode, or Alias), holds Message in its message
// ("" matches any), and, for a TransactionCanceledException, has Reason
// among its cancellation reasons. A row with Code "" matches an error
// with no code of its own by Status alone; Status 0 there is no answer at
// all (a timeout, a reset or refused connection). A Function row is a
// Lambda function error (Invoke's X-Amz-Function-Error, in a 200 answer):
// Code is the errorType of its payload, not an API error code. Table
// lists rows in the order Classify tries them: a row naming a Message
// comes before the row of the same code without one.
type Row struct {
	Service    string   // the SigV4 signing name: "dynamodb", "s3", "sqs", "lambda", "events", "states", "ssm", "secretsmanager", "cloudformation", "monitoring", "apigateway", "sns", "kms", "execute-api" (bulkrun's REST API)
	Operations []string // the operations it applies to; nil: every operation of Service in Calls
	Code       string   // the error code ("" for none: Status decides)
	Alias      string   // another spelling of Code the SDK may report (SQS's JSON shape without X-Amzn-Query-Error)
	Reason     string   // a TransactionCanceledException's cancellation reason
	Message    string   // a text the error message holds ("" for any)
	Status     int      // the HTTP status AWS answers with (0: no answer)
	Function   bool     // a function error of Invoke (Code is its errorType)
	Class      ledger.FaultClass
	Note       string // what bulkrun does, beyond its class
	Source     string // the AWS documentation that says so: title and URL
}

// The documentation the rows cite.
const (
	srcDynamoErrors   = `Amazon DynamoDB developer guide, "Error handling with DynamoDB", https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html`
	srcDynamoTransact = `Amazon DynamoDB API reference, "TransactWriteItems", Errors, https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html`
	srcDynamoCommon   = `Amazon DynamoDB API reference, "Common Errors", https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/CommonErrors.html`
	srcS3Errors       = `Amazon S3 API reference, "Error responses", https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html`
	srcS3Performance  = `Amazon S3 user guide, "Best practices design patterns: optimizing Amazon S3 performance", https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html`
	srcS3Denied       = `Amazon S3 user guide, "Troubleshoot access denied (403 Forbidden) errors in Amazon S3", https://docs.aws.amazon.com/AmazonS3/latest/userguide/troubleshoot-403-errors.html`
	srcS3KMS          = `Amazon S3 user guide, "Using server-side encryption with AWS KMS keys (SSE-KMS)", https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html`
	srcSQSSend        = `Amazon SQS API reference, "SendMessage", Errors, https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html`
	srcSQSBatch       = `Amazon SQS API reference, "SendMessageBatch", Errors, https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html`
	srcSQSVisibility  = `Amazon SQS API reference, "ChangeMessageVisibility", Errors, https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html`
	srcSQSCommon      = `Amazon SQS API reference, "Common Errors", https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/CommonErrors.html`
	srcLambdaInvoke   = `AWS Lambda API reference, "Invoke", Errors, https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html`
	srcLambdaCommon   = `AWS Lambda API reference, "Common Errors", https://docs.aws.amazon.com/lambda/latest/api/CommonErrors.html`
	srcLambdaTrouble  = `AWS Lambda developer guide, "Troubleshoot invocation issues in Lambda", https://docs.aws.amazon.com/lambda/latest/dg/troubleshooting-invocation.html`
	srcLambdaExec     = `AWS Lambda developer guide, "Troubleshoot execution issues in Lambda", https://docs.aws.amazon.com/lambda/latest/dg/troubleshooting-execution.html`
	srcLambdaQuotas   = `AWS Lambda developer guide, "Lambda quotas", https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html`
	srcEvents         = `Amazon EventBridge API reference, "PutEvents", Errors, https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html`
	srcEventsCommon   = `Amazon EventBridge API reference, "Common Errors", https://docs.aws.amazon.com/eventbridge/latest/APIReference/CommonErrors.html`
	srcStatesSuccess  = `AWS Step Functions API reference, "SendTaskSuccess", Errors, https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html`
	srcStatesBeat     = `AWS Step Functions API reference, "SendTaskHeartbeat", Errors, https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html`
	srcStatesCommon   = `AWS Step Functions API reference, "Common Errors", https://docs.aws.amazon.com/step-functions/latest/apireference/CommonErrors.html`
	srcSSM            = `AWS Systems Manager API reference, "GetParameter", Errors, https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html`
	srcSSMCommon      = `AWS Systems Manager API reference, "Common Errors", https://docs.aws.amazon.com/systems-manager/latest/APIReference/CommonErrors.html`
	srcSecrets        = `AWS Secrets Manager API reference, "GetSecretValue", Errors, https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html`
	srcSecretsCommon  = `AWS Secrets Manager API reference, "Common Errors", https://docs.aws.amazon.com/secretsmanager/latest/apireference/CommonErrors.html`
	srcCFN            = `AWS CloudFormation API reference, "Common Errors", https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/CommonErrors.html`
	srcCloudWatch     = `Amazon CloudWatch API reference, "Common Errors", https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/CommonErrors.html`
	srcAPIGateway     = `Amazon API Gateway REST API reference, "Common Errors", https://docs.aws.amazon.com/apigateway/latest/api/CommonErrors.html`
	srcAPIThrottle    = `Amazon API Gateway developer guide, "Throttle requests to your REST APIs for better throughput in API Gateway", https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-request-throttling.html`
	srcAPIResponses   = `Amazon API Gateway developer guide, "Gateway response types for API Gateway", https://docs.aws.amazon.com/apigateway/latest/developerguide/supported-gateway-response-types.html`
	srcAPIQuotas      = `Amazon API Gateway developer guide, "Amazon API Gateway quotas", https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-execution-service-limits-table.html`
	srcSNS            = `Amazon SNS API reference, "Common Errors", https://docs.aws.amazon.com/sns/latest/api/CommonErrors.html`
	srcKMS            = `AWS KMS API reference, "Common Errors", https://docs.aws.amazon.com/kms/latest/APIReference/CommonErrors.html`
	srcSDKRetries     = `AWS SDK for Go v2 developer guide, "Retries and Timeouts", https://docs.aws.amazon.com/sdk-for-go/v2/developer-guide/configure-retries-timeouts.html`
	srcSkew           = `AWS SDKs and Tools reference guide, "Retry behavior" (clock skew correction), https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html`
)

// Notes shared by several rows.
const (
	noteNoAnswer   = "a timeout, a reset or refused connection: the call may or may not have taken effect"
	noteExpired    = "the credentials the call was signed with expired; the function's role credentials are renewed by Lambda, the CLI's by its profile"
	noteSkew       = "the SDK corrects its clock from the answer's Date header and signs again"
	noteKMS        = "the KMS key of the resource is disabled, pending deletion, missing or denied to the role: fix the key or its policy"
	noteGrant      = "a grant is missing: the IAM-checked lane names it in tests"
	noteBulkrunBug = "bulkrun sent a request AWS refuses as written: a bug, reported with the request's reason"
)

var (
	dynamoWrites = []string{"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
	sqsSends     = []string{"SendMessage", "SendMessageBatch"}
	s3Writes     = []string{"PutObject", "CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload"}
	invoke       = []string{"Invoke"}
	answers      = []string{"SendTaskSuccess", "SendTaskFailure"} // the answers to a task token
)

const (
	inPlace   = ledger.FaultRetry
	backoff   = ledger.FaultBackoff
	pause     = ledger.FaultPause
	permanent = ledger.FaultPermanent
	conflict  = ledger.FaultConflict
)

// Table is every error of every AWS call bulkrun's functions and CLI make
// (Calls) that matters to bulkrun, with its class: one table for the
// retryer (Retryer), the adapters' tagging (Tag) and translation, the
// lambda pipeline's Invoke errors and function errors, and
// docs/design/errors.md (TestTableInDocs keeps the two equal row for
// row). An error no row matches is classified by what AWS answered
// (ClassOf).
var Table = []Row{
	// DynamoDB.
	{Service: "dynamodb", Code: "ProvisionedThroughputExceededException", Status: 400, Class: backoff, Note: "a partition's or the table's throughput", Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "ThrottlingException", Status: 400, Class: backoff, Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "RequestLimitExceeded", Status: 400, Class: backoff, Note: "the account's throughput", Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "InternalServerError", Status: 500, Class: inPlace, Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "ServiceUnavailable", Status: 503, Class: inPlace, Source: srcDynamoErrors},
	{Service: "dynamodb", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "dynamodb", Operations: []string{"PutItem", "UpdateItem", "DeleteItem"}, Code: "ConditionalCheckFailedException", Status: 400, Class: conflict, Note: "api.ErrConflict, with the stored item when asked for", Source: srcDynamoErrors},
	{Service: "dynamodb", Operations: []string{"PutItem", "UpdateItem", "DeleteItem"}, Code: "TransactionConflictException", Status: 400, Class: inPlace, Note: "the item is in a transaction of another writer", Source: srcDynamoErrors},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "TransactionCanceledException", Reason: "ConditionalCheckFailed", Status: 400, Class: conflict, Note: "api.ErrConflict (the first operation's condition; a staged write's is a *ledger.EffectsError naming it); it decides over any other reason", Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "TransactionCanceledException", Reason: "TransactionConflict", Status: 400, Class: inPlace, Note: "a concurrent write to one of its items, not a failed condition: nothing was applied, the transaction is sent again", Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "TransactionCanceledException", Reason: "ThrottlingError", Status: 400, Class: backoff, Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "TransactionCanceledException", Reason: "ProvisionedThroughputExceeded", Status: 400, Class: backoff, Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "TransactionCanceledException", Reason: "ValidationError", Status: 400, Class: permanent, Note: "a staged write refused as written: the item fails without its writes (*ledger.EffectsError)", Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "TransactionCanceledException", Reason: "ItemCollectionSizeLimitExceeded", Status: 400, Class: permanent, Note: "a staged write's item collection is over 10 GB", Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "TransactionInProgressException", Status: 400, Class: backoff, Note: "the same ClientRequestToken is still being applied", Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Code: "IdempotentParameterMismatchException", Status: 400, Class: permanent, Note: "a ClientRequestToken reused for another request", Source: srcDynamoTransact},
	{Service: "dynamodb", Operations: dynamoWrites, Code: "ItemCollectionSizeLimitExceededException", Status: 400, Class: permanent, Source: srcDynamoErrors},
	{Service: "dynamodb", Operations: []string{"CreateTable"}, Code: "ResourceInUseException", Status: 400, Class: conflict, Note: "the table exists: CreateTable checks it is bulkrun's", Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "ValidationException", Status: 400, Class: permanent, Note: noteBulkrunBug, Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "ResourceNotFoundException", Status: 400, Class: permanent, Note: "the table does not exist", Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "AccessDeniedException", Status: 400, Class: permanent, Note: noteGrant, Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "UnrecognizedClientException", Status: 400, Class: permanent, Note: "the access key is not known", Source: srcDynamoErrors},
	{Service: "dynamodb", Code: "ExpiredTokenException", Status: 400, Class: pause, Note: noteExpired, Source: srcDynamoCommon},
	{Service: "dynamodb", Code: "InvalidSignatureException", Message: "Signature expired", Status: 400, Class: inPlace, Note: noteSkew, Source: srcSkew},
	{Service: "dynamodb", Code: "InvalidSignatureException", Status: 400, Class: permanent, Note: "a wrong secret key", Source: srcDynamoErrors},

	// S3.
	{Service: "s3", Code: "SlowDown", Status: 503, Class: backoff, Note: "S3 asks its callers to slow down; an output write of an item waits without using an attempt", Source: srcS3Performance},
	{Service: "s3", Code: "ServiceUnavailable", Status: 503, Class: backoff, Note: "\"Reduce your request rate\"", Source: srcS3Errors},
	{Service: "s3", Status: 503, Class: backoff, Note: "a 503 without a body (HeadObject)", Source: srcS3Errors},
	{Service: "s3", Code: "InternalError", Status: 500, Class: inPlace, Source: srcS3Errors},
	{Service: "s3", Code: "RequestTimeout", Status: 400, Class: inPlace, Note: "the socket was not read from or written to in time", Source: srcS3Errors},
	{Service: "s3", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "s3", Code: "RequestTimeTooSkewed", Status: 403, Class: inPlace, Note: noteSkew, Source: srcS3Errors},
	{Service: "s3", Code: "ExpiredToken", Status: 400, Class: pause, Note: noteExpired, Source: srcS3Errors},
	{Service: "s3", Code: "AccessDenied", Message: "kms:", Status: 403, Class: pause, Note: "the bucket's KMS key denies the role (kms:GenerateDataKey, kms:Decrypt): " + noteKMS, Source: srcS3Denied},
	{Service: "s3", Code: "KMS.DisabledException", Status: 400, Class: pause, Note: noteKMS, Source: srcS3KMS},
	{Service: "s3", Code: "KMS.KMSInvalidStateException", Status: 400, Class: pause, Note: noteKMS, Source: srcS3KMS},
	{Service: "s3", Code: "KMS.NotFoundException", Status: 400, Class: pause, Note: noteKMS, Source: srcS3KMS},
	{Service: "s3", Code: "AccessDenied", Status: 403, Class: permanent, Note: noteGrant, Source: srcS3Errors},
	{Service: "s3", Code: "NoSuchKey", Status: 404, Class: permanent, Note: "api.ErrNotFound: the caller decides (a manifest gone, an object forgotten)", Source: srcS3Errors},
	{Service: "s3", Status: 404, Class: permanent, Note: "a HeadObject of no object: api.ErrNotFound", Source: srcS3Errors},
	{Service: "s3", Code: "NoSuchBucket", Status: 404, Class: permanent, Source: srcS3Errors},
	{Service: "s3", Operations: []string{"UploadPart", "UploadPartCopy", "CompleteMultipartUpload", "AbortMultipartUpload", "ListParts"}, Code: "NoSuchUpload", Status: 404, Class: permanent, Note: "the multipart upload was completed or aborted: the part's writer checks the object", Source: srcS3Errors},
	{Service: "s3", Operations: []string{"GetObject", "HeadObject", "PutObject"}, Code: "PreconditionFailed", Status: 412, Class: conflict, Note: "If-Match or If-None-Match did not hold: api.ErrConflict (a source replaced, a report already written)", Source: srcS3Errors},
	{Service: "s3", Operations: []string{"PutObject", "CompleteMultipartUpload"}, Code: "ConditionalRequestConflict", Status: 409, Class: inPlace, Note: "a conditional write raced another: sent again, it meets the other's object", Source: srcS3Errors},
	{Service: "s3", Code: "InvalidRange", Status: 416, Class: permanent, Note: "a range past the object's end", Source: srcS3Errors},
	{Service: "s3", Operations: s3Writes, Code: "EntityTooLarge", Status: 400, Class: permanent, Source: srcS3Errors},

	// SQS.
	{Service: "sqs", Code: "RequestThrottled", Status: 403, Class: backoff, Source: srcSQSSend},
	{Service: "sqs", Code: "ThrottlingException", Status: 400, Class: backoff, Source: srcSQSCommon},
	{Service: "sqs", Operations: sqsSends, Code: "KMS.ThrottlingException", Alias: "KmsThrottled", Status: 400, Class: backoff, Note: "KMS throttled the queue's data key", Source: srcSQSSend},
	{Service: "sqs", Operations: []string{"ChangeMessageVisibility"}, Code: "OverLimit", Status: 403, Class: backoff, Note: "the queue's in-flight quota (120,000 messages): the message comes back at its visibility timeout instead", Source: srcSQSVisibility},
	{Service: "sqs", Code: "InternalFailure", Alias: "InternalError", Status: 500, Class: inPlace, Source: srcSQSCommon},
	{Service: "sqs", Code: "ServiceUnavailable", Status: 503, Class: inPlace, Source: srcSQSCommon},
	{Service: "sqs", Status: 0, Class: inPlace, Note: noteNoAnswer + " (a message may have been sent: the reservations absorb a duplicate)", Source: srcSDKRetries},
	{Service: "sqs", Operations: sqsSends, Code: "KMS.DisabledException", Alias: "KmsDisabled", Status: 400, Class: pause, Note: noteKMS, Source: srcSQSSend},
	{Service: "sqs", Operations: sqsSends, Code: "KMS.InvalidStateException", Alias: "KmsInvalidState", Status: 400, Class: pause, Note: noteKMS, Source: srcSQSSend},
	{Service: "sqs", Operations: sqsSends, Code: "KMS.NotFoundException", Alias: "KmsNotFound", Status: 400, Class: pause, Note: noteKMS, Source: srcSQSSend},
	{Service: "sqs", Operations: sqsSends, Code: "KMS.AccessDeniedException", Alias: "KmsAccessDenied", Status: 400, Class: pause, Note: noteKMS, Source: srcSQSSend},
	{Service: "sqs", Operations: sqsSends, Code: "KMS.OptInRequired", Alias: "KmsOptInRequired", Status: 403, Class: pause, Note: noteKMS, Source: srcSQSSend},
	{Service: "sqs", Operations: sqsSends, Code: "KMS.InvalidKeyUsageException", Alias: "KmsInvalidKeyUsage", Status: 400, Class: pause, Note: noteKMS, Source: srcSQSSend},
	{Service: "sqs", Code: "ExpiredTokenException", Alias: "ExpiredToken", Status: 400, Class: pause, Note: noteExpired, Source: srcSQSCommon},
	{Service: "sqs", Code: "RequestExpired", Status: 400, Class: inPlace, Note: noteSkew, Source: srcSQSCommon},
	{Service: "sqs", Operations: sqsSends, Code: "InvalidMessageContents", Status: 400, Class: permanent, Note: "a batch entry refused as the sender's fault: its item fails with the queue's reason, the other entries are sent", Source: srcSQSBatch},
	{Service: "sqs", Code: "QueueDoesNotExist", Alias: "AWS.SimpleQueueService.NonExistentQueue", Status: 400, Class: permanent, Source: srcSQSSend},
	{Service: "sqs", Code: "AccessDeniedException", Alias: "AccessDenied", Status: 400, Class: permanent, Note: noteGrant, Source: srcSQSCommon},
	{Service: "sqs", Operations: []string{"SendMessageBatch"}, Code: "BatchRequestTooLong", Status: 400, Class: permanent, Note: noteBulkrunBug, Source: srcSQSBatch},
	{Service: "sqs", Operations: []string{"SendMessageBatch"}, Code: "TooManyEntriesInBatchRequest", Status: 400, Class: permanent, Note: noteBulkrunBug, Source: srcSQSBatch},
	{Service: "sqs", Operations: []string{"SendMessageBatch"}, Code: "BatchEntryIdsNotDistinct", Status: 400, Class: permanent, Note: noteBulkrunBug, Source: srcSQSBatch},
	{Service: "sqs", Operations: []string{"ChangeMessageVisibility"}, Code: "ReceiptHandleIsInvalid", Status: 400, Class: permanent, Note: "the message was deleted or its receipt is stale: logged, the delivery's own outcome stands", Source: srcSQSVisibility},
	{Service: "sqs", Operations: []string{"ChangeMessageVisibility"}, Code: "MessageNotInflight", Status: 400, Class: permanent, Note: "logged, the delivery's own outcome stands", Source: srcSQSVisibility},

	// Lambda: the API's errors.
	{Service: "lambda", Code: "TooManyRequestsException", Status: 429, Class: backoff, Note: "the account's or function's concurrency, or its rate (Reason names which)", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "EC2ThrottledException", Status: 502, Class: backoff, Note: "EC2 throttled Lambda creating the function's network interface", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "ENILimitReachedException", Status: 502, Class: backoff, Note: "the VPC's network-interface quota", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "SubnetIPAddressLimitReachedException", Status: 502, Class: backoff, Note: "no free IP address in the function's subnets", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "ResourceNotReadyException", Status: 502, Class: backoff, Note: "the function is inactive and being restored", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "ResourceConflictException", Status: 409, Class: backoff, Note: "the function is being updated", Source: srcLambdaTrouble},
	{Service: "lambda", Operations: invoke, Code: "SnapStartNotReadyException", Status: 409, Class: backoff, Note: "the function's snapshot is being made", Source: srcLambdaInvoke},
	{Service: "lambda", Code: "ServiceException", Status: 500, Class: inPlace, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "EC2UnexpectedException", Status: 502, Class: inPlace, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "SnapStartTimeoutException", Status: 408, Class: inPlace, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "EFSIOException", Status: 410, Class: inPlace, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "EFSMountConnectivityException", Status: 408, Class: inPlace, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "EFSMountTimeoutException", Status: 408, Class: inPlace, Source: srcLambdaInvoke},
	{Service: "lambda", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "lambda", Code: "ResourceNotFoundException", Status: 404, Class: permanent, Note: "no such function, version or alias", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "RequestTooLargeException", Status: 413, Class: permanent, Note: "the request is over 6 MB (synchronous) or 1 MB (asynchronous)", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "RequestEntityTooLargeException", Status: 413, Class: permanent, Note: "the request is over the payload quota, as Lambda names it on the wire", Source: srcLambdaQuotas},
	{Service: "lambda", Operations: invoke, Code: "SerializedRequestEntityTooLargeException", Status: 413, Class: permanent, Note: "the serialized request is over the payload quota", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "InvalidRequestContentException", Status: 400, Class: permanent, Note: "the request's JSON cannot be parsed", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "InvalidParameterValueException", Status: 400, Class: permanent, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "UnsupportedMediaTypeException", Status: 415, Class: permanent, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "RecursiveInvocationException", Status: 400, Class: permanent, Note: "Lambda stopped a recursive loop", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "SnapStartException", Status: 400, Class: permanent, Source: srcLambdaInvoke},
	{Service: "lambda", Code: "AccessDeniedException", Status: 403, Class: permanent, Note: noteGrant, Source: srcLambdaCommon},
	{Service: "lambda", Operations: invoke, Code: "EFSMountFailureException", Status: 403, Class: permanent, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "InvalidRuntimeException", Status: 502, Class: permanent, Note: "the function's runtime or its settings are invalid; not retried although 502", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "InvalidSecurityGroupIDException", Status: 502, Class: permanent, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "InvalidSubnetIDException", Status: 502, Class: permanent, Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "InvalidZipFileException", Status: 502, Class: permanent, Note: "the deployment package cannot be unpacked", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "EC2AccessDeniedException", Status: 502, Class: permanent, Note: "the function's role lacks EC2 permissions", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "KMSAccessDeniedException", Status: 502, Class: permanent, Note: "the invoked function's environment cannot be decrypted: its own configuration, as a missing function is", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "KMSDisabledException", Status: 502, Class: permanent, Note: "as KMSAccessDeniedException", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "KMSInvalidStateException", Status: 502, Class: permanent, Note: "as KMSAccessDeniedException", Source: srcLambdaInvoke},
	{Service: "lambda", Operations: invoke, Code: "KMSNotFoundException", Status: 502, Class: permanent, Note: "as KMSAccessDeniedException", Source: srcLambdaInvoke},
	{Service: "lambda", Code: "ExpiredTokenException", Status: 403, Class: pause, Note: noteExpired, Source: srcLambdaCommon},
	{Service: "lambda", Code: "InvalidSignatureException", Message: "Signature expired", Status: 403, Class: inPlace, Note: noteSkew, Source: srcSkew},

	// Lambda: function errors of Invoke (the lambda pipeline's calls).
	{Service: "lambda", Operations: invoke, Code: "Function.ResponseSizeTooLarge", Status: 200, Function: true, Class: permanent, Note: "the function's answer is over 6 MB: the same input answers the same", Source: srcLambdaQuotas},
	{Service: "lambda", Operations: invoke, Code: "Runtime.HandlerNotFound", Status: 200, Function: true, Class: permanent, Note: "the handler is not exported", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Runtime.ImportModuleError", Status: 200, Function: true, Class: permanent, Note: "the handler's module or a dependency is missing", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Runtime.UserCodeSyntaxError", Status: 200, Function: true, Class: permanent, Note: "the function's code does not parse", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Runtime.MalformedHandlerName", Status: 200, Function: true, Class: permanent, Note: "the handler setting is not module.function", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Runtime.InvalidEntrypoint", Status: 200, Function: true, Class: permanent, Note: "no valid bootstrap or entrypoint", Source: srcLambdaTrouble},
	{Service: "lambda", Operations: invoke, Code: "Runtime.MarshalError", Status: 200, Function: true, Class: permanent, Note: "the function's answer cannot be serialized", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Runtime.UnmarshalError", Status: 200, Function: true, Class: permanent, Note: "the request cannot be read as the handler's event", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Runtime.ExitError", Message: "exit status", Status: 200, Function: true, Class: permanent, Note: "the runtime's process exited by itself (its code's exit): it does again", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Runtime.ExitError", Status: 200, Function: true, Class: inPlace, Note: "killed by a signal (out of memory, the sandbox stopped): a transient error of the attempt", Source: srcLambdaExec},
	{Service: "lambda", Operations: invoke, Code: "Sandbox.Timedout", Status: 200, Function: true, Class: inPlace, Note: "the function timed out: a transient error of the attempt", Source: srcLambdaTrouble},

	// EventBridge.
	{Service: "events", Code: "ThrottlingException", Status: 400, Class: backoff, Source: srcEventsCommon},
	{Service: "events", Code: "InternalException", Alias: "InternalFailure", Status: 500, Class: inPlace, Source: srcEvents},
	{Service: "events", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "events", Code: "AccessDeniedException", Status: 400, Class: permanent, Note: noteGrant, Source: srcEventsCommon},
	{Service: "events", Code: "ValidationException", Status: 400, Class: permanent, Note: "an entry over 256 KiB: " + noteBulkrunBug, Source: srcEventsCommon},
	{Service: "events", Code: "ExpiredTokenException", Status: 400, Class: pause, Note: noteExpired, Source: srcEventsCommon},

	// Step Functions: the answer to a batch's task token (internal/event
	// Tasks); finalize's tick sends a run's answer again until it is taken.
	// Heartbeats (SendTaskHeartbeat) go from finalize's tick while the
	// first run goes; a failed one is logged and sent again next tick.
	{Service: "states", Code: "ThrottlingException", Status: 400, Class: backoff, Source: srcStatesCommon},
	{Service: "states", Code: "ServiceUnavailable", Status: 503, Class: inPlace, Source: srcStatesCommon},
	{Service: "states", Code: "InternalFailure", Status: 500, Class: inPlace, Source: srcStatesCommon},
	{Service: "states", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "states", Operations: []string{"SendTaskHeartbeat"}, Code: "TaskTimedOut", Status: 400, Class: permanent, Note: "the task's HeartbeatSeconds or TimeoutSeconds passed, or the token was answered: ledger.ErrTaskGone, marked on the batch (task_gone), logged once; heartbeats stop, the run goes on", Source: srcStatesBeat},
	{Service: "states", Operations: []string{"SendTaskHeartbeat"}, Code: "TaskDoesNotExist", Status: 400, Class: permanent, Note: "the token's task is gone: ledger.ErrTaskGone, marked on the batch, logged once; heartbeats stop, the run goes on", Source: srcStatesBeat},
	{Service: "states", Operations: []string{"SendTaskHeartbeat"}, Code: "InvalidToken", Status: 400, Class: permanent, Note: "not a token Step Functions issued: ledger.ErrTaskGone, marked on the batch, logged once; heartbeats stop, the run goes on", Source: srcStatesBeat},
	{Service: "states", Operations: answers, Code: "TaskTimedOut", Status: 400, Class: permanent, Note: "the token was answered already, or its task timed out: ledger.ErrTaskGone, logged, the run's answer done", Source: srcStatesSuccess},
	{Service: "states", Operations: answers, Code: "TaskDoesNotExist", Status: 400, Class: permanent, Note: "the token's task is gone: ledger.ErrTaskGone, logged, the run's answer done", Source: srcStatesSuccess},
	{Service: "states", Operations: answers, Code: "InvalidToken", Status: 400, Class: permanent, Note: "not a token Step Functions issued: ledger.ErrTaskGone, logged, the run's answer done", Source: srcStatesSuccess},
	{Service: "states", Operations: []string{"SendTaskSuccess"}, Code: "InvalidOutput", Status: 400, Class: permanent, Note: noteBulkrunBug, Source: srcStatesSuccess},
	{Service: "states", Code: "AccessDeniedException", Status: 400, Class: permanent, Note: "the state machine is not among the stack's TaskStateMachines: " + noteGrant, Source: srcStatesCommon},
	{Service: "states", Code: "ExpiredTokenException", Status: 400, Class: pause, Note: noteExpired, Source: srcStatesCommon},

	// SSM Parameter Store (secret references).
	{Service: "ssm", Code: "ThrottlingException", Status: 400, Class: backoff, Note: "the item waits without an attempt (ledger.Throttled)", Source: srcSSMCommon},
	{Service: "ssm", Code: "InternalServerError", Status: 500, Class: inPlace, Source: srcSSM},
	{Service: "ssm", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "ssm", Code: "ParameterNotFound", Status: 400, Class: permanent, Note: "the item fails: secret reference not resolved", Source: srcSSM},
	{Service: "ssm", Code: "ParameterVersionNotFound", Status: 400, Class: permanent, Note: "the item fails: secret reference not resolved", Source: srcSSM},
	{Service: "ssm", Code: "InvalidKeyId", Status: 400, Class: permanent, Note: "the item fails: secret reference not resolved", Source: srcSSM},
	{Service: "ssm", Code: "AccessDeniedException", Status: 400, Class: permanent, Note: noteGrant, Source: srcSSMCommon},
	{Service: "ssm", Code: "ExpiredTokenException", Status: 400, Class: pause, Note: noteExpired, Source: srcSSMCommon},

	// Secrets Manager (secret references).
	{Service: "secretsmanager", Code: "ThrottlingException", Status: 400, Class: backoff, Note: "the item waits without an attempt (ledger.Throttled)", Source: srcSecretsCommon},
	{Service: "secretsmanager", Code: "InternalServiceError", Status: 500, Class: inPlace, Source: srcSecrets},
	{Service: "secretsmanager", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "secretsmanager", Code: "DecryptionFailure", Status: 400, Class: pause, Note: "the secret's KMS key cannot decrypt it: " + noteKMS, Source: srcSecrets},
	{Service: "secretsmanager", Code: "ResourceNotFoundException", Status: 400, Class: permanent, Note: "the item fails: secret reference not resolved", Source: srcSecrets},
	{Service: "secretsmanager", Code: "InvalidRequestException", Status: 400, Class: permanent, Note: "the item fails: secret reference not resolved (a secret scheduled for deletion)", Source: srcSecrets},
	{Service: "secretsmanager", Code: "InvalidParameterException", Status: 400, Class: permanent, Note: "the item fails: secret reference not resolved", Source: srcSecrets},
	{Service: "secretsmanager", Code: "AccessDeniedException", Status: 400, Class: permanent, Note: noteGrant, Source: srcSecretsCommon},
	{Service: "secretsmanager", Code: "ExpiredTokenException", Status: 400, Class: pause, Note: noteExpired, Source: srcSecretsCommon},

	// The CLI's own calls: CloudFormation (the stack's outputs and
	// template), CloudWatch, API Gateway, SNS and KMS (bulkrun doctor and
	// its preflight); the setup function's CloudFormation, API Gateway and
	// DynamoDB calls answer a custom resource and fail it with the error.
	{Service: "cloudformation", Code: "Throttling", Status: 400, Class: backoff, Note: "the CLI's SDK retries, then says so", Source: srcCFN},
	{Service: "cloudformation", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "cloudformation", Code: "ValidationError", Status: 400, Class: permanent, Note: "no such stack: the CLI names it and --stack", Source: srcCFN},
	{Service: "cloudformation", Code: "ExpiredToken", Status: 403, Class: pause, Note: noteExpired + ": the CLI says to renew them", Source: srcCFN},
	{Service: "monitoring", Code: "Throttling", Status: 400, Class: backoff, Note: "doctor reports the check it could not make", Source: srcCloudWatch},
	{Service: "monitoring", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "monitoring", Code: "ExpiredToken", Status: 403, Class: pause, Note: noteExpired + ": the CLI says to renew them", Source: srcCloudWatch},
	{Service: "apigateway", Code: "TooManyRequestsException", Status: 429, Class: backoff, Note: "doctor reports the check it could not make", Source: srcAPIGateway},
	{Service: "apigateway", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "apigateway", Code: "ExpiredTokenException", Status: 403, Class: pause, Note: noteExpired + ": the CLI says to renew them", Source: srcAPIGateway},
	{Service: "sns", Code: "Throttling", Status: 400, Class: backoff, Note: "doctor reports the check it could not make", Source: srcSNS},
	{Service: "sns", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "kms", Code: "ThrottlingException", Status: 400, Class: backoff, Note: "doctor reports the check it could not make", Source: srcKMS},
	{Service: "kms", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},

	// bulkrun's REST API behind API Gateway (execute-api), called by the
	// Go client and the CLI through the SDK's standard retryer
	// (client.NewRetryer); TestAPIErrorsAsTheTableSays (shared/client)
	// holds the client to these rows.
	{Service: "execute-api", Code: "TooManyRequestsException", Status: 429, Class: backoff, Note: "the stage's throttle (APIRateLimit, APIBurstLimit) or the account's: sent again after a backoff, up to 6 tries at most 20 s apart; items --all asks the same page again and goes on", Source: srcAPIThrottle},
	{Service: "execute-api", Code: "InternalServerErrorException", Status: 502, Class: inPlace, Note: "the submit function failed or answered badly: sent again; a refusal after it says an earlier try may have done what was asked", Source: srcAPIResponses},
	{Service: "execute-api", Code: "ServiceUnavailableException", Status: 503, Class: inPlace, Source: srcAPIResponses},
	{Service: "execute-api", Status: 504, Class: inPlace, Note: "the integration timed out (29 s): sent again; the call may have taken effect", Source: srcAPIResponses},
	{Service: "execute-api", Status: 0, Class: inPlace, Note: noteNoAnswer, Source: srcSDKRetries},
	{Service: "execute-api", Code: "InvalidSignatureException", Message: "Signature expired", Status: 403, Class: inPlace, Note: "signed more than 5 minutes before the gateway's clock: signed again once at the clock the answer's Date gives (the client keeps the offset); still refused, client.ClockError says to fix the machine's clock", Source: srcSkew},
	{Service: "execute-api", Code: "InvalidSignatureException", Message: "Signature not yet current", Status: 403, Class: inPlace, Note: "signed more than 5 minutes after the gateway's clock: as \"Signature expired\"", Source: srcSkew},
	{Service: "execute-api", Code: "ExpiredTokenException", Status: 403, Class: pause, Note: noteExpired, Source: srcAPIResponses},
	{Service: "execute-api", Code: "AccessDeniedException", Status: 403, Class: permanent, Note: "the caller may not call the API (execute-api:Invoke on its stage)", Source: srcAPIResponses},
	{Service: "execute-api", Code: "BadRequestException", Status: 413, Class: permanent, Note: "a body over 10 MB, or a Lambda event over 6 MB: the client uploads large inline items instead", Source: srcAPIQuotas},
}
