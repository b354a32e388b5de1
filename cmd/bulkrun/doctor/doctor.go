// Package doctor checks a bulkrun stack — deployed, or about to be — against
// the AWS account it runs in, and says for each finding what to fix:
// `bulkrun doctor` (docs/cli.md, "Checking the stack"), and the preflight
// `make deploy` runs (docs/operations.md, "Before the first deploy: the
// preflight").
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Doctor verdicts, worst last.
const (
	OK = "ok"
	// Info: a finding only an AWS account can fix (its API Gateway
	// role, its Lambda quota), seen on the emulator, where there is
	// nothing to fix: the Fix says what to do on AWS.
	Info = "info"
	Warn = "warn" // works, but worth a look
	Fix  = "fix"  // will break (or is broken): the Fix says what to do
)

// EmulatorAccount is the account id the emulator answers with.
const EmulatorAccount = "000000000000"

// Check is one line of `bulkrun doctor`.
type Check struct {
	// Check is target, concurrency, api-gateway-logging, bucket,
	// source-buckets, alarm-topic (the preflight's), alarms, queues,
	// batches.
	Check  string `json:"check"`
	Status string `json:"status"` // OK, Info, Warn, Fix
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Plan is what a stack asks of the account: read from a template
// (--template, the synthesized stack about to be deployed; or the
// deployed stack's), else from the deployed stack's functions, else the
// flags.
type Plan struct {
	// ItemsMaxConcurrency is the stack's ItemsMaxConcurrency: the most
	// concurrent calls of the item function each of its two event
	// sources makes. Default (the CLI's flag) 100.
	ItemsMaxConcurrency int
	// ItemsMinimumPollers and ItemsMaximumPollers are the stack's: the
	// items queue's event source in provisioned mode runs up to
	// config.PollerInvocations (10) per maximum poller, and
	// ItemsMaxConcurrency bounds the dead-letter queue's only; both 0 in
	// the standard mode.
	ItemsMinimumPollers, ItemsMaximumPollers int
	// Reserved is the stack's ReservedConcurrency: function name →
	// reserved concurrent executions.
	Reserved map[string]int
	// BucketName is a fixed BucketName to deploy with ("": generated).
	BucketName string
	// APIGatewayAccount: the stack replaces the account's API Gateway
	// CloudWatch role whatever it is.
	APIGatewayAccount bool

	fromTemplate  bool        // the fields below were read from a template
	setsRole      bool        // ApiGatewayAccountRole: the stack sets its role where none is
	stageLogs     bool        // the stage writes execution or access logs
	sourceBuckets []string    // SourceBuckets
	kmsKeys       []string    // the keys the functions may decrypt with (KMSKeys)
	alarmTopics   []topicPlan // where the alarms (and batch events) go
	eventAlarms   bool        // BatchEventsAlarmRule: EventBridge publishes to the topic too
}

// Options say which checks to run and how to read their findings.
type Options struct {
	// Preflight runs only the checks of the account about to receive the
	// stack: concurrency, api-gateway-logging, bucket, source-buckets,
	// alarm-topic.
	Preflight bool
	// Emulator: the checks run against the local emulator, where the
	// findings only an AWS account can fix are informational.
	Emulator bool
	// Given, when set, applies the plan's fields given by hand (the
	// CLI's flags) over what a deployed stack asks: its template (else its
	// functions) is read first, so that what no flag says (its source
	// buckets, alarm topic, keys) is the stack's, and the flags win for
	// what they say. A plan read from a template is used as it is.
	Given func(*Plan)
}

// Stack is the stack doctor checks: the AWS configuration it is reached
// with, its name and, when it is deployed, its outputs.
type Stack struct {
	AWS      aws.Config
	Name     string
	Outputs  client.Stack
	Deployed bool
}

// Run runs the checks (the preflight's only, with opts.Preflight) and
// returns one Check per check, in the order doctor prints them. The stack
// need not be deployed: then the checks use plan (what it will ask for);
// deployed, and with no plan given, they use what the deployed stack asks
// (its template, else its functions). A check whose AWS call fails says
// so in its own line; Run itself does not fail.
func Run(ctx context.Context, st Stack, plan Plan, opts Options) []Check {
	d := &checker{aws: st.AWS, outs: st.Outputs, plan: plan, deployed: st.Deployed, stack: st.Name, emulator: opts.Emulator}
	if st.Deployed {
		if api, err := client.New(st.AWS, st.Outputs); err == nil {
			d.api = api
		}
		if !plan.fromTemplate {
			d.readPlan(ctx)
			if opts.Given != nil {
				opts.Given(&d.plan)
			}
		}
	}
	checks := []Check{d.concurrency(ctx), d.apiLogging(ctx), d.bucket(ctx), d.sourceBuckets(ctx), d.alarmTopic(ctx)}
	if !opts.Preflight {
		checks = append([]Check{d.target()}, checks...)
		checks = append(checks, d.alarms(ctx), d.queues(ctx), d.batches(ctx))
	}
	if d.emulator {
		for i := range checks {
			checks[i] = onEmulator(checks[i])
		}
	}
	return checks
}

// target says where doctor is: the emulator (--target emulator, the
// default when AWS_ENDPOINT_URL is set), with its account read from the
// stack's outputs' ARNs; else the account and region.
func (d *checker) target() Check {
	ck := Check{Check: "target", Status: OK}
	endpoint := os.Getenv("AWS_ENDPOINT_URL")
	account := accountOf(d.outs)
	switch {
	case d.emulator && account == "":
		ck.Detail = "the emulator at " + endpoint + " (AWS_ENDPOINT_URL; no stack deployed to tell its account): findings only an AWS account can fix are informational here"
	case d.emulator:
		ck.Detail = "the emulator at " + endpoint + " (AWS_ENDPOINT_URL, account " + account + "): findings only an AWS account can fix are informational here"
	case account != "":
		ck.Detail = "AWS account " + account + ", region " + d.aws.Region
	default:
		ck.Detail = "AWS, region " + d.aws.Region + " (no stack deployed to tell the account)"
	}
	if !d.emulator && endpoint != "" {
		ck.Detail += " through AWS_ENDPOINT_URL " + endpoint
	}
	return ck
}

// accountOf is the account of the stack's outputs' first ARN, "" when
// none holds one.
func accountOf(outs client.Stack) string {
	keys := make([]string, 0, len(outs))
	for k := range outs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if p := strings.Split(outs[k], ":"); len(p) >= 6 && p[0] == "arn" && p[4] != "" {
			return p[4]
		}
	}
	return ""
}

// accountFindings are the checks whose warnings and fixes only an AWS
// account can act on (its API Gateway CloudWatch role; its Lambda
// concurrency quota), unless they name a rule of the stack's own
// settings.
var accountFindings = map[string]bool{"api-gateway-logging": true, "concurrency": true}

// onEmulator is ck as the emulator sees it: a finding only an AWS account
// can fix is informational, its Fix said for AWS.
func onEmulator(ck Check) Check {
	if !accountFindings[ck.Check] || ck.Status == OK || strings.Contains(ck.Fix, "reserved-covers-event-sources") {
		return ck
	}
	ck.Status = Info
	ck.Detail = "on the emulator, nothing to fix: " + ck.Detail
	switch {
	case ck.Check == "concurrency":
		// The emulator's quota is not an account's: on AWS, doctor checks
		// the account's own against the same rule.
		rule := ""
		if m := ruleName.FindStringSubmatch(ck.Fix); m != nil {
			rule = " (rule " + m[1] + ")"
		}
		ck.Fix = "on AWS, run doctor there: it checks the account's own quota against what the stack needs" + rule
	case ck.Fix != "":
		ck.Fix = "on AWS: " + ck.Fix
	}
	return ck
}

// ruleName is a synth rule named in a fix: "(rule event-sources-fit-unreserved)".
var ruleName = regexp.MustCompile(`\(rule ([a-z0-9-]+)\)`)

type checker struct {
	aws      aws.Config
	outs     client.Stack
	api      *client.Client
	plan     Plan
	deployed bool
	stack    string
	emulator bool // the local emulator (target)
}

// readPlan reads what the deployed stack asks for: its template
// (GetTemplate, as the preflight reads a synthesized one), else its event
// sources' maximum concurrency and its functions' reservations.
func (d *checker) readPlan(ctx context.Context) {
	out, err := cloudformation.NewFromConfig(d.aws).GetTemplate(ctx, &cloudformation.GetTemplateInput{StackName: aws.String(d.stack)})
	if err == nil {
		plan := d.plan
		if planTemplate([]byte(aws.ToString(out.TemplateBody)), &plan) == nil {
			d.plan = plan
			return
		}
	}
	lc := lambda.NewFromConfig(d.aws)
	d.plan.Reserved = map[string]int{}
	for fn, key := range map[string]string{"submit": config.OutputSubmitFunction, "item": config.OutputItemFunction,
		"finalize": config.OutputFinalizeFunction, "sweep": config.OutputSweepFunction} {
		name := d.outs[key]
		if name == "" {
			continue
		}
		if out, err := lc.GetFunctionConcurrency(ctx, &lambda.GetFunctionConcurrencyInput{FunctionName: &name}); err == nil && out.ReservedConcurrentExecutions != nil {
			d.plan.Reserved[fn] = int(*out.ReservedConcurrentExecutions)
		}
		if fn != "item" {
			continue
		}
		if out, err := lc.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: &name}); err == nil {
			for _, m := range out.EventSourceMappings {
				if m.ScalingConfig != nil && m.ScalingConfig.MaximumConcurrency != nil {
					d.plan.ItemsMaxConcurrency = max(d.plan.ItemsMaxConcurrency, int(*m.ScalingConfig.MaximumConcurrency))
				}
				if pc := m.ProvisionedPollerConfig; pc != nil && pc.MaximumPollers != nil {
					d.plan.ItemsMaximumPollers = max(d.plan.ItemsMaximumPollers, int(*pc.MaximumPollers))
					d.plan.ItemsMinimumPollers = max(d.plan.ItemsMinimumPollers, int(aws.ToInt32(pc.MinimumPollers)))
				}
			}
		}
	}
}

// concurrency: GetAccountSettings against the item function's event
// sources (2 × their maximum concurrency) and the reservations (Lambda
// keeps 100 unreserved: "Lambda quotas", Concurrent executions). A
// reservation the account cannot make fails the deploy; event sources
// that may run more than the account leaves unreserved deploy, and then
// take the account's concurrency from every other function (submit and
// finalize among them): both are fixes.
func (d *checker) concurrency(ctx context.Context) Check {
	ck := Check{Check: "concurrency"}
	out, err := lambda.NewFromConfig(d.aws).GetAccountSettings(ctx, &lambda.GetAccountSettingsInput{})
	if err != nil || out.AccountLimit == nil {
		return failedCheck(ck, "GetAccountSettings", err)
	}
	limit, unreserved := int(out.AccountLimit.ConcurrentExecutions), int(aws.ToInt32(out.AccountLimit.UnreservedConcurrentExecutions))
	if why := d.plan.pollersRefused(); why != "" {
		ck.Status, ck.Detail = Fix, "the items queue's event source in provisioned mode: "+why
		ck.Fix = "deploy with -c itemsMinimumPollers=… -c itemsMaximumPollers=… within that range (synth refuses these), or neither for the standard mode"
		return ck
	}
	const eventSources, minUnreserved = 2, 100
	need, made := d.plan.eventSourcesNeed()
	reservedSum := 0
	for _, n := range d.plan.Reserved {
		reservedSum += n
	}
	// What the stack's own reservations leave: a deployed stack's are
	// already out of unreserved; a planned one's will be.
	left := unreserved
	if !d.deployed {
		left = unreserved - reservedSum
	}
	ck.Detail = fmt.Sprintf("account quota %d, unreserved %d; the item function's 2 event sources may run %d (%s)",
		limit, unreserved, need, made)
	if reservedSum > 0 {
		ck.Detail += fmt.Sprintf("; the stack reserves %s", reservedString(d.plan.Reserved))
	}
	item, itemReserved := d.plan.Reserved["item"]
	quota := fmt.Sprintf("request a \"Concurrent executions\" quota of at least %d in Service Quotas (Lambda quotas)", need+reservedSum+minUnreserved)
	switch {
	case itemReserved && item < need:
		ck.Status = Fix
		ck.Fix = fmt.Sprintf("reserve at least %d for item (%s), or lower ItemsMaxConcurrency to %d (rule reserved-covers-event-sources)", need, made, item/eventSources)
		if d.plan.ItemsMaximumPollers > 0 {
			ck.Fix = fmt.Sprintf("reserve at least %d for item (%s), or lower ItemsMaximumPollers (rule reserved-covers-event-sources)", need, made)
		}
	case reservedSum > 0 && left < minUnreserved:
		ck.Status = Fix
		ck.Detail += fmt.Sprintf(": the reservations would leave %d unreserved, and Lambda refuses any that leaves fewer than %d, so the deploy fails", left, minUnreserved)
		ck.Fix = "reserve less (-c reservedConcurrency=…), or " + quota + " (rule unreserved-at-least-100)"
	case !itemReserved && need > left:
		ck.Status = Fix
		ck.Detail += fmt.Sprintf(": the deploy succeeds, then a large batch takes all %d unreserved and throttles every other function of the account, submit and finalize among them", left)
		ck.Fix = quota + ", or deploy with " + d.plan.lowerTo(left) + " (rule event-sources-fit-unreserved)"
	case limit < 1000:
		ck.Status = Warn
		ck.Fix = fmt.Sprintf("the account's quota (%d) is below Lambda's default 1,000 (a new account?): deploy with -c accountConcurrency=%d so synth checks against it", limit, limit)
	default:
		ck.Status = OK
	}
	return ck
}

// apiLogging: the account's API Gateway CloudWatch role, which the
// stage's execution and access logs need (docs/adr/0026). Without one,
// a stack that sets its own where none is deploys; an older template
// whose stage logs would be refused.
func (d *checker) apiLogging(ctx context.Context) Check {
	ck := Check{Check: "api-gateway-logging", Status: OK}
	out, err := apigateway.NewFromConfig(d.aws).GetAccount(ctx, &apigateway.GetAccountInput{})
	if err != nil {
		return failedCheck(ck, "apigateway GetAccount", err)
	}
	role := aws.ToString(out.CloudwatchRoleArn)
	switch {
	case role != "" && d.plan.APIGatewayAccount && !strings.Contains(role, "ApiGatewayCloudWatchRole"):
		ck.Detail = "the account's API Gateway CloudWatch role is " + role + "; the stack replaces it with its own (ApiGatewayAccount), for every API of the account and Region"
	case role != "":
		ck.Detail = "the account's API Gateway CloudWatch role is " + role
	case !d.plan.fromTemplate || d.plan.setsRole:
		ck.Detail = "no API Gateway CloudWatch role in this Region yet: the stack sets its own (ApiGatewayCloudWatchRole, kept when the stack is deleted)"
	case !d.plan.stageLogs:
		ck.Detail = "no API Gateway CloudWatch role in this Region, and the stage writes no log"
	default:
		ck.Status = Fix
		ck.Detail = "the account has no API Gateway CloudWatch role in this Region, and this template's stage logs without setting one: CloudFormation refuses the stage (\"CloudWatch Logs role ARN must be set in account settings to enable logging\") and rolls the stack back"
		ck.Fix = "deploy a template of this bulkrun (ApiGatewayAccountRole sets the role where none is), or set one: API Gateway console, Settings, CloudWatch log role ARN (a role apigateway.amazonaws.com may assume, with AmazonAPIGatewayPushToCloudWatchLogs)"
	}
	return ck
}

// bucket: the deployed stack's bucket answers; a fixed name to deploy
// with is free.
func (d *checker) bucket(ctx context.Context) Check {
	ck := Check{Check: "bucket"}
	name := d.outs[config.OutputBucket]
	deployed := name != ""
	if !deployed {
		name = d.plan.BucketName
	}
	if name == "" {
		ck.Status, ck.Detail = OK, "CloudFormation generates the bucket's name (no fixed BucketName)"
		return ck
	}
	_, err := blob.NewS3(d.aws).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &name})
	status := httpStatus(err)
	switch {
	case deployed && err == nil:
		ck.Status, ck.Detail = OK, "the stack's bucket "+name+" answers"
	case deployed:
		ck.Status, ck.Detail = Fix, fmt.Sprintf("the stack's bucket %s does not answer (HTTP %d)", name, status)
		ck.Fix = "it was deleted or its policy locks the caller out: redeploy the stack (a retained bucket of a destroyed stack is not reused)"
	case status == http.StatusNotFound:
		ck.Status, ck.Detail = OK, "the name "+name+" is free"
	case err == nil:
		ck.Status, ck.Detail = Fix, "a bucket named "+name+" already exists in this account (kept by a destroyed stack?): CloudFormation cannot create it"
		ck.Fix = "deploy without BucketName (a generated name), or empty and delete that bucket first"
	default:
		ck.Status, ck.Detail = Fix, fmt.Sprintf("the name %s is taken by another account (HTTP %d)", name, status)
		ck.Fix = "deploy without BucketName: CloudFormation then generates a name no one can take first"
	}
	return ck
}

// alarms: the stack's alarms ({stack}-… and the two the outputs name)
// that are in ALARM.
func (d *checker) alarms(ctx context.Context) Check {
	ck := Check{Check: "alarms"}
	if !d.deployed {
		ck.Status, ck.Detail = OK, "not deployed yet"
		return ck
	}
	cw := cloudwatch.NewFromConfig(d.aws)
	names := map[string]bool{}
	var firing []string
	add := func(as []cwtypes.MetricAlarm) {
		for _, al := range as {
			n := aws.ToString(al.AlarmName)
			if names[n] {
				continue
			}
			names[n] = true
			if al.StateValue == cwtypes.StateValueAlarm {
				firing = append(firing, n)
			}
		}
	}
	p := cloudwatch.NewDescribeAlarmsPaginator(cw, &cloudwatch.DescribeAlarmsInput{AlarmNamePrefix: aws.String(d.stack + "-")})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return failedCheck(ck, "DescribeAlarms", err)
		}
		add(out.MetricAlarms)
	}
	var own []string
	for _, key := range []string{config.OutputSubmitFailuresAlarm, config.OutputParkingAlarm} {
		if n := d.outs[key]; n != "" && !names[n] {
			own = append(own, n)
		}
	}
	if len(own) > 0 {
		out, err := cw.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{AlarmNames: own})
		if err != nil {
			return failedCheck(ck, "DescribeAlarms", err)
		}
		add(out.MetricAlarms)
	}
	slices.Sort(firing)
	ck.Detail = fmt.Sprintf("%s, %d in ALARM", api.Count(len(names), "alarm"), len(firing))
	switch {
	case len(names) == 0:
		ck.Status, ck.Fix = Warn, "no alarm of the stack found: was it deployed with this --stack name?"
	case len(firing) > 0:
		ck.Status = Fix
		ck.Detail += ": " + strings.Join(firing, ", ")
		ck.Fix = "docs/operations.md, \"Alarms: what each means and the first step\""
	default:
		ck.Status = OK
	}
	return ck
}

// queues: depth of the stack's queues, and the items queue's oldest
// message (CloudWatch's ApproximateAgeOfOldestMessage, last 15 minutes).
func (d *checker) queues(ctx context.Context) Check {
	ck := Check{Check: "queues", Status: OK}
	if !d.deployed {
		ck.Detail = "not deployed yet"
		return ck
	}
	sc := sqs.NewFromConfig(d.aws)
	var parts, fixes []string
	for _, q := range []struct{ name, key, fix string }{
		{"items", config.OutputItemsQueueURL, ""},
		{"dead-letter", config.OutputItemsDLQURL, ""},
		{"parking", config.OutputParkingQueueURL, "dead letters wait on the parking queue: docs/operations.md, \"Parked dead letters: what to do\""},
		{"failed starts", config.OutputSubmitFailuresQueueURL, "uploads or ticks failed to start: docs/operations.md, \"Failed starts\""},
	} {
		url := d.outs[q.key]
		if url == "" {
			continue
		}
		out, err := sc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			return failedCheck(ck, "GetQueueAttributes "+q.name, err)
		}
		visible, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
		inFlight, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
		parts = append(parts, fmt.Sprintf("%s %d visible, %d in flight", q.name, visible, inFlight))
		if q.fix != "" && visible+inFlight > 0 {
			fixes = append(fixes, q.fix)
		}
	}
	age := "oldest item message: no CloudWatch data"
	if name := queueName(d.outs[config.OutputItemsQueueURL]); name != "" {
		out, err := cloudwatch.NewFromConfig(d.aws).GetMetricStatistics(ctx, &cloudwatch.GetMetricStatisticsInput{
			Namespace: aws.String("AWS/SQS"), MetricName: aws.String("ApproximateAgeOfOldestMessage"),
			Dimensions: []cwtypes.Dimension{{Name: aws.String("QueueName"), Value: &name}},
			StartTime:  aws.Time(time.Now().Add(-15 * time.Minute)), EndTime: aws.Time(time.Now()), Period: aws.Int32(300),
			Statistics: []cwtypes.Statistic{cwtypes.StatisticMaximum},
		})
		if err == nil && len(out.Datapoints) > 0 {
			oldest := 0.0
			for _, p := range out.Datapoints {
				oldest = max(oldest, aws.ToFloat64(p.Maximum))
			}
			age = fmt.Sprintf("oldest item message %s", (time.Duration(oldest) * time.Second).String())
			if oldest > (30 * time.Minute).Seconds() {
				fixes = append(fixes, "item messages wait over 30 min: the item function is throttled, failing or capped (a batch's max_concurrency); see the item-errors and item-throttles alarms")
			}
		}
	}
	ck.Detail = strings.Join(append(parts, age), "; ")
	if len(fixes) > 0 {
		ck.Status, ck.Fix = Fix, strings.Join(fixes, "; ")
	}
	return ck
}

func queueName(url string) string {
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		return url[i+1:]
	}
	return ""
}

// Stalled batches: how long a batch may stay without moving before doctor
// names it.
const (
	stalledSubmitting = 30 * time.Minute // a background read: submit's 15 min timeout, 3 tries
	stalledFinalize   = 15 * time.Minute // every item done, no report: three finalize ticks
)

// batches: running batches that do not move (notMoving); submitting
// ones whose source read stopped.
func (d *checker) batches(ctx context.Context) Check {
	ck := Check{Check: "batches", Status: OK}
	if d.api == nil {
		ck.Detail = "not deployed yet"
		return ck
	}
	page, err := d.api.ListBatches(ctx, api.ListBatchesRequest{Statuses: []api.Status{api.StatusRunning, api.StatusSubmitting}, Limit: 100})
	if err != nil {
		return failedCheck(ck, "GET /batches", err)
	}
	queued := d.queuedMessages(ctx)
	var stalled []string
	now := time.Now()
	for _, b := range page.Batches {
		age := now.Sub(b.CreatedAt)
		switch b.Status {
		case api.StatusSubmitting:
			if age > stalledSubmitting {
				stalled = append(stalled, b.ID+" (submitting for "+age.Round(time.Minute).String()+": the background read stopped; the submit tick refuses it after 3 tries)")
			}
		case api.StatusRunning:
			v, err := d.api.Status(ctx, b.ID)
			if err != nil || v.Census == nil {
				continue
			}
			if why := notMoving(v, age, queued, now); why != "" {
				stalled = append(stalled, b.ID+" ("+why+")")
			}
		}
	}
	ck.Detail = fmt.Sprintf("%d running or submitting", len(page.Batches))
	if len(stalled) > 0 {
		ck.Status = Fix
		ck.Detail += fmt.Sprintf(", %d not moving: %s", len(stalled), strings.Join(stalled, "; "))
		ck.Fix = "docs/operations.md, \"Batches and their runs\""
	}
	return ck
}

// notMoving says why the running batch v, age old, does not move ("" when
// it does): every item done and no report after three finalize ticks;
// items left while no message of the items queue or the dead-letter
// queue carries them (queued, -1 when unknown); or its live view calls it
// stalled (api.LiveView.Stalled: no item ended for longer than a call can
// run while items are in flight, none waiting for a retry, not paused).
func notMoving(v wire.BatchView, age time.Duration, queued int, now time.Time) string {
	left := v.Census.Pending + v.Census.InFlight
	switch {
	case left == 0 && age > stalledFinalize:
		return "every item done, no report: see the finalize-tick alarms"
	case left > 0 && queued == 0 && age > stalledFinalize:
		return fmt.Sprintf("%s left, no message in the queues: bulkrun resume %s", api.Count(left, "item"), v.ID)
	case v.Live != nil && v.Live.Stalled:
		return fmt.Sprintf("no item ended for %s, %s in flight: bulkrun items %s --outcome in_flight",
			now.Sub(v.Live.LastProgressAt).Round(time.Minute), api.Count(v.Live.InFlight, "item"), v.ID)
	}
	return ""
}

// queuedMessages counts the messages of the items queue and the
// dead-letter queue, -1 when unknown.
func (d *checker) queuedMessages(ctx context.Context) int {
	sc := sqs.NewFromConfig(d.aws)
	n := 0
	for _, key := range []string{config.OutputItemsQueueURL, config.OutputItemsDLQURL} {
		url := d.outs[key]
		out, err := sc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
		if err != nil {
			return -1
		}
		for _, a := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
			v, _ := strconv.Atoi(out.Attributes[a])
			n += v
		}
	}
	return n
}

// failedCheck is a check whose AWS call failed: the call and its error.
func failedCheck(ck Check, call string, err error) Check {
	ck.Status = Warn
	ck.Detail = call + " failed: " + errString(err)
	var ae smithy.APIError
	if errors.As(err, &ae) && strings.Contains(ae.ErrorCode(), "AccessDenied") {
		ck.Fix = "the caller may not call it: doctor needs read access (lambda:GetAccountSettings, apigateway:GET, cloudformation:GetTemplate, s3:ListBucket, s3:GetBucketLocation, s3:GetEncryptionConfiguration, sns:GetTopicAttributes, kms:DescribeKey, kms:GetKeyPolicy, cloudwatch:DescribeAlarms, cloudwatch:GetMetricStatistics, sqs:GetQueueAttributes)"
	}
	return ck
}

func errString(err error) string {
	if err == nil {
		return "no answer"
	}
	return err.Error()
}

// httpStatus is the HTTP status of an AWS error (0 when none).
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func reservedString(m map[string]int) string {
	var parts []string
	for _, fn := range []string{"submit", "item", "finalize", "sweep"} {
		if n, ok := m[fn]; ok {
			parts = append(parts, fn+"="+strconv.Itoa(n))
		}
	}
	return strings.Join(parts, ",")
}

// eventSourcesNeed is what the item function's two event sources may run
// at once, and how that is made up: 2 × ItemsMaxConcurrency in the
// standard mode; the items queue's pollers × config.PollerInvocations
// and the dead-letter queue's ItemsMaxConcurrency in provisioned mode.
func (p Plan) eventSourcesNeed() (int, string) {
	if p.ItemsMaximumPollers > 0 {
		n := config.ItemsConcurrencyOf(p.ItemsMaxConcurrency, p.ItemsMaximumPollers) + p.ItemsMaxConcurrency
		return n, fmt.Sprintf("%d × ItemsMaximumPollers %d + ItemsMaxConcurrency %d", config.PollerInvocations, p.ItemsMaximumPollers, p.ItemsMaxConcurrency)
	}
	return 2 * p.ItemsMaxConcurrency, fmt.Sprintf("2 × ItemsMaxConcurrency %d", p.ItemsMaxConcurrency)
}

// lowerTo is the setting that brings the item function's event sources
// within left unreserved concurrency, with room to spare (half of what
// would just fit): ItemsMaxConcurrency in the standard mode,
// ItemsMaximumPollers (10 invocations each, beside the dead-letter
// queue's ItemsMaxConcurrency) in provisioned mode; at least 2 either way.
func (p Plan) lowerTo(left int) string {
	if p.ItemsMaximumPollers > 0 {
		return fmt.Sprintf("-c itemsMaximumPollers=%d", max(2, (left-p.ItemsMaxConcurrency)/(2*config.PollerInvocations)))
	}
	return fmt.Sprintf("-c itemsMaxConcurrency=%d", max(2, left/4))
}

// pollersRefused is why bulkrun refuses p's pollers (config.CheckPollers:
// both or neither, within 2–100), or "" for none set or a pair it takes.
func (p Plan) pollersRefused() string {
	if p.ItemsMinimumPollers == 0 && p.ItemsMaximumPollers == 0 {
		return ""
	}
	return config.CheckPollers(p.ItemsMinimumPollers, p.ItemsMaximumPollers)
}
