//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/internal/metric"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// TestAlarmsFireOnPublishedDataPoints drives every alarm of the deployed
// stack on bulkrun's own metrics with data points published as the
// functions' EMF lines would make CloudWatch record them: a value below
// the threshold leaves the alarm out of ALARM, one at it moves it to
// ALARM. MiniStack does not turn EMF lines into metrics, and evaluates an
// alarm only when PutMetricData is called (over the data points of its
// period, whatever their dimensions: each alarm is checked on its own
// metric, one at a time); the alarms on AWS/* metrics are AWS's to feed
// and are left to the template tests (TestMetricsAlarms).
func TestAlarmsFireOnPublishedDataPoints(t *testing.T) {
	ctx := context.Background()
	cw := cloudwatch.NewFromConfig(env.aws)
	var alarms []cwtypes.MetricAlarm
	p := cloudwatch.NewDescribeAlarmsPaginator(cw, &cloudwatch.DescribeAlarmsInput{AlarmNamePrefix: aws.String(deployedStack() + "-")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page.MetricAlarms {
			if aws.ToString(a.Namespace) == metric.Namespace {
				alarms = append(alarms, a)
			}
		}
	}
	want := map[string]string{"finalize-tick-failures": metric.TickFailures, "dead-letters": metric.DeadLettered,
		"runs-finalize-failed": metric.RunsFinalizeFailed, "items-failing": metric.FailedItemsPercent,
		"items-waiting-for-retry": metric.RetryWaitingPercent, "run-stalled": metric.RunStalledSeconds,
		"batches-paused": metric.BatchesPaused, "messages-resent": metric.MessagesResent, "items-exhausted": metric.Items}
	// The dimensions each alarm watches beyond Stack: those the functions
	// write the metric with (internal/metric: Items by Stack and Outcome).
	extra := map[string]map[string]string{"items-exhausted": {metric.DimOutcome: string(api.OutcomeExhausted)}}
	seen := map[string]bool{}
	for _, a := range alarms {
		name := strings.TrimPrefix(aws.ToString(a.AlarmName), deployedStack()+"-")
		seen[name] = true
		if m, ok := want[name]; ok && aws.ToString(a.MetricName) != m {
			t.Errorf("%s: metric %s, want %s", name, aws.ToString(a.MetricName), m)
		}
		dims := map[string]string{}
		for _, d := range a.Dimensions {
			dims[aws.ToString(d.Name)] = aws.ToString(d.Value)
		}
		wantDims := map[string]string{metric.DimStack: deployedStack()}
		maps.Copy(wantDims, extra[name])
		if !maps.Equal(dims, wantDims) {
			t.Errorf("%s: dimensions %v, want %v (what the functions write)", name, dims, wantDims)
		}
		threshold := aws.ToFloat64(a.Threshold)
		below := 0.0
		if a.Statistic == cwtypes.StatisticMaximum {
			below = threshold - 1
		}
		put := func(v float64) cwtypes.StateValue {
			t.Helper()
			if _, err := cw.PutMetricData(ctx, &cloudwatch.PutMetricDataInput{Namespace: a.Namespace, MetricData: []cwtypes.MetricDatum{{
				MetricName: a.MetricName, Dimensions: a.Dimensions, Value: aws.Float64(v), Timestamp: aws.Time(time.Now()),
			}}}); err != nil {
				t.Fatal(err)
			}
			out, err := cw.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{AlarmNames: []string{aws.ToString(a.AlarmName)}})
			if err != nil || len(out.MetricAlarms) != 1 {
				t.Fatalf("%s: %v", name, err)
			}
			return out.MetricAlarms[0].StateValue
		}
		before := a.StateValue
		// Leave the alarm as it was found: later tests (TestDoctor) read
		// the stack's alarm states, and MiniStack evaluates an alarm only
		// when data is put, so nothing else would move it back.
		alarmName := aws.ToString(a.AlarmName)
		t.Cleanup(func() {
			if _, err := cw.SetAlarmState(context.Background(), &cloudwatch.SetAlarmStateInput{AlarmName: &alarmName,
				StateValue: before, StateReason: aws.String("reset by TestAlarmsFireOnPublishedDataPoints")}); err != nil {
				t.Errorf("%s: set back to %s: %v", alarmName, before, err)
			}
		})
		got := put(below)
		if before != cwtypes.StateValueAlarm && got == cwtypes.StateValueAlarm {
			t.Errorf("%s: %s %v below the threshold %v: ALARM", name, a.Statistic, below, threshold)
		}
		at := put(threshold)
		if at != cwtypes.StateValueAlarm {
			t.Errorf("%s: %s %v at the threshold: %s, want ALARM", name, a.Statistic, threshold, at)
		}
		// A run within 5 minutes of the last finds the alarm in ALARM
		// already (its data points are still in the period).
		t.Logf("%-24s %s %s ≥ %v: %s before, %s after %v, %s after %v", name, aws.ToString(a.MetricName), a.Statistic, threshold, before, got, below, at, threshold)
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no alarm %s-%s on the emulator", deployedStack(), name)
		}
	}
}

// TestBatchEventsReachTheAlarmTopic: the events the stack routes to its
// alarm topic (api.AlarmDetailTypes(), the pattern of rule
// BatchEventsAlarmRule) reach an SNS topic through EventBridge: a batch
// stopped by its threshold does, a completed one does not. The test stack
// has no alarm topic, so the test puts the same rule on the default bus
// itself, with the topic subscribed by a queue.
func TestBatchEventsReachTheAlarmTopic(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	name := strings.ToLower(id)
	topic, err := sns.NewFromConfig(env.aws).CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	q, err := env.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	attrs, err := env.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sns.NewFromConfig(env.aws).Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"),
		Endpoint: aws.String(attrs.Attributes["QueueArn"]), Attributes: map[string]string{"RawMessageDelivery": "true"}}); err != nil {
		t.Fatal(err)
	}
	eb := eventbridge.NewFromConfig(env.aws)
	pattern, _ := json.Marshal(map[string]any{"source": []string{api.EventSource}, "detail-type": api.AlarmDetailTypes()})
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: &name, EventPattern: aws.String(string(pattern))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.DeleteRule(context.Background(), &eventbridge.DeleteRuleInput{Name: &name, Force: true}) })
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: &name, Targets: []ebtypes.Target{{Id: aws.String("alarm-topic"), Arn: topic.TopicArn}}}); err != nil {
		t.Fatal(err)
	}

	stopped, fine := id+"-stopped", id+"-fine"
	url := env.hook.route(stopped, func(string, int) int { return 422 })
	req := webhookRequest(stopped, url, inlineItems(4))
	zero := int64(0)
	req.Threshold = api.Threshold{FailureCount: &zero}
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := env.api.Submit(ctx, webhookRequest(fine, env.hook.route(fine, nil), inlineItems(2))); err != nil {
		t.Fatal(err)
	}
	if v := wait(t, stopped); v.Status != api.StatusThresholdExceeded {
		t.Fatalf("%s ended %s, want threshold_exceeded", stopped, v.Status)
	}
	wait(t, fine)
	got := map[string]string{}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && got[stopped] == ""; {
		out, err := env.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			var ev struct {
				DetailType string       `json:"detail-type"`
				Detail     event.Detail `json:"detail"`
			}
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
				t.Fatalf("message %s: %v", aws.ToString(m.Body), err)
			}
			got[ev.Detail.BatchID] = ev.DetailType
		}
	}
	if got[stopped] != api.DetailThresholdExceeded {
		t.Errorf("the alarm topic got %v, want %q for %s", got, api.DetailThresholdExceeded, stopped)
	}
	if dt, ok := got[fine]; ok {
		t.Errorf("a completed batch reached the alarm topic: %s", dt)
	}
	t.Logf("alarm topic got %s for %s", got[stopped], stopped)
}

// TestRunHealthMetricsInFinalizeLogs: finalize's tick writes each running
// run's health (metric.RunHealth) with the batch id: a batch of 30 items
// whose first 10 wait for a retry (5 minutes away) shows
// RetryWaitingPercent 33.33 and its stall; the values the alarms above
// are driven with are the ones the product writes. The lines are read as
// Lambda's log-level filtering keeps them under finalize's LoggingConfig
// (functionLogs), and, published as CloudWatch extracts them
// (publishEMF), fire the items-waiting-for-retry alarm: at any LogLevel
// of the stack. (The failures are of
// three classes, so the batch does not pause itself: a paused batch's
// waiting is the batches-paused alarm's.)
func TestRunHealthMetricsInFinalizeLogs(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	const n, failing = 30, 10
	url := env.hook.route(id, func(key string, _ int) int {
		var i int
		if _, err := fmt.Sscanf(key, "item-%d", &i); err == nil && i < failing {
			return []int{500, 502, 504}[i%3] // three failure classes: no outage pause
		}
		return 200
	})
	req := webhookRequest(id, url, inlineItems(n))
	req.ItemsPerMessage = 1
	req.Retry = &api.RetryPolicy{IntervalSeconds: 300, BackoffRate: 1, MaxDelaySeconds: 300}
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.api.Cancel(context.Background(), id) })
	var v wire.BatchView
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		var err error
		if v, err = env.api.Status(ctx, id); err != nil {
			t.Fatal(err)
		}
		if v.Live != nil && v.Live.RetryWaiting == failing && v.Census.Succeeded == n-failing {
			break
		}
	}
	if v.Live == nil || v.Live.RetryWaiting != failing || !v.NeedsAttention || v.Pause != nil {
		t.Fatalf("live view %+v, needs attention %v, pause %+v: want %d waiting", v.Live, v.NeedsAttention, v.Pause, failing)
	}
	if out, err := env.lambda.Invoke(ctx, &lambda.InvokeInput{FunctionName: &env.finalizeFn, Payload: []byte(`{"tick":true}`)}); err != nil || out.FunctionError != nil {
		t.Fatalf("invoke finalize's tick: %v", err)
	}
	lines := emfLines(t, config.OutputFinalizeFunction, id, func(l []map[string]any) bool {
		return len(sums(l, metric.RetryWaitingPercent, "")) > 0 && len(sums(l, metric.RunStalledSeconds, "")) > 0
	})
	if got := sums(lines, metric.RetryWaitingPercent, "")[""]; got != 33.33 {
		t.Errorf("RetryWaitingPercent %v, want 33.33 (%d of %d items wait)", got, failing, n)
	}
	if _, ok := sums(lines, metric.RunStalledSeconds, "")[""]; !ok {
		t.Error("no RunStalledSeconds line")
	}
	if got, ok := sums(lines, metric.FailedItemsPercent, "")[""]; !ok || got != 0 {
		t.Errorf("FailedItemsPercent %v (written %v), want 0: 20 ended, none failed", got, ok)
	}
	t.Logf("finalize's tick wrote %d health lines for %s: %v", len(lines), id, lines)

	// The lines Lambda kept become the metrics CloudWatch extracts from
	// them, and the alarm on RetryWaitingPercent (≥ 10) fires on them.
	alarm := deployedStack() + "-items-waiting-for-retry"
	cw := cloudwatch.NewFromConfig(env.aws)
	before, err := cw.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{AlarmNames: []string{alarm}})
	if err != nil || len(before.MetricAlarms) != 1 {
		t.Fatalf("alarm %s: %v", alarm, err)
	}
	t.Cleanup(func() { // leave it as found (TestDoctor reads the alarms' states)
		_, _ = cw.SetAlarmState(context.Background(), &cloudwatch.SetAlarmStateInput{AlarmName: &alarm,
			StateValue: before.MetricAlarms[0].StateValue, StateReason: aws.String("reset by TestRunHealthMetricsInFinalizeLogs")})
	})
	var health []map[string]any
	for _, l := range lines {
		if _, ok := l[metric.RetryWaitingPercent]; ok {
			health = append(health, l)
		}
	}
	publishEMF(t, cw, health)
	after, err := cw.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{AlarmNames: []string{alarm}})
	if err != nil || len(after.MetricAlarms) != 1 || after.MetricAlarms[0].StateValue != cwtypes.StateValueAlarm {
		t.Errorf("alarm %s after the tick's metric lines: %+v %v, want ALARM", alarm, after.MetricAlarms, err)
	}
}

// publishEMF records the metrics of embedded-metric-format documents as
// CloudWatch extracts them from the logs ("Specification: Embedded metric
// format"): each metric of each directive, with each of its dimension
// sets, at the document's Timestamp — what MiniStack does not do
// (localstack/README.md).
func publishEMF(t *testing.T, cw *cloudwatch.Client, docs []map[string]any) {
	t.Helper()
	for _, doc := range docs {
		raw, _ := json.Marshal(doc["_aws"])
		var meta struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatalf("EMF metadata %s: %v", raw, err)
		}
		for _, d := range meta.CloudWatchMetrics {
			var data []cwtypes.MetricDatum
			for _, m := range d.Metrics {
				v, ok := doc[m.Name].(float64)
				if !ok {
					t.Fatalf("EMF document without a value for %s: %v", m.Name, doc)
				}
				for _, set := range d.Dimensions {
					var dims []cwtypes.Dimension
					for _, name := range set {
						dims = append(dims, cwtypes.Dimension{Name: aws.String(name), Value: aws.String(fmt.Sprint(doc[name]))})
					}
					data = append(data, cwtypes.MetricDatum{MetricName: aws.String(m.Name), Unit: cwtypes.StandardUnit(m.Unit),
						Dimensions: dims, Value: aws.Float64(v), Timestamp: aws.Time(time.UnixMilli(meta.Timestamp))})
				}
			}
			if _, err := cw.PutMetricData(context.Background(), &cloudwatch.PutMetricDataInput{Namespace: aws.String(d.Namespace), MetricData: data}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// deployedStack is the name of the stack under test.
func deployedStack() string {
	if name := os.Getenv("BULKRUN_STACK"); name != "" {
		return name
	}
	return config.DefaultStackName
}
