package setup

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	agtypes "github.com/aws/aws-sdk-go-v2/service/apigateway/types"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	stackRole = "arn:aws:iam::123456789012:role/bulkrun-ApiGatewayCloudWatchRole-AbC"
	otherRole = "arn:aws:iam::123456789012:role/team-apigateway-logs"
	stackID   = "arn:aws:cloudformation:eu-west-1:123456789012:stack/bulkrun/5e1b2c3d-0000-4000-8000-000000000000"
)

// fakeAWS stands for API Gateway's account, one table and the stack,
// and records the calls.
type fakeAWS struct {
	mu          sync.Mutex
	role        string   // the account's cloudwatchRoleArn
	refusals    []error  // UpdateAccount's next answers
	tableStatus []string // DescribeTable's next statuses (then ACTIVE)
	protected   bool
	noTable     bool
	stackStatus string
	calls       []string
}

func (f *fakeAWS) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeAWS) GetAccount(context.Context, *apigateway.GetAccountInput, ...func(*apigateway.Options)) (*apigateway.GetAccountOutput, error) {
	f.record("GetAccount")
	out := &apigateway.GetAccountOutput{}
	if f.role != "" {
		out.CloudwatchRoleArn = aws.String(f.role)
	}
	return out, nil
}

func (f *fakeAWS) UpdateAccount(_ context.Context, in *apigateway.UpdateAccountInput, _ ...func(*apigateway.Options)) (*apigateway.UpdateAccountOutput, error) {
	op := in.PatchOperations[0]
	f.record("UpdateAccount " + string(op.Op) + " " + aws.ToString(op.Path) + "=" + aws.ToString(op.Value))
	if len(f.refusals) > 0 {
		err := f.refusals[0]
		f.refusals = f.refusals[1:]
		return nil, err
	}
	f.role = aws.ToString(op.Value)
	return &apigateway.UpdateAccountOutput{CloudwatchRoleArn: op.Value}, nil
}

func (f *fakeAWS) DescribeTable(_ context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	f.record("DescribeTable " + aws.ToString(in.TableName))
	if f.noTable {
		return nil, &ddbtypes.ResourceNotFoundException{Message: aws.String("Requested resource not found")}
	}
	status := ddbtypes.TableStatusActive
	if len(f.tableStatus) > 0 {
		status = ddbtypes.TableStatus(f.tableStatus[0])
		f.tableStatus = f.tableStatus[1:]
	}
	return &dynamodb.DescribeTableOutput{Table: &ddbtypes.TableDescription{TableStatus: status, DeletionProtectionEnabled: aws.Bool(f.protected)}}, nil
}

func (f *fakeAWS) UpdateTable(_ context.Context, in *dynamodb.UpdateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	on := aws.ToBool(in.DeletionProtectionEnabled)
	f.record("UpdateTable " + aws.ToString(in.TableName) + " protection=" + map[bool]string{true: "on", false: "off"}[on])
	f.protected = on
	return &dynamodb.UpdateTableOutput{}, nil
}

func (f *fakeAWS) DescribeStacks(_ context.Context, in *cloudformation.DescribeStacksInput, _ ...func(*cloudformation.Options)) (*cloudformation.DescribeStacksOutput, error) {
	f.record("DescribeStacks")
	if aws.ToString(in.StackName) != stackID {
		return nil, errors.New("DescribeStacks by " + aws.ToString(in.StackName) + ", want the stack's id")
	}
	return &cloudformation.DescribeStacksOutput{Stacks: []cftypes.Stack{{StackStatus: cftypes.StackStatus(f.stackStatus)}}}, nil
}

func (f *fakeAWS) handler(sleeps *[]time.Duration) *Handler {
	return &Handler{APIGateway: f, Tables: f, Stacks: f, Sleep: func(_ context.Context, d time.Duration) error {
		*sleeps = append(*sleeps, d)
		return nil
	}}
}

func event(kind cfn.RequestType, resource string, props map[string]any) cfn.Event {
	e := cfn.Event{RequestType: kind, ResourceType: resource, StackID: stackID, RequestID: "req-1", LogicalResourceID: "X", ResourceProperties: props}
	if kind != cfn.RequestCreate {
		e.PhysicalResourceID = "existing"
	}
	return e
}

// The account's API Gateway CloudWatch role is set only where none is
// (or with Replace), tried again while IAM propagates a new role, and
// never unset: the first deploy on an account where nobody set it
// succeeds, and no other team's role is overwritten.
func TestAccountRole(t *testing.T) {
	propagating := &agtypes.BadRequestException{Message: aws.String("The role ARN does not have required permissions set to API Gateway")}
	for _, tc := range []struct {
		name      string
		kind      cfn.RequestType
		role      string
		replace   string
		refusals  []error
		wantCalls string
		wantRole  string
		wantSet   string
		wantErr   string
		wantSleep int
	}{
		{name: "no role: set", kind: cfn.RequestCreate, wantCalls: "GetAccount; UpdateAccount replace /cloudwatchRoleArn=" + stackRole, wantRole: stackRole, wantSet: "true"},
		{name: "another role: kept", kind: cfn.RequestCreate, role: otherRole, wantCalls: "GetAccount", wantRole: otherRole, wantSet: "false"},
		{name: "another role, update: kept", kind: cfn.RequestUpdate, role: otherRole, wantCalls: "GetAccount", wantRole: otherRole, wantSet: "false"},
		{name: "the stack's role: nothing to do", kind: cfn.RequestUpdate, role: stackRole, wantCalls: "GetAccount", wantRole: stackRole, wantSet: "false"},
		{name: "another role, Replace: set", kind: cfn.RequestCreate, role: otherRole, replace: "true", wantCalls: "GetAccount; UpdateAccount replace /cloudwatchRoleArn=" + stackRole, wantRole: stackRole, wantSet: "true"},
		{name: "delete: never unset", kind: cfn.RequestDelete, role: stackRole, wantCalls: "", wantRole: stackRole},
		{name: "a new role propagates", kind: cfn.RequestCreate, refusals: []error{propagating, propagating},
			wantCalls: strings.Repeat("UpdateAccount replace /cloudwatchRoleArn="+stackRole+"; ", 2) + "UpdateAccount replace /cloudwatchRoleArn=" + stackRole,
			wantRole:  stackRole, wantSet: "true", wantSleep: 2},
		{name: "another refusal fails", kind: cfn.RequestCreate, refusals: []error{&agtypes.TooManyRequestsException{Message: aws.String("slow down")}},
			wantCalls: "GetAccount; UpdateAccount replace /cloudwatchRoleArn=" + stackRole, wantErr: "apigateway UpdateAccount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAWS{role: tc.role, refusals: tc.refusals}
			var sleeps []time.Duration
			props := map[string]any{PropRoleArn: stackRole}
			if tc.replace != "" {
				props[PropReplace] = tc.replace
			}
			id, data, err := f.handler(&sleeps).Handle(context.Background(), event(tc.kind, ResourceAccountRole, props))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one naming %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			calls := strings.Join(f.calls, "; ")
			if tc.name == "a new role propagates" {
				calls = strings.TrimPrefix(calls, "GetAccount; ")
			}
			if calls != tc.wantCalls {
				t.Errorf("calls\n  %s\nwant\n  %s", calls, tc.wantCalls)
			}
			if tc.wantErr == "" && f.role != tc.wantRole {
				t.Errorf("account role %q, want %q", f.role, tc.wantRole)
			}
			if id != AccountRolePhysicalID {
				t.Errorf("physical id %q, want %q", id, AccountRolePhysicalID)
			}
			if tc.wantSet != "" && (data["Set"] != tc.wantSet || data["RoleArn"] != tc.wantRole) {
				t.Errorf("data %v, want Set %s RoleArn %s", data, tc.wantSet, tc.wantRole)
			}
			if len(sleeps) != tc.wantSleep {
				t.Errorf("%d waits, want %d", len(sleeps), tc.wantSleep)
			}
		})
	}
	if _, _, err := (&Handler{}).Handle(context.Background(), event(cfn.RequestCreate, ResourceAccountRole, map[string]any{PropRoleArn: "team-role"})); err == nil || !strings.Contains(err.Error(), PropRoleArn) {
		t.Errorf("a role that is no ARN: %v, want an error naming %s", err, PropRoleArn)
	}
}

// The table is protected once the create got as far as this resource;
// its protection goes off only while the stack's first create rolls
// back, so that CloudFormation can delete the new table, and stays on
// when the stack is deleted or updated.
func TestTableProtection(t *testing.T) {
	props := map[string]any{PropTableName: "bulkrun-Table-1"}
	for _, tc := range []struct {
		name        string
		kind        cfn.RequestType
		protected   bool
		statuses    []string
		stackStatus string
		noTable     bool
		wantCalls   string
		wantOn      bool
		wantSleep   int
	}{
		{name: "create", kind: cfn.RequestCreate, wantCalls: "DescribeTable bulkrun-Table-1; UpdateTable bulkrun-Table-1 protection=on", wantOn: true},
		{name: "create waits for ACTIVE", kind: cfn.RequestCreate, statuses: []string{"CREATING", "UPDATING"},
			wantCalls: "DescribeTable bulkrun-Table-1; DescribeTable bulkrun-Table-1; DescribeTable bulkrun-Table-1; UpdateTable bulkrun-Table-1 protection=on", wantOn: true, wantSleep: 2},
		{name: "update, already on", kind: cfn.RequestUpdate, protected: true, wantCalls: "DescribeTable bulkrun-Table-1", wantOn: true},
		{name: "the stack is deleted", kind: cfn.RequestDelete, protected: true, stackStatus: "DELETE_IN_PROGRESS", wantCalls: "DescribeStacks", wantOn: true},
		{name: "an update removes it", kind: cfn.RequestDelete, protected: true, stackStatus: "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", wantCalls: "DescribeStacks", wantOn: true},
		{name: "an update rolls back", kind: cfn.RequestDelete, protected: true, stackStatus: "UPDATE_ROLLBACK_IN_PROGRESS", wantCalls: "DescribeStacks", wantOn: true},
		{name: "the first create rolls back", kind: cfn.RequestDelete, protected: true, stackStatus: "ROLLBACK_IN_PROGRESS",
			wantCalls: "DescribeStacks; DescribeTable bulkrun-Table-1; UpdateTable bulkrun-Table-1 protection=off", wantOn: false},
		{name: "the first create rolls back, table gone", kind: cfn.RequestDelete, stackStatus: "ROLLBACK_IN_PROGRESS", noTable: true,
			wantCalls: "DescribeStacks; DescribeTable bulkrun-Table-1", wantOn: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAWS{protected: tc.protected, tableStatus: tc.statuses, stackStatus: tc.stackStatus, noTable: tc.noTable}
			var sleeps []time.Duration
			if _, _, err := f.handler(&sleeps).Handle(context.Background(), event(tc.kind, ResourceTableProtection, props)); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(f.calls, "; "); got != tc.wantCalls {
				t.Errorf("calls\n  %s\nwant\n  %s", got, tc.wantCalls)
			}
			if f.protected != tc.wantOn {
				t.Errorf("protected %v, want %v", f.protected, tc.wantOn)
			}
			if len(sleeps) != tc.wantSleep {
				t.Errorf("%d waits, want %d", len(sleeps), tc.wantSleep)
			}
		})
	}
	if _, _, err := (&Handler{}).Handle(context.Background(), event(cfn.RequestCreate, "Custom::Other", nil)); err == nil || !strings.Contains(err.Error(), "unknown resource type") {
		t.Errorf("an unknown type: %v", err)
	}
}

// What CloudFormation receives at the ResponseURL (cfn.LambdaWrap over
// Handle): SUCCESS with the physical id and data, or FAILED with the
// error as the reason.
func TestResponses(t *testing.T) {
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		got = append(got, m)
	}))
	defer srv.Close()
	f := &fakeAWS{}
	var sleeps []time.Duration
	fn := cfn.LambdaWrap(f.handler(&sleeps).Handle)
	e := event(cfn.RequestCreate, ResourceAccountRole, map[string]any{PropRoleArn: stackRole})
	e.ResponseURL = srv.URL
	if _, err := fn(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	e.ResourceProperties = map[string]any{PropRoleArn: "nope"}
	if _, err := fn(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0]["Status"] != "SUCCESS" || got[0]["PhysicalResourceId"] != AccountRolePhysicalID ||
		got[0]["Data"].(map[string]any)["RoleArn"] != stackRole || got[1]["Status"] != "FAILED" || !strings.Contains(got[1]["Reason"].(string), PropRoleArn) {
		t.Fatalf("responses %v", got)
	}
}
