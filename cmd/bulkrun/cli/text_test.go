package cli

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// hostile are texts a pipeline or a source file can put in a key, an
// error, an output or a cost name: a window-title change, a screen clear,
// a red forged verdict, a newline that forges a row, a tab that forges a
// column, a C1 CSI, a bidi override and a byte that is not UTF-8.
var hostile = []string{
	"\x1b]0;pwned\x07",
	"\x1b[2J\x1b[H",
	"\x1b[31mFORGED: all items succeeded\x1b[0m",
	"k1\nok\tsucceeded\t1\t",
	"a\rb",
	"\u009b31m",
	"\u202egnp.exe",
	"bad\xffbyte",
	`back\slash`,
}

// inertLines checks that out holds exactly wantLines lines and no byte a
// terminal acts on: no control character but the line ends, no C1, no
// bidi control, valid UTF-8.
func inertLines(t *testing.T, what, out string, wantLines int) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not UTF-8: %q", what, out)
	}
	for _, r := range strings.TrimSuffix(out, "\n") {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r > 0x7f && describe.Escape(string(r)) != string(r) {
			t.Errorf("%s: raw %U in output %q", what, r, out)
			break
		}
	}
	if n := strings.Count(out, "\n"); n != wantLines {
		t.Errorf("%s: %d lines, want %d:\n%s", what, n, wantLines, out)
	}
}

// Terminal escapes from item texts: `bulkrun items`, `status`, `report`
// and `list` in text mode print every key, error, output, cost name,
// refusal and stop detail escaped, one item per line, whatever they hold.
func TestTextOutputEscapesItemTexts(t *testing.T) {
	var items []api.Item
	cost := pipeline.CostSum{}
	for i, h := range hostile {
		items = append(items, api.Item{Key: h, Outcome: api.OutcomeFailed, RunAttempts: i, Error: h})
		cost[h] = decimal.NewFromInt(1)
	}
	var out bytes.Buffer
	a := &app{out: &out, errw: &out, output: "text"}
	a.printItems(items)
	inertLines(t, "items", out.String(), len(items)+1)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if f := strings.Fields(lines[0]); !slices.Equal(f, []string{"KEY", "OUTCOME", "REASON", "RUN", "REVISION", "ATTEMPTS", "ERROR"}) {
		t.Errorf("items: header %q", lines[0])
	}
	for i, line := range lines[1:] {
		if !strings.HasPrefix(line, describe.Escape(items[i].Key)) || strings.Contains(line, "\t") {
			t.Errorf("items: line %q does not start with its escaped key %q, or holds a raw tab", line, describe.Escape(items[i].Key))
		}
	}

	out.Reset()
	h := strings.Join(hostile, "")
	a.show(wire.BatchView{
		Batch:  api.Batch{ID: "b1", Status: api.StatusRunning, Plan: api.Plan{Pipeline: h}, Stop: api.StatusThresholdExceeded, StopDetail: h, Refusal: &api.SubmitRefusal{Code: h, Message: h}},
		Census: &api.Census{Cost: cost}, Report: h,
	})
	inertLines(t, "status", out.String(), 8)

	out.Reset()
	a.printReport(api.Report{BatchID: "b1", Status: api.StatusCompleted, Census: api.Census{Cost: cost},
		Verdict: api.Verdict{Exceeded: true, Limit: h, Detail: h}, Outputs: h})
	inertLines(t, "report", out.String(), 7)

	out.Reset()
	printBatches(a, []api.BatchSummary{{ID: "b1", Status: api.StatusRefused, Pipeline: h, Refusal: &api.SubmitRefusal{Code: h}}})
	inertLines(t, "list", out.String(), 2)
}

// `-o json` stays exact: the same hostile texts come back byte for byte
// from the JSON the CLI prints, and no raw ESC reaches the terminal.
func TestJSONOutputExact(t *testing.T) {
	var items []api.Item
	for _, h := range hostile {
		if !utf8.ValidString(h) {
			continue // JSON carries UTF-8 text only
		}
		items = append(items, api.Item{Key: h, Outcome: api.OutcomeFailed, Error: h})
	}
	var out bytes.Buffer
	if err := (&app{out: &out}).printJSON(api.ItemPage{Items: items}); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out.Bytes(), "\x1b\x07\r") {
		t.Errorf("JSON output holds a raw control byte: %q", out.String())
	}
	var back api.ItemPage
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for i, it := range back.Items {
		if it.Key != items[i].Key || it.Error != items[i].Error {
			t.Errorf("item %d: key %q error %q back, want %q", i, it.Key, it.Error, items[i].Key)
		}
	}
}

// TestTextOutputGoesThroughOneHelper: no file of the command (and of
// describe, whose texts it prints) prints with fmt.Print*/Fprint* or
// writes to os.Stdout/os.Stderr directly except text.go (textf, textln),
// describe.Escape (into its own builder) and the console opener's HTML
// file; a new print must use textf so that its data is escaped.
func TestTextOutputGoesThroughOneHelper(t *testing.T) {
	allowed := map[string]bool{"escape.go:Escape": true, "text.go:textf": true, "text.go:textln": true, "console.go:consoleOpener": true}
	for _, dir := range []string{".", "..", "describe"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range file.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || allowed[filepath.Base(f)+":"+fd.Name.Name] {
					continue
				}
				ast.Inspect(fd, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					pkg, ok := sel.X.(*ast.Ident)
					if !ok {
						return true
					}
					name := pkg.Name + "." + sel.Sel.Name
					if pkg.Name == "fmt" && (strings.HasPrefix(sel.Sel.Name, "Print") || strings.HasPrefix(sel.Sel.Name, "Fprint")) && !(dir == ".." && name == "fmt.Fprintln") ||
						pkg.Name == "os" && (sel.Sel.Name == "Stdout" || sel.Sel.Name == "Stderr") && dir == "." {
						t.Errorf("%s: %s in %s prints around textf (text.go)", fset.Position(sel.Pos()), name, fd.Name.Name)
					}
					return true
				})
			}
		}
	}
	if b, _ := os.ReadFile("../main.go"); !bytes.Contains(b, []byte("describe.Escape(")) {
		t.Error("main.go prints errors without describe.Escape")
	}
}
