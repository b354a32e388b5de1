package bulkrun

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsssm"
	"github.com/aws/constructs-go/constructs/v10"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
)

// Deployment targets, chosen with the CDK context key "target".
const (
	// TargetAWS is a real AWS account: arm64 functions, stateful resources
	// retained on stack deletion, point-in-time recovery, SSL-only bucket.
	TargetAWS = "aws"
	// TargetEmulator is the local emulator (MiniStack): functions built for
	// the host's architecture, every resource destroyed with the stack.
	TargetEmulator = "emulator"
)

// Function names: the construct ids of the four functions and the folder
// names under RunnerProps.FunctionsDir that hold their bootstrap binaries
// (and FunctionSetup's, setup.go).
const (
	FunctionSubmit   = "submit"
	FunctionItem     = "item"
	FunctionFinalize = "finalize"
	FunctionSweep    = "sweep"
)

// Stack defaults that config does not own because only the stack uses them.
const (
	// DefaultRetentionDays is RunnerProps.RetentionDays when zero; it equals
	// config.DefaultRetention in days.
	DefaultRetentionDays = int(config.DefaultRetention / (24 * time.Hour))
	// DefaultFinalizeTickSchedule is RunnerProps.FinalizeTickSchedule when empty.
	DefaultFinalizeTickSchedule = "rate(5 minutes)"
	// DefaultUploadRepeatDays is RunnerProps.UploadRepeatDays when zero.
	DefaultUploadRepeatDays = int(config.DefaultUploadRepeat / (24 * time.Hour))
	// SweepSchedule is when the retention sweep runs.
	SweepSchedule = "rate(1 hour)"
	// DefaultFunctionsDir is RunnerProps.FunctionsDir when empty, relative to
	// infra/ (where the cdk commands run).
	DefaultFunctionsDir = "../build/functions"
	// DefaultLogLevel is the EnvLogLevel every function gets.
	DefaultLogLevel = "info"
	// VisibilityFactor is the items queue's visibility timeout as a multiple
	// of the item function's timeout: AWS recommends at least 6× for SQS
	// event sources, so that a message is not redelivered while retries of
	// a throttled invocation may still hold it.
	VisibilityFactor = 6
	// lambdaMaxTimeout is Lambda's limit on a function's timeout.
	lambdaMaxTimeout = 15 * time.Minute
	// sqsMaxReceiveCount is SQS's limit on a redrive policy's maxReceiveCount.
	sqsMaxReceiveCount = 1000
	// Queue retentions. SQS counts a dead letter's age from its first
	// send, not from its move to the dead-letter queue, so each
	// dead-letter queue keeps messages longer than its source ("Using
	// dead-letter queues in Amazon SQS", Amazon SQS developer guide): the
	// items queue 7 days, its dead-letter queue 10, the parking queue (the
	// dead-letter queue's) SQS's maximum, 14. The failure queues (failed
	// starts and invocations, schedule dead letters) keep 14 days.
	itemsRetention      = 7 * 24 * time.Hour
	deadLetterRetention = 10 * 24 * time.Hour
	queueRetention      = 14 * 24 * time.Hour
)

// DefaultPipelines returns RunnerProps.Pipelines when empty: the built-in
// pipelines and custom (RunnerProps.CustomPipelines), in byte order.
func DefaultPipelines(custom []string) []string {
	names := append(registered.Names(), custom...)
	slices.Sort(names)
	return names
}

// Schedule declares a batch started on a schedule. Each tick sends submit
// {"bulkrun_schedule": Name, "time": <the tick's time>, "request": Request};
// the batch id is Name + "-" + the time (handler.ScheduleBatchID), so a
// duplicate delivery of one tick is the same batch.
type Schedule struct {
	// Name is 1–100 bytes of [A-Za-z0-9_-] (it prefixes the batch ids).
	Name string `json:"name"`
	// Expression is an EventBridge schedule expression, "rate(...)" or
	// "cron(...)", checked at synth by the rules EventBridge applies
	// (CheckScheduleExpression). Cron runs in UTC: cron(0 2 * * ? *) is
	// 02:00 UTC every day.
	Expression string `json:"expression"`
	// Request is the batch to start (a POST /batches body without batch_id),
	// typically with an S3 object or prefix source.
	Request json.RawMessage `json:"request"`
}

// RunnerProps configures a Runner: every setting its functions read.
// Zero values take the defaults noted on each field; NewRunner and
// Validate reject the rest with a *PropError (the field) or a
// *config.VarError (the variable the functions would refuse).
type RunnerProps struct {
	// Target is TargetAWS (default when empty) or TargetEmulator.
	Target string
	// FunctionsDir holds one folder per function (submit, item, finalize,
	// sweep), each with a `bootstrap` binary for provided.al2023. Default
	// DefaultFunctionsDir ("../build/functions", relative to infra/).
	// With PipelineCode, its submit/ and item/ are not used.
	FunctionsDir string
	// PipelineCode is a folder holding one `bootstrap` binary (Linux, for
	// provided.al2023 on the target's architecture, CGO_ENABLED=0) built
	// from a team's own Go module whose main calls function.Start
	// (package shared/function) with the declarations of its Go pipelines.
	// The stack deploys it as both the submit and the item function, in
	// place of FunctionsDir's submit/ and item/ (config.EnvFunction tells
	// it which it is), so submit checks those pipelines' names and options
	// and the item function runs them. Default "": bulkrun's own binaries,
	// which run the built-in pipelines only. Requires CustomPipelines.
	PipelineCode string
	// CodeBucket, when set, is the S3 bucket holding the functions' code
	// as zips, each with its `bootstrap` at the root: the function name's
	// is the object {CodeKeyPrefix}{name}.zip (submit.zip, item.zip,
	// finalize.zip, sweep.zip, setup.zip), in place of FunctionsDir and PipelineCode,
	// which are then not read. Either may be a token, such as a
	// CloudFormation parameter's value: the app's template (make
	// template, infra/README.md "Without CDK") makes both parameters.
	// The bucket must be in the stack's Region (Lambda's rule for
	// S3Bucket). Default "": the folders, as CDK assets.
	CodeBucket string
	// CodeKeyPrefix is prepended to each zip's name in CodeBucket
	// ("bulkrun/1.2.0/" gives bulkrun/1.2.0/submit.zip). Default "".
	CodeKeyPrefix string
	// CustomPipelines are the names of the pipelines PipelineCode's binary
	// declares: registered.Declared of its declarations (one list, when
	// the CDK app is in the same module), or what `bootstrap pipelines`
	// prints (function.ListArg). Each is a valid pipeline name
	// (pipeline.ValidName), not a built-in, listed once. They join the
	// built-ins in DefaultPipelines, and Pipelines and DefaultPipeline may
	// name them. The binary refuses to start when the stack names a
	// pipeline it does not declare (registered.CheckListed). Default none;
	// set only with PipelineCode.
	CustomPipelines []string
	// ItemTimeout is the item function's timeout, whole seconds from 1 s to
	// 15 min. Default config.DefaultItemTimeout (5 min). The reservation
	// lease is ItemTimeout + config.LeaseMargin and the queues' visibility
	// timeout VisibilityFactor × ItemTimeout.
	ItemTimeout time.Duration
	// MaxAttempts is the default number of attempts per item, ≥ 1.
	// Default config.DefaultMaxAttempts (3).
	MaxAttempts int
	// RetryPolicy is the retry policy of a batch that sets none (see
	// api.RetryPolicy; its max attempts is MaxAttempts). Default
	// api.DefaultRetryPolicy: 5 minutes, doubling, at most 15, jitter
	// 0.5, so that the default 3 attempts span 15–22.5 minutes.
	RetryPolicy *api.RetryPolicy
	// ItemsPerMessage is the items per message, and per ledger row, of a
	// batch that sets none: 1–100, default config.DefaultItemsPerMessage
	// (10: it costs about an eighth of 1 per item; a batch may still ask
	// for 1; docs/adr/0015-ten-items-per-message-by-default.md,
	// "Measurements").
	ItemsPerMessage int
	// MaxReceiveCount is the items queue's redrive maxReceiveCount: receives
	// of one message before SQS moves it to the dead-letter queue. Must
	// exceed MaxAttempts, at most 1000. Default config.DefaultMaxReceiveCount (10).
	MaxReceiveCount int
	// RetentionDays is how long a finished batch is kept, in days, ≥ 1.
	// Default DefaultRetentionDays (30).
	RetentionDays int
	// RetentionMinutes, on the emulator target only, keeps a finished
	// batch this many minutes (1–1440) instead of RetentionDays, so that
	// `404 expired` and the sweep can be tried in minutes (the bucket's
	// lifecycle rules still count RetentionDays). Refused for Target
	// "aws": S3 lifecycle rules count whole days. Default 0 (unused).
	RetentionMinutes int
	// UploadRepeatDays is how long, in days, an upload's content is
	// remembered: the same items for the same pipeline and options uploaded
	// under another name within it start no batch (an error report says
	// which batch they started) unless the upload carries
	// x-amz-meta-rerun: true. Default DefaultUploadRepeatDays (7); -1
	// remembers nothing (every upload runs); at most 3650.
	UploadRepeatDays int
	// FinalizeTickSchedule is the EventBridge schedule expression of the
	// FinalizeTick rule, "rate(...)" or "cron(...)" (UTC), checked by
	// CheckScheduleExpression. Default DefaultFinalizeTickSchedule
	// ("rate(5 minutes)").
	FinalizeTickSchedule string
	// BucketName names the bucket. Default: generated by CloudFormation from
	// the stack's id, "bulkrun-{uuid of the stack id}": a new name for
	// every stack, so deploying again after a destroy (which keeps the
	// bucket on AWS) does not collide with the kept one, and no one can
	// create the bucket first (a predictable name can be taken). A fixed
	// name is an opt-in: it must be free in all of S3.
	BucketName string
	// SourceBuckets are other buckets that submit and item may read sources
	// from (s3:GetObject, and s3:ListBucket for submit). Default none.
	SourceBuckets []string
	// SourcePrefixes are prefixes of the stack's own bucket that a source
	// (and an item's {bucket, key}) may name besides the upload prefixes
	// config.IncomingPrefix and config.UploadsPrefix, each ending in "/"
	// (e.g. "exports/"); none may overlap config.BatchesPrefix or
	// config.UploadErrorsPrefix. With SourceBuckets (whole buckets) they
	// become config.EnvSources (source.SourcePolicy). Default none on
	// TargetAWS; DefaultEmulatorSourcePrefixes on TargetEmulator.
	SourcePrefixes []string
	// Pipelines narrows the pipeline names submit accepts to some of the
	// built-ins and CustomPipelines. Default DefaultPipelines: all of them.
	// Another name is refused at synth.
	Pipelines []string
	// Schedules are batches started on a schedule (EventBridge rules
	// targeting submit). Default none.
	Schedules []Schedule
	// DefaultPipeline is the pipeline of a batch started by an upload whose
	// metadata names none. Default "" (the upload must name one). Must be
	// one of Pipelines.
	DefaultPipeline string
	// WebhookAllow is the webhook pipeline's egress allow-list
	// (config.EnvWebhookAllow on submit and item): hosts, *.domains, IP
	// addresses and CIDRs it may reach although they are loopback,
	// link-local, private or unique-local (syntax and rule in package
	// egress). Public addresses are always reachable. Default: none on
	// TargetAWS; DefaultEmulatorWebhookAllow on TargetEmulator, where
	// receivers run on the host (see EmptyWebhookAllow).
	WebhookAllow []string
	// EmptyWebhookAllow, on TargetEmulator, leaves the allow-list empty
	// instead of DefaultEmulatorWebhookAllow.
	EmptyWebhookAllow bool
	// SecretPrefixes are the SSM parameter and Secrets Manager secret ARNs
	// (or ARN prefixes ending in "*") that batches may reference in their
	// headers and options ("secret:arn:…", secretref.Parse): submit refuses
	// any other reference, and the item function's role gets
	// ssm:GetParameter or secretsmanager:GetSecretValue on exactly these
	// (one statement per service). A SecureString or secret encrypted
	// with a customer managed KMS key also needs that key in KMSKeys.
	// References are read by their full ARN, in the ARN's Region
	// (internal/secret). Default: none on TargetAWS;
	// DefaultEmulatorSecretPrefixes on TargetEmulator.
	SecretPrefixes []string
	// MaxManifestBytes is the largest manifest (normalized JSONL, about the
	// size of a JSONL source) the submit function is meant to take, in
	// bytes. It sizes the function's ephemeral storage (/tmp), where
	// duplicate-key detection spills: SubmitEphemeralMiB. Default
	// DefaultMaxManifestBytes (what the 512 MiB minimum holds); at most
	// MaxMaxManifestBytes (Lambda's 10,240 MiB limit). A larger source is
	// refused with 507 insufficient_storage, naming the limit.
	MaxManifestBytes int64

	// The table's throughput (storage.go).

	// WarmWritesPerSecond and WarmReadsPerSecond pre-warm the table: the
	// write and read units per second it serves at once from its creation,
	// before its traffic has grown them (the table's WarmThroughput;
	// "Understanding DynamoDB warm throughput", Amazon DynamoDB developer
	// guide, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput.html).
	// Default 0: DynamoDB's for a new on-demand table, DefaultWarmWrites
	// (4,000) and DefaultWarmReads (12,000), which the stack's default
	// flow fits (DefaultItemsPerMessage, TableWriteUnitsPerItem); a stack
	// whose batches run at one item per message needs about 21,000 writes
	// per second (TableWritesPerSecond). Set, each at least its default;
	// writes at most MaxWritesPerSecond. Raising it is a one-time charge
	// ("Amazon DynamoDB pricing").
	WarmWritesPerSecond int
	WarmReadsPerSecond  int
	// MaxWritesPerSecond is the table's write ceiling: the write request
	// units per second it serves at most
	// (OnDemandThroughput.MaxWriteRequestUnits, "DynamoDB maximum
	// throughput for on-demand tables", Amazon DynamoDB developer guide):
	// writes above it are throttled, which bulkrun takes as DynamoDB
	// unavailable (the items wait, using no attempt), so a ceiling below
	// the stack's flow slows its batches and bounds what they cost per
	// second, never fails an item. Default 0: none, the account's
	// per-table quota (40,000 by default). At least 1.
	MaxWritesPerSecond int

	// Operations (observability.go, hardening.go).

	// AlarmTopicARN is the SNS topic every alarm notifies, on alarm and on
	// recovery: its ARN, or topic.TopicArn() of a topic in the same app.
	// Default "": the alarms exist, without actions.
	AlarmTopicARN string
	// Tracing turns on X-Ray active tracing for the functions and the API
	// stage. Default off.
	Tracing bool
	// TracesExporter is the submit and item functions' OpenTelemetry
	// traces exporter, config.EnvTracesExporter (OTEL_TRACES_EXPORTER):
	// "none" (default: no span recorded; the batch's W3C trace context
	// still reaches the pipelines) or "otlp" (OTLP/HTTP to
	// TracesEndpoint). Independent of Tracing (X-Ray active tracing).
	// docs/operations.md, "Traces".
	TracesExporter string
	// TracesEndpoint is the OTLP/HTTP endpoint of TracesExporter "otlp",
	// OTEL_EXPORTER_OTLP_ENDPOINT: a URL. Default "": the SDK's,
	// http://localhost:4318, where the collector of the ADOT Lambda layer
	// listens (the layer is added to the functions by the app).
	TracesEndpoint string
	// QueueAgeAlarm is the age of the oldest message in the items queue or
	// its dead-letter queue that raises an alarm: whole minutes from 1 min
	// to 14 days. Default DefaultQueueAgeAlarm (30 min).
	QueueAgeAlarm time.Duration
	// StallAlarm is how long a running batch may end no item before the
	// run-stalled alarm fires (finalize's tick measures each running run,
	// metric RunStalledSeconds): whole minutes from 10 min to 12 h.
	// Default DefaultStallAlarm (30 min, longer than the default retry
	// policy's longest wait, 22.5 min).
	StallAlarm time.Duration
	// NoBatchEventAlarms keeps the stack from routing the batch events
	// an on-call engineer must hear of (api.AlarmDetailTypes(): "Batch
	// Threshold Exceeded", "Batch Refused", "Batch Paused", "Batch
	// Halted") to AlarmTopicARN. Default off:
	// with AlarmTopicARN set, the EventBridge rule BatchEventsAlarmRule
	// sends each such event to the topic.
	NoBatchEventAlarms bool
	// BucketVersioning turns on the bucket's versioning; noncurrent
	// versions then expire after RetentionDays. Default off.
	BucketVersioning bool
	// ApiGatewayAccount makes the stack set its own role as the Region's
	// account-wide API Gateway CloudWatch role (AWS::ApiGateway::Account's
	// CloudWatchRoleArn) even when the account has another. The stage's
	// execution and access logs need that role ("Set up CloudWatch
	// logging for REST APIs in API Gateway",
	// https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-logging.html);
	// it is one setting for every API of the account and Region. Default
	// off: the stack sets its role only where none is set, and never
	// unsets it (the ApiGatewayAccountRole custom resource;
	// docs/adr/0026-the-stack-ensures-the-api-gateway-account-role.md);
	// `bulkrun doctor` says which role the account has.
	ApiGatewayAccount bool
	// LogLevel is the functions' log level: "debug", "info" (default),
	// "warn" or "error": config.EnvLogLevel, at which the functions'
	// logger drops its own lower lines. The functions log in Lambda's JSON
	// format, and their LoggingConfig.ApplicationLogLevel is DEBUG at
	// debug and INFO otherwise, never above: Lambda files a line without
	// a level — each embedded-metric-format metric line — as INFO, so a
	// higher level would drop every custom metric and leave the alarms on
	// them blind ("Log-level filtering", AWS Lambda developer guide).
	LogLevel string
	// APIRateLimit is the API stage's steady request rate, in requests per
	// second, > 0. Default DefaultAPIRateLimit (50).
	APIRateLimit float64
	// APIBurstLimit is the API stage's burst, in requests, ≥ 1. Default
	// DefaultAPIBurstLimit (100).
	APIBurstLimit int
	// ItemMemoryMiB is the item function's memory in MiB, 128–10,240
	// (Lambda quotas, "Function configuration, deployment, and execution",
	// https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html);
	// the thumbnail pipeline decodes within half of it. Default
	// DefaultItemMemoryMiB (512).
	ItemMemoryMiB int
	// ReservedConcurrency reserves concurrency for functions by name
	// (FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep): at
	// most that many instances run, and that many are kept from the
	// account's other functions ("Configuring reserved concurrency",
	// https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html).
	// Reserving for submit and finalize keeps a large batch's items from
	// throttling them. Each value ≥ 1; item's must be at least
	// EventSources × ItemsMaxConcurrency, what its two event sources may run
	// (RuleReservedCoversEventSources); together they must leave
	// MinUnreservedConcurrency of AccountConcurrency unreserved
	// (RuleUnreservedAtLeast100). Default none.
	ReservedConcurrency map[string]int
	// AccountConcurrency is the account's Lambda concurrency quota in the
	// stack's Region (GetAccountSettings' AccountLimit.ConcurrentExecutions),
	// which ReservedConcurrency and the item function's event sources are
	// checked against at synth (RuleUnreservedAtLeast100,
	// RuleEventSourcesFitUnreserved). Default DefaultAccountConcurrency
	// (1,000, Lambda's default quota); `bulkrun doctor` compares it with
	// the real one.
	AccountConcurrency int
	// ItemsMaxConcurrency is the maximum concurrency of the item function's
	// SQS event sources (ScalingConfig.MaximumConcurrency, on the items
	// queue and on the dead-letter queue each): how many item invocations
	// the queue may drive at once, 2–1000 ("Configuring maximum concurrency
	// for Amazon SQS event sources",
	// https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html).
	// Default DefaultItemsMaxConcurrency (100). In provisioned mode
	// (ItemsMaximumPollers) it bounds the dead-letter queue's event
	// source only.
	ItemsMaxConcurrency int
	// ItemsMinimumPollers and ItemsMaximumPollers put the items queue's
	// event source in provisioned mode (ProvisionedPollerConfig): the
	// event pollers kept ready from the first message, and the most it
	// scales to, 2 ≤ minimum ≤ maximum ≤ 100 (Lambda allows a minimum up
	// to 200 and a maximum up to 2,000: "Lambda parameters for Amazon SQS
	// event source mappings"; bulkrun's partitions are sized for 1,000
	// invocations, config.MaxItemsPollers). Each poller drives up to
	// config.PollerInvocations (10) invocations at once, so the items
	// queue may run up to 10 × ItemsMaximumPollers (1,000 at 100), and
	// the source scales by up to 1,000 concurrency a minute, against 300
	// a minute from 5 in the standard mode ("Configuring scaling behavior
	// for SQS event source mappings",
	// https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html):
	// a large batch's items start at full speed (infra/README.md,
	// "Provisioned pollers"; docs/design/cost.md, "Time to result"). The
	// two modes are exclusive, so the items source then has no
	// MaximumConcurrency. Billed whether used or not: each poller is one
	// Event Poller Unit, $0.00925 an hour in us-east-1, a minute at
	// least (AWS Lambda pricing), so 2 ready pollers cost ≈ $13.50 a
	// month and 100 ≈ $675. Both 0 (the default): the standard mode.
	ItemsMinimumPollers, ItemsMaximumPollers int
	// MemoryMiB sets the memory of the other functions by name
	// (FunctionSubmit, FunctionFinalize, FunctionSweep), in MiB, 128–10,240
	// (Lambda quotas, as ItemMemoryMiB). Defaults: DefaultMemoryMiB. The
	// item function's memory is ItemMemoryMiB.
	MemoryMiB map[string]int
	// Timeouts sets the timeout of the other functions by name
	// (FunctionSubmit, FunctionFinalize, FunctionSweep): whole seconds from
	// 1 s to 15 min (Lambda's limit). Defaults: config.DefaultSubmitTimeout,
	// DefaultFinalizeTimeout, DefaultSweepTimeout (15 min each). A submit
	// reached through the API is cut at API Gateway's 29 s integration
	// timeout whatever this says; background source reads and finalize's
	// report of a large run use the whole timeout. The item function's
	// timeout is ItemTimeout (the lease and the visibility follow it).
	Timeouts map[string]time.Duration
	// LambdaFunctions is the allow-list of the "lambda" pipeline: the
	// Lambda functions a batch may name in its pipeline options
	// ({"function": …}), each a function name ("score", "score:live") or
	// a function ARN (config.CheckLambdaFunction); a CDK token, such as
	// fn.FunctionArn() of a function in the same app, is taken as an ARN.
	// The item function's role gets lambda:InvokeFunction on exactly these
	// (a name is this stack's account and region), one statement per
	// function. Default: none on TargetAWS (the pipeline refuses every
	// batch); DefaultEmulatorLambdaFunctions on TargetEmulator.
	LambdaFunctions []string
	// TaskStateMachines are the Step Functions state machines whose
	// `.waitForTaskToken` tasks may hand a batch a task token
	// (api.SubmitRequest.TaskToken): state machine names of this stack's
	// account and region ("orders", "orders-*": IAM's wildcards) or ARNs.
	// The finalize and submit functions' roles get states:SendTaskSuccess
	// and states:SendTaskFailure, finalize's also states:SendTaskHeartbeat
	// (a batch's task_heartbeat_seconds), on exactly these, one statement
	// each
	// (SendTask* take the state machine as their resource: Service
	// Authorization Reference, "Actions defined by AWS Step Functions").
	// A name, not the state machine's token, breaks the cycle of a state
	// machine that calls this stack's API in the same stack. Default:
	// none on TargetAWS (a token given is answered with AccessDenied,
	// logged; the batch runs all the same);
	// DefaultEmulatorTaskStateMachines on TargetEmulator.
	TaskStateMachines []string
	// EffectTables are the DynamoDB tables on which pipelines may stage
	// writes committed with their item's outcome (package
	// shared/pipeline/effects; config.EnvEffectTables on the item
	// function): table names (config.CheckEffectTable), or a token such as
	// table.TableName() of a table in the same app; never bulkrun's own.
	// The item function's role gets dynamodb:PutItem, UpdateItem,
	// DeleteItem and ConditionCheckItem on exactly these tables (what a
	// TransactWriteItems of those actions needs), one statement per table.
	// Default: none on TargetAWS (staging is refused);
	// DefaultEmulatorEffectTables on TargetEmulator.
	EffectTables []string
	// KMSKeys are the customer managed KMS keys (key ARNs, or tokens such
	// as key.KeyArn()) that encrypt what the functions read outside the
	// stack: sources in SourceBuckets encrypted with SSE-KMS, and the SSM
	// SecureString parameters and Secrets Manager secrets of
	// SecretPrefixes. Submit's role gets kms:Decrypt on them through S3,
	// the item function's through S3, SSM and Secrets Manager: each
	// statement has the condition kms:ViaService, the services'
	// endpoints in the key's Region ("kms:ViaService", AWS KMS developer
	// guide, https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html#conditions-kms-via-service),
	// so a role can use a key only as those services do for it, never
	// calling KMS itself. A key of another account must also let these
	// roles use it in its key policy. Keys AWS manages (aws/s3, aws/ssm,
	// aws/secretsmanager) need nothing. Default: none on TargetAWS;
	// DefaultEmulatorKMSKeys on TargetEmulator. Each a key ARN
	// (arn:…:kms:REGION:ACCOUNT:key/ID), listed once.
	KMSKeys []string
}

// DefaultMemoryMiB is each function's memory when RunnerProps.MemoryMiB
// (or ItemMemoryMiB for item) does not set it, in MiB.
var DefaultMemoryMiB = map[string]int{FunctionSubmit: SubmitMemoryMiB, FunctionItem: DefaultItemMemoryMiB, FunctionFinalize: 1024, FunctionSweep: 512}

// defaultTimeouts are the functions' timeouts when RunnerProps.Timeouts
// (or ItemTimeout for item) does not set them.
var defaultTimeouts = map[string]time.Duration{FunctionSubmit: config.DefaultSubmitTimeout, FunctionItem: config.DefaultItemTimeout,
	FunctionFinalize: config.DefaultFinalizeTimeout, FunctionSweep: config.DefaultSweepTimeout}

// Concurrency and memory defaults (see RunnerProps).
const (
	DefaultItemMemoryMiB       = 512
	DefaultItemsMaxConcurrency = 100
	// SubmitMemoryMiB is the submit function's default memory
	// (DefaultMemoryMiB; RunnerProps.MemoryMiB may change it). Lambda
	// gives CPU in proportion to memory (1 vCPU at 1,769 MB: "Configuring
	// Lambda function memory", AWS Lambda developer guide,
	// https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html):
	// reading a source of 10^7 items of 1 KB takes ≈ 160 CPU-seconds
	// (docs/design/measured.md, "Measured"), ≈ 276 s at 1,024 MB, under a third of
	// the 15-minute limit; at 512 MB it would take ≈ 550 s.
	SubmitMemoryMiB = 1024
)

// DefaultEmulatorSourcePrefixes are the SourcePrefixes of an emulator
// stack that declares none: where the integration suite puts its sources.
var DefaultEmulatorSourcePrefixes = []string{"it-sources/"}

// Ephemeral storage of the submit function. Duplicate-key detection writes
// at most one run byte per manifest byte (a run entry is the key, front
// coded, and its line; a manifest line is the key, the input and JSON
// punctuation), and an intermediate merge briefly holds its inputs and its
// output: twice the manifest, plus a margin for the runtime. Lambda allows
// 512–10,240 MiB (Lambda quotas, "Function configuration, deployment, and
// execution": https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
const (
	ephemeralMinMiB         = 512
	ephemeralMaxMiB         = 10240
	ephemeralMarginMiB      = 64
	DefaultMaxManifestBytes = (ephemeralMinMiB - ephemeralMarginMiB) / 2 << 20 // 224 MiB
	MaxMaxManifestBytes     = (ephemeralMaxMiB - ephemeralMarginMiB) / 2 << 20 // 5,088 MiB
)

// SubmitEphemeralMiB is the submit function's ephemeral storage, in MiB,
// for manifests of up to maxManifestBytes: 2 × the manifest + 64 MiB,
// rounded up, at least 512. It does not check the 10,240 MiB ceiling.
func SubmitEphemeralMiB(maxManifestBytes int64) int {
	mib := int((2*maxManifestBytes+(1<<20)-1)>>20) + ephemeralMarginMiB
	return max(mib, ephemeralMinMiB)
}

// DefaultEmulatorSecretPrefixes is RunnerProps.SecretPrefixes on
// TargetEmulator when empty: parameters and secrets under "bulkrun/" in the
// emulator's account and region, which the integration tests use.
var DefaultEmulatorSecretPrefixes = []string{
	"arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/*",
	"arn:aws:secretsmanager:us-east-1:000000000000:secret:bulkrun/*",
}

// DefaultEmulatorLambdaFunctions is RunnerProps.LambdaFunctions on
// TargetEmulator when empty: the example Python function
// (examples/lambda-python) that the integration suite deploys onto the
// emulator and runs batches of the lambda pipeline through.
var DefaultEmulatorLambdaFunctions = []string{config.ExampleLambdaFunction}

// DefaultEmulatorTaskStateMachines is RunnerProps.TaskStateMachines on
// TargetEmulator when empty: the example state machine
// (examples/stepfunctions) that the integration suite deploys onto the
// emulator and runs batches through.
var DefaultEmulatorTaskStateMachines = []string{config.ExampleStateMachine}

// DefaultEmulatorEffectTables is RunnerProps.EffectTables on
// TargetEmulator when empty: a table name the integration suite's staged
// effects stand in for. The IAM-checked lane evaluates the harness's
// staged writes against the statement the item function's role gets for
// it, with the test's own table in its place (integration/testbed/iamlane).
var DefaultEmulatorEffectTables = []string{"bulkrun-it-effects"}

// DefaultEmulatorKMSKeys is RunnerProps.KMSKeys on TargetEmulator when
// empty: a key ARN the integration suite's own key stands in for, as its
// harness's reads of SSE-KMS sources are checked against the deployed
// grant by the IAM-checked lane (integration/testbed/iamlane).
var DefaultEmulatorKMSKeys = []string{"arn:aws:kms:us-east-1:000000000000:key/bulkrun-integration-key"}

// DefaultEmulatorWebhookAllow is RunnerProps.WebhookAllow on TargetEmulator
// when empty: the loopback receivers the integration tests and local
// development run on the host. TargetAWS has no default: the webhook can
// reach no non-public address there unless WebhookAllow names it.
var DefaultEmulatorWebhookAllow = []string{"127.0.0.1", "::1", "localhost"}

// PropError names the RunnerProps field at fault.
type PropError struct {
	Field  string // the RunnerProps field, e.g. "MaxReceiveCount"
	Value  string // its value as given
	Reason string
}

func (e *PropError) Error() string {
	return fmt.Sprintf("bulkrun: RunnerProps.%s=%q: %s", e.Field, e.Value, e.Reason)
}

// Runner is bulkrun in a CDK app: the construct NewRunner defines, and the
// resources a user's own constructs may need (to grant an uploader
// s3:PutObject on incoming/, to alarm on a queue, to call the API).
// Its methods return the resources themselves; they are never nil.
type Runner interface {
	constructs.IConstruct
	// Bucket is the bucket of sources (incoming/, uploads/) and of what
	// batches own (batches/).
	Bucket() awss3.Bucket
	// Table is the DynamoDB table holding every bulkrun row.
	Table() awsdynamodb.Table
	// ItemsQueue is the items queue; DeadLetterQueue its dead-letter
	// queue (also consumed by the item function); ParkingQueue where dead
	// letters go that could not be recorded; SubmitFailuresQueue where
	// Lambda puts submit's failed asynchronous invocations.
	ItemsQueue() awssqs.Queue
	DeadLetterQueue() awssqs.Queue
	ParkingQueue() awssqs.Queue
	SubmitFailuresQueue() awssqs.Queue
	// API is the REST API (AWS_IAM on every method, stage config.DefaultAPIStage).
	API() awsapigateway.LambdaRestApi
	// Function returns the function of that name (FunctionSubmit,
	// FunctionItem, FunctionFinalize, FunctionSweep), nil for another name.
	Function(name string) awslambda.Function
}

// runner is NewRunner's Runner, and the resources its builders define:
// each define* method adds one group (storage.go, queues.go, functions.go,
// grants.go, triggers.go, api.go) and records what the later groups use.
type runner struct {
	constructs.Construct
	s settings
	// removal is the stateful resources' (bucket, table, queues, log
	// groups, their policies): on AWS RETAIN_ON_UPDATE_OR_DELETE
	// (DeletionPolicy RetainExceptOnCreate: kept by the stack's deletion
	// and by an update, deleted when the create that made them rolls
	// back, so a failed first deploy leaves nothing behind), DESTROY on
	// the emulator.
	removal awscdk.RemovalPolicy

	bucket                              awss3.Bucket
	bucketName                          *string // how functions and policies name the bucket (never a Ref: see defineStorage)
	table                               awsdynamodb.Table
	items, dlq, parking, submitFailures awssqs.Queue
	invokeFailures, scheduleDLQ         awssqs.Queue
	parkingAlarm, submitFailuresAlarm   awscloudwatch.Alarm
	invokeFailuresAlarm                 awscloudwatch.Alarm
	scheduleDLQAlarm                    awscloudwatch.Alarm
	api                                 awsapigateway.LambdaRestApi
	functions                           map[string]awslambda.Function
	setup                               awslambda.Function                // serves the custom resources (setup.go)
	accountRole                         awscdk.CustomResource             // the account's API Gateway role, which the stage waits for
	settingsParameters                  map[string]awsssm.StringParameter // by function: its allow-lists, when its environment has no room (defineSettingsParameters)
}

func (r *runner) Bucket() awss3.Bucket                    { return r.bucket }
func (r *runner) Table() awsdynamodb.Table                { return r.table }
func (r *runner) ItemsQueue() awssqs.Queue                { return r.items }
func (r *runner) DeadLetterQueue() awssqs.Queue           { return r.dlq }
func (r *runner) ParkingQueue() awssqs.Queue              { return r.parking }
func (r *runner) SubmitFailuresQueue() awssqs.Queue       { return r.submitFailures }
func (r *runner) API() awsapigateway.LambdaRestApi        { return r.api }
func (r *runner) Function(name string) awslambda.Function { return r.functions[name] }

// Validate fills the defaults of props (nil is all defaults) and checks
// them with the rules NewRunner applies: each bad field is a *PropError,
// and the resulting function environment goes through config.Load — what
// the functions run at start — so a setting they would refuse is a
// *config.VarError naming the variable. The errors are joined. It
// defines nothing; call it before NewRunner to report bad props without
// a panic.
func Validate(props *RunnerProps) error {
	_, err := derive(props)
	return err
}

// NewRunner defines bulkrun in scope, under the construct id: the
// bucket, the table, the items queue with its dead-letter and parking
// queues, the submit, item, finalize and sweep functions with
// least-privilege roles, their event sources, the schedules, the REST
// API, the alarms and dashboard, and one CfnOutput per config.Output*
// key (the CLI finds the stack's resources through them, so a stack
// holds at most one Runner). The construct id does not appear in the
// resources' logical ids when it is "Default" (CDK leaves that id out),
// which keeps the ids of a stack made before the construct existed.
//
// Bad props are refused before anything is defined: NewRunner panics
// with Validate's error, as a CDK construct throws at synth. Call
// Validate first to get the error as a value.
func NewRunner(scope constructs.Construct, id *string, props *RunnerProps) Runner {
	s, err := derive(props)
	if err != nil {
		panic(err)
	}
	if props == nil {
		props = &RunnerProps{}
	}
	r := &runner{Construct: constructs.NewConstruct(scope, id), s: s, removal: awscdk.RemovalPolicy_DESTROY}
	if s.target == TargetAWS {
		r.removal = awscdk.RemovalPolicy_RETAIN_ON_UPDATE_OR_DELETE
	}
	r.defineStorage()
	r.defineQueues()
	r.defineFunctions()
	r.defineFailedStarts() // before grant: the destination's grant leads submit's policy
	r.defineFailedInvocations()
	r.grant()
	r.defineEventSources()
	r.defineUploads()
	r.defineSchedules()
	r.defineAPI()
	r.defineSetup()
	// The stage's execution and access logs need the account's API
	// Gateway CloudWatch role: it waits for ApiGatewayAccountRole.
	r.api.DeploymentStage().Node().AddDependency(r.accountRole)
	ops := operated{bucket: r.bucket, table: r.table, items: r.items, dlq: r.dlq, scheduleDLQ: r.scheduleDLQ, api: r.api, functions: r.functions}
	harden(r.Construct, s, props, ops)
	observe(r.Construct, s, props, ops)
	// Last: the suppressions reach the children that exist when they are added.
	nagSuppressions(r.Construct, s, ops)
	lintSuppressions(r.Construct)
	r.defineOutputs()
	return r
}
