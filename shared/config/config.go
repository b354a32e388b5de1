// Package config holds the names that the CDK stack (infra/) and the Lambda
// functions (functions/) must agree on — environment variables, stack
// outputs, S3 prefixes — and the typed configuration each function reads
// from its environment once at start.
//
// The package imports only the standard library (and bulkrun's egress,
// which does too) so that infra/ and the functions can both import it; a
// name changed here changes on both sides.
//
// API: the names (environment variables, stack outputs, prefixes) are
// part of bulkrun's Go API (docs/packages.md); Load, Config and its
// validation are not.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/shared/api"
)

// Environment variable names. The stack sets them on every function that
// needs them; Load reads them.
const (
	// EnvTable is the DynamoDB table name (all bulkrun rows live in one table).
	EnvTable = "BULKRUN_TABLE"
	// EnvBucket is the S3 bucket for manifests, outputs, results and reports.
	EnvBucket = "BULKRUN_BUCKET"
	// EnvItemsQueueURL is the URL of the items queue (item and fan-out messages).
	EnvItemsQueueURL = "BULKRUN_ITEMS_QUEUE_URL"
	// EnvFinalizeFunction is the name of the finalize function, invoked
	// asynchronously when the last item of a run records its outcome.
	EnvFinalizeFunction = "BULKRUN_FINALIZE_FUNCTION"
	// EnvPipelines is the comma-separated list of pipeline names that submit
	// accepts; the submit and item binaries refuse to start when it names
	// one they do not register (registered.CheckListed).
	EnvPipelines = "BULKRUN_PIPELINES"
	// EnvFunction is the function a process serves, "submit" or "item", set
	// by the stack on those two: a team's binary built with
	// function.Start serves both and dispatches on it.
	EnvFunction = "BULKRUN_FUNCTION"
	// EnvDefaultPipeline is the pipeline of a batch started by an S3 upload
	// whose object metadata names none (optional).
	EnvDefaultPipeline = "BULKRUN_DEFAULT_PIPELINE"
	// EnvDeadLetterQueueARN is the ARN of the items queue's dead-letter
	// queue: the item function records messages from it as dead-lettered.
	EnvDeadLetterQueueARN = "BULKRUN_DEAD_LETTER_QUEUE_ARN"
	// EnvLeaseSeconds is the reservation lease in seconds; default
	// DefaultLease (the item timeout, 300 s, + LeaseMargin, 60 s: 360),
	// and at least the item timeout + LeaseMargin (Config.Validate).
	EnvLeaseSeconds = "BULKRUN_LEASE_SECONDS"
	// EnvItemTimeoutSeconds is the item function's timeout in seconds, as
	// configured on the function (default 300). Used to validate the lease.
	EnvItemTimeoutSeconds = "BULKRUN_ITEM_TIMEOUT_SECONDS"
	// EnvVisibilitySeconds is the items queue's visibility timeout in seconds
	// (default 1800). Must be at least the item function's timeout.
	EnvVisibilitySeconds = "BULKRUN_VISIBILITY_SECONDS"
	// EnvMaxAttempts is the default number of attempts per item (default 3).
	EnvMaxAttempts = "BULKRUN_MAX_ATTEMPTS"
	// EnvRetryPolicy is the retry policy of a batch that sets none, as the
	// JSON of api.RetryPolicy ({"interval_seconds":300,"backoff_rate":2,
	// "max_delay_seconds":900,"jitter":0.5}); default
	// api.DefaultRetryPolicy. Submit stores it on the batch; the item
	// function applies it to rows that carry none. Load reads it into
	// Config.RetryPolicy (api.ParseRetryPolicy; an error names the
	// variable); the stack writes it from a validated policy.
	EnvRetryPolicy = "BULKRUN_RETRY_POLICY"
	// EnvItemsPerMessage is the items per message (and per ledger row) of
	// a batch that sets none, 1–100; default DefaultItemsPerMessage (10).
	EnvItemsPerMessage = "BULKRUN_ITEMS_PER_MESSAGE"
	// EnvMaxReceiveCount is the items queue's redrive maxReceiveCount
	// (default 10). Must exceed the max attempts.
	EnvMaxReceiveCount = "BULKRUN_MAX_RECEIVE_COUNT"
	// EnvItemsMaxConcurrency is the maximum concurrency of the item
	// function's SQS event sources (default 100); submit sizes a batch's
	// shards from the flow it allows (ledger.StackFlow).
	EnvItemsMaxConcurrency = "BULKRUN_ITEMS_MAX_CONCURRENCY"
	// EnvItemsMinimumPollers and EnvItemsMaximumPollers are the items
	// queue's event source in provisioned mode (its
	// ProvisionedPollerConfig): the pollers kept ready and the most it
	// scales to; unset (0) in the default, standard mode.
	EnvItemsMinimumPollers = "BULKRUN_ITEMS_MINIMUM_POLLERS"
	EnvItemsMaximumPollers = "BULKRUN_ITEMS_MAXIMUM_POLLERS"
	// EnvTickSeconds is the longest time between two finalize ticks, in
	// seconds (the period of the stack's FinalizeTickSchedule, set on the
	// submit function); default DefaultTickPeriod. The ticks send task
	// heartbeats, so submit refuses a task_heartbeat_seconds shorter than
	// twice it.
	EnvTickSeconds = "BULKRUN_TICK_SECONDS"
	// EnvRetentionDays is how long a finished batch is kept, in days (default 30).
	EnvRetentionDays = "BULKRUN_RETENTION_DAYS"
	// EnvRetentionMinutes, when set, replaces EnvRetentionDays with a
	// retention in whole minutes (1–1440). The stack sets it only on the
	// emulator (RunnerProps.RetentionMinutes), so that expiry and the sweep
	// can be tried in minutes; on AWS the bucket's lifecycle rules count
	// whole days (Amazon S3 user guide, "Lifecycle configuration elements":
	// Days is a positive integer).
	EnvRetentionMinutes = "BULKRUN_RETENTION_MINUTES"
	// EnvUploadRepeatDays is how long, in whole days, submit remembers an
	// upload's content: the same items for the same pipeline and options
	// uploaded under another name within it are not run again unless the
	// upload carries x-amz-meta-rerun: true (submit.Submitter.ClaimUpload).
	// Default 7 (DefaultUploadRepeat); 0 remembers nothing.
	EnvUploadRepeatDays = "BULKRUN_UPLOAD_REPEAT_DAYS"
	// EnvTracesExporter is OpenTelemetry's standard variable naming the
	// traces exporter (OpenTelemetry "Environment Variable
	// Specification", OTEL_TRACES_EXPORTER): TracesNone (the default: no
	// span recorded, the trace context still handed on) or TracesOTLP
	// (OTLP/HTTP to the endpoint of the standard OTEL_EXPORTER_OTLP_*
	// variables, default http://localhost:4318, the ADOT Lambda layer's
	// collector). internal/tracing; docs/operations.md, "Traces".
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	// EnvLogLevel is the slog level: debug, info (default), warn, error.
	EnvLogLevel = "BULKRUN_LOG_LEVEL"
	// EnvEphemeralStorageMiB is the submit function's ephemeral storage
	// (/tmp) in MiB, as the stack sized it; named when the disk fills up.
	// Optional (0: unknown).
	EnvEphemeralStorageMiB = "BULKRUN_EPHEMERAL_STORAGE_MIB"
	// EnvMetricsStack is the Stack dimension of the functions' CloudWatch
	// metrics (package metric): the stack name. Optional; without it no
	// metrics are written.
	EnvMetricsStack = "BULKRUN_METRICS_STACK"
	// EnvSources is the comma-separated list of S3 locations, besides the
	// stack bucket's IncomingPrefix and UploadsPrefix, that a source (and
	// an item's {bucket, key}) may name: "s3://bucket/prefix/" entries, an
	// empty prefix for a whole bucket. Optional (none). The stack bucket's
	// BatchesPrefix and UploadErrorsPrefix are never sources.
	EnvSources = "BULKRUN_SOURCES"
	// EnvWebhookAllow is the webhook pipeline's egress allow-list: the
	// comma-separated hosts, *.domains, IP addresses and CIDRs that it may
	// reach although they are loopback, link-local, private or otherwise
	// non-public (package egress has the rule and the syntax). Default ""
	// (none). Read by submit (checked at submit) and item (checked at dial).
	EnvWebhookAllow = "BULKRUN_WEBHOOK_ALLOW"
	// EnvSecretPrefixes is the comma-separated ARNs, or ARN prefixes ending
	// in "*", of the SSM parameters and Secrets Manager secrets that a
	// batch's headers and options may reference ("secret:arn:…", see
	// secretref.Parse); the item function's role may read exactly these.
	// Default "" (no reference accepted). Read by submit.
	EnvSecretPrefixes = "BULKRUN_SECRET_PREFIXES"
	// EnvEffectTables is the comma-separated DynamoDB table names on which
	// a pipeline may stage writes committed with its item's outcome
	// (shared/pipeline/effects); empty: staging is refused. bulkrun's own
	// table is never one of them.
	EnvEffectTables = "BULKRUN_EFFECT_TABLES"
	// EnvLambdaFunctions is the comma-separated allow-list of the Lambda
	// functions the "lambda" pipeline may invoke: function names or
	// function ARNs (CheckLambdaFunction); the item function's role may
	// invoke exactly these. Default "" (none: the pipeline refuses every
	// batch). Read by submit (checked at submit) and item (checked per item).
	EnvLambdaFunctions = "BULKRUN_LAMBDA_FUNCTIONS"
	// EnvSettingsParameter is the name of an SSM parameter (String) holding
	// more of the function's variables as a JSON object of strings
	// ({"BULKRUN_SOURCES": "s3://…", …}): the stack moves the allow-lists
	// (ParameterVars) there when they would take the function's
	// environment past Lambda's 4 KB. The function reads it once at start
	// (ssm:GetParameter, granted on that parameter alone); a variable set
	// in both places takes the parameter's value. Set on submit and item,
	// only then.
	EnvSettingsParameter = "BULKRUN_SETTINGS_PARAMETER"
)

// ExampleLambdaFunction is the example Python function
// (examples/lambda-python) that `make lambda-function` deploys onto the
// emulator by default, and that the emulator's stack allow-lists when
// LambdaFunctions names none (the integration suite runs the lambda
// pipeline through it).
const ExampleLambdaFunction = "bulkrun-example-python"

// ExampleStateMachine is the name of the example state machine
// (examples/stepfunctions) that submits a batch with its task token and
// branches on the verdict; the emulator's stack lets bulkrun answer its
// tokens when TaskStateMachines names none (the integration suite deploys
// and runs it).
const ExampleStateMachine = "bulkrun-example-batch"

// Stack output keys. The CLI, the demo and the integration tests find the
// deployed resources through these.
const (
	OutputAPIURL           = "ApiUrl"
	OutputAPIID            = "ApiId"
	OutputBucket           = "BucketName"
	OutputTable            = "TableName"
	OutputItemsQueueURL    = "ItemsQueueUrl"
	OutputItemsDLQURL      = "ItemsDeadLetterQueueUrl"
	OutputItemsQueueARN    = "ItemsQueueArn"
	OutputItemsDLQARN      = "ItemsDeadLetterQueueArn"
	OutputSubmitFunction   = "SubmitFunctionName"
	OutputItemFunction     = "ItemFunctionName"
	OutputFinalizeFunction = "FinalizeFunctionName"
	OutputSweepFunction    = "SweepFunctionName"
	OutputMaxReceiveCount  = "ItemsMaxReceiveCount"
	OutputAPIStage         = "ApiStage"
	// OutputSubmitFailuresQueueURL is the queue where Lambda puts the
	// submit function's asynchronous invocations (uploads, schedule ticks)
	// that failed after their retries; an alarm watches its depth.
	OutputSubmitFailuresQueueURL = "SubmitFailuresQueueUrl"
	// OutputSubmitFailuresAlarm is that alarm's name.
	OutputSubmitFailuresAlarm = "SubmitFailuresAlarmName"
	DefaultStackName          = "bulkrun"
	DefaultAPIStage           = "v1"
)

// Stack outputs of the dead-letter backstop (docs/operations.md).
const (
	// OutputParkingQueueURL and OutputParkingQueueARN are the parking
	// queue's: where a dead letter goes after ParkingMaxReceiveCount
	// receives by the item function failed to record it.
	OutputParkingQueueURL = "ItemsParkingQueueUrl"
	OutputParkingQueueARN = "ItemsParkingQueueArn"
	// OutputParkingAlarm is the name of the alarm on the parking queue's depth.
	OutputParkingAlarm = "ItemsParkingAlarmName"
	// OutputInvokeFailuresQueueURL is the queue where Lambda puts finalize's
	// and sweep's asynchronous invocations that failed after their
	// retries; OutputInvokeFailuresAlarm the alarm on its depth.
	OutputInvokeFailuresQueueURL = "InvokeFailuresQueueUrl"
	OutputInvokeFailuresAlarm    = "InvokeFailuresAlarmName"
	// OutputScheduleDLQURL is the queue where EventBridge puts the
	// schedules' events it could not deliver; OutputScheduleDLQAlarm the
	// alarm on its depth.
	OutputScheduleDLQURL   = "ScheduleDeadLetterQueueUrl"
	OutputScheduleDLQAlarm = "ScheduleDeadLetterAlarmName"
)

// S3 key prefixes shared by the stack (notification filters) and the code.
const (
	// IncomingPrefix is where an uploaded source file starts a batch.
	IncomingPrefix = "incoming/"
	// BatchesPrefix holds everything a batch owns: batches/{id}/...
	BatchesPrefix = "batches/"
	// UploadErrorsPrefix holds, for an upload under IncomingPrefix that was
	// refused, a JSON error report: incoming-errors/{name}.error.json.
	UploadErrorsPrefix = "incoming-errors/"
	// ScheduleErrorsPrefix holds, for a schedule tick whose submit was
	// refused or failed, a JSON error report:
	// schedule-errors/{schedule}/{batch id}.error.json.
	ScheduleErrorsPrefix = "schedule-errors/"
	// UploadsPrefix is where the CLI uploads local sources; a lifecycle rule
	// expires them after the retention.
	UploadsPrefix = "uploads/"
)

// AppIDPrefix starts the AWS SDK application id of every bulkrun function's
// clients: AppID("item") is "bulkrun-item". The SDK writes it into each
// request's User-Agent as "app/bulkrun-item" (and AWS into CloudTrail's
// userAgent field), which tells whose code made a call: the IAM-checked
// lane (integration/testbed/iamlane) attributes calls by it.
const AppIDPrefix = "bulkrun-"

// ParameterVars are the variables the stack may move from a function's
// environment into its settings parameter (EnvSettingsParameter): the
// allow-lists, which grow with the stack's props: EnvSources,
// EnvLambdaFunctions, EnvWebhookAllow, EnvSecretPrefixes and
// EnvEffectTables.
func ParameterVars() []string {
	return []string{EnvSources, EnvLambdaFunctions, EnvWebhookAllow, EnvSecretPrefixes, EnvEffectTables}
}

// AppID returns the AWS SDK application id of function ("submit", "item",
// "finalize", "sweep"): AppIDPrefix + function (aws.Config.AppID; at most
// 50 characters, "Application ID", AWS SDKs and Tools reference guide).
func AppID(function string) string { return AppIDPrefix + function }

// Row and object names the stack's grants are narrowed to (infra/bulkrun,
// grants.go): the item function may delete only rows whose partition key
// starts with PKSlot or PKAttention, and finalize may delete only objects
// under batches/{id}/FinalizeCheckpoints.
const (
	// PKSlot starts a max_concurrency slot row's partition key:
	// SLOT#{batch id}#{slot}.
	PKSlot = "SLOT#"
	// PKAttention starts an attention entry's partition key (a packed
	// item that is failed or quarantined): ATTN#{batch id}#{shard}.
	PKAttention = "ATTN#"
	// FinalizeCheckpoints is the folder, under batches/{id}/, of the
	// checkpoints of a census finalize reads in chunks:
	// batches/{id}/finalize/{run}/.
	FinalizeCheckpoints = "finalize/"
)

// APIBatchesResource is the REST API's top resource: every route lives at
// /batches or below it (/batches/{id}, /batches/{id}/items, ...). The stack
// proxies /batches and /batches/{proxy+} to submit, which routes by path.
const APIBatchesResource = "batches"

// Table index names and key attribute names.
const (
	// AttrPK and AttrSK are the table's partition and sort key attributes.
	AttrPK = "pk"
	AttrSK = "sk"
	// IndexAttention is the sparse GSI of items needing attention (failed,
	// quarantined): pk AttrAttentionPK ("{batch}#{shard}"), sk AttrAttentionSK.
	IndexAttention  = "attention"
	AttrAttentionPK = "apk"
	AttrAttentionSK = "ask"
	// IndexBatches is the GSI listing batches newest first: pk
	// AttrBatchesPK ("BATCHES#{yyyy-mm}#{shard}", the UTC month of the
	// batch's creation and FNV-1a(id) mod 8), sk AttrBatchesSK
	// ("{created_at epoch ms:013}#{id}"). Only batch rows carry them; the
	// index projects the listing's attributes (BatchesProjection).
	IndexBatches  = "batches"
	AttrBatchesPK = "bpk"
	AttrBatchesSK = "bsk"
	// IndexSources is the sparse GSI finding the batches of one source
	// (GET /batches?source=…), newest first: pk AttrSourcesPK ("SOURCE#"
	// and the batch's source as described, "s3://bucket/key" or
	// "s3://bucket/prefix/*"), sk AttrBatchesSK. Only batch rows of an S3
	// source carry it (an inline source is no one's file); the index
	// projects what the batches index does (BatchesProjection).
	IndexSources  = "sources"
	AttrSourcesPK = "spk"
	// AttrExpiresAt is the TTL attribute (epoch seconds).
	AttrExpiresAt = "expires_at"
)

// Defaults. Each names the value used when its variable is unset.
const (
	DefaultMaxAttempts = 3
	// DefaultItemsPerMessage is the items per message of a batch that sets
	// none: 10 costs about an eighth of 1 per item and keeps a crash's or a
	// dead letter's reach at 10 items (docs/adr/0015-ten-items-per-message-by-default.md,
	// "Measurements").
	DefaultItemsPerMessage = 10
	DefaultMaxReceiveCount = 10
	DefaultItemTimeout     = api.DefaultItemTimeout
	DefaultTickPeriod      = 5 * time.Minute // the stack's default FinalizeTickSchedule, rate(5 minutes)
	DefaultLease           = DefaultItemTimeout + LeaseMargin
	DefaultVisibility      = 6 * DefaultItemTimeout // AWS: at least 6× the function timeout for SQS event sources
	DefaultRetention       = 30 * 24 * time.Hour
	DefaultUploadRepeat    = 7 * 24 * time.Hour
	LeaseMargin            = time.Minute
	DefaultFinalizeTimeout = 15 * time.Minute
	DefaultSubmitTimeout   = 15 * time.Minute
	DefaultSweepTimeout    = 15 * time.Minute
	DefaultItemBatchSize   = 10
	// DefaultItemsMaxConcurrency is the item event sources' maximum
	// concurrency when EnvItemsMaxConcurrency is unset (the stack's default).
	DefaultItemsMaxConcurrency = 100
	// PollerInvocations is how many invocations one event poller of an
	// SQS event source in provisioned mode drives at once: "each event
	// poller can handle up to 1 MB/sec of throughput, up to 10 concurrent
	// invokes, or up to 10 Amazon SQS polling API calls per second" (AWS
	// Lambda developer guide, "Configuring scaling behavior for SQS event
	// source mappings"). The guide: "When using provisioned mode, you
	// control concurrency through the maximum event pollers setting".
	PollerInvocations = 10
	// PollersAtLeast is the fewest pollers of an SQS event source in
	// provisioned mode, for its minimum and its maximum: Lambda's ranges
	// are "minimum (2-200) and maximum (2-2000)" (AWS Lambda developer
	// guide, "Lambda parameters for Amazon SQS event source mappings";
	// CloudFormation's ProvisionedPollerConfig allows a maximum of 2,000
	// too), both above bulkrun's MaxItemsPollers.
	PollersAtLeast = 2
	// MaxItemsPollers is the most pollers the items queue's source may
	// scale to: 100 drive 1,000 invocations (PollerInvocations each), the
	// standard mode's largest MaximumConcurrency, the flow the ledger's
	// partitions are sized for (ledger.MaxListShards item keys and
	// ledger.MaxCounterLanes lanes serve StackFlow(1000, 10) = 100,000
	// items/s within DynamoDB's 1,000 writes a second per key): the mode
	// starts a batch at speed, it does not raise that ceiling. They keep
	// at most 10,000 messages in flight, of the 120,000 a standard queue
	// allows ("Amazon SQS message quotas").
	MaxItemsPollers = 100
	// ParkingMaxReceiveCount is the dead-letter queue's redrive
	// maxReceiveCount: receives of a dead letter by the item function (which
	// records its item failed) before SQS moves it to the parking queue,
	// where nothing consumes it and an alarm fires.
	ParkingMaxReceiveCount = 5
)

// Config is a function's typed configuration, read once by Load.
//
// Durations are time.Duration; counts are plain ints. Zero values never reach
// the code: Load fills defaults and Validate rejects what AWS or bulkrun's
// invariants forbid.
type Config struct {
	Table            string          // EnvTable; required
	Bucket           string          // EnvBucket; required
	ItemsQueueURL    string          // EnvItemsQueueURL; required by submit and item
	FinalizeFunction string          // EnvFinalizeFunction; required by item and submit
	Pipelines        []string        // EnvPipelines; empty means "accept any registered in this binary"
	DefaultPipeline  string          // EnvDefaultPipeline; optional
	DeadLetterARN    string          // EnvDeadLetterQueueARN; required by item
	Lease            time.Duration   // EnvLeaseSeconds; default DefaultLease
	ItemTimeout      time.Duration   // EnvItemTimeoutSeconds; default DefaultItemTimeout
	TickPeriod       time.Duration   // EnvTickSeconds; default DefaultTickPeriod
	Visibility       time.Duration   // EnvVisibilitySeconds; default DefaultVisibility
	MaxAttempts      int             // EnvMaxAttempts; default DefaultMaxAttempts, ≥ 1
	RetryPolicy      api.RetryPolicy // EnvRetryPolicy, validated; api.DefaultRetryPolicy when unset
	ItemsPerMessage  int             // EnvItemsPerMessage; default DefaultItemsPerMessage, 1–100
	MaxReceiveCount  int             // EnvMaxReceiveCount; default DefaultMaxReceiveCount, > MaxAttempts
	Retention        time.Duration   // EnvRetentionMinutes, else EnvRetentionDays; default DefaultRetention
	UploadRepeat     time.Duration   // EnvUploadRepeatDays; default DefaultUploadRepeat, 0: off
	LogLevel         string          // EnvLogLevel; default "info"
	TracesExporter   string          // EnvTracesExporter; TracesNone (default) or TracesOTLP
	EphemeralMiB     int             // EnvEphemeralStorageMiB; 0 when unset
	Sources          []string        // EnvSources; s3://bucket/prefix entries, none when unset
	WebhookAllow     *egress.Policy  // EnvWebhookAllow; default empty (no non-public destination)
	SecretPrefixes   []string        // EnvSecretPrefixes; default none
	EffectTables     []string        // EnvEffectTables; default none (staging refused)
	LambdaFunctions  []string        // EnvLambdaFunctions; default none
	// ItemsMaxConcurrency is EnvItemsMaxConcurrency; default
	// DefaultItemsMaxConcurrency, 2–1000 (SQS event sources' range): the
	// items queue's event source's in the standard mode, the dead-letter
	// queue's always.
	ItemsMaxConcurrency int
	// ItemsMinimumPollers and ItemsMaximumPollers are
	// EnvItemsMinimumPollers and EnvItemsMaximumPollers: both 0 (the
	// default) in the standard mode; in provisioned mode PollersAtLeast
	// ≤ minimum ≤ maximum ≤ MaxItemsPollers (CheckPollers).
	ItemsMinimumPollers, ItemsMaximumPollers int
}

// Provisioned reports whether the items queue's event source runs in
// provisioned mode (ItemsMaximumPollers set).
func (c Config) Provisioned() bool { return c.ItemsMaximumPollers > 0 }

// ItemsConcurrency is how many invocations the items queue's event
// source may drive at once: ItemsMaximumPollers × PollerInvocations in
// provisioned mode (up to 1,000), ItemsMaxConcurrency otherwise.
func (c Config) ItemsConcurrency() int {
	return ItemsConcurrencyOf(c.ItemsMaxConcurrency, c.ItemsMaximumPollers)
}

// ItemsConcurrencyOf is Config.ItemsConcurrency of a stack's settings
// (infra and doctor have them as props and templates): maximumPollers ×
// PollerInvocations when maximumPollers > 0 (provisioned mode), else
// maxConcurrency.
func ItemsConcurrencyOf(maxConcurrency, maximumPollers int) int {
	if maximumPollers > 0 {
		return maximumPollers * PollerInvocations
	}
	return maxConcurrency
}

// VarError names the environment variable at fault.
type VarError struct {
	Var    string // the environment variable's name
	Value  string // its value as read ("" when unset)
	Reason string
}

func (e *VarError) Error() string {
	return fmt.Sprintf("config: %s=%q: %s", e.Var, e.Value, e.Reason)
}

// The traces exporters EnvTracesExporter names (OpenTelemetry's values
// of OTEL_TRACES_EXPORTER that bulkrun supports).
const (
	TracesNone = "none"
	TracesOTLP = "otlp"
)

// checkTraces defaults TracesExporter to TracesNone and refuses another
// name than TracesNone and TracesOTLP with a *VarError.
func (c *Config) checkTraces() error {
	switch c.TracesExporter {
	case "":
		c.TracesExporter = TracesNone
	case TracesNone, TracesOTLP:
	default:
		return &VarError{Var: EnvTracesExporter, Value: c.TracesExporter, Reason: fmt.Sprintf("want %q or %q", TracesNone, TracesOTLP)}
	}
	return nil
}

// Load reads the configuration from the environment through getenv
// (os.Getenv when nil), fills defaults and validates. It returns a
// *VarError (or several joined) naming each variable at fault.
func Load(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var errs []error
	seconds := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, &VarError{Var: name, Value: v, Reason: "want a positive whole number of seconds"})
			return def
		}
		return time.Duration(n) * time.Second
	}
	count := func(name string, def int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, &VarError{Var: name, Value: v, Reason: "want a whole number"})
			return def
		}
		return n
	}
	c := Config{
		Table:            getenv(EnvTable),
		Bucket:           getenv(EnvBucket),
		ItemsQueueURL:    getenv(EnvItemsQueueURL),
		FinalizeFunction: getenv(EnvFinalizeFunction),
		DefaultPipeline:  getenv(EnvDefaultPipeline),
		DeadLetterARN:    getenv(EnvDeadLetterQueueARN),
		Lease:            seconds(EnvLeaseSeconds, DefaultLease),
		ItemTimeout:      seconds(EnvItemTimeoutSeconds, DefaultItemTimeout),
		TickPeriod:       seconds(EnvTickSeconds, DefaultTickPeriod),
		Visibility:       seconds(EnvVisibilitySeconds, DefaultVisibility),
		MaxAttempts:      count(EnvMaxAttempts, DefaultMaxAttempts),
		ItemsPerMessage:  count(EnvItemsPerMessage, DefaultItemsPerMessage),
		MaxReceiveCount:  count(EnvMaxReceiveCount, DefaultMaxReceiveCount),
		LogLevel:         getenv(EnvLogLevel),
		TracesExporter:   getenv(EnvTracesExporter),
		EphemeralMiB:     count(EnvEphemeralStorageMiB, 0),

		ItemsMaxConcurrency: count(EnvItemsMaxConcurrency, DefaultItemsMaxConcurrency),
		ItemsMinimumPollers: count(EnvItemsMinimumPollers, 0),
		ItemsMaximumPollers: count(EnvItemsMaximumPollers, 0),
		RetryPolicy:         api.DefaultRetryPolicy,
	}
	if v := getenv(EnvRetryPolicy); v != "" {
		p, err := api.ParseRetryPolicy(v)
		if err != nil {
			errs = append(errs, &VarError{Var: EnvRetryPolicy, Value: v, Reason: err.Error()})
		}
		c.RetryPolicy = p
	}
	errs = append(errs, c.checkEventSources(getenv)...)
	if v := getenv(EnvRetentionDays); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, &VarError{Var: EnvRetentionDays, Value: v, Reason: "want a positive whole number of days"})
		} else {
			c.Retention = time.Duration(n) * 24 * time.Hour
		}
	} else {
		c.Retention = DefaultRetention
	}
	if v := getenv(EnvRetentionMinutes); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 24*60 {
			errs = append(errs, &VarError{Var: EnvRetentionMinutes, Value: v, Reason: "want a whole number of minutes, 1–1440"})
		} else {
			c.Retention = time.Duration(n) * time.Minute
		}
	}
	c.UploadRepeat = DefaultUploadRepeat
	if v := getenv(EnvUploadRepeatDays); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 3650 {
			errs = append(errs, &VarError{Var: EnvUploadRepeatDays, Value: v, Reason: "want a whole number of days, 0–3650 (0: uploads are not remembered)"})
		} else {
			c.UploadRepeat = time.Duration(n) * 24 * time.Hour
		}
	}
	allow, err := egress.Parse(getenv(EnvWebhookAllow))
	if err != nil {
		errs = append(errs, &VarError{Var: EnvWebhookAllow, Value: getenv(EnvWebhookAllow), Reason: err.Error()})
		allow = &egress.Policy{}
	}
	c.WebhookAllow = allow
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if err := c.checkTraces(); err != nil {
		errs = append(errs, err)
	}
	if err := new(slog.Level).UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, &VarError{Var: EnvLogLevel, Value: c.LogLevel, Reason: "want debug, info, warn or error"})
	}
	for _, p := range strings.Split(getenv(EnvSecretPrefixes), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !strings.HasPrefix(p, "arn:") || !strings.Contains(p, ":ssm:") && !strings.Contains(p, ":secretsmanager:") {
			errs = append(errs, &VarError{Var: EnvSecretPrefixes, Value: p, Reason: "want an SSM parameter or Secrets Manager secret ARN, or a prefix of one ending in *"})
			continue
		}
		c.SecretPrefixes = append(c.SecretPrefixes, p)
	}
	for _, f := range strings.Split(getenv(EnvLambdaFunctions), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if err := CheckLambdaFunction(f); err != nil {
			errs = append(errs, &VarError{Var: EnvLambdaFunctions, Value: f, Reason: err.Error()})
			continue
		}
		c.LambdaFunctions = append(c.LambdaFunctions, f)
	}
	for _, p := range strings.Split(getenv(EnvPipelines), ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.Pipelines = append(c.Pipelines, p)
		}
	}
	for _, t := range strings.Split(getenv(EnvEffectTables), ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if err := CheckEffectTable(t, c.Table); err != nil {
			errs = append(errs, &VarError{Var: EnvEffectTables, Value: t, Reason: err.Error()})
			continue
		}
		c.EffectTables = append(c.EffectTables, t)
	}
	for _, p := range strings.Split(getenv(EnvSources), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := CheckSourceURI(p); err != nil {
			errs = append(errs, &VarError{Var: EnvSources, Value: p, Reason: err.Error()})
			continue
		}
		c.Sources = append(c.Sources, p)
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate checks the relations between settings that AWS or bulkrun's
// invariants need:
//   - Table and Bucket are set;
//   - MaxAttempts ≥ 1 and MaxReceiveCount > MaxAttempts (a message must not
//     be dead-lettered while the item still has attempts left);
//   - Lease ≥ ItemTimeout + LeaseMargin (a reservation must outlive the
//     invocation that holds it, or a redelivery could take it over while the
//     pipeline still runs);
//   - Visibility ≥ ItemTimeout (AWS refuses an SQS event source mapping whose
//     queue visibility timeout is shorter than the function timeout) and
//     Visibility ≥ Lease (a message comes back only after the lease of a
//     holder that died has ended, so it can take the item over).
func (c Config) Validate() error {
	var errs []error
	if c.Table == "" {
		errs = append(errs, &VarError{Var: EnvTable, Reason: "required"})
	}
	if c.Bucket == "" {
		errs = append(errs, &VarError{Var: EnvBucket, Reason: "required"})
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, &VarError{Var: EnvMaxAttempts, Value: strconv.Itoa(c.MaxAttempts), Reason: "must be at least 1"})
	}
	if c.ItemsPerMessage < 1 || c.ItemsPerMessage > 100 {
		errs = append(errs, &VarError{Var: EnvItemsPerMessage, Value: strconv.Itoa(c.ItemsPerMessage), Reason: "must be within 1–100"})
	}
	if c.MaxReceiveCount <= c.MaxAttempts {
		errs = append(errs, &VarError{Var: EnvMaxReceiveCount, Value: strconv.Itoa(c.MaxReceiveCount),
			Reason: fmt.Sprintf("must exceed %s (%d): a message must not be dead-lettered while its item has attempts left", EnvMaxAttempts, c.MaxAttempts)})
	}
	if c.Lease < c.ItemTimeout+LeaseMargin {
		errs = append(errs, &VarError{Var: EnvLeaseSeconds, Value: strconv.Itoa(int(c.Lease / time.Second)),
			Reason: fmt.Sprintf("must be at least the item timeout (%s) plus %s", c.ItemTimeout, LeaseMargin)})
	}
	if c.Visibility < c.Lease {
		errs = append(errs, &VarError{Var: EnvVisibilitySeconds, Value: strconv.Itoa(int(c.Visibility / time.Second)),
			Reason: fmt.Sprintf("must be at least the lease (%s): a redelivery must not arrive while the lease of a holder that died is still live", c.Lease)})
	}
	if c.Visibility < c.ItemTimeout {
		errs = append(errs, &VarError{Var: EnvVisibilitySeconds, Value: strconv.Itoa(int(c.Visibility / time.Second)),
			Reason: fmt.Sprintf("must be at least the item timeout (%s): AWS refuses the event source mapping otherwise", c.ItemTimeout)})
	}
	return errors.Join(errs...)
}

// lambdaFunctionName is Lambda's rule for a function name, optionally
// followed by a version or alias qualifier; lambdaFunctionARN for a
// function ARN ("Invoke", FunctionName, AWS Lambda API Reference:
// https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html).
var (
	lambdaFunctionName = regexp.MustCompile(`^[a-zA-Z0-9-_]{1,64}(:(\$LATEST|[a-zA-Z0-9-_]{1,128}))?$`)
	lambdaFunctionARN  = regexp.MustCompile(`^arn:aws[a-zA-Z-]*:lambda:[a-z]{2}(-gov)?-[a-z]+-\d{1}:\d{12}:function:[a-zA-Z0-9-_]{1,64}(:(\$LATEST|[a-zA-Z0-9-_]{1,128}))?$`)
)

// CheckLambdaFunction checks one EnvLambdaFunctions entry: a function
// name ("score", "score:live" with a version or alias) or a function ARN
// ("arn:aws:lambda:eu-west-1:123456789012:function:score"), by the rules
// of Lambda's Invoke FunctionName.
func CheckLambdaFunction(f string) error {
	if lambdaFunctionName.MatchString(f) || lambdaFunctionARN.MatchString(f) {
		return nil
	}
	return errors.New("want a Lambda function name (letters, digits, - and _, 1–64, optionally :version or :alias) or a function ARN arn:aws:lambda:<region>:<account>:function:<name>")
}

// LambdaFunctionName returns the function name (with its qualifier, if
// any) of an EnvLambdaFunctions entry: the entry itself for a name, the
// part after ":function:" for an ARN.
func LambdaFunctionName(f string) string {
	if _, name, ok := strings.Cut(f, ":function:"); ok {
		return name
	}
	return f
}

// CheckSourceURI checks one EnvSources entry: "s3://bucket/" (a whole
// bucket) or "s3://bucket/prefix/", the prefix ending in "/" (so that
// "data" cannot also cover "data-private/"), without "." or ".." segments.
func CheckSourceURI(uri string) error {
	rest, ok := strings.CutPrefix(uri, "s3://")
	if !ok {
		return errors.New("want s3://bucket/ or s3://bucket/prefix/")
	}
	bucket, prefix, ok := strings.Cut(rest, "/")
	if bucket == "" || !ok {
		return errors.New("want s3://bucket/ or s3://bucket/prefix/ (the bucket followed by /)")
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return errors.New("a prefix must end in /")
	}
	for _, seg := range strings.Split(strings.TrimSuffix(prefix, "/"), "/") {
		if prefix != "" && (seg == "" || seg == "." || seg == "..") {
			return fmt.Errorf("the prefix has an empty, . or .. segment")
		}
	}
	return nil
}

// Require returns a *VarError for each named variable whose field is empty.
// Functions call it for the settings only they need (e.g. the items queue).
func Require(pairs ...string) error {
	var errs []error
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			errs = append(errs, &VarError{Var: pairs[i], Reason: "required"})
		}
	}
	return errors.Join(errs...)
}

// BatchesProjection is the batch-row attributes the IndexBatches GSI
// projects besides its keys and the table's: what a batch listing shows
// and filters on (status, expiry). A write to the batch row that changes
// none of them writes nothing to the index; one that changes the status
// updates the index entry, so the listing follows the row (eventually
// consistent, as every GSI).
func BatchesProjection() []string {
	return []string{"batch_id", "status", "pipeline", "item_count", "run", "created_at_ms", "finished_at_ms",
		"expires_at_ms", "needs_attention", "submitted_by", "forgetting", "stop", "refusal"}
}

// effectTableName is DynamoDB's rule for table names: 3–255 characters of
// a-z, A-Z, 0-9, '_', '-' and '.' (Amazon DynamoDB developer guide,
// "Supported data types and naming rules in Amazon DynamoDB",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html).
var effectTableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// CheckEffectTable checks a table declared for staged writes: a valid
// DynamoDB table name, and not bulkrun's own table (own; empty when
// unknown), whose rows a pipeline must never write.
func CheckEffectTable(name, own string) error {
	if !effectTableName.MatchString(name) {
		return fmt.Errorf("not a DynamoDB table name (3–255 characters of a-z, A-Z, 0-9, _, - and .)")
	}
	if own != "" && name == own {
		return fmt.Errorf("bulkrun's own table takes no staged writes")
	}
	return nil
}

// UploadErrorKey is where the error report of a refused upload goes:
// incoming-errors/{key without incoming/}.error.json, or, when that would
// pass S3's 1,024-byte key limit (S3 user guide, "Naming Amazon S3
// objects": https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html),
// incoming-errors/_long/{hex SHA-256 of key}.error.json (the report names
// the key).
func UploadErrorKey(key string) string {
	k := UploadErrorsPrefix + strings.TrimPrefix(key, IncomingPrefix) + ".error.json"
	if len(k) > MaxS3KeyBytes {
		sum := sha256.Sum256([]byte(key))
		k = UploadErrorsPrefix + "_long/" + hex.EncodeToString(sum[:]) + ".error.json"
	}
	return k
}

// MaxS3KeyBytes is S3's limit on an object key's length in UTF-8 bytes.
const MaxS3KeyBytes = 1024

// checkEventSources checks the item function's event sources' settings
// (ItemsMaxConcurrency, the pollers), naming the variable at fault.
func (c *Config) checkEventSources(getenv func(string) string) []error {
	var errs []error
	if n := c.ItemsMaxConcurrency; n < 2 || n > 1000 {
		errs = append(errs, &VarError{Var: EnvItemsMaxConcurrency, Value: getenv(EnvItemsMaxConcurrency), Reason: "want 2–1000 (SQS event source maximum concurrency)"})
	}
	if why := CheckPollers(c.ItemsMinimumPollers, c.ItemsMaximumPollers); why != "" {
		errs = append(errs, &VarError{Var: EnvItemsMaximumPollers, Value: getenv(EnvItemsMinimumPollers) + "–" + getenv(EnvItemsMaximumPollers), Reason: why})
	}
	return errs
}

// CheckPollers checks the items queue's event source's provisioned mode:
// both 0 (standard mode), or PollersAtLeast ≤ minimum ≤ maximum ≤
// MaxItemsPollers (Lambda's own ceilings are above it). It returns the
// reason, or "".
func CheckPollers(minimum, maximum int) string {
	switch {
	case minimum == 0 && maximum == 0:
		return ""
	case minimum == 0 || maximum == 0:
		return "set both the minimum and the maximum pollers (provisioned mode), or neither"
	case minimum < PollersAtLeast || minimum > MaxItemsPollers:
		return fmt.Sprintf("minimum pollers %d: want %d–%d%s", minimum, PollersAtLeast, MaxItemsPollers, pollersWhy)
	case maximum < minimum || maximum > MaxItemsPollers:
		return fmt.Sprintf("maximum pollers %d: want the minimum (%d) to %d%s", maximum, minimum, MaxItemsPollers, pollersWhy)
	}
	return ""
}

// pollersWhy is CheckPollers' reason for its ceiling.
var pollersWhy = fmt.Sprintf(" (Lambda allows at least %d; bulkrun at most %d: each drives up to %d invocations, and its partitions are sized for 1,000 at once, the standard mode's largest maximum concurrency)",
	PollersAtLeast, MaxItemsPollers, PollerInvocations)
