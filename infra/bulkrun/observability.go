package bulkrun

import (
	"slices"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/internal/metric"
	"github.com/bulkrun/bulkrun/shared/api"
)

// alarmPeriod is the period of every alarm: one datapoint of 5 minutes.
const alarmPeriod = 5 * time.Minute

// AccessLogFormat is the API stage's access log line: one JSON object per
// request, with the caller's IAM identity and no header or body values.
// Fields: $context variables of "API Gateway mapping template and access
// logging variable reference"
// (https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-mapping-template-reference.html).
const AccessLogFormat = `{"request_id":"$context.requestId","extended_request_id":"$context.extendedRequestId",` +
	`"time":"$context.requestTime","ip":"$context.identity.sourceIp","caller":"$context.identity.caller",` +
	`"user_arn":"$context.identity.userArn","method":"$context.httpMethod","resource":"$context.resourcePath",` +
	`"path":"$context.path","protocol":"$context.protocol","status":"$context.status",` +
	`"response_length":"$context.responseLength","latency_ms":"$context.responseLatency",` +
	`"integration_latency_ms":"$context.integrationLatency","integration_status":"$context.integration.status",` +
	`"error":"$context.error.message","waf":"$context.waf.error"}`

// observe adds what an operator watches bulkrun with:
//
//   - (config.EnvMetricsStack, the stack name, is in every function's
//     environment (functionEnv): they write their metrics, package metric,
//     namespace "bulkrun", dimension Stack, as embedded-metric-format lines);
//   - X-Ray active tracing on the functions and the API stage when
//     RunnerProps.Tracing;
//   - API access logs, AccessLogFormat, into the log group ApiAccessLogs
//     (1-month retention). API Gateway writes them, and the stage's
//     execution logs, with the Region's account-wide CloudWatch role,
//     which the stack sets where none is (ApiGatewayAccountRole,
//     setup.go); `bulkrun doctor` says which role the account has;
//   - the alarms of alarmSpecs, each notifying RunnerProps.AlarmTopicARN on
//     alarm and on recovery (no actions without it); the stack's other
//     alarms (SubmitFailuresAlarm, …) get the same actions;
//   - the dashboard "{stack}-{region}-operations".
func observe(stack constructs.Construct, s settings, props *RunnerProps, r operated) {
	o := opsOf(props)
	onAWS := s.target == TargetAWS
	removal := awscdk.RemovalPolicy_DESTROY
	if onAWS {
		removal = awscdk.RemovalPolicy_RETAIN_ON_UPDATE_OR_DELETE
	}
	stackName := *awscdk.Stack_Of(stack).StackName()
	for _, name := range functionNames {
		fn := r.functions[name]
		if o.tracing {
			fn.Node().DefaultChild().(awslambda.CfnFunction).SetTracingConfig(&awslambda.CfnFunction_TracingConfigProperty{Mode: jsii.String("Active")})
			// X-Ray's write actions take no resource ("*" only): see
			// "Actions, resources, and condition keys for AWS X-Ray".
			fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Actions:   jsii.Strings("xray:PutTraceSegments", "xray:PutTelemetryRecords"),
				Resources: jsii.Strings("*"),
			}))
		}
	}

	// API access logs.
	accessLogs := awslogs.NewLogGroup(stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: removal,
	})
	stage := r.api.DeploymentStage().Node().DefaultChild().(awsapigateway.CfnStage)
	stage.SetAccessLogSetting(&awsapigateway.CfnStage_AccessLogSettingProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format:         jsii.String(AccessLogFormat),
	})
	stage.SetTracingEnabled(jsii.Bool(o.tracing))

	// Alarms.
	var action awscloudwatch.IAlarmAction
	if o.alarmTopicARN != "" {
		action = awscloudwatchactions.NewSnsAction(awssns.Topic_FromTopicArn(stack, jsii.String("AlarmTopic"), jsii.String(o.alarmTopicARN)))
	}
	var alarms []interfacesawscloudwatch.IAlarmRef
	for _, a := range alarmSpecs(stack, o, r) {
		alarm := awscloudwatch.NewAlarm(stack, jsii.String(a.id), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(stackName + "-" + a.name),
			AlarmDescription:   jsii.String(a.desc),
			Metric:             a.metric,
			Threshold:          jsii.Number(a.threshold),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		if action != nil {
			alarm.AddAlarmAction(action)
			alarm.AddOkAction(action)
		}
		alarms = append(alarms, alarm)
	}

	// The batch events an on-call engineer must hear of go to the topic
	// as they are (the event's JSON). EventBridge needs the topic's access
	// policy to allow events.amazonaws.com sns:Publish (a topic given by
	// ARN is not the stack's to change): see infra/README.md, "Operations".
	if o.alarmTopicARN != "" && !o.noEventAlarms {
		// L1: the L2 SNS target refuses a topic imported from an ARN when
		// the stack has no explicit environment (it cannot tell the
		// topic's Region is the stack's); the topic must be in the stack's
		// Region, as for the alarms' actions.
		// What EventBridge cannot deliver (the topic's policy refuses it,
		// the topic is gone) goes to the schedule dead-letter queue, alarmed.
		rule := awsevents.NewCfnRule(stack, jsii.String("BatchEventsAlarmRule"), &awsevents.CfnRuleProps{
			Description: jsii.String("bulkrun: batches stopped by their failure threshold, refused starts and paused batches, to the alarm topic"),
			EventPattern: map[string]any{
				"source":      []string{api.EventSource},
				"detail-type": api.AlarmDetailTypes(),
			},
			State: jsii.String("ENABLED"),
			Targets: []any{&awsevents.CfnRule_TargetProperty{Id: jsii.String("AlarmTopic"), Arn: jsii.String(o.alarmTopicARN),
				DeadLetterConfig: &awsevents.CfnRule_DeadLetterConfigProperty{Arn: r.scheduleDLQ.QueueArn()}}},
		})
		r.scheduleDLQ.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String("BatchEventsAlarmRuleDeadLetters"),
			Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("events.amazonaws.com"), nil)},
			Actions:    jsii.Strings("sqs:SendMessage"),
			Resources:  jsii.Strings(*r.scheduleDLQ.QueueArn()),
			Conditions: &map[string]any{"ArnEquals": map[string]any{"aws:SourceArn": rule.AttrArn()}},
		}))
	}

	// Alarms defined elsewhere in the stack notify the topic too.
	if action != nil {
		for _, c := range *stack.Node().FindAll(constructs.ConstructOrder_PREORDER) {
			if a, ok := c.(awscloudwatch.Alarm); ok && !slices.Contains(alarms, interfacesawscloudwatch.IAlarmRef(a)) {
				a.AddAlarmAction(action)
				a.AddOkAction(action)
			}
		}
	}
	dashboard(stack, r, alarms)
}

// Thresholds of the per-run health alarms (metric.RunHealth): a run whose
// ended items fail at 10 % or more, a running run with 10 % or more of its
// items waiting for a retry. Both metrics are written only past a small
// sample (metric.MinEndedForRate, MinWaitingForRate items).
const (
	FailingItemsAlarmPercent = 10.0
	RetryWaitingAlarmPercent = 10.0
)

// ResendAlarmPerInvocationSecond sets the messages-resent alarm's
// threshold: the messages the item function sent again to its own queue
// (MessagesResent, every Reason, Sum over one 5-minute period) reach 2 a
// second for each invocation the items queue may drive at once
// (ItemsMaxConcurrency): ResendAlarmThreshold, 60,000 at the default 100.
// A healthy run stays below it: a waiting message sends once per wait,
// and its waits grow from ≈ 0.5–1 s (an unavailable AWS:
// worker.UnavailableRetry; a throttling) or last a pause's check
// (minutes); a track sends once per slice of up to
// 100 units it runs one after another (≥ 1 s with a ledger write or two
// per unit), per wait, and per invocation it outlasts. A loop sending
// with no wait, or a storm of waits (every invocation re-sending its 10
// messages and ending at once), passes it within the period. Each send
// is an SQS send, receive and delete and part of an item invocation:
// ≈ $0.000002, so the threshold at the default is ≈ $35 a day
// (docs/operations.md, "Messages sent again": the runbook).
const ResendAlarmPerInvocationSecond = 2.0

// ResendAlarmThreshold is the messages-resent alarm's threshold for a
// stack whose items queue drives at most itemsMaxConcurrency invocations
// at once: ResendAlarmPerInvocationSecond × the alarm's 300 s ×
// itemsMaxConcurrency.
func ResendAlarmThreshold(itemsMaxConcurrency int) float64 {
	return ResendAlarmPerInvocationSecond * alarmPeriod.Seconds() * float64(itemsMaxConcurrency)
}

// functionNames are the functions in a fixed order.
var functionNames = []string{FunctionSubmit, FunctionItem, FunctionFinalize, FunctionSweep}

// alarmSpec is one alarm: its construct id, name suffix ("{stack}-" + name),
// metric and threshold (≥, one 5-minute period, missing data not breaching).
type alarmSpec struct {
	id, name, desc string
	metric         awscloudwatch.IMetric
	threshold      float64
}

// alarmSpecs lists the alarms:
//
//	items-queue-oldest-message        AWS/SQS ApproximateAgeOfOldestMessage (Maximum) ≥ QueueAgeAlarm seconds
//	dead-letter-queue-oldest-message  the same on the dead-letter queue: a dead letter that is not being recorded
//	{function}-errors                 AWS/Lambda Errors (Sum) ≥ 1, each function
//	{function}-throttles              AWS/Lambda Throttles (Sum) ≥ 1, each function
//	finalize-tick-failures            bulkrun TickFailures (Sum, Stack) ≥ 1: the tick ran and failed
//	finalize-tick-invocations-failed  AWS/Events FailedInvocations (Sum) of FinalizeTick ≥ 1: the tick did not run
//	dead-letters                      bulkrun DeadLettered (Sum, Stack) ≥ 1: items recorded failed from the dead-letter queue
//	runs-finalize-failed              bulkrun RunsFinalizeFailed (Sum, Stack) ≥ 1: a run could not be finished (status finalize_failed)
//	batches-paused                    bulkrun BatchesPaused (Sum, Stack) ≥ 1: a batch paused itself, its downstream failing (docs/operations.md "The downstream is down")
//	batches-paused-on-budget          bulkrun BatchesPausedOnBudget (Sum, Stack) ≥ 1: a batch's run reached its budget and paused (docs/operations.md "A batch paused at its budget")
//	items-exhausted                   bulkrun Items (Sum, Stack, Outcome exhausted) ≥ 1: items ended exhausted at a per-item ceiling (docs/design/items.md "Exhausted items")
//	items-failing                     bulkrun FailedItemsPercent (Maximum, Stack) ≥ FailingItemsAlarmPercent: one run's ended items fail
//	items-waiting-for-retry           bulkrun RetryWaitingPercent (Maximum, Stack) ≥ RetryWaitingAlarmPercent: one running run's items wait for a retry
//	run-stalled                       bulkrun RunStalledSeconds (Maximum, Stack) ≥ StallAlarm: one running run has ended no item for that long
//	messages-resent                   bulkrun MessagesResent (Sum, Stack) ≥ ResendAlarmThreshold: the item function's loops on its own queue send more than waits should
func alarmSpecs(stack constructs.Construct, o opsSettings, r operated) []alarmSpec {
	period := awscdk.Duration_Seconds(jsii.Number(alarmPeriod.Seconds()))
	age := o.queueAgeAlarm.Seconds()
	specs := []alarmSpec{
		{"ItemsQueueOldestMessageAlarm", "items-queue-oldest-message",
			"bulkrun: an item message has waited longer than expected in the items queue (consumers stalled or throttled)",
			r.items.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}), age},
		{"DeadLetterQueueOldestMessageAlarm", "dead-letter-queue-oldest-message",
			"bulkrun: a dead letter is not being recorded (a live lease or a storage error); see the item function's logs",
			r.dlq.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}), age},
	}
	sum := &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}
	for _, name := range functionNames {
		fn := r.functions[name]
		specs = append(specs,
			alarmSpec{"Errors" + name, name + "-errors", "bulkrun: the " + name + " function failed (error, crash or timeout)", fn.MetricErrors(sum), 1},
			alarmSpec{"Throttles" + name, name + "-throttles", "bulkrun: the " + name + " function was throttled", fn.MetricThrottles(sum), 1})
	}
	stackDim := &map[string]*string{metric.DimStack: awscdk.Stack_Of(stack).StackName()}
	exhaustedDim := &map[string]*string{metric.DimStack: awscdk.Stack_Of(stack).StackName(), metric.DimOutcome: jsii.String(string(api.OutcomeExhausted))}
	maxOf := func(name string) awscloudwatch.IMetric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(name),
			DimensionsMap: stackDim, Period: period, Statistic: jsii.String("Maximum")})
	}
	tick := stack.Node().FindChild(jsii.String("FinalizeTick")).(awsevents.Rule)
	specs = append(specs,
		alarmSpec{"FinalizeTickFailuresAlarm", "finalize-tick-failures",
			"bulkrun: the finalize tick (the backstop for lost finalize triggers) returned an error; see the finalize function's logs",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(metric.TickFailures),
				DimensionsMap: stackDim, Period: period, Statistic: jsii.String("Sum")}), 1},
		alarmSpec{"FinalizeTickInvocationsAlarm", "finalize-tick-invocations-failed",
			"bulkrun: EventBridge could not invoke the finalize function for the tick",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String("AWS/Events"), MetricName: jsii.String("FailedInvocations"),
				DimensionsMap: &map[string]*string{"RuleName": tick.RuleName()}, Period: period, Statistic: jsii.String("Sum")}), 1},
		alarmSpec{"DeadLettersAlarm", "dead-letters",
			"bulkrun: items were dead-lettered (recorded failed after the items queue's receive limit)",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(metric.DeadLettered),
				DimensionsMap: stackDim, Period: period, Statistic: jsii.String("Sum")}), 1},
		alarmSpec{"ItemsFailingAlarm", "items-failing",
			"bulkrun: a batch's ended items fail at or above the alarm's percentage (FailedItemsPercent names the batch in finalize's logs); see docs/operations.md, \"Items fail\"",
			maxOf(metric.FailedItemsPercent), FailingItemsAlarmPercent},
		alarmSpec{"ItemsWaitingForRetryAlarm", "items-waiting-for-retry",
			"bulkrun: a running batch has many items waiting for a retry: its downstream is failing (RetryWaitingPercent names the batch in finalize's logs); see docs/operations.md, \"The downstream is down\"",
			maxOf(metric.RetryWaitingPercent), RetryWaitingAlarmPercent},
		alarmSpec{"RunStalledAlarm", "run-stalled",
			"bulkrun: a running batch has ended no item for StallAlarm (RunStalledSeconds names the batch in finalize's logs); see docs/operations.md, \"Alarms: what each means and the first step\"",
			maxOf(metric.RunStalledSeconds), o.stallAlarm.Seconds()},
		alarmSpec{"RunsFinalizeFailedAlarm", "runs-finalize-failed",
			"bulkrun: a run could not be finished and was ended finalize_failed (its items ended; the batch's failure says why); resume it once fixed",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(metric.RunsFinalizeFailed),
				DimensionsMap: stackDim, Period: period, Statistic: jsii.String("Sum")}), 1},
		alarmSpec{"BatchesPausedAlarm", "batches-paused",
			"bulkrun: a batch paused itself: its downstream fails every call the same way (bulkrun status ID shows the class and the next probe); it resumes when a probe is answered",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(metric.BatchesPaused),
				DimensionsMap: stackDim, Period: period, Statistic: jsii.String("Sum")}), 1},
		alarmSpec{"BatchesPausedOnBudgetAlarm", "batches-paused-on-budget",
			"bulkrun: a batch's run spent its budget and paused (bulkrun status ID shows the budget and the spend); raise it to resume (bulkrun budget ID --usd N) or cancel; see docs/operations.md, \"A batch paused at its budget\"",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(metric.BatchesPausedOnBudget),
				DimensionsMap: stackDim, Period: period, Statistic: jsii.String("Sum")}), 1},
		alarmSpec{"ItemsExhaustedAlarm", "items-exhausted",
			"bulkrun: items ended exhausted at a per-item ceiling (bulkrun items ID --outcome exhausted lists them); raise it to resume exactly those (bulkrun ceilings ID) or cancel; see docs/design/items.md, \"Exhausted items\"",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(metric.Items),
				DimensionsMap: exhaustedDim, Period: period, Statistic: jsii.String("Sum")}), 1},
		alarmSpec{"MessagesResentAlarm", "messages-resent",
			"bulkrun: the item function sent 2 messages a second or more per concurrent invocation again to its own queue over 5 minutes (MessagesResent, by Reason; batch_id in its logs): a loop sends more than waits should; see docs/operations.md, \"Messages sent again\"",
			awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(metric.MessagesResent),
				DimensionsMap: stackDim, Period: period, Statistic: jsii.String("Sum")}), ResendAlarmThreshold(o.itemsMaxConcurrency)},
	)
	return specs
}

// dashboard adds "{stack}-operations": items by outcome, fan-out rate,
// retries and dead letters; item duration and finalize lag; queue depth
// and age; function errors, throttles and concurrency; API traffic; the
// alarms' states.
func dashboard(stack constructs.Construct, r operated, alarms []interfacesawscloudwatch.IAlarmRef) {
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	m := func(name, stat string, dims map[string]*string, label string) awscloudwatch.IMetric {
		dims[metric.DimStack] = awscdk.Stack_Of(stack).StackName()
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{Namespace: jsii.String(metric.Namespace), MetricName: jsii.String(name),
			DimensionsMap: &dims, Statistic: jsii.String(stat), Period: minute, Label: jsii.String(label)})
	}
	var outcomes []awscloudwatch.IMetric
	for _, oc := range api.TerminalOutcomes() {
		outcomes = append(outcomes, m(metric.Items, "Sum", map[string]*string{metric.DimOutcome: jsii.String(string(oc))}, string(oc)))
	}
	graph := func(title string, left []awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: &left, Width: jsii.Number(8), Height: jsii.Number(6)})
	}
	perFn := func(f func(awslambda.Function) awscloudwatch.IMetric) []awscloudwatch.IMetric {
		var out []awscloudwatch.IMetric
		for _, name := range functionNames {
			out = append(out, f(r.functions[name]))
		}
		return out
	}
	sum := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}
	maxi := &awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: minute}
	db := awscloudwatch.NewDashboard(stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		// Dashboard names are global to the account: the Region in it lets
		// the same stack run in two Regions.
		DashboardName: awscdk.Fn_Join(jsii.String("-"), &[]*string{awscdk.Stack_Of(stack).StackName(), awscdk.Aws_REGION(), jsii.String("operations")}),
	})
	db.AddWidgets(
		graph("Items by outcome (per minute)", outcomes),
		graph("Fan-out rate (item messages sent per minute)", []awscloudwatch.IMetric{m(metric.FannedOut, "Sum", map[string]*string{}, "fanned out")}),
		graph("Retries and dead letters (per minute)", []awscloudwatch.IMetric{
			m(metric.Retries, "Sum", map[string]*string{}, "retries"), m(metric.DeadLettered, "Sum", map[string]*string{}, "dead-lettered")}),
	)
	db.AddWidgets(
		graph("Worst batch: failed % of ended items, % of items waiting for a retry (finalize's tick)", []awscloudwatch.IMetric{
			m(metric.FailedItemsPercent, "Maximum", map[string]*string{}, "failed %"), m(metric.RetryWaitingPercent, "Maximum", map[string]*string{}, "waiting %")}),
		graph("Longest a running batch has ended no item (s)", []awscloudwatch.IMetric{
			m(metric.RunStalledSeconds, "Maximum", map[string]*string{}, "stalled")}),
	)
	db.AddWidgets(
		graph("Item duration (ms)", []awscloudwatch.IMetric{
			m(metric.ItemDurationMs, "p50", map[string]*string{}, "p50"), m(metric.ItemDurationMs, "p99", map[string]*string{}, "p99"),
			m(metric.ItemDurationMs, "Maximum", map[string]*string{}, "max")}),
		graph("Finalize lag (ms, last outcome → report)", []awscloudwatch.IMetric{
			m(metric.FinalizeLagMs, "Average", map[string]*string{}, "average"), m(metric.FinalizeLagMs, "Maximum", map[string]*string{}, "max")}),
		graph("Queues: oldest message (s) and messages visible", []awscloudwatch.IMetric{
			r.items.MetricApproximateAgeOfOldestMessage(maxi), r.dlq.MetricApproximateAgeOfOldestMessage(maxi),
			r.items.MetricApproximateNumberOfMessagesVisible(maxi), r.dlq.MetricApproximateNumberOfMessagesVisible(maxi)}),
	)
	db.AddWidgets(
		graph("Function errors", perFn(func(f awslambda.Function) awscloudwatch.IMetric { return f.MetricErrors(sum) })),
		graph("Function throttles", perFn(func(f awslambda.Function) awscloudwatch.IMetric { return f.MetricThrottles(sum) })),
		graph("Function concurrency (max)", perFn(func(f awslambda.Function) awscloudwatch.IMetric {
			return f.Metric(jsii.String("ConcurrentExecutions"), maxi)
		})),
	)
	db.AddWidgets(
		graph("API requests and errors", []awscloudwatch.IMetric{r.api.MetricCount(sum), r.api.MetricClientError(sum), r.api.MetricServerError(sum)}),
		graph("API latency (ms)", []awscloudwatch.IMetric{r.api.MetricLatency(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Period: minute})}),
		awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(8), Height: jsii.Number(6)}),
	)
}
