package bulkrun

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdadestinations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsssm"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// Asynchronous invocations of submit (S3 notifications, schedule ticks).
// Lambda's defaults, stated so that the template shows them: 2 retries
// (the maximum), events kept up to 6 hours ("Configuring error handling
// for asynchronous invocation", AWS Lambda Developer Guide).
const (
	SubmitRetryAttempts = 2
	SubmitMaxEventAge   = 6 * time.Hour
)

// defineFunctions defines the four functions, each with its environment
// from settings.env (the one derive checked), the resources' names in
// place of the placeholders. Finalize comes first: submit and item name it.
func (r *runner) defineFunctions() {
	refs := map[string]*string{
		refTable:         r.table.TableName(),
		refBucket:        r.bucketName,
		refItemsQueueURL: r.items.QueueUrl(),
		refDeadLetterARN: r.dlq.QueueArn(),
		refStackName:     awscdk.Stack_Of(r.Construct).StackName(),
	}
	r.defineSettingsParameters(refs)
	r.functions = map[string]awslambda.Function{}
	for _, name := range []string{FunctionFinalize, FunctionSweep, FunctionSubmit, FunctionItem} {
		r.functions[name] = r.function(name, deployedEnv(r.s.env[name], refs))
		if name == FunctionFinalize {
			refs[refFinalizeFunction] = r.functions[name].FunctionName()
		}
	}
}

// defineSettingsParameters defines the settings parameter of each function
// whose allow-lists fitEnvironments moved out of its environment: an SSM
// String parameter holding them as a JSON object, the resources' names in
// place of the placeholders, in the advanced tier when its value may be
// over the standard tier's 4 KB; its name takes its placeholder's place in
// refs. The function reads it at start (shared/function); grant gives its
// role ssm:GetParameter on it.
func (r *runner) defineSettingsParameters(refs map[string]*string) {
	r.settingsParameters = map[string]awsssm.StringParameter{}
	for _, fn := range []string{FunctionSubmit, FunctionItem} {
		vars := r.s.parameters[fn]
		if len(vars) == 0 {
			continue
		}
		value, err := json.Marshal(*deployedEnv(vars, refs))
		if err != nil {
			panic(fmt.Sprintf("bulkrun: settings parameter of %s: %v", fn, err))
		}
		tier := awsssm.ParameterTier_STANDARD
		if n, _ := parameterBytes(vars); n > MaxStandardParameterBytes {
			tier = awsssm.ParameterTier_ADVANCED
		}
		pp := &awsssm.StringParameterProps{
			StringValue: jsii.String(string(value)),
			Tier:        tier,
			Description: jsii.String("bulkrun " + fn + ": the allow-lists its environment has no room for (" + config.EnvSettingsParameter + ")"),
		}
		// Named /bulkrun/{stack}/{function}-settings, so that its ARN is
		// known at synth (an emulator's generated names start with "/",
		// AWS's do not, and a generated name's ARN assumes the latter).
		if stack := awscdk.Stack_Of(r.Construct).StackName(); !*awscdk.Token_IsUnresolved(stack) {
			pp.ParameterName = jsii.String("/bulkrun/" + *stack + "/" + fn + "-settings")
		}
		p := awsssm.NewStringParameter(r.Construct, jsii.String(fn+"-settings"), pp)
		r.settingsParameters[fn] = p
		refs[refSettingsParameter[fn]] = p.ParameterName()
	}
}

// function defines the function name: provided.al2023, its code folder,
// the target's architecture, timeout and memory from settings; a log
// group of one month on AWS; reserved concurrency when set; submit's
// ephemeral storage.
func (r *runner) function(name string, env *map[string]*string) awslambda.Function {
	s := r.s
	fp := &awslambda.FunctionProps{
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(s.code[name]), nil),
		Architecture: s.arch,
		Timeout:      awscdk.Duration_Seconds(jsii.Number(s.timeouts[name].Seconds())),
		MemorySize:   jsii.Number(float64(s.memoryMiB[name])),
		Environment:  env,
		Description:  jsii.String("bulkrun " + name),
		// JSON logs: the functions' own lines (slog JSON) and Lambda's
		// (START, END, REPORT) alike; the functions filter their lines
		// at the stack's level themselves, Lambda never above INFO
		// (applicationLogLevels).
		LoggingFormat:         awslambda.LoggingFormat_JSON,
		ApplicationLogLevelV2: applicationLogLevels[s.logLevel],
		SystemLogLevelV2:      awslambda.SystemLogLevel_INFO,
	}
	if s.target == TargetAWS {
		fp.LogGroup = awslogs.NewLogGroup(r.Construct, jsii.String(name+"-logs"), &awslogs.LogGroupProps{
			Retention: awslogs.RetentionDays_ONE_MONTH,
		})
	}
	if n, ok := s.reserved[name]; ok {
		fp.ReservedConcurrentExecutions = jsii.Number(float64(n))
	}
	if name == FunctionSubmit {
		fp.EphemeralStorageSize = awscdk.Size_Mebibytes(jsii.Number(float64(s.ephemeralMiB)))
	}
	return awslambda.NewFunction(r.Construct, jsii.String(name), fp)
}

// applicationLogLevels maps RunnerProps.LogLevel to Lambda's application
// log level: DEBUG at debug, INFO at every other level. With the JSON
// format Lambda drops a line whose level is below its application log
// level, and files a line without a "level" as INFO ("Log-level
// filtering", AWS Lambda developer guide,
// https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html):
// the embedded-metric-format lines (internal/metric), which carry no
// level, would be dropped at WARN or ERROR, and with them every custom
// metric and every alarm on one, as would the runtime's own text lines (a
// panic's stack). So Lambda's level is never above INFO; the functions'
// logger drops its own lines below the stack's level (config.EnvLogLevel)
// before they are written. Both keys must stay: LogLevel validates against
// them (TestLogLevelKeepsMetricsAndErrors).
var applicationLogLevels = map[string]awslambda.ApplicationLogLevel{
	"debug": awslambda.ApplicationLogLevel_DEBUG, "info": awslambda.ApplicationLogLevel_INFO,
	"warn": awslambda.ApplicationLogLevel_INFO, "error": awslambda.ApplicationLogLevel_INFO,
}

// defineFailedStarts defines where submit's failed asynchronous
// invocations go. S3 and EventBridge invoke submit asynchronously; Lambda
// retries a failed invocation SubmitRetryAttempts times and then puts the
// event, with the error, on the submit failures queue, whose depth is
// alarmed ("Asynchronous invocation" and "Capturing records of Lambda
// asynchronous invocations", AWS Lambda Developer Guide).
func (r *runner) defineFailedStarts() {
	r.submitFailures = r.queue("SubmitFailuresQueue", queueRetention, nil, nil)
	r.functions[FunctionSubmit].ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		RetryAttempts: jsii.Number(SubmitRetryAttempts),
		MaxEventAge:   awscdk.Duration_Hours(jsii.Number(SubmitMaxEventAge.Hours())),
		OnFailure:     awslambdadestinations.NewSqsDestination(r.submitFailures),
	})
	r.submitFailuresAlarm = depthAlarm(r, "SubmitFailuresAlarm", r.submitFailures, time.Minute,
		"bulkrun: an asynchronous invocation of submit (an upload, a schedule tick, a background read) still failed after Lambda's retries; its event is on the submit failures queue")
}

// defineFailedInvocations gives finalize's and sweep's asynchronous
// invocations (a run's last item triggers finalize; the schedules invoke
// both) the same end as submit's: after Lambda's InvokeRetryAttempts
// retries the event goes, with its error, to the invocation failures
// queue, alarmed on depth. The schedules' own deliveries that EventBridge
// could not make (the function throttled or missing) go to the schedule
// dead-letter queue, alarmed too (triggers.go).
func (r *runner) defineFailedInvocations() {
	r.invokeFailures = r.queue("InvokeFailuresQueue", queueRetention, nil, nil)
	for _, fn := range []string{FunctionFinalize, FunctionSweep} {
		r.functions[fn].ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
			RetryAttempts: jsii.Number(SubmitRetryAttempts),
			MaxEventAge:   awscdk.Duration_Hours(jsii.Number(SubmitMaxEventAge.Hours())),
			OnFailure:     awslambdadestinations.NewSqsDestination(r.invokeFailures),
		})
	}
	r.invokeFailuresAlarm = depthAlarm(r, "InvokeFailuresAlarm", r.invokeFailures, time.Minute,
		"bulkrun: an asynchronous invocation of finalize or sweep still failed after Lambda's retries; its event is on the invocation failures queue (docs/operations.md, \"Failed invocations\")")
	r.scheduleDLQ = r.queue("ScheduleDeadLetterQueue", queueRetention, nil, nil)
	r.scheduleDLQAlarm = depthAlarm(r, "ScheduleDeadLetterAlarm", r.scheduleDLQ, time.Minute,
		"bulkrun: EventBridge could not deliver a schedule's event (finalize or submit tick, sweep, a batch schedule) to its function; the event is on the schedule dead-letter queue")
}
