package bulkrun

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// Placeholders for the stack's own resources in a function environment.
// settings.env holds them until NewRunner has defined the resources and
// puts their names (CloudFormation tokens) in their place (deployedEnv).
// Each is a value config.Load accepts where it stands, so derive checks
// the very environment NewRunner deploys.
const (
	refTable            = "bulkrun-ref-table"
	refBucket           = "bulkrun-ref-bucket"
	refItemsQueueURL    = "https://sqs.bulkrun-ref/items-queue"
	refFinalizeFunction = "bulkrun-ref-finalize"
	refDeadLetterARN    = "arn:aws:sqs:bulkrun-ref:000000000000:dead-letter-queue"
	refStackName        = "bulkrun-ref-stack"
)

// EnvOTLPEndpoint is OpenTelemetry's standard variable of the OTLP
// endpoint (OpenTelemetry "OTLP Exporter Configuration"), set from
// RunnerProps.TracesEndpoint; read by the SDK's exporter, not by
// config.Load.
const EnvOTLPEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"

// functionEnv returns each function's environment variables, by function
// name, in the config.Env* names and the units config.Load reads; the
// stack's own resources are the ref* placeholders.
//
//	every function   table, bucket, log level, retention, attempts, receive
//	                 count, item timeout, lease, visibility, items max
//	                 concurrency, metrics stack
//	finalize         + items queue (the tick re-sends a lost fan-out)
//	submit, item     + items queue, finalize function, pipelines, retry policy, sources,
//	                 lambda allow-list, webhook allow-list, which function
//	submit           + default pipeline, secret prefixes, ephemeral
//	                 storage, items per message (only submit applies it),
//	                 upload repeat window, finalize tick period
//	item             + dead-letter queue ARN, effect tables
func (s settings) functionEnv() map[string]map[string]string {
	common := map[string]string{
		config.EnvTable:               refTable,
		config.EnvBucket:              refBucket,
		config.EnvLogLevel:            s.logLevel,
		config.EnvRetentionDays:       strconv.Itoa(s.retentionDays),
		config.EnvMaxAttempts:         strconv.Itoa(s.maxAttempts),
		config.EnvMaxReceiveCount:     strconv.Itoa(s.maxReceiveCount),
		config.EnvItemTimeoutSeconds:  strconv.Itoa(int(s.itemTimeout / time.Second)),
		config.EnvLeaseSeconds:        strconv.Itoa(int(s.lease / time.Second)),
		config.EnvVisibilitySeconds:   strconv.Itoa(int(s.visibility / time.Second)),
		config.EnvItemsMaxConcurrency: strconv.Itoa(s.maxConcurrency),
		config.EnvMetricsStack:        refStackName,
	}
	if s.retentionMinutes > 0 {
		common[config.EnvRetentionMinutes] = strconv.Itoa(s.retentionMinutes)
	}
	if s.maxPollers > 0 && config.CheckPollers(s.minPollers, s.maxPollers) == "" {
		// Bad pollers are refused once, naming the props (checkFunctions).
		common[config.EnvItemsMinimumPollers] = strconv.Itoa(s.minPollers)
		common[config.EnvItemsMaximumPollers] = strconv.Itoa(s.maxPollers)
	}
	finalize := with(common, map[string]string{config.EnvItemsQueueURL: refItemsQueueURL})

	fanOut := with(common, map[string]string{
		config.EnvItemsQueueURL:    refItemsQueueURL,
		config.EnvFinalizeFunction: refFinalizeFunction,
		config.EnvPipelines:        strings.Join(s.pipelines, ","),
		config.EnvRetryPolicy:      s.retryPolicy, // submit stores it on a batch; item applies it to rows without one
	})
	var sources []string
	for _, b := range s.sourceBuckets {
		sources = append(sources, "s3://"+b+"/")
	}
	for _, p := range s.sourcePrefixes {
		sources = append(sources, "s3://"+refBucket+"/"+p)
	}
	setIf(fanOut, config.EnvSources, strings.Join(sources, ","))
	setIf(fanOut, config.EnvLambdaFunctions, strings.Join(s.lambdaFunctions, ",")) // checked at submit and per item
	setIf(fanOut, config.EnvWebhookAllow, s.webhookAllow)                          // checked at submit, and at dial by item
	if s.tracesExporter != "" && s.tracesExporter != config.TracesNone {
		fanOut[config.EnvTracesExporter] = s.tracesExporter // the submit's and the attempts' spans
		setIf(fanOut, EnvOTLPEndpoint, s.tracesEndpoint)
	}

	submit := with(fanOut, map[string]string{
		config.EnvFunction:            FunctionSubmit, // which function a PipelineCode binary serves
		config.EnvEphemeralStorageMiB: strconv.Itoa(s.ephemeralMiB),
		config.EnvItemsPerMessage:     strconv.Itoa(s.itemsPerMessage),
		config.EnvUploadRepeatDays:    strconv.Itoa(max(0, s.uploadRepeat)),
		config.EnvTickSeconds:         strconv.Itoa(int(SchedulePeriod(s.tick) / time.Second)), // the least task heartbeat interval
	})
	setIf(submit, config.EnvDefaultPipeline, s.defaultPipeline)
	setIf(submit, config.EnvSecretPrefixes, strings.Join(s.secretPrefixes, ","))

	item := with(fanOut, map[string]string{
		config.EnvFunction:           FunctionItem,
		config.EnvDeadLetterQueueARN: refDeadLetterARN,
	})
	setIf(item, config.EnvEffectTables, strings.Join(s.effectTables, ",")) // staged writes (shared/pipeline/effects)

	return map[string]map[string]string{
		FunctionSubmit: submit, FunctionItem: item, FunctionFinalize: finalize, FunctionSweep: common,
	}
}

// with returns a copy of base with more set.
func with(base, more map[string]string) map[string]string {
	c := make(map[string]string, len(base)+len(more))
	for k, v := range base {
		c[k] = v
	}
	for k, v := range more {
		c[k] = v
	}
	return c
}

// setIf sets env[name] to value unless value is empty.
func setIf(env map[string]string, name, value string) {
	if value != "" {
		env[name] = value
	}
}

// validationView returns config.Load's getenv over the variables of every
// function (their shared variables hold the same values), with the
// tokens a caller gave in props (a function ARN, a table name of the same
// app, which resolve at deploy) replaced by values of their kind.
func validationView(env map[string]map[string]string) func(string) string {
	all := map[string]string{}
	for _, fn := range functionNames {
		for k, v := range env[fn] {
			all[k] = v
		}
	}
	delete(all, config.EnvFunction)
	untoken := func(name, stand string) {
		var out []string
		for _, v := range strings.Split(all[name], ",") {
			if *awscdk.Token_IsUnresolved(jsii.String(v)) {
				v = stand
			}
			out = append(out, v)
		}
		all[name] = strings.Join(out, ",")
	}
	untoken(config.EnvLambdaFunctions, "arn:aws:lambda:us-east-1:000000000000:function:token")
	untoken(config.EnvEffectTables, "token-table")
	return func(k string) string { return all[k] }
}

// deployedEnv returns env with the ref* placeholders replaced by the
// resources' names, as CDK values.
func deployedEnv(env map[string]string, refs map[string]*string) *map[string]*string {
	vars := make(map[string]*string, len(env))
	for k, v := range env {
		for ref, name := range refs {
			v = strings.ReplaceAll(v, ref, *name)
		}
		vars[k] = jsii.String(v)
	}
	return &vars
}
