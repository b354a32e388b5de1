package main

import (
	"os/exec"
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
//
// The import rules of .golangci.yml check direct imports: cli-no-server
// keeps these packages out of the CLI's and shared/client's own imports,
// and engines-wired-only with function-in-mains-only keep the engines and
// shared/function out of every package the CLI can link. The rest of this
// list (the adapters, the pipelines, the DynamoDB and EventBridge SDK
// clients) is a property of the binary: a package it links through
// internal/blob, the core or another module could bring one in, which no
// per-package rule sees; `go list -deps` does.
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
