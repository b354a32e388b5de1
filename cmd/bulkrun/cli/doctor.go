package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Doctor verdicts, worst last.
const (
	DoctorOK   = "ok"
	DoctorWarn = "warn" // works, but worth a look
	DoctorFix  = "fix"  // will break (or is broken): the Fix says what to do
)

// DoctorCheck is one line of `bulkrun doctor`.
type DoctorCheck struct {
	Check  string `json:"check"`  // concurrency, api-gateway-logging, bucket, alarms, queues, batches
	Status string `json:"status"` // DoctorOK, DoctorWarn, DoctorFix
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// doctorPlan is what an about-to-be-deployed stack will ask of the
// account (the flags), or what the deployed stack asks (read from it).
type doctorPlan struct {
	itemsMaxConcurrency int
	reserved            map[string]int
	bucketName          string // a fixed BucketName to deploy with
	apiGatewayAccount   bool   // the stack sets the account's API Gateway role
}

func (a *app) doctorCmd() *cobra.Command {
	var plan doctorPlan
	var reserved string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a deployed (or about-to-be-deployed) stack against its account and say what to fix",
		Long: `doctor checks the stack --stack (deployed, or about to be: then the flags
say what it will ask for) against the account it runs in:

  concurrency          the account's Lambda concurrency quota and what is left
                       unreserved (GetAccountSettings) against what the item
                       function's two event sources and the reservations need
  api-gateway-logging  the account's API Gateway CloudWatch role (access logs)
  bucket               the bucket exists and is the stack's; a fixed name is free
  alarms               the stack's alarms in ALARM
  queues               depth of the items, dead-letter, parking and failed-start
                       queues, and the items queue's oldest message
  batches              running batches that do not move

Each line says ok, warn or fix, and what to do. Exit status 1 when any says fix.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if plan.reserved, err = parseReserved(reserved); err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--reserved-concurrency: %w", err)}
			}
			checks, err := a.doctor(cmd.Context(), plan, cmd.Flags().Changed("items-max-concurrency"))
			if err != nil {
				return err
			}
			if a.output == "json" {
				if err := a.printJSON(checks); err != nil {
					return err
				}
			} else {
				for _, c := range checks {
					textf(a.out, "%-4s  %-20s %s\n", c.Status, c.Check, c.Detail)
					if c.Fix != "" {
						textf(a.out, "      %-20s → %s\n", "", c.Fix)
					}
				}
			}
			for _, c := range checks {
				if c.Status == DoctorFix {
					return &ExitError{Code: ExitFailure}
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&plan.itemsMaxConcurrency, "items-max-concurrency", 100, "about to deploy: the stack's ItemsMaxConcurrency (a deployed stack's is read from it)")
	cmd.Flags().StringVar(&reserved, "reserved-concurrency", "", `about to deploy: the stack's ReservedConcurrency, "item=200,submit=5"`)
	cmd.Flags().StringVar(&plan.bucketName, "bucket-name", "", "about to deploy: a fixed BucketName to check is free")
	cmd.Flags().BoolVar(&plan.apiGatewayAccount, "api-gateway-account", false, "about to deploy: the stack sets the account's API Gateway CloudWatch role (ApiGatewayAccount)")
	return cmd
}

func parseReserved(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want function=N", kv)
		}
		out[k] = n
	}
	return out, nil
}

// doctor runs every check. The stack is optional: without it the checks
// use plan (what it will ask for).
func (a *app) doctor(ctx context.Context, plan doctorPlan, planFlags bool) ([]DoctorCheck, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if a.profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(a.profile))
	}
	if a.region != "" {
		opts = append(opts, awsconfig.WithRegion(a.region))
	}
	c, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("AWS config: %w", err)
	}
	outs, err := a.findStack(ctx, c)
	var setup *SetupError
	deployed := err == nil
	if !deployed && !(errors.As(err, &setup) && setup.Missing == "stack") {
		return nil, err
	}
	d := &doctorRun{aws: c, outs: outs, plan: plan, deployed: deployed, stack: a.stack}
	if deployed {
		if api, err := client.New(c, outs); err == nil {
			d.api = api
		}
		if !planFlags {
			d.readPlan(ctx)
		}
	}
	return []DoctorCheck{d.concurrency(ctx), d.apiLogging(ctx), d.bucket(ctx), d.alarms(ctx), d.queues(ctx), d.batches(ctx)}, nil
}

type doctorRun struct {
	aws      aws.Config
	outs     client.Stack
	api      *client.Client
	plan     doctorPlan
	deployed bool
	stack    string
}

// readPlan reads what the deployed stack asks for: its event sources'
// maximum concurrency and its functions' reservations.
func (d *doctorRun) readPlan(ctx context.Context) {
	lc := lambda.NewFromConfig(d.aws)
	d.plan.reserved = map[string]int{}
	for fn, key := range map[string]string{"submit": config.OutputSubmitFunction, "item": config.OutputItemFunction,
		"finalize": config.OutputFinalizeFunction, "sweep": config.OutputSweepFunction} {
		name := d.outs[key]
		if name == "" {
			continue
		}
		if out, err := lc.GetFunctionConcurrency(ctx, &lambda.GetFunctionConcurrencyInput{FunctionName: &name}); err == nil && out.ReservedConcurrentExecutions != nil {
			d.plan.reserved[fn] = int(*out.ReservedConcurrentExecutions)
		}
		if fn != "item" {
			continue
		}
		if out, err := lc.ListEventSourceMappings(ctx, &lambda.ListEventSourceMappingsInput{FunctionName: &name}); err == nil {
			for _, m := range out.EventSourceMappings {
				if m.ScalingConfig != nil && m.ScalingConfig.MaximumConcurrency != nil {
					d.plan.itemsMaxConcurrency = max(d.plan.itemsMaxConcurrency, int(*m.ScalingConfig.MaximumConcurrency))
				}
			}
		}
	}
}

// concurrency: GetAccountSettings against the item function's event
// sources (2 × their maximum concurrency) and the reservations
// (Lambda keeps 100 unreserved).
func (d *doctorRun) concurrency(ctx context.Context) DoctorCheck {
	ck := DoctorCheck{Check: "concurrency"}
	out, err := lambda.NewFromConfig(d.aws).GetAccountSettings(ctx, &lambda.GetAccountSettingsInput{})
	if err != nil || out.AccountLimit == nil {
		return failedCheck(ck, "GetAccountSettings", err)
	}
	limit, unreserved := int(out.AccountLimit.ConcurrentExecutions), int(aws.ToInt32(out.AccountLimit.UnreservedConcurrentExecutions))
	const eventSources, minUnreserved = 2, 100
	need := eventSources * d.plan.itemsMaxConcurrency
	reservedSum := 0
	for _, n := range d.plan.reserved {
		reservedSum += n
	}
	// What the stack's own reservations leave: a deployed stack's are
	// already out of unreserved; a planned one's will be.
	left := unreserved
	if !d.deployed {
		left = unreserved - reservedSum
	}
	ck.Detail = fmt.Sprintf("account quota %d, unreserved %d; the item function's 2 event sources may run %d (ItemsMaxConcurrency %d)",
		limit, unreserved, need, d.plan.itemsMaxConcurrency)
	if reservedSum > 0 {
		ck.Detail += fmt.Sprintf("; the stack reserves %s", reservedString(d.plan.reserved))
	}
	item, itemReserved := d.plan.reserved["item"]
	switch {
	case itemReserved && item < need:
		ck.Status = DoctorFix
		ck.Fix = fmt.Sprintf("reserve at least %d for item (2 × ItemsMaxConcurrency), or lower ItemsMaxConcurrency to %d (rule reserved-covers-event-sources)", need, item/eventSources)
	case left < minUnreserved:
		ck.Status = DoctorFix
		ck.Fix = fmt.Sprintf("the reservations leave %d unreserved, Lambda keeps %d: reserve less, or request a higher \"Concurrent executions\" quota in Service Quotas (rule unreserved-at-least-100)", left, minUnreserved)
	case !itemReserved && need > left:
		ck.Status = DoctorFix
		ck.Fix = fmt.Sprintf("%d unreserved cannot run the event sources' %d: request a \"Concurrent executions\" quota of at least %d in Service Quotas, or deploy with ItemsMaxConcurrency %d (rule event-sources-fit-unreserved)",
			left, need, need+reservedSum+minUnreserved, max(2, left/eventSources))
	case limit < 1000:
		ck.Status = DoctorWarn
		ck.Fix = fmt.Sprintf("the account's quota (%d) is below Lambda's default 1,000 (a new account?): deploy with -c accountConcurrency=%d so synth checks against it", limit, limit)
	default:
		ck.Status = DoctorOK
	}
	return ck
}

// apiLogging: the account's API Gateway CloudWatch role, which the API's
// access logs need; the stack sets it only with ApiGatewayAccount.
func (d *doctorRun) apiLogging(ctx context.Context) DoctorCheck {
	ck := DoctorCheck{Check: "api-gateway-logging"}
	out, err := apigateway.NewFromConfig(d.aws).GetAccount(ctx, &apigateway.GetAccountInput{})
	if err != nil {
		return failedCheck(ck, "apigateway GetAccount", err)
	}
	if role := aws.ToString(out.CloudwatchRoleArn); role != "" {
		ck.Status, ck.Detail = DoctorOK, "the account's API Gateway CloudWatch role is "+role
		return ck
	}
	if d.plan.apiGatewayAccount {
		ck.Status, ck.Detail = DoctorOK, "no API Gateway CloudWatch role yet: the stack sets one (ApiGatewayAccount)"
		return ck
	}
	ck.Status = DoctorFix
	ck.Detail = "the account has no API Gateway CloudWatch role in this Region: the API's access logs are not written"
	ck.Fix = "set one for the account (API Gateway console, Settings), or deploy with -c apiGatewayAccount=true (the stack then sets it, for every API of the account and Region)"
	return ck
}

// bucket: the deployed stack's bucket answers; a fixed name to deploy
// with is free.
func (d *doctorRun) bucket(ctx context.Context) DoctorCheck {
	ck := DoctorCheck{Check: "bucket"}
	name := d.outs[config.OutputBucket]
	deployed := name != ""
	if !deployed {
		name = d.plan.bucketName
	}
	if name == "" {
		ck.Status, ck.Detail = DoctorOK, "CloudFormation generates the bucket's name (no fixed BucketName)"
		return ck
	}
	_, err := blob.NewS3(d.aws).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &name})
	status := httpStatus(err)
	switch {
	case deployed && err == nil:
		ck.Status, ck.Detail = DoctorOK, "the stack's bucket "+name+" answers"
	case deployed:
		ck.Status, ck.Detail = DoctorFix, fmt.Sprintf("the stack's bucket %s does not answer (HTTP %d)", name, status)
		ck.Fix = "it was deleted or its policy locks the caller out: redeploy the stack (a retained bucket of a destroyed stack is not reused)"
	case status == http.StatusNotFound:
		ck.Status, ck.Detail = DoctorOK, "the name "+name+" is free"
	case err == nil:
		ck.Status, ck.Detail = DoctorFix, "a bucket named "+name+" already exists in this account (kept by a destroyed stack?): CloudFormation cannot create it"
		ck.Fix = "deploy without BucketName (a generated name), or empty and delete that bucket first"
	default:
		ck.Status, ck.Detail = DoctorFix, fmt.Sprintf("the name %s is taken by another account (HTTP %d)", name, status)
		ck.Fix = "deploy without BucketName: CloudFormation then generates a name no one can take first"
	}
	return ck
}

// alarms: the stack's alarms ({stack}-… and the two the outputs name)
// that are in ALARM.
func (d *doctorRun) alarms(ctx context.Context) DoctorCheck {
	ck := DoctorCheck{Check: "alarms"}
	if !d.deployed {
		ck.Status, ck.Detail = DoctorOK, "not deployed yet"
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
	ck.Detail = fmt.Sprintf("%d alarms, %d in ALARM", len(names), len(firing))
	switch {
	case len(names) == 0:
		ck.Status, ck.Fix = DoctorWarn, "no alarm of the stack found: was it deployed with this --stack name?"
	case len(firing) > 0:
		ck.Status = DoctorFix
		ck.Detail += ": " + strings.Join(firing, ", ")
		ck.Fix = "docs/operations.md, \"Alarms: what each means and the first step\""
	default:
		ck.Status = DoctorOK
	}
	return ck
}

// queues: depth of the stack's queues, and the items queue's oldest
// message (CloudWatch's ApproximateAgeOfOldestMessage, last 15 minutes).
func (d *doctorRun) queues(ctx context.Context) DoctorCheck {
	ck := DoctorCheck{Check: "queues", Status: DoctorOK}
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
		ck.Status, ck.Fix = DoctorFix, strings.Join(fixes, "; ")
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
func (d *doctorRun) batches(ctx context.Context) DoctorCheck {
	ck := DoctorCheck{Check: "batches", Status: DoctorOK}
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
		ck.Status = DoctorFix
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
		return fmt.Sprintf("%d items left, no message in the queues: bulkrun resume %s", left, v.ID)
	case v.Live != nil && v.Live.Stalled:
		return fmt.Sprintf("no item ended for %s, %d items in flight: bulkrun items %s --outcome in_flight",
			now.Sub(v.Live.LastProgressAt).Round(time.Minute), v.Live.InFlight, v.ID)
	}
	return ""
}

// queuedMessages counts the messages of the items queue and the
// dead-letter queue, -1 when unknown.
func (d *doctorRun) queuedMessages(ctx context.Context) int {
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
func failedCheck(ck DoctorCheck, call string, err error) DoctorCheck {
	ck.Status = DoctorWarn
	ck.Detail = call + " failed: " + errString(err)
	var ae smithy.APIError
	if errors.As(err, &ae) && strings.Contains(ae.ErrorCode(), "AccessDenied") {
		ck.Fix = "the caller may not call it: doctor needs read access (lambda:GetAccountSettings, apigateway:GET, cloudwatch:Describe*/GetMetricStatistics, sqs:GetQueueAttributes, s3:ListBucket)"
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
