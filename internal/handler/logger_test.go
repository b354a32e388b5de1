package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
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
					if _, ok := rec[LogKeyRequestID]; ok || rec["msg"] != "between invocations" {
						t.Errorf("after the invocation: %s", line)
					}
					continue
				}
				if rec["msg"] != tt.wantMsgs[i] || rec["level"] != tt.wantLevel[i] || rec[LogKeyRequestID] != "req-"+tt.level {
					t.Errorf("line %d = %s, want msg %q level %s request_id req-%s", i+1, line, tt.wantMsgs[i], tt.wantLevel[i], tt.level)
				}
			}
		})
	}
}
