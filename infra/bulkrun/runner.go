package bulkrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdadestinations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
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

// Function names: the construct ids of the three functions and the folder
// names under RunnerProps.FunctionsDir that hold their bootstrap binaries.
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
	// queueRetention is how long the items queue and its dead-letter queue
	// keep a message: SQS's maximum, so that a long batch or a slow
	// dead-letter consumer loses nothing.
	queueRetention = 14 * 24 * time.Hour
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
	// ItemsPerMessage is the items per message, and per ledger row, of a
	// batch that sets none: 1–100, default 1 (docs/design.md, "Item
	// packing": 10 costs about a ninth per item; results then come in
	// manifest order, and a batch with max_concurrency still gets 1).
	ItemsPerMessage int
	// MaxReceiveCount is the items queue's redrive maxReceiveCount: receives
	// of one message before SQS moves it to the dead-letter queue. Must
	// exceed MaxAttempts, at most 1000. Default config.DefaultMaxReceiveCount (10).
	MaxReceiveCount int
	// RetentionDays is how long a finished batch is kept, in days, ≥ 1.
	// Default DefaultRetentionDays (30).
	RetentionDays int
	// FinalizeTickSchedule is the EventBridge schedule expression of the
	// FinalizeTick rule, "rate(...)" or "cron(...)" (UTC), checked by
	// CheckScheduleExpression. Default DefaultFinalizeTickSchedule
	// ("rate(5 minutes)").
	FinalizeTickSchedule string
	// BucketName names the bucket. Default "bulkrun-{account}-{region}",
	// resolved by CloudFormation; set it to run two stacks in one region.
	BucketName string
	// SourceBuckets are other buckets that submit and item may read sources
	// from (s3:GetObject, and s3:ListBucket for submit). Default none.
	SourceBuckets []string
	// SourcePrefixes are prefixes of the stack's own bucket that a source
	// (and an item's {bucket, key}) may name besides the upload prefixes
	// config.IncomingPrefix and config.UploadsPrefix, each ending in "/"
	// (e.g. "exports/"); none may overlap config.BatchesPrefix or
	// config.UploadErrorsPrefix. With SourceBuckets (whole buckets) they
	// become config.EnvSources (batch.SourcePolicy). Default none on
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
	// headers and options ("secret:arn:…", batch.SecretRef): submit refuses
	// any other reference, and the item function's role gets
	// ssm:GetParameter or secretsmanager:GetSecretValue on exactly these
	// (one statement per service). A SecureString encrypted with a
	// customer managed KMS key also needs kms:Decrypt on that key, which
	// the stack does not grant. Default: none on TargetAWS;
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

	// Operations (observability.go, hardening.go).

	// AlarmTopicARN is the SNS topic every alarm notifies, on alarm and on
	// recovery: its ARN, or topic.TopicArn() of a topic in the same app.
	// Default "": the alarms exist, without actions.
	AlarmTopicARN string
	// Tracing turns on X-Ray active tracing for the functions and the API
	// stage. Default off.
	Tracing bool
	// QueueAgeAlarm is the age of the oldest message in the items queue or
	// its dead-letter queue that raises an alarm: whole minutes from 1 min
	// to 14 days. Default DefaultQueueAgeAlarm (30 min).
	QueueAgeAlarm time.Duration
	// BucketVersioning turns on the bucket's versioning; noncurrent
	// versions then expire after RetentionDays. Default off.
	BucketVersioning bool
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
	// ItemsMaxConcurrency, or the event source is throttled. Default none.
	ReservedConcurrency map[string]int
	// ItemsMaxConcurrency is the maximum concurrency of the item function's
	// SQS event sources (ScalingConfig.MaximumConcurrency, on the items
	// queue and on the dead-letter queue each): how many item invocations
	// the queue may drive at once, 2–1000 ("Configuring maximum concurrency
	// for Amazon SQS event sources",
	// https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html).
	// Default DefaultItemsMaxConcurrency (100).
	ItemsMaxConcurrency int
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
	// EffectTables are the DynamoDB tables on which pipelines may stage
	// writes committed with their item's outcome (package
	// shared/pipeline/effects; config.EnvEffectTables on the item
	// function): table names (config.CheckEffectTable), or a token such as
	// table.TableName() of a table in the same app; never bulkrun's own.
	// The item function's role gets dynamodb:PutItem, UpdateItem,
	// DeleteItem and ConditionCheckItem on exactly these tables (what a
	// TransactWriteItems of those actions needs), one statement per table.
	// Default none: staging is refused.
	EffectTables []string
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
	// (docs/design.md, "Measured"), ≈ 276 s at 1,024 MB, under a third of
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
var DefaultEmulatorLambdaFunctions = []string{"bulkrun-example-python"}

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

// bucketNamePattern is the S3 rule for bucket names (general purpose buckets).
var bucketNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// settings are the values NewRunner derives from RunnerProps, defaults filled.
type settings struct {
	target          string
	functionsDir    string
	code            map[string]string // each function's code folder
	arch            awslambda.Architecture
	itemTimeout     time.Duration
	lease           time.Duration
	visibility      time.Duration
	maxAttempts     int
	itemsPerMessage int
	maxReceiveCount int
	retentionDays   int
	tick            string
	bucketName      string
	sourceBuckets   []string
	sourcePrefixes  []string
	pipelines       []string
	itemMemoryMiB   int
	reserved        map[string]int
	maxConcurrency  int
	webhookAllow    string // comma-separated, config.EnvWebhookAllow
	ephemeralMiB    int
	secretPrefixes  []string                 // config.EnvSecretPrefixes
	memoryMiB       map[string]int           // every function
	timeouts        map[string]time.Duration // every function
	lambdaFunctions []string                 // config.EnvLambdaFunctions, tokens included
	effectTables    []string                 // config.EnvEffectTables, tokens included
}

// env returns the environment variables whose values are known at synth
// time, in the config.Env* names and the units config.Load reads.
func (s settings) env() map[string]string {
	return map[string]string{
		config.EnvLogLevel:            DefaultLogLevel,
		config.EnvRetentionDays:       strconv.Itoa(s.retentionDays),
		config.EnvMaxAttempts:         strconv.Itoa(s.maxAttempts),
		config.EnvMaxReceiveCount:     strconv.Itoa(s.maxReceiveCount),
		config.EnvItemTimeoutSeconds:  strconv.Itoa(int(s.itemTimeout / time.Second)),
		config.EnvLeaseSeconds:        strconv.Itoa(int(s.lease / time.Second)),
		config.EnvVisibilitySeconds:   strconv.Itoa(int(s.visibility / time.Second)),
		config.EnvItemsMaxConcurrency: strconv.Itoa(s.maxConcurrency),
	}
}

// derive fills defaults and validates props. The numbers go through
// config.Load — the very function the Lambda functions run at start — so
// the stack cannot deploy a configuration the functions would refuse.
func derive(props *RunnerProps) (settings, error) {
	if props == nil {
		props = &RunnerProps{}
	}
	s := settings{
		target:          props.Target,
		functionsDir:    props.FunctionsDir,
		itemTimeout:     props.ItemTimeout,
		maxAttempts:     props.MaxAttempts,
		itemsPerMessage: props.ItemsPerMessage,
		maxReceiveCount: props.MaxReceiveCount,
		retentionDays:   props.RetentionDays,
		tick:            props.FinalizeTickSchedule,
		bucketName:      props.BucketName,
		sourceBuckets:   props.SourceBuckets,
		sourcePrefixes:  props.SourcePrefixes,
		pipelines:       props.Pipelines,
		itemMemoryMiB:   props.ItemMemoryMiB,
		reserved:        props.ReservedConcurrency,
		maxConcurrency:  props.ItemsMaxConcurrency,
	}
	if s.itemMemoryMiB == 0 {
		s.itemMemoryMiB = DefaultItemMemoryMiB
	}
	if s.maxConcurrency == 0 {
		s.maxConcurrency = DefaultItemsMaxConcurrency
	}
	if s.sourcePrefixes == nil && s.target == TargetEmulator {
		s.sourcePrefixes = DefaultEmulatorSourcePrefixes
	}
	if s.target == "" {
		s.target = TargetAWS
	}
	if s.functionsDir == "" {
		s.functionsDir = DefaultFunctionsDir
	}
	if s.itemTimeout == 0 {
		s.itemTimeout = config.DefaultItemTimeout
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = config.DefaultMaxAttempts
	}
	if s.itemsPerMessage == 0 {
		s.itemsPerMessage = 1
	}
	if s.maxReceiveCount == 0 {
		s.maxReceiveCount = config.DefaultMaxReceiveCount
	}
	if s.retentionDays == 0 {
		s.retentionDays = DefaultRetentionDays
	}
	if s.tick == "" {
		s.tick = DefaultFinalizeTickSchedule
	}
	if len(s.pipelines) == 0 {
		s.pipelines = DefaultPipelines(props.CustomPipelines)
	}
	allowList := props.WebhookAllow
	if len(allowList) == 0 && s.target == TargetEmulator && !props.EmptyWebhookAllow {
		allowList = DefaultEmulatorWebhookAllow
	}
	s.webhookAllow = strings.Join(allowList, ",")
	maxManifest := props.MaxManifestBytes
	if maxManifest == 0 {
		maxManifest = DefaultMaxManifestBytes
	}
	s.ephemeralMiB = SubmitEphemeralMiB(maxManifest)
	s.secretPrefixes = props.SecretPrefixes
	if len(s.secretPrefixes) == 0 && s.target == TargetEmulator {
		s.secretPrefixes = DefaultEmulatorSecretPrefixes
	}
	s.lease = s.itemTimeout + config.LeaseMargin
	s.visibility = VisibilityFactor * s.itemTimeout
	s.memoryMiB = map[string]int{FunctionItem: s.itemMemoryMiB}
	s.timeouts = map[string]time.Duration{FunctionItem: s.itemTimeout}
	for _, fn := range []string{FunctionSubmit, FunctionFinalize, FunctionSweep} {
		s.memoryMiB[fn], s.timeouts[fn] = DefaultMemoryMiB[fn], defaultTimeouts[fn]
	}
	s.effectTables = props.EffectTables
	s.lambdaFunctions = props.LambdaFunctions
	if len(s.lambdaFunctions) == 0 && s.target == TargetEmulator {
		s.lambdaFunctions = DefaultEmulatorLambdaFunctions
	}

	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &PropError{Field: field, Value: value, Reason: reason})
	}
	switch s.target {
	case TargetAWS:
		s.arch = awslambda.Architecture_ARM_64()
	case TargetEmulator:
		switch runtime.GOARCH {
		case "amd64":
			s.arch = awslambda.Architecture_X86_64()
		case "arm64":
			s.arch = awslambda.Architecture_ARM_64()
		default:
			bad("Target", s.target, fmt.Sprintf("Lambda has no architecture for host GOARCH %q", runtime.GOARCH))
		}
	default:
		bad("Target", s.target, fmt.Sprintf("want %q or %q", TargetAWS, TargetEmulator))
	}
	if s.itemTimeout < time.Second || s.itemTimeout > lambdaMaxTimeout || s.itemTimeout%time.Second != 0 {
		bad("ItemTimeout", s.itemTimeout.String(), "want whole seconds from 1s to 15m (Lambda's limit)")
	}
	if maxManifest < 0 || maxManifest > MaxMaxManifestBytes {
		bad("MaxManifestBytes", strconv.FormatInt(props.MaxManifestBytes, 10),
			fmt.Sprintf("want 1–%d bytes: the submit function's ephemeral storage (2 × the manifest + %d MiB) is at most %d MiB (Lambda's limit)",
				int64(MaxMaxManifestBytes), ephemeralMarginMiB, ephemeralMaxMiB))
	}
	if s.maxReceiveCount > sqsMaxReceiveCount {
		bad("MaxReceiveCount", strconv.Itoa(s.maxReceiveCount), "SQS allows at most 1000")
	}
	if s.retentionDays < 1 {
		bad("RetentionDays", strconv.Itoa(s.retentionDays), "want at least 1 day")
	}
	if err := CheckScheduleExpression(s.tick); err != nil {
		bad("FinalizeTickSchedule", s.tick, "not an EventBridge schedule expression: "+err.Error())
	}
	if s.bucketName != "" && !bucketNamePattern.MatchString(s.bucketName) {
		bad("BucketName", s.bucketName, "not a valid S3 bucket name")
	}
	for _, b := range s.sourceBuckets {
		if !bucketNamePattern.MatchString(b) {
			bad("SourceBuckets", b, "not a valid S3 bucket name")
		} else if b == s.bucketName {
			bad("SourceBuckets", b, "the stack's own bucket: name prefixes of it in SourcePrefixes (its batches/ is never a source)")
		}
	}
	for _, p := range s.sourcePrefixes {
		if err := config.CheckSourceURI("s3://bucket/" + p); err != nil || p == "" {
			bad("SourcePrefixes", p, "want a prefix ending in / (e.g. exports/), without empty, . or .. segments")
			continue
		}
		for _, never := range []string{config.BatchesPrefix, config.UploadErrorsPrefix, config.ScheduleErrorsPrefix} {
			if strings.HasPrefix(p, never) || strings.HasPrefix(never, p) {
				bad("SourcePrefixes", p, fmt.Sprintf("overlaps %s, which is never a source", never))
			}
		}
	}
	if s.itemMemoryMiB < 128 || s.itemMemoryMiB > 10240 {
		bad("ItemMemoryMiB", strconv.Itoa(s.itemMemoryMiB), "want 128–10240 MiB (Lambda's limits)")
	}
	if s.maxConcurrency < 2 || s.maxConcurrency > 1000 {
		bad("ItemsMaxConcurrency", strconv.Itoa(s.maxConcurrency), "want 2–1000 (SQS event source maximum concurrency)")
	}
	for fn, n := range s.reserved {
		switch {
		case !slices.Contains([]string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep}, fn):
			bad("ReservedConcurrency["+fn+"]", strconv.Itoa(n), "not a function of the stack (submit, item, finalize, sweep)")
		case n < 1:
			bad("ReservedConcurrency["+fn+"]", strconv.Itoa(n), "want at least 1 (0 would stop the function)")
		case fn == FunctionItem && n < s.maxConcurrency:
			bad("ReservedConcurrency["+fn+"]", strconv.Itoa(n), fmt.Sprintf("below ItemsMaxConcurrency (%d): the event source would be throttled", s.maxConcurrency))
		}
	}
	for fn, n := range props.MemoryMiB {
		switch {
		case fn == FunctionItem:
			bad("MemoryMiB["+fn+"]", strconv.Itoa(n), "set the item function's memory with ItemMemoryMiB")
		case !slices.Contains([]string{FunctionSubmit, FunctionFinalize, FunctionSweep}, fn):
			bad("MemoryMiB["+fn+"]", strconv.Itoa(n), "not a function of the stack (submit, finalize, sweep)")
		case n < 128 || n > 10240:
			bad("MemoryMiB["+fn+"]", strconv.Itoa(n), "want 128–10240 MiB (Lambda's limits)")
		default:
			s.memoryMiB[fn] = n
		}
	}
	for fn, d := range props.Timeouts {
		switch {
		case fn == FunctionItem:
			bad("Timeouts["+fn+"]", d.String(), "set the item function's timeout with ItemTimeout (the lease and the queues' visibility follow it)")
		case !slices.Contains([]string{FunctionSubmit, FunctionFinalize, FunctionSweep}, fn):
			bad("Timeouts["+fn+"]", d.String(), "not a function of the stack (submit, finalize, sweep)")
		case d < time.Second || d > lambdaMaxTimeout || d%time.Second != 0:
			bad("Timeouts["+fn+"]", d.String(), "want whole seconds from 1s to 15m (Lambda's limit)")
		default:
			s.timeouts[fn] = d
		}
	}
	known := registered.Names()
	for _, p := range props.CustomPipelines {
		switch {
		case !pipeline.ValidName(p):
			bad("CustomPipelines", p, "not a valid pipeline name (see pipeline.ValidName)")
		case slices.Contains(known, p):
			bad("CustomPipelines", p, "listed twice, or the name of a built-in pipeline")
		default:
			known = append(known, p)
		}
	}
	if len(props.CustomPipelines) > 0 && props.PipelineCode == "" {
		bad("CustomPipelines", strings.Join(props.CustomPipelines, ","), "set PipelineCode too: bulkrun's own binaries run the built-in pipelines only")
	}
	if props.PipelineCode != "" && len(props.CustomPipelines) == 0 {
		bad("PipelineCode", props.PipelineCode, "name the binary's pipelines in CustomPipelines (what `bootstrap pipelines` prints)")
	}
	for _, p := range s.pipelines {
		if !pipeline.ValidName(p) {
			bad("Pipelines", p, "not a valid pipeline name (see pipeline.ValidName)")
		} else if !slices.Contains(known, p) {
			bad("Pipelines", p, fmt.Sprintf("neither built in nor in CustomPipelines (have %s); %s", strings.Join(slices.Sorted(slices.Values(known)), ", "), batch.RegisterPipelineHint))
		}
	}
	if props.DefaultPipeline != "" && !slices.Contains(s.pipelines, props.DefaultPipeline) {
		bad("DefaultPipeline", props.DefaultPipeline, "not one of Pipelines")
	}
	names := map[string]bool{}
	for _, sc := range props.Schedules {
		field := "Schedules[" + sc.Name + "]"
		if len(sc.Name) > 100 || !batch.ValidBatchID(sc.Name) || names[sc.Name] {
			bad(field, sc.Name, "name must be unique, 1–100 bytes of [A-Za-z0-9_-]")
		}
		names[sc.Name] = true
		if err := CheckScheduleExpression(sc.Expression); err != nil {
			bad(field+".Expression", sc.Expression, "not an EventBridge schedule expression: "+err.Error())
		}
		var req batch.SubmitRequest
		if err := json.Unmarshal(sc.Request, &req); err != nil {
			bad(field+".Request", string(sc.Request), "not a submit request: "+err.Error())
		} else if req.BatchID != "" {
			bad(field+".Request", string(sc.Request), "batch_id derives from the schedule; leave it out")
		} else if !slices.Contains(s.pipelines, req.Pipeline) {
			bad(field+".Request", req.Pipeline, "pipeline is not one of Pipelines")
		}
	}
	s.code = map[string]string{}
	for _, fn := range []string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep} {
		s.code[fn] = filepath.Join(s.functionsDir, fn)
		if props.PipelineCode != "" && (fn == FunctionSubmit || fn == FunctionItem) {
			s.code[fn] = props.PipelineCode
		}
	}
	for _, fn := range []string{FunctionSubmit, FunctionFinalize, FunctionSweep, FunctionItem} {
		bootstrap := filepath.Join(s.code[fn], "bootstrap")
		if info, err := os.Stat(bootstrap); err != nil || info.IsDir() {
			if props.PipelineCode != "" && s.code[fn] == props.PipelineCode {
				if fn == FunctionSubmit {
					bad("PipelineCode", props.PipelineCode, fmt.Sprintf("no %s: build the binary whose main calls function.Start first", bootstrap))
				}
				continue
			}
			bad("FunctionsDir", s.functionsDir, fmt.Sprintf("no %s: build the functions first", bootstrap))
		}
	}

	// The table, bucket, queue and function names are CloudFormation tokens
	// here; placeholders stand in for them so that Validate checks the rest.
	env := s.env()
	env[config.EnvTable] = "table"
	env[config.EnvBucket] = "bucket"
	env[config.EnvPipelines] = strings.Join(s.pipelines, ",")
	errs = append(errs, checkOperations(props)...)
	env[config.EnvWebhookAllow] = s.webhookAllow
	env[config.EnvSecretPrefixes] = strings.Join(s.secretPrefixes, ",")
	// A token (a function's ARN in the same app) resolves at deploy: an
	// ARN stands in for it.
	var lambdas []string
	for _, f := range s.lambdaFunctions {
		if *awscdk.Token_IsUnresolved(jsii.String(f)) {
			f = "arn:aws:lambda:us-east-1:000000000000:function:token"
		}
		lambdas = append(lambdas, f)
	}
	env[config.EnvLambdaFunctions] = strings.Join(lambdas, ",")
	var tables []string
	for _, t := range s.effectTables {
		if *awscdk.Token_IsUnresolved(jsii.String(t)) {
			t = "token-table"
		}
		tables = append(tables, t)
	}
	env[config.EnvEffectTables] = strings.Join(tables, ",")
	env[config.EnvItemsPerMessage] = strconv.Itoa(s.itemsPerMessage)
	if _, err := config.Load(func(k string) string { return env[k] }); err != nil {
		errs = append(errs, fmt.Errorf("bulkrun: the functions would refuse this configuration: %w", err))
	}
	return s, errors.Join(errs...)
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

// runner is NewRunner's Runner.
type runner struct {
	constructs.Construct
	bucket                              awss3.Bucket
	table                               awsdynamodb.Table
	items, dlq, parking, submitFailures awssqs.Queue
	api                                 awsapigateway.LambdaRestApi
	functions                           map[string]awslambda.Function
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
	root := constructs.NewConstruct(scope, id)
	self := &runner{Construct: root}
	// Every resource is created under the runner's construct.
	stack := root
	stackOf := awscdk.Stack_Of(scope)
	onAWS := s.target == TargetAWS
	removal := awscdk.RemovalPolicy_DESTROY
	if onAWS {
		removal = awscdk.RemovalPolicy_RETAIN
	}

	// Bucket. Every reference to it from a function or a policy uses the
	// name string and ARNs built from it, never a Ref to the bucket: the
	// bucket depends on the submit function through its notification, so a
	// reference back from the function would be a cycle.
	bucketName := jsii.String(s.bucketName)
	if s.bucketName == "" {
		bucketName = awscdk.Fn_Join(jsii.String(""), &[]*string{
			jsii.String("bulkrun-"), awscdk.Aws_ACCOUNT_ID(), jsii.String("-"), awscdk.Aws_REGION(),
		})
	}
	bucketArn := s3Arn(bucketName, "")
	batchesArn := s3Arn(bucketName, config.BatchesPrefix+"*")
	bucket := awss3.NewBucket(stack, jsii.String("Bucket"), &awss3.BucketProps{
		BucketName:        bucketName,
		RemovalPolicy:     removal,
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
		}, {
			// Local files the CLI uploaded, and error reports of refused
			// uploads, go after the retention.
			Id:         jsii.String("expire-uploads"),
			Enabled:    jsii.Bool(true),
			Prefix:     jsii.String(config.UploadsPrefix),
			Expiration: awscdk.Duration_Days(jsii.Number(float64(s.retentionDays))),
		}, {
			Id:         jsii.String("expire-upload-errors"),
			Enabled:    jsii.Bool(true),
			Prefix:     jsii.String(config.UploadErrorsPrefix),
			Expiration: awscdk.Duration_Days(jsii.Number(float64(s.retentionDays))),
		}, {
			Id:         jsii.String("expire-schedule-errors"),
			Enabled:    jsii.Bool(true),
			Prefix:     jsii.String(config.ScheduleErrorsPrefix),
			Expiration: awscdk.Duration_Days(jsii.Number(float64(s.retentionDays))),
		}},
	})

	// Table: one table for every bulkrun row.
	table := awsdynamodb.NewTable(stack, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(config.AttrPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:             &awsdynamodb.Attribute{Name: jsii.String(config.AttrSK), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(config.AttrExpiresAt),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(onAWS),
		},
		RemovalPolicy: removal,
	})
	// Item rows are listed by the table itself (pk ITEM#{id}#{shard}, sk
	// the item key): no index copies them. The attention index is sparse:
	// only failed and quarantined rows carry its keys, and they hold no
	// output (docs/design.md, "Storage layout").
	table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String(config.IndexAttention),
		PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String(config.AttrAttentionPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String(config.AttrAttentionSK), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType: awsdynamodb.ProjectionType_ALL,
	})
	// The batches index lists batches newest first (GET /batches); it
	// projects only what a listing shows, so most batch-row writes do not
	// touch it (docs/design.md, "Storage layout").
	table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:        jsii.String(config.IndexBatches),
		PartitionKey:     &awsdynamodb.Attribute{Name: jsii.String(config.AttrBatchesPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:          &awsdynamodb.Attribute{Name: jsii.String(config.AttrBatchesSK), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType:   awsdynamodb.ProjectionType_INCLUDE,
		NonKeyAttributes: jsii.Strings(config.BatchesProjection()...),
	})
	tableArns := &[]*string{table.TableArn(), jsii.String(*table.TableArn() + "/index/*")}

	// Queues. The dead-letter queue is consumed by the item function too,
	// so its visibility timeout obeys the same rule as the items queue's.
	visibility := awscdk.Duration_Seconds(jsii.Number(s.visibility.Seconds()))
	retention := awscdk.Duration_Seconds(jsii.Number(queueRetention.Seconds()))
	// The parking queue backs the dead-letter queue: a dead letter the
	// item function could not record (a live lease, a storage error) is
	// received again, and after config.ParkingMaxReceiveCount receives it
	// is parked here, where nothing consumes it, the ParkingAlarm fires, and
	// an operator redrives it (docs/operations.md).
	parking := awssqs.NewQueue(stack, jsii.String("ItemsParkingQueue"), &awssqs.QueueProps{
		RetentionPeriod: retention,
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		RemovalPolicy:   removal,
	})
	dlq := awssqs.NewQueue(stack, jsii.String("ItemsDeadLetterQueue"), &awssqs.QueueProps{
		VisibilityTimeout: visibility,
		RetentionPeriod:   retention,
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		RemovalPolicy:     removal,
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			Queue:           parking,
			MaxReceiveCount: jsii.Number(config.ParkingMaxReceiveCount),
		},
	})
	parkingAlarm := awscloudwatch.NewAlarm(stack, jsii.String("ParkingAlarm"), &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String("bulkrun: dead letters the item function could not record are parked; see docs/operations.md, \"Parked dead letters\""),
		Metric: parking.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period:    awscdk.Duration_Minutes(jsii.Number(5)),
			Statistic: jsii.String("Maximum"),
		}),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	items := awssqs.NewQueue(stack, jsii.String("ItemsQueue"), &awssqs.QueueProps{
		VisibilityTimeout: visibility,
		RetentionPeriod:   retention,
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		RemovalPolicy:     removal,
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			Queue:           dlq,
			MaxReceiveCount: jsii.Number(float64(s.maxReceiveCount)),
		},
	})

	// Functions.
	common := s.env()
	common[config.EnvTable] = *table.TableName()
	common[config.EnvBucket] = *bucketName
	newFunction := func(name string, timeout time.Duration, memoryMiB float64, env map[string]string, tune ...func(*awslambda.FunctionProps)) awslambda.Function {
		vars := make(map[string]*string, len(env))
		for k, v := range env {
			vars[k] = jsii.String(v)
		}
		fp := &awslambda.FunctionProps{
			Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
			Handler:      jsii.String("bootstrap"),
			Code:         awslambda.Code_FromAsset(jsii.String(s.code[name]), nil),
			Architecture: s.arch,
			Timeout:      awscdk.Duration_Seconds(jsii.Number(timeout.Seconds())),
			MemorySize:   jsii.Number(memoryMiB),
			Environment:  &vars,
			Description:  jsii.String("bulkrun " + name),
		}
		if onAWS {
			fp.LogGroup = awslogs.NewLogGroup(stack, jsii.String(name+"-logs"), &awslogs.LogGroupProps{
				Retention: awslogs.RetentionDays_ONE_MONTH,
			})
		}
		if n, ok := s.reserved[name]; ok {
			fp.ReservedConcurrentExecutions = jsii.Number(float64(n))
		}
		for _, t := range tune {
			t(fp)
		}
		return awslambda.NewFunction(stack, jsii.String(name), fp)
	}

	finalizeEnv := copyEnv(common)
	finalizeEnv[config.EnvItemsQueueURL] = *items.QueueUrl() // the tick re-sends a lost fan-out
	finalize := newFunction(FunctionFinalize, s.timeouts[FunctionFinalize], float64(s.memoryMiB[FunctionFinalize]), finalizeEnv)
	sweep := newFunction(FunctionSweep, s.timeouts[FunctionSweep], float64(s.memoryMiB[FunctionSweep]), common)

	fanOut := copyEnv(common)
	fanOut[config.EnvItemsQueueURL] = *items.QueueUrl()
	fanOut[config.EnvFinalizeFunction] = *finalize.FunctionName()
	fanOut[config.EnvPipelines] = strings.Join(s.pipelines, ",")
	var sources []string
	for _, b := range s.sourceBuckets {
		sources = append(sources, "s3://"+b+"/")
	}
	for _, p := range s.sourcePrefixes {
		sources = append(sources, "s3://"+*bucketName+"/"+p)
	}
	if len(sources) > 0 {
		fanOut[config.EnvSources] = strings.Join(sources, ",")
	}
	if len(s.lambdaFunctions) > 0 {
		fanOut[config.EnvLambdaFunctions] = strings.Join(s.lambdaFunctions, ",") // checked at submit and per item
	}
	if s.webhookAllow != "" {
		fanOut[config.EnvWebhookAllow] = s.webhookAllow // checked at submit, and at dial by item
	}
	submitEnv := copyEnv(fanOut)
	submitEnv[config.EnvFunction] = FunctionSubmit // which function a PipelineCode binary serves
	if props != nil && props.DefaultPipeline != "" {
		submitEnv[config.EnvDefaultPipeline] = props.DefaultPipeline
	}
	if len(s.secretPrefixes) > 0 {
		submitEnv[config.EnvSecretPrefixes] = strings.Join(s.secretPrefixes, ",")
	}
	submitEnv[config.EnvEphemeralStorageMiB] = strconv.Itoa(s.ephemeralMiB)
	submitEnv[config.EnvItemsPerMessage] = strconv.Itoa(s.itemsPerMessage) // only submit applies it
	submit := newFunction(FunctionSubmit, s.timeouts[FunctionSubmit], float64(s.memoryMiB[FunctionSubmit]), submitEnv, func(fp *awslambda.FunctionProps) {
		fp.EphemeralStorageSize = awscdk.Size_Mebibytes(jsii.Number(float64(s.ephemeralMiB)))
	})

	// Failed starts: S3 and EventBridge invoke submit asynchronously;
	// Lambda retries a failed invocation SubmitRetryAttempts times and then
	// puts the event, with the error, on this queue, whose depth is alarmed.
	// ("Asynchronous invocation" and "Capturing records of Lambda
	// asynchronous invocations", AWS Lambda Developer Guide.)
	submitFailures := awssqs.NewQueue(stack, jsii.String("SubmitFailuresQueue"), &awssqs.QueueProps{
		RetentionPeriod: retention,
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		RemovalPolicy:   removal,
	})
	submit.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		RetryAttempts: jsii.Number(SubmitRetryAttempts),
		MaxEventAge:   awscdk.Duration_Hours(jsii.Number(SubmitMaxEventAge.Hours())),
		OnFailure:     awslambdadestinations.NewSqsDestination(submitFailures),
	})
	submitFailuresAlarm := awscloudwatch.NewAlarm(stack, jsii.String("SubmitFailuresAlarm"), &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String("bulkrun: an asynchronous invocation of submit (an upload, a schedule tick, a background read) still failed after Lambda's retries; its event is on the submit failures queue"),
		Metric: submitFailures.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period:    awscdk.Duration_Minutes(jsii.Number(1)),
			Statistic: jsii.String("Maximum"),
		}),
		Threshold:          jsii.Number(1),
		EvaluationPeriods:  jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	itemEnv := copyEnv(fanOut)
	itemEnv[config.EnvFunction] = FunctionItem
	itemEnv[config.EnvDeadLetterQueueARN] = *dlq.QueueArn()
	if len(s.effectTables) > 0 {
		itemEnv[config.EnvEffectTables] = strings.Join(s.effectTables, ",") // staged writes (shared/pipeline/effects)
	}
	item := newFunction(FunctionItem, s.itemTimeout, float64(s.itemMemoryMiB), itemEnv)

	// Least privilege, explicit actions only.
	sourceObjects := []*string{s3Arn(bucketName, "*")}
	sourceBuckets := []*string{bucketArn}
	for _, b := range s.sourceBuckets {
		sourceObjects = append(sourceObjects, s3Arn(jsii.String(b), "*"))
		sourceBuckets = append(sourceBuckets, s3Arn(jsii.String(b), ""))
	}
	allow := func(fn awslambda.Function, actions []string, resources ...*string) {
		fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(actions...),
			Resources: &resources,
		}))
	}

	allow(submit, []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:Query", "dynamodb:BatchGetItem"}, *tableArns...)
	allow(submit, []string{"s3:GetObject"}, sourceObjects...)
	allow(submit, []string{"s3:ListBucket"}, sourceBuckets...)
	allow(submit, []string{"s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject"}, batchesArn)
	allow(submit, []string{"s3:PutObject", "s3:DeleteObject"}, s3Arn(bucketName, config.UploadErrorsPrefix+"*"), s3Arn(bucketName, config.ScheduleErrorsPrefix+"*"))
	allow(submit, []string{"sqs:SendMessage"}, items.QueueArn())
	allow(submit, []string{"lambda:InvokeFunction"}, finalize.FunctionArn())
	// Submit hands the reading of an S3 source to itself (an asynchronous
	// invocation). The grant is a policy of its own: in the role's default
	// policy, which the function depends on, it would be a cycle.
	awsiam.NewPolicy(stack, jsii.String("SubmitInvokesItself"), &awsiam.PolicyProps{
		Roles: &[]awsiam.IRole{submit.Role()},
		Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings("lambda:InvokeFunction"),
			Resources: jsii.Strings(*submit.FunctionArn()),
		})},
	})

	allow(item, []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchGetItem"}, table.TableArn())
	allow(item, []string{"s3:GetObject"}, sourceObjects...)
	allow(item, []string{"s3:PutObject"}, batchesArn)
	allow(item, []string{"sqs:SendMessage", "sqs:ChangeMessageVisibility"}, items.QueueArn())
	allow(item, []string{"lambda:InvokeFunction"}, finalize.FunctionArn())

	// The lambda pipeline: invoke exactly the allow-listed functions, one
	// statement each (a name is a function of this account and region).
	for _, f := range s.lambdaFunctions {
		arn := jsii.String(f)
		if !*awscdk.Token_IsUnresolved(arn) && !strings.HasPrefix(f, "arn:") {
			arn = awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":lambda:"),
				awscdk.Aws_REGION(), jsii.String(":"), awscdk.Aws_ACCOUNT_ID(), jsii.String(":function:" + f)})
		}
		allow(item, []string{"lambda:InvokeFunction"}, arn)
	}

	// Staged writes: the actions of a TransactWriteItems on each declared
	// table, one statement per table ("Using IAM policy conditions for
	// fine-grained access control" / TransactWriteItems, Amazon DynamoDB
	// developer guide: each action of the transaction needs its own
	// permission).
	for _, t := range s.effectTables {
		allow(item, []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"},
			awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":dynamodb:"),
				awscdk.Aws_REGION(), jsii.String(":"), awscdk.Aws_ACCOUNT_ID(), jsii.String(":table/"), jsii.String(t)}))
	}

	// Secret references: read access per declared prefix, per service.
	var parameters, secrets []*string
	for _, p := range s.secretPrefixes {
		if strings.Contains(p, ":ssm:") {
			parameters = append(parameters, jsii.String(p))
		} else {
			secrets = append(secrets, jsii.String(p))
		}
	}
	if len(parameters) > 0 {
		allow(item, []string{"ssm:GetParameter"}, parameters...)
	}
	if len(secrets) > 0 {
		allow(item, []string{"secretsmanager:GetSecretValue"}, secrets...)
	}

	allow(finalize, []string{"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:BatchGetItem"}, *tableArns...)
	allow(finalize, []string{"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"}, batchesArn)
	allow(finalize, []string{"s3:ListBucket"}, bucketArn)
	allow(finalize, []string{"sqs:SendMessage"}, items.QueueArn())

	allow(sweep, []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}, *tableArns...)
	allow(sweep, []string{"s3:DeleteObject"}, batchesArn)
	allow(sweep, []string{"s3:ListBucket"}, bucketArn)
	defaultBus := awscdk.Fn_Join(jsii.String(""), &[]*string{
		jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":events:"), awscdk.Aws_REGION(),
		jsii.String(":"), awscdk.Aws_ACCOUNT_ID(), jsii.String(":event-bus/default"),
	})
	allow(finalize, []string{"events:PutEvents"}, defaultBus)
	allow(submit, []string{"events:PutEvents"}, defaultBus) // Batch Refused

	// Event sources: the items queue, and the dead-letter queue whose
	// messages the item function records as failed (dead-lettered).
	for _, q := range []awssqs.Queue{items, dlq} {
		item.AddEventSource(awslambdaeventsources.NewSqsEventSource(q, &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(config.DefaultItemBatchSize),
			ReportBatchItemFailures: jsii.Bool(true),
			MaxConcurrency:          jsii.Number(float64(s.maxConcurrency)),
		}))
	}

	// S3 upload → submit, through the L1 notification configuration:
	// Bucket.addEventNotification would add a custom-resource Lambda.
	perm := awslambda.NewCfnPermission(stack, jsii.String("SubmitFromBucket"), &awslambda.CfnPermissionProps{
		Action:        jsii.String("lambda:InvokeFunction"),
		FunctionName:  submit.FunctionArn(),
		Principal:     jsii.String("s3.amazonaws.com"),
		SourceAccount: awscdk.Aws_ACCOUNT_ID(),
		SourceArn:     bucketArn,
	})
	// One prefix filter, no suffix filters: S3 matches suffixes
	// case-sensitively, and every object under incoming/ must either start a
	// batch or leave an error report, so submit decides by the name.
	notifications := []interface{}{&awss3.CfnBucket_LambdaConfigurationProperty{
		Event:    jsii.String("s3:ObjectCreated:*"),
		Function: submit.FunctionArn(),
		Filter: &awss3.CfnBucket_NotificationFilterProperty{
			S3Key: &awss3.CfnBucket_S3KeyFilterProperty{
				Rules: &[]interface{}{
					&awss3.CfnBucket_FilterRuleProperty{Name: jsii.String("prefix"), Value: jsii.String(config.IncomingPrefix)},
				},
			},
		},
	}}
	cfnBucket := bucket.Node().DefaultChild().(awss3.CfnBucket)
	cfnBucket.SetNotificationConfiguration(&awss3.CfnBucket_NotificationConfigurationProperty{
		LambdaConfigurations: &notifications,
	})
	cfnBucket.AddResourceDependency(perm, jsii.String("S3 checks that it may invoke submit when the notification is set"))

	// Schedule: the backstop that finalizes runs whose counters were lost.
	if props != nil {
		for _, sc := range props.Schedules {
			var req map[string]any
			_ = json.Unmarshal(sc.Request, &req) // validated in derive
			awsevents.NewRule(stack, jsii.String("Schedule-"+sc.Name), &awsevents.RuleProps{
				Description: jsii.String("bulkrun schedule " + sc.Name),
				Schedule:    awsevents.Schedule_Expression(jsii.String(sc.Expression)),
				Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(submit, &awseventstargets.LambdaFunctionProps{
					Event: awsevents.RuleTargetInput_FromObject(map[string]any{
						"bulkrun_schedule": sc.Name, "time": awsevents.EventField_Time(), "request": req,
					}),
				})},
			})
		}
	}
	awsevents.NewRule(stack, jsii.String("Sweep"), &awsevents.RuleProps{
		Description: jsii.String("bulkrun: delete the batches whose retention has passed"),
		Schedule:    awsevents.Schedule_Expression(jsii.String(SweepSchedule)),
		Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(sweep, nil)},
	})
	awsevents.NewRule(stack, jsii.String("SubmitTick"), &awsevents.RuleProps{
		Description: jsii.String("bulkrun: hand off again, or refuse, background source reads that died"),
		Schedule:    awsevents.Schedule_Expression(jsii.String(s.tick)),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(submit, &awseventstargets.LambdaFunctionProps{
			Event: awsevents.RuleTargetInput_FromObject(map[string]interface{}{"bulkrun_submit_tick": true}),
		})},
	})
	awsevents.NewRule(stack, jsii.String("FinalizeTick"), &awsevents.RuleProps{
		Description: jsii.String("bulkrun: finalize runs whose last item's trigger was lost"),
		Schedule:    awsevents.Schedule_Expression(jsii.String(s.tick)),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(finalize, &awseventstargets.LambdaFunctionProps{
			Event: awsevents.RuleTargetInput_FromObject(map[string]interface{}{"tick": true}),
		})},
	})

	// REST API: /batches and /batches/{proxy+}, any method, IAM auth,
	// proxied to submit.
	api := awsapigateway.NewLambdaRestApi(stack, jsii.String("Api"), &awsapigateway.LambdaRestApiProps{
		Handler:        submit,
		Proxy:          jsii.Bool(false),
		RestApiName:    jsii.String(*stackOf.StackName() + "-api"),
		Description:    jsii.String("bulkrun batches API"),
		CloudWatchRole: jsii.Bool(false),
		EndpointTypes:  &[]awsapigateway.EndpointType{awsapigateway.EndpointType_REGIONAL},
		DeployOptions:  &awsapigateway.StageOptions{StageName: jsii.String(config.DefaultAPIStage)},
		DefaultMethodOptions: &awsapigateway.MethodOptions{
			AuthorizationType: awsapigateway.AuthorizationType_IAM,
		},
	})
	// The construct adds its own URL output ("Endpoint"); ApiUrl below
	// replaces it, so that the outputs are exactly the config.Output* keys
	// (the tests check).
	api.Node().TryRemoveChild(jsii.String("Endpoint"))
	batches := api.Root().AddResource(jsii.String(config.APIBatchesResource), nil)
	batches.AddMethod(jsii.String("ANY"), nil, nil)
	batches.AddProxy(&awsapigateway.ProxyResourceOptions{AnyMethod: jsii.Bool(true)})

	// Outputs, keyed by config.Output*.
	outputs := []struct {
		key   string
		value *string
		desc  string
	}{
		{config.OutputAPIURL, api.Url(), "REST API base URL, stage included"},
		{config.OutputAPIID, api.RestApiId(), "REST API id"},
		{config.OutputAPIStage, api.DeploymentStage().StageName(), "REST API stage"},
		{config.OutputBucket, bucket.BucketName(), "bucket for sources (incoming/) and batches (batches/)"},
		{config.OutputTable, table.TableName(), "DynamoDB table"},
		{config.OutputItemsQueueURL, items.QueueUrl(), "items queue URL"},
		{config.OutputItemsDLQURL, dlq.QueueUrl(), "items dead-letter queue URL"},
		{config.OutputItemsQueueARN, items.QueueArn(), "items queue ARN"},
		{config.OutputItemsDLQARN, dlq.QueueArn(), "items dead-letter queue ARN"},
		{config.OutputSubmitFunction, submit.FunctionName(), "submit function name"},
		{config.OutputItemFunction, item.FunctionName(), "item function name"},
		{config.OutputFinalizeFunction, finalize.FunctionName(), "finalize function name"},
		{config.OutputSweepFunction, sweep.FunctionName(), "retention sweep function name"},
		{config.OutputMaxReceiveCount, jsii.String(strconv.Itoa(s.maxReceiveCount)), "items queue redrive maxReceiveCount"},
		{config.OutputSubmitFailuresQueueURL, submitFailures.QueueUrl(), "queue of uploads and schedule ticks that failed to start after Lambda's retries"},
		{config.OutputSubmitFailuresAlarm, submitFailuresAlarm.AlarmName(), "alarm on the submit failures queue's depth"},
		{config.OutputParkingQueueURL, parking.QueueUrl(), "parking queue URL (dead letters that could not be recorded)"},
		{config.OutputParkingQueueARN, parking.QueueArn(), "parking queue ARN"},
		{config.OutputParkingAlarm, parkingAlarm.AlarmName(), "alarm on the parking queue's depth"},
	}
	ops := operated{bucket: bucket, table: table, items: items, dlq: dlq, api: api,
		functions: map[string]awslambda.Function{FunctionSubmit: submit, FunctionItem: item, FunctionFinalize: finalize, FunctionSweep: sweep}}
	harden(stack, s, props, ops)
	observe(stack, s, props, ops)
	// Last: the suppressions reach the children that exist when they are added.
	nagSuppressions(stack, s, ops)
	for _, o := range outputs {
		awscdk.NewCfnOutput(stack, jsii.String(o.key), &awscdk.CfnOutputProps{
			Key:         jsii.String(o.key),
			Value:       o.value,
			Description: jsii.String(o.desc),
		})
	}
	self.bucket, self.table, self.api, self.functions = bucket, table, api, ops.functions
	self.items, self.dlq, self.parking, self.submitFailures = items, dlq, parking, submitFailures
	return self
}

// Asynchronous invocations of submit (S3 notifications, schedule ticks).
// Lambda's defaults, stated so that the template shows them: 2 retries
// (the maximum), events kept up to 6 hours ("Configuring error handling
// for asynchronous invocation", AWS Lambda Developer Guide).
const (
	SubmitRetryAttempts = 2
	SubmitMaxEventAge   = 6 * time.Hour
)

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

func copyEnv(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
