package source_test

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/validate"
)

// readChecked reads text in format with a Check of schema (none when "")
// whose Bad collects every bad row, and returns the items and bad rows.
func readChecked(t *testing.T, format, text, keyField, schema string) ([]source.SourceItem, []source.BadRow, error) {
	t.Helper()
	chk := &source.Check{}
	if schema != "" {
		s, err := validate.Compile(json.RawMessage(schema))
		if err != nil {
			t.Fatal(err)
		}
		chk.Schema = s
	}
	var items []source.SourceItem
	var bad []source.BadRow
	chk.Bad = func(b source.BadRow) error { bad = append(bad, b); return nil }
	err := source.ReadText(strings.NewReader(text), format, "", "", keyField, chk, func(it source.SourceItem) error {
		items = append(items, it)
		return nil
	})
	return items, bad, err
}

// TestCheckListsEveryBadCSVRowInOnePass: a short row, a byte that is not
// UTF-8 (Latin-1 "é") and a cell that is not of its column's type are
// each handed to Bad with their line, key and reason, and the read goes
// on to the rows after them; the good rows are items with typed cells.
func TestCheckListsEveryBadCSVRowInOnePass(t *testing.T) {
	csv := "id,name,qty\n" +
		"a,apple,1\n" +
		"b,short\n" +
		"c,caf\xe9,3\n" +
		"d,date,four\n" +
		"e,elder,5\n"
	items, bad, err := readChecked(t, "csv", csv, "id", `{"properties": {"qty": {"type": "integer"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Key != "a" || string(items[0].Input) != `{"id":"a","name":"apple","qty":1}` || items[1].Key != "e" {
		t.Fatalf("items %+v", items)
	}
	want := []struct {
		line      int64
		key, path string
		reason    string
	}{
		{3, "b", "", "2 fields, the header has 3"},
		{4, "c", "", "UTF-8"},
		{5, "d", "/qty", "is not an integer"},
	}
	if len(bad) != len(want) {
		t.Fatalf("bad rows %+v", bad)
	}
	for i, w := range want {
		p := bad[i].Problem
		if p.Line != w.line || p.Key != w.key || bad[i].Key != w.key || p.Path != w.path || p.Kind != api.ProblemFormat || !strings.Contains(p.Reason, w.reason) {
			t.Errorf("bad row %d: %+v, want line %d key %q path %q reason with %q", i, p, w.line, w.key, w.path, w.reason)
		}
	}
	if string(bad[0].Input) != `{"id":"b","name":"short"}` || !strings.Contains(string(bad[1].Input), "caf\uFFFD") {
		t.Errorf("bad inputs %s, %s", bad[0].Input, bad[1].Input)
	}
}

// TestCheckHandsSchemaAndFormatProblemsOfJSONL: a line that is not JSON
// runs under its LineKey, an item the schema refuses under its key with
// the failing path; without Bad the first problem ends the read with its
// line and path, as a read without a Check does.
func TestCheckHandsSchemaAndFormatProblemsOfJSONL(t *testing.T) {
	text := `{"k":"a","qty":1}` + "\n" + `{"k":"b",` + "\n" + `{"k":"c","qty":0}` + "\n" + `{"k":"d","qty":2}` + "\n"
	schema := `{"properties": {"qty": {"type": "integer", "minimum": 1}}}`
	items, bad, err := readChecked(t, "jsonl", text, "k", schema)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[1].Key != "d" || len(bad) != 2 {
		t.Fatalf("items %+v bad %+v", items, bad)
	}
	if p := bad[0].Problem; p.Line != 2 || p.Kind != api.ProblemFormat || bad[0].Key != source.LineKey(2, 0) || !strings.Contains(p.Reason, "not valid JSON") {
		t.Errorf("line 2: %+v key %q", p, bad[0].Key)
	}
	if p := bad[1].Problem; p.Line != 3 || p.Key != "c" || p.Kind != api.ProblemSchema || p.Path != "/qty" {
		t.Errorf("line 3: %+v", p)
	}

	s, _ := validate.Compile(json.RawMessage(schema))
	err = source.ReadText(strings.NewReader(`{"k":"a","qty":0}`+"\n"), "jsonl", "", "", "k", &source.Check{Schema: s}, func(source.SourceItem) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), "/qty") {
		t.Errorf("without Bad: err = %v, want line 1 at /qty", err)
	}
}

// TestManifestFinishAllListsEveryDuplicate: every later line of a
// repeated key is a duplicate problem naming the key's first line.
func TestManifestFinishAllListsEveryDuplicate(t *testing.T) {
	mw := source.NewManifestWriter(io.Discard, 0, t.TempDir())
	defer mw.Close()
	for i, k := range []string{"a", "b", "a", "c", "a"} {
		if err := mw.Add(source.SourceItem{Key: k, Input: json.RawMessage(`{}`), Line: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	sum, err := mw.FinishAll(func(p api.Problem) error {
		got = append(got, fmt.Sprintf("%s %d %d %s", p.Key, p.FirstLine, p.Line, p.Kind))
		return nil
	})
	if err != nil || sum.Count != 5 || fmt.Sprint(got) != "[a 1 3 duplicate a 1 5 duplicate]" {
		t.Fatalf("sum %+v err %v duplicates %v", sum, err, got)
	}
}
