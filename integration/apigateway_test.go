//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
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
	url := env.hook.routeOwn(t, id, func(string, int) int { return 503 })
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

// largeItems is a JSON array of n items {"k": …, "text": …} whose texts
// are full of quotes, about size bytes in all: its Lambda event, with
// every quote escaped, is a third larger than the body.
func largeItems(n, size int) []byte {
	text := strings.Repeat(`say "a" `, size/n/10) // 10 bytes each in JSON
	items := make([]map[string]string, n)
	for i := range items {
		items[i] = map[string]string{"k": fmt.Sprintf("k%03d", i), "text": text}
	}
	b, _ := json.Marshal(items)
	return b
}

// signedPost sends body to the stack's POST /batches at base (the
// emulator's URL of the API), signed with the test's credentials, and
// returns the answer's status and body.
func signedPost(t *testing.T, base string, body []byte) (int, string) {
	t.Helper()
	ctx := context.Background()
	stage := env.stack[config.OutputAPIStage]
	if stage == "" {
		stage = config.DefaultAPIStage
	}
	u := strings.TrimRight(base, "/") + "/restapis/" + env.stack[config.OutputAPIID] + "/" + stage + "/_user_request_/batches"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	creds, err := env.aws.Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", env.aws.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// A submit of 5.95 MB of inline items, whose Lambda event (every quote
// escaped) is over Lambda's 6 MB invocation payload limit. Sent as it is
// it never runs: through the fault proxy API Gateway's 413 "Request Too
// Long" (as on AWS), and straight to the emulator — which would have
// answered 201 — the submit function's own 413 naming the limit.
// shared/client does not send it: Submit puts the items in the stack's
// bucket under uploads/ and submits that object, and the batch runs every
// item once. Guards docs/api.md, "Limits".
func TestLargeInlineSubmit(t *testing.T) {
	stackFaults(t) // the proxy's rules; serial: the body is large
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, nil)
	items := largeItems(60, 5_950_000)
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", Source: api.SourceSpec{Items: items},
		Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url))}
	body, _ := json.Marshal(req)
	if len(body) > 6_000_000 || wire.BodyEventBytes(body) <= wire.MaxEventBytes {
		t.Fatalf("a body of %d bytes, %d in an event: want under 6 MB, its event over the limit", len(body), wire.BodyEventBytes(body))
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })

	status, answer := signedPost(t, os.Getenv("AWS_ENDPOINT_URL"), body)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(answer, "Request Too Long") {
		t.Fatalf("through the proxy: %d %s; want API Gateway's 413 Request Too Long", status, answer)
	}
	if inner := emulatorURL(); inner != "" {
		status, answer = signedPost(t, inner, body)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(answer, "6 MB invocation payload limit") {
			t.Fatalf("straight to the emulator: %d %.300s; want the function's 413 naming the limit", status, answer)
		}
	}

	v, err := env.api.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != api.StatusSubmitting || !strings.Contains(v.Source, "/uploads/") {
		t.Fatalf("submit: %s from %q, want an object under uploads/ read in the background", v.Status, v.Source)
	}
	v = wait(t, id)
	if v.Status != api.StatusCompleted || v.Census.Succeeded != 60 {
		t.Fatalf("%s %+v, want 60 succeeded", v.Status, v.Census)
	}
	for k, n := range env.hook.counts(id) {
		if n != 1 {
			t.Errorf("%s: %d calls, want 1", k, n)
		}
	}
}

// emulatorURL is the URL of the emulator behind the fault proxy
// (localstack/README.md: BULKRUN_EMULATOR_INNER_PORT, by default the
// proxy's port + 10000), or "" when it does not answer.
func emulatorURL() string {
	u, err := neturl.Parse(os.Getenv("AWS_ENDPOINT_URL"))
	if err != nil {
		return ""
	}
	port := os.Getenv("BULKRUN_EMULATOR_INNER_PORT")
	if port == "" {
		p, err := strconv.Atoi(u.Port())
		if err != nil {
			return ""
		}
		port = strconv.Itoa(p + 10000)
	}
	inner := u.Scheme + "://" + u.Hostname() + ":" + port
	resp, err := http.Get(inner + "/_ministack/health")
	if err != nil {
		return ""
	}
	resp.Body.Close()
	return inner
}
