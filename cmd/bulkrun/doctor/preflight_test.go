package doctor

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// A template's asks, as the preflight reads them: the item function's
// event sources and the reservations (functions known by their
// Description), SourceBuckets from the environment (not the stack's own
// bucket's prefixes), the KMS keys granted, a fixed bucket name, the
// alarm topics (an existing one by ARN, one the stack creates with its
// key's and access policies), the batch events' rule, the stage's logs
// and the account role resource.
func TestPlanTemplate(t *testing.T) {
	const tpl = `{"Resources": {
  "item": {"Type": "AWS::Lambda::Function", "Properties": {"Description": "bulkrun item", "ReservedConcurrentExecutions": 300,
    "Environment": {"Variables": {"BULKRUN_SOURCES": {"Fn::Join": ["", ["s3://src-a/,s3://", {"Ref": "Bucket"}, "/exports/,s3://src-b/"]]}}}}},
  "submit": {"Type": "AWS::Lambda::Function", "Properties": {"Description": "bulkrun submit", "ReservedConcurrentExecutions": 5}},
  "Scorer": {"Type": "AWS::Lambda::Function", "Properties": {"Description": "the team's scorer", "ReservedConcurrentExecutions": 40}},
  "Esm1": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {"FunctionName": {"Ref": "item"}, "ScalingConfig": {"MaximumConcurrency": 150}}},
  "Esm2": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {"FunctionName": {"Ref": "item"}, "ScalingConfig": {"MaximumConcurrency": 150}}},
  "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "team-bulkrun"}},
  "ItemPolicy": {"Type": "AWS::IAM::Policy", "Properties": {"PolicyDocument": {"Statement": [
    {"Effect": "Allow", "Action": "kms:Decrypt", "Resource": ["arn:aws:kms:eu-west-1:123456789012:key/k1", {"Fn::GetAtt": ["Key", "Arn"]}]}]}}},
  "Stage": {"Type": "AWS::ApiGateway::Stage", "Properties": {"MethodSettings": [{"LoggingLevel": "ERROR"}]}},
  "Role": {"Type": "Custom::BulkrunApiGatewayAccountRole", "Properties": {"Replace": "false"}},
  "A1": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"AlarmActions": ["arn:aws:sns:eu-west-1:123456789012:ops"]}},
  "A2": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"AlarmActions": [{"Ref": "Alarms"}]}},
  "BatchEventsAlarmRule": {"Type": "AWS::Events::Rule", "Properties": {"Targets": [{"Arn": {"Ref": "Alarms"}}]}},
  "Alarms": {"Type": "AWS::SNS::Topic", "Properties": {"KmsMasterKeyId": {"Fn::GetAtt": ["Key", "Arn"]}}},
  "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Statement": [
    {"Effect": "Allow", "Principal": {"Service": ["cloudwatch.amazonaws.com", "events.amazonaws.com"]}, "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*"}]}}},
  "AlarmsPolicy": {"Type": "AWS::SNS::TopicPolicy", "Properties": {"Topics": [{"Ref": "Alarms"}], "PolicyDocument": {"Statement": [
    {"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "sns:Publish", "Resource": {"Ref": "Alarms"}}]}}}
}}`
	var p Plan
	if err := planTemplate([]byte(tpl), &p); err != nil {
		t.Fatal(err)
	}
	if p.ItemsMaxConcurrency != 150 || !reflect.DeepEqual(p.Reserved, map[string]int{"item": 300, "submit": 5}) {
		t.Errorf("concurrency %d, reserved %v", p.ItemsMaxConcurrency, p.Reserved)
	}
	if !reflect.DeepEqual(p.sourceBuckets, []string{"src-a", "src-b"}) || p.BucketName != "team-bulkrun" {
		t.Errorf("source buckets %v, bucket name %q", p.sourceBuckets, p.BucketName)
	}
	if !reflect.DeepEqual(p.kmsKeys, []string{"arn:aws:kms:eu-west-1:123456789012:key/k1"}) {
		t.Errorf("KMS keys %v", p.kmsKeys)
	}
	if !p.stageLogs || !p.setsRole || p.APIGatewayAccount || !p.eventAlarms {
		t.Errorf("stage logs %v, sets role %v, replace %v, event alarms %v", p.stageLogs, p.setsRole, p.APIGatewayAccount, p.eventAlarms)
	}
	if len(p.alarmTopics) != 2 || p.alarmTopics[1].arn != "arn:aws:sns:eu-west-1:123456789012:ops" || p.alarmTopics[0].id != "Alarms" || p.alarmTopics[0].key != "{Key}" {
		t.Fatalf("topics %+v", p.alarmTopics)
	}
	in := p.alarmTopics[0]
	for _, svc := range []string{"cloudwatch.amazonaws.com", "events.amazonaws.com"} {
		if !allowsService(in.keyPolicy, svc, "kms:Decrypt", "kms:GenerateDataKey") {
			t.Errorf("the key policy does not let %s use the key", svc)
		}
	}
	if !allowsService(in.topicPolicy, "events.amazonaws.com", "sns:Publish") || allowsService(in.topicPolicy, "cloudwatch.amazonaws.com", "sns:Publish") {
		t.Errorf("topic policy read wrong: %v", in.topicPolicy)
	}
	if err := planTemplate([]byte(`{"Resources": {"X": {"Type": "AWS::SNS::Topic"}}}`), &Plan{}); err == nil {
		t.Error("a template without bulkrun's item function: no error")
	}
}

// The alarm topic a template creates, checked from the template alone:
// aws/sns (by alias or alias ARN) is refused, a key whose policy leaves
// EventBridge out is refused naming it, a topic policy without
// EventBridge is refused, and a key and policy letting both publish pass.
func TestAlarmTopicInTemplate(t *testing.T) {
	both := map[string]any{"Statement": []any{map[string]any{"Effect": "Allow", "Principal": map[string]any{"Service": []any{"cloudwatch.amazonaws.com", "events.amazonaws.com"}},
		"Action": []any{"kms:Decrypt", "kms:GenerateDataKey*"}, "Resource": "*"}}}
	cloudwatchOnly := map[string]any{"Statement": []any{map[string]any{"Effect": "Allow", "Principal": map[string]any{"Service": "cloudwatch.amazonaws.com"},
		"Action": "kms:*", "Resource": "*"}}}
	publish := map[string]any{"Statement": map[string]any{"Effect": "Allow", "Principal": map[string]any{"Service": "events.amazonaws.com"}, "Action": "sns:Publish", "Resource": "*"}}
	for _, tc := range []struct {
		name string
		t    topicPlan
		want string // "" ok, else a phrase of the fix
	}{
		{"aws/sns alias", topicPlan{id: "Alarms", key: "alias/aws/sns", topicPolicy: publish}, "encrypted with aws/sns"},
		{"aws/sns alias ARN", topicPlan{id: "Alarms", key: "arn:{…}:kms:eu-west-1:123456789012:alias/aws/sns", topicPolicy: publish}, "encrypted with aws/sns"},
		{"key leaves EventBridge out", topicPlan{id: "Alarms", key: "{Key}", keyPolicy: cloudwatchOnly, topicPolicy: publish}, "does not let events.amazonaws.com use it"},
		{"no topic policy", topicPlan{id: "Alarms", key: "{Key}", keyPolicy: both}, "access policy of Alarms (created by the stack) does not let events.amazonaws.com publish"},
		{"a key and policy for both", topicPlan{id: "Alarms", key: "{Key}", keyPolicy: both, topicPolicy: publish}, ""},
		{"not encrypted", topicPlan{id: "Alarms", topicPolicy: publish}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &checker{plan: Plan{fromTemplate: true, eventAlarms: true, alarmTopics: []topicPlan{tc.t}}}
			ck := d.alarmTopic(context.Background())
			switch {
			case tc.want == "" && ck.Status != OK:
				t.Errorf("%+v, want ok", ck)
			case tc.want != "" && (ck.Status != Fix || !strings.Contains(ck.Fix, tc.want)):
				t.Errorf("%+v, want a fix saying %q", ck, tc.want)
			}
		})
	}
}

// A template whose items queue's event source is in provisioned mode:
// its pollers, not a maximum concurrency, bound it (10 invocations a
// poller), and the dead-letter queue's source keeps its maximum.
func TestPlanTemplateProvisionedPollers(t *testing.T) {
	const tpl = `{"Resources": {
  "item": {"Type": "AWS::Lambda::Function", "Properties": {"Description": "bulkrun item"}},
  "Esm1": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {"FunctionName": {"Ref": "item"}, "ProvisionedPollerConfig": {"MinimumPollers": 5, "MaximumPollers": 40}}},
  "Esm2": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {"FunctionName": {"Ref": "item"}, "ScalingConfig": {"MaximumConcurrency": 100}}}
}}`
	var p Plan
	if err := planTemplate([]byte(tpl), &p); err != nil {
		t.Fatal(err)
	}
	if p.ItemsMinimumPollers != 5 || p.pollersRefused() != "" {
		t.Errorf("minimum pollers %d, refused %q; want 5, taken", p.ItemsMinimumPollers, p.pollersRefused())
	}
	if n, made := p.eventSourcesNeed(); p.ItemsMaximumPollers != 40 || n != 500 || !strings.Contains(made, "10 × ItemsMaximumPollers 40 + ItemsMaxConcurrency 100") {
		t.Errorf("pollers %d: the event sources may run %d (%s), want 500", p.ItemsMaximumPollers, n, made)
	}
}

// A stack whose event sources need more than the account leaves is told
// what to lower in its own mode: the pollers in provisioned mode (900
// left, 100 of it for the dead-letter queue: 80 pollers would fit, and
// half of that, 40, is advised, as the standard mode's advice halves).
func TestPlanLowerTo(t *testing.T) {
	if got := (Plan{ItemsMaxConcurrency: 100}).lowerTo(900); got != "-c itemsMaxConcurrency=225" {
		t.Errorf("standard mode: %q", got)
	}
	if got := (Plan{ItemsMaxConcurrency: 100, ItemsMaximumPollers: 100}).lowerTo(900); got != "-c itemsMaximumPollers=40" {
		t.Errorf("provisioned mode: %q", got)
	}
	if got := (Plan{ItemsMaxConcurrency: 100, ItemsMaximumPollers: 100}).lowerTo(50); got != "-c itemsMaximumPollers=2" {
		t.Errorf("provisioned mode, little left: %q", got)
	}
}

// Pollers bulkrun would refuse at synth are a fix for doctor too, not a
// plan it checks against the account: one without the other, a minimum
// under 2, a maximum over 100 or under the minimum.
func TestPlanPollersRefused(t *testing.T) {
	for _, p := range [][2]int{{0, 20}, {5, 0}, {1, 20}, {20, 10}, {2, 500}, {-5, -5}} {
		if why := (Plan{ItemsMinimumPollers: p[0], ItemsMaximumPollers: p[1]}).pollersRefused(); why == "" {
			t.Errorf("pollers %d–%d taken, want refused", p[0], p[1])
		}
	}
	for _, p := range [][2]int{{0, 0}, {2, 2}, {20, 100}} {
		if why := (Plan{ItemsMinimumPollers: p[0], ItemsMaximumPollers: p[1]}).pollersRefused(); why != "" {
			t.Errorf("pollers %d–%d refused: %s", p[0], p[1], why)
		}
	}
}
