package bulkrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
)

// bucketNamePattern is the S3 rule for bucket names (general purpose buckets).
var bucketNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// settings are the values NewRunner derives from RunnerProps, defaults filled.
type settings struct {
	target             string
	functionsDir       string
	code               map[string]string // each function's code folder
	codeBucket         string            // RunnerProps.CodeBucket: the zips' bucket, "" for the folders
	codeKeyPrefix      string            // RunnerProps.CodeKeyPrefix
	arch               awslambda.Architecture
	itemTimeout        time.Duration
	lease              time.Duration
	visibility         time.Duration
	maxAttempts        int
	retryPolicy        string // JSON of the stack's api.RetryPolicy
	itemsPerMessage    int
	maxReceiveCount    int
	retentionDays      int
	retentionMinutes   int // emulator only; 0: retentionDays
	uploadRepeat       int // days; -1: off
	tick               string
	bucketName         string
	sourceBuckets      []string
	sourcePrefixes     []string
	pipelines          []string
	defaultPipeline    string
	schedules          []Schedule
	itemMemoryMiB      int
	reserved           map[string]int
	maxConcurrency     int
	minPollers         int // the items source's ProvisionedPollerConfig; 0 in the standard mode
	maxPollers         int
	accountConcurrency int
	logLevel           string // config.EnvLogLevel and the LoggingConfig's application level
	tracesExporter     string // config.EnvTracesExporter on submit and item; "" for none
	tracesEndpoint     string // OTEL_EXPORTER_OTLP_ENDPOINT on submit and item; "" for the SDK's default
	webhookAllow       string // comma-separated, config.EnvWebhookAllow
	ephemeralMiB       int
	secretPrefixes     []string                 // config.EnvSecretPrefixes
	memoryMiB          map[string]int           // every function
	timeouts           map[string]time.Duration // every function
	lambdaFunctions    []string                 // config.EnvLambdaFunctions, tokens included
	taskStateMachines  []string                 // RunnerProps.TaskStateMachines
	effectTables       []string                 // config.EnvEffectTables, tokens included
	apiGatewayAccount  bool                     // replace the account's API Gateway role whatever it is
	kmsKeys            []string                 // keys submit and item may decrypt with (tokens included)
	warmWrites         int                      // the table's warm write units per second; 0: DynamoDB's
	warmReads          int                      // the table's warm read units per second; 0: DynamoDB's
	maxWrites          int                      // the table's write ceiling; 0: none
	// env is every function's environment (functionEnv): derived once,
	// checked with config.Load by derive and deployed by NewRunner.
	env map[string]map[string]string
	// parameters holds, by function, the variables moved out of its
	// environment into its settings parameter (fitEnvironments); none
	// for a function whose environment fits.
	parameters map[string]map[string]string
}

// derive fills defaults and validates props. The function environments
// go through config.Load — the very function the Lambda functions run at
// start — so the stack cannot deploy a configuration the functions would
// refuse.
func derive(props *RunnerProps) (settings, error) {
	if props == nil {
		props = &RunnerProps{}
	}
	s := withDefaults(props)
	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &PropError{Field: field, Value: value, Reason: reason})
	}
	s.checkTarget(bad)
	s.checkLimits(props, bad)
	s.checkStorage(bad)
	s.checkFunctions(props, bad)
	s.checkPipelines(props, bad)
	s.checkSchedules(bad)
	s.checkCode(props, bad)
	s.checkKMSKeys(bad)
	s.checkThroughput(bad)
	errs = append(errs, checkOperations(props)...)
	s.env = s.functionEnv()
	if _, err := config.Load(validationView(s.env)); err != nil {
		errs = append(errs, fmt.Errorf("bulkrun: the functions would refuse this configuration: %w", err))
	}
	errs = append(errs, s.fitEnvironments()...)
	return s, errors.Join(errs...)
}

// withDefaults returns props' settings with every default filled.
func withDefaults(props *RunnerProps) settings {
	s := settings{
		target:             props.Target,
		functionsDir:       props.FunctionsDir,
		itemTimeout:        props.ItemTimeout,
		maxAttempts:        props.MaxAttempts,
		itemsPerMessage:    props.ItemsPerMessage,
		maxReceiveCount:    props.MaxReceiveCount,
		retentionDays:      props.RetentionDays,
		retentionMinutes:   props.RetentionMinutes,
		uploadRepeat:       props.UploadRepeatDays,
		tick:               props.FinalizeTickSchedule,
		bucketName:         props.BucketName,
		sourceBuckets:      props.SourceBuckets,
		sourcePrefixes:     props.SourcePrefixes,
		pipelines:          props.Pipelines,
		defaultPipeline:    props.DefaultPipeline,
		schedules:          props.Schedules,
		itemMemoryMiB:      props.ItemMemoryMiB,
		reserved:           props.ReservedConcurrency,
		maxConcurrency:     props.ItemsMaxConcurrency,
		minPollers:         props.ItemsMinimumPollers,
		maxPollers:         props.ItemsMaximumPollers,
		accountConcurrency: props.AccountConcurrency,
		logLevel:           props.LogLevel,
		tracesExporter:     props.TracesExporter,
		tracesEndpoint:     props.TracesEndpoint,
		secretPrefixes:     props.SecretPrefixes,
		effectTables:       props.EffectTables,
		lambdaFunctions:    props.LambdaFunctions,
		apiGatewayAccount:  props.ApiGatewayAccount,
		kmsKeys:            props.KMSKeys,
		warmWrites:         props.WarmWritesPerSecond,
		warmReads:          props.WarmReadsPerSecond,
		maxWrites:          props.MaxWritesPerSecond,
		taskStateMachines:  props.TaskStateMachines,
	}
	orDefault := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	orDefault(&s.itemMemoryMiB, DefaultItemMemoryMiB)
	orDefault(&s.maxConcurrency, DefaultItemsMaxConcurrency)
	orDefault(&s.accountConcurrency, DefaultAccountConcurrency)
	orDefault(&s.maxAttempts, config.DefaultMaxAttempts)
	rp := api.DefaultRetryPolicy
	if props.RetryPolicy != nil {
		rp = *props.RetryPolicy
	}
	if b, err := json.Marshal(rp); err == nil {
		s.retryPolicy = string(b)
	}
	orDefault(&s.itemsPerMessage, config.DefaultItemsPerMessage)
	orDefault(&s.maxReceiveCount, config.DefaultMaxReceiveCount)
	orDefault(&s.retentionDays, DefaultRetentionDays)
	orDefault(&s.uploadRepeat, DefaultUploadRepeatDays)
	if s.sourcePrefixes == nil && s.target == TargetEmulator {
		s.sourcePrefixes = DefaultEmulatorSourcePrefixes
	}
	if s.target == "" {
		s.target = TargetAWS
	}
	if s.functionsDir == "" {
		s.functionsDir = DefaultFunctionsDir
	}
	if s.itemTimeout == 0 {
		s.itemTimeout = config.DefaultItemTimeout
	}
	if s.tick == "" {
		s.tick = DefaultFinalizeTickSchedule
	}
	if s.logLevel == "" {
		s.logLevel = DefaultLogLevel
	}
	if len(s.pipelines) == 0 {
		s.pipelines = DefaultPipelines(props.CustomPipelines)
	}
	allowList := props.WebhookAllow
	if len(allowList) == 0 && s.target == TargetEmulator && !props.EmptyWebhookAllow {
		allowList = DefaultEmulatorWebhookAllow
	}
	s.webhookAllow = strings.Join(allowList, ",")
	s.ephemeralMiB = SubmitEphemeralMiB(maxManifestBytes(props))
	if len(s.secretPrefixes) == 0 && s.target == TargetEmulator {
		s.secretPrefixes = DefaultEmulatorSecretPrefixes
	}
	if len(s.lambdaFunctions) == 0 && s.target == TargetEmulator {
		s.lambdaFunctions = DefaultEmulatorLambdaFunctions
	}
	if len(s.taskStateMachines) == 0 && s.target == TargetEmulator {
		s.taskStateMachines = DefaultEmulatorTaskStateMachines
	}
	if len(s.effectTables) == 0 && s.target == TargetEmulator {
		s.effectTables = DefaultEmulatorEffectTables
	}
	if len(s.kmsKeys) == 0 && s.target == TargetEmulator {
		s.kmsKeys = DefaultEmulatorKMSKeys
	}
	s.lease = s.itemTimeout + config.LeaseMargin
	s.visibility = VisibilityFactor * s.itemTimeout
	s.memoryMiB = map[string]int{FunctionItem: s.itemMemoryMiB}
	s.timeouts = map[string]time.Duration{FunctionItem: s.itemTimeout}
	for _, fn := range []string{FunctionSubmit, FunctionFinalize, FunctionSweep} {
		s.memoryMiB[fn], s.timeouts[fn] = DefaultMemoryMiB[fn], defaultTimeouts[fn]
	}
	return s
}

// maxManifestBytes is props.MaxManifestBytes, or its default.
func maxManifestBytes(props *RunnerProps) int64 {
	if props.MaxManifestBytes == 0 {
		return DefaultMaxManifestBytes
	}
	return props.MaxManifestBytes
}

// badProp reports one field at fault: field, its value, the reason.
type badProp func(field, value, reason string)

// checkTarget checks the target and picks the functions' architecture.
func (s *settings) checkTarget(bad badProp) {
	switch s.target {
	case TargetAWS:
		s.arch = awslambda.Architecture_ARM_64()
	case TargetEmulator:
		switch runtime.GOARCH {
		case "amd64":
			s.arch = awslambda.Architecture_X86_64()
		case "arm64":
			s.arch = awslambda.Architecture_ARM_64()
		default:
			bad("Target", s.target, fmt.Sprintf("Lambda has no architecture for host GOARCH %q", runtime.GOARCH))
		}
	default:
		bad("Target", s.target, fmt.Sprintf("want %q or %q", TargetAWS, TargetEmulator))
	}
}

// checkLimits checks the item timeout, manifest size, receive count,
// retention and tick against AWS's limits.
func (s *settings) checkLimits(props *RunnerProps, bad badProp) {
	if s.itemTimeout < time.Second || s.itemTimeout > lambdaMaxTimeout || s.itemTimeout%time.Second != 0 {
		bad("ItemTimeout", s.itemTimeout.String(), "want whole seconds from 1s to 15m (Lambda's limit)")
	}
	if m := maxManifestBytes(props); m < 0 || m > MaxMaxManifestBytes {
		bad("MaxManifestBytes", strconv.FormatInt(props.MaxManifestBytes, 10),
			fmt.Sprintf("want 1–%d bytes: the submit function's ephemeral storage (2 × the manifest + %d MiB) is at most %d MiB (Lambda's limit)",
				int64(MaxMaxManifestBytes), ephemeralMarginMiB, ephemeralMaxMiB))
	}
	if s.maxReceiveCount > sqsMaxReceiveCount {
		bad("MaxReceiveCount", strconv.Itoa(s.maxReceiveCount), "SQS allows at most 1000")
	}
	if s.uploadRepeat < -1 || s.uploadRepeat > 3650 {
		bad("UploadRepeatDays", strconv.Itoa(s.uploadRepeat), "want 1–3650 days, or -1 to remember no upload")
	}
	if s.retentionDays < 1 {
		bad("RetentionDays", strconv.Itoa(s.retentionDays), "want at least 1 day")
	}
	if s.retentionMinutes < 0 || s.retentionMinutes > 24*60 {
		bad("RetentionMinutes", strconv.Itoa(s.retentionMinutes), "want 1–1440 minutes, or 0 for RetentionDays")
	} else if s.retentionMinutes > 0 && s.target != TargetEmulator {
		bad("RetentionMinutes", strconv.Itoa(s.retentionMinutes), `only for Target "emulator" (on AWS the bucket's lifecycle rules count whole days; use RetentionDays)`)
	}
	if err := CheckScheduleExpression(s.tick); err != nil {
		bad("FinalizeTickSchedule", s.tick, "not an EventBridge schedule expression: "+err.Error())
	}
	if _, ok := applicationLogLevels[s.logLevel]; !ok {
		bad("LogLevel", s.logLevel, "want debug, info, warn or error")
	}
	switch s.tracesExporter {
	case "", config.TracesNone, config.TracesOTLP:
	default:
		bad("TracesExporter", s.tracesExporter, fmt.Sprintf("want %q or %q", config.TracesNone, config.TracesOTLP))
	}
	if u, err := url.Parse(s.tracesEndpoint); s.tracesEndpoint != "" && (err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "") {
		bad("TracesEndpoint", s.tracesEndpoint, "want an http(s) URL")
	} else if s.tracesEndpoint != "" && s.tracesExporter != config.TracesOTLP {
		bad("TracesEndpoint", s.tracesEndpoint, `only with TracesExporter "otlp"`)
	}
}

// checkStorage checks the bucket name, the source buckets and prefixes.
func (s *settings) checkStorage(bad badProp) {
	if s.bucketName != "" && !bucketNamePattern.MatchString(s.bucketName) {
		bad("BucketName", s.bucketName, "not a valid S3 bucket name")
	}
	for _, b := range s.sourceBuckets {
		if !bucketNamePattern.MatchString(b) {
			bad("SourceBuckets", b, "not a valid S3 bucket name")
		} else if b == s.bucketName {
			bad("SourceBuckets", b, "the stack's own bucket: name prefixes of it in SourcePrefixes (its batches/ is never a source)")
		}
	}
	for _, p := range s.sourcePrefixes {
		if err := config.CheckSourceURI("s3://bucket/" + p); err != nil || p == "" {
			bad("SourcePrefixes", p, "want a prefix ending in / (e.g. exports/), without empty, . or .. segments")
			continue
		}
		for _, never := range []string{config.BatchesPrefix, config.UploadErrorsPrefix, config.ScheduleErrorsPrefix} {
			if strings.HasPrefix(p, never) || strings.HasPrefix(never, p) {
				bad("SourcePrefixes", p, fmt.Sprintf("overlaps %s, which is never a source", never))
			}
		}
	}
}

// checkFunctions checks memory, concurrency and timeouts per function and
// fills the memory and timeout props set.
// kmsKeyPattern is a KMS key's ARN (an alias ARN does not authorize a
// key's use: "Using aliases to control access to KMS keys", AWS KMS
// developer guide).
var kmsKeyPattern = regexp.MustCompile(`^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$`)

// checkThroughput checks the table's warm throughput and write ceiling.
func (s *settings) checkThroughput(bad badProp) {
	if s.warmWrites != 0 && s.warmWrites < DefaultWarmWrites {
		bad("WarmWritesPerSecond", strconv.Itoa(s.warmWrites), fmt.Sprintf("want 0 or at least %d (a new on-demand table serves that many already)", DefaultWarmWrites))
	}
	if s.warmReads != 0 && s.warmReads < DefaultWarmReads {
		bad("WarmReadsPerSecond", strconv.Itoa(s.warmReads), fmt.Sprintf("want 0 or at least %d (a new on-demand table serves that many already)", DefaultWarmReads))
	}
	switch {
	case s.maxWrites < 0:
		bad("MaxWritesPerSecond", strconv.Itoa(s.maxWrites), "want 0 (none) or at least 1 write unit per second")
	case s.maxWrites > 0 && s.warmWrites > s.maxWrites:
		bad("MaxWritesPerSecond", strconv.Itoa(s.maxWrites), fmt.Sprintf("below WarmWritesPerSecond (%d): a table is not warmed past its ceiling", s.warmWrites))
	}
}

// checkKMSKeys checks KMSKeys: key ARNs (or tokens), each once.
func (s *settings) checkKMSKeys(bad badProp) {
	seen := map[string]bool{}
	for i, k := range s.kmsKeys {
		field := fmt.Sprintf("KMSKeys[%d]", i)
		switch {
		case *awscdk.Token_IsUnresolved(jsii.String(k)):
		case !kmsKeyPattern.MatchString(k):
			bad(field, k, "want a KMS key ARN, arn:<partition>:kms:<region>:<account>:key/<key id> (an alias does not authorize a key's use)")
		case seen[k]:
			bad(field, k, "listed twice")
		}
		seen[k] = true
	}
}

func (s *settings) checkFunctions(props *RunnerProps, bad badProp) {
	if s.itemMemoryMiB < 128 || s.itemMemoryMiB > 10240 {
		bad("ItemMemoryMiB", strconv.Itoa(s.itemMemoryMiB), "want 128–10240 MiB (Lambda's limits)")
	}
	if s.maxConcurrency < 2 || s.maxConcurrency > 1000 {
		bad("ItemsMaxConcurrency", strconv.Itoa(s.maxConcurrency), "want 2–1000 (SQS event source maximum concurrency)")
	}
	if why := config.CheckPollers(s.minPollers, s.maxPollers); why != "" {
		bad("ItemsMinimumPollers, ItemsMaximumPollers", fmt.Sprintf("%d, %d", s.minPollers, s.maxPollers), why)
	}
	for fn, n := range s.reserved {
		switch {
		case !slices.Contains(functionNames, fn):
			bad("ReservedConcurrency["+fn+"]", strconv.Itoa(n), "not a function of the stack (submit, item, finalize, sweep)")
		case n < 1:
			bad("ReservedConcurrency["+fn+"]", strconv.Itoa(n), "want at least 1 (0 would stop the function)")
		case fn == FunctionItem && n < s.eventSourcesConcurrency():
			bad("ReservedConcurrency["+fn+"]", strconv.Itoa(n), fmt.Sprintf(
				"below what the item function's %d SQS event sources can run, %s: the pollers would be throttled and messages dead-lettered early (rule %s)",
				EventSources, s.eventSourcesText(), RuleReservedCoversEventSources))
		}
	}
	s.checkAccountConcurrency(bad)
	for fn, n := range props.MemoryMiB {
		switch {
		case fn == FunctionItem:
			bad("MemoryMiB["+fn+"]", strconv.Itoa(n), "set the item function's memory with ItemMemoryMiB")
		case !slices.Contains([]string{FunctionSubmit, FunctionFinalize, FunctionSweep}, fn):
			bad("MemoryMiB["+fn+"]", strconv.Itoa(n), "not a function of the stack (submit, finalize, sweep)")
		case n < 128 || n > 10240:
			bad("MemoryMiB["+fn+"]", strconv.Itoa(n), "want 128–10240 MiB (Lambda's limits)")
		default:
			s.memoryMiB[fn] = n
		}
	}
	for fn, d := range props.Timeouts {
		switch {
		case fn == FunctionItem:
			bad("Timeouts["+fn+"]", d.String(), "set the item function's timeout with ItemTimeout (the lease and the queues' visibility follow it)")
		case !slices.Contains([]string{FunctionSubmit, FunctionFinalize, FunctionSweep}, fn):
			bad("Timeouts["+fn+"]", d.String(), "not a function of the stack (submit, finalize, sweep)")
		case d < time.Second || d > lambdaMaxTimeout || d%time.Second != 0:
			bad("Timeouts["+fn+"]", d.String(), "want whole seconds from 1s to 15m (Lambda's limit)")
		default:
			s.timeouts[fn] = d
		}
	}
}

// Concurrency rules (checkAccountConcurrency), named in their errors.
const (
	// RuleReservedCoversEventSources: a reservation for the item function
	// is at least EventSources × ItemsMaxConcurrency, what its event
	// sources may run at once.
	RuleReservedCoversEventSources = "reserved-covers-event-sources"
	// RuleUnreservedAtLeast100: the reservations leave at least
	// MinUnreservedConcurrency of AccountConcurrency unreserved.
	RuleUnreservedAtLeast100 = "unreserved-at-least-100"
	// RuleEventSourcesFitUnreserved: without a reservation, the item
	// function's event sources (EventSources × ItemsMaxConcurrency) fit in
	// what the reservations leave of AccountConcurrency.
	RuleEventSourcesFitUnreserved = "event-sources-fit-unreserved"
)

// EventSources is the number of SQS event sources of the item function
// (the items queue and the dead-letter queue), each with
// MaximumConcurrency = ItemsMaxConcurrency (the items queue's in the
// standard mode; in provisioned mode its pollers bound it).
const EventSources = 2

// MinUnreservedConcurrency is the concurrency Lambda keeps unreserved in an
// account: "Lambda keeps 100 units of concurrency unreserved for functions
// that don't explicitly reserve concurrency" ("Configuring reserved
// concurrency", AWS Lambda developer guide); PutFunctionConcurrency
// refuses a reservation that would leave less.
const MinUnreservedConcurrency = 100

// DefaultAccountConcurrency is RunnerProps.AccountConcurrency when zero:
// Lambda's default concurrent executions quota per account and Region
// ("Lambda quotas", AWS Lambda developer guide). New accounts may start
// with less: `bulkrun doctor` reads the real one (GetAccountSettings).
const DefaultAccountConcurrency = 1000

// checkAccountConcurrency checks the reservations against the account's
// concurrency (RuleUnreservedAtLeast100, RuleEventSourcesFitUnreserved).
func (s *settings) checkAccountConcurrency(bad badProp) {
	reserved := 0
	for _, fn := range functionNames {
		reserved += s.reserved[fn]
	}
	if s.accountConcurrency < 1 {
		bad("AccountConcurrency", strconv.Itoa(s.accountConcurrency), "want the account's Lambda concurrency quota, at least 1")
		return
	}
	if left := s.accountConcurrency - reserved; reserved > 0 && left < MinUnreservedConcurrency {
		bad("ReservedConcurrency", reservedString(s.reserved), fmt.Sprintf(
			"reserves %d of the account's %d (AccountConcurrency), leaving %d unreserved: Lambda keeps at least %d unreserved and refuses the reservation (rule %s)",
			reserved, s.accountConcurrency, left, MinUnreservedConcurrency, RuleUnreservedAtLeast100))
	}
	if _, ok := s.reserved[FunctionItem]; !ok {
		if need, left := s.eventSourcesConcurrency(), s.accountConcurrency-reserved; need > left {
			prop, val := "ItemsMaxConcurrency", strconv.Itoa(s.maxConcurrency)
			if s.maxPollers > 0 {
				prop, val = "ItemsMaximumPollers", strconv.Itoa(s.maxPollers)
			}
			bad(prop, val, fmt.Sprintf(
				"the item function's %d event sources may run %s at once, more than the %d the account (AccountConcurrency %d) leaves unreserved: lower it or raise the quota (rule %s)",
				EventSources, s.eventSourcesText(), left, s.accountConcurrency, RuleEventSourcesFitUnreserved))
		}
	}
}

// itemsConcurrency is how many invocations the items queue's event
// source may drive at once (config.Config.ItemsConcurrency).
func (s *settings) itemsConcurrency() int {
	return config.ItemsConcurrencyOf(s.maxConcurrency, s.maxPollers)
}

// eventSourcesConcurrency is what the item function's event sources
// may run at once: the items queue's and the dead-letter queue's.
func (s *settings) eventSourcesConcurrency() int {
	return s.itemsConcurrency() + s.maxConcurrency
}

// eventSourcesText says how eventSourcesConcurrency is made up.
func (s *settings) eventSourcesText() string {
	if s.maxPollers > 0 {
		return fmt.Sprintf("%d × ItemsMaximumPollers (%d) + ItemsMaxConcurrency (%d) = %d",
			config.PollerInvocations, s.maxPollers, s.maxConcurrency, s.eventSourcesConcurrency())
	}
	return fmt.Sprintf("%d × ItemsMaxConcurrency (%d) = %d", EventSources, s.maxConcurrency, s.eventSourcesConcurrency())
}

// reservedString writes reservations as the context key takes them.
func reservedString(m map[string]int) string {
	var parts []string
	for _, fn := range functionNames {
		if n, ok := m[fn]; ok {
			parts = append(parts, fn+"="+strconv.Itoa(n))
		}
	}
	return strings.Join(parts, ",")
}

// checkPipelines checks the custom pipelines, Pipelines and DefaultPipeline.
func (s *settings) checkPipelines(props *RunnerProps, bad badProp) {
	known := registered.Names()
	for _, p := range props.CustomPipelines {
		switch {
		case !pipeline.ValidName(p):
			bad("CustomPipelines", p, "not a valid pipeline name (see pipeline.ValidName)")
		case slices.Contains(known, p):
			bad("CustomPipelines", p, "listed twice, or the name of a built-in pipeline")
		default:
			known = append(known, p)
		}
	}
	if len(props.CustomPipelines) > 0 && props.PipelineCode == "" {
		bad("CustomPipelines", strings.Join(props.CustomPipelines, ","), "set PipelineCode too: bulkrun's own binaries run the built-in pipelines only")
	}
	if props.PipelineCode != "" && len(props.CustomPipelines) == 0 {
		bad("PipelineCode", props.PipelineCode, "name the binary's pipelines in CustomPipelines (what `bootstrap pipelines` prints)")
	}
	for _, p := range s.pipelines {
		if !pipeline.ValidName(p) {
			bad("Pipelines", p, "not a valid pipeline name (see pipeline.ValidName)")
		} else if !slices.Contains(known, p) {
			bad("Pipelines", p, fmt.Sprintf("neither built in nor in CustomPipelines (have %s); %s", strings.Join(slices.Sorted(slices.Values(known)), ", "), api.RegisterPipelineHint))
		}
	}
	if s.defaultPipeline != "" && !slices.Contains(s.pipelines, s.defaultPipeline) {
		bad("DefaultPipeline", s.defaultPipeline, "not one of Pipelines")
	}
}

// checkSchedules checks each schedule's name, expression and request.
func (s *settings) checkSchedules(bad badProp) {
	names := map[string]bool{}
	for _, sc := range s.schedules {
		field := "Schedules[" + sc.Name + "]"
		if len(sc.Name) > 100 || !api.ValidBatchID(sc.Name) || names[sc.Name] {
			bad(field, sc.Name, "name must be unique, 1–100 bytes of [A-Za-z0-9_-]")
		}
		names[sc.Name] = true
		if err := CheckScheduleExpression(sc.Expression); err != nil {
			bad(field+".Expression", sc.Expression, "not an EventBridge schedule expression: "+err.Error())
		}
		var req api.SubmitRequest
		if err := json.Unmarshal(sc.Request, &req); err != nil {
			bad(field+".Request", string(sc.Request), "not a submit request: "+err.Error())
		} else if req.BatchID != "" {
			bad(field+".Request", string(sc.Request), "batch_id derives from the schedule; leave it out")
		} else if !slices.Contains(s.pipelines, req.Pipeline) {
			bad(field+".Request", req.Pipeline, "pipeline is not one of Pipelines")
		} else if n := scheduleInputBytes(sc); n > MaxScheduleInputBytes {
			bad(field+".Request", fmt.Sprintf("%d bytes", n), fmt.Sprintf(
				"the schedule's event input would be %d bytes, over EventBridge's %d (InputTransformer's InputTemplate, Amazon EventBridge API Reference: https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_InputTransformer.html): the deploy would fail; name the items in S3 (source.object or source.prefix) instead of inline",
				n, MaxScheduleInputBytes))
		}
	}
}

// checkCode picks each function's code folder and checks that it holds a
// bootstrap binary.
func (s *settings) checkCode(props *RunnerProps, bad badProp) {
	s.code = map[string]string{}
	if props.CodeBucket != "" {
		s.codeBucket, s.codeKeyPrefix = props.CodeBucket, props.CodeKeyPrefix
		return // zips in S3, read at deploy time (runner.code)
	}
	for _, fn := range functionNames {
		s.code[fn] = filepath.Join(s.functionsDir, fn)
		if props.PipelineCode != "" && (fn == FunctionSubmit || fn == FunctionItem) {
			s.code[fn] = props.PipelineCode
		}
	}
	// The setup function is bulkrun's own, whatever PipelineCode says.
	s.code[FunctionSetup] = filepath.Join(s.functionsDir, FunctionSetup)
	for _, fn := range []string{FunctionSubmit, FunctionFinalize, FunctionSweep, FunctionItem, FunctionSetup} {
		bootstrap := filepath.Join(s.code[fn], "bootstrap")
		if info, err := os.Stat(bootstrap); err != nil || info.IsDir() {
			if props.PipelineCode != "" && s.code[fn] == props.PipelineCode {
				if fn == FunctionSubmit {
					bad("PipelineCode", props.PipelineCode, fmt.Sprintf("no %s: build the binary whose main calls function.Start first", bootstrap))
				}
				continue
			}
			bad("FunctionsDir", s.functionsDir, fmt.Sprintf("no %s: build the functions first", bootstrap))
		}
	}
}
