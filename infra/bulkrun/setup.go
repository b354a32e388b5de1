package bulkrun

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
)

// FunctionSetup is the setup function's construct id and its folder under
// RunnerProps.FunctionsDir: it serves the stack's custom resources
// (package internal/setup), never a batch.
const FunctionSetup = "setup"

// Custom resource types the setup function serves (internal/setup's
// ResourceAccountRole and ResourceTableProtection: the same strings).
const (
	resourceAccountRole     = "Custom::BulkrunApiGatewayAccountRole"
	resourceTableProtection = "Custom::BulkrunTableProtection"
)

// setupTimeout is the setup function's timeout: a new role's propagation
// (internal/setup.DefaultRoleWait, 2 minutes) and a table's wait for
// ACTIVE (2 minutes) fit in it; CloudFormation waits as long for the
// answer, then one more minute (ServiceTimeout).
const setupTimeout = 5 * time.Minute

// defineSetup defines what CloudFormation cannot do by itself, served by
// the setup function:
//
//   - ApiGatewayCloudWatchRole, a role API Gateway may assume to write
//     logs (AmazonAPIGatewayPushToCloudWatchLogs), and
//     ApiGatewayAccountRole, a custom resource that sets it as the
//     Region's account-wide API Gateway CloudWatch role only when the
//     account has none (or with RunnerProps.ApiGatewayAccount, whatever it
//     has), and never unsets it. The stage, whose execution and access
//     logs need that role ("Set up CloudWatch logging for REST APIs in
//     API Gateway"), depends on it: the first deploy on an account where
//     nobody set it succeeds (docs/adr/0026). On AWS the role is kept on
//     the stack's deletion and on a failed create (Retain): the account
//     may point at it.
//   - On AWS, TableProtection, a custom resource that turns the table's
//     deletion protection on once the create got that far, and off only
//     while the stack's first create rolls back, so that CloudFormation
//     can delete the new table (RetainExceptOnCreate).
func (r *runner) defineSetup() {
	s := r.s
	stack := awscdk.Stack_Of(r.Construct)
	fp := &awslambda.FunctionProps{
		Runtime:               awslambda.Runtime_PROVIDED_AL2023(),
		Handler:               jsii.String("bootstrap"),
		Code:                  r.code(FunctionSetup),
		Architecture:          s.arch,
		Timeout:               awscdk.Duration_Seconds(jsii.Number(setupTimeout.Seconds())),
		MemorySize:            jsii.Number(128),
		Description:           jsii.String("bulkrun setup: the stack's custom resources (API Gateway account role, table protection)"),
		LoggingFormat:         awslambda.LoggingFormat_JSON,
		ApplicationLogLevelV2: applicationLogLevels[s.logLevel], // as the other functions' (TestLogLevelKeepsMetricsAndErrors)
		SystemLogLevelV2:      awslambda.SystemLogLevel_INFO,
	}
	if s.target == TargetAWS {
		logs := awslogs.NewLogGroup(r.Construct, jsii.String(FunctionSetup+"-logs"), &awslogs.LogGroupProps{
			Retention: awslogs.RetentionDays_ONE_MONTH,
		})
		logs.ApplyRemovalPolicy(r.removal)
		fp.LogGroup = logs
	}
	fn := awslambda.NewFunction(r.Construct, jsii.String(FunctionSetup), fp)
	r.setup = fn

	role := awsiam.NewRole(r.Construct, jsii.String("ApiGatewayCloudWatchRole"), &awsiam.RoleProps{
		AssumedBy:       awsiam.NewServicePrincipal(jsii.String("apigateway.amazonaws.com"), nil),
		Description:     jsii.String("API Gateway writes access and execution logs to CloudWatch Logs (the Region's account-wide role, set by bulkrun when none was)"),
		ManagedPolicies: &[]awsiam.IManagedPolicy{awsiam.ManagedPolicy_FromAwsManagedPolicyName(jsii.String("service-role/AmazonAPIGatewayPushToCloudWatchLogs"))},
	})
	if s.target == TargetAWS {
		role.ApplyRemovalPolicy(awscdk.RemovalPolicy_RETAIN)
	}
	accountARN := awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("arn:"), awscdk.Aws_PARTITION(),
		jsii.String(":apigateway:"), awscdk.Aws_REGION(), jsii.String("::/account")})
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("apigateway:GET", "apigateway:PATCH"),
		Resources: &[]*string{accountARN},
	}))
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:    jsii.Strings("iam:PassRole"),
		Resources:  &[]*string{role.RoleArn()},
		Conditions: &map[string]any{"StringEquals": map[string]any{"iam:PassedToService": "apigateway.amazonaws.com"}},
	}))
	replace := "false"
	if s.apiGatewayAccount {
		replace = "true"
	}
	account := awscdk.NewCustomResource(r.Construct, jsii.String("ApiGatewayAccountRole"), &awscdk.CustomResourceProps{
		ServiceToken:   fn.FunctionArn(),
		ResourceType:   jsii.String(resourceAccountRole),
		ServiceTimeout: awscdk.Duration_Seconds(jsii.Number((setupTimeout + time.Minute).Seconds())),
		Properties:     &map[string]any{"RoleArn": role.RoleArn(), "Replace": replace},
	})
	// The custom resource must not start before its function may make its
	// calls (CDK adds the function's own dependencies, not its policy's).
	account.Node().AddDependency(fn.Role())
	r.accountRole = account

	if s.target != TargetAWS {
		return
	}
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:DescribeTable", "dynamodb:UpdateTable"),
		Resources: &[]*string{r.table.TableArn()},
	}))
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("cloudformation:DescribeStacks"),
		Resources: &[]*string{stack.StackId()},
	}))
	protection := awscdk.NewCustomResource(r.Construct, jsii.String("TableProtection"), &awscdk.CustomResourceProps{
		ServiceToken:   fn.FunctionArn(),
		ResourceType:   jsii.String(resourceTableProtection),
		ServiceTimeout: awscdk.Duration_Seconds(jsii.Number((setupTimeout + time.Minute).Seconds())),
		Properties:     &map[string]any{"TableName": r.table.TableName()},
	})
	protection.Node().AddDependency(fn.Role())
}
