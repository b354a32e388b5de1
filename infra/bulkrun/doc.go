// Package bulkrun is bulkrun as a CDK v2 construct: NewRunner defines, in
// any stack, the bucket, the table, the items queue with its dead-letter
// and parking queues, the submit, item, finalize and sweep functions with
// least-privilege roles, their event sources and schedules, the REST API,
// the alarms and the dashboard, and the stack outputs the CLI reads.
//
//	runner := bulkrun.NewRunner(stack, jsii.String("Bulkrun"), &bulkrun.RunnerProps{
//		FunctionsDir:    "build/functions",            // make functions
//		Pipelines:       []string{"lambda"},
//		LambdaFunctions: []string{*scorer.FunctionArn()}, // your function, any language
//	})
//	runner.Bucket().GrantPut(uploader, jsii.String("incoming/*"))
//
// RunnerProps holds every setting the functions read; Validate checks
// them with the rules the functions apply at start (config.Load) and
// NewRunner refuses bad ones before defining anything. bulkrun's own app
// (infra/) is one stack holding one Runner, every prop a CDK context key;
// examples/embed is an app of a team that imports it.
package bulkrun
