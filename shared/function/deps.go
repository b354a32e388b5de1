package function

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/internal/metric"
	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/internal/queue"
	"github.com/bulkrun/bulkrun/internal/secret"
	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/internal/trigger"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// Deps are the adapters a function uses, built once per process.
type Deps struct {
	Config  config.Config
	Log     *slog.Logger
	AWS     aws.Config
	Store   *dynamo.Store
	Blobs   *blob.Store
	Queue   *queue.Queue    // nil without EnvItemsQueueURL
	Trigger *trigger.Lambda // nil without EnvFinalizeFunction
	S3      *s3.Client
	// Metrics writes CloudWatch EMF lines to stdout; nil (none) without
	// config.EnvMetricsStack.
	Metrics *metric.Emitter
	// Traces makes the submit's, the attempts' and the pipeline calls'
	// spans with the exporter config.EnvTracesExporter names; nil (no-op)
	// with none, the default.
	Traces *tracing.Provider
}

// AWSConfig loads the SDK configuration from the environment (credentials,
// region, and AWS_ENDPOINT_URL for an emulator), with bulkrun's retryer
// (awsfault.Retryer: no client-side retry quota), a new one per client.
func AWSConfig(ctx context.Context) (aws.Config, error) {
	c, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRetryer(awsfault.Retryer))
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS config: %w", err)
	}
	return c, nil
}

// Environment returns the variables config.Load reads: getenv's, and,
// when getenv names a settings parameter (config.EnvSettingsParameter),
// the variables it holds (secret.Settings through c), which win over
// getenv's. An error names the parameter.
func Environment(ctx context.Context, c aws.Config, getenv func(string) string) (func(string) string, error) {
	name := getenv(config.EnvSettingsParameter)
	if name == "" {
		return getenv, nil
	}
	vars, err := secret.Settings(ctx, c, name)
	if err != nil {
		return nil, err
	}
	return func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return getenv(k)
	}, nil
}

// NewS3 is blob.NewS3: an S3 client, path-style against an emulator.
func NewS3(c aws.Config) *s3.Client { return blob.NewS3(c) }

// The blob store is the thumbnail pipeline's source (registered.Build).
var _ thumbnail.Source = (*blob.Store)(nil)

// Build sets the Go runtime's memory limit from the function's memory
// (SetMemoryLimit), loads the configuration and builds the adapters of
// function ("submit", "item", "finalize", "sweep"), whose every AWS client
// carries the SDK application id config.AppID(function). The
// configuration is the environment and, when config.EnvSettingsParameter
// names one, the function's settings parameter, read once here
// (Environment).
func Build(ctx context.Context, function string) (*Deps, error) {
	SetMemoryLimit()
	ac, err := AWSConfig(ctx)
	if err != nil {
		return nil, err
	}
	ac.AppID = config.AppID(function)
	getenv, err := Environment(ctx, ac, os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(getenv)
	log := handler.Logger(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	d := &Deps{Config: cfg, Log: log, AWS: ac}
	if stack := os.Getenv(config.EnvMetricsStack); stack != "" {
		d.Metrics = metric.New(stack)
	}
	if d.Traces, err = tracing.New(ctx, cfg.TracesExporter); err != nil {
		return nil, err
	}
	d.S3 = NewS3(ac)
	d.Store = dynamo.New(dynamodb.NewFromConfig(ac), cfg.Table)
	// Rows outlive a finished batch's retention by TTLGrace at least
	// (finalize extends any that would not).
	d.Store.RowTTL = cfg.Retention + ledger.TTLGrace
	d.Blobs = blob.New(d.S3, cfg.Bucket)
	if cfg.ItemsQueueURL != "" {
		d.Queue = queue.New(sqs.NewFromConfig(ac), cfg.ItemsQueueURL)
	}
	if cfg.FinalizeFunction != "" {
		d.Trigger = trigger.New(lambda.NewFromConfig(ac), cfg.FinalizeFunction)
	}
	return d, nil
}

// Self is a trigger of the running function itself (its name from
// AWS_LAMBDA_FUNCTION_NAME, which Lambda sets, "Defined runtime
// environment variables"); nil outside Lambda.
func (d *Deps) Self() *trigger.Lambda {
	name := os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	if name == "" {
		return nil
	}
	return trigger.New(lambda.NewFromConfig(d.AWS), name)
}

// Submitter builds the submit workflow from d, with the built-in
// pipelines and custom (the binary's own, package shared/function).
func (d *Deps) Submitter(custom ...registered.Declaration) (*submit.Submitter, error) {
	if err := config.Require(config.EnvItemsQueueURL, d.Config.ItemsQueueURL, config.EnvFinalizeFunction, d.Config.FinalizeFunction); err != nil {
		return nil, err
	}
	// The same registry as the item function's, for names and options.
	reg, err := registered.Build(registered.Deps{Source: d.Blobs, WebhookAllow: d.Config.WebhookAllow, LambdaFunctions: d.Config.LambdaFunctions}, custom...)
	if err != nil {
		return nil, err
	}
	// Submit accepts the names the stack set (a subset of the registry,
	// checked at synth), else every registered one.
	names := d.Config.Pipelines
	if len(names) == 0 {
		names = reg.Names()
	}
	s := &submit.Submitter{
		Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Trigger: d.Trigger, Clock: ledger.SystemClock{},
		Log: d.Log, Pipelines: names, Registry: reg, MaxAttempts: d.Config.MaxAttempts, ItemsPerMessage: d.Config.ItemsPerMessage, MaxReceiveCount: d.Config.MaxReceiveCount, TempDir: os.TempDir(),
		SecretPrefixes: d.Config.SecretPrefixes, Retry: new(d.Config.RetryPolicy), ItemTimeout: d.Config.ItemTimeout, TickPeriod: d.Config.TickPeriod,
		TempLimitBytes: int64(d.Config.EphemeralMiB) << 20, Retention: d.Config.Retention, UploadRepeatWindow: d.Config.UploadRepeat,
		Sources:        d.SourcePolicy(),
		Regions:        d.Blobs,
		Region:         d.AWS.Region,
		ItemsPerSecond: ledger.StackFlow(d.Config.ItemsConcurrency(), config.DefaultItemBatchSize),
		// A small batch's item messages are sent by submit itself, one
		// delivery sooner than by a fan-out message.
		FanOutHere: submit.DefaultFanOutHere,
		Metrics:    d.Metrics,
		// A JSON Lines object over submit.DefaultPartBytes is read by parts,
		// wherever it is read, so its digest is always the parts digest.
		Parts: &submit.PartsConfig{},
		Bus:   d.Bus(),   // Batch State Change: submitted, running, refused
		Tasks: d.Tasks(), // a refused batch's task token
		// The submit's span; the batch stores its context.
		Traces: d.Traces,
	}
	if self := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); self != "" {
		// In Lambda: an S3 source is read by the function invoking itself
		// asynchronously, so the API answers in bounded time, and a large
		// one by one invocation per part, at once.
		self := trigger.New(lambda.NewFromConfig(d.AWS), self)
		s.Handoff, s.Parts.Handoff = self, self
	}
	return s, nil
}

// Bus returns the EventBridge adapter on the account's default bus.
func (d *Deps) Bus() *event.Bus {
	return event.New(eventbridge.NewFromConfig(d.AWS), "", d.Config.Bucket)
}

// Tasks returns the Step Functions adapter that answers task tokens.
func (d *Deps) Tasks() *event.Tasks {
	return event.NewTasks(sfn.NewFromConfig(d.AWS))
}

// SourcePolicy is what sources and items may read: the stack bucket's
// upload prefixes and config.EnvSources (source.SourcePolicy).
func (d *Deps) SourcePolicy() source.SourcePolicy {
	return source.SourcePolicy{Bucket: d.Config.Bucket, Allowed: d.Config.Sources}
}

// Finalizer builds the finalize workflow from d.
func (d *Deps) Finalizer() *finalize.Finalizer {
	f := &finalize.Finalizer{Store: d.Store, Blobs: d.Blobs, Clock: ledger.SystemClock{}, Log: d.Log, Retention: d.Config.Retention, Metrics: d.Metrics,
		Events: d.Bus(), Bus: d.Bus(), Tasks: d.Tasks()}
	if d.Config.Lease > 0 {
		// Counters that stood still for a whole lease cannot be waiting for
		// an item in flight (its lease has ended): a crashed invocation's
		// outcomes, written but never counted, are counted from the rows
		// then rather than after the 5-minute default (a stack with a
		// short item timeout finishes such a run sooner).
		f.Stall = min(5*time.Minute, d.Config.Lease)
	}
	if d.Queue != nil {
		// The tick re-sends a fan-out that a dead submit or resume left unsent.
		f.FanOut = (&submit.Submitter{Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Clock: ledger.SystemClock{}, Log: d.Log}).FanOut
		// The tick settles what a stop's wake left held (a busy pack).
		waker := &held.Waker{Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Clock: ledger.SystemClock{}, Log: d.Log}
		f.Settle = func(ctx context.Context, b ledger.Batch) error {
			_, err := waker.Settle(ctx, b, control.WakeTime)
			return err
		}
	}
	return f
}
