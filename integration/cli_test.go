//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
)

// The bulkrun CLI against the deployed stack: submit a local file and
// watch it (JSON output, exit code 3 when items failed), list the failed
// items, read its results lines (bulkrun results, guarding docs/cli.md
// "Results lines"), forget the batch.
func TestCLI(t *testing.T) {
	runCLI := cliRunner(t)
	run := func(args ...string) ([]byte, int) {
		t.Helper()
		out, _, code := runCLI(args...)
		return []byte(out), code
	}
	id := newID(t)
	url := env.hook.route(id, func(key string, _ int) int {
		if key == "k2" {
			return 410
		}
		return 200
	})
	src := filepath.Join(t.TempDir(), "orders.jsonl")
	if err := os.WriteFile(src, []byte("{\"k\":\"k1\"}\n{\"k\":\"k2\"}\n{\"k\":\"k3\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run("submit", src, "--pipeline", "webhook", "--id", id, "--key-field", "k",
		"--options", fmt.Sprintf(`{"url":%q}`, url), "--watch", "--output", "json")
	var v handler.BatchView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("submit --watch -o json printed %q: %v", out, err)
	}
	if code != 3 || v.Status != api.StatusCompleted || v.Census.Succeeded != 2 || v.Census.Failed != 1 {
		t.Fatalf("exit %d, view %+v", code, v.Census)
	}
	out, code = run("items", id, "--outcome", "failed", "-o", "json")
	var p api.ItemPage
	if err := json.Unmarshal(out, &p); err != nil || code != 0 || len(p.Items) != 1 || p.Items[0].Key != "k2" {
		t.Fatalf("items: exit %d, %s (%v)", code, out, err)
	}
	// bulkrun results: the run's lines, by outcome, to stdout or a file;
	// a run without a report and an outcome without results are refused.
	out, code = run("results", id, "--outcome", "failed")
	var line api.ResultLine
	if err := json.Unmarshal(out, &line); code != 0 || err != nil || line.Key != "k2" || line.Outcome != api.OutcomeFailed || line.Reason != api.ReasonPermanent || line.Attempts != 1 || line.Run != 1 || !bytes.Contains(out, []byte(`"run":1`)) {
		t.Fatalf("results --outcome failed: exit %d, %s (%v)", code, out, err)
	}
	all, code := run("results", id)
	var keys []string
	if err := api.ReadResults(bytes.NewReader(all), func(l api.ResultLine) error { keys = append(keys, l.Key); return nil }); err != nil || code != 0 || len(keys) != 3 {
		t.Fatalf("results: exit %d, keys %v (%v)", code, keys, err)
	}
	file := filepath.Join(t.TempDir(), "results.jsonl")
	if _, code = run("results", id, "--run", "1", "--file", file); code != 0 {
		t.Fatalf("results --run 1 --file: exit %d", code)
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, all) {
		t.Fatalf("results --file wrote %q (%v), want what stdout got: %q", got, err, all)
	}
	if _, code = run("results", id, "--run", "2"); code != 1 {
		t.Fatalf("results --run 2 of a batch with one run: exit %d, want 1", code)
	}
	if _, code = run("results", id, "--outcome", "in_flight"); code != 2 {
		t.Fatalf("results --outcome in_flight: exit %d, want 2", code)
	}
	if _, code = run("status"); code != 2 {
		t.Fatalf("status without an id: exit %d, want 2", code)
	}
	if _, code = run("status", newID(t)); code != 1 {
		t.Fatalf("status of an unknown batch: exit %d, want 1", code)
	}
	if _, code = run("forget", id, "--yes"); code != 0 {
		t.Fatalf("forget: exit %d", code)
	}
}

// TestCLISameCommandTwiceIsOneBatch guards the product line "running the
// same submit of a local file again answers the batch it started" (the
// CLI's default id derives from the uploaded content and the settings,
// cli.RequestBatchID): a user who reruns a command that failed midway, or
// by mistake, gets the same batch and every item runs once. The file's
// content differs per test run (the route name is in it), so the batch is
// new the first time.
func TestCLISameCommandTwiceIsOneBatch(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	name := newID(t)
	url := env.hook.route(name, func(string, int) int { return 200 })
	src := filepath.Join(t.TempDir(), "orders.jsonl")
	body := ""
	for i := range 5 {
		body += fmt.Sprintf("{\"k\":\"k%d\",\"run\":%q}\n", i, name)
	}
	if err := os.WriteFile(src, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	submit := func() handler.BatchView {
		t.Helper()
		cmd := exec.Command(bin, "submit", src, "--pipeline", "webhook", "--key-field", "k",
			"--options", fmt.Sprintf(`{"url":%q}`, url), "--watch", "--output", "json")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("submit: %v\n%s", err, stderr.String())
		}
		var v handler.BatchView
		if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
			t.Fatalf("submit printed %q: %v", stdout.String(), err)
		}
		return v
	}
	first, second := submit(), submit()
	if first.ID != second.ID || !strings.HasPrefix(first.ID, "cli-") {
		t.Fatalf("batch ids %q and %q: want one id derived from the request", first.ID, second.ID)
	}
	if first.Census.Succeeded != 5 || second.Census.Succeeded != 5 {
		t.Errorf("census %+v then %+v, want 5 succeeded", first.Census, second.Census)
	}
	for k, n := range env.hook.counts(name) {
		if n != 1 {
			t.Errorf("%s: %d calls, want 1", k, n)
		}
	}
	if n := len(env.hook.counts(name)); n != 5 {
		t.Errorf("%d items called, want 5", n)
	}
	if err := env.api.Forget(context.Background(), first.ID); err != nil {
		t.Errorf("forget: %v", err)
	}
}

// A submit without --watch waits (at most cli.SubmitWait) until the
// source is frozen or refused: a refused source exits 1 naming the line,
// key or field (a duplicate key; a wrong --key-field or an empty file is
// refused before the upload, by cli.CheckLocalSource); the
// refused batch is listed as refused and does not hold its id, so the
// corrected file under the same --id is accepted and runs.
func TestCLISubmitReportsRefusal(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	id := newID(t)
	url := env.hook.route(id, func(string, int) int { return 200 })
	submit := func(body, keyField string) (string, string, int) {
		t.Helper()
		src := filepath.Join(t.TempDir(), "orders.jsonl")
		if err := os.WriteFile(src, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "submit", src, "--pipeline", "webhook", "--id", id, "--key-field", keyField, "--options", fmt.Sprintf(`{"url":%q}`, url))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("submit → %d\n%s", code, stderr.String())
		return stdout.String(), stderr.String(), code
	}
	for _, tc := range []struct{ name, body, keyField, says, refused string }{
		{"duplicate keys", "{\"k\":\"a\"}\n{\"k\":\"b\"}\n{\"k\":\"a\"}\n", "k", `line 3 (key "a")`, "was refused"},
		// A local file whose first item lacks the key field is refused
		// before it is uploaded (cli.CheckLocalSource).
		{"wrong key field", "{\"k\":\"a\"}\n", "order_id", "order_id", "nothing was uploaded"},
	} {
		_, stderr, code := submit(tc.body, tc.keyField)
		if code != 1 || !strings.Contains(stderr, tc.refused) || !strings.Contains(stderr, tc.says) {
			t.Fatalf("%s: exit %d, stderr %q: want exit 1 naming %q (%s)", tc.name, code, stderr, tc.says, tc.refused)
		}
		v, err := env.api.Status(context.Background(), id)
		if err != nil || v.Status != api.StatusRefused {
			t.Fatalf("%s: status %s %v, want refused", tc.name, v.Status, err)
		}
	}
	stdout, stderr, code := submit("{\"k\":\"a\"}\n{\"k\":\"b\"}\n", "k")
	if code != 0 || strings.TrimSpace(stdout) != id || !strings.Contains(stderr, "2 items, run 1") {
		t.Fatalf("corrected file under the refused id: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if v := wait(t, id); v.Census.Succeeded != 2 {
		t.Fatalf("corrected batch: %+v", v.Census)
	}
}

// TestCLIWatchCtrlC guards docs/cli.md "Reaching the stack, submitting,
// watching" (Ctrl-C): SIGINT to a `bulkrun watch` of a running batch stops
// the command with exit 130 and a message that the batch keeps running
// and how to follow it again; the batch's run goes on and finishes, every
// item once.
func TestCLIWatchCtrlC(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	id := newID(t)
	release := make(chan struct{})
	url := env.hook.route(id, func(string, int) int { <-release; return 200 })
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k",
		Source: api.SourceSpec{Items: json.RawMessage(`[{"k":"a"},{"k":"b"},{"k":"c"}]`)}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q,"timeout_ms":60000}`, url))}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "watch", id)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the items are being run (their webhook calls wait).
	deadline := time.Now().Add(time.Minute)
	for len(env.hook.counts(id)) < 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the watch has polled
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("watch after Ctrl-C: %v, want exit 130; stderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{"stopped watching batch " + id + "; the batch keeps running", "bulkrun watch " + id} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if v, err := env.api.Status(ctx, id); err != nil || v.Status != api.StatusRunning || v.Stop != "" {
		t.Fatalf("after Ctrl-C the batch is %+v (%v), want it still running", v.Batch, err)
	}
	close(release)
	v := wait(t, id)
	if v.Status != api.StatusCompleted || v.Census.Succeeded != 3 {
		t.Fatalf("the batch after the watch was interrupted: %s %+v", v.Status, v.Census)
	}
	if calls := env.hook.counts(id); calls["a"] != 1 || calls["b"] != 1 || calls["c"] != 1 {
		t.Errorf("calls %v, want one per item", calls)
	}
	_ = env.api.Forget(ctx, id)
}

// TestCLIUpload guards `bulkrun upload` (docs/cli.md "Uploading a file"):
// it checks the file, puts it under incoming/ with its options as object
// metadata (JSON options included) and names the batch the upload starts
// — the very id submit derives from the name and the items; the same file
// under the same name again is that batch, nothing runs again; under
// another name it is refused as a repeated upload (exit 1, naming the
// first batch) and runs with --rerun; a file submit would refuse is
// refused before anything is uploaded.
func TestCLIUpload(t *testing.T) {
	ctx := context.Background()
	run := cliRunner(t)
	name := newID(t)
	hook := env.hook.route(name, nil)
	file := filepath.Join(t.TempDir(), "export.csv")
	if err := os.WriteFile(file, []byte("id,text\nr1,a\nr2,b\nr3,c\nr4,d\nr5,e\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf(`{ "url": %q, "timeout_ms": 5000 }`, hook)
	key := "incoming/" + name + " export.csv"
	stdout, _, code := run("upload", file, "--pipeline", "webhook", "--key-field", "id", "--options", opts, "--name", name+" export.csv", "--watch", "-o", "json")
	var v handler.BatchView
	if err := json.Unmarshal([]byte(stdout[strings.LastIndex(stdout, "\n{")+1:]), &v); err != nil && json.Unmarshal([]byte(stdout), &v) != nil {
		t.Fatalf("upload --watch -o json printed %q", stdout)
	}
	if code != 0 || v.ID != uploadID(t, key) || v.Status != api.StatusCompleted || v.Census.Succeeded != 5 || v.Source != "s3://"+env.bucket+"/"+key {
		t.Fatalf("upload: exit %d, batch %s %s %+v (want %s)", code, v.ID, v.Status, v.Census, uploadID(t, key))
	}
	head, err := env.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &env.bucket, Key: &key})
	if err != nil || head.Metadata["pipeline-options"] != fmt.Sprintf(`{"url":%q,"timeout_ms":5000}`, hook) || head.Metadata["key-field"] != "id" {
		t.Fatalf("the object's metadata: %v %v", head.Metadata, err)
	}
	stdout, stderr, code := run("upload", file, "--pipeline", "webhook", "--key-field", "id", "--options", opts, "--name", name+" export.csv")
	if code != 0 || strings.TrimSpace(stdout) != v.ID || !strings.Contains(stderr, "nothing was uploaded") || !strings.Contains(stderr, "nothing runs again") {
		t.Fatalf("the same upload again: exit %d, %q, %q", code, stdout, stderr)
	}
	_, stderr, code = run("upload", file, "--pipeline", "webhook", "--key-field", "id", "--options", opts, "--name", name+" export (1).csv")
	if code != 1 || !strings.Contains(stderr, "repeated_upload") || !strings.Contains(stderr, "batch "+v.ID) {
		t.Fatalf("a renamed copy: exit %d, %q, want exit 1, repeated_upload naming %s", code, stderr, v.ID)
	}
	stdout, _, code = run("upload", file, "--pipeline", "webhook", "--key-field", "id", "--options", opts, "--name", name+" export (1).csv", "--rerun", "--watch", "-o", "json")
	var again handler.BatchView
	if err := json.Unmarshal([]byte(stdout[strings.LastIndex(stdout, "\n{")+1:]), &again); err != nil {
		t.Fatalf("--rerun printed %q", stdout)
	}
	if code != 0 || again.ID == v.ID || again.Census.Succeeded != 5 {
		t.Fatalf("--rerun: exit %d, %s %+v", code, again.ID, again.Census)
	}
	if calls := env.hook.counts(name); calls["r1"] != 2 || calls["r5"] != 2 {
		t.Errorf("calls %v, want each item twice (the first upload and the rerun)", calls)
	}
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("order,text\nr1,a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = run("upload", bad, "--pipeline", "webhook", "--key-field", "id", "--options", opts, "--name", name+" bad.csv")
	if code != 1 || !strings.Contains(stderr, `"id" is not a column`) || !strings.Contains(stderr, "nothing was uploaded") {
		t.Fatalf("a CSV without its key column: exit %d, %q", code, stderr)
	}
	badKey := "incoming/" + name + " bad.csv"
	if _, err := env.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &env.bucket, Key: &badKey}); err == nil {
		t.Fatal("the refused file was uploaded")
	}
	for _, id := range []string{v.ID, again.ID} {
		_ = env.api.Forget(ctx, id)
	}
}

// TestLiveCostFromCounters guards the live cost (docs/console.md, docs/cli.md
// "Reading a batch"): while a run goes, GET /batches/{id} answers the cost
// of the items that ended so far from the run's counters. Twelve items,
// one per message, one of which ("k00") waits in its webhook call: an
// invocation takes at most ten messages, so another one ends its items
// and counts them while k00 waits; their cost and spent are one call per
// item counted. The finished run's report has all twelve.
func TestLiveCostFromCounters(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	release := make(chan struct{})
	url := env.hook.route(id, func(key string, _ int) int {
		if key == "k00" {
			<-release
		}
		return 200
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	var items []string
	for i := range 12 {
		items = append(items, fmt.Sprintf(`{"k":"k%02d"}`, i))
	}
	// One item per message: a pack's items end together, with its last.
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(items, ",") + "]")}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q,"timeout_ms":60000}`, url))}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	var v handler.BatchView
	for {
		var err error
		v, err = env.api.Status(ctx, id)
		if err == nil && v.Census != nil && v.Census.Succeeded > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no item ended while k00 waits: %+v %v", v.Census, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	n := fmt.Sprint(v.Census.Succeeded)
	if v.Status != api.StatusRunning || v.CensusSource != "counters" || v.Census.Cost.Text("calls") != n || v.Census.RunSpent.Text("calls") != n {
		t.Fatalf("live view: %s from %s, %s succeeded, cost %v spent %v; want running, counters, calls=%s", v.Status, v.CensusSource, n, v.Census.Cost, v.Census.RunSpent, n)
	}
	close(release)
	if done := wait(t, id); done.Census.Cost.Text("calls") != "12" {
		t.Fatalf("the report's cost %v, want calls=12", done.Census.Cost)
	}
	_ = env.api.Forget(ctx, id)
}

// cliRunner returns a runner of the bulkrun CLI built from this tree
// (cliBinary) against the deployed stack (the test's environment): its
// stdout, stderr and exit code, with the command, its exit code and its
// stderr logged when it wrote any or failed.
func cliRunner(t *testing.T) func(args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return cliRunnerEnv(t)
}

// cliRunnerEnv is cliRunner with vars (NAME=value) added to the CLI's
// environment.
func cliRunnerEnv(t *testing.T, vars ...string) func(args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := cliBinary(t)
	return func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		if len(vars) > 0 {
			cmd.Env = append(os.Environ(), vars...)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if stderr.Len() > 0 || code != 0 {
			t.Logf("bulkrun %s → %d, stderr: %s", strings.Join(args, " "), code, stderr.String())
		}
		return stdout.String(), stderr.String(), code
	}
}

var (
	cliOnce sync.Once
	cliBin  string
	cliErr  error
)

// cliBinary builds the bulkrun CLI from this tree once per test process
// and returns its path.
func cliBinary(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bulkrun-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliBin = filepath.Join(dir, "bulkrun")
		if out, err := exec.Command("go", "build", "-o", cliBin, "../cmd/bulkrun").CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliBin
}
