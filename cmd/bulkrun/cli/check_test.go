package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Guards docs/cli.md "Checking a file first": submit --check lists a
// file's short row, Latin-1 byte and duplicate key in one pass, each with
// its line and key, says the batch would be refused (exit 1) and reaches
// no stack; with --bad-rows fail the same file would run, the two bad rows
// failed and the duplicate dropped; a --schema types and checks the
// columns.
func TestSubmitCheckListsEveryProblem(t *testing.T) {
	var b strings.Builder
	b.WriteString("id,name,qty\n")
	for i := range 20000 {
		switch i {
		case 100:
			b.WriteString("k-00100,short\n")
		case 7000:
			b.WriteString("k-07000,caf\xe9,1\n")
		case 19999:
			b.WriteString("k-00042,again,1\n")
		default:
			fmt.Fprintf(&b, "k-%05d,name,%d\n", i, 1+i%3)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "orders.csv")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schema, []byte(`{"properties": {"qty": {"type": "integer", "maximum": 2}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int64, error) {
		c, requests := fakeBatchAPI(t, wire.BatchView{Batch: api.Batch{ID: "x"}}, api.Report{})
		var out, errw bytes.Buffer
		a := &app{out: &out, errw: &errw, output: "text", api: c, loaded: true}
		cmd := a.submitCmd()
		cmd.SetArgs(append([]string{file, "--pipeline", "lambda", "--key-field", "id", "--check"}, args...))
		err := cmd.Execute()
		return out.String(), requests.Load(), err
	}

	out, reqs, err := run()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitFailure || !strings.Contains(err.Error(), "would be refused") || reqs != 0 {
		t.Fatalf("--check: %v (%d requests), want exit 1, would be refused, no request", err, reqs)
	}
	for _, want := range []string{
		`line 102 (key "k-00100"): 2 fields, the header has 3`,
		`line 7002 (key "k-07000"): column "name"`,
		`line 20001 (key "k-00042"): duplicate item key: first seen at line 44`,
		"20000 rows, 19997 would run; 2 invalid, 1 duplicate key",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--check output lacks %q:\n%s", want, out)
		}
	}

	out, reqs, err = run("--bad-rows", "fail")
	if err != nil || !strings.Contains(out, "20000 rows, 19999 would run; 2 invalid, 1 duplicate key") || !strings.Contains(out, "would run") || reqs != 0 {
		t.Errorf("--check --bad-rows fail: %v (%d requests)\n%s", err, reqs, out)
	}

	out, _, err = run("--bad-rows", "fail", "--schema", schema)
	if !errors.As(err, &ee) || !strings.Contains(out, "/qty") || !strings.Contains(err.Error(), "max_invalid_percent 10") {
		t.Errorf("--schema with qty ≤ 2 (a third of the rows over): %v, want refused over 10 %% naming /qty\n%.400s", err, out)
	}

	if _, _, err := run("--bad-rows", "skip"); !errors.As(err, &ee) || ee.Code != ExitUsage {
		t.Errorf("--bad-rows skip: %v, want a usage error", err)
	}
	// A flag the submit would refuse is refused by --check too (a new user
	// read "would run" for --rate abc, which the submit refuses).
	for _, bad := range [][]string{{"--rate", "abc"}, {"--rate", "5@"}, {"--retry", "backoff_rate=0"}} {
		if out, reqs, err := run(append([]string{"--bad-rows", "fail"}, bad...)...); !errors.As(err, &ee) || ee.Code != ExitUsage || reqs != 0 || strings.Contains(out, "would run") {
			t.Errorf("--check %v: %v (%d requests)\n%s; want a usage error naming the flag", bad, err, reqs, out)
		}
	}
}
