//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/handler"
)

// The bulkrun CLI against the deployed stack: submit a local file and
// watch it (JSON output, exit code 3 when items failed), list the failed
// items, forget the batch.
func TestCLI(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	run := func(args ...string) ([]byte, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
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
		t.Logf("bulkrun %v → %d\n%s", args, code, stderr.String())
		return stdout.Bytes(), code
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
	if code != 3 || v.Status != batch.StatusCompleted || v.Census.Succeeded != 2 || v.Census.Failed != 1 {
		t.Fatalf("exit %d, view %+v", code, v.Census)
	}
	out, code = run("items", id, "--outcome", "failed", "-o", "json")
	var p batch.ItemPage
	if err := json.Unmarshal(out, &p); err != nil || code != 0 || len(p.Items) != 1 || p.Items[0].Key != "k2" {
		t.Fatalf("items: exit %d, %s (%v)", code, out, err)
	}
	if _, code = run("status"); code != 2 {
		t.Fatalf("status without an id: exit %d, want 2", code)
	}
	if _, code = run("status", newID(t)); code != 1 {
		t.Fatalf("status of an unknown batch: exit %d, want 1", code)
	}
	if _, code = run("forget", id); code != 0 {
		t.Fatalf("forget: exit %d", code)
	}
}
