//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/api"
)

// sixQuarantined makes a finished batch whose six items (q0 … q5) were
// quarantined: six pages of one item each.
func sixQuarantined(t *testing.T) string {
	t.Helper()
	return quarantinedBatch(t, []string{"q0", "q1", "q2", "q3", "q4", "q5"}, func(string) bool { return true })
}

// runningBatch makes a running batch whose items wait for a retry (its
// receiver answers 503), forgotten when the test ends.
func runningBatch(t *testing.T) string {
	t.Helper()
	id := newID(t)
	url := env.hook.route(id, func(string, int) int { return 503 })
	items, _ := json.Marshal([]map[string]string{{"k": "r0"}, {"k": "r1"}})
	if _, err := env.api.Submit(context.Background(), api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k",
		Source: api.SourceSpec{Items: items}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })
	return id
}

// The CLI against a stage throttled to 1 request a second (the fault
// proxy applies API Gateway's stage throttle, which the emulator does
// not): `items --all` over six pages lists every item, and `status`,
// `release` and `cancel` succeed — the stage's 429s are retried with
// backoff — while the proxy answered 429 along the way. Guards docs/cli.md
// "Reaching the stack, submitting, watching" (every command retries).
func TestCLIUnderAThrottledStage(t *testing.T) {
	faults := stackFaults(t)
	run := cliRunner(t)
	q, r := sixQuarantined(t), runningBatch(t)
	faults.set(t, faultproxy.Config{API: faultproxy.APIGateway{RateLimit: 1, BurstLimit: 1}})

	out, _, code := run("items", q, "--outcome", "quarantined", "--all", "--limit", "1", "-o", "json")
	var p api.ItemPage
	if err := json.Unmarshal([]byte(out), &p); code != 0 || err != nil || len(p.Items) != 6 || p.NextCursor != "" {
		t.Fatalf("items --all: exit %d, %d items (%v), want the 6 items of 6 pages:\n%s", code, len(p.Items), err, out)
	}
	if out, _, code = run("status", q); code != 0 || !strings.Contains(out, "quarantined 6") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	if out, _, code = run("release", q, "q3"); code != 0 || !strings.Contains(out, "released q3") {
		t.Fatalf("release: exit %d\n%s", code, out)
	}
	if out, _, code = run("cancel", r); code != 0 || !strings.Contains(out, "batch "+r) {
		t.Fatalf("cancel: exit %d\n%s", code, out)
	}
	st, err := faults.status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Gateway[faultproxy.GatewayThrottled] == 0 {
		t.Fatalf("the stage throttled nothing (%+v): the test proves nothing", st.Gateway)
	}
	t.Logf("the stage answered 429 %d times", st.Gateway[faultproxy.GatewayThrottled])
}

// The CLI on a machine whose clock is 6 minutes off AWS's, either way
// (the fault proxy's clock for execute-api calls runs 6 minutes ahead of,
// or behind, the machine's, and it refuses a signature more than 5
// minutes from it as API Gateway does): every command works, the first
// refused call of each process corrected from the refusal's Date. Guards
// docs/cli.md "Reaching the stack, submitting, watching" (the clock).
func TestCLIWithTheClockOff(t *testing.T) {
	faults := stackFaults(t)
	run := cliRunner(t)
	q := sixQuarantined(t)
	src := filepath.Join(t.TempDir(), "skew.jsonl")
	for i, offset := range []time.Duration{6 * time.Minute, -6 * time.Minute} {
		r := runningBatch(t)
		faults.set(t, faultproxy.Config{API: faultproxy.APIGateway{ClockOffset: faultproxy.Seconds(offset)}})
		released := fmt.Sprintf("q%d", i)
		if err := os.WriteFile(src, []byte(fmt.Sprintf("{\"k\":\"a\",\"offset\":%q}\n", offset)), 0o644); err != nil {
			t.Fatal(err)
		}
		url := env.hook.route(q+offset.String(), nil)
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"status", q}, "quarantined 6"},
			{[]string{"items", q, "--outcome", "quarantined", "--all", "--limit", "2"}, "q5"},
			{[]string{"list", "--limit", "1"}, "BATCH"},
			{[]string{"report", q}, "census"},
			{[]string{"release", q, released}, "released " + released},
			{[]string{"pause", r}, "paused"},
			{[]string{"unpause", r}, "batch " + r},
			{[]string{"cancel", r}, "batch " + r},
			{[]string{"submit", src, "--pipeline", "webhook", "--key-field", "k", "--options", fmt.Sprintf(`{"url":%q}`, url), "--watch"}, "succeeded 1"},
		} {
			out, stderr, code := run(tt.args...)
			if code != 0 || !strings.Contains(out, tt.want) {
				t.Errorf("clock %v off, %s: exit %d, want %q in\n%s%s", -offset, strings.Join(tt.args, " "), code, tt.want, out, stderr)
			}
			if tt.args[0] == "submit" && strings.HasPrefix(out, "batch ") {
				id := strings.Fields(out)[1]
				t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })
			}
		}
	}
	st, err := faults.status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Gateway[faultproxy.GatewaySignature] == 0 {
		t.Fatalf("no signature was refused for its time (%+v): the test proves nothing", st.Gateway)
	}
}
