package cli

import (
	"bytes"
	"errors"
	"testing"
)

// TestItemsInputsFlags guards the flags' combinations: --file without
// --inputs, and --inputs with --cursor or --limit, are usage errors
// before anything is read.
func TestItemsInputsFlags(t *testing.T) {
	for _, args := range [][]string{
		{"b", "--file", "x.jsonl"},
		{"b", "--inputs", "--cursor", "abc"},
		{"b", "--inputs", "--limit", "5"},
	} {
		var out, errw bytes.Buffer
		a := &app{out: &out, errw: &errw, output: "text"}
		cmd := a.itemsCmd()
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&errw)
		err := cmd.Execute()
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitUsage {
			t.Errorf("items %q: %v, want a usage error", args, err)
		}
	}
}
