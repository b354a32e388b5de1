package bulkrun

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/integration/testbed/lambdalogs"
	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/internal/metric"
)

// TestLogLevelKeepsMetricsAndErrors: at every LogLevel the stack takes,
// Lambda's log-level filtering under each function's LoggingConfig
// (integration/testbed/lambdalogs: "Log-level filtering", AWS Lambda
// developer guide) keeps every embedded-metric-format line — which
// carries no level, so Lambda files it INFO — and every line the
// functions' logger writes at the stack's level or above, so no alarm
// loses its metric and no error its line.
func TestLogLevelKeepsMetricsAndErrors(t *testing.T) {
	var emf bytes.Buffer
	(&metric.Emitter{Stack: "s", W: &emf}).ItemsRecorded("webhook", "failed", 1, "b", 1)
	for _, level := range []string{"debug", "info", "warn", "error"} {
		t.Run(level, func(t *testing.T) {
			var logged bytes.Buffer
			log := handler.NewLogger(&logged, level)
			log.DebugContext(context.Background(), "d")
			log.InfoContext(context.Background(), "i")
			log.WarnContext(context.Background(), "w")
			log.ErrorContext(context.Background(), "e")
			lines := append(strings.Split(strings.TrimSpace(logged.String()), "\n"), strings.TrimSpace(emf.String()))

			props := testProps(TargetEmulator)
			props.LogLevel = level
			app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
			stack, err := NewStack(app, "loglevel", props)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(assertions.Template_FromStack(stack, nil).ToJSON())
			if err != nil {
				t.Fatal(err)
			}
			var tmpl struct {
				Resources map[string]struct {
					Type       string
					Properties struct{ LoggingConfig lambdalogs.Config }
				}
			}
			if err := json.Unmarshal(raw, &tmpl); err != nil {
				t.Fatal(err)
			}
			n := 0
			for id, r := range tmpl.Resources {
				if r.Type != "AWS::Lambda::Function" {
					continue
				}
				n++
				for _, line := range lines {
					if !lambdalogs.Kept(r.Properties.LoggingConfig, line) {
						t.Errorf("LogLevel %s: function %s (LoggingConfig %+v) loses %s", level, id, r.Properties.LoggingConfig, line)
					}
				}
			}
			if n != 4 {
				t.Fatalf("%d functions, want 4", n)
			}
		})
	}
}
