// Package setup runs the steps of bulkrun's stack that CloudFormation
// cannot take itself, as custom resources the setup function serves
// (functions/setup; infra/bulkrun defines the resources):
//
//   - ResourceAccountRole: the Region's API Gateway CloudWatch role, an
//     account-wide setting (AWS::ApiGateway::Account's CloudWatchRoleArn)
//     that the stage's execution and access logs need and that no account
//     has until someone sets it. Create and Update read it (GetAccount)
//     and set the stack's role (UpdateAccount) only when none is set, or
//     when the resource's Replace is "true"; Delete never unsets it. The
//     answer's data: RoleArn (the account's role afterwards) and Set
//     ("true" when this call set it).
//   - ResourceTableProtection: the table's deletion protection, turned on
//     by Create and Update (UpdateTable), so that a table is protected
//     only once the create that made it got that far. Delete turns it off
//     only while the stack rolls back its first create
//     (ROLLBACK_IN_PROGRESS, read with DescribeStacks), so that
//     CloudFormation can delete the new, empty table (its DeletionPolicy
//     is RetainExceptOnCreate); any other Delete (the stack's deletion, an
//     update) leaves the table protected.
//
// Sources: "Set up CloudWatch logging for REST APIs in API Gateway"
// (https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-logging.html):
// the account's role is what both logs need; AWS::ApiGateway::Account in
// the CloudFormation template reference; "Using deletion protection"
// (DynamoDB developer guide) and the DeletionPolicy attribute
// (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html).
//
// Errors fail the resource (CloudFormation then rolls the stack back), the
// message naming the call and the AWS error. Handler is safe for
// concurrent use; each step is idempotent.
package setup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	agtypes "github.com/aws/aws-sdk-go-v2/service/apigateway/types"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/config"
)

// FunctionName is the setup function's name among bulkrun's functions
// (its folder under functions/ and its config.AppID).
const FunctionName = "setup"

// Custom resource types the Handler serves (the template's Type).
const (
	ResourceAccountRole     = "Custom::BulkrunApiGatewayAccountRole"
	ResourceTableProtection = "Custom::BulkrunTableProtection"
)

// Properties of the custom resources (ResourceProperties; CloudFormation
// sends every scalar as a string).
const (
	// PropRoleArn is ResourceAccountRole's role to set: an IAM role ARN
	// that apigateway.amazonaws.com may assume, with
	// AmazonAPIGatewayPushToCloudWatchLogs.
	PropRoleArn = "RoleArn"
	// PropReplace is ResourceAccountRole's "true" to set the role even
	// when the account has another (RunnerProps.ApiGatewayAccount).
	PropReplace = "Replace"
	// PropTableName is ResourceTableProtection's table.
	PropTableName = "TableName"
)

// AccountRolePhysicalID is ResourceAccountRole's physical id: one per
// account and Region, the same on every call, so that an update never
// makes CloudFormation delete a previous one.
const AccountRolePhysicalID = "apigateway-account-cloudwatch-role"

// DefaultRoleWait bounds how long UpdateAccount is tried again while API
// Gateway cannot assume a role IAM made moments ago ("The role ARN does
// not have required permissions set to API Gateway"): IAM is eventually
// consistent, a new role is usually usable within seconds.
const DefaultRoleWait = 2 * time.Minute

// APIGateway is what the account role step calls (an *apigateway.Client).
type APIGateway interface {
	GetAccount(ctx context.Context, in *apigateway.GetAccountInput, opts ...func(*apigateway.Options)) (*apigateway.GetAccountOutput, error)
	UpdateAccount(ctx context.Context, in *apigateway.UpdateAccountInput, opts ...func(*apigateway.Options)) (*apigateway.UpdateAccountOutput, error)
}

// Tables is what the table protection step calls (a *dynamodb.Client).
type Tables interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
}

// Stacks is what the table protection step reads the stack's status
// with (a *cloudformation.Client).
type Stacks interface {
	DescribeStacks(ctx context.Context, in *cloudformation.DescribeStacksInput, opts ...func(*cloudformation.Options)) (*cloudformation.DescribeStacksOutput, error)
}

var (
	_ APIGateway = (*apigateway.Client)(nil)
	_ Tables     = (*dynamodb.Client)(nil)
	_ Stacks     = (*cloudformation.Client)(nil)
)

// Handler serves the custom resources. Log, RoleWait (0: DefaultRoleWait)
// and Sleep (nil: a timer that ends with ctx) are optional.
type Handler struct {
	APIGateway APIGateway
	Tables     Tables
	Stacks     Stacks
	Log        *slog.Logger
	RoleWait   time.Duration
	Sleep      func(ctx context.Context, d time.Duration) error
}

// Handle serves one custom resource event: cfn.LambdaWrap's function
// (physical id, data, error). An unknown resource type is an error.
func (h *Handler) Handle(ctx context.Context, e cfn.Event) (string, map[string]any, error) {
	switch e.ResourceType {
	case ResourceAccountRole:
		return h.accountRole(ctx, e)
	case ResourceTableProtection:
		return h.tableProtection(ctx, e)
	}
	return e.PhysicalResourceID, nil, fmt.Errorf("setup: unknown resource type %q (want %s or %s)", e.ResourceType, ResourceAccountRole, ResourceTableProtection)
}

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// prop returns a resource property as a string.
func prop(e cfn.Event, name string) string {
	switch v := e.ResourceProperties[name].(type) {
	case string:
		return v
	case bool:
		if v {
			return "true"
		}
		return "false"
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// accountRole sets the account's API Gateway CloudWatch role when none is
// set (or PropReplace), and never unsets it.
func (h *Handler) accountRole(ctx context.Context, e cfn.Event) (string, map[string]any, error) {
	if e.RequestType == cfn.RequestDelete {
		h.log().InfoContext(ctx, "API Gateway account role kept: the account's setting outlives the stack")
		return AccountRolePhysicalID, nil, nil
	}
	role := prop(e, PropRoleArn)
	if !strings.HasPrefix(role, "arn:") || !strings.Contains(role, ":role/") {
		return AccountRolePhysicalID, nil, fmt.Errorf("setup: %s %s: want an IAM role ARN, got %q", ResourceAccountRole, PropRoleArn, role)
	}
	out, err := h.APIGateway.GetAccount(ctx, &apigateway.GetAccountInput{})
	if err != nil {
		return AccountRolePhysicalID, nil, fmt.Errorf("setup: apigateway GetAccount: %w", err)
	}
	current := aws.ToString(out.CloudwatchRoleArn)
	if current == role || (current != "" && prop(e, PropReplace) != "true") {
		h.log().InfoContext(ctx, "API Gateway account role already set", "role", current)
		return AccountRolePhysicalID, map[string]any{"RoleArn": current, "Set": "false"}, nil
	}
	if err := h.updateAccount(ctx, role); err != nil {
		return AccountRolePhysicalID, nil, err
	}
	h.log().InfoContext(ctx, "API Gateway account role set", "role", role, "previous", current)
	return AccountRolePhysicalID, map[string]any{"RoleArn": role, "Set": "true"}, nil
}

// updateAccount sets the role, trying again while API Gateway cannot yet
// assume it (a BadRequestException naming the role, within RoleWait).
func (h *Handler) updateAccount(ctx context.Context, role string) error {
	wait := h.RoleWait
	if wait <= 0 {
		wait = DefaultRoleWait
	}
	deadline := time.Now().Add(wait)
	for delay := 2 * time.Second; ; delay = min(2*delay, 15*time.Second) {
		_, err := h.APIGateway.UpdateAccount(ctx, &apigateway.UpdateAccountInput{PatchOperations: []agtypes.PatchOperation{{
			Op: agtypes.OpReplace, Path: aws.String("/cloudwatchRoleArn"), Value: aws.String(role),
		}}})
		if err == nil {
			return nil
		}
		var bad *agtypes.BadRequestException
		if !errors.As(err, &bad) || !strings.Contains(strings.ToLower(bad.ErrorMessage()), "role") || time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("setup: apigateway UpdateAccount cloudwatchRoleArn=%s: %w", role, err)
		}
		h.log().InfoContext(ctx, "API Gateway cannot assume the new role yet; trying again", "role", role, "error", err.Error(), "delay_ms", delay.Milliseconds())
		if err := h.sleep(ctx, delay); err != nil {
			return fmt.Errorf("setup: apigateway UpdateAccount cloudwatchRoleArn=%s: %w", role, err)
		}
	}
}

func (h *Handler) sleep(ctx context.Context, d time.Duration) error {
	if h.Sleep != nil {
		return h.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tableProtection turns the table's deletion protection on, and off only
// while the stack rolls back its first create.
func (h *Handler) tableProtection(ctx context.Context, e cfn.Event) (string, map[string]any, error) {
	table := prop(e, PropTableName)
	if table == "" {
		return e.PhysicalResourceID, nil, fmt.Errorf("setup: %s: %s is empty", ResourceTableProtection, PropTableName)
	}
	if e.RequestType != cfn.RequestDelete {
		if err := h.protect(ctx, table, true); err != nil {
			return table, nil, err
		}
		h.log().InfoContext(ctx, "table deletion protection on", "table", table)
		return table, nil, nil
	}
	status, err := h.stackStatus(ctx, e.StackID)
	if err != nil {
		return e.PhysicalResourceID, nil, err
	}
	if status != "ROLLBACK_IN_PROGRESS" {
		h.log().InfoContext(ctx, "table deletion protection kept", "table", table, "stack_status", status)
		return e.PhysicalResourceID, nil, nil
	}
	// The create that made the table rolls back: CloudFormation deletes
	// the new table next (RetainExceptOnCreate), which protection forbids.
	if err := h.protect(ctx, table, false); err != nil && !notFound(err) {
		return e.PhysicalResourceID, nil, err
	}
	h.log().InfoContext(ctx, "table deletion protection off: the stack's first create rolls back", "table", table)
	return e.PhysicalResourceID, nil, nil
}

// tableWaits bounds protect's waits for a table that is not ACTIVE
// (UpdateTable refuses a table being created or updated).
const (
	tableWaits     = 24
	tableWaitDelay = 5 * time.Second
)

// protect sets the table's deletion protection to on, unless it is so
// already, once the table is ACTIVE.
func (h *Handler) protect(ctx context.Context, table string, on bool) error {
	for i := 0; ; i++ {
		out, err := h.Tables.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("setup: dynamodb DescribeTable %s: %w", table, err)
		}
		if out.Table == nil {
			return fmt.Errorf("setup: dynamodb DescribeTable %s: no table description", table)
		}
		if aws.ToBool(out.Table.DeletionProtectionEnabled) == on {
			return nil
		}
		if out.Table.TableStatus == ddbtypes.TableStatusActive {
			break
		}
		if i == tableWaits {
			return fmt.Errorf("setup: dynamodb table %s is %s, not ACTIVE, after %s", table, out.Table.TableStatus, tableWaits*tableWaitDelay)
		}
		if err := h.sleep(ctx, tableWaitDelay); err != nil {
			return fmt.Errorf("setup: wait for table %s: %w", table, err)
		}
	}
	_, err := h.Tables.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(table), DeletionProtectionEnabled: aws.Bool(on)})
	if err != nil {
		return fmt.Errorf("setup: dynamodb UpdateTable %s DeletionProtectionEnabled=%v: %w", table, on, err)
	}
	return nil
}

// notFound says whether err is an AWS ResourceNotFoundException.
func notFound(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ResourceNotFoundException"
}

// stackStatus reads the stack's status (StackStatus) by its id.
func (h *Handler) stackStatus(ctx context.Context, stackID string) (string, error) {
	out, err := h.Stacks.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(stackID)})
	if err != nil {
		return "", fmt.Errorf("setup: cloudformation DescribeStacks %s: %w", stackID, err)
	}
	if len(out.Stacks) == 0 {
		return "", fmt.Errorf("setup: cloudformation DescribeStacks %s: no stack", stackID)
	}
	return string(out.Stacks[0].StackStatus), nil
}

// Start serves the setup function (functions/setup): clients built from
// the SDK's environment (credentials, region, AWS_ENDPOINT_URL) with
// bulkrun's retryer (awsfault.Retryer) and the application id
// config.AppID("setup"), JSON logs on stdout keyed as Lambda's log-level
// filtering reads them (timestamp, level, message:
// lambdacontext.ReplaceAttr), each event answered to
// CloudFormation's ResponseURL (cfn.LambdaWrap). It returns only when the
// SDK's configuration cannot be loaded.
func Start(ctx context.Context) error {
	ac, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRetryer(awsfault.Retryer), awsconfig.WithAppID(config.AppID(FunctionName)))
	if err != nil {
		return fmt.Errorf("setup: load AWS config: %w", err)
	}
	h := &Handler{
		APIGateway: apigateway.NewFromConfig(ac),
		Tables:     dynamodb.NewFromConfig(ac),
		Stacks:     cloudformation.NewFromConfig(ac),
		Log:        slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: lambdacontext.ReplaceAttr})),
	}
	lambda.StartWithOptions(cfn.LambdaWrap(h.Handle), lambda.WithContext(ctx))
	return nil
}
