//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/integration/testbed/lambdalogs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
)

// functionLogs returns the lines of the log group of the function behind
// output key that hold pattern (a CloudWatch Logs filter pattern) and
// that Lambda would have sent to CloudWatch Logs: the emulator writes
// every line, so the function's LoggingConfig is applied here as Lambda's
// log-level filtering applies it (integration/testbed/lambdalogs). It
// reads until want says the lines are all there or 60 s pass (the logs
// arrive after the invocation).
func functionLogs(t *testing.T, outputKey, pattern string, want func([]string) bool) []string {
	t.Helper()
	fn, err := env.stack.Get(outputKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg, err := env.lambda.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: &fn})
	if err != nil {
		t.Fatalf("the logging configuration of %s: %v", fn, err)
	}
	var lc lambdalogs.Config
	if c := cfg.LoggingConfig; c != nil {
		lc = lambdalogs.Config{LogFormat: string(c.LogFormat), ApplicationLogLevel: string(c.ApplicationLogLevel), SystemLogLevel: string(c.SystemLogLevel)}
	}
	logs := cloudwatchlogs.NewFromConfig(env.aws)
	for deadline := time.Now().Add(60 * time.Second); ; {
		var lines []string
		dropped := 0
		p := cloudwatchlogs.NewFilterLogEventsPaginator(logs, &cloudwatchlogs.FilterLogEventsInput{
			LogGroupName: aws.String("/aws/lambda/" + fn), FilterPattern: aws.String(pattern),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatalf("read the logs of %s: %v", fn, err)
			}
			for _, ev := range page.Events {
				if line := aws.ToString(ev.Message); lambdalogs.Kept(lc, line) {
					lines = append(lines, line)
				} else {
					dropped++
				}
			}
		}
		if want(lines) || time.Now().After(deadline) {
			if dropped > 0 {
				t.Logf("%s (LoggingConfig %+v): %d lines holding %s dropped as Lambda drops them", fn, lc, dropped, pattern)
			}
			return lines
		}
		time.Sleep(time.Second)
	}
}

// emfLines returns the embedded-metric-format lines of batch id that
// Lambda keeps (functionLogs) in the log group of the function behind
// output key, read until want says they are all there or 60 s pass.
func emfLines(t *testing.T, outputKey, id string, want func([]map[string]any) bool) []map[string]any {
	t.Helper()
	docs := func(lines []string) []map[string]any {
		var out []map[string]any
		for _, line := range lines {
			var doc map[string]any
			if json.Unmarshal([]byte(line), &doc) == nil && doc["_aws"] != nil && doc["batch_id"] == id {
				out = append(out, doc)
			}
		}
		return out
	}
	return docs(functionLogs(t, outputKey, `"`+id+`"`, func(lines []string) bool { return want(docs(lines)) }))
}

// sums adds up metric name over lines, by the value of dimension dim ("" for all).
func sums(lines []map[string]any, name, dim string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range lines {
		d, _ := l[dim].(string)
		switch v := l[name].(type) {
		case float64:
			out[d] += v
		case []any: // a buffered emitter's values (metric.Emitter.Buffered)
			for _, x := range v {
				f, _ := x.(float64)
				out[d] += f
			}
		}
	}
	return out
}

// TestMetricsLinesInFunctionLogs guards the metrics product line end to
// end: a deployed stack's submit, item and finalize functions write EMF lines for a
// batch (outcomes, a retry, durations, fan-out, finalize lag) into their
// logs, with the batch id as a property.
func TestMetricsLinesInFunctionLogs(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	bad, flaky := api.PositionalKey(2), api.PositionalKey(3)
	url := env.hook.routeOwn(t, id, func(key string, attempt int) int {
		switch {
		case key == bad:
			return 422
		case key == flaky && attempt == 1:
			return 503
		}
		return 200
	})
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(5))); err != nil {
		t.Fatal(err)
	}
	if v := wait(t, id); v.Census.Succeeded != 4 || v.Census.Failed != 1 {
		t.Fatalf("batch %+v", v.Census)
	}
	item := emfLines(t, config.OutputItemFunction, id, func(l []map[string]any) bool {
		return sums(l, "Items", "")[""] >= 5
	})
	if got := sums(item, "Items", "Outcome"); got["succeeded"] != 4 || got["failed"] != 1 {
		t.Errorf("Items by outcome = %v, want succeeded 4, failed 1", got)
	}
	if got := sums(item, "Retries", "Pipeline"); got["webhook"] != 1 {
		t.Errorf("Retries = %v, want 1 for webhook", got)
	}
	if got := len(sums(item, "ItemDurationMs", "Pipeline")); got != 1 {
		t.Errorf("ItemDurationMs lines by pipeline: %d, want webhook only", got)
	}
	// A batch of 5 messages gets them from submit itself
	// (submit.DefaultFanOutHere): submit counts them, the item function
	// sends none.
	sub := emfLines(t, config.OutputSubmitFunction, id, func(l []map[string]any) bool { return sums(l, "FannedOut", "")[""] >= 5 })
	if got, in := sums(sub, "FannedOut", "")[""], sums(item, "FannedOut", "")[""]; got != 5 || in != 0 {
		t.Errorf("FannedOut = %v in submit's logs, %v in the item function's, want 5 and 0", got, in)
	}
	stack := os.Getenv("BULKRUN_STACK")
	if stack == "" {
		stack = config.DefaultStackName
	}
	for _, l := range item {
		if l["Stack"] != stack {
			t.Errorf("line %v: Stack dimension is not the stack's name %q", l, stack)
			break
		}
	}
	fin := emfLines(t, config.OutputFinalizeFunction, id, func(l []map[string]any) bool { return len(sums(l, "FinalizeLagMs", "")) > 0 })
	if len(sums(fin, "FinalizeLagMs", "")) == 0 {
		t.Error("no FinalizeLagMs line for the batch in the finalize function's logs")
	}
}
