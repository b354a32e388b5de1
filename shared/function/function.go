// Package function is the wiring of bulkrun's four Lambda functions: it
// loads the configuration, builds the adapters and the engines once per
// process (Build, Deps) and starts each function's event router
// (internal/handler) — StartSubmit, StartItem, StartFinalize,
// StartSweep; functions/*/main.go call one of them and nothing else.
//
// For Go pipelines of a team's own it starts the submit and item
// functions with the built-in pipelines and any Go pipelines the caller
// declares. bulkrun's own binaries (functions/submit, functions/item)
// declare none. A team that writes its own Go pipeline builds one binary
// from its own module whose main is
//
//	func main() {
//		if err := function.Start(context.Background(), mine.Pipelines...); err != nil {
//			log.Fatal(err)
//		}
//	}
//
// and gives its folder to the construct (RunnerProps.PipelineCode) with
// the pipelines' names (RunnerProps.CustomPipelines:
// registered.Declared of the same declarations); the stack deploys that
// binary as both the submit and the item function. Submit then accepts
// the names and checks their options (pipeline.OptionsValidator), and the
// item function runs them. docs/pipelines.md "Write your own pipeline".
//
// Every function here returns only when the process cannot start (a
// missing variable, a bad declaration, a stack naming a pipeline the
// binary does not register); lambda.Start never returns otherwise.
//
// API: Start, StartSubmit, StartItem, ListArg, SubmitName and ItemName
// are part of bulkrun's Go API (docs/packages.md); Deps, Build and the
// rest of the wiring are not, and the handlers live in internal/handler.
package function

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bulkrun/bulkrun/internal/handler"

	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/internal/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/internal/secret"
	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline/effects"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
	"github.com/bulkrun/bulkrun/shared/sample"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// Names of the functions Start serves, the values of config.EnvFunction.
const (
	SubmitName = "submit"
	ItemName   = "item"
)

// ListArg is the one argument that makes Start print the names of the
// binary's own pipelines (custom, not the built-ins), one per line, and
// return without starting: how a build learns the names to give the stack
// (`go run ./cmd/pipelines pipelines`; the Makefile's CUSTOM_PIPELINES).
const ListArg = "pipelines"

// Start serves the function config.EnvFunction names (Submit or Item)
// with the built-in pipelines and custom. Run with the single argument
// ListArg, it prints the names of custom, one per line, to stdout and
// returns nil. Its errors: a bad declaration (registered.Check), an
// EnvFunction that is neither, and StartSubmit's and StartItem's.
func Start(ctx context.Context, custom ...registered.Declaration) error {
	if len(os.Args) == 2 && os.Args[1] == ListArg {
		return list(os.Stdout, custom)
	}
	switch fn := os.Getenv(config.EnvFunction); fn {
	case SubmitName:
		return StartSubmit(ctx, custom...)
	case ItemName:
		return StartItem(ctx, custom...)
	default:
		return fmt.Errorf("function: %s=%q: want %q or %q (the stack sets it on the functions it deploys this binary as)", config.EnvFunction, fn, SubmitName, ItemName)
	}
}

// list writes the names of custom, one per line, after checking them.
func list(w io.Writer, custom []registered.Declaration) error {
	if err := registered.Check(custom...); err != nil {
		return err
	}
	for _, d := range custom {
		if _, err := fmt.Fprintln(w, d.Name); err != nil {
			return err
		}
	}
	return nil
}

// StartSubmit serves the submit function (the REST API, uploads under
// incoming/, schedule and submit ticks): submit checks a batch's pipeline
// name against config.EnvPipelines (the stack's list) and its options
// against the registry of the built-ins and custom. It fails when
// config.EnvPipelines names a pipeline that registry lacks
// (registered.CheckListed).
func StartSubmit(ctx context.Context, custom ...registered.Declaration) error {
	d, err := Build(ctx, SubmitName)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if err := registered.CheckListed(d.Config.Pipelines, custom...); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	s, err := d.Submitter(custom...)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	api := handler.NewAPI(s, d.Store, d.Blobs, d.Log)
	api.Control.Bus = d.Bus()                      // Batch Paused / Unpaused of a caller's pause
	api.Control.ItemTimeout = d.Config.ItemTimeout // when a live view says stalled
	h := &handler.Submit{
		API:             api,
		Submitter:       s,
		Heads:           d.Blobs,
		Blobs:           d.Blobs,
		Events:          d.Bus(),
		DefaultPipeline: d.Config.DefaultPipeline,
		Log:             d.Log,
	}
	return serve(ctx, h.Router(), d.Traces)
}

// StartItem serves the item function: it runs item messages from the
// items queue with the built-in pipelines and custom, and records
// dead-lettered ones. It fails when config.EnvPipelines names a pipeline
// that it does not register (registered.CheckListed).
func StartItem(ctx context.Context, custom ...registered.Declaration) error {
	d, err := Build(ctx, ItemName)
	if err != nil {
		return fmt.Errorf("item: %w", err)
	}
	if err := config.Require(config.EnvItemsQueueURL, d.Config.ItemsQueueURL, config.EnvFinalizeFunction, d.Config.FinalizeFunction); err != nil {
		return fmt.Errorf("item: %w", err)
	}
	if err := registered.CheckListed(d.Config.Pipelines, custom...); err != nil {
		return fmt.Errorf("item: %w", err)
	}
	// An item's {bucket, key} may name only what a source may (source.SourcePolicy).
	src := source.GuardedSource{Source: d.Blobs, Policy: d.SourcePolicy()}
	reg, err := registered.Build(registered.Deps{Source: src, WebhookAllow: d.Config.WebhookAllow,
		Lambda: lambdafn.SDK{Client: awslambda.NewFromConfig(d.AWS)}, LambdaFunctions: d.Config.LambdaFunctions}, custom...)
	if err != nil {
		return fmt.Errorf("item: %w", err)
	}
	h := &handler.Item{
		Worker: &worker.Worker{
			Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Trigger: d.Trigger, Clock: ledger.SystemClock{},
			Log: d.Log, Pipelines: reg, Lease: d.Config.Lease, Metrics: d.Metrics.Buffered(), Secrets: secret.New(d.AWS, 0),
			Staging: effects.Staging(d.Config.EffectTables), Retry: new(d.Config.RetryPolicy), Bus: d.Bus(), Traces: d.Traces,
			// The worker's default 10 s margin, but at most a third of a
			// short item timeout (a 10 s function keeps 3.3 s, not all).
			Margin: workerMargin(d.Config.ItemTimeout),
			// The messages the items event source runs at once, for a
			// sample's estimate of its rest's pace.
			Parallel: d.Config.ItemsConcurrency() * config.DefaultItemBatchSize,
			// ... and how they start: scaled up from a few invocations of
			// that many messages (shared/sample.Ramp).
			PerInvocation: config.DefaultItemBatchSize,
			Ramp:          itemsRamp(d.Config),
			// An item withheld under a halt lifted meanwhile is woken at once.
			Wake: &held.Waker{Store: d.Store, Blobs: d.Blobs, Queue: d.Queue, Clock: ledger.SystemClock{}, Log: d.Log},
		},
		DeadLetterARN: d.Config.DeadLetterARN,
	}
	return serve(ctx, h.Router(), d.Traces)
}

// workerMargin is the item worker's margin before the invocation deadline:
// 10 s (the worker's default), at most a third of timeout when that is
// shorter; 0 (the worker's default) when timeout is unknown.
func workerMargin(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return 0
	}
	return min(10*time.Second, timeout/3)
}

// serve starts r as the process's Lambda handler; it returns only when
// the runtime cannot start. With an exporter (traces not nil), each
// invocation exports its spans before it returns (Lambda may freeze the
// process after); a failed export is logged by OpenTelemetry's handler
// and never fails the invocation.
func serve(ctx context.Context, r handler.Router, traces *tracing.Provider) error {
	h := r.Handle
	if traces != nil {
		h = func(ctx context.Context, raw json.RawMessage) (any, error) {
			defer func() { _ = traces.Flush(context.WithoutCancel(ctx)) }()
			return r.Handle(ctx, raw)
		}
	}
	lambda.StartWithOptions(h, lambda.WithContext(ctx))
	return nil
}

// itemsRamp is how the items queue's event source scales: from its
// ready pollers in provisioned mode, from a few invocations otherwise.
func itemsRamp(c config.Config) sample.Ramp {
	if c.Provisioned() {
		return sample.ProvisionedRamp(c.ItemsMinimumPollers, config.PollerInvocations)
	}
	return sample.StandardRamp
}
