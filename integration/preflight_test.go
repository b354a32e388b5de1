//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/doctor"
	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/config"
)

// buildCLI builds cmd/bulkrun into the test's temporary folder.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// doctorRun runs the CLI's doctor with args, in JSON and then in text
// (logged: what an operator reads), and returns the checks by name and
// the exit status (the same for both).
func doctorRun(t *testing.T, bin string, args ...string) (map[string]doctor.Check, int) {
	t.Helper()
	run := func(extra ...string) ([]byte, int) {
		cmd := exec.Command(bin, append(append([]string{"doctor"}, args...), extra...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return stdout.Bytes(), ee.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return stdout.Bytes(), 0
	}
	raw, code := run("-o", "json")
	var checks []doctor.Check
	if err := json.Unmarshal(raw, &checks); err != nil {
		t.Fatalf("doctor %v: %v\n%s", args, err, raw)
	}
	byName := map[string]doctor.Check{}
	for _, c := range checks {
		byName[c.Check] = c
	}
	text, textCode := run()
	if textCode != code {
		t.Errorf("doctor %v: exit %d in text, %d in JSON", args, textCode, code)
	}
	t.Logf("$ bulkrun doctor %s   (exit %d)\n%s", strings.Join(args, " "), code, text)
	return byName, code
}

// deployedTemplate returns the deployed stack's template, decoded: what
// `make deploy` synthesized into build/cdk.out.
func deployedTemplate(t *testing.T) map[string]any {
	t.Helper()
	name := os.Getenv("BULKRUN_STACK")
	if name == "" {
		name = config.DefaultStackName
	}
	out, err := cloudformation.NewFromConfig(env.aws).GetTemplate(context.Background(), &cloudformation.GetTemplateInput{StackName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	var tpl map[string]any
	if err := json.Unmarshal([]byte(aws.ToString(out.TemplateBody)), &tpl); err != nil {
		t.Fatal(err)
	}
	return tpl
}

// writeTemplate writes tpl, changed by change (may be nil), to a file.
func writeTemplate(t *testing.T, name string, tpl map[string]any, change func(res map[string]any)) string {
	t.Helper()
	var copied map[string]any
	raw, _ := json.Marshal(tpl)
	_ = json.Unmarshal(raw, &copied)
	if change != nil {
		change(copied["Resources"].(map[string]any))
	}
	raw, _ = json.Marshal(copied)
	path := filepath.Join(t.TempDir(), name+".template.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Canned answers of the accounts the emulator cannot be, for the CLI's
// own calls only (signed with the test's access key "test"; the deployed
// functions sign with another).
var (
	noRole = faultproxy.Rule{Service: "apigateway", Operations: []string{"GetAccount"}, AccessKey: "test", Kind: faultproxy.KindAnswer, Rate: 1, Status: 200,
		Body: `{"throttleSettings":{"burstLimit":5000,"rateLimit":10000},"features":["UsagePlans"],"apiKeyVersion":"4"}`}
	quota = func(n int) faultproxy.Rule {
		return faultproxy.Rule{Service: "lambda", Operations: []string{"GetAccountSettings"}, AccessKey: "test", Kind: faultproxy.KindAnswer, Rate: 1, Status: 200,
			Body: `{"AccountLimit":{"TotalCodeSize":80530636800,"CodeSizeUnzipped":262144000,"CodeSizeZipped":52428800,"ConcurrentExecutions":` +
				itoa(n) + `,"UnreservedConcurrentExecutions":` + itoa(n) + `},"AccountUsage":{"TotalCodeSize":0,"FunctionCount":0}}`}
	}
)

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestPreflight runs the preflight as `make deploy` runs it before every
// deploy (`bulkrun doctor --preflight --template …`, here the deployed
// stack's template), with the account's answers varied by the fault
// proxy (canned GetAccount and GetAccountSettings answers):
//
//   - an account without API Gateway's CloudWatch role: the stack sets its
//     own, so the deploy goes ahead; a template whose stage logs without
//     setting one (the stack before docs/adr/0026) is refused, naming the
//     fix;
//   - an account with Lambda's new-account quota of 10: refused (the item
//     function's event sources would take the account's concurrency from
//     every other function), naming the quota to request and the
//     ItemsMaxConcurrency that fits; --skip-preflight deploys anyway; on
//     the emulator target the same finding is informational;
//   - a healthy account (a role, the default quota of 1,000): nothing to fix.
func TestPreflight(t *testing.T) {
	faults := stackFaults(t)
	bin := buildCLI(t)
	tpl := deployedTemplate(t)
	current := writeTemplate(t, "current", tpl, nil)
	preflight := func(target, template string, extra ...string) (map[string]doctor.Check, int) {
		t.Helper()
		return doctorRun(t, bin, append([]string{"--preflight", "--target", target, "--template", template}, extra...)...)
	}

	t.Run("no role", func(t *testing.T) {
		faults.set(t, faultproxy.Config{Rules: []faultproxy.Rule{noRole, quota(1000)}})
		got, code := preflight("aws", current)
		if c := got["api-gateway-logging"]; c.Status != doctor.OK || !strings.Contains(c.Detail, "the stack sets its own") {
			t.Errorf("no role, a stack that sets it: %+v", c)
		}
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		// The stack before ADR 0026: a logging stage, nothing that sets the role.
		old := writeTemplate(t, "old", tpl, func(res map[string]any) {
			for id, r := range res {
				if r.(map[string]any)["Type"] == "Custom::BulkrunApiGatewayAccountRole" {
					delete(res, id)
				}
			}
		})
		got, code = preflight("aws", old)
		if c := got["api-gateway-logging"]; c.Status != doctor.Fix || !strings.Contains(c.Detail, "CloudWatch Logs role ARN must be set") || !strings.Contains(c.Fix, "ApiGatewayAccountRole") {
			t.Errorf("no role, a template that does not set it: %+v", c)
		}
		if code != 1 {
			t.Errorf("exit %d, want 1: the deploy would fail", code)
		}
	})

	t.Run("low quota", func(t *testing.T) {
		faults.set(t, faultproxy.Config{Rules: []faultproxy.Rule{quota(10)}})
		got, code := preflight("aws", current)
		c := got["concurrency"]
		if c.Status != doctor.Fix || !strings.Contains(c.Detail, "account quota 10") || !strings.Contains(c.Fix, "quota of at least 300") || !strings.Contains(c.Fix, "itemsMaxConcurrency=2") {
			t.Errorf("quota 10: %+v", c)
		}
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if _, code := preflight("aws", current, "--skip-preflight"); code != 0 {
			t.Errorf("--skip-preflight: exit %d, want 0", code)
		}
		got, code = preflight("emulator", current)
		if c := got["concurrency"]; c.Status != doctor.Info || code != 0 {
			t.Errorf("the emulator target: %+v, exit %d; want informational, 0", c, code)
		}
	})

	t.Run("healthy", func(t *testing.T) {
		faults.set(t, faultproxy.Config{Rules: []faultproxy.Rule{quota(1000)}})
		got, code := preflight("aws", current)
		for _, name := range []string{"concurrency", "api-gateway-logging", "bucket", "source-buckets", "alarm-topic"} {
			if c, ok := got[name]; !ok || c.Status != doctor.OK {
				t.Errorf("%s: %+v, want ok", name, c)
			}
		}
		if c := got["api-gateway-logging"]; !strings.Contains(c.Detail, "ApiGatewayCloudWatchRole") {
			t.Errorf("the role the stack set: %+v", c)
		}
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
	})
}
