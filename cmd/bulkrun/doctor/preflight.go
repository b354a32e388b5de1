package doctor

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/bulkrun/bulkrun/shared/config"
)

// The preflight: what a stack about to be deployed asks of the account
// that receives it, read from its template (the synthesized one the
// Makefile passes with --template before every deploy, or a deployed
// stack's), and checked by doctor against the account's answers:
//
//   - api-gateway-logging: the stage's logs need the account's API
//     Gateway CloudWatch role; without one, only a template holding the
//     ApiGatewayAccountRole custom resource deploys (docs/adr/0026).
//   - concurrency: Lambda's quota and what is left unreserved
//     (GetAccountSettings) against the event sources' maximum concurrency
//     and the reservations ("Lambda quotas",
//     https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html:
//     a new or low-quota account has 10 or 50).
//   - source-buckets: each SourceBuckets bucket's Region (GetBucketLocation:
//     a bucket of another Region answers 301, which the SDK does not
//     follow) and default encryption (GetBucketEncryption: SSE-KMS with a
//     customer managed key needs kms:Decrypt, RunnerProps.KMSKeys).
//   - alarm-topic: the topic's Region, its key (CloudWatch and EventBridge
//     publish only to a topic whose key policy lets their service
//     principals use it; never with aws/sns) and, for the batch events,
//     its access policy (events.amazonaws.com sns:Publish) — "Encrypting
//     messages published to Amazon SNS with AWS KMS"
//     (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html).

// topicPlan is an alarm topic the stack notifies.
type topicPlan struct {
	arn string // an existing topic's ARN; "" for one the template creates
	id  string // the template's logical id of a topic it creates
	// For a topic the template creates: its KmsMasterKeyId as written
	// ("alias/aws/sns", a key ARN, or "{Key}" for a key of the template),
	// that key's policy, and the topic's access policy.
	key         string
	keyPolicy   map[string]any
	topicPolicy map[string]any
}

// name is how the checks name the topic.
func (t topicPlan) name() string {
	if t.arn != "" {
		return t.arn
	}
	return t.id + " (created by the stack)"
}

// cfnTemplate is a CloudFormation template as JSON decodes it.
type cfnTemplate struct {
	Resources map[string]struct {
		Type       string         `json:"Type"`
		Properties map[string]any `json:"Properties"`
	} `json:"Resources"`
}

// readTemplate reads the template at path into plan: what the stack will
// ask of the account.
func ReadTemplate(path string, plan *Plan) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--template: %w", err)
	}
	if err := planTemplate(raw, plan); err != nil {
		return fmt.Errorf("--template %s: %w", path, err)
	}
	return nil
}

// planTemplate fills plan from a template's JSON: the item function's
// event sources and every function's reservation (functions are known by
// their Description, "bulkrun {name}"), a fixed bucket name, the source
// buckets (config.EnvSources), the KMS keys the roles may decrypt with,
// the alarm topics, whether the stage logs and whether the stack sets the
// account's API Gateway role.
func planTemplate(raw []byte, plan *Plan) error {
	var t cfnTemplate
	if err := json.Unmarshal(raw, &t); err != nil {
		return fmt.Errorf("not a CloudFormation template: %w", err)
	}
	if len(t.Resources) == 0 {
		return fmt.Errorf("no Resources")
	}
	plan.fromTemplate = true
	plan.Reserved = map[string]int{}
	plan.ItemsMaxConcurrency, plan.ItemsMinimumPollers, plan.ItemsMaximumPollers = 0, 0, 0
	fnName := map[string]string{} // logical id → submit, item, …
	for id, r := range t.Resources {
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		desc, _ := r.Properties["Description"].(string)
		name, ok := strings.CutPrefix(desc, "bulkrun ")
		if !ok || strings.Contains(name, " ") {
			continue
		}
		fnName[id] = name
		if n, ok := r.Properties["ReservedConcurrentExecutions"].(float64); ok {
			plan.Reserved[name] = int(n)
		}
		env, _ := r.Properties["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		for _, entry := range strings.Split(literal(vars[config.EnvSources]), ",") {
			bucket, prefix, ok := strings.Cut(strings.TrimPrefix(entry, "s3://"), "/")
			if strings.HasPrefix(entry, "s3://") && ok && prefix == "" && !strings.Contains(bucket, "{") && !slices.Contains(plan.sourceBuckets, bucket) {
				plan.sourceBuckets = append(plan.sourceBuckets, bucket)
			}
		}
	}
	topics := map[string]*topicPlan{}
	addTopic := func(v any) {
		if s, ok := v.(string); ok && strings.HasPrefix(s, "arn:") && strings.Contains(s, ":sns:") {
			if topics[s] == nil {
				topics[s] = &topicPlan{arn: s}
			}
		} else if id, ok := refTo(v); ok && t.Resources[id].Type == "AWS::SNS::Topic" && topics[id] == nil {
			topics[id] = &topicPlan{id: id}
		}
	}
	for id, r := range t.Resources {
		p := r.Properties
		switch r.Type {
		case "AWS::Lambda::EventSourceMapping":
			fn, _ := refTo(p["FunctionName"])
			sc, _ := p["ScalingConfig"].(map[string]any)
			if n, ok := sc["MaximumConcurrency"].(float64); ok && fnName[fn] == "item" {
				plan.ItemsMaxConcurrency = max(plan.ItemsMaxConcurrency, int(n))
			}
			pc, _ := p["ProvisionedPollerConfig"].(map[string]any)
			if n, ok := pc["MaximumPollers"].(float64); ok && fnName[fn] == "item" {
				plan.ItemsMaximumPollers = max(plan.ItemsMaximumPollers, int(n))
			}
			if n, ok := pc["MinimumPollers"].(float64); ok && fnName[fn] == "item" {
				plan.ItemsMinimumPollers = max(plan.ItemsMinimumPollers, int(n))
			}
		case "AWS::S3::Bucket":
			if name, ok := p["BucketName"].(string); ok {
				plan.BucketName = name
			}
		case "AWS::ApiGateway::Stage":
			plan.stageLogs = plan.stageLogs || stageLogs(p)
		case "Custom::BulkrunApiGatewayAccountRole":
			plan.setsRole = true
			plan.APIGatewayAccount = p["Replace"] == "true"
		case "AWS::IAM::Policy":
			doc, _ := p["PolicyDocument"].(map[string]any)
			for _, st := range statements(doc) {
				if st["Effect"] == "Allow" && actionsMatch(st["Action"], "kms:Decrypt") {
					for _, r := range list(st["Resource"]) {
						if s, ok := r.(string); ok && !slices.Contains(plan.kmsKeys, s) {
							plan.kmsKeys = append(plan.kmsKeys, s)
						}
					}
				}
			}
		case "AWS::CloudWatch::Alarm":
			for _, a := range list(p["AlarmActions"]) {
				addTopic(a)
			}
		case "AWS::Events::Rule":
			if strings.Contains(id, "BatchEventsAlarmRule") {
				plan.eventAlarms = true
				for _, tg := range list(p["Targets"]) {
					if m, ok := tg.(map[string]any); ok {
						addTopic(m["Arn"])
					}
				}
			}
		}
	}
	if plan.ItemsMaxConcurrency == 0 {
		return fmt.Errorf("no event source of the item function (Description \"bulkrun item\"): not a bulkrun stack's template?")
	}
	for id, tp := range topics {
		if tp.arn != "" {
			plan.alarmTopics = append(plan.alarmTopics, *tp)
			continue
		}
		p := t.Resources[id].Properties
		switch k := p["KmsMasterKeyId"].(type) {
		case string:
			tp.key = k
		case nil:
		default:
			tp.key = literal(k) // an alias ARN built with Fn::Join
			if kid, ok := refTo(k); ok {
				tp.key = "{" + kid + "}"
				if t.Resources[kid].Type == "AWS::KMS::Key" {
					tp.keyPolicy, _ = t.Resources[kid].Properties["KeyPolicy"].(map[string]any)
				}
			}
		}
		for _, r := range t.Resources {
			if r.Type != "AWS::SNS::TopicPolicy" {
				continue
			}
			for _, tv := range list(r.Properties["Topics"]) {
				if ref, ok := refTo(tv); ok && ref == id {
					tp.topicPolicy, _ = r.Properties["PolicyDocument"].(map[string]any)
				}
			}
		}
		plan.alarmTopics = append(plan.alarmTopics, *tp)
	}
	slices.SortFunc(plan.alarmTopics, func(a, b topicPlan) int { return strings.Compare(a.name(), b.name()) })
	slices.Sort(plan.sourceBuckets)
	return nil
}

// stageLogs says whether a stage's properties turn on CloudWatch logs:
// execution logs (a LoggingLevel other than OFF) or access logs.
func stageLogs(p map[string]any) bool {
	if als, ok := p["AccessLogSetting"].(map[string]any); ok && als["DestinationArn"] != nil {
		return true
	}
	for _, m := range list(p["MethodSettings"]) {
		if mm, ok := m.(map[string]any); ok {
			if l, _ := mm["LoggingLevel"].(string); l != "" && l != "OFF" {
				return true
			}
		}
	}
	return false
}

// refTo returns the logical id a {"Ref": id} or {"Fn::GetAtt": [id, …]}
// names.
func refTo(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", false
	}
	if s, ok := m["Ref"].(string); ok {
		return s, true
	}
	if a, ok := m["Fn::GetAtt"].([]any); ok && len(a) == 2 {
		s, ok := a[0].(string)
		return s, ok
	}
	return "", false
}

// literal renders a template value as a string: a string as it is, an
// Fn::Join with every part that is not a string as "{…}".
func literal(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			var parts []string
			for _, p := range list(j[1]) {
				parts = append(parts, literal(p))
			}
			return strings.Join(parts, sep)
		}
	}
	if v == nil {
		return ""
	}
	return "{…}"
}

// list returns v as a list: a list as it is, anything else as one element.
func list(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	}
	return []any{v}
}

// statements returns a policy document's statements.
func statements(doc map[string]any) []map[string]any {
	var out []map[string]any
	for _, s := range list(doc["Statement"]) {
		if m, ok := s.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// actionsMatch says whether a statement's Action (a string or a list,
// with IAM's * wildcards) covers action.
func actionsMatch(actions any, action string) bool {
	for _, a := range list(actions) {
		s, _ := a.(string)
		re := "^" + strings.ReplaceAll(regexp.QuoteMeta(strings.ToLower(s)), `\*`, ".*") + "$"
		if ok, _ := regexp.MatchString(re, strings.ToLower(action)); ok {
			return true
		}
	}
	return false
}

// allowsService says whether a resource policy (a key's or a topic's)
// lets the service principal make every one of actions: an Allow
// statement naming the principal (or "*") covers each. Conditions are not
// evaluated: a statement that has them counts (the check is for a
// principal left out, the common mistake).
func allowsService(doc map[string]any, service string, actions ...string) bool {
	for _, action := range actions {
		ok := false
		for _, st := range statements(doc) {
			if st["Effect"] == "Allow" && principalIs(st["Principal"], service) && actionsMatch(st["Action"], action) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func principalIs(p any, service string) bool {
	if p == "*" {
		return true
	}
	m, ok := p.(map[string]any)
	if !ok {
		return false
	}
	if m["AWS"] == "*" {
		return true
	}
	for _, s := range list(m["Service"]) {
		if s == service {
			return true
		}
	}
	return false
}
