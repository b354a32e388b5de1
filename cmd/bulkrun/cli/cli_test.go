package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Cost sums drift: the CLI prints summed costs in plain decimal, without
// binary-float noise. Guards `bulkrun status` and `bulkrun report`
// (docs/cli.md "The command line").
func TestPrintCostExact(t *testing.T) {
	sum := pipeline.CostSum{}
	for range 10 {
		sum.Add(pipeline.Cost{"usd": 0.1, "eur": 0.07, "tokens": 1e-7})
	}
	var out bytes.Buffer
	(&app{out: &out}).printCost("cost", sum)
	if want := "cost:  eur 0.7  tokens 0.000001  usd 1\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
	out.Reset()
	(&app{out: &out}).printCost("cost", nil)
	if out.Len() != 0 {
		t.Fatalf("no costs printed %q, want nothing", out.String())
	}
}

// TestSecretsCLIReadsHeadersFromFileOrEnv guards the product line "the CLI
// reads headers from a file or the environment, not argv": values come from
// --headers-file (JSON or "Name: value" lines) and --header-env, errors
// never quote a value, and there is no --header flag taking values.
func TestSecretsCLIReadsHeadersFromFileOrEnv(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "h.json")
	_ = os.WriteFile(jsonFile, []byte(`{"Authorization": "Bearer from-file", "X-Ref": "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/t"}`), 0o600)
	linesFile := filepath.Join(dir, "h.txt")
	_ = os.WriteFile(linesFile, []byte("# headers\nAuthorization: Bearer a:b\n\nX-Tenant: acme\n"), 0o600)
	badFile := filepath.Join(dir, "bad.txt")
	_ = os.WriteFile(badFile, []byte("X-Ok: 1\nno-colon-s3cr3t\n"), 0o600)
	env := map[string]string{"HOOK_TOKEN": "Bearer from-env"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	tests := []struct {
		name    string
		file    string
		env     []string
		want    map[string]string
		wantErr string
	}{
		{"json file", jsonFile, nil, map[string]string{"Authorization": "Bearer from-file", "X-Ref": "secret:arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/t"}, ""},
		{"lines file and env", linesFile, []string{"X-Hook=HOOK_TOKEN"}, map[string]string{"Authorization": "Bearer a:b", "X-Tenant": "acme", "X-Hook": "Bearer from-env"}, ""},
		{"none", "", nil, nil, ""},
		{"bad line", badFile, nil, nil, "line 2: want Name: value"},
		{"unset variable", "", []string{"Authorization=NOPE"}, nil, "environment variable NOPE is not set"},
		{"twice", linesFile, []string{"X-Tenant=HOOK_TOKEN"}, nil, `header "X-Tenant" given twice`},
		{"bad pair", "", []string{"Authorization"}, nil, "want NAME=ENVVAR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadHeaders(tt.file, tt.env, lookup)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "from-env") {
					t.Errorf("error %q quotes a value", err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("ReadHeaders = %v, %v, want %v", got, err, tt.want)
			}
		})
	}
	a := &app{}
	cmd := a.submitCmd()
	if cmd.Flags().Lookup("header") != nil {
		t.Error("submit still takes header values on the command line (--header)")
	}
	for _, f := range []string{"headers-file", "header-env"} {
		if cmd.Flags().Lookup(f) == nil {
			t.Errorf("submit has no --%s", f)
		}
	}
}

// TestSubmitRetryHintOnlyWhenRetryable guards docs/cli.md "Reaching the stack, submitting, watching": "if every
// try fails it says which --id to run again with": the hint was also given
// for a refusal (400, 409, 507), where running the command again with that
// id only gets the same refusal; it is given for failures a retry may cure.
func TestSubmitRetryHintOnlyWhenRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		hint bool
	}{
		{"504 from the gateway", &client.APIError{Status: http.StatusGatewayTimeout}, true},
		{"429", &client.APIError{Status: http.StatusTooManyRequests}, true},
		{"no answer", &url.Error{Op: "Post", URL: "https://x/batches", Err: io.ErrUnexpectedEOF}, true},
		{"interrupted", fmt.Errorf("submit b: %w", context.Canceled), true},
		{"400 refused", &client.APIError{Status: http.StatusBadRequest}, false},
		{"409 mismatch", &client.APIError{Status: http.StatusConflict}, false},
		{"507", &client.APIError{Status: http.StatusInsufficientStorage}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := submitError(fmt.Errorf("submit b-1: %w", tt.err), "b-1")
			if got := strings.Contains(err.Error(), "--id b-1"); got != tt.hint {
				t.Fatalf("%v: hint %v, want %v", err, got, tt.hint)
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("%v does not wrap %v", err, tt.err)
			}
		})
	}
}

// TestRequestBatchIDNamesTheRequest: the default id of a local source is
// the same for the same request (retries, --rerun), and another for other
// content or settings.
func TestRequestBatchIDNamesTheRequest(t *testing.T) {
	base := api.SubmitRequest{Pipeline: "webhook", KeyField: "k", Options: json.RawMessage(`{"url":"https://example.org/h"}`),
		Source: api.SourceSpec{Object: "s3://b/uploads/0123456789abcdef/orders.jsonl"}}
	id := RequestBatchID(base)
	if !strings.HasPrefix(id, "cli-") || len(id) != 28 {
		t.Fatalf("id %q, want cli- and 24 hex digits", id)
	}
	same := base
	same.Rerun, same.BatchID = true, "ignored"
	if got := RequestBatchID(same); got != id {
		t.Errorf("with --rerun: %q, want %q", got, id)
	}
	for name, change := range map[string]func(*api.SubmitRequest){
		"content":   func(r *api.SubmitRequest) { r.Source.Object = "s3://b/uploads/fedcba9876543210/orders.jsonl" },
		"pipeline":  func(r *api.SubmitRequest) { r.Pipeline = "thumbnail" },
		"options":   func(r *api.SubmitRequest) { r.Options = json.RawMessage(`{"url":"https://example.org/other"}`) },
		"key field": func(r *api.SubmitRequest) { r.KeyField = "" },
		"headers":   func(r *api.SubmitRequest) { r.Headers = map[string]string{"X-Tenant": "acme"} },
		// Items per message are part of the plan: another K under the same
		// id would be a 409.
		"items per message": func(r *api.SubmitRequest) { r.ItemsPerMessage = 10 },
	} {
		r := base
		change(&r)
		if got := RequestBatchID(r); got == id {
			t.Errorf("other %s: same id %q", name, got)
		}
	}
}

// TestSubmitItemsPerMessageFlag guards docs/api.md "More submit options": "CLI
// --items-per-message": the flag sets the request's items_per_message.
func TestSubmitItemsPerMessageFlag(t *testing.T) {
	a := &app{}
	cmd := a.submitCmd()
	f := cmd.Flags().Lookup("items-per-message")
	if f == nil {
		t.Fatal("submit has no --items-per-message")
	}
	if err := cmd.Flags().Set("items-per-message", "10"); err != nil {
		t.Fatal(err)
	}
	if f.Value.String() != "10" || f.DefValue != "0" {
		t.Fatalf("--items-per-message = %s (default %s), want 10 (default 0)", f.Value, f.DefValue)
	}
}

// forget asks to type the batch id: the id goes on, another answer stops
// with exit 1, no input (a script without --yes) with exit 2 naming --yes;
// nothing is deleted unless confirmed.
func TestForgetAsksForConfirmation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		code int
	}{{"b-1\n", 0}, {"  b-1  \n", 0}, {"y\n", ExitFailure}, {"", ExitUsage}} {
		var errw bytes.Buffer
		a := &app{errw: &errw, in: strings.NewReader(tc.in)}
		err := a.confirm("b-1")
		var ee *ExitError
		switch {
		case tc.code == 0 && err != nil:
			t.Errorf("%q: %v, want confirmed", tc.in, err)
		case tc.code != 0 && (!errors.As(err, &ee) || ee.Code != tc.code):
			t.Errorf("%q: %v, want exit %d", tc.in, err, tc.code)
		case tc.code == ExitUsage && !strings.Contains(err.Error(), "--yes"):
			t.Errorf("%q: %v, want the --yes hint", tc.in, err)
		}
		if !strings.Contains(errw.String(), "for good") {
			t.Errorf("prompt %q does not say what is deleted", errw.String())
		}
	}
}

// TestStatusShowsThePause: a paused running batch's status says who
// paused it, since when, why (an outage's class and one error), its
// probes and the next check; a finished batch shows no pause line.
func TestStatusShowsThePause(t *testing.T) {
	since := time.Date(2026, 12, 1, 19, 49, 53, 0, time.UTC)
	outage := api.Pause{By: api.PauseByOutage, Since: since, Class: "http 502", Error: "webhook: k01167: HTTP 502", Probes: 2,
		NextCheckAt: since.Add(210 * time.Second)}
	for _, tc := range []struct {
		name   string
		status api.Status
		pause  *api.Pause
		want   string
	}{
		{"outage", api.StatusRunning, &outage,
			"paused by an outage since 2026-12-01T19:49:53Z (http 502: webhook: k01167: HTTP 502); 2 probes, next check 2026-12-01T19:53:23Z; no item starts until a probe is answered or unpause\n"},
		{"caller", api.StatusRunning, &api.Pause{By: api.PauseByCaller, Since: since, NextCheckAt: since.Add(30 * time.Second)},
			"paused by a caller since 2026-12-01T19:49:53Z, next check 2026-12-01T19:50:23Z; no item starts until unpause\n"},
		{"budget", api.StatusRunning, &api.Pause{By: api.PauseByBudget, Since: since, Class: "budget",
			Error: "budget $5 reached ($5.0001 spent: pipeline $5, DynamoDB $0.0001; Lambda and SQS not counted)", NextCheckAt: since.Add(30 * time.Second)},
			"paused: budget $5 reached ($5.0001 spent: pipeline $5, DynamoDB $0.0001; Lambda and SQS not counted), since 2026-12-01T19:49:53Z; no item starts until the budget is raised above the spend (bulkrun budget ID --usd N)\n"},
		{"finished", api.StatusCompleted, &outage, ""},
	} {
		var out bytes.Buffer
		a := &app{out: &out, output: "text"}
		if err := a.show(wire.BatchView{Batch: api.Batch{ID: "b-1", Run: 1, Status: tc.status, Pause: tc.pause}}); err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, l := range strings.SplitAfter(out.String(), "\n") {
			if strings.HasPrefix(l, "paused") {
				got += l
			}
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// Running again after its pauses: what they took, the last one and
	// who ended it.
	var out bytes.Buffer
	a := &app{out: &out, output: "text"}
	ps := &api.PausedSummary{Pauses: 2, Seconds: 95.5, Last: &api.PauseSpan{By: api.PauseByOutage, Since: since, Until: since.Add(58 * time.Second), Class: "http 502", Probes: 3, EndedBy: api.PauseByCaller}}
	if err := a.show(wire.BatchView{Batch: api.Batch{ID: "b-1", Run: 1, Status: api.StatusRunning}, Paused: ps}); err != nil {
		t.Fatal(err)
	}
	if want := "paused 2 times, 1m35.5s in all; the last by an outage (http 502, 3 probes) from 2026-12-01T19:49:53Z to 2026-12-01T19:50:51Z, ended by a caller's unpause\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status of a running batch that paused before:\n%s\nwant the line %q", out.String(), want)
	}
	// Finished, it still says so (a new user saw the pauses only in the
	// report).
	out.Reset()
	if err := a.show(wire.BatchView{Batch: api.Batch{ID: "b-1", Run: 1, Status: api.StatusCompleted}, Paused: ps}); err != nil {
		t.Fatal(err)
	}
	if want := "paused 2 times, 1m35.5s in all;"; !strings.Contains(out.String(), want) {
		t.Errorf("status of a finished batch that paused:\n%s\nwant the line %q", out.String(), want)
	}
}

// --budget sets the request's budget_usd only when given, and refuses
// what is not US dollars > 0 naming the flag.
func TestBudgetFlag(t *testing.T) {
	var req api.SubmitRequest
	f := pflag.NewFlagSet("submit", pflag.ContinueOnError)
	submitRequestFlags(f, &req)
	if err := f.Parse(nil); err != nil || req.BudgetUSD != nil {
		t.Fatalf("no --budget: %v, %v: want none", req.BudgetUSD, err)
	}
	if err := f.Parse([]string{"--budget", "12.5"}); err != nil || req.BudgetUSD == nil || *req.BudgetUSD != 12.5 {
		t.Fatalf("--budget 12.5: %v, %v", req.BudgetUSD, err)
	}
	for _, bad := range []string{"0", "-1", "ten", "NaN", "+Inf"} {
		f := pflag.NewFlagSet("submit", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		submitRequestFlags(f, &api.SubmitRequest{})
		if err := f.Parse([]string{"--budget", bad}); err == nil || !strings.Contains(err.Error(), "--budget") {
			t.Errorf("--budget %s: %v, want refused naming --budget", bad, err)
		}
	}
}

// TestPrintItemsNextMoves: a text listing says each next move once,
// failed items' too (correct or resume), not only held items'.
func TestPrintItemsNextMoves(t *testing.T) {
	var out bytes.Buffer
	failed := api.NextMove(api.OutcomeFailed, nil, true)
	hold := &api.Hold{Subject: "secret:arn:x"}
	withheld := api.NextMove(api.OutcomeWithheld, hold, false)
	(&app{out: &out}).printItems([]api.Item{
		{Key: "a", Outcome: api.OutcomeFailed, Next: failed},
		{Key: "b", Outcome: api.OutcomeFailed, Next: failed},
		{Key: "c", Outcome: api.OutcomeWithheld, Hold: hold, Next: withheld},
		{Key: "d", Outcome: api.OutcomeSucceeded},
	})
	got := out.String()
	for _, want := range []string{"next move (failed): " + failed + "\n", "next move (withheld): " + withheld + "\n"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("listing %q: want %q once", got, want)
		}
	}
}
