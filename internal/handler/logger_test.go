package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/bulkrun/bulkrun/integration/testbed/lambdalogs"
)

// TestLogsJSONWithRequestIDAndLevel guards the product line "JSON logs
// everywhere, with the request id, at the configured level": the logger the
// functions build is JSON, every record logged with the invocation's
// context carries its request id (from the context alone: nothing is kept
// per process, so a record logged without it, or between invocations,
// carries none), and records below the level are dropped.
func TestLogsJSONWithRequestIDAndLevel(t *testing.T) {
	tests := []struct {
		level     string
		wantMsgs  []string
		wantLevel []string
	}{
		{"info", []string{"info", "warn", "error"}, []string{"INFO", "WARN", "ERROR"}},
		{"warn", []string{"warn", "error"}, []string{"WARN", "ERROR"}},
		{"debug", []string{"debug", "info", "warn", "error"}, []string{"DEBUG", "INFO", "WARN", "ERROR"}},
		{"nonsense", []string{"info", "warn", "error"}, []string{"INFO", "WARN", "ERROR"}},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			var buf bytes.Buffer
			log := NewLogger(&buf, tt.level).With("batch_id", "b1")
			ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-" + tt.level})
			log.DebugContext(ctx, "debug")
			log.InfoContext(ctx, "info", "key", "k1")
			log.WarnContext(ctx, "warn")
			log.ErrorContext(ctx, "error")
			log.Error("between invocations")

			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != len(tt.wantMsgs)+1 {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tt.wantMsgs)+1, buf.String())
			}
			for i, line := range lines {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("line %d is not JSON: %s", i+1, line)
				}
				if rec["batch_id"] != "b1" {
					t.Errorf("line %d: batch_id = %v", i+1, rec["batch_id"])
				}
				if i == len(lines)-1 {
					if _, ok := rec[LogKeyRequestID]; ok || rec["message"] != "between invocations" {
						t.Errorf("after the invocation: %s", line)
					}
					continue
				}
				if rec["message"] != tt.wantMsgs[i] || rec["level"] != tt.wantLevel[i] || rec[LogKeyRequestID] != "req-"+tt.level {
					t.Errorf("line %d = %s, want msg %q level %s request_id req-%s", i+1, line, tt.wantMsgs[i], tt.wantLevel[i], tt.level)
				}
			}
		})
	}
}

// TestLogLinesLevelledAsLambdaReadsThem: Lambda's log-level filtering
// (integration/testbed/lambdalogs: "Log-level filtering", AWS Lambda
// developer guide) gives each line the level the logger wrote, which it
// reads only from a line with "level" and an RFC 3339 "timestamp"; so a
// function's error line is kept at every application log level up to
// ERROR, and its message is under "message" (what the runbook's queries
// name), its time under "timestamp".
func TestLogLinesLevelledAsLambdaReadsThem(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "debug")
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req"})
	log.DebugContext(ctx, "d")
	log.InfoContext(ctx, "i")
	log.WarnContext(ctx, "w")
	log.ErrorContext(ctx, "e")
	want := []string{"DEBUG", "INFO", "WARN", "ERROR"}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		if got := lambdalogs.Level(line); got != want[i] {
			t.Errorf("Lambda files line %s as %s, want %s", line, got, want[i])
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if _, ok := rec["message"]; !ok {
			t.Errorf("line %s has no \"message\"", line)
		}
		for _, at := range lambdalogs.Levels[:rank(want[i])+1] {
			if !lambdalogs.Kept(lambdalogs.Config{LogFormat: "JSON", ApplicationLogLevel: at}, line) {
				t.Errorf("line %s dropped at application log level %s", line, at)
			}
		}
	}
}

func rank(level string) int {
	for i, l := range lambdalogs.Levels {
		if l == level {
			return i
		}
	}
	return -1
}
