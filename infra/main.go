// Command infra is bulkrun's own CDK app: one stack holding one Runner
// (package infra/bulkrun, the construct other CDK apps import), every
// RunnerProps field settable by CDK context.
//
// Run it through the cdk CLI from infra/ (cdk.json says "go run ."). The
// context keys (-c key=value) are contextProps below, one per RunnerProps
// field, plus:
//
//	stackName      the CloudFormation stack name (default config.DefaultStackName)
//	template       "true": a template for plain CloudFormation (make
//	               template; infra/README.md, "Without CDK"): the
//	               functions' code from the CloudFormation parameters
//	               CodeBucket and CodeKeyPrefix, and no CDK bootstrap
//	               (no asset, no BootstrapVersion parameter)
//
// The account and region come from CDK_DEFAULT_ACCOUNT and
// CDK_DEFAULT_REGION, which the cdk CLI sets from the caller's credentials.
// A bad value is reported naming its key (exit 2); props the Runner
// refuses are reported naming the field (exit 1). Nothing is synthesized
// then.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/infra/bulkrun"
	"github.com/bulkrun/bulkrun/shared/config"
)

// runnerID is the Runner's construct id: "Default" is left out of the
// logical ids, so the resources keep the ids they had when the stack
// defined them itself.
const runnerID = "Default"

func main() {
	defer jsii.Close()

	app := awscdk.NewApp(nil)
	get := func(key string) string { return contextString(app, key) }
	props, err := propsFromContext(get)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := bulkrun.Validate(props); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	newStack(app, get, props)
	app.Synth(nil)
}

// newStack defines the app's stack (named by the stackName context key)
// holding one Runner built from props.
func newStack(app awscdk.App, get func(string) string, props *bulkrun.RunnerProps) awscdk.Stack {
	stackName := get("stackName")
	if stackName == "" {
		stackName = config.DefaultStackName
	}
	env := &awscdk.Environment{}
	if a := os.Getenv("CDK_DEFAULT_ACCOUNT"); a != "" {
		env.Account = jsii.String(a)
	}
	if r := os.Getenv("CDK_DEFAULT_REGION"); r != "" {
		env.Region = jsii.String(r)
	}
	target := props.Target
	if target == "" {
		target = bulkrun.TargetAWS
	}
	sp := &awscdk.StackProps{
		StackName:   jsii.String(stackName),
		Env:         env,
		Description: jsii.String("bulkrun: durable bulk runs (target " + target + ")"),
	}
	template := get("template") == "true"
	if template {
		sp.Synthesizer = awscdk.NewBootstraplessSynthesizer(nil)
	}
	stack := awscdk.NewStack(app, jsii.String(stackName), sp)
	if template {
		p := *props
		p.CodeBucket, p.CodeKeyPrefix = codeParameters(stack)
		props = &p
	}
	bulkrun.NewRunner(stack, jsii.String(runnerID), props)
	return stack
}

// Template parameters (make template): where the functions' zips are.
const (
	ParamCodeBucket    = "CodeBucket"
	ParamCodeKeyPrefix = "CodeKeyPrefix"
)

// codeParameters defines the template's CloudFormation parameters
// CodeBucket and CodeKeyPrefix and returns their values (tokens), for
// RunnerProps.CodeBucket and CodeKeyPrefix.
func codeParameters(stack awscdk.Stack) (bucket, prefix string) {
	b := awscdk.NewCfnParameter(stack, jsii.String(ParamCodeBucket), &awscdk.CfnParameterProps{
		Type:                  jsii.String("String"),
		MinLength:             jsii.Number(3),
		MaxLength:             jsii.Number(63),
		AllowedPattern:        jsii.String("[a-z0-9][a-z0-9.-]*[a-z0-9]"),
		ConstraintDescription: jsii.String("an S3 bucket name"),
		Description: jsii.String("The S3 bucket, in the stack's Region, holding the functions' zips: " +
			"{CodeKeyPrefix}submit.zip, item.zip, finalize.zip and sweep.zip (make template writes them to build/template/functions/)."),
	})
	p := awscdk.NewCfnParameter(stack, jsii.String(ParamCodeKeyPrefix), &awscdk.CfnParameterProps{
		Type:                  jsii.String("String"),
		Default:               jsii.String(""),
		MaxLength:             jsii.Number(900),
		AllowedPattern:        jsii.String("(|[^/].*/)"),
		ConstraintDescription: jsii.String("empty, or a key prefix ending in / (not starting with one)"),
		Description:           jsii.String("The prefix of the zips' keys in CodeBucket, ending in / (e.g. bulkrun/2026-12-01/); empty for none."),
	})
	return *b.ValueAsString(), *p.ValueAsString()
}

// contextString returns the CDK context value for key, "" when unset.
func contextString(app awscdk.App, key string) string {
	v := app.Node().TryGetContext(jsii.String(key))
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	// -c key=value always gives a string; cdk.json may hold numbers and
	// booleans.
	return fmt.Sprint(v)
}
