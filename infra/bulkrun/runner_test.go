package bulkrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// Synthesis costs seconds, so each target is synthesized once and shared:
// the emulator stack with the defaults, the AWS stack with non-default
// props so that every value can be traced from props to the template.

var functionsDir string // temp folder with submit/, item/, finalize/, sweep/, setup/ bootstrap files

var teamCode string // temp folder with a team's bootstrap (PipelineCode)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bulkrun-infra-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, fn := range []string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep, "setup"} {
		err := os.MkdirAll(filepath.Join(dir, fn), 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n"), 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	functionsDir = dir
	// A team's binary (PipelineCode), declaring "enrich".
	teamCode = filepath.Join(dir, "team")
	if err := os.MkdirAll(teamCode, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(teamCode, "bootstrap"), []byte("#!/bin/sh\n# team\n"), 0o755)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	jsii.Close()
	os.Exit(code)
}

// testProps returns the props a target's shared stack is built with.
func testProps(target string) *RunnerProps {
	if target == TargetEmulator {
		return &RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir}
	}
	return &RunnerProps{

		Target:          TargetAWS,
		FunctionsDir:    functionsDir,
		ItemTimeout:     2 * time.Minute,
		MaxAttempts:     4,
		MaxReceiveCount: 7,
		RetentionDays:   9,
		BucketName:      "bulkrun-test-bucket",
		SourceBuckets:   []string{"source-a", "source-b"},
		PipelineCode:    teamCode,
		CustomPipelines: []string{"enrich"},
		Pipelines:       []string{"thumbnail", "webhook", "enrich"},
		WebhookAllow:    []string{"10.20.0.0/16", "hooks.internal"},
		SecretPrefixes:  []string{"arn:aws:ssm:eu-west-1:123456789012:parameter/hooks/*", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hooks/*"},
		LambdaFunctions: []string{"score", "arn:aws:lambda:eu-west-1:123456789012:function:other:live"},
		EffectTables:    []string{"accounts"},
		KMSKeys:         []string{"arn:aws:kms:eu-west-1:123456789012:key/1111aaaa-0000-4000-8000-000000000001", "arn:aws:kms:eu-central-1:210987654321:key/2222bbbb-0000-4000-8000-000000000002"},
		Schedules: []Schedule{{Name: "nightly", Expression: "cron(0 2 * * ? *)",
			Request: json.RawMessage(`{"pipeline":"enrich","source":{"prefix":"s3://source-a/daily/"}}`)}},
		MaxManifestBytes:    1 << 30,
		ItemMemoryMiB:       1024,
		ReservedConcurrency: map[string]int{FunctionSubmit: 5, FunctionFinalize: 2, FunctionItem: 300},
		ItemsMaxConcurrency: 150,
	}
}

// want is what the shared stacks must carry, derived from testProps by hand
// (not by the code under test).
type want struct {
	itemTimeoutSeconds, maxAttempts, maxReceiveCount, retentionDays int
	pipelines                                                       []string
	arch                                                            string
	deletionPolicy                                                  string
	itemMemoryMiB, itemsMaxConcurrency                              int
	reserved                                                        map[string]float64 // by function; absent: none
}

func wanted(target string) want {
	if target == TargetEmulator {
		arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[runtime.GOARCH]
		return want{300, 3, 10, 30, []string{"lambda", "thumbnail", "webhook"}, arch, "Delete", 512, 100, nil}
	}
	return want{120, 4, 7, 9, []string{"thumbnail", "webhook", "enrich"}, "arm64", "RetainExceptOnCreate", 1024, 150,
		map[string]float64{FunctionSubmit: 5, FunctionFinalize: 2, FunctionItem: 300}}
}

var targets = []string{TargetEmulator, TargetAWS}

// synthesized is one target's stack and its template.
type synthesized struct {
	target   string
	props    *RunnerProps
	stack    awscdk.Stack
	template assertions.Template
	json     map[string]any // the template, decoded into plain Go values
	ids      map[string]string
}

var (
	synthMu     sync.Mutex
	synthCache  = map[string]*synthesized{}
	synthFailed = map[string]string{} // target → why its synthesis failed
)

// synth returns the shared stack of target, synthesizing it on first use.
func synth(t *testing.T, target string) *synthesized {
	t.Helper()
	synthMu.Lock()
	defer synthMu.Unlock()
	if s, ok := synthCache[target]; ok {
		return s
	}
	if why, ok := synthFailed[target]; ok {
		t.Fatalf("synthesize %s failed earlier: %s", target, why)
	}
	// A template the assertions library refuses (a dependency cycle, say)
	// panics through jsii: fail this test, not the whole binary.
	defer func() {
		if r := recover(); r != nil {
			synthFailed[target] = fmt.Sprint(r)
			t.Fatalf("synthesize %s: %v", target, r)
		}
	}()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	props := testProps(target)
	stack, err := NewStack(app, config.DefaultStackName, props)
	if err != nil {
		t.Fatalf("NewStack(%s): %v", target, err)
	}
	tmpl := assertions.Template_FromStack(stack, nil)
	raw, err := json.Marshal(tmpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	s := &synthesized{target: target, props: props, stack: stack, template: tmpl, ids: map[string]string{}}
	if err := json.Unmarshal(raw, &s.json); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string][]string{
		"bucket":                     {"Bucket"},
		"table":                      {"Table"},
		"items":                      {"ItemsQueue"},
		"dlq":                        {"ItemsDeadLetterQueue"},
		"parking":                    {"ItemsParkingQueue"},
		"parkingAlarm":               {"ParkingAlarm"},
		"permission":                 {"SubmitFromBucket"},
		"tick":                       {"FinalizeTick"},
		"submitFailures":             {"SubmitFailuresQueue"},
		"submitFailuresAlarm":        {"SubmitFailuresAlarm"},
		"invokeFailures":             {"InvokeFailuresQueue"},
		"invokeFailuresAlarm":        {"InvokeFailuresAlarm"},
		"scheduleDLQ":                {"ScheduleDeadLetterQueue"},
		"scheduleDLQAlarm":           {"ScheduleDeadLetterAlarm"},
		FunctionSubmit:               {FunctionSubmit},
		FunctionItem:                 {FunctionItem},
		FunctionFinalize:             {FunctionFinalize},
		FunctionSweep:                {FunctionSweep},
		"policy:" + FunctionSweep:    {FunctionSweep, "ServiceRole", "DefaultPolicy"},
		"policy:" + FunctionSubmit:   {FunctionSubmit, "ServiceRole", "DefaultPolicy"},
		"policy:" + FunctionItem:     {FunctionItem, "ServiceRole", "DefaultPolicy"},
		"policy:" + FunctionFinalize: {FunctionFinalize, "ServiceRole", "DefaultPolicy"},
	} {
		s.ids[name] = logicalID(stack, path...)
	}
	synthCache[target] = s
	return s
}

// logicalID returns the logical id of the CloudFormation resource at path
// (construct ids below the stack's Runner), or of its default child.
func logicalID(stack awscdk.Stack, path ...string) string {
	var c constructs.IConstruct = stack.Node().FindChild(jsii.String(runnerID))
	for _, p := range path {
		c = c.Node().FindChild(jsii.String(p))
	}
	el, ok := c.(awscdk.CfnElement)
	if !ok {
		el = c.Node().DefaultChild().(awscdk.CfnElement)
	}
	return *stack.GetLogicalId(el)
}

// resource returns the template's resource with logical id, failing the
// test when it is absent.
func (s *synthesized) resource(t *testing.T, id string) map[string]any {
	t.Helper()
	r, ok := s.json["Resources"].(map[string]any)[id].(map[string]any)
	if !ok {
		t.Fatalf("%s: no resource %s", s.target, id)
	}
	return r
}

// props returns the Properties of the resource with logical id.
func (s *synthesized) properties(t *testing.T, id string) map[string]any {
	t.Helper()
	p, _ := s.resource(t, id)["Properties"].(map[string]any)
	return p
}

// resourcesOfType returns the resources of a CloudFormation type by logical id.
func (s *synthesized) resourcesOfType(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.json["Resources"].(map[string]any) {
		if m := r.(map[string]any); m["Type"] == typ {
			out[id] = m
		}
	}
	return out
}

// pseudo are the values resolve gives CloudFormation's pseudo parameters.
var pseudo = map[string]string{"AWS::Partition": "aws", "AWS::AccountId": "123456789012", "AWS::Region": "eu-west-1",
	"AWS::StackId": "arn:aws:cloudformation:eu-west-1:123456789012:stack/bulkrun/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}

// stackUUID is the UUID of pseudo's stack id: the generated bucket name
// is "bulkrun-" + it.
const stackUUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

// resolve evaluates v as CloudFormation would, for the intrinsics the
// stack uses in names and ARNs: strings, Fn::Join, and Refs of pseudo
// parameters. A Ref or Fn::GetAtt of a resource becomes "{id}" or "{id.Attr}".
func resolve(t *testing.T, v any) string {
	t.Helper()
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if r, ok := x["Ref"].(string); ok {
			if p, ok := pseudo[r]; ok {
				return p
			}
			return "{" + r + "}"
		}
		if a, ok := x["Fn::GetAtt"].([]any); ok && len(a) == 2 {
			return "{" + str(a[0]) + "." + str(a[1]) + "}"
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			var parts []string
			for _, p := range j[1].([]any) {
				parts = append(parts, resolve(t, p))
			}
			return strings.Join(parts, str(j[0]))
		}
		if sel, ok := x["Fn::Select"].([]any); ok && len(sel) == 2 {
			if sp, ok := sel[1].(map[string]any)["Fn::Split"].([]any); ok && len(sp) == 2 {
				parts := strings.Split(resolve(t, sp[1]), str(sp[0]))
				if i := int(toFloat(t, sel[0])); i < len(parts) {
					return parts[i]
				}
			}
		}
	}
	t.Fatalf("cannot resolve %#v", v)
	return ""
}

// resolveAll resolves a policy's Resource, one value or a list.
func resolveAll(t *testing.T, v any) []string {
	t.Helper()
	if l, ok := v.([]any); ok {
		var out []string
		for _, e := range l {
			out = append(out, resolve(t, e))
		}
		return out
	}
	return []string{resolve(t, v)}
}

func ref(id string) map[string]any    { return map[string]any{"Ref": id} }
func getAtt(id, attr string) []any    { return []any{id, attr} }
func arnOf(id string) map[string]any  { return map[string]any{"Fn::GetAtt": getAtt(id, "Arn")} }
func jsonEqual(a, b any) bool         { return reflect.DeepEqual(a, b) }
func str(v any) string                { s, _ := v.(string); return s }
func num(t *testing.T, v any) float64 { t.Helper(); return toFloat(t, v) }

func toFloat(t *testing.T, v any) float64 {
	t.Helper()
	switch x := v.(type) {
	case float64:
		return x
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			t.Fatalf("not a number: %q", x)
		}
		return f
	}
	t.Fatalf("not a number: %#v", v)
	return 0
}

// expectAssertion turns a failed assertions.Template check (a panic from
// jsii) into a test error.
func expectAssertion(t *testing.T, what string, check func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	check()
}

func TestFunctionEnvironment(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			w := wanted(target)
			bucketName := s.properties(t, s.ids["bucket"])["BucketName"]
			common := []string{
				config.EnvTable, config.EnvBucket, config.EnvLogLevel, config.EnvRetentionDays,
				config.EnvMaxAttempts, config.EnvMaxReceiveCount, config.EnvItemTimeoutSeconds,
				config.EnvLeaseSeconds, config.EnvVisibilitySeconds, config.EnvMetricsStack,
				config.EnvItemsMaxConcurrency,
			}
			fanOut := append(slices.Clone(common), config.EnvItemsQueueURL, config.EnvFinalizeFunction, config.EnvPipelines, config.EnvSources, config.EnvWebhookAllow, config.EnvLambdaFunctions, config.EnvRetryPolicy)
			itemNames := append(slices.Clone(fanOut), config.EnvDeadLetterQueueARN)
			itemNames = append(itemNames, config.EnvEffectTables) // testProps declares one; the emulator's default
			submitNames := append(slices.Clone(fanOut), config.EnvEphemeralStorageMiB, config.EnvItemsPerMessage, config.EnvUploadRepeatDays, config.EnvTickSeconds, config.EnvSecretPrefixes, config.EnvFunction)
			itemNames = append(itemNames, config.EnvFunction)
			for fn, names := range map[string][]string{FunctionSubmit: submitNames, FunctionItem: itemNames, FunctionFinalize: append(slices.Clone(common), config.EnvItemsQueueURL), FunctionSweep: common} {
				t.Run(fn, func(t *testing.T) {
					env, _ := s.properties(t, s.ids[fn])["Environment"].(map[string]any)["Variables"].(map[string]any)
					var got []string
					for k := range env {
						got = append(got, k)
					}
					sort.Strings(got)
					sort.Strings(names)
					if !slices.Equal(got, names) {
						t.Fatalf("variables = %v, want exactly %v", got, names)
					}
					// Resource names point at this stack's resources.
					if !jsonEqual(env[config.EnvTable], ref(s.ids["table"])) {
						t.Errorf("%s = %v, want Ref %s", config.EnvTable, env[config.EnvTable], s.ids["table"])
					}
					if !jsonEqual(env[config.EnvBucket], bucketName) {
						t.Errorf("%s = %v, want the bucket's name %v", config.EnvBucket, env[config.EnvBucket], bucketName)
					}
					// Submit sizes shards from the item event sources' flow.
					if got := env[config.EnvItemsMaxConcurrency]; got != strconv.Itoa(w.itemsMaxConcurrency) {
						t.Errorf("%s = %v, want %d", config.EnvItemsMaxConcurrency, got, w.itemsMaxConcurrency)
					}
					if _, ok := env[config.EnvItemsQueueURL]; ok && !jsonEqual(env[config.EnvItemsQueueURL], ref(s.ids["items"])) {
						t.Errorf("%s = %v, want Ref %s", config.EnvItemsQueueURL, env[config.EnvItemsQueueURL], s.ids["items"])
					}
					if _, ok := env[config.EnvFinalizeFunction]; ok && !jsonEqual(env[config.EnvFinalizeFunction], ref(s.ids[FunctionFinalize])) {
						t.Errorf("%s = %v, want Ref %s", config.EnvFinalizeFunction, env[config.EnvFinalizeFunction], s.ids[FunctionFinalize])
					}
					// The literal values load and validate as the function
					// will load them at start; the tokens get placeholders.
					cfg, err := config.Load(func(k string) string {
						if v, ok := env[k].(string); ok {
							return v
						}
						if env[k] != nil && k == config.EnvSources {
							return "s3://resolved-at-deploy/it-sources/"
						}
						if env[k] != nil {
							return "resolved-at-deploy"
						}
						return ""
					})
					if err != nil {
						t.Fatalf("config.Load: %v", err)
					}
					itemTimeout := time.Duration(w.itemTimeoutSeconds) * time.Second
					if cfg.ItemTimeout != itemTimeout || cfg.Lease != itemTimeout+config.LeaseMargin ||
						cfg.Visibility != VisibilityFactor*itemTimeout || cfg.MaxAttempts != w.maxAttempts ||
						cfg.MaxReceiveCount != w.maxReceiveCount || cfg.Retention != time.Duration(w.retentionDays)*24*time.Hour ||
						cfg.LogLevel != "info" {
						t.Errorf("loaded %+v, want item timeout %s, lease +%s, visibility ×%d, attempts %d, receives %d, retention %d days",
							cfg, itemTimeout, config.LeaseMargin, VisibilityFactor, w.maxAttempts, w.maxReceiveCount, w.retentionDays)
					}
					if (fn == FunctionSubmit || fn == FunctionItem) && !slices.Equal(cfg.Pipelines, w.pipelines) {
						t.Errorf("pipelines = %v, want %v", cfg.Pipelines, w.pipelines)
					}
				})
			}
		})
	}
}

// Confused deputy, point 2 (declared sources): submit and item get the
// declared source buckets and prefixes in BULKRUN_SOURCES — whole
// buckets as s3://bucket/, prefixes of the stack's bucket under its
// name — and an emulator stack declaring none gets
// DefaultEmulatorSourcePrefixes. Guards docs/sources.md "Sources and who may read
// what" and infra/README.md.
func TestConfusedDeputySourcesProps(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			bucketName := s.properties(t, s.ids["bucket"])["BucketName"]
			for _, fn := range []string{FunctionSubmit, FunctionItem} {
				env, _ := s.properties(t, s.ids[fn])["Environment"].(map[string]any)["Variables"].(map[string]any)
				got := resolve(t, env[config.EnvSources])
				want := "s3://source-a/,s3://source-b/"
				if target == TargetEmulator {
					want = "s3://" + resolve(t, bucketName) + "/it-sources/"
				}
				if got != want {
					t.Errorf("%s %s = %s, want %s", fn, config.EnvSources, got, want)
				}
			}
		})
	}
}

func TestFunctions(t *testing.T) {
	wantShape := map[string]struct{ timeout, memory float64 }{
		FunctionSubmit:   {900, SubmitMemoryMiB},
		FunctionFinalize: {900, 1024},
		FunctionSweep:    {900, 512},
	}
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			w := wanted(target)
			wantShape[FunctionItem] = struct{ timeout, memory float64 }{float64(w.itemTimeoutSeconds), float64(w.itemMemoryMiB)}
			// The four and setup (bulkrun's own Go function for its
			// custom resources): no function CDK brings (Node.js
			// providers of its custom resources).
			fns := s.resourcesOfType("AWS::Lambda::Function")
			if len(fns) != 5 {
				t.Errorf("%d functions, want 5 (submit, item, finalize, sweep, setup)", len(fns))
			}
			for id, f := range fns {
				if rt := f["Properties"].(map[string]any)["Runtime"]; rt != "provided.al2023" {
					t.Errorf("function %s runs %v, want provided.al2023 (bulkrun's Go binaries only)", id, rt)
				}
			}
			for fn, shape := range wantShape {
				p := s.properties(t, s.ids[fn])
				if !jsonEqual(p["Architectures"], []any{w.arch}) {
					t.Errorf("%s: Architectures = %v, want [%s]", fn, p["Architectures"], w.arch)
				}
				if p["Runtime"] != "provided.al2023" || p["Handler"] != "bootstrap" {
					t.Errorf("%s: runtime %v handler %v, want provided.al2023 bootstrap", fn, p["Runtime"], p["Handler"])
				}
				if num(t, p["Timeout"]) != shape.timeout || num(t, p["MemorySize"]) != shape.memory {
					t.Errorf("%s: timeout %v memory %v, want %v %v", fn, p["Timeout"], p["MemorySize"], shape.timeout, shape.memory)
				}
				lc, _ := p["LoggingConfig"].(map[string]any)
				_, hasLogGroup := lc["LogGroup"]
				if hasLogGroup != (target == TargetAWS) {
					t.Errorf("%s: explicit log group %v, want %v", fn, hasLogGroup, target == TargetAWS)
				}
				if lc["LogFormat"] != "JSON" || lc["ApplicationLogLevel"] != "INFO" || lc["SystemLogLevel"] != "INFO" {
					t.Errorf("%s: LoggingConfig %v, want JSON at the stack's level (INFO)", fn, lc)
				}
			}
			if target == TargetAWS {
				expectAssertion(t, "log retention", func() {
					s.template.ResourcePropertiesCountIs(jsii.String("AWS::Logs::LogGroup"),
						map[string]any{"RetentionInDays": 30}, jsii.Number(6)) // 5 functions + API access logs
				})
			}
		})
	}
}

func TestQueues(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			w := wanted(target)
			items, dlq := s.properties(t, s.ids["items"]), s.properties(t, s.ids["dlq"])
			redrive, _ := items["RedrivePolicy"].(map[string]any)
			if num(t, redrive["maxReceiveCount"]) != float64(w.maxReceiveCount) {
				t.Errorf("maxReceiveCount = %v, want %d", redrive["maxReceiveCount"], w.maxReceiveCount)
			}
			if !jsonEqual(redrive["deadLetterTargetArn"], arnOf(s.ids["dlq"])) {
				t.Errorf("deadLetterTargetArn = %v, want the DLQ", redrive["deadLetterTargetArn"])
			}
			itemTimeout := num(t, s.properties(t, s.ids[FunctionItem])["Timeout"])
			for name, q := range map[string]map[string]any{"items": items, "dlq": dlq} {
				vis := num(t, q["VisibilityTimeout"])
				if vis < itemTimeout || vis != VisibilityFactor*itemTimeout {
					t.Errorf("%s: VisibilityTimeout %v, want %d × item timeout %v", name, vis, VisibilityFactor, itemTimeout)
				}
				if q["SqsManagedSseEnabled"] != true {
					t.Errorf("%s: SqsManagedSseEnabled = %v", name, q["SqsManagedSseEnabled"])
				}
			}
			// Each dead-letter queue keeps messages longer than its source
			// (SQS counts a dead letter's age from its first send).
			parking := s.properties(t, s.ids["parking"])
			for name, want := range map[string]float64{"items": 7, "dlq": 10, "parking": 14} {
				q := map[string]map[string]any{"items": items, "dlq": dlq, "parking": parking}[name]
				if got := num(t, q["MessageRetentionPeriod"]); got != want*24*3600 {
					t.Errorf("%s: MessageRetentionPeriod = %v s, want %v days", name, got, want)
				}
			}
			env := s.properties(t, s.ids[FunctionItem])["Environment"].(map[string]any)["Variables"].(map[string]any)
			if lease := num(t, env[config.EnvLeaseSeconds]); lease < itemTimeout+config.LeaseMargin.Seconds() {
				t.Errorf("%s = %v, want ≥ item timeout %v + %s", config.EnvLeaseSeconds, lease, itemTimeout, config.LeaseMargin)
			}
		})
	}
}

// TestDeadLetterBackstop guards the product line "a backstop for every dead
// letter": the dead-letter queue redrives, after config.ParkingMaxReceiveCount
// receives, to a parking queue that nothing consumes, whose depth is alarmed
// (to the AlarmTopicARN topic when given), and whose retention is SQS's
// maximum.
func TestDeadLetterBackstop(t *testing.T) {
	for _, target := range []string{TargetEmulator, TargetAWS, opsAWS} {
		t.Run(target, func(t *testing.T) {
			s := synthOps(t, target)
			ids := map[string]string{"dlq": s.id("ItemsDeadLetterQueue"), "parking": s.id("ItemsParkingQueue"), "parkingAlarm": s.id("ParkingAlarm")}
			dlq, parking := s.properties(t, ids["dlq"]), s.properties(t, ids["parking"])
			redrive, _ := dlq["RedrivePolicy"].(map[string]any)
			if !jsonEqual(redrive["deadLetterTargetArn"], arnOf(ids["parking"])) || num(t, redrive["maxReceiveCount"]) != config.ParkingMaxReceiveCount {
				t.Errorf("dead-letter queue RedrivePolicy = %v, want the parking queue after %d receives", redrive, config.ParkingMaxReceiveCount)
			}
			if num(t, parking["MessageRetentionPeriod"]) != 14*24*3600 || parking["SqsManagedSseEnabled"] != true {
				t.Errorf("parking queue = %v, want 14 days' retention, SSE", parking)
			}
			for _, m := range s.resourcesOfType("AWS::Lambda::EventSourceMapping") {
				if references(m, ids["parking"]) {
					t.Errorf("the parking queue is consumed: %v", m)
				}
			}
			alarm := s.properties(t, ids["parkingAlarm"])
			dims, _ := alarm["Dimensions"].([]any)
			if alarm["MetricName"] != "ApproximateNumberOfMessagesVisible" || alarm["Namespace"] != "AWS/SQS" ||
				len(dims) != 1 || !references(dims[0], ids["parking"]) ||
				num(t, alarm["Threshold"]) != 1 || alarm["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" ||
				alarm["TreatMissingData"] != "notBreaching" {
				t.Errorf("parking alarm = %v, want depth ≥ 1 of the parking queue", alarm)
			}
			wantActions := []any(nil)
			if target == opsAWS {
				wantActions = []any{testAlarmTopic}
			}
			for _, k := range []string{"AlarmActions", "OKActions"} {
				if got, _ := alarm[k].([]any); !jsonEqual(got, wantActions) {
					t.Errorf("parking alarm %s = %v, want %v", k, got, wantActions)
				}
			}
		})
	}
}

func TestEventSourceMappings(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			sources := map[string]bool{}
			for id, m := range s.resourcesOfType("AWS::Lambda::EventSourceMapping") {
				p := m["Properties"].(map[string]any)
				if !jsonEqual(p["FunctionName"], ref(s.ids[FunctionItem])) {
					t.Errorf("%s: function %v, want item", id, p["FunctionName"])
				}
				if !jsonEqual(p["FunctionResponseTypes"], []any{"ReportBatchItemFailures"}) {
					t.Errorf("%s: FunctionResponseTypes = %v", id, p["FunctionResponseTypes"])
				}
				if num(t, p["BatchSize"]) != config.DefaultItemBatchSize {
					t.Errorf("%s: BatchSize = %v", id, p["BatchSize"])
				}
				if w, ok := p["MaximumBatchingWindowInSeconds"]; ok && num(t, w) != 0 {
					t.Errorf("%s: MaximumBatchingWindowInSeconds = %v, want none", id, w)
				}
				for _, q := range []string{"items", "dlq"} {
					if jsonEqual(p["EventSourceArn"], arnOf(s.ids[q])) {
						sources[q] = true
					}
				}
			}
			if !sources["items"] || !sources["dlq"] || len(s.resourcesOfType("AWS::Lambda::EventSourceMapping")) != 2 {
				t.Errorf("mappings from %v, want exactly the items queue and the DLQ", sources)
			}
		})
	}
}

// Unbounded concurrency, point 4 (stack props): the item function's
// memory, each function's reserved concurrency and the SQS event
// sources' maximum concurrency are what the props say, with bounded
// defaults (512 MiB, none reserved, 100 concurrent item invocations per
// queue), so a large batch cannot take the account's whole Lambda
// concurrency. Guards infra/README.md "Props and defaults".
func TestUnboundedConcurrencyProps(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			w := wanted(target)
			if m := num(t, s.properties(t, s.ids[FunctionItem])["MemorySize"]); m != float64(w.itemMemoryMiB) {
				t.Errorf("item MemorySize %v, want %d", m, w.itemMemoryMiB)
			}
			for _, fn := range []string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep} {
				got, ok := s.properties(t, s.ids[fn])["ReservedConcurrentExecutions"]
				want, reserved := w.reserved[fn]
				if ok != reserved || (ok && num(t, got) != want) {
					t.Errorf("%s ReservedConcurrentExecutions = %v, want %v (reserved %v)", fn, got, want, reserved)
				}
			}
			mappings := s.resourcesOfType("AWS::Lambda::EventSourceMapping")
			for id, m := range mappings {
				sc, _ := m["Properties"].(map[string]any)["ScalingConfig"].(map[string]any)
				if sc == nil || num(t, sc["MaximumConcurrency"]) != float64(w.itemsMaxConcurrency) {
					t.Errorf("%s: ScalingConfig %v, want MaximumConcurrency %d", id, sc, w.itemsMaxConcurrency)
				}
			}
			if len(mappings) != 2 {
				t.Errorf("%d event source mappings, want 2", len(mappings))
			}
		})
	}
}

// statements returns the statements of the role policy with logical id.
func (s *synthesized) statements(t *testing.T, id string) []map[string]any {
	t.Helper()
	doc := s.properties(t, id)["PolicyDocument"].(map[string]any)
	var out []map[string]any
	for _, st := range doc["Statement"].([]any) {
		out = append(out, st.(map[string]any))
	}
	return out
}

func actions(st map[string]any) []string {
	switch a := st["Action"].(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, x := range a {
			out = append(out, str(x))
		}
		return out
	}
	return nil
}

func TestIAMActionsExplicit(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			n := 0
			for id := range s.resourcesOfType("AWS::IAM::Policy") {
				for _, st := range s.statements(t, id) {
					for _, a := range actions(st) {
						n++
						if strings.Contains(a, "*") {
							t.Errorf("%s: wildcard action %q in %v", id, a, st)
						}
					}
				}
			}
			for id, r := range s.resourcesOfType("AWS::IAM::Role") {
				if p, ok := r["Properties"].(map[string]any)["Policies"]; ok {
					t.Errorf("%s: inline policies %v (grants belong in the default policy)", id, p)
				}
			}
			if n == 0 {
				t.Fatal("no IAM actions found")
			}
			// The only s3:* is the AWS bucket policy's Deny of plain HTTP.
			for id, r := range s.resourcesOfType("AWS::S3::BucketPolicy") {
				for _, st := range r["Properties"].(map[string]any)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
					if st := st.(map[string]any); st["Effect"] != "Deny" {
						t.Errorf("%s: bucket policy allows %v", id, st)
					}
				}
			}
		})
	}
}

func TestIAMScope(t *testing.T) {
	// The union of actions per function; the event sources add the SQS
	// consumption actions on both queues to item.
	want := map[string][]string{
		FunctionSubmit: {"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem",
			"events:PutEvents", "kms:Decrypt", "lambda:InvokeFunction", "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetBucketLocation", "s3:GetObject", "s3:ListBucket", "s3:PutObject",
			"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}, // GetQueue*: the failure destination's grant
		FunctionItem: {"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem",
			"events:PutEvents", "kms:Decrypt", "lambda:InvokeFunction", "s3:GetObject", "s3:ListBucket", "s3:PutObject", "secretsmanager:GetSecretValue",
			"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:SendMessage", "ssm:GetParameter"},
		FunctionFinalize: {"dynamodb:BatchGetItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem",
			"events:PutEvents", "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:ListBucket", "s3:ListMultipartUploadParts", "s3:PutObject",
			"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}, // GetQueue*: the failure destination's grant
		FunctionSweep: {"dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem", "s3:DeleteObject", "s3:ListBucket",
			"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}, // the failure destination's grant
	}
	s := synth(t, TargetAWS)
	for fn, wantActions := range want {
		seen := map[string]bool{}
		for _, st := range s.statements(t, s.ids["policy:"+fn]) {
			if st["Effect"] != "Allow" {
				t.Errorf("%s: statement %v is not Allow", fn, st)
			}
			for _, a := range actions(st) {
				seen[a] = true
			}
			resources := resolveAll(t, st["Resource"])
			// Writes to the bucket are confined to batches/ (and, for
			// submit's error reports of refused starts, incoming-errors/
			// and schedule-errors/; finalize deletes its checkpoints only).
			for _, a := range actions(st) {
				batches := slices.Equal(resources, []string{"arn:aws:s3:::bulkrun-test-bucket/" + config.BatchesPrefix + "*"})
				errorReports := fn == FunctionSubmit && (a == "s3:PutObject" || a == "s3:DeleteObject") &&
					slices.Equal(resources, []string{"arn:aws:s3:::bulkrun-test-bucket/" + config.UploadErrorsPrefix + "*",
						"arn:aws:s3:::bulkrun-test-bucket/" + config.ScheduleErrorsPrefix + "*"})
				checkpoints := fn == FunctionFinalize && a == "s3:DeleteObject" &&
					slices.Equal(resources, []string{"arn:aws:s3:::bulkrun-test-bucket/" + config.BatchesPrefix + "*/" + config.FinalizeCheckpoints + "*"})
				if (a == "s3:PutObject" || a == "s3:DeleteObject" || a == "s3:AbortMultipartUpload") && !batches && !errorReports && !checkpoints {
					t.Errorf("%s: %s on %v, want only %s*", fn, a, resources, config.BatchesPrefix)
				}
			}
			// Source buckets are readable by submit and item, never
			// writable (submit reads their Region).
			for _, r := range resources {
				if !strings.Contains(r, "source-") {
					continue
				}
				for _, a := range actions(st) {
					if a != "s3:GetObject" && a != "s3:ListBucket" && !(fn == FunctionSubmit && a == "s3:GetBucketLocation") {
						t.Errorf("%s: %s on source bucket %s", fn, a, r)
					}
				}
			}
		}
		var got []string
		for a := range seen {
			got = append(got, a)
		}
		sort.Strings(got)
		if !slices.Equal(got, wantActions) {
			t.Errorf("%s actions:\n got  %v\n want %v", fn, got, wantActions)
		}
	}
	// SourceBuckets reach submit (get, list) and item (get) only.
	for fn, wantSource := range map[string]bool{FunctionSubmit: true, FunctionItem: true, FunctionFinalize: false, FunctionSweep: false} {
		raw, _ := json.Marshal(s.statements(t, s.ids["policy:"+fn]))
		for _, b := range []string{"source-a", "source-b"} {
			if got := strings.Contains(string(raw), b); got != wantSource {
				t.Errorf("%s: mentions %s = %v, want %v", fn, b, got, wantSource)
			}
		}
	}
}

// TestSecretsGrantedPerPrefix guards the product line "secret references
// are resolved with a least-privilege grant per reference prefix": only the
// item function may read secrets, each service's action is granted on
// exactly the declared prefixes of that service, and submit is told them.
func TestSecretsGrantedPerPrefix(t *testing.T) {
	s := synth(t, TargetAWS)
	want := map[string][]string{
		"ssm:GetParameter":              {"arn:aws:ssm:eu-west-1:123456789012:parameter/hooks/*"},
		"secretsmanager:GetSecretValue": {"arn:aws:secretsmanager:eu-west-1:123456789012:secret:hooks/*"},
	}
	for _, fn := range []string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep} {
		for _, st := range s.statements(t, s.ids["policy:"+fn]) {
			for _, a := range actions(st) {
				w, secretAction := want[a]
				if !secretAction {
					continue
				}
				if fn != FunctionItem {
					t.Errorf("%s may %s", fn, a)
				}
				if got := resolveAll(t, st["Resource"]); !slices.Equal(got, w) || len(actions(st)) != 1 {
					t.Errorf("%s: %v on %v, want only %s on %v", fn, actions(st), got, a, w)
				}
			}
		}
	}
	env, _ := s.properties(t, s.ids[FunctionSubmit])["Environment"].(map[string]any)["Variables"].(map[string]any)
	if got, w := env[config.EnvSecretPrefixes], strings.Join(testProps(TargetAWS).SecretPrefixes, ","); got != w {
		t.Errorf("submit %s = %v, want %q", config.EnvSecretPrefixes, got, w)
	}
}

// references reports whether v contains a Ref or Fn::GetAtt of logical id.
func references(v any, id string) bool {
	switch x := v.(type) {
	case map[string]any:
		if x["Ref"] == id {
			return true
		}
		if att, ok := x["Fn::GetAtt"].([]any); ok && len(att) > 0 && att[0] == id {
			return true
		}
		for _, e := range x {
			if references(e, id) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if references(e, id) {
				return true
			}
		}
	}
	return false
}

func TestBucketNotification(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			bucket := s.resource(t, s.ids["bucket"])
			props := bucket["Properties"].(map[string]any)
			name := props["BucketName"]
			if target == TargetAWS && name != "bulkrun-test-bucket" {
				t.Errorf("BucketName = %v, want the props value", name)
			}
			// Generated from the stack's id: a new name for every stack.
			if got := resolve(t, name); target == TargetEmulator && got != "bulkrun-"+stackUUID {
				t.Errorf("BucketName = %s, want bulkrun-{uuid of the stack id}", got)
			}
			// S3 upload formats: one prefix filter and no suffix filter,
			// since S3 matches suffixes case-sensitively (orders.CSV,
			// .ndjson, .gz would start nothing and leave no report).
			configs := props["NotificationConfiguration"].(map[string]any)["LambdaConfigurations"].([]any)
			if len(configs) != 1 {
				t.Errorf("%d notification configurations, want 1 (prefix only)", len(configs))
			}
			for _, c := range configs {
				c := c.(map[string]any)
				if c["Event"] != "s3:ObjectCreated:*" || !jsonEqual(c["Function"], arnOf(s.ids[FunctionSubmit])) {
					t.Errorf("notification %v, want s3:ObjectCreated:* to submit", c)
				}
				rules := map[string]string{}
				for _, r := range c["Filter"].(map[string]any)["S3Key"].(map[string]any)["Rules"].([]any) {
					r := r.(map[string]any)
					rules[str(r["Name"])] = str(r["Value"])
				}
				if rules["prefix"] != config.IncomingPrefix || len(rules) != 1 {
					t.Errorf("filter rules = %v, want only prefix %q", rules, config.IncomingPrefix)
				}
			}
			// The bucket waits for the permission, which names the bucket by
			// its name: no Ref to the bucket anywhere it would close a cycle.
			dependsOn, _ := bucket["DependsOn"].([]any)
			if !slices.Contains(dependsOn, any(s.ids["permission"])) {
				t.Errorf("bucket DependsOn = %v, want %s", dependsOn, s.ids["permission"])
			}
			perm := s.properties(t, s.ids["permission"])
			wantArn := "arn:aws:s3:::" + resolve(t, name)
			if perm["Principal"] != "s3.amazonaws.com" || perm["Action"] != "lambda:InvokeFunction" ||
				!jsonEqual(perm["SourceAccount"], ref("AWS::AccountId")) || resolve(t, perm["SourceArn"]) != wantArn ||
				!jsonEqual(perm["FunctionName"], arnOf(s.ids[FunctionSubmit])) {
				t.Errorf("permission = %v, want s3.amazonaws.com invoking submit from %v", perm, wantArn)
			}
			for _, id := range []string{s.ids["permission"], s.ids[FunctionSubmit], s.ids[FunctionItem], s.ids[FunctionFinalize],
				s.ids["policy:"+FunctionSubmit], s.ids["policy:"+FunctionItem], s.ids["policy:"+FunctionFinalize]} {
				if references(s.resource(t, id), s.ids["bucket"]) {
					t.Errorf("%s references the bucket resource: a dependency cycle through the notification", id)
				}
			}
		})
	}
}

func TestBucketAndTablePerTarget(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			w := wanted(target)
			for _, name := range []string{"bucket", "table", "items", "dlq"} {
				if got := s.resource(t, s.ids[name])["DeletionPolicy"]; got != w.deletionPolicy {
					t.Errorf("%s: DeletionPolicy = %v, want %s", name, got, w.deletionPolicy)
				}
			}
			b := s.properties(t, s.ids["bucket"])
			if _, ok := b["VersioningConfiguration"]; ok {
				t.Errorf("versioning configured: %v", b["VersioningConfiguration"])
			}
			expectAssertion(t, "bucket settings", func() {
				s.template.HasResourceProperties(jsii.String("AWS::S3::Bucket"), map[string]any{
					"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
						map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}}}},
					"PublicAccessBlockConfiguration": map[string]any{
						"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true},
					"LifecycleConfiguration": map[string]any{"Rules": assertions.Match_ArrayWith(&[]any{
						assertions.Match_ObjectLike(&map[string]any{
							"AbortIncompleteMultipartUpload": map[string]any{"DaysAfterInitiation": 1}, "Status": "Enabled"})})},
				})
			})
			// SSL-only on every target (hardening_test.go checks the statement).
			if got, want := len(s.resourcesOfType("AWS::S3::BucketPolicy")), 1; got != want {
				t.Errorf("%d bucket policies, want %d", got, want)
			}

			tbl := s.properties(t, s.ids["table"])
			if tbl["BillingMode"] != "PAY_PER_REQUEST" {
				t.Errorf("BillingMode = %v", tbl["BillingMode"])
			}
			keys := func(v any) map[string]string {
				out := map[string]string{}
				for _, k := range v.([]any) {
					k := k.(map[string]any)
					out[str(k["KeyType"])] = str(k["AttributeName"])
				}
				return out
			}
			if got := keys(tbl["KeySchema"]); got["HASH"] != config.AttrPK || got["RANGE"] != config.AttrSK {
				t.Errorf("KeySchema = %v", got)
			}
			gsis := map[string]map[string]string{}
			for _, g := range tbl["GlobalSecondaryIndexes"].([]any) {
				g := g.(map[string]any)
				proj := g["Projection"].(map[string]any)
				// The batches index projects only the listing's attributes
				// (product line: GET /batches shows each batch's current
				// status, so status must be projected); the others all.
				want := map[string]any{"ProjectionType": "ALL"}
				if g["IndexName"] == config.IndexBatches || g["IndexName"] == config.IndexSources {
					attrs := []any{}
					for _, a := range config.BatchesProjection() {
						attrs = append(attrs, a)
					}
					want = map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": attrs}
				}
				if !jsonEqual(proj, want) {
					t.Errorf("%v: projection %v, want %v", g["IndexName"], proj, want)
				}
				gsis[str(g["IndexName"])] = keys(g["KeySchema"])
			}
			wantGSIs := map[string]map[string]string{
				config.IndexAttention: {"HASH": config.AttrAttentionPK, "RANGE": config.AttrAttentionSK},
				config.IndexBatches:   {"HASH": config.AttrBatchesPK, "RANGE": config.AttrBatchesSK},
				config.IndexSources:   {"HASH": config.AttrSourcesPK, "RANGE": config.AttrBatchesSK},
			}
			if !reflect.DeepEqual(gsis, wantGSIs) {
				t.Errorf("GSIs = %v, want %v", gsis, wantGSIs)
			}
			for _, a := range tbl["AttributeDefinitions"].([]any) {
				if a := a.(map[string]any); a["AttributeType"] != "S" {
					t.Errorf("attribute %v is not a string", a)
				}
			}
			if ttl := tbl["TimeToLiveSpecification"]; !jsonEqual(ttl, map[string]any{"AttributeName": config.AttrExpiresAt, "Enabled": true}) {
				t.Errorf("TimeToLiveSpecification = %v", ttl)
			}
			pitr := tbl["PointInTimeRecoverySpecification"]
			if on := jsonEqual(pitr, map[string]any{"PointInTimeRecoveryEnabled": true}); on != (target == TargetAWS) {
				t.Errorf("PointInTimeRecoverySpecification = %v on %s", pitr, target)
			}
		})
	}
}

func TestAPI(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			paths := map[string]string{} // resource logical id → path part
			for id, r := range s.resourcesOfType("AWS::ApiGateway::Resource") {
				paths[id] = str(r["Properties"].(map[string]any)["PathPart"])
			}
			methods := map[string]string{}
			for id, m := range s.resourcesOfType("AWS::ApiGateway::Method") {
				p := m["Properties"].(map[string]any)
				if p["AuthorizationType"] != "AWS_IAM" {
					t.Errorf("%s: AuthorizationType = %v, want AWS_IAM", id, p["AuthorizationType"])
				}
				integ := p["Integration"].(map[string]any)
				if integ["Type"] != "AWS_PROXY" || !references(integ["Uri"], s.ids[FunctionSubmit]) {
					t.Errorf("%s: integration %v, want a proxy to submit", id, integ)
				}
				res, _ := p["ResourceId"].(map[string]any)
				methods[paths[str(res["Ref"])]] = str(p["HttpMethod"])
			}
			want := map[string]string{config.APIBatchesResource: "ANY", "{proxy+}": "ANY"}
			if !reflect.DeepEqual(methods, want) {
				t.Errorf("methods by path part = %v, want %v", methods, want)
			}
			expectAssertion(t, "stage", func() {
				s.template.HasResourceProperties(jsii.String("AWS::ApiGateway::Stage"),
					map[string]any{"StageName": config.DefaultAPIStage})
			})
			// The account's CloudWatch role: firstdeploy_test.go.
		})
	}
}

func TestFinalizeTick(t *testing.T) {
	s := synth(t, TargetEmulator)
	p := s.properties(t, s.ids["tick"])
	if p["ScheduleExpression"] != DefaultFinalizeTickSchedule {
		t.Errorf("ScheduleExpression = %v", p["ScheduleExpression"])
	}
	targets := p["Targets"].([]any)
	if len(targets) != 1 {
		t.Fatalf("targets = %v", targets)
	}
	tg := targets[0].(map[string]any)
	var input map[string]any
	if err := json.Unmarshal([]byte(str(tg["Input"])), &input); err != nil || !jsonEqual(input, map[string]any{"tick": true}) {
		t.Errorf("Input = %v, want {\"tick\": true}", tg["Input"])
	}
	if !jsonEqual(tg["Arn"], arnOf(s.ids[FunctionFinalize])) {
		t.Errorf("target %v, want finalize", tg["Arn"])
	}
}

func TestOutputs(t *testing.T) {
	want := []string{
		config.OutputAPIURL, config.OutputAPIID, config.OutputAPIStage, config.OutputBucket, config.OutputTable,
		config.OutputItemsQueueURL, config.OutputItemsDLQURL, config.OutputItemsQueueARN, config.OutputItemsDLQARN,
		config.OutputSubmitFunction, config.OutputItemFunction, config.OutputFinalizeFunction, config.OutputSweepFunction, config.OutputMaxReceiveCount,
		config.OutputSubmitFailuresQueueURL, config.OutputSubmitFailuresAlarm,
		config.OutputParkingQueueURL, config.OutputParkingQueueARN, config.OutputParkingAlarm,
		config.OutputInvokeFailuresQueueURL, config.OutputInvokeFailuresAlarm, config.OutputScheduleDLQURL, config.OutputScheduleDLQAlarm,
	}
	sort.Strings(want)
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			outputs := s.json["Outputs"].(map[string]any)
			var got []string
			for k := range outputs {
				got = append(got, k)
			}
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("outputs = %v, want exactly %v", got, want)
			}
			for k, id := range map[string]string{config.OutputTable: "table", config.OutputItemsQueueURL: "items", config.OutputItemsDLQURL: "dlq",
				config.OutputSubmitFunction: FunctionSubmit, config.OutputItemFunction: FunctionItem, config.OutputFinalizeFunction: FunctionFinalize, config.OutputSweepFunction: FunctionSweep,
				config.OutputSubmitFailuresQueueURL: "submitFailures", config.OutputSubmitFailuresAlarm: "submitFailuresAlarm"} {
				if v := outputs[k].(map[string]any)["Value"]; !jsonEqual(v, ref(s.ids[id])) {
					t.Errorf("%s = %v, want Ref %s", k, v, s.ids[id])
				}
			}
			if v := outputs[config.OutputMaxReceiveCount].(map[string]any)["Value"]; v != strconv.Itoa(wanted(target).maxReceiveCount) {
				t.Errorf("%s = %v", config.OutputMaxReceiveCount, v)
			}
			for id := range s.resourcesOfType("AWS::ApiGateway::Stage") {
				if v := outputs[config.OutputAPIStage].(map[string]any)["Value"]; !jsonEqual(v, ref(id)) {
					t.Errorf("%s = %v, want Ref %s", config.OutputAPIStage, v, id)
				}
			}
			for k, id := range map[string]string{config.OutputItemsQueueARN: "items", config.OutputItemsDLQARN: "dlq"} {
				if v := outputs[k].(map[string]any)["Value"]; !jsonEqual(v, arnOf(s.ids[id])) {
					t.Errorf("%s = %v, want the ARN of %s", k, v, s.ids[id])
				}
			}
		})
	}
}

func TestNewStackRefusesBadProps(t *testing.T) {
	valid := func() RunnerProps { return RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir} }
	tests := []struct {
		name      string
		edit      func(*RunnerProps)
		wantField string // the *PropError field or *config.VarError variable at fault
	}{
		{"receive count equals attempts", func(p *RunnerProps) { p.MaxAttempts, p.MaxReceiveCount = 5, 5 }, config.EnvMaxReceiveCount},
		{"receive count below attempts", func(p *RunnerProps) { p.MaxAttempts, p.MaxReceiveCount = 5, 2 }, config.EnvMaxReceiveCount},
		{"default receive count below attempts", func(p *RunnerProps) { p.MaxAttempts = config.DefaultMaxReceiveCount }, config.EnvMaxReceiveCount},
		{"negative attempts", func(p *RunnerProps) { p.MaxAttempts = -1 }, config.EnvMaxAttempts},
		{"items per message above 100", func(p *RunnerProps) { p.ItemsPerMessage = 101 }, config.EnvItemsPerMessage},
		{"negative items per message", func(p *RunnerProps) { p.ItemsPerMessage = -1 }, config.EnvItemsPerMessage},
		{"receive count above SQS limit", func(p *RunnerProps) { p.MaxReceiveCount = 1001 }, "MaxReceiveCount"},
		{"item timeout above Lambda limit", func(p *RunnerProps) { p.ItemTimeout = 16 * time.Minute }, "ItemTimeout"},
		{"item timeout not whole seconds", func(p *RunnerProps) { p.ItemTimeout = 1500 * time.Millisecond }, "ItemTimeout"},
		{"unknown target", func(p *RunnerProps) { p.Target = "localstack" }, "Target"},
		{"submit memory above Lambda limit", func(p *RunnerProps) { p.MemoryMiB = map[string]int{FunctionSubmit: 20000} }, "MemoryMiB[submit]"},
		{"item memory through MemoryMiB", func(p *RunnerProps) { p.MemoryMiB = map[string]int{FunctionItem: 1024} }, "MemoryMiB[item]"},
		{"memory of an unknown function", func(p *RunnerProps) { p.MemoryMiB = map[string]int{"report": 1024} }, "MemoryMiB[report]"},
		{"finalize timeout above Lambda limit", func(p *RunnerProps) { p.Timeouts = map[string]time.Duration{FunctionFinalize: 16 * time.Minute} }, "Timeouts[finalize]"},
		{"sweep timeout not whole seconds", func(p *RunnerProps) { p.Timeouts = map[string]time.Duration{FunctionSweep: 1500 * time.Millisecond} }, "Timeouts[sweep]"},
		{"item timeout through Timeouts", func(p *RunnerProps) { p.Timeouts = map[string]time.Duration{FunctionItem: time.Minute} }, "Timeouts[item]"},
		{"effect table not a table name", func(p *RunnerProps) { p.EffectTables = []string{"accounts", "a/b"} }, config.EnvEffectTables},
		{"lambda function neither name nor ARN", func(p *RunnerProps) { p.LambdaFunctions = []string{"score", "s3://bucket/fn"} }, config.EnvLambdaFunctions},
		{"alarm topic neither ARN nor token", func(p *RunnerProps) { p.AlarmTopicARN = "alarms" }, "AlarmTopicARN"},
		{"negative retention", func(p *RunnerProps) { p.RetentionDays = -1 }, "RetentionDays"},
		{"retention in minutes on AWS", func(p *RunnerProps) { p.Target, p.RetentionMinutes = TargetAWS, 10 }, "RetentionMinutes"},
		{"retention in minutes above a day", func(p *RunnerProps) { p.Target, p.RetentionMinutes = TargetEmulator, 1441 }, "RetentionMinutes"},
		{"upload repeat below -1", func(p *RunnerProps) { p.UploadRepeatDays = -2 }, "UploadRepeatDays"},
		{"upload repeat above ten years", func(p *RunnerProps) { p.UploadRepeatDays = 3651 }, "UploadRepeatDays"},
		{"bad schedule", func(p *RunnerProps) { p.FinalizeTickSchedule = "every 5 minutes" }, "FinalizeTickSchedule"},
		{"tick rate with plural 1", func(p *RunnerProps) { p.FinalizeTickSchedule = "rate(1 minutes)" }, "FinalizeTickSchedule"},
		{"schedule with a 5-field cron", func(p *RunnerProps) {
			p.Schedules = []Schedule{{Name: "s", Expression: "cron(0 2 * * *)", Request: json.RawMessage(`{"pipeline":"webhook"}`)}}
		}, "Schedules[s].Expression"},
		{"schedule with * in both day fields", func(p *RunnerProps) {
			p.Schedules = []Schedule{{Name: "s", Expression: "cron(0 2 * * * *)", Request: json.RawMessage(`{"pipeline":"webhook"}`)}}
		}, "Schedules[s].Expression"},
		{"schedule every 60 minutes by cron", func(p *RunnerProps) {
			p.Schedules = []Schedule{{Name: "hourly", Expression: "cron(*/60 * * * ? *)", Request: json.RawMessage(`{"pipeline":"webhook"}`)}}
		}, "Schedules[hourly].Expression"},
		{"bad bucket name", func(p *RunnerProps) { p.BucketName = "Bulkrun_Bucket" }, "BucketName"},
		{"bad source bucket", func(p *RunnerProps) { p.SourceBuckets = []string{"ok-bucket", "a/b"} }, "SourceBuckets"},
		{"source prefix over batches/", func(p *RunnerProps) { p.SourcePrefixes = []string{"exports/", "batches/"} }, "SourcePrefixes"},
		{"source prefix that lists batches/", func(p *RunnerProps) { p.SourcePrefixes = []string{"batch"} }, "SourcePrefixes"},
		{"source prefix over incoming-errors/", func(p *RunnerProps) { p.SourcePrefixes = []string{"incoming-errors/2026/"} }, "SourcePrefixes"},
		{"source prefix without a slash", func(p *RunnerProps) { p.SourcePrefixes = []string{"exports"} }, "SourcePrefixes"},
		{"source prefix with ..", func(p *RunnerProps) { p.SourcePrefixes = []string{"uploads/../batches/"} }, "SourcePrefixes"},
		{"own bucket as a source bucket", func(p *RunnerProps) { p.BucketName, p.SourceBuckets = "my-bulkrun", []string{"my-bulkrun"} }, "SourceBuckets"},
		{"item memory below Lambda's", func(p *RunnerProps) { p.ItemMemoryMiB = 64 }, "ItemMemoryMiB"},
		{"item memory above Lambda's", func(p *RunnerProps) { p.ItemMemoryMiB = 10241 }, "ItemMemoryMiB"},
		{"max concurrency below SQS's 2", func(p *RunnerProps) { p.ItemsMaxConcurrency = 1 }, "ItemsMaxConcurrency"},
		{"max concurrency above SQS's 1000", func(p *RunnerProps) { p.ItemsMaxConcurrency = 1001 }, "ItemsMaxConcurrency"},
		{"reserved concurrency of no function", func(p *RunnerProps) { p.ReservedConcurrency = map[string]int{"worker": 5} }, "ReservedConcurrency[worker]"},
		{"reserved concurrency zero", func(p *RunnerProps) { p.ReservedConcurrency = map[string]int{FunctionSubmit: 0} }, "ReservedConcurrency[submit]"},
		{"item reserved below max concurrency", func(p *RunnerProps) {
			p.ReservedConcurrency, p.ItemsMaxConcurrency = map[string]int{FunctionItem: 10}, 20
		}, "ReservedConcurrency[item]"},
		{"item reserved for one event source of two", func(p *RunnerProps) {
			p.ReservedConcurrency, p.ItemsMaxConcurrency = map[string]int{FunctionItem: 150}, 150
		}, "ReservedConcurrency[item]"},
		{"reservations leave under 100 unreserved", func(p *RunnerProps) {
			p.ReservedConcurrency = map[string]int{FunctionSubmit: 500, FunctionFinalize: 250, FunctionItem: 200}
		}, "ReservedConcurrency"},
		{"event sources beyond what the account leaves", func(p *RunnerProps) { p.AccountConcurrency, p.ItemsMaxConcurrency = 150, 100 }, "ItemsMaxConcurrency"},
		{"account concurrency negative", func(p *RunnerProps) { p.AccountConcurrency = -1 }, "AccountConcurrency"},
		{"pipeline with comma", func(p *RunnerProps) { p.Pipelines = []string{"thumbnail,webhook"} }, "Pipelines"},
		{"empty pipeline name", func(p *RunnerProps) { p.Pipelines = []string{"thumbnail", ""} }, "Pipelines"},
		{"functions not built", func(p *RunnerProps) { p.FunctionsDir = filepath.Join(functionsDir, "missing") }, "FunctionsDir"},
		{"bad secret prefix", func(p *RunnerProps) { p.SecretPrefixes = []string{"arn:aws:s3:::bucket/*"} }, config.EnvSecretPrefixes},
		{"bad webhook allow-list entry", func(p *RunnerProps) { p.WebhookAllow = []string{"10.0.0.0/99"} }, config.EnvWebhookAllow},
		{"default pipeline not registered", func(p *RunnerProps) { p.DefaultPipeline = "nope" }, "DefaultPipeline"},
		{"pipeline not in the item binary's registry", func(p *RunnerProps) { p.Pipelines = []string{"webhook", "nope"} }, "Pipelines"},
		{"manifest beyond Lambda's ephemeral storage", func(p *RunnerProps) { p.MaxManifestBytes = MaxMaxManifestBytes + 1 }, "MaxManifestBytes"},
		{"negative manifest size", func(p *RunnerProps) { p.MaxManifestBytes = -1 }, "MaxManifestBytes"},
		{"schedule with a batch id", func(p *RunnerProps) {
			p.Schedules = []Schedule{{Name: "s", Expression: "rate(1 day)", Request: json.RawMessage(`{"batch_id":"x","pipeline":"webhook"}`)}}
		}, "Schedules[s].Request"},
		{"schedule of an unknown pipeline", func(p *RunnerProps) {
			p.Schedules = []Schedule{{Name: "s", Expression: "rate(1 day)", Request: json.RawMessage(`{"pipeline":"nope"}`)}}
		}, "Schedules[s].Request"},
		{"schedule with a bad name", func(p *RunnerProps) {
			p.Schedules = []Schedule{{Name: "a/b", Expression: "rate(1 day)", Request: json.RawMessage(`{"pipeline":"webhook"}`)}}
		}, "Schedules[a/b]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			props := valid()
			tt.edit(&props)
			app := awscdk.NewApp(nil)
			stack, err := NewStack(app, "refused", &props)
			if err == nil {
				t.Fatal("NewStack accepted the props")
			}
			if stack != nil {
				t.Error("NewStack returned a stack with its error")
			}
			if faults := faults(err); !slices.Contains(faults, tt.wantField) {
				t.Errorf("error %q names %v, want %s", err, faults, tt.wantField)
			}
			if n := len(*app.Node().Children()); n != 0 {
				t.Errorf("the app has %d children after a refusal, want none", n)
			}
		})
	}
}

// TestSSRFAllowListPerTarget guards the product line "the AWS default
// refuses loopback; the emulator stack allow-lists its local receivers": the
// webhook's allow-list reaches submit and item as given, defaults to the
// loopback receivers on the emulator and to nothing on AWS.
func TestSSRFAllowListPerTarget(t *testing.T) {
	for target, want := range map[string]string{TargetEmulator: "127.0.0.1,::1,localhost", TargetAWS: "10.20.0.0/16,hooks.internal"} {
		s := synth(t, target)
		for _, fn := range []string{FunctionSubmit, FunctionItem} {
			env, _ := s.properties(t, s.ids[fn])["Environment"].(map[string]any)["Variables"].(map[string]any)
			if got := env[config.EnvWebhookAllow]; got != want {
				t.Errorf("%s %s: %s = %v, want %q", target, fn, config.EnvWebhookAllow, got, want)
			}
		}
	}
	for _, tt := range []struct {
		name  string
		props RunnerProps
		want  string
	}{
		{"aws default", RunnerProps{Target: TargetAWS, FunctionsDir: functionsDir}, ""},
		{"emulator default", RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir}, "127.0.0.1,::1,localhost"},
		{"emulator emptied", RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, EmptyWebhookAllow: true}, ""},
	} {
		s, err := derive(&tt.props)
		if err != nil {
			t.Fatalf("%s: derive: %v", tt.name, err)
		}
		if s.webhookAllow != tt.want {
			t.Errorf("%s: allow-list %q, want %q", tt.name, s.webhookAllow, tt.want)
		}
	}
}

// faults returns the StackProps fields and environment variables named by
// the *PropError and *config.VarError values in err's tree.
func faults(err error) []string {
	var out []string
	var pe *PropError
	var ve *config.VarError
	switch {
	case errors.As(err, &pe) && error(pe) == err:
		return []string{pe.Field}
	case errors.As(err, &ve) && error(ve) == err:
		return []string{ve.Var}
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, faults(e)...)
		}
	case interface{ Unwrap() error }:
		out = faults(u.Unwrap())
	}
	return out
}

// A declared schedule is a rule targeting submit whose input carries the
// schedule's name, the tick's time (from the event) and the request.
func TestSchedules(t *testing.T) {
	s := synth(t, TargetAWS)
	var found int
	for _, r := range s.resourcesOfType("AWS::Events::Rule") {
		p := r["Properties"].(map[string]any)
		if p["ScheduleExpression"] != "cron(0 2 * * ? *)" {
			continue
		}
		found++
		tg := p["Targets"].([]any)[0].(map[string]any)
		if !jsonEqual(tg["Arn"], arnOf(s.ids[FunctionSubmit])) {
			t.Errorf("schedule target %v, want submit", tg["Arn"])
		}
		it, _ := tg["InputTransformer"].(map[string]any)
		paths, _ := it["InputPathsMap"].(map[string]any)
		tmpl := str(it["InputTemplate"])
		var timeVar string
		for k, v := range paths {
			if v == "$.time" {
				timeVar = k
			}
		}
		if timeVar == "" || !strings.Contains(tmpl, `"bulkrun_schedule":"nightly"`) || !strings.Contains(tmpl, `"time":<`+timeVar+`>`) ||
			!strings.Contains(tmpl, `"prefix":"s3://source-a/daily/"`) {
			t.Errorf("input transformer %v", it)
		}
	}
	if found != 1 {
		t.Fatalf("%d schedule rules, want 1", found)
	}
}

// The sweep runs on a schedule; uploads and upload error reports expire
// with the retention.
func TestSweepAndLifecycle(t *testing.T) {
	s := synth(t, TargetAWS)
	found := false
	for _, r := range s.resourcesOfType("AWS::Events::Rule") {
		p := r["Properties"].(map[string]any)
		tg := p["Targets"].([]any)[0].(map[string]any)
		if jsonEqual(tg["Arn"], arnOf(s.ids[FunctionSweep])) {
			found = p["ScheduleExpression"] == SweepSchedule
		}
	}
	if !found {
		t.Error("no sweep rule with the sweep schedule")
	}
	rules := s.properties(t, s.ids["bucket"])["LifecycleConfiguration"].(map[string]any)["Rules"].([]any)
	expiring := map[string]any{}
	for _, r := range rules {
		m := r.(map[string]any)
		if p, ok := m["Prefix"].(string); ok {
			expiring[p] = m["ExpirationInDays"]
		}
	}
	for _, p := range []string{config.UploadsPrefix, config.UploadErrorsPrefix, config.ScheduleErrorsPrefix} {
		if expiring[p] != float64(wanted(TargetAWS).retentionDays) {
			t.Errorf("lifecycle of %s: %v, want %d days", p, expiring[p], wanted(TargetAWS).retentionDays)
		}
	}
}

// Temporary disk, point 5: the submit function's ephemeral storage is sized
// from RunnerProps.MaxManifestBytes (2 × the manifest + 64 MiB, at least
// Lambda's 512 MiB, at most its 10,240 MiB), and the function is told the
// size so that a full disk names it. Guards docs/design/submit.md
// "Memory, disk and time of submit" (the largest source each setting
// supports) and infra/README.md "Props and defaults".
func TestSubmitEphemeralStorage(t *testing.T) {
	for _, tt := range []struct {
		manifestBytes int64
		wantMiB       int
	}{
		{0, 512},
		{DefaultMaxManifestBytes, 512},
		{DefaultMaxManifestBytes + 1, 513},
		{1 << 30, 2112},
		{MaxMaxManifestBytes, 10240},
	} {
		if got := SubmitEphemeralMiB(tt.manifestBytes); got != tt.wantMiB {
			t.Errorf("SubmitEphemeralMiB(%d) = %d, want %d", tt.manifestBytes, got, tt.wantMiB)
		}
	}
	for target, wantMiB := range map[string]float64{TargetEmulator: 512, TargetAWS: 2112} { // AWS: MaxManifestBytes 1 GiB
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			p := s.properties(t, s.ids[FunctionSubmit])
			size, _ := p["EphemeralStorage"].(map[string]any)["Size"].(float64)
			if size != wantMiB {
				t.Errorf("submit EphemeralStorage %v, want %v MiB", p["EphemeralStorage"], wantMiB)
			}
			vars := p["Environment"].(map[string]any)["Variables"].(map[string]any)
			if vars[config.EnvEphemeralStorageMiB] != strconv.Itoa(int(wantMiB)) {
				t.Errorf("%s = %v, want %v", config.EnvEphemeralStorageMiB, vars[config.EnvEphemeralStorageMiB], wantMiB)
			}
			for _, fn := range []string{FunctionItem, FunctionFinalize, FunctionSweep} {
				if e, ok := s.properties(t, s.ids[fn])["EphemeralStorage"]; ok {
					t.Errorf("%s has ephemeral storage %v; only submit spills", fn, e)
				}
			}
		})
	}
}

// Finalize goes on with a run's next chunk by invoking itself, through a
// policy of its own (no dependency cycle) on exactly its own ARN.
func TestFinalizeInvokesItself(t *testing.T) {
	s := synth(t, TargetAWS)
	self := arnOf(s.ids[FunctionFinalize])
	found := false
	for id := range s.resourcesOfType("AWS::IAM::Policy") {
		for _, st := range s.statements(t, id) {
			if slices.Contains(actions(st), "lambda:InvokeFunction") && jsonEqual(st["Resource"], self) {
				found = true
				if id == s.ids["policy:"+FunctionFinalize] {
					t.Errorf("the self-invoke grant is in finalize's default policy (a dependency cycle)")
				}
			}
		}
	}
	if !found {
		t.Error("no policy lets finalize invoke itself")
	}
}

// Submit past the gateway timeout, point 1: submit may invoke itself (the
// background read of an S3 source), through a policy of its own (no
// dependency cycle), and a rule sends it the tick that hands dead reads
// off again.
func TestSubmitHandsOffToItself(t *testing.T) {
	s := synth(t, TargetAWS)
	self := arnOf(s.ids[FunctionSubmit])
	found := false
	for id := range s.resourcesOfType("AWS::IAM::Policy") {
		for _, st := range s.statements(t, id) {
			if slices.Contains(actions(st), "lambda:InvokeFunction") && jsonEqual(st["Resource"], self) {
				found = true
				if id == s.ids["policy:"+FunctionSubmit] {
					t.Errorf("the self-invoke grant is in submit's default policy (a dependency cycle)")
				}
			}
		}
	}
	if !found {
		t.Error("no policy lets submit invoke itself")
	}
	ticks := 0
	for _, r := range s.resourcesOfType("AWS::Events::Rule") {
		p := r["Properties"].(map[string]any)
		tg := p["Targets"].([]any)[0].(map[string]any)
		if jsonEqual(tg["Arn"], self) && strings.Contains(str(tg["Input"]), `"bulkrun_submit_tick":true`) {
			ticks++
			if p["ScheduleExpression"] != DefaultFinalizeTickSchedule {
				t.Errorf("submit tick schedule %v", p["ScheduleExpression"])
			}
		}
	}
	if ticks != 1 {
		t.Errorf("%d submit tick rules, want 1", ticks)
	}
}

// Failed starts and invocations leave a trace: an upload or schedule tick
// whose submit invocation still fails after Lambda's retries goes to the
// submit failures queue, a failed asynchronous invocation of finalize or
// sweep to the invocation failures queue, a schedule event EventBridge
// could not deliver to the schedule dead-letter queue; an alarm fires on
// each queue's depth.
func TestFailureDestinationsAndAlarms(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			configs := s.resourcesOfType("AWS::Lambda::EventInvokeConfig")
			want := map[string]string{s.ids[FunctionSubmit]: "submitFailures", s.ids[FunctionFinalize]: "invokeFailures", s.ids[FunctionSweep]: "invokeFailures"}
			if len(configs) != len(want) {
				t.Fatalf("%d EventInvokeConfig resources, want %d (submit, finalize, sweep)", len(configs), len(want))
			}
			for _, c := range configs {
				p := c["Properties"].(map[string]any)
				fn, _ := p["FunctionName"].(map[string]any)["Ref"].(string)
				queue, ok := want[fn]
				if !ok {
					t.Errorf("EventInvokeConfig of %v, want one of submit, finalize, sweep", p["FunctionName"])
					continue
				}
				delete(want, fn)
				if num(t, p["MaximumRetryAttempts"]) != 2 || num(t, p["MaximumEventAgeInSeconds"]) != 6*3600 {
					t.Errorf("%s: retries %v, event age %v; want 2 and 6 h", fn, p["MaximumRetryAttempts"], p["MaximumEventAgeInSeconds"])
				}
				dest, _ := p["DestinationConfig"].(map[string]any)
				onFailure, _ := dest["OnFailure"].(map[string]any)
				if !jsonEqual(onFailure["Destination"], arnOf(s.ids[queue])) {
					t.Errorf("%s: OnFailure = %v, want the %s queue", fn, onFailure, queue)
				}
				// Lambda sends with the function's role.
				raw, _ := json.Marshal(s.statements(t, s.ids["policy:"+map[string]string{s.ids[FunctionSubmit]: FunctionSubmit,
					s.ids[FunctionFinalize]: FunctionFinalize, s.ids[FunctionSweep]: FunctionSweep}[fn]]))
				if !strings.Contains(string(raw), s.ids[queue]) {
					t.Errorf("%s's policy does not name its failure queue", fn)
				}
			}
			// Every schedule rule's target dead-letters to the schedule queue.
			rules := s.resourcesOfType("AWS::Events::Rule")
			if len(rules) < 3 {
				t.Fatalf("%d rules, want the sweep, submit tick and finalize tick at least", len(rules))
			}
			for id, r := range rules {
				for _, tg := range r["Properties"].(map[string]any)["Targets"].([]any) {
					dlc, _ := tg.(map[string]any)["DeadLetterConfig"].(map[string]any)
					if !jsonEqual(dlc["Arn"], arnOf(s.ids["scheduleDLQ"])) {
						t.Errorf("rule %s: DeadLetterConfig %v, want the schedule dead-letter queue", id, dlc)
					}
				}
			}
			for queue, alarm := range map[string]string{"submitFailures": "submitFailuresAlarm", "invokeFailures": "invokeFailuresAlarm", "scheduleDLQ": "scheduleDLQAlarm"} {
				q := s.properties(t, s.ids[queue])
				if num(t, q["MessageRetentionPeriod"]) != 14*24*3600 || q["SqsManagedSseEnabled"] != true {
					t.Errorf("%s %v: want 14 days retention and SSE", queue, q)
				}
				a := s.properties(t, s.ids[alarm])
				dims, _ := a["Dimensions"].([]any)
				queueDim := len(dims) == 1 && dims[0].(map[string]any)["Name"] == "QueueName" &&
					jsonEqual(dims[0].(map[string]any)["Value"], getAttMap(s.ids[queue], "QueueName"))
				if a["Namespace"] != "AWS/SQS" || a["MetricName"] != "ApproximateNumberOfMessagesVisible" || !queueDim ||
					num(t, a["Threshold"]) != 1 || a["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || num(t, a["EvaluationPeriods"]) != 1 {
					t.Errorf("%s %v: want ApproximateNumberOfMessagesVisible of %s ≥ 1", alarm, a, queue)
				}
			}
		})
	}
}

// TestDestroyKeepsDataSSLOnly guards "what cdk destroy keeps keeps its
// TLS-only policy": on AWS the bucket, the table and every queue are
// retained, and so are the bucket policy and the queue policies that deny
// plain HTTP (RetainExceptOnCreate: a failed first create deletes them,
// firstdeploy_test.go); on the emulator everything goes.
func TestDestroyKeepsDataSSLOnly(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			s := synth(t, target)
			want := map[string]string{TargetAWS: "RetainExceptOnCreate", TargetEmulator: "Delete"}[target]
			for _, typ := range []string{"AWS::S3::Bucket", "AWS::S3::BucketPolicy", "AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::SQS::QueuePolicy"} {
				res := s.resourcesOfType(typ)
				if len(res) == 0 {
					t.Errorf("no %s", typ)
				}
				for id, r := range res {
					if got, _ := r["DeletionPolicy"].(string); got != want && !(want == "Delete" && got == "") {
						t.Errorf("%s %s: DeletionPolicy %q, want %s", typ, id, got, want)
					}
				}
			}
		})
	}
}

func getAttMap(id, attr string) map[string]any { return map[string]any{"Fn::GetAtt": getAtt(id, attr)} }

// TestLambdaPipelineInvokeGrants guards the product line "the lambda
// pipeline invokes only allow-listed functions, least privilege": the
// item function's role may lambda:InvokeFunction each LambdaFunctions
// function in a statement of its own, with that function's ARN as the
// only resource (a name becomes this stack's account and region); no
// other function may invoke them; submit and item are told the list. On
// the emulator the default is the integration suite's example function.
func TestLambdaPipelineInvokeGrants(t *testing.T) {
	for _, tt := range []struct {
		target string
		want   []string // one statement each
		env    string
	}{
		{TargetAWS, []string{"arn:aws:lambda:eu-west-1:123456789012:function:score", "arn:aws:lambda:eu-west-1:123456789012:function:other:live"},
			"score,arn:aws:lambda:eu-west-1:123456789012:function:other:live"},
		{TargetEmulator, []string{"arn:aws:lambda:" + pseudo["AWS::Region"] + ":" + pseudo["AWS::AccountId"] + ":function:bulkrun-example-python"},
			"bulkrun-example-python"},
	} {
		t.Run(tt.target, func(t *testing.T) {
			s := synth(t, tt.target)
			var got []string
			for _, fn := range []string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep} {
				for _, st := range s.statements(t, s.ids["policy:"+fn]) {
					res := resolveAll(t, st["Resource"])
					if !slices.Contains(actions(st), "lambda:InvokeFunction") || !strings.Contains(strings.Join(res, " "), ":function:") {
						continue
					}
					if fn != FunctionItem {
						t.Errorf("%s may invoke %v", fn, res)
						continue
					}
					if len(res) != 1 || len(actions(st)) != 1 {
						t.Errorf("item: %v on %v, want lambda:InvokeFunction on one function per statement", actions(st), res)
					}
					got = append(got, res...)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("item may invoke %q, want %q", got, tt.want)
			}
			for _, fn := range []string{FunctionSubmit, FunctionItem} {
				env, _ := s.properties(t, s.ids[fn])["Environment"].(map[string]any)["Variables"].(map[string]any)
				if env[config.EnvLambdaFunctions] != tt.env {
					t.Errorf("%s %s = %v, want %q", fn, config.EnvLambdaFunctions, env[config.EnvLambdaFunctions], tt.env)
				}
			}
		})
	}
}

// TestConcurrencyRulesNamed guards the product line "synth refuses a
// concurrency the account cannot run, naming the rule": a reservation of
// the item function below what both of its event sources may run, and
// reservations leaving less than Lambda's 100 unreserved, each refused
// with the rule's name in the error.
func TestConcurrencyRulesNamed(t *testing.T) {
	for _, tt := range []struct {
		name  string
		props RunnerProps
		rule  string
	}{
		{"item reservation = 1 × ItemsMaxConcurrency", RunnerProps{ItemsMaxConcurrency: 100, ReservedConcurrency: map[string]int{FunctionItem: 100}}, RuleReservedCoversEventSources},
		{"reservations leave 50 of 1000", RunnerProps{ReservedConcurrency: map[string]int{FunctionItem: 800, FunctionSubmit: 100, FunctionFinalize: 50}}, RuleUnreservedAtLeast100},
		{"a new account's 50", RunnerProps{AccountConcurrency: 50}, RuleEventSourcesFitUnreserved},
		// Provisioned mode: the items queue's source runs up to 10 per
		// poller, the dead-letter queue's ItemsMaxConcurrency.
		{"item reservation under 10 × 50 pollers + 100", RunnerProps{ItemsMinimumPollers: 2, ItemsMaximumPollers: 50, ReservedConcurrency: map[string]int{FunctionItem: 599}}, RuleReservedCoversEventSources},
		{"100 pollers in an account of 1000", RunnerProps{ItemsMinimumPollers: 2, ItemsMaximumPollers: 100}, RuleEventSourcesFitUnreserved},
	} {
		tt.props.Target, tt.props.FunctionsDir = TargetEmulator, functionsDir
		err := Validate(&tt.props)
		if err == nil || !strings.Contains(err.Error(), "(rule "+tt.rule+")") {
			t.Errorf("%s: Validate = %v, want an error naming rule %s", tt.name, err, tt.rule)
			continue
		}
		t.Logf("%s: %v", tt.name, err)
	}
	if err := Validate(&RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, ItemsMaxConcurrency: 100,
		ReservedConcurrency: map[string]int{FunctionItem: 200, FunctionSubmit: 10}}); err != nil {
		t.Errorf("item reserved for both event sources: %v", err)
	}
	if err := Validate(&RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, ItemsMinimumPollers: 2, ItemsMaximumPollers: 50,
		ReservedConcurrency: map[string]int{FunctionItem: 600}}); err != nil {
		t.Errorf("item reserved for 50 pollers and the dead-letter queue's 100: %v", err)
	}
	for _, p := range [][2]int{{0, 20}, {1, 20}, {20, 10}, {150, 100}, {201, 300}, {2, 101}} {
		err := Validate(&RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, ItemsMinimumPollers: p[0], ItemsMaximumPollers: p[1], AccountConcurrency: 30000})
		if err == nil || strings.Count(err.Error(), "ItemsMinimumPollers, ItemsMaximumPollers") != 1 || strings.Contains(err.Error(), "BULKRUN_") {
			t.Errorf("pollers %d–%d: Validate = %v, want one error naming them (not the functions' variables)", p[0], p[1], err)
		}
	}
}

// TestNewRunnerPanicsOnBadProps guards the product line "props are
// validated at synth": NewRunner refuses bad props before defining
// anything, panicking with Validate's error (as a CDK construct throws),
// so that a user's app stops at synth naming the field.
func TestNewRunnerPanicsOnBadProps(t *testing.T) {
	stack := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("refused"), nil)
	props := &RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, Timeouts: map[string]time.Duration{FunctionSubmit: time.Hour}}
	defer func() {
		err, ok := recover().(error)
		if !ok || !strings.Contains(err.Error(), "Timeouts[submit]") || err.Error() != Validate(props).Error() {
			t.Fatalf("NewRunner panicked with %v, want Validate's error naming Timeouts[submit]", err)
		}
		if n := len(*stack.Node().Children()); n != 0 {
			t.Errorf("%d constructs defined before the refusal", n)
		}
	}()
	NewRunner(stack, jsii.String("Default"), props)
}

// TestEffectTablesGranted guards the product line "staged writes only on
// tables the stack declares": the item function (and no other) may
// PutItem, UpdateItem, DeleteItem and ConditionCheckItem on each
// EffectTables table, one statement each, and is told the list; bulkrun's
// own table and a malformed name are refused at synth.
func TestEffectTablesGranted(t *testing.T) {
	s := synth(t, TargetAWS)
	want := "arn:aws:dynamodb:eu-west-1:123456789012:table/accounts"
	found := 0
	for _, fn := range []string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep} {
		for _, st := range s.statements(t, s.ids["policy:"+fn]) {
			res := resolveAll(t, st["Resource"])
			if !slices.Contains(res, want) {
				continue
			}
			found++
			got := actions(st)
			sort.Strings(got)
			if fn != FunctionItem || len(res) != 1 || !slices.Equal(got, []string{"dynamodb:ConditionCheckItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}) {
				t.Errorf("%s: %v on %v, want item's four write actions on the table alone", fn, got, res)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d statements on %s, want 1", found, want)
	}
	env, _ := s.properties(t, s.ids[FunctionItem])["Environment"].(map[string]any)["Variables"].(map[string]any)
	if env[config.EnvEffectTables] != "accounts" {
		t.Errorf("item %s = %v", config.EnvEffectTables, env[config.EnvEffectTables])
	}
	if err := Validate(&RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, EffectTables: []string{"x"}}); err == nil || !strings.Contains(err.Error(), config.EnvEffectTables) {
		t.Errorf("a 1-character table name: %v, want refused naming %s", err, config.EnvEffectTables)
	}
}

// TestItemRecursiveLoopAllowed: the item function, which sends messages to
// the queue that invokes it (slot waits, AWS unavailable), has
// RecursiveLoop Allow, its chains bounded by ledger.MaxResends; the other
// functions keep Lambda's default (Terminate).
func TestItemRecursiveLoopAllowed(t *testing.T) {
	for _, target := range targets {
		s := synth(t, target)
		for _, fn := range functionNames {
			got, _ := s.properties(t, s.ids[fn])["RecursiveLoop"].(string)
			if want := map[bool]string{true: "Allow", false: ""}[fn == FunctionItem]; got != want {
				t.Errorf("%s: %s RecursiveLoop = %q, want %q", target, fn, got, want)
			}
		}
	}
}

// TestKMSKeysDecryptThroughServices guards "the functions may decrypt
// with exactly the declared keys, and only through the services that read
// what they encrypt": per key, submit's role gets kms:Decrypt through S3
// and the item function's through S3, SSM and Secrets Manager, each in
// the key's own Region (kms:ViaService), never another action, never
// another function; bad keys are refused naming the field.
func TestKMSKeysDecryptThroughServices(t *testing.T) {
	s := synth(t, TargetAWS)
	want := map[string][]string{FunctionSubmit: {"s3"}, FunctionItem: {"s3", "ssm", "secretsmanager"}, FunctionFinalize: nil, FunctionSweep: nil}
	for fn, services := range want {
		got := map[string][]string{} // key → its ViaService values
		for _, st := range s.statements(t, s.ids["policy:"+fn]) {
			if !slices.Contains(actions(st), "kms:Decrypt") {
				continue
			}
			if a := actions(st); len(a) != 1 {
				t.Errorf("%s: kms:Decrypt with %v in one statement", fn, a)
			}
			key := fmt.Sprint(st["Resource"])
			cond, _ := st["Condition"].(map[string]any)["StringEquals"].(map[string]any)
			got[key] = append(got[key], resolveAll(t, cond["kms:ViaService"])...)
		}
		if len(services) == 0 {
			if len(got) > 0 {
				t.Errorf("%s may decrypt with %v", fn, got)
			}
			continue
		}
		for _, key := range testProps(TargetAWS).KMSKeys {
			region := strings.Split(key, ":")[3]
			var wantVia []string
			for _, svc := range services {
				wantVia = append(wantVia, svc+"."+region+".amazonaws.com")
			}
			if !slices.Equal(got[key], wantVia) {
				t.Errorf("%s: kms:Decrypt on %s via %v, want %v", fn, key, got[key], wantVia)
			}
		}
	}
	for _, tc := range []struct{ keys []string }{
		{[]string{"arn:aws:kms:eu-west-1:123456789012:alias/sources"}},
		{[]string{"1111aaaa-0000-4000-8000-000000000001"}},
		{[]string{"arn:aws:kms:eu-west-1:123456789012:key/k1", "arn:aws:kms:eu-west-1:123456789012:key/k1"}},
	} {
		err := Validate(&RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir, KMSKeys: tc.keys})
		var pe *PropError
		if !errors.As(err, &pe) || !strings.HasPrefix(pe.Field, "KMSKeys[") {
			t.Errorf("KMSKeys %v: %v, want a *PropError naming KMSKeys[i]", tc.keys, err)
		}
	}
}

// TestTableThroughput guards the table's warm throughput and write
// ceiling: by default neither is in the template (DynamoDB's own: 4,000
// writes and 12,000 reads per second warm, no ceiling), which the
// default flow at ten items per message fits and one at one item per
// message does not (TableWritesPerSecond); set, they are the table's
// WarmThroughput and OnDemandThroughput.MaxWriteRequestUnits; values the
// table would refuse or that contradict each other are refused naming
// the field.
func TestTableThroughput(t *testing.T) {
	for _, target := range targets {
		p := synth(t, target).properties(t, synth(t, target).ids["table"])
		if p["WarmThroughput"] != nil || p["OnDemandThroughput"] != nil {
			t.Errorf("%s: WarmThroughput %v, OnDemandThroughput %v by default, want neither", target, p["WarmThroughput"], p["OnDemandThroughput"])
		}
	}
	if got := TableWritesPerSecond(DefaultItemsMaxConcurrency, 10); got > DefaultWarmWrites {
		t.Errorf("the default flow at ten items per message needs %d writes/s, more than a new table's %d", got, DefaultWarmWrites)
	}
	if got := TableWritesPerSecond(DefaultItemsMaxConcurrency, 1); got != 21130 {
		t.Errorf("the default flow at one item per message needs %d writes/s, want 21130", got)
	}

	props := &RunnerProps{Target: TargetAWS, FunctionsDir: functionsDir, WarmWritesPerSecond: 22000, WarmReadsPerSecond: 15000, MaxWritesPerSecond: 30000}
	stack, err := NewStack(awscdk.NewApp(nil), "warm", props)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := assertions.Template_FromStack(stack, nil)
	expectAssertion(t, "warm throughput and ceiling", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
			"BillingMode":        "PAY_PER_REQUEST",
			"WarmThroughput":     map[string]any{"WriteUnitsPerSecond": 22000, "ReadUnitsPerSecond": 15000},
			"OnDemandThroughput": map[string]any{"MaxWriteRequestUnits": 30000},
		})
	})

	for _, tc := range []struct {
		props RunnerProps
		field string
	}{
		{RunnerProps{WarmWritesPerSecond: 3000}, "WarmWritesPerSecond"},
		{RunnerProps{WarmReadsPerSecond: 100}, "WarmReadsPerSecond"},
		{RunnerProps{MaxWritesPerSecond: -1}, "MaxWritesPerSecond"},
		{RunnerProps{WarmWritesPerSecond: 20000, MaxWritesPerSecond: 10000}, "MaxWritesPerSecond"},
	} {
		tc.props.Target, tc.props.FunctionsDir = TargetEmulator, functionsDir
		var pe *PropError
		if err := Validate(&tc.props); !errors.As(err, &pe) || pe.Field != tc.field {
			t.Errorf("%+v: %v, want a *PropError naming %s", tc.props, err, tc.field)
		}
	}
}
