//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/lambdalogs"
	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

// lockedBuffer is a bytes.Buffer safe for the worker's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type mapSecrets map[string]string

func (m mapSecrets) Resolve(_ context.Context, arn string) (string, error) {
	if v, ok := m[arn]; ok {
		return v, nil
	}
	return "", errors.New("ParameterNotFound")
}

// TestHarnessLogsCarryNoPayloadOrSecret guards the product lines "JSON logs
// with batch_id, run, key, run_id, attempt, outcome and duration_ms" and
// "no item payloads or secret values in them": a batch whose inputs and
// outputs carry a marker and whose headers carry a bearer token and a
// secret reference runs through submit and the item worker with the
// functions' JSON logger at debug; the pipeline gets the resolved secret,
// every log line is JSON, the outcome line has every field, and no line
// holds the marker, the token or the resolved value.
func TestHarnessLogsCarryNoPayloadOrSecret(t *testing.T) {
	ctx := context.Background()
	const ref = "arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/log-test"
	h := newHarness(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Headers["X-Ref"] != "resolved-s3cr3t" || req.Headers["Authorization"] != "Bearer hdr-s3cr3t" {
			return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("headers not resolved: %d headers", len(req.Headers)))
		}
		return pipeline.Result{Output: json.RawMessage(`{"echo":"payload-marker-out"}`)}, nil
	})
	var buf lockedBuffer
	log := handler.NewLogger(&buf, "debug")
	h.submitter.Log, h.worker.Log = log, log
	h.submitter.SecretPrefixes = []string{"arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/*"}
	h.worker.Secrets = mapSecrets{ref: "resolved-s3cr3t"}

	id := newID(t)
	_, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted",
		Headers: map[string]string{"Authorization": "Bearer hdr-s3cr3t", "X-Ref": secretref.Prefix + ref},
		Source:  api.SourceSpec{Items: json.RawMessage(`[{"p":"payload-marker-in-1"},{"p":"payload-marker-in-2"}]`)}})
	if err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1)) // the fan-out
	h.worker.Handle(ctx, h.receive(t, 2)) // the items
	for _, k := range []string{api.PositionalKey(0), api.PositionalKey(1)} {
		it, err := h.store.GetItem(ctx, id, k)
		if err != nil || it.Outcome != api.OutcomeSucceeded {
			t.Fatalf("item %s: %+v, %v; want succeeded with the resolved headers", k, it, err)
		}
	}

	// Two packs of two such items, delivered to one invocation: their
	// own lines are DEBUG, and one INFO line sums the invocation's
	// successes of the batch's run (as one did for the two item messages
	// above).
	packed := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: packed, Pipeline: "counted", ItemsPerMessage: 2,
		Headers: map[string]string{"Authorization": "Bearer hdr-s3cr3t", "X-Ref": secretref.Prefix + ref},
		Source:  api.SourceSpec{Items: json.RawMessage(`[{"p":"payload-marker-in-1"},{"p":"payload-marker-in-2"},{"p":"payload-marker-in-3"},{"p":"payload-marker-in-4"}]`)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1)) // the fan-out
	h.worker.Handle(ctx, h.receive(t, 2)) // the packs

	out := buf.String()
	recorded := map[string]int{}
	summed := 0
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %d is not JSON: %s", i+1, line)
		}
		if rec["message"] == "items recorded" {
			summed++
			want := map[string]any{"level": "INFO", "batch_id": packed, "run": float64(1), "items": float64(4), "messages": float64(2), "outcome": "succeeded"}
			if rec["batch_id"] == id { // the item messages' invocation
				want["batch_id"], want["items"] = id, float64(2)
			}
			for k, v := range want {
				if rec[k] != v {
					t.Errorf("an invocation's line: %s; want %s %v", line, k, v)
				}
			}
		}
		if rec["message"] == "item recorded" {
			recorded[fmt.Sprint(rec["batch_id"], " ", rec["level"])]++
			for _, f := range []string{"batch_id", "run", "key", "run_id", "attempt", "outcome", "duration_ms"} {
				if _, ok := rec[f]; !ok {
					t.Errorf("outcome line lacks %s: %s", f, line)
				}
			}
		}
	}
	if want := map[string]int{id + " DEBUG": 2, packed + " DEBUG": 4}; !maps.Equal(recorded, want) {
		t.Errorf("\"item recorded\" lines by batch and level: %v, want %v:\n%s", recorded, want, out)
	}
	if summed != 2 {
		t.Errorf("%d \"items recorded\" lines, want 2 (one per invocation that ran items):\n%s", summed, out)
	}
	for _, secret := range []string{"payload-marker", "hdr-s3cr3t", "resolved-s3cr3t"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs hold %q:\n%s", secret, out)
		}
	}
}

// TestErrorLinesReachTheLogs: a deployed function's error line reaches
// CloudWatch Logs under the function's logging configuration, as Lambda's
// log-level filtering keeps it (functionLogs), and Lambda files it at
// ERROR — so a stack at any LogLevel keeps it, and a filter on
// "level":"ERROR" (docs/operations.md) finds it. The line: submit's
// refusal of a schedule tick whose source is missing.
func TestErrorLinesReachTheLogs(t *testing.T) {
	name := newID(t)
	tick := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	req := api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Object: "s3://" + env.bucket + "/it-sources/" + name + "-missing.jsonl"},
		Options: json.RawMessage(`{"url":"http://127.0.0.1:9/x"}`)}
	invokeSubmit(t, handler.ScheduleEvent{Schedule: name, Time: tick, Request: req})
	id := handler.ScheduleBatchID(name, tick)
	refused := func(lines []string) []string {
		var out []string
		for _, line := range lines {
			if strings.Contains(line, handler.SourceSchedule+" refused") {
				out = append(out, line)
			}
		}
		return out
	}
	lines := refused(functionLogs(t, config.OutputSubmitFunction, `"`+id+`"`, func(l []string) bool { return len(refused(l)) > 0 }))
	if len(lines) == 0 {
		t.Fatalf("no %q line of batch %s in submit's logs", handler.SourceSchedule+" refused", id)
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		if got := lambdalogs.Level(line); got != "ERROR" || rec["message"] == nil {
			t.Errorf("Lambda files %s as %s (message %v), want ERROR with a message", line, got, rec["message"])
		}
	}
}
