package cli

import (
	"bytes"
	"encoding/csv"
	"errors"
	"strings"
	"testing"
)

// manifestOf is a manifest (source.ManifestLine JSON Lines) of lines
// "key\tinput".
func manifestOf(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		k, in, _ := strings.Cut(l, "\t")
		b.WriteString(`{"key":"` + k + `","input":` + in + "}\n")
	}
	return b.String()
}

// TestWriteInputsInSourceOrder guards `items --inputs` for a JSON Lines
// source: exactly the wanted keys' inputs, in manifest (source) order
// whatever the order of the keys listed, compacted one a line; a bad
// row's line (an "x" reason) exports what the row held.
func TestWriteInputsInSourceOrder(t *testing.T) {
	m := manifestOf(
		"a\t{\"k\":\"a\",\"n\":1}",
		"b\t{\"k\": \"b\", \"n\": 2, \"bad\": true}",
		"c\t{\"k\":\"c\",\"n\":3}",
		"d\t{\"k\":\"d\",\"n\":4,\"bad\":true}",
	)
	m = strings.Replace(m, `{"key":"d"`, `{"x":"line 4: short row","key":"d"`, 1)
	var out bytes.Buffer
	n, err := writeInputs(&out, strings.NewReader(m), map[string]bool{"d": true, "b": true}, "jsonl")
	if err != nil || n != 2 {
		t.Fatalf("writeInputs: %d, %v", n, err)
	}
	if want := "{\"k\":\"b\",\"n\":2,\"bad\":true}\n{\"k\":\"d\",\"n\":4,\"bad\":true}\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

// TestWriteInputsNamesMissingKeys guards that a key the manifest lacks
// is named and nothing is written, and that a line that is not JSON is
// named by its number.
func TestWriteInputsNamesMissingKeys(t *testing.T) {
	var out bytes.Buffer
	_, err := writeInputs(&out, strings.NewReader(manifestOf("a\t{}")), map[string]bool{"a": true, "zz": true}, "jsonl")
	if err == nil || !strings.Contains(err.Error(), "1 key not in the manifest: zz") || out.Len() != 0 {
		t.Fatalf("missing key: %v, wrote %q", err, out.String())
	}
	_, err = writeInputs(&out, strings.NewReader(manifestOf("a\t{}")+"{not json\n"), map[string]bool{"a": true}, "jsonl")
	if err == nil || !strings.Contains(err.Error(), "manifest line 2") {
		t.Fatalf("bad line: %v", err)
	}
}

// TestWriteInputsAsCSV guards the CSV export: a header of every column in
// the order first seen (a column only a later row has comes last), a
// string cell as it is (quoted where RFC 4180 needs it), a number or
// boolean as its JSON text, null or an absent column empty — and that
// encoding/csv reads it back to the same cells.
func TestWriteInputsAsCSV(t *testing.T) {
	m := manifestOf(
		"o-1\t{\"id\":\"o-1\",\"name\":\"Ann, Jr.\",\"qty\":2}",
		"o-2\t{\"id\":\"o-2\",\"name\":\"ok\",\"qty\":1}",
		"o-3\t{\"id\":\"o-3\",\"name\":\"say \\\"hi\\\"\",\"qty\":1.50,\"gift\":true}",
		"o-4\t{\"id\":\"o-4\",\"name\":null}",
	)
	var out bytes.Buffer
	n, err := writeInputs(&out, strings.NewReader(m), map[string]bool{"o-1": true, "o-3": true, "o-4": true}, "csv")
	if err != nil || n != 3 {
		t.Fatalf("writeInputs: %d, %v", n, err)
	}
	recs, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"id", "name", "qty", "gift"},
		{"o-1", "Ann, Jr.", "2", ""},
		{"o-3", `say "hi"`, "1.50", "true"},
		{"o-4", "", "", ""},
	}
	if len(recs) != len(want) {
		t.Fatalf("records %q, want %q", recs, want)
	}
	for i := range want {
		if strings.Join(recs[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("record %d: %q, want %q", i, recs[i], want[i])
		}
	}
	if _, err := writeInputs(&out, strings.NewReader(manifestOf("a\t[1,2]")), map[string]bool{"a": true}, "csv"); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Fatalf("a non-object input as CSV: %v", err)
	}
}

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
