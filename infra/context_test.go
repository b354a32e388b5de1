package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/infra/bulkrun"
	"github.com/bulkrun/bulkrun/shared/config"
)

var functionsDir string // temp folder with one bootstrap per function

// finalizeBootstrap is the finalize function's placeholder binary, and
// teamBootstrap a team's (pipelineCode): the template test finds them in
// the staged assets.
const (
	finalizeBootstrap = "#!/bin/sh\n# finalize, context test\n"
	teamBootstrap     = "#!/bin/sh\n# a team's submit and item, context test\n"
)

var teamCode string // temp folder with teamBootstrap

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bulkrun-app-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, fn := range []string{bulkrun.FunctionSubmit, bulkrun.FunctionItem, bulkrun.FunctionFinalize, bulkrun.FunctionSweep, bulkrun.FunctionSetup} {
		body := "#!/bin/sh\n"
		if fn == bulkrun.FunctionFinalize {
			body = finalizeBootstrap
		}
		err := os.MkdirAll(filepath.Join(dir, fn), 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte(body), 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	functionsDir = dir
	teamCode = filepath.Join(dir, "team")
	if err := os.MkdirAll(teamCode, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(teamCode, "bootstrap"), []byte(teamBootstrap), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	jsii.Close()
	os.Exit(code)
}

// TestContextCoversEveryProp guards the product line "every prop also
// settable by CDK context": each RunnerProps field is set by a context
// key, and each key sets only fields that exist. A field added to
// RunnerProps without a key fails here.
func TestContextCoversEveryProp(t *testing.T) {
	covered := map[string]string{}
	for _, c := range contextProps {
		for _, f := range c.fields {
			if _, ok := reflect.TypeFor[bulkrun.RunnerProps]().FieldByName(f); !ok {
				t.Errorf("context %s names RunnerProps.%s, which does not exist", c.key, f)
			}
			covered[f] = c.key
		}
	}
	for f := range reflect.TypeFor[bulkrun.RunnerProps]().Fields() {
		if _, ok := covered[f.Name]; !ok {
			t.Errorf("RunnerProps.%s has no context key", f.Name)
		}
	}
}

// TestContextBadValues: an unparsable value is refused naming its key,
// every bad key at once.
func TestContextBadValues(t *testing.T) {
	ctx := map[string]string{"maxAttempts": "three", "tracing": "maybe", "timeouts": "finalize", "memoryMiB": "submit=lots", "schedules": "[{"}
	_, err := propsFromContext(func(k string) string { return ctx[k] })
	if err == nil {
		t.Fatal("accepted")
	}
	for k := range ctx {
		if !strings.Contains(err.Error(), "context "+k+"=") {
			t.Errorf("error %q does not name %s", err, k)
		}
	}
}

// TestContextRefusedBySynthRules: a parsable value the Runner refuses is
// refused by bulkrun.Validate (the functions' own rules), naming the
// field; the app exits before synthesizing.
func TestContextRefusedBySynthRules(t *testing.T) {
	for _, tt := range []struct{ key, value, field string }{
		{"maxReceiveCount", "3", config.EnvMaxReceiveCount}, // ≤ max attempts (3): config.Validate's rule
		{"itemsPerMessage", "101", config.EnvItemsPerMessage},
		{"timeouts", "finalize=16m", "Timeouts[finalize]"},
		{"memoryMiB", "item=1024", "MemoryMiB[item]"},
		{"lambdaFunctions", "not a function!", config.EnvLambdaFunctions},
		{"finalizeTickSchedule", "rate(1 minutes)", "FinalizeTickSchedule"},
		{"itemsMaximumPollers", "20", "ItemsMinimumPollers, ItemsMaximumPollers"}, // the minimum missing
	} {
		t.Run(tt.key, func(t *testing.T) {
			ctx := map[string]string{"target": "emulator", "functionsDir": functionsDir, tt.key: tt.value}
			p, err := propsFromContext(func(k string) string { return ctx[k] })
			if err != nil {
				t.Fatal(err)
			}
			err = bulkrun.Validate(p)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Validate: %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

// allContext sets every context key to a value other than its default.
func allContext() map[string]string {
	return map[string]string{
		"stackName":            "ctx-stack",
		"target":               "aws",
		"functionsDir":         functionsDir,
		"itemTimeout":          "2m",
		"maxAttempts":          "4",
		"retryPolicy":          "interval_seconds=60, backoff_rate=3,max_delay_seconds=600,jitter=0.25",
		"itemsPerMessage":      "10",
		"maxReceiveCount":      "7",
		"retentionDays":        "9",
		"uploadRepeatDays":     "-1",
		"finalizeTickSchedule": "rate(2 minutes)",
		"bucketName":           "bulkrun-ctx-bucket",
		"sourceBuckets":        "ctx-source-a, ctx-source-b",
		"sourcePrefixes":       "exports/",
		"pipelineCode":         teamCode,
		"customPipelines":      "enrich",
		"pipelines":            "webhook,enrich",
		"defaultPipeline":      "webhook",
		"schedules":            `[{"name":"nightly","expression":"cron(0 2 * * ? *)","request":{"pipeline":"enrich","source":{"prefix":"s3://ctx-source-a/daily/"}}}]`,
		"webhookAllow":         "10.20.0.0/16,hooks.internal",
		"secretPrefixes":       "arn:aws:ssm:eu-west-1:123456789012:parameter/ctx/*",
		"lambdaFunctions":      "score,arn:aws:lambda:eu-west-1:123456789012:function:other:live",
		"taskStateMachines":    "orders,arn:aws:states:eu-west-1:123456789012:stateMachine:nightly",
		"effectTables":         "accounts,ledger.v2",
		"kmsKeys":              "arn:aws:kms:eu-west-1:123456789012:key/1111aaaa-0000-4000-8000-000000000001",
		"warmWritesPerSecond":  "22000",
		"warmReadsPerSecond":   "15000",
		"maxWritesPerSecond":   "30000",
		"maxManifestBytes":     "1073741824",
		"alarmTopicArn":        "arn:aws:sns:eu-west-1:123456789012:ctx-alarms",
		"tracing":              "true",
		"queueAgeAlarm":        "45m",
		"stallAlarm":           "40m",
		"noBatchEventAlarms":   "true",
		"bucketVersioning":     "true",
		"apiRateLimit":         "20",
		"apiBurstLimit":        "40",
		"itemMemoryMiB":        "1024",
		"itemsMaxConcurrency":  "150",
		"itemsMinimumPollers":  "3",
		"itemsMaximumPollers":  "15",
		"reservedConcurrency":  "submit=5,finalize=2,item=300",
		"accountConcurrency":   "2000",
		"apiGatewayAccount":    "true",
		"logLevel":             "warn",
		"tracesExporter":       "otlp",
		"tracesEndpoint":       "http://collector.internal:4318",
		"memoryMiB":            "submit=1024,finalize=2048,sweep=256",
		"timeouts":             "submit=5m,finalize=10m,sweep=7m",
	}
}

// appTemplate is a stack the app synthesized from a context, decoded.
type appTemplate struct {
	stack  awscdk.Stack
	outdir string
	res    map[string]map[string]any // logical id → resource
}

// synthApp runs the app's own path — propsFromContext, Validate,
// newStack — on ctx (with the account and region of CDK_DEFAULT_*).
func synthApp(t *testing.T, ctx map[string]string) *appTemplate {
	t.Helper()
	t.Setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
	t.Setenv("CDK_DEFAULT_REGION", "eu-west-1")
	get := func(k string) string { return ctx[k] }
	props, err := propsFromContext(get)
	if err != nil {
		t.Fatal(err)
	}
	if err := bulkrun.Validate(props); err != nil {
		t.Fatal(err)
	}
	outdir := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(outdir)})
	stack := newStack(app, get, props)
	raw, err := json.Marshal(assertions.Template_FromStack(stack, nil).ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct {
		Resources map[string]map[string]any
	}
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	return &appTemplate{stack: stack, outdir: outdir, res: tmpl.Resources}
}

// ofType returns the resources of a CloudFormation type.
func (a *appTemplate) ofType(typ string) []map[string]any {
	var out []map[string]any
	for _, r := range a.res {
		if r["Type"] == typ {
			out = append(out, r)
		}
	}
	return out
}

// props returns a resource's Properties.
func props(r map[string]any) map[string]any { p, _ := r["Properties"].(map[string]any); return p }

// function returns the function whose description is "bulkrun {name}".
func (a *appTemplate) function(t *testing.T, name string) map[string]any {
	t.Helper()
	for _, r := range a.ofType("AWS::Lambda::Function") {
		if props(r)["Description"] == "bulkrun "+name {
			return r
		}
	}
	t.Fatalf("no function %s", name)
	return nil
}

// bootstrap returns the bootstrap file of a function's staged code asset
// ({hash}.zip in the template, staged as asset.{hash}/).
func (a *appTemplate) bootstrap(t *testing.T, name string) string {
	t.Helper()
	code := props(a.function(t, name))["Code"].(map[string]any)
	hash := strings.TrimSuffix(fmt.Sprint(code["S3Key"]), ".zip")
	got, err := os.ReadFile(filepath.Join(a.outdir, "asset."+hash, "bootstrap"))
	if err != nil {
		t.Fatalf("%s asset %s: %v", name, hash, err)
	}
	return string(got)
}

// env returns a function's environment variable ("" when absent; a
// token rendered as JSON).
func (a *appTemplate) env(t *testing.T, fn, name string) string {
	t.Helper()
	vars, _ := props(a.function(t, fn))["Environment"].(map[string]any)["Variables"].(map[string]any)
	switch v := vars[name].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// has reports whether some resource of typ has properties whose JSON
// contains every fragment.
func (a *appTemplate) has(typ string, fragments ...string) bool {
	for _, r := range a.ofType(typ) {
		b, _ := json.Marshal(props(r))
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(string(b), f)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestRunnerPropsContext guards the product line "typed props for every
// setting the functions read, each settable by CDK context": one
// template check per context key (so per RunnerProps field), on the
// stack the app synthesizes from a context that sets every key to a
// non-default value. A key that stops reaching its field, or a field
// that stops reaching the template, fails its subtest.
func TestRunnerPropsContext(t *testing.T) {
	a := synthApp(t, allContext())
	checks := map[string]func(t *testing.T){
		"stackName": func(t *testing.T) {
			if got := *a.stack.StackName(); got != "ctx-stack" {
				t.Errorf("stack name %q", got)
			}
		},
		"target": func(t *testing.T) {
			if got := fmt.Sprint(props(a.function(t, "item"))["Architectures"]); got != "[arm64]" {
				t.Errorf("architectures %s, want [arm64] (aws)", got)
			}
			for _, r := range a.ofType("AWS::DynamoDB::Table") {
				if r["DeletionPolicy"] != "RetainExceptOnCreate" {
					t.Errorf("table deletion policy %v, want RetainExceptOnCreate (aws)", r["DeletionPolicy"])
				}
			}
		},
		"functionsDir": func(t *testing.T) {
			// The finalize function's code is the asset staged from
			// functionsDir/finalize: {hash}.zip, staged as asset.{hash}/.
			if got := a.bootstrap(t, "finalize"); got != finalizeBootstrap {
				t.Errorf("finalize asset: %q; want the bootstrap of functionsDir", got)
			}
		},
		"pipelineCode": func(t *testing.T) {
			for _, fn := range []string{"submit", "item"} {
				if got := a.bootstrap(t, fn); got != teamBootstrap {
					t.Errorf("%s asset: %q; want the bootstrap of pipelineCode", fn, got)
				}
				if got := a.env(t, fn, config.EnvFunction); got != fn {
					t.Errorf("%s's %s=%q", fn, config.EnvFunction, got)
				}
			}
		},
		"customPipelines": func(t *testing.T) {
			// allContext narrows with pipelines; without, the custom names
			// join the built-ins.
			b := synthApp(t, map[string]string{"target": "emulator", "functionsDir": functionsDir, "pipelineCode": teamCode, "customPipelines": "enrich,score"})
			if got := b.env(t, "submit", config.EnvPipelines); got != "enrich,lambda,score,thumbnail,webhook" {
				t.Errorf("%s=%q, want the built-ins and enrich, score", config.EnvPipelines, got)
			}
		},
		"itemTimeout": func(t *testing.T) {
			if got := props(a.function(t, "item"))["Timeout"]; got != 120.0 {
				t.Errorf("item timeout %v", got)
			}
			if got := a.env(t, "submit", config.EnvItemTimeoutSeconds); got != "120" {
				t.Errorf("%s=%q", config.EnvItemTimeoutSeconds, got)
			}
		},
		"maxAttempts": func(t *testing.T) {
			if got := a.env(t, "item", config.EnvMaxAttempts); got != "4" {
				t.Errorf("%s=%q", config.EnvMaxAttempts, got)
			}
		},
		"retryPolicy": func(t *testing.T) {
			want := `{"interval_seconds":60,"backoff_rate":3,"max_delay_seconds":600,"jitter":0.25}`
			for _, fn := range []string{"submit", "item"} {
				if got := a.env(t, fn, config.EnvRetryPolicy); got != want {
					t.Errorf("%s's %s=%q, want %s", fn, config.EnvRetryPolicy, got, want)
				}
			}
		},
		"itemsPerMessage": func(t *testing.T) {
			if got := a.env(t, "submit", config.EnvItemsPerMessage); got != "10" {
				t.Errorf("%s=%q", config.EnvItemsPerMessage, got)
			}
		},
		"maxReceiveCount": func(t *testing.T) {
			if !a.has("AWS::SQS::Queue", `"maxReceiveCount":7`) {
				t.Error("no queue redrives after 7 receives")
			}
		},
		"retentionDays": func(t *testing.T) {
			if got := a.env(t, "sweep", config.EnvRetentionDays); got != "9" {
				t.Errorf("%s=%q", config.EnvRetentionDays, got)
			}
		},
		"retentionMinutes": func(t *testing.T) {
			// The aws target refuses it (TestNewStackRefusesBadProps); the
			// emulator's functions all get it beside the days.
			b := synthApp(t, map[string]string{"target": "emulator", "functionsDir": functionsDir, "pipelineCode": teamCode, "customPipelines": "enrich", "retentionMinutes": "10"})
			for _, fn := range []string{"submit", "item", "finalize", "sweep"} {
				if got := b.env(t, fn, config.EnvRetentionMinutes); got != "10" {
					t.Errorf("%s's %s=%q, want 10", fn, config.EnvRetentionMinutes, got)
				}
			}
			if got := a.env(t, "sweep", config.EnvRetentionMinutes); got != "" {
				t.Errorf("the all-options (aws) stack sets %s=%q", config.EnvRetentionMinutes, got)
			}
		},
		"uploadRepeatDays": func(t *testing.T) {
			if got := a.env(t, "submit", config.EnvUploadRepeatDays); got != "0" {
				t.Errorf("%s=%q, want 0 (uploads not remembered)", config.EnvUploadRepeatDays, got)
			}
		},
		"finalizeTickSchedule": func(t *testing.T) {
			if !a.has("AWS::Events::Rule", `"ScheduleExpression":"rate(2 minutes)"`, `tick`) {
				t.Error("no tick rule on rate(2 minutes)")
			}
			if got := a.env(t, "submit", config.EnvTickSeconds); got != "120" {
				t.Errorf("%s=%q, want 120 (the tick's period: submit's least task heartbeat is twice it)", config.EnvTickSeconds, got)
			}
		},
		"bucketName": func(t *testing.T) {
			if !a.has("AWS::S3::Bucket", `"BucketName":"bulkrun-ctx-bucket"`) {
				t.Error("bucket not named bulkrun-ctx-bucket")
			}
		},
		"sourceBuckets": func(t *testing.T) {
			if got := a.env(t, "submit", config.EnvSources); !strings.Contains(got, "s3://ctx-source-a/") || !strings.Contains(got, "s3://ctx-source-b/") {
				t.Errorf("%s=%s", config.EnvSources, got)
			}
		},
		"sourcePrefixes": func(t *testing.T) {
			if got := a.env(t, "item", config.EnvSources); !strings.Contains(got, "bulkrun-ctx-bucket/exports/") {
				t.Errorf("%s=%s", config.EnvSources, got)
			}
		},
		"pipelines": func(t *testing.T) {
			if got := a.env(t, "submit", config.EnvPipelines); got != "webhook,enrich" {
				t.Errorf("%s=%q", config.EnvPipelines, got)
			}
		},
		"defaultPipeline": func(t *testing.T) {
			if got := a.env(t, "submit", config.EnvDefaultPipeline); got != "webhook" {
				t.Errorf("%s=%q", config.EnvDefaultPipeline, got)
			}
		},
		"schedules": func(t *testing.T) {
			if !a.has("AWS::Events::Rule", `"ScheduleExpression":"cron(0 2 * * ? *)"`, `nightly`) {
				t.Error("no nightly schedule rule")
			}
		},
		"webhookAllow": func(t *testing.T) {
			if got := a.env(t, "item", config.EnvWebhookAllow); got != "10.20.0.0/16,hooks.internal" {
				t.Errorf("%s=%q", config.EnvWebhookAllow, got)
			}
		},
		"secretPrefixes": func(t *testing.T) {
			if got := a.env(t, "submit", config.EnvSecretPrefixes); got != "arn:aws:ssm:eu-west-1:123456789012:parameter/ctx/*" {
				t.Errorf("%s=%q", config.EnvSecretPrefixes, got)
			}
			if !a.has("AWS::IAM::Policy", `"ssm:GetParameter"`, `parameter/ctx/*`) {
				t.Error("no ssm:GetParameter on the prefix")
			}
		},
		"lambdaFunctions": func(t *testing.T) {
			if got := a.env(t, "item", config.EnvLambdaFunctions); got != "score,arn:aws:lambda:eu-west-1:123456789012:function:other:live" {
				t.Errorf("%s=%q", config.EnvLambdaFunctions, got)
			}
			if !a.has("AWS::IAM::Policy", `"lambda:InvokeFunction"`, `:function:score"`) ||
				!a.has("AWS::IAM::Policy", `"lambda:InvokeFunction"`, `function:other:live`) {
				t.Error("item may not invoke both allow-listed functions")
			}
		},
		"warmWritesPerSecond": func(t *testing.T) {
			if !a.has("AWS::DynamoDB::Table", `"WriteUnitsPerSecond":22000`) {
				t.Error("the table is not warmed to 22000 writes/s")
			}
		},
		"warmReadsPerSecond": func(t *testing.T) {
			if !a.has("AWS::DynamoDB::Table", `"ReadUnitsPerSecond":15000`) {
				t.Error("the table is not warmed to 15000 reads/s")
			}
		},
		"maxWritesPerSecond": func(t *testing.T) {
			if !a.has("AWS::DynamoDB::Table", `"MaxWriteRequestUnits":30000`) {
				t.Error("no write ceiling of 30000")
			}
		},
		"kmsKeys": func(t *testing.T) {
			if !a.has("AWS::IAM::Policy", `"kms:Decrypt"`, `key/1111aaaa-0000-4000-8000-000000000001"`, `"kms:ViaService"`) {
				t.Error("no kms:Decrypt on the key through the services")
			}
		},
		"taskStateMachines": func(t *testing.T) {
			if !a.has("AWS::IAM::Policy", `"states:SendTaskSuccess"`, `:stateMachine:orders"`) ||
				!a.has("AWS::IAM::Policy", `"states:SendTaskFailure"`, `stateMachine:nightly`) ||
				!a.has("AWS::IAM::Policy", `"states:SendTaskHeartbeat"`, `stateMachine:nightly`) { // finalize's
				t.Error("finalize and submit may not answer (and send heartbeats to) both state machines' task tokens")
			}
		},
		"effectTables": func(t *testing.T) {
			if got := a.env(t, "item", config.EnvEffectTables); got != "accounts,ledger.v2" {
				t.Errorf("%s=%q", config.EnvEffectTables, got)
			}
			if !a.has("AWS::IAM::Policy", `"dynamodb:ConditionCheckItem"`, `:table/accounts"`) ||
				!a.has("AWS::IAM::Policy", `"dynamodb:ConditionCheckItem"`, `:table/ledger.v2"`) {
				t.Error("item may not stage writes on both tables")
			}
		},
		"maxManifestBytes": func(t *testing.T) {
			if got := fmt.Sprint(props(a.function(t, "submit"))["EphemeralStorage"]); got != "map[Size:2112]" {
				t.Errorf("submit ephemeral storage %s, want 2 × 1024 + 64 MiB", got)
			}
		},
		"alarmTopicArn": func(t *testing.T) {
			if !a.has("AWS::CloudWatch::Alarm", `"AlarmActions":["arn:aws:sns:eu-west-1:123456789012:ctx-alarms"]`) {
				t.Error("no alarm notifies the topic")
			}
		},
		"tracing": func(t *testing.T) {
			if got := fmt.Sprint(props(a.function(t, "finalize"))["TracingConfig"]); got != "map[Mode:Active]" {
				t.Errorf("finalize tracing %s", got)
			}
		},
		"queueAgeAlarm": func(t *testing.T) {
			if !a.has("AWS::CloudWatch::Alarm", `"MetricName":"ApproximateAgeOfOldestMessage"`, `"Threshold":2700`) {
				t.Error("no queue age alarm at 2700 s")
			}
		},
		"stallAlarm": func(t *testing.T) {
			if !a.has("AWS::CloudWatch::Alarm", `"MetricName":"RunStalledSeconds"`, `"Threshold":2400`) {
				t.Error("no run-stalled alarm at 2400 s")
			}
		},
		"noBatchEventAlarms": func(t *testing.T) {
			if a.has("AWS::Events::Rule", `"Batch Refused"`) {
				t.Error("a rule routes batch events to the alarm topic")
			}
		},
		"bucketVersioning": func(t *testing.T) {
			if !a.has("AWS::S3::Bucket", `"VersioningConfiguration":{"Status":"Enabled"}`) {
				t.Error("bucket not versioned")
			}
		},
		"apiRateLimit": func(t *testing.T) {
			if !a.has("AWS::ApiGateway::Stage", `"ThrottlingRateLimit":20`) {
				t.Error("stage rate not 20")
			}
		},
		"apiBurstLimit": func(t *testing.T) {
			if !a.has("AWS::ApiGateway::Stage", `"ThrottlingBurstLimit":40`) {
				t.Error("stage burst not 40")
			}
		},
		"itemMemoryMiB": func(t *testing.T) {
			if got := props(a.function(t, "item"))["MemorySize"]; got != 1024.0 {
				t.Errorf("item memory %v", got)
			}
		},
		"accountConcurrency": func(t *testing.T) {
			// Accepted: submit=5,finalize=2,item=300 of 2000 (the reservations' check passed).
			if props(a.function(t, "item"))["ReservedConcurrentExecutions"] != 300.0 {
				t.Error("item reservation not deployed")
			}
		},
		"apiGatewayAccount": func(t *testing.T) {
			if !a.has("Custom::BulkrunApiGatewayAccountRole", `"Replace":"true"`) {
				t.Error("the account role custom resource does not replace the account's role")
			}
		},
		"tracesExporter": func(t *testing.T) {
			if !a.has("AWS::Lambda::Function", `"OTEL_TRACES_EXPORTER":"otlp"`) {
				t.Error("no function with OTEL_TRACES_EXPORTER otlp")
			}
		},
		"tracesEndpoint": func(t *testing.T) {
			if !a.has("AWS::Lambda::Function", `"OTEL_EXPORTER_OTLP_ENDPOINT":"http://collector.internal:4318"`) {
				t.Error("no function with OTEL_EXPORTER_OTLP_ENDPOINT http://collector.internal:4318")
			}
		},
		"logLevel": func(t *testing.T) {
			// The functions filter at warn themselves; Lambda stays at INFO,
			// which keeps the metric lines (TestLogLevelKeepsMetricsAndErrors).
			if !a.has("AWS::Lambda::Function", `"ApplicationLogLevel":"INFO"`) || !a.has("AWS::Lambda::Function", `"BULKRUN_LOG_LEVEL":"warn"`) {
				t.Error("functions not at log level warn with Lambda's application level INFO")
			}
		},
		"itemsMaxConcurrency": func(t *testing.T) {
			// With the pollers set, it bounds the dead-letter queue's source.
			if n := len(a.ofType("AWS::Lambda::EventSourceMapping")); n != 2 || !a.has("AWS::Lambda::EventSourceMapping", `"MaximumConcurrency":150`) {
				t.Errorf("%d event sources, want 2, one with maximum concurrency 150", n)
			}
		},
		"itemsMinimumPollers": func(t *testing.T) {}, // with itemsMaximumPollers
		"itemsMaximumPollers": func(t *testing.T) {
			// The items queue's source in provisioned mode, without a
			// maximum concurrency (the two are exclusive); the dead-letter
			// queue's in the standard mode.
			var provisioned, standard int
			for _, m := range a.ofType("AWS::Lambda::EventSourceMapping") {
				p := props(m)
				pc, _ := p["ProvisionedPollerConfig"].(map[string]any)
				_, sc := p["ScalingConfig"]
				switch {
				case pc != nil && sc:
					t.Errorf("an event source with both provisioned pollers and a scaling config: %v", p)
				case pc != nil && pc["MinimumPollers"] == 3.0 && pc["MaximumPollers"] == 15.0:
					provisioned++
				case sc:
					standard++
				}
			}
			if provisioned != 1 || standard != 1 {
				t.Errorf("%d event sources with pollers 3–15, %d with a scaling config; want 1 and 1", provisioned, standard)
			}
			if !a.has("AWS::Lambda::Function", `"BULKRUN_ITEMS_MAXIMUM_POLLERS":"15"`, `"BULKRUN_ITEMS_MINIMUM_POLLERS":"3"`) {
				t.Error("no function told the pollers 3–15")
			}
			// The messages-resent alarm scales with what the items queue's
			// source may run: 2 × 300 s × 10 × 15.
			if !a.has("AWS::CloudWatch::Alarm", `"MetricName":"MessagesResent"`, `"Threshold":90000`) {
				t.Error("no messages-resent alarm at 90000 for 150 invocations at once")
			}
		},
		"reservedConcurrency": func(t *testing.T) {
			for fn, n := range map[string]float64{"submit": 5, "finalize": 2, "item": 300} {
				if got := props(a.function(t, fn))["ReservedConcurrentExecutions"]; got != n {
					t.Errorf("%s reserved %v, want %v", fn, got, n)
				}
			}
		},
		"memoryMiB": func(t *testing.T) {
			for fn, n := range map[string]float64{"submit": 1024, "finalize": 2048, "sweep": 256} {
				if got := props(a.function(t, fn))["MemorySize"]; got != n {
					t.Errorf("%s memory %v, want %v", fn, got, n)
				}
			}
		},
		"codeBucket": func(t *testing.T) {
			// The zips of a bucket instead of the folders: no asset is staged.
			b := synthApp(t, map[string]string{"target": "aws", "functionsDir": t.TempDir(), "codeBucket": "my-code", "codeKeyPrefix": "bulkrun/1/"})
			for _, fn := range []string{"submit", "item", "finalize", "sweep"} {
				code := fmt.Sprint(props(b.function(t, fn))["Code"])
				if code != "map[S3Bucket:my-code S3Key:bulkrun/1/"+fn+".zip]" {
					t.Errorf("%s code %s, want s3://my-code/bulkrun/1/%s.zip", fn, code, fn)
				}
			}
		},
		"codeKeyPrefix": func(t *testing.T) {}, // with codeBucket
		"timeouts": func(t *testing.T) {
			for fn, n := range map[string]float64{"submit": 300, "finalize": 600, "sweep": 420} {
				if got := props(a.function(t, fn))["Timeout"]; got != n {
					t.Errorf("%s timeout %v, want %v", fn, got, n)
				}
			}
		},
	}
	for _, c := range contextProps {
		if checks[c.key] == nil {
			t.Errorf("context key %s has no template check", c.key)
		}
	}
	keys := make([]string, 0, len(checks))
	for k := range checks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Run(k, checks[k])
	}
}

// TestRunnerPropsContextEmulator: the emulator target and
// webhookAllow=none (RunnerProps.EmptyWebhookAllow), which the AWS
// context above cannot show.
func TestRunnerPropsContextEmulator(t *testing.T) {
	a := synthApp(t, map[string]string{"target": "emulator", "functionsDir": functionsDir, "webhookAllow": "none"})
	arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[runtime.GOARCH]
	if got := fmt.Sprint(props(a.function(t, "item"))["Architectures"]); got != "["+arch+"]" {
		t.Errorf("architectures %s, want [%s] (the host's)", got, arch)
	}
	if got := a.env(t, "item", config.EnvWebhookAllow); got != "" {
		t.Errorf("%s=%q, want none", config.EnvWebhookAllow, got)
	}
	if got := *a.stack.StackName(); got != config.DefaultStackName {
		t.Errorf("stack name %q, want the default", got)
	}
	// Defaults where the context says nothing.
	for fn, n := range bulkrun.DefaultMemoryMiB {
		if got := props(a.function(t, fn))["MemorySize"]; got != float64(n) {
			t.Errorf("%s memory %v, want %d", fn, got, n)
		}
	}
}

// TestLintContextSetsEveryKey keeps tools/lint/all-options.json, the
// context of the all-options stack `make lint` lints, setting every
// context key but retentionMinutes, which the aws target refuses
// (functionsDir and pipelineCode are the build's, set by
// tools/lint/lint-templates), each to a value the app accepts.
func TestLintContextSetsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../tools/lint/all-options.json")
	if err != nil {
		t.Fatal(err)
	}
	var ctx map[string]string
	if err := json.Unmarshal(b, &ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range contextProps {
		// retentionMinutes is refused for the aws target this stack has;
		// codeBucket and codeKeyPrefix are the template's (lint-templates
		// synthesizes it with template=true).
		if _, ok := ctx[c.key]; !ok && c.key != "functionsDir" && c.key != "pipelineCode" && c.key != "retentionMinutes" && c.key != "codeBucket" && c.key != "codeKeyPrefix" {
			t.Errorf("tools/lint/all-options.json does not set %s", c.key)
		}
	}
	ctx["functionsDir"], ctx["pipelineCode"] = functionsDir, teamCode
	p, err := propsFromContext(func(k string) string { return ctx[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := bulkrun.Validate(p); err != nil {
		t.Errorf("the all-options context is refused: %v", err)
	}
}

// TestTemplateContext: template=true (make template) makes the stack a
// plain CloudFormation template: the functions' code from the parameters
// CodeBucket and CodeKeyPrefix, and nothing of the CDK bootstrap (no
// asset, no BootstrapVersion parameter nor its rule), so CloudFormation
// alone deploys it.
func TestTemplateContext(t *testing.T) {
	a := synthApp(t, map[string]string{"target": "aws", "functionsDir": functionsDir, "template": "true"})
	tmpl := assertions.Template_FromStack(a.stack, nil)
	raw, err := json.Marshal(tmpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Parameters map[string]map[string]any
		Rules      map[string]any
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(doc.Parameters))
	if !slices.Equal(names, []string{ParamCodeBucket, ParamCodeKeyPrefix}) || len(doc.Rules) != 0 {
		t.Fatalf("parameters %v, rules %v: want CodeBucket and CodeKeyPrefix only, no rule", names, doc.Rules)
	}
	for _, fn := range []string{"submit", "item", "finalize", "sweep"} {
		code, _ := json.Marshal(props(a.function(t, fn))["Code"])
		want := `{"S3Bucket":{"Ref":"CodeBucket"},"S3Key":{"Fn::Join":["",[{"Ref":"CodeKeyPrefix"},"` + fn + `.zip"]]}}`
		if string(code) != want {
			t.Errorf("%s code %s, want %s", fn, code, want)
		}
	}
	if entries, _ := os.ReadDir(a.outdir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "asset.") }) {
		t.Errorf("assets staged in %s: a template for plain CloudFormation has none", a.outdir)
	}
}
