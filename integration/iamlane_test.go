//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/integration/testbed/iamlane"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// The IAM-checked lane (integration/testbed/iamlane; localstack/README.md,
// "The IAM-checked lane"). When the emulator runs behind the proxy with
// BULKRUN_IAM_LANE=1, every call of a bulkrun function — deployed, or run
// in this process by the harness — is evaluated against the function's
// deployed role. The suite tells the lane which test each batch id belongs
// to (newID), stands the harness's own table, bucket and queue in for the
// stack's (a binding), fails each test whose calls were denied, naming the
// function, the action and the resource, and at the end fails the run on
// any denial at all (TestMain).

// lane is the lane's control endpoint, "" when the lane is off.
var lane struct {
	once   sync.Once
	url    string
	hooked sync.Map // test name → true: its cleanup check is registered
}

// laneURL returns the control endpoint of the lane in front of the
// emulator, "" when there is none.
func laneURL() string {
	lane.once.Do(func() {
		u := strings.TrimRight(os.Getenv("AWS_ENDPOINT_URL"), "/") + faultproxy.GatePath
		resp, err := http.Get(u)
		if err != nil {
			return
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			lane.url = u
		}
	})
	return lane.url
}

// laneOn reports whether the lane checks this run's calls.
func laneOn() bool { return laneURL() != "" }

// laneReset forgets the lane's record of earlier runs (TestMain, before
// the tests): the run's summary is this run's.
func laneReset() error {
	if !laneOn() {
		return nil
	}
	req, _ := http.NewRequest(http.MethodDelete, laneURL(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("IAM lane: %w", err)
	}
	return resp.Body.Close()
}

func lanePost(path string, v any) error {
	b, _ := json.Marshal(v)
	resp, err := http.Post(laneURL()+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("IAM lane %s: %s", path, resp.Status)
	}
	return nil
}

// laneReport reads the lane's record; test "" is every test's.
func laneReport(test string) (iamlane.Report, error) {
	var rep iamlane.Report
	u := laneURL()
	if test != "" {
		u += "?test=" + test
	}
	resp, err := http.Get(u)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&rep)
	return rep, err
}

// laneTrack tells the lane that calls naming id belong to t, and (once per
// test) fails t at its end on every denial or unchecked call of its own.
func laneTrack(t *testing.T, ids ...string) {
	if !laneOn() {
		return
	}
	if err := lanePost("/tests", map[string]any{"test": t.Name(), "batch_ids": ids}); err != nil {
		t.Fatal(err)
	}
	if _, hooked := lane.hooked.LoadOrStore(t.Name(), true); hooked {
		return
	}
	t.Cleanup(func() { laneCheck(t) })
}

// laneCheck fails t on the lane's denials and unchecked calls that name it.
func laneCheck(t *testing.T) {
	t.Helper()
	rep, err := laneReport(t.Name())
	if err != nil {
		t.Errorf("IAM lane: %v", err)
		return
	}
	for _, d := range rep.Denials {
		if !d.Expected {
			t.Errorf("%s — grant it in infra/bulkrun/grants.go and the table of infra/README.md, \"Permissions\"", d)
		}
	}
	for _, p := range rep.Problems {
		t.Errorf("IAM lane could not check %s (%d call(s)): %s", p.Call, p.Count, p.Message)
	}
	for _, l := range rep.Loops {
		if !l.Expected {
			t.Errorf("Lambda's recursive loop detection would stop the item: function %s sent %s to its own queue the %dth time (to %q)", l.Function, l.Message, l.Hops, l.To)
		}
	}
}

// laneAs returns c for function fn's code run in this process: its
// clients carry fn's application id (as handler.Build gives the deployed
// function's), and, under binding (the harness's resources standing in
// for the stack's), the lane's binding header.
func laneAs(c aws.Config, fn, binding string) aws.Config {
	c = c.Copy()
	c.AppID = config.AppID(fn)
	if binding != "" {
		c.APIOptions = append(slices.Clip(c.APIOptions), func(s *middleware.Stack) error {
			return s.Build.Add(middleware.BuildMiddlewareFunc("bulkrunIAMBinding", func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				if req, ok := in.Request.(*smithyhttp.Request); ok {
					req.Header.Set(iamlane.BindingHeader, binding)
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
		})
	}
	return c
}

// laneBind registers the harness of test t as a binding: its table,
// bucket and queue (each named table) stand in for the stack's. It
// returns the binding id ("" when the lane is off).
func laneBind(t *testing.T, id, table string) string {
	if !laneOn() {
		return ""
	}
	b := iamlane.Binding{ID: id, Test: t.Name(), Names: harnessNames(table)}
	if err := lanePost("/bindings", b); err != nil {
		t.Fatal(err)
	}
	laneTrack(t)
	return id
}

// laneRebind registers h's binding again, changed by edit (its names are
// h's table, bucket and queue).
func laneRebind(t *testing.T, h *harness, edit func(*iamlane.Binding)) {
	t.Helper()
	if h.binding == "" {
		return
	}
	b := iamlane.Binding{ID: h.binding, Test: t.Name(), Names: harnessNames(h.table)}
	edit(&b)
	if err := lanePost("/bindings", b); err != nil {
		t.Fatal(err)
	}
}

// harnessNames are a harness's resources as a binding names them: its
// table, its bucket and its queue (all named name).
func harnessNames(name string) map[string]string {
	return map[string]string{"table": name, "bucket": name, "items-queue": "arn:aws:sqs:" + env.aws.Region + ":000000000000:" + name}
}

// laneBindEffects adds table to h's binding as the table its staged
// writes go to: the lane evaluates them against the statement the stack
// grants its declared effect table (DefaultEmulatorEffectTables), with
// table in its place.
func laneBindEffects(t *testing.T, h *harness, table string) {
	laneRebind(t, h, func(b *iamlane.Binding) { b.Names["effect-table"] = table })
}

// laneSummary prints the lane's record of the whole run and returns false
// when it holds a denial no test expected, or an unchecked call. Denials
// of deployed functions may come after their test ended; they are here.
func laneSummary() bool {
	if !laneOn() {
		fmt.Fprintln(os.Stderr, "IAM lane: off (start the emulator with BULKRUN_FAULT_PROXY=1 BULKRUN_IAM_LANE=1 to check every call against the deployed roles)")
		return true
	}
	// Calls of deployed functions may still be on their way.
	time.Sleep(2 * time.Second)
	rep, err := laneReport("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "IAM lane:", err)
		return false
	}
	ok := true
	var lines []string
	for _, d := range rep.Denials {
		if !d.Expected {
			ok = false
		}
		lines = append(lines, "  "+d.String())
	}
	for _, p := range rep.Problems {
		ok = false
		lines = append(lines, fmt.Sprintf("  unchecked: %s (%d call(s), tests %v): %s", p.Call, p.Count, p.Tests, p.Message))
	}
	for _, l := range rep.Loops {
		if !l.Expected {
			ok = false
		}
		lines = append(lines, fmt.Sprintf("  recursive loop stopped: %s sent %s the %dth time (tests %v, expected %v)", l.Function, l.Message, l.Hops, l.Tests, l.Expected))
	}
	fmt.Fprintf(os.Stderr, "IAM lane (%s, stack %s): %d calls of bulkrun functions checked, %d allowed, %d denials, %d unchecked\n",
		rep.Mode, rep.Stack, rep.Checked, rep.Allowed, len(rep.Denials), len(rep.Problems))
	for _, l := range lines {
		fmt.Fprintln(os.Stderr, l)
	}
	return ok
}

// laneRevoke takes actions out of functions' roles for h's calls
// (function → actions), makes the lane refuse h's denied calls even when
// it only audits, and marks their denials expected (they fail nothing).
func laneRevoke(t *testing.T, h *harness, revoke map[string][]string) {
	laneRebind(t, h, func(b *iamlane.Binding) {
		b.Revoke, b.Enforce = revoke, true
		for _, actions := range revoke {
			b.Expect = append(b.Expect, actions...)
		}
	})
}

// TestLaneNamesAMissingGrant takes one grant out of the finalize
// function's role — s3:ListMultipartUploadParts, which completing a
// results file needs — and runs a batch through the harness: finalize is
// refused as AWS refuses it (AccessDenied, no report), and the lane's
// record names the function, the action, the resource and this test.
func TestLaneNamesAMissingGrant(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	if !laneOn() {
		if os.Getenv("CI") == "true" {
			t.Fatal("the IAM lane is off: .ci/run starts the emulator with BULKRUN_FAULT_PROXY=1 BULKRUN_IAM_LANE=1")
		}
		t.Skip("the IAM lane is off (BULKRUN_FAULT_PROXY=1 BULKRUN_IAM_LANE=1)")
	}
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	const action = "s3:ListMultipartUploadParts"
	laneRevoke(t, h, map[string][]string{"finalize": {action}})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(3)}}); err != nil {
		t.Fatal(err)
	}
	h.drain(t, ctx)
	_, err := h.finalizer.Finalize(ctx, id, 1)
	if err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("finalize without %s: %v, want AccessDenied", action, err)
	}
	rep, err := laneReport(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, d := range rep.Denials {
		named = append(named, d.String())
		if d.Function != "finalize" || d.Action != action || !strings.Contains(d.Resource, ":::"+h.table+"/batches/"+id+"/runs/1/results/") {
			t.Errorf("unexpected denial: %s", d)
		}
	}
	if len(rep.Denials) == 0 {
		t.Fatalf("the lane recorded no denial for finalize without %s", action)
	}
	t.Logf("the lane names it: %s", strings.Join(named, "; "))
}
