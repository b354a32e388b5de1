package bulkrun

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// defineEventSources makes the item function consume the items queue and
// the dead-letter queue, whose messages it records as failed
// (dead-lettered): batches of config.DefaultItemBatchSize, partial batch
// responses, at most ItemsMaxConcurrency invocations per queue.
//
// The item function sends messages to the queue that invokes it: an item
// waiting for a max_concurrency slot, or whose AWS call was throttled, is
// sent again as a new message (so that waiting uses no receive, which
// would bring it toward the dead-letter queue). Lambda's recursive loop
// detection would stop such a chain after about 16 invocations and
// dead-letter the item ("Use Lambda recursive loop detection to prevent
// infinite loops", AWS Lambda developer guide), so the function's
// RecursiveLoop is Allow, and bulkrun bounds the chain itself: a message
// is sent again at most ledger.MaxResends times (docs/design/faults.md,
// "Recursive loops").
func (r *runner) defineEventSources() {
	r.functions[FunctionItem].Node().DefaultChild().(awslambda.CfnFunction).SetRecursiveLoop(jsii.String("Allow"))
	for _, q := range []awssqs.Queue{r.items, r.dlq} {
		props := &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(config.DefaultItemBatchSize),
			ReportBatchItemFailures: jsii.Bool(true),
			MaxConcurrency:          jsii.Number(float64(r.s.maxConcurrency)),
		}
		if q == r.items && r.s.maxPollers > 0 {
			// Provisioned mode: "You cannot use the maximum concurrency
			// setting and provisioned mode at the same time" ("Configuring
			// scaling behavior for SQS event source mappings").
			props.MaxConcurrency = nil
			props.ProvisionedPollerConfig = &awslambda.ProvisionedPollerConfig{
				MinimumPollers: jsii.Number(float64(r.s.minPollers)),
				MaximumPollers: jsii.Number(float64(r.s.maxPollers)),
			}
		}
		r.functions[FunctionItem].AddEventSource(awslambdaeventsources.NewSqsEventSource(q, props))
	}
}

// defineUploads makes an object created under config.IncomingPrefix
// invoke submit, through the L1 notification configuration:
// Bucket.addEventNotification would add a custom-resource Lambda. One
// prefix filter, no suffix filters: S3 matches suffixes case-sensitively,
// and every object under incoming/ must either start a batch or leave an
// error report, so submit decides by the name.
func (r *runner) defineUploads() {
	submit := r.functions[FunctionSubmit]
	perm := awslambda.NewCfnPermission(r.Construct, jsii.String("SubmitFromBucket"), &awslambda.CfnPermissionProps{
		Action:        jsii.String("lambda:InvokeFunction"),
		FunctionName:  submit.FunctionArn(),
		Principal:     jsii.String("s3.amazonaws.com"),
		SourceAccount: awscdk.Aws_ACCOUNT_ID(),
		SourceArn:     s3Arn(r.bucketName, ""),
	})
	notifications := []interface{}{&awss3.CfnBucket_LambdaConfigurationProperty{
		Event:    jsii.String("s3:ObjectCreated:*"),
		Function: submit.FunctionArn(),
		Filter: &awss3.CfnBucket_NotificationFilterProperty{
			S3Key: &awss3.CfnBucket_S3KeyFilterProperty{
				Rules: &[]interface{}{
					&awss3.CfnBucket_FilterRuleProperty{Name: jsii.String("prefix"), Value: jsii.String(config.IncomingPrefix)},
				},
			},
		},
	}}
	cfnBucket := r.bucket.Node().DefaultChild().(awss3.CfnBucket)
	cfnBucket.SetNotificationConfiguration(&awss3.CfnBucket_NotificationConfigurationProperty{
		LambdaConfigurations: &notifications,
	})
	cfnBucket.AddResourceDependency(perm, jsii.String("S3 checks that it may invoke submit when the notification is set"))
}

// defineSchedules defines the EventBridge rules, each target with the
// schedule dead-letter queue: each of
// RunnerProps.Schedules → submit; Sweep (SweepSchedule) → sweep; and on
// the tick (FinalizeTickSchedule) SubmitTick → submit, which hands a dead
// background source read off again, and FinalizeTick → finalize, the
// backstop that finalizes runs whose last item's trigger was lost.
func (r *runner) defineSchedules() {
	submit := r.functions[FunctionSubmit]
	rule := func(id, desc, expression string, fn awslambda.Function, input map[string]any) {
		// An event EventBridge could not deliver (after its retries, up to
		// 24 hours) goes to the schedule dead-letter queue, alarmed
		// ("Using dead-letter queues to process undelivered events in
		// EventBridge", Amazon EventBridge user guide).
		props := &awseventstargets.LambdaFunctionProps{DeadLetterQueue: r.scheduleDLQ}
		if input != nil {
			props.Event = awsevents.RuleTargetInput_FromObject(input)
		}
		awsevents.NewRule(r.Construct, jsii.String(id), &awsevents.RuleProps{
			Description: jsii.String(desc),
			Schedule:    awsevents.Schedule_Expression(jsii.String(expression)),
			Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn, props)},
		})
	}
	for _, sc := range r.s.schedules {
		var req map[string]any
		_ = json.Unmarshal(sc.Request, &req) // validated in derive
		rule("Schedule-"+sc.Name, "bulkrun schedule "+sc.Name, sc.Expression, submit,
			map[string]any{"bulkrun_schedule": sc.Name, "time": awsevents.EventField_Time(), "request": req})
	}
	rule("Sweep", "bulkrun: delete the batches whose retention has passed", SweepSchedule, r.functions[FunctionSweep], nil)
	rule("SubmitTick", "bulkrun: hand off again, or refuse, background source reads that died", r.s.tick, submit,
		map[string]any{"bulkrun_submit_tick": true})
	rule("FinalizeTick", "bulkrun: finalize runs whose last item's trigger was lost", r.s.tick, r.functions[FunctionFinalize],
		map[string]any{"tick": true})
}
