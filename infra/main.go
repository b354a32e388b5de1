// Command infra is bulkrun's CDK app: one stack holding the bucket, the
// table, the items queue and its dead-letter queue, the submit, item and
// finalize functions, the FinalizeTick schedule and the REST API.
//
// Run it through the cdk CLI from infra/ (cdk.json says "go run ."). Context
// keys (-c key=value):
//
//	target         "aws" (default) or "emulator"
//	functionsDir   folder with submit/, item/, finalize/ bootstrap binaries
//	               (default "../build/functions")
//	stackName      the CloudFormation stack name (default config.DefaultStackName)
//	bucketName     the bucket name (default "bulkrun-{account}-{region}")
//	sourceBuckets  comma-separated buckets submit and item may read sources from
//	sourcePrefixes comma-separated prefixes of the stack's bucket sources may name,
//	               besides incoming/ and uploads/ (default none; "it-sources/" on the emulator)
//	pipelines      comma-separated pipeline names submit accepts, some of those
//	               registered in shared/pipeline/registered (default all of them)
//	defaultPipeline the pipeline of uploads whose metadata names none (default none)
//	webhookAllow   comma-separated hosts, *.domains, IPs and CIDRs the webhook
//	               may reach although non-public (default none on aws;
//	               "127.0.0.1,::1,localhost" on emulator; "none" for none)
//	secretPrefixes comma-separated SSM parameter / Secrets Manager secret ARNs
//	               or ARN prefixes ending in * that batches may reference
//	               (default none on aws; "…:parameter/bulkrun/*" and
//	               "…:secret:bulkrun/*" in the emulator's account on emulator)
//	schedules      JSON list of {"name", "expression", "request"} (see Schedule; default none)
//	itemMemoryMiB  the item function's memory in MiB (default 512)
//	itemsMaxConcurrency the SQS event sources' maximum concurrency, 2–1000 (default 100)
//	reservedConcurrency reserved concurrency per function, e.g. "submit=5,finalize=2,item=200" (default none)
//	maxManifestBytes the largest manifest submit is sized for, in bytes; sets its
//	               ephemeral storage (see StackProps.MaxManifestBytes; default 224 MiB)
//	alarmTopicArn, tracing, queueAgeAlarm, bucketVersioning, apiRateLimit,
//	apiBurstLimit  the operations props (see opsContext)
//	itemTimeout    the item function's timeout as a Go duration, whole seconds
//	               ("30s"; default config.DefaultItemTimeout); the lease and
//	               the queues' visibility follow it (see StackProps.ItemTimeout)
//
// The account and region come from CDK_DEFAULT_ACCOUNT and
// CDK_DEFAULT_REGION, which the cdk CLI sets from the caller's credentials.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

func main() {
	defer jsii.Close()

	app := awscdk.NewApp(nil)
	var schedules []Schedule
	if raw := contextString(app, "schedules", ""); raw != "" {
		if err := json.Unmarshal([]byte(raw), &schedules); err != nil {
			fmt.Fprintf(os.Stderr, "infra: context schedules: %v\n", err)
			os.Exit(2)
		}
	}
	var itemTimeout time.Duration
	if raw := contextString(app, "itemTimeout", ""); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil {
			fmt.Fprintf(os.Stderr, "infra: context itemTimeout: %v\n", err)
			os.Exit(2)
		}
		itemTimeout = d
	}
	props := &StackProps{
		ItemTimeout:     itemTimeout,
		Target:          contextString(app, "target", TargetAWS),
		FunctionsDir:    contextString(app, "functionsDir", DefaultFunctionsDir),
		BucketName:      contextString(app, "bucketName", ""),
		SourceBuckets:   splitList(contextString(app, "sourceBuckets", "")),
		SourcePrefixes:  splitList(contextString(app, "sourcePrefixes", "")),
		Pipelines:       splitList(contextString(app, "pipelines", "")),
		DefaultPipeline: contextString(app, "defaultPipeline", ""),
		Schedules:       schedules,
	}
	props.SecretPrefixes = splitList(contextString(app, "secretPrefixes", ""))
	switch allow := contextString(app, "webhookAllow", ""); allow {
	case "":
	case "none":
		props.EmptyWebhookAllow = true
	default:
		props.WebhookAllow = splitList(allow)
	}
	if raw := contextString(app, "maxManifestBytes", ""); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "infra: context maxManifestBytes %q: want a whole number of bytes\n", raw)
			os.Exit(2)
		}
		props.MaxManifestBytes = n
	}
	if err := opsContext(func(k string) string { return contextString(app, k, "") }, props); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for key, dst := range map[string]*int{"itemMemoryMiB": &props.ItemMemoryMiB, "itemsMaxConcurrency": &props.ItemsMaxConcurrency} {
		if raw := contextString(app, key, ""); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil {
				fmt.Fprintf(os.Stderr, "infra: context %s %q: want a whole number\n", key, raw)
				os.Exit(2)
			}
			*dst = n
		}
	}
	for _, pair := range splitList(contextString(app, "reservedConcurrency", "")) {
		fn, raw, _ := strings.Cut(pair, "=")
		n, err := strconv.Atoi(raw)
		if err != nil {
			fmt.Fprintf(os.Stderr, "infra: context reservedConcurrency %q: want function=number\n", pair)
			os.Exit(2)
		}
		if props.ReservedConcurrency == nil {
			props.ReservedConcurrency = map[string]int{}
		}
		props.ReservedConcurrency[strings.TrimSpace(fn)] = n
	}
	stackName := contextString(app, "stackName", config.DefaultStackName)
	props.StackName = jsii.String(stackName)
	env := &awscdk.Environment{}
	if a := os.Getenv("CDK_DEFAULT_ACCOUNT"); a != "" {
		env.Account = jsii.String(a)
	}
	if r := os.Getenv("CDK_DEFAULT_REGION"); r != "" {
		env.Region = jsii.String(r)
	}
	props.Env = env

	if _, err := NewStack(app, stackName, props); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	app.Synth(nil)
}

// contextString returns the CDK context value for key, or def when unset.
func contextString(app awscdk.App, key, def string) string {
	v := app.Node().TryGetContext(jsii.String(key))
	if v == nil {
		return def
	}
	s, ok := v.(string)
	if !ok || s == "" {
		return def
	}
	return s
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
