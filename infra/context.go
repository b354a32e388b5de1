package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/infra/bulkrun"
	"github.com/bulkrun/bulkrun/shared/api"
)

// contextProp is one CDK context key and the RunnerProps fields it sets.
type contextProp struct {
	key    string
	fields []string // the RunnerProps fields it sets
	doc    string   // the value's form, for infra/README.md
	set    func(p *bulkrun.RunnerProps, v string) error
}

// contextProps are the context keys of the app, one or more per
// RunnerProps field (TestContextCoversEveryProp checks that none is
// missing). A key that is unset or empty leaves its field at the zero
// value, which is the field's default.
var contextProps = []contextProp{
	{"target", []string{"Target"}, `"aws" (default) or "emulator"`, str(func(p *bulkrun.RunnerProps) *string { return &p.Target })},
	{"functionsDir", []string{"FunctionsDir"}, "folder with submit/, item/, finalize/, sweep/ bootstrap binaries (default ../build/functions)",
		str(func(p *bulkrun.RunnerProps) *string { return &p.FunctionsDir })},
	{"itemTimeout", []string{"ItemTimeout"}, `the item function's timeout, a Go duration in whole seconds ("30s")`,
		duration(func(p *bulkrun.RunnerProps) *time.Duration { return &p.ItemTimeout })},
	{"maxAttempts", []string{"MaxAttempts"}, "default attempts per item", integer(func(p *bulkrun.RunnerProps) *int { return &p.MaxAttempts })},
	{"retryPolicy", []string{"RetryPolicy"}, `a retry policy, JSON or name=value pairs ("interval_seconds=300,backoff_rate=2,max_delay_seconds=900,jitter=0.5")`,
		func(p *bulkrun.RunnerProps, v string) error {
			rp, err := api.ParseRetryPolicy(v)
			p.RetryPolicy = &rp
			return err
		}},
	{"itemsPerMessage", []string{"ItemsPerMessage"}, "default items per message and per ledger row, 1–100", integer(func(p *bulkrun.RunnerProps) *int { return &p.ItemsPerMessage })},
	{"maxReceiveCount", []string{"MaxReceiveCount"}, "the items queue's redrive maxReceiveCount",
		integer(func(p *bulkrun.RunnerProps) *int { return &p.MaxReceiveCount })},
	{"retentionDays", []string{"RetentionDays"}, "days a finished batch is kept", integer(func(p *bulkrun.RunnerProps) *int { return &p.RetentionDays })},
	{"retentionMinutes", []string{"RetentionMinutes"}, "emulator only: minutes a finished batch is kept, instead of retentionDays", integer(func(p *bulkrun.RunnerProps) *int { return &p.RetentionMinutes })},
	{"uploadRepeatDays", []string{"UploadRepeatDays"}, "days an upload's content is remembered (-1: none)", integer(func(p *bulkrun.RunnerProps) *int { return &p.UploadRepeatDays })},
	{"finalizeTickSchedule", []string{"FinalizeTickSchedule"}, `an EventBridge schedule expression ("rate(2 minutes)")`,
		str(func(p *bulkrun.RunnerProps) *string { return &p.FinalizeTickSchedule })},
	{"bucketName", []string{"BucketName"}, "the bucket's name", str(func(p *bulkrun.RunnerProps) *string { return &p.BucketName })},
	{"sourceBuckets", []string{"SourceBuckets"}, "comma-separated bucket names", list(func(p *bulkrun.RunnerProps) *[]string { return &p.SourceBuckets })},
	{"sourcePrefixes", []string{"SourcePrefixes"}, "comma-separated prefixes of the stack's bucket",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.SourcePrefixes })},
	{"codeBucket", []string{"CodeBucket"}, "S3 bucket holding the functions' zips ({codeKeyPrefix}{name}.zip) instead of functionsDir (make template makes it a parameter)",
		str(func(p *bulkrun.RunnerProps) *string { return &p.CodeBucket })},
	{"codeKeyPrefix", []string{"CodeKeyPrefix"}, "prefix of the zips' keys in codeBucket", str(func(p *bulkrun.RunnerProps) *string { return &p.CodeKeyPrefix })},
	{"pipelineCode", []string{"PipelineCode"}, "folder with the bootstrap of a binary built with function.Start, deployed as submit and item (make deploy PIPELINE_MODULE=…)",
		str(func(p *bulkrun.RunnerProps) *string { return &p.PipelineCode })},
	{"customPipelines", []string{"CustomPipelines"}, "comma-separated names of pipelineCode's own pipelines (what `bootstrap pipelines` prints)",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.CustomPipelines })},
	{"pipelines", []string{"Pipelines"}, "comma-separated pipeline names (make deploy PIPELINES=…)",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.Pipelines })},
	{"defaultPipeline", []string{"DefaultPipeline"}, "the pipeline of uploads that name none",
		str(func(p *bulkrun.RunnerProps) *string { return &p.DefaultPipeline })},
	{"schedules", []string{"Schedules"}, `JSON list of {"name", "expression", "request"}`, func(p *bulkrun.RunnerProps, v string) error {
		return json.Unmarshal([]byte(v), &p.Schedules)
	}},
	{"webhookAllow", []string{"WebhookAllow", "EmptyWebhookAllow"}, `comma-separated hosts, *.domains, IPs, CIDRs; "none" for none`,
		func(p *bulkrun.RunnerProps, v string) error {
			if v == "none" {
				p.EmptyWebhookAllow = true
				return nil
			}
			p.WebhookAllow = splitList(v)
			return nil
		}},
	{"secretPrefixes", []string{"SecretPrefixes"}, "comma-separated SSM parameter / Secrets Manager secret ARNs or prefixes ending in *",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.SecretPrefixes })},
	{"lambdaFunctions", []string{"LambdaFunctions"}, "comma-separated function names or ARNs the lambda pipeline may invoke",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.LambdaFunctions })},
	{"taskStateMachines", []string{"TaskStateMachines"}, "comma-separated state machine names (wildcards allowed) or ARNs whose tasks may hand batches a task token",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.TaskStateMachines })},
	{"effectTables", []string{"EffectTables"}, "comma-separated DynamoDB table names pipelines may stage writes on",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.EffectTables })},
	{"warmWritesPerSecond", []string{"WarmWritesPerSecond"}, "the table's warm write units per second (at least 4000)", integer(func(p *bulkrun.RunnerProps) *int { return &p.WarmWritesPerSecond })},
	{"warmReadsPerSecond", []string{"WarmReadsPerSecond"}, "the table's warm read units per second (at least 12000)", integer(func(p *bulkrun.RunnerProps) *int { return &p.WarmReadsPerSecond })},
	{"maxWritesPerSecond", []string{"MaxWritesPerSecond"}, "the table's write ceiling in write units per second", integer(func(p *bulkrun.RunnerProps) *int { return &p.MaxWritesPerSecond })},
	{"kmsKeys", []string{"KMSKeys"}, "comma-separated KMS key ARNs the functions may decrypt with, through S3, SSM and Secrets Manager",
		list(func(p *bulkrun.RunnerProps) *[]string { return &p.KMSKeys })},
	{"maxManifestBytes", []string{"MaxManifestBytes"}, "bytes", func(p *bulkrun.RunnerProps, v string) (err error) {
		p.MaxManifestBytes, err = strconv.ParseInt(v, 10, 64)
		return err
	}},
	{"alarmTopicArn", []string{"AlarmTopicARN"}, "an SNS topic ARN", str(func(p *bulkrun.RunnerProps) *string { return &p.AlarmTopicARN })},
	{"tracing", []string{"Tracing"}, `"true"`, boolean(func(p *bulkrun.RunnerProps) *bool { return &p.Tracing })},
	{"queueAgeAlarm", []string{"QueueAgeAlarm"}, `a Go duration ("45m")`, duration(func(p *bulkrun.RunnerProps) *time.Duration { return &p.QueueAgeAlarm })},
	{"stallAlarm", []string{"StallAlarm"}, `a Go duration ("45m")`, duration(func(p *bulkrun.RunnerProps) *time.Duration { return &p.StallAlarm })},
	{"noBatchEventAlarms", []string{"NoBatchEventAlarms"}, `"true": no rule routes threshold-exceeded, refused or paused batches to the alarm topic`, boolean(func(p *bulkrun.RunnerProps) *bool { return &p.NoBatchEventAlarms })},
	{"bucketVersioning", []string{"BucketVersioning"}, `"true"`, boolean(func(p *bulkrun.RunnerProps) *bool { return &p.BucketVersioning })},
	{"apiGatewayAccount", []string{"ApiGatewayAccount"}, `"true": the stack sets its role as the Region's account-wide API Gateway CloudWatch role even where another is set`, boolean(func(p *bulkrun.RunnerProps) *bool { return &p.ApiGatewayAccount })},
	{"tracesExporter", []string{"TracesExporter"}, "none (default) or otlp", str(func(p *bulkrun.RunnerProps) *string { return &p.TracesExporter })},
	{"tracesEndpoint", []string{"TracesEndpoint"}, "an http(s) URL", str(func(p *bulkrun.RunnerProps) *string { return &p.TracesEndpoint })},
	{"logLevel", []string{"LogLevel"}, "debug, info (default), warn or error", str(func(p *bulkrun.RunnerProps) *string { return &p.LogLevel })},
	{"apiRateLimit", []string{"APIRateLimit"}, "requests per second", func(p *bulkrun.RunnerProps, v string) (err error) {
		p.APIRateLimit, err = strconv.ParseFloat(v, 64)
		return err
	}},
	{"apiBurstLimit", []string{"APIBurstLimit"}, "requests", integer(func(p *bulkrun.RunnerProps) *int { return &p.APIBurstLimit })},
	{"itemMemoryMiB", []string{"ItemMemoryMiB"}, "MiB", integer(func(p *bulkrun.RunnerProps) *int { return &p.ItemMemoryMiB })},
	{"itemsMaxConcurrency", []string{"ItemsMaxConcurrency"}, "2–1000", integer(func(p *bulkrun.RunnerProps) *int { return &p.ItemsMaxConcurrency })},
	{"itemsMinimumPollers", []string{"ItemsMinimumPollers"}, "2–100 (provisioned mode, with itemsMaximumPollers)", integer(func(p *bulkrun.RunnerProps) *int { return &p.ItemsMinimumPollers })},
	{"itemsMaximumPollers", []string{"ItemsMaximumPollers"}, "the minimum to 100 (provisioned mode, with itemsMinimumPollers)", integer(func(p *bulkrun.RunnerProps) *int { return &p.ItemsMaximumPollers })},
	{"accountConcurrency", []string{"AccountConcurrency"}, "the account's Lambda concurrency quota (default 1000)", integer(func(p *bulkrun.RunnerProps) *int { return &p.AccountConcurrency })},
	{"reservedConcurrency", []string{"ReservedConcurrency"}, `"submit=5,finalize=2,item=200"`, func(p *bulkrun.RunnerProps, v string) (err error) {
		p.ReservedConcurrency, err = pairs(v, strconv.Atoi)
		return err
	}},
	{"memoryMiB", []string{"MemoryMiB"}, `"submit=1024,finalize=2048" (MiB)`, func(p *bulkrun.RunnerProps, v string) (err error) {
		p.MemoryMiB, err = pairs(v, strconv.Atoi)
		return err
	}},
	{"timeouts", []string{"Timeouts"}, `"finalize=10m,sweep=5m" (Go durations)`, func(p *bulkrun.RunnerProps, v string) (err error) {
		p.Timeouts, err = pairs(v, time.ParseDuration)
		return err
	}},
}

// propsFromContext builds RunnerProps from the context values get
// returns ("" for an unset key). An unparsable value is an error naming
// its key; every key is read, and the errors joined.
func propsFromContext(get func(key string) string) (*bulkrun.RunnerProps, error) {
	p := &bulkrun.RunnerProps{}
	var errs []error
	for _, c := range contextProps {
		v := strings.TrimSpace(get(c.key))
		if v == "" {
			continue
		}
		if err := c.set(p, v); err != nil {
			errs = append(errs, fmt.Errorf("infra: context %s=%q: want %s: %w", c.key, v, c.doc, err))
		}
	}
	return p, errors.Join(errs...)
}

func str(field func(*bulkrun.RunnerProps) *string) func(*bulkrun.RunnerProps, string) error {
	return func(p *bulkrun.RunnerProps, v string) error { *field(p) = v; return nil }
}

func list(field func(*bulkrun.RunnerProps) *[]string) func(*bulkrun.RunnerProps, string) error {
	return func(p *bulkrun.RunnerProps, v string) error { *field(p) = splitList(v); return nil }
}

func integer(field func(*bulkrun.RunnerProps) *int) func(*bulkrun.RunnerProps, string) error {
	return func(p *bulkrun.RunnerProps, v string) (err error) { *field(p), err = strconv.Atoi(v); return err }
}

func boolean(field func(*bulkrun.RunnerProps) *bool) func(*bulkrun.RunnerProps, string) error {
	return func(p *bulkrun.RunnerProps, v string) (err error) { *field(p), err = strconv.ParseBool(v); return err }
}

func duration(field func(*bulkrun.RunnerProps) *time.Duration) func(*bulkrun.RunnerProps, string) error {
	return func(p *bulkrun.RunnerProps, v string) (err error) { *field(p), err = time.ParseDuration(v); return err }
}

// pairs parses "name=value,name=value" with parse for each value.
func pairs[T any](v string, parse func(string) (T, error)) (map[string]T, error) {
	out := map[string]T{}
	for _, pair := range splitList(v) {
		name, raw, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not function=value", pair)
		}
		x, err := parse(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.TrimSpace(name), err)
		}
		out[strings.TrimSpace(name)] = x
	}
	return out, nil
}

// splitList splits a comma-separated context value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
