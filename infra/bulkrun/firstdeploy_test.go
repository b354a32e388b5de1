package bulkrun

import (
	"slices"
	"strings"
	"testing"
)

// stageLogs says whether a stage's properties turn on CloudWatch logging:
// execution logs (a MethodSettings LoggingLevel other than OFF) or access
// logs to a log group.
func stageLogs(p map[string]any) bool {
	if als, ok := p["AccessLogSetting"].(map[string]any); ok && als["DestinationArn"] != nil {
		return true
	}
	ms, _ := p["MethodSettings"].([]any)
	for _, m := range ms {
		if l, _ := m.(map[string]any)["LoggingLevel"].(string); l != "" && l != "OFF" {
			return true
		}
	}
	return false
}

// TestFirstDeployOnAFreshAccount guards "the first deploy succeeds on an
// account or Region where nobody set API Gateway's CloudWatch role"
// (docs/adr/0026): CloudFormation refuses a stage with execution or
// access logs while the account has none ("CloudWatch Logs role ARN must
// be set in account settings to enable logging"), so every logging stage
// depends on the custom resource that sets the stack's role where none is
// set; the stack never overwrites another role unless ApiGatewayAccount
// says so, and holds no AWS::ApiGateway::Account (which would, on every
// deploy).
func TestFirstDeployOnAFreshAccount(t *testing.T) {
	for _, name := range opsStacks {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			// What sets the account's role: the custom resource, or an
			// AWS::ApiGateway::Account.
			setters := map[string]string{}
			for _, typ := range []string{"Custom::BulkrunApiGatewayAccountRole", "AWS::ApiGateway::Account"} {
				for id := range s.resourcesOfType(typ) {
					setters[id] = typ
				}
			}
			stages := s.resourcesOfType("AWS::ApiGateway::Stage")
			if len(stages) == 0 {
				t.Fatal("no stage")
			}
			for id, st := range stages {
				if !stageLogs(st["Properties"].(map[string]any)) {
					continue
				}
				deps, _ := st["DependsOn"].([]any)
				if !slices.ContainsFunc(deps, func(d any) bool { _, ok := setters[d.(string)]; return ok }) {
					t.Errorf("stage %s logs to CloudWatch but depends on nothing that sets the account's API Gateway CloudWatch role (DependsOn %v): on an account without one CloudFormation refuses it and rolls back", id, deps)
				}
			}
			for id, typ := range setters {
				if typ == "AWS::ApiGateway::Account" {
					t.Errorf("%s is an AWS::ApiGateway::Account: it overwrites the account's role on every deploy", id)
					continue
				}
				p := s.properties(t, id)
				want := "false"
				if name == opsAWS { // ApiGatewayAccount
					want = "true"
				}
				if p["Replace"] != want {
					t.Errorf("Replace %v, want %s", p["Replace"], want)
				}
				if !strings.Contains(flatten(p["RoleArn"]), "ApiGatewayCloudWatchRole") {
					t.Errorf("RoleArn %v, want the stack's ApiGatewayCloudWatchRole", flatten(p["RoleArn"]))
				}
				if !strings.Contains(flatten(p["ServiceToken"]), "setup") {
					t.Errorf("ServiceToken %v, want the setup function", flatten(p["ServiceToken"]))
				}
			}
			if len(setters) != 1 {
				t.Errorf("%d resources set the account's role, want 1: %v", len(setters), setters)
			}
		})
	}
}

// stateful are the resource types whose data or protection the AWS
// target keeps when the stack is deleted.
var stateful = []string{"AWS::S3::Bucket", "AWS::S3::BucketPolicy", "AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::SQS::QueuePolicy", "AWS::Logs::LogGroup"}

// TestFailedFirstCreateLeavesNothing guards "a failed first create leaves
// nothing that blocks the next" on AWS: the bucket, the table, the queues,
// their policies and the log groups are kept by the stack's deletion and
// by updates but deleted when the create that made them rolls back
// (DeletionPolicy RetainExceptOnCreate, UpdateReplacePolicy Retain); the
// table is not created deletion-protected (the rollback could not delete
// it, and the stack would end ROLLBACK_FAILED): a custom resource turns
// the protection on once the create got that far. The one resource kept
// whatever happens is the API Gateway CloudWatch role (the account may
// point at it).
func TestFailedFirstCreateLeavesNothing(t *testing.T) {
	for _, name := range []string{TargetAWS, opsAWS} {
		t.Run(name, func(t *testing.T) {
			s := synthOps(t, name)
			for _, typ := range stateful {
				res := s.resourcesOfType(typ)
				if len(res) == 0 {
					t.Errorf("no %s", typ)
				}
				for id, r := range res {
					if r["DeletionPolicy"] != "RetainExceptOnCreate" || r["UpdateReplacePolicy"] != "Retain" {
						t.Errorf("%s %s: DeletionPolicy %v, UpdateReplacePolicy %v; want RetainExceptOnCreate, Retain", typ, id, r["DeletionPolicy"], r["UpdateReplacePolicy"])
					}
				}
			}
			var retained []string
			for id, r := range s.json["Resources"].(map[string]any) {
				if r.(map[string]any)["DeletionPolicy"] == "Retain" {
					retained = append(retained, id)
				}
			}
			if len(retained) != 1 || !strings.HasPrefix(retained[0], "ApiGatewayCloudWatchRole") {
				t.Errorf("resources kept even by a failed create: %v, want only ApiGatewayCloudWatchRole", retained)
			}
			table := s.id("Table")
			if p := s.properties(t, table); p["DeletionProtectionEnabled"] == true {
				t.Errorf("the table is created deletion-protected: a rollback of the create cannot delete it")
			}
			protections := s.resourcesOfType("Custom::BulkrunTableProtection")
			if len(protections) != 1 {
				t.Fatalf("%d Custom::BulkrunTableProtection, want 1", len(protections))
			}
			for _, r := range protections {
				if got := flatten(r["Properties"].(map[string]any)["TableName"]); got != "{"+table+"}" {
					t.Errorf("TableProtection's TableName %s, want the table", got)
				}
			}
		})
	}
}
