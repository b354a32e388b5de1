package bulkrun

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// opsAWS is a third shared stack: the AWS target with every operations
// prop set, so that each can be traced from props to the template.
const opsAWS = "aws+ops"

const testAlarmTopic = "arn:aws:sns:eu-west-1:123456789012:bulkrun-alarms"

func opsProps() *RunnerProps {
	p := testProps(TargetAWS)
	p.AlarmTopicARN = testAlarmTopic
	p.Tracing = true
	p.QueueAgeAlarm = 45 * time.Minute
	p.StallAlarm = 40 * time.Minute
	p.BucketVersioning = true
	p.APIRateLimit = 20
	p.APIBurstLimit = 40
	p.ApiGatewayAccount = true
	p.TaskStateMachines = testTaskStateMachines
	return p
}

// testTaskStateMachines are opsAWS's TaskStateMachines: a name and an ARN.
var testTaskStateMachines = []string{"orders", "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly"}

// synthOps returns the shared stack of name: a target of synth, or opsAWS.
func synthOps(t *testing.T, name string) *synthesized {
	t.Helper()
	if name != opsAWS {
		return synth(t, name)
	}
	synthMu.Lock()
	defer synthMu.Unlock()
	if s, ok := synthCache[name]; ok {
		return s
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	props := opsProps()
	stack, err := NewStack(app, config.DefaultStackName, props)
	if err != nil {
		t.Fatalf("NewStack(%s): %v", name, err)
	}
	tmpl := assertions.Template_FromStack(stack, nil)
	raw, err := json.Marshal(tmpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	s := &synthesized{target: TargetAWS, props: props, stack: stack, template: tmpl, ids: map[string]string{}}
	if err := json.Unmarshal(raw, &s.json); err != nil {
		t.Fatal(err)
	}
	for _, fn := range functionNames {
		s.ids[fn] = logicalID(stack, fn)
	}
	for _, id := range []string{"Bucket", "Table", "ItemsQueue", "ItemsDeadLetterQueue", "FinalizeTick", "ApiAccessLogs", "RequestValidator"} {
		s.ids[id] = logicalID(stack, id)
	}
	synthCache[name] = s
	return s
}

// id returns the logical id of the construct at path.
func (s *synthesized) id(path ...string) string { return logicalID(s.stack, path...) }

var opsStacks = []string{TargetEmulator, TargetAWS, opsAWS}

// TestMetricsAlarms guards the alarms product line: each alarm's metric
// (namespace, name, statistic, dimensions), threshold, period and actions;
// every alarm of the stack (these and the others) notifies
// RunnerProps.AlarmTopicARN, and without it has no actions.
func TestMetricsAlarms(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			age, stall := 1800.0, 1800.0
			if name == opsAWS {
				age, stall = 2700, 2400
			}
			// messages-resent: 2 a second × 300 s × ItemsMaxConcurrency,
			// the default 100 on the emulator's stack, 150 on the AWS ones
			// (testProps).
			resent := 60000.0
			if name != TargetEmulator {
				resent = 90000
			}
			type alarm struct {
				ns, metric, stat string
				dims             map[string]string
				threshold        float64
			}
			fnDim := func(fn string) map[string]string { return map[string]string{"FunctionName": "{" + s.id(fn) + "}"} }
			want := map[string]alarm{
				"bulkrun-items-queue-oldest-message": {"AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum",
					map[string]string{"QueueName": "{" + s.id("ItemsQueue") + ".QueueName}"}, age},
				"bulkrun-dead-letter-queue-oldest-message": {"AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum",
					map[string]string{"QueueName": "{" + s.id("ItemsDeadLetterQueue") + ".QueueName}"}, age},
				"bulkrun-finalize-tick-failures": {"bulkrun", "TickFailures", "Sum", map[string]string{"Stack": "bulkrun"}, 1},
				"bulkrun-finalize-tick-invocations-failed": {"AWS/Events", "FailedInvocations", "Sum",
					map[string]string{"RuleName": "{" + s.id("FinalizeTick") + "}"}, 1},
				"bulkrun-dead-letters":             {"bulkrun", "DeadLettered", "Sum", map[string]string{"Stack": "bulkrun"}, 1},
				"bulkrun-runs-finalize-failed":     {"bulkrun", "RunsFinalizeFailed", "Sum", map[string]string{"Stack": "bulkrun"}, 1},
				"bulkrun-batches-paused":           {"bulkrun", "BatchesPaused", "Sum", map[string]string{"Stack": "bulkrun"}, 1},
				"bulkrun-batches-paused-on-budget": {"bulkrun", "BatchesPausedOnBudget", "Sum", map[string]string{"Stack": "bulkrun"}, 1},
				"bulkrun-items-failing":            {"bulkrun", "FailedItemsPercent", "Maximum", map[string]string{"Stack": "bulkrun"}, 10},
				"bulkrun-items-waiting-for-retry":  {"bulkrun", "RetryWaitingPercent", "Maximum", map[string]string{"Stack": "bulkrun"}, 10},
				"bulkrun-run-stalled":              {"bulkrun", "RunStalledSeconds", "Maximum", map[string]string{"Stack": "bulkrun"}, stall},
				"bulkrun-messages-resent":          {"bulkrun", "MessagesResent", "Sum", map[string]string{"Stack": "bulkrun"}, resent},
			}
			for _, fn := range []string{"submit", "item", "finalize", "sweep"} {
				want["bulkrun-"+fn+"-errors"] = alarm{"AWS/Lambda", "Errors", "Sum", fnDim(fn), 1}
				want["bulkrun-"+fn+"-throttles"] = alarm{"AWS/Lambda", "Throttles", "Sum", fnDim(fn), 1}
			}
			got := map[string]bool{}
			for id, r := range s.resourcesOfType("AWS::CloudWatch::Alarm") {
				p := r["Properties"].(map[string]any)
				an := str(p["AlarmName"])
				got[an] = true
				var wantActions any
				if name == opsAWS {
					wantActions = []any{testAlarmTopic}
				}
				if !jsonEqual(p["AlarmActions"], wantActions) || !jsonEqual(p["OKActions"], wantActions) {
					t.Errorf("%s %s: actions %v / ok %v, want %v", id, an, p["AlarmActions"], p["OKActions"], wantActions)
				}
				w, ok := want[an]
				if !ok {
					// Alarms of the stack's other parts (the submit failures
					// queue's, …) are tested there; here only their actions.
					continue
				}
				dims := map[string]string{}
				for _, d := range p["Dimensions"].([]any) {
					d := d.(map[string]any)
					dims[str(d["Name"])] = resolve(t, d["Value"])
				}
				if p["Namespace"] != w.ns || p["MetricName"] != w.metric || p["Statistic"] != w.stat || fmt.Sprint(dims) != fmt.Sprint(w.dims) {
					t.Errorf("%s: metric %v/%v %v %v, want %s/%s %s %v", an, p["Namespace"], p["MetricName"], p["Statistic"], dims, w.ns, w.metric, w.stat, w.dims)
				}
				if num(t, p["Threshold"]) != w.threshold || p["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" ||
					num(t, p["EvaluationPeriods"]) != 1 || num(t, p["Period"]) != 300 || p["TreatMissingData"] != "notBreaching" {
					t.Errorf("%s: threshold %v %v, %v periods of %v s, missing %v; want ≥ %v, 1 of 300 s, notBreaching",
						an, p["ComparisonOperator"], p["Threshold"], p["EvaluationPeriods"], p["Period"], p["TreatMissingData"], w.threshold)
				}
			}
			for an := range want {
				if !got[an] {
					t.Errorf("no alarm %q", an)
				}
			}
		})
	}
}

// TestBatchEventsAlarmRule: with an alarm topic the stack routes the
// batch events an on-call engineer must hear of (threshold exceeded,
// refused, paused, halted on a refused credential) to it, by one EventBridge rule on the default bus; without a
// topic, or with NoBatchEventAlarms, there is no such rule.
func TestBatchEventsAlarmRule(t *testing.T) {
	pattern := map[string]any{"source": []any{"bulkrun"}, "detail-type": []any{"Batch Threshold Exceeded", "Batch Refused", "Batch Paused", "Batch Halted"}}
	find := func(s *synthesized) []map[string]any {
		var rules []map[string]any
		for _, r := range s.resourcesOfType("AWS::Events::Rule") {
			p := r["Properties"].(map[string]any)
			if jsonEqual(p["EventPattern"], pattern) {
				rules = append(rules, p)
			}
		}
		return rules
	}
	rules := find(synthOps(t, opsAWS))
	if len(rules) != 1 {
		t.Fatalf("%d rules route batch events to the alarm topic, want 1", len(rules))
	}
	targets, _ := rules[0]["Targets"].([]any)
	if len(targets) != 1 || targets[0].(map[string]any)["Arn"] != testAlarmTopic {
		t.Errorf("targets %v, want the alarm topic %s", targets, testAlarmTopic)
	}
	if dl, _ := targets[0].(map[string]any)["DeadLetterConfig"].(map[string]any); dl == nil || resolve(t, dl["Arn"]) == "" {
		t.Errorf("target %v has no dead-letter queue", targets[0])
	}
	if rules[0]["EventBusName"] != nil && rules[0]["EventBusName"] != "default" {
		t.Errorf("bus %v, want the default bus (where finalize and submit put their events)", rules[0]["EventBusName"])
	}
	for _, name := range []string{TargetEmulator, TargetAWS} {
		if n := len(find(synthOps(t, name))); n != 0 {
			t.Errorf("%s (no alarm topic): %d rules, want none", name, n)
		}
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	props := opsProps()
	props.NoBatchEventAlarms = true
	stack, err := NewStack(app, "quiet", props)
	if err != nil {
		t.Fatal(err)
	}
	assertions.Template_FromStack(stack, nil).ResourcePropertiesCountIs(jsii.String("AWS::Events::Rule"),
		map[string]any{"EventPattern": pattern}, jsii.Number(0))
}

// TestMetricsDashboard guards the dashboard product line: one dashboard
// that graphs every bulkrun metric, the queues, the functions and the API.
func TestMetricsDashboard(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			boards := s.resourcesOfType("AWS::CloudWatch::Dashboard")
			if len(boards) != 1 {
				t.Fatalf("%d dashboards, want 1", len(boards))
			}
			for _, b := range boards {
				p := b["Properties"].(map[string]any)
				if resolve(t, p["DashboardName"]) != "bulkrun-eu-west-1-operations" {
					t.Errorf("DashboardName = %v", p["DashboardName"])
				}
				body := resolve(t, p["DashboardBody"])
				for _, m := range []string{`"bulkrun","Items","Outcome","succeeded"`, `"bulkrun","Items","Outcome","failed"`,
					`"FannedOut"`, `"Retries"`, `"DeadLettered"`, `"ItemDurationMs"`, `"FinalizeLagMs"`,
					`"FailedItemsPercent"`, `"RetryWaitingPercent"`, `"RunStalledSeconds"`,
					`"ApproximateAgeOfOldestMessage"`, `"Throttles"`, `"Errors"`, `"5XXError"`, `"alarm"`} {
					if !strings.Contains(body, m) {
						t.Errorf("dashboard does not show %s", m)
					}
				}
			}
		})
	}
}

// TestMetricsEnvironment guards the metrics product line: every function
// is told its Stack dimension; without it the functions write no metrics
// and every alarm on a bulkrun metric stays silent.
func TestMetricsEnvironment(t *testing.T) {
	s := synthOps(t, TargetEmulator)
	for _, fn := range functionNames {
		env := s.properties(t, s.id(fn))["Environment"].(map[string]any)["Variables"].(map[string]any)
		if env[config.EnvMetricsStack] != "bulkrun" {
			t.Errorf("%s: %s = %v, want the stack name", fn, config.EnvMetricsStack, env[config.EnvMetricsStack])
		}
	}
}

// TestObservabilityAccessLogs guards the API access log product line: a
// JSON line per request into a log group with retention, and on AWS the
// account's CloudWatch role that API Gateway writes it with.
func TestObservabilityAccessLogs(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			stages := s.resourcesOfType("AWS::ApiGateway::Stage")
			if len(stages) != 1 {
				t.Fatalf("%d stages", len(stages))
			}
			for _, st := range stages {
				als, _ := st["Properties"].(map[string]any)["AccessLogSetting"].(map[string]any)
				if !jsonEqual(als["DestinationArn"], arnOf(s.id("ApiAccessLogs"))) {
					t.Errorf("access log destination %v, want the ApiAccessLogs group", als["DestinationArn"])
				}
				var line map[string]string
				if err := json.Unmarshal([]byte(str(als["Format"])), &line); err != nil {
					t.Errorf("access log format is not JSON: %v", err)
				}
				for _, k := range []string{"request_id", "status", "user_arn", "method", "resource", "latency_ms", "error"} {
					if line[k] == "" {
						t.Errorf("access log has no %s", k)
					}
				}
				// The account's CloudWatch role the logs need:
				// TestFirstDeployOnAFreshAccount.
			}
			lg := s.properties(t, s.id("ApiAccessLogs"))
			if num(t, lg["RetentionInDays"]) != 30 {
				t.Errorf("access log retention %v days, want 30", lg["RetentionInDays"])
			}
		})
	}
}

// TestObservabilityTracing guards the X-Ray product line: tracing on the
// functions (with the grant to write traces) and the stage when
// RunnerProps.Tracing, and nowhere otherwise.
func TestObservabilityTracing(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			on := name == opsAWS
			for _, fn := range functionNames {
				tc := s.properties(t, s.id(fn))["TracingConfig"]
				if got := jsonEqual(tc, map[string]any{"Mode": "Active"}); got != on {
					t.Errorf("%s: TracingConfig %v, want active %v", fn, tc, on)
				}
				var xray bool
				for _, st := range s.statements(t, s.id(fn, "ServiceRole", "DefaultPolicy")) {
					xray = xray || slices.Contains(actions(st), "xray:PutTraceSegments")
				}
				if xray != on {
					t.Errorf("%s: xray grant %v, want %v", fn, xray, on)
				}
			}
			for _, st := range s.resourcesOfType("AWS::ApiGateway::Stage") {
				if got := st["Properties"].(map[string]any)["TracingEnabled"] == true; got != on {
					t.Errorf("stage TracingEnabled %v, want %v", got, on)
				}
			}
		})
	}
}

// TestTaskStateMachinesGrant guards the construct's grant of task token
// answers and heartbeats: with TaskStateMachines, finalize and submit may
// states:SendTaskSuccess and states:SendTaskFailure, finalize also
// states:SendTaskHeartbeat (its tick sends them), on exactly each state
// machine (a name as an ARN of the stack's account and region), one
// statement each, and no other function may; without, none may, except
// on the emulator target, whose default is the example state machine.
func TestTaskStateMachinesGrant(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			on := name == opsAWS
			for _, fn := range functionNames {
				var got []string
				for _, st := range s.statements(t, s.id(fn, "ServiceRole", "DefaultPolicy")) {
					a := actions(st)
					if !slices.ContainsFunc(a, func(x string) bool { return strings.HasPrefix(x, "states:") }) {
						continue
					}
					want := []string{"states:SendTaskSuccess", "states:SendTaskFailure"}
					if fn == FunctionFinalize {
						want = append(want, "states:SendTaskHeartbeat")
					}
					if !slices.Equal(a, want) {
						t.Errorf("%s: states actions %v, want %v", fn, a, want)
					}
					got = append(got, flatten(st["Resource"]))
				}
				var want []string
				if on && (fn == FunctionFinalize || fn == FunctionSubmit) {
					want = []string{"arn:{AWS::Partition}:states:{AWS::Region}:{AWS::AccountId}:stateMachine:orders", testTaskStateMachines[1]}
				}
				if name == TargetEmulator && (fn == FunctionFinalize || fn == FunctionSubmit) {
					want = []string{"arn:{AWS::Partition}:states:{AWS::Region}:{AWS::AccountId}:stateMachine:" + config.ExampleStateMachine}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: states grants on %q, want %q", fn, got, want)
				}
			}
		})
	}
}

// TestHardeningSSLOnly guards the SSL-only product line: every queue and
// the bucket deny every request without TLS, on every target.
func TestHardeningSSLOnly(t *testing.T) {
	deny := func(t *testing.T, statements []any, action string) bool {
		for _, st := range statements {
			st := st.(map[string]any)
			if st["Effect"] == "Deny" && jsonEqual(st["Principal"], map[string]any{"AWS": "*"}) && jsonEqual(st["Action"], action) &&
				jsonEqual(st["Condition"], map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}}) {
				return true
			}
		}
		return false
	}
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			covered := map[string]bool{}
			for _, qp := range s.resourcesOfType("AWS::SQS::QueuePolicy") {
				p := qp["Properties"].(map[string]any)
				if !deny(t, p["PolicyDocument"].(map[string]any)["Statement"].([]any), "sqs:*") {
					continue
				}
				for _, q := range p["Queues"].([]any) {
					covered[resolve(t, q)] = true
				}
			}
			queues := s.resourcesOfType("AWS::SQS::Queue")
			if len(queues) < 2 {
				t.Fatalf("%d queues", len(queues))
			}
			for id := range queues {
				if !covered["{"+id+"}"] {
					t.Errorf("queue %s has no SSL-only policy", id)
				}
			}
			for _, q := range []string{"ItemsQueue", "ItemsDeadLetterQueue"} {
				if !covered["{"+s.id(q)+"}"] {
					t.Errorf("%s has no SSL-only policy", q)
				}
			}
			var bucket bool
			for _, bp := range s.resourcesOfType("AWS::S3::BucketPolicy") {
				p := bp["Properties"].(map[string]any)
				bucket = bucket || (jsonEqual(p["Bucket"], ref(s.id("Bucket"))) && deny(t, p["PolicyDocument"].(map[string]any)["Statement"].([]any), "s3:*"))
			}
			if !bucket {
				t.Error("the bucket has no SSL-only policy")
			}
		})
	}
}

// TestHardeningStorage guards the storage hardening product line: bucket
// versioning only when asked (then noncurrent versions expire after the
// retention), and on AWS the table's deletion protection and
// point-in-time recovery.
func TestHardeningStorage(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			b := s.properties(t, s.id("Bucket"))
			versioned := name == opsAWS
			if got := jsonEqual(b["VersioningConfiguration"], map[string]any{"Status": "Enabled"}); got != versioned {
				t.Errorf("VersioningConfiguration %v, want enabled %v", b["VersioningConfiguration"], versioned)
			}
			var noncurrent any
			for _, r := range b["LifecycleConfiguration"].(map[string]any)["Rules"].([]any) {
				if r := r.(map[string]any); r["Id"] == "expire-noncurrent-versions" {
					noncurrent = r
				}
			}
			if versioned {
				r, _ := noncurrent.(map[string]any)
				if !jsonEqual(r["NoncurrentVersionExpiration"], map[string]any{"NoncurrentDays": float64(9)}) || r["ExpiredObjectDeleteMarker"] != true {
					t.Errorf("noncurrent-version rule %v, want expiry after the 9-day retention and delete-marker cleanup", noncurrent)
				}
			} else if noncurrent != nil {
				t.Errorf("noncurrent-version rule without versioning: %v", noncurrent)
			}
			tbl := s.properties(t, s.id("Table"))
			onAWS := name != TargetEmulator
			// Deletion protection comes after the create, from the
			// TableProtection custom resource (TestFailedFirstCreateLeavesNothing).
			if got := len(s.resourcesOfType("Custom::BulkrunTableProtection")) == 1; got != onAWS {
				t.Errorf("TableProtection %v on %s", got, name)
			}
			if got := jsonEqual(tbl["PointInTimeRecoverySpecification"], map[string]any{"PointInTimeRecoveryEnabled": true}); got != onAWS {
				t.Errorf("PointInTimeRecoverySpecification %v on %s", tbl["PointInTimeRecoverySpecification"], name)
			}
		})
	}
}

// TestHardeningAPI guards the API hardening product line: stage throttling
// from the props on every method, and a request validator on every method
// (the {proxy+} path required).
func TestHardeningAPI(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			rate, burst := 50.0, 100.0
			if name == opsAWS {
				rate, burst = 20, 40
			}
			for _, st := range s.resourcesOfType("AWS::ApiGateway::Stage") {
				ms, _ := st["Properties"].(map[string]any)["MethodSettings"].([]any)
				if len(ms) != 1 {
					t.Fatalf("MethodSettings %v", ms)
				}
				m := ms[0].(map[string]any)
				if m["ResourcePath"] != "/*" || m["HttpMethod"] != "*" || num(t, m["ThrottlingRateLimit"]) != rate || num(t, m["ThrottlingBurstLimit"]) != burst {
					t.Errorf("method settings %v, want every method at %v/s, burst %v", m, rate, burst)
				}
				if m["DataTraceEnabled"] != false {
					t.Errorf("DataTraceEnabled %v: request bodies would be logged", m["DataTraceEnabled"])
				}
			}
			v := s.properties(t, s.id("RequestValidator"))
			if v["ValidateRequestParameters"] != true || v["ValidateRequestBody"] != true {
				t.Errorf("validator %v", v)
			}
			methods := s.resourcesOfType("AWS::ApiGateway::Method")
			if len(methods) != 2 {
				t.Errorf("%d methods, want 2", len(methods))
			}
			proxies := 0
			for id, m := range methods {
				p := m["Properties"].(map[string]any)
				if !jsonEqual(p["RequestValidatorId"], ref(s.id("RequestValidator"))) {
					t.Errorf("%s: RequestValidatorId %v", id, p["RequestValidatorId"])
				}
				if jsonEqual(p["RequestParameters"], map[string]any{"method.request.path.proxy": true}) {
					proxies++
				}
			}
			if proxies != 1 {
				t.Errorf("%d methods require the proxy path, want 1", proxies)
			}
		})
	}
}

// TestNewStackRefusesBadOperationsProps: each bad operations prop is
// refused, naming the field.
func TestNewStackRefusesBadOperationsProps(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edit  func(*RunnerProps)
		field string
	}{
		{"topic not an SNS ARN", func(p *RunnerProps) { p.AlarmTopicARN = "arn:aws:sqs:eu-west-1:123456789012:q" }, "AlarmTopicARN"},
		{"queue age under a minute", func(p *RunnerProps) { p.QueueAgeAlarm = 30 * time.Second }, "QueueAgeAlarm"},
		{"queue age beyond SQS retention", func(p *RunnerProps) { p.QueueAgeAlarm = 15 * 24 * time.Hour }, "QueueAgeAlarm"},
		{"queue age not whole minutes", func(p *RunnerProps) { p.QueueAgeAlarm = 90 * time.Second }, "QueueAgeAlarm"},
		{"stall under 10 minutes", func(p *RunnerProps) { p.StallAlarm = 5 * time.Minute }, "StallAlarm"},
		{"stall not whole minutes", func(p *RunnerProps) { p.StallAlarm = 30*time.Minute + time.Second }, "StallAlarm"},
		{"negative rate", func(p *RunnerProps) { p.APIRateLimit = -1 }, "APIRateLimit"},
		{"negative burst", func(p *RunnerProps) { p.APIBurstLimit = -5 }, "APIBurstLimit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			props := RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir}
			tt.edit(&props)
			_, err := NewStack(awscdk.NewApp(nil), "refused", &props)
			if !slices.Contains(faults(err), tt.field) {
				t.Errorf("error %v names %v, want %s", err, faults(err), tt.field)
			}
		})
	}
}
