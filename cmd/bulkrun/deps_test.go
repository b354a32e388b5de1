package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goListDeps returns the packages `go list -deps` lists for patterns (run
// from this directory, in the module).
func goListDeps(t *testing.T, patterns ...string) []string {
	t.Helper()
	return goListDepsIn(t, ".", patterns...)
}

// goListDepsIn returns the packages `go list -deps args...` lists, run
// from dir (in dir's module).
func goListDepsIn(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{"list", "-deps"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %v (in %s): %v\n%s", args, dir, err, stderr)
	}
	return strings.Fields(string(out))
}

// forbidden returns the deps that are pkg or below it.
func forbidden(deps []string, pkgs ...string) []string {
	var hit []string
	for _, d := range deps {
		for _, p := range pkgs {
			if d == p || strings.HasPrefix(d, p+"/") {
				hit = append(hit, d)
			}
		}
	}
	return hit
}

// TestContractCLILinksNoServer guards the API contract's client side: the
// bulkrun CLI binary talks to the stack's data through shared/client and
// the wire types of shared/wire only, so it links neither the server code
// (shared/function, the DynamoDB, SQS and trigger adapters, the pipelines)
// nor the DynamoDB and EventBridge SDK clients. It may link S3 (it uploads
// local files), CloudFormation (it reads the stack's outputs), and the
// read-only account checks of `bulkrun doctor`: Lambda (GetAccountSettings,
// concurrency, event source mappings), SQS (queue attributes), CloudWatch
// (alarms, metrics) and API Gateway (the account's logging role).
func TestContractCLILinksNoServer(t *testing.T) {
	deps := goListDeps(t, ".")
	if hit := forbidden(deps,
		"github.com/aws/aws-sdk-go-v2/service/dynamodb",
		"github.com/aws/aws-sdk-go-v2/service/eventbridge",
		"github.com/bulkrun/bulkrun/shared/function",
		"github.com/bulkrun/bulkrun/internal/dynamo",
		"github.com/bulkrun/bulkrun/internal/queue",
		"github.com/bulkrun/bulkrun/internal/trigger",
		"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail",
		"github.com/bulkrun/bulkrun/internal/pipeline/webhook",
		"net/http/httptest",
	); len(hit) > 0 {
		t.Errorf("go list -deps ./cmd/bulkrun lists server packages:\n%s", strings.Join(hit, "\n"))
	}
	// The check must see the CLI's real dependencies, not an empty list.
	if len(forbidden(deps, "github.com/bulkrun/bulkrun/shared/wire")) == 0 {
		t.Errorf("go list -deps ./cmd/bulkrun does not list shared/wire; deps: %d packages", len(deps))
	}
}

// TestContractWireImportsNoServer guards the API contract's shared types:
// shared/wire depends on the standard library and the API types
// (shared/api) only, so any Go client can use it without the AWS SDK.
func TestContractWireImportsNoServer(t *testing.T) {
	for _, d := range goListDeps(t, "github.com/bulkrun/bulkrun/shared/wire") {
		if strings.HasPrefix(d, "github.com/aws/") || d == "github.com/bulkrun/bulkrun/shared/function" || d == "net/http/httptest" {
			t.Errorf("shared/wire depends on %s", d)
		}
	}
}

// TestContractNoHTTPTestInProduction guards the functions and the CLI
// against linking net/http/httptest (a test helper that registers test
// flags): no production package of the module depends on it.
func TestContractNoHTTPTestInProduction(t *testing.T) {
	deps := goListDeps(t, "github.com/bulkrun/bulkrun/functions/...", "github.com/bulkrun/bulkrun/cmd/...", "github.com/bulkrun/bulkrun/shared/...")
	if hit := forbidden(deps, "net/http/httptest"); len(hit) > 0 {
		t.Errorf("production code depends on %v", hit)
	}
}

// TestContractFunctionsLinkNoTestBed guards the test bed's place beside
// the product: no Lambda binary links a package of integration/testbed
// (the in-memory store, the fault proxy, the IAM-checked lane, the meter,
// the bench) — neither bulkrun's functions nor a team's build of submit
// and item, here the example team's runner (examples/embed, a module of
// its own), each listed as `make functions` builds it (tag lambda.norpc).
func TestContractFunctionsLinkNoTestBed(t *testing.T) {
	binaries := []struct{ dir, pattern string }{
		{".", "github.com/bulkrun/bulkrun/functions/..."},
		{filepath.Join("..", "..", "examples", "embed"), "./runner"},
	}
	for _, bin := range binaries {
		deps := goListDepsIn(t, bin.dir, "-tags", "lambda.norpc", bin.pattern)
		if hit := forbidden(deps, "github.com/bulkrun/bulkrun/integration/testbed"); len(hit) > 0 {
			t.Errorf("go list -deps %s links the test bed:\n%s", bin.pattern, strings.Join(hit, "\n"))
		}
		// The check must see the binary's real dependencies.
		if len(forbidden(deps, "github.com/bulkrun/bulkrun/shared/function")) == 0 {
			t.Errorf("go list -deps %s does not list shared/function; deps: %d packages", bin.pattern, len(deps))
		}
	}
}
