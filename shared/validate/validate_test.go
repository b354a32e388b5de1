package validate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/validate"
)

const orderSchema = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^o-[0-9]+$"},
    "qty": {"type": "integer", "minimum": 1},
    "price": {"type": ["number", "null"]},
    "gift": {"type": "boolean"},
    "note": {"type": "string"}
  },
  "required": ["id", "qty"]
}`

// TestCheckNamesThePathAndKeyword: a valid item passes; an invalid one
// names the JSON pointer of the failing value, the schema keyword and
// the reason.
func TestCheckNamesThePathAndKeyword(t *testing.T) {
	s, err := validate.Compile(json.RawMessage(orderSchema))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Check(json.RawMessage(`{"id":"o-1","qty":2}`)); v != nil {
		t.Fatalf("valid item: %+v", v)
	}
	cases := []struct{ in, path, keyword, reason string }{
		{`{"id":"o-1","qty":0}`, "/qty", "/properties/qty/minimum", "minimum"},
		{`{"id":"o-1","qty":"2"}`, "/qty", "/properties/qty/type", "integer"},
		{`{"id":"x","qty":2}`, "/id", "/properties/id/pattern", "^o-[0-9]+$"},
		{`{"id":"o-1"}`, "", "/required", "qty"},
		{`not json`, "", "", "not valid JSON"},
	}
	for _, c := range cases {
		v := s.Check(json.RawMessage(c.in))
		if v == nil || v.Path != c.path || v.Keyword != c.keyword || !strings.Contains(v.Reason, c.reason) {
			t.Errorf("%s: violation %+v, want path %q keyword %q reason with %q", c.in, v, c.path, c.keyword, c.reason)
		}
	}
}

// TestCompileRefusesWhatItCannotBound: no remote $ref is fetched, a
// pattern RE2 does not compile or longer than MaxPatternBytes is refused
// naming where it is, a schema over MaxSchemaBytes or not JSON is refused.
func TestCompileRefusesWhatItCannotBound(t *testing.T) {
	long := strings.Repeat("a", validate.MaxPatternBytes+1)
	cases := []struct{ name, doc, want string }{
		{"remote ref", `{"$ref": "https://example.com/s.json"}`, "remote references are not fetched"},
		{"file ref", `{"properties": {"a": {"$ref": "file:///etc/passwd"}}}`, "remote references are not fetched"},
		{"look-ahead", `{"properties": {"a": {"type": "string", "pattern": "^(?=a)"}}}`, "/properties/a"},
		{"long pattern", `{"properties": {"a": {"pattern": "` + long + `"}}}`, "more than 1024"},
		{"not a schema", `{"type": 7}`, "not a valid schema"},
		{"not JSON", `{"type":`, "not valid JSON"},
		{"too large", `{"description": "` + strings.Repeat("x", validate.MaxSchemaBytes) + `"}`, "more than 65536"},
	}
	for _, c := range cases {
		_, err := validate.Compile(json.RawMessage(c.doc))
		var se *validate.SchemaError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want a *SchemaError with %q", c.name, err, c.want)
		}
	}
	if _, err := validate.Compile(json.RawMessage(`{"$defs": {"q": {"type": "integer"}}, "properties": {"qty": {"$ref": "#/$defs/q"}}}`)); err != nil {
		t.Errorf("local $ref: %v", err)
	}
}

// TestCellTypesColumnsByTheSchema: an integer, number or boolean column's
// cells become JSON numbers and booleans, an empty cell null where null is
// allowed and absent otherwise; a cell not of its type is a *CellError;
// other columns stay strings.
func TestCellTypesColumnsByTheSchema(t *testing.T) {
	s, err := validate.Compile(json.RawMessage(orderSchema))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		col, val, want string
		ok             bool
	}{
		{"qty", " 12 ", "12", true},
		{"qty", "", "", false},
		{"price", "1.5e2", "1.5e2", true},
		{"price", "", "null", true},
		{"gift", "TRUE", "true", true},
		{"note", "007", `"007"`, true},
		{"id", "o-1", `"o-1"`, true},
		{"other", "3", `"3"`, true},
	}
	for _, c := range cases {
		v, ok, err := s.Cell(c.col, c.val)
		if err != nil || ok != c.ok || string(v) != c.want {
			t.Errorf("Cell(%q, %q) = %s, %v, %v; want %s, %v", c.col, c.val, v, ok, err, c.want, c.ok)
		}
	}
	for _, c := range []struct{ col, val, want string }{{"qty", "1.5", "an integer"}, {"qty", "012", "an integer"}, {"price", "1,5", "a number"}, {"gift", "yes", "true or false"}} {
		_, _, err := s.Cell(c.col, c.val)
		var ce *validate.CellError
		if !errors.As(err, &ce) || ce.Column != c.col || ce.Want != c.want {
			t.Errorf("Cell(%q, %q): err = %v, want a *CellError wanting %s", c.col, c.val, err, c.want)
		}
	}
	if !s.Typed("qty") || s.Typed("note") || s.Typed("id") {
		t.Error("Typed: qty typed, note and id (strings) not")
	}
}

// TestReportCountsEveryProblemAndKeepsTheFirst: every problem is written
// to W and counted, the first MaxListedProblems kept; bad_rows decides
// the handling and the refusal, against max_invalid_percent.
func TestReportCountsEveryProblemAndKeepsTheFirst(t *testing.T) {
	var w bytes.Buffer
	r := &validate.Report{Mode: api.BadRowsRefuse, W: &w}
	for i := range 150 {
		r.Row()
		if err := r.Add(api.Problem{Line: int64(i + 1), Kind: api.ProblemFormat, Reason: "short row"}); err != nil {
			t.Fatal(err)
		}
	}
	r.Add(api.Problem{Line: 151, Key: "a", Kind: api.ProblemDuplicate, FirstLine: 1, Reason: "duplicate"})
	if r.Invalid != 150 || r.Duplicates != 1 || len(r.First) != api.MaxListedProblems || strings.Count(w.String(), "\n") != 151 {
		t.Fatalf("invalid %d duplicates %d first %d lines %d", r.Invalid, r.Duplicates, len(r.First), strings.Count(w.String(), "\n"))
	}
	if r.First[0].Handling != api.HandlingRefused {
		t.Errorf("handling %s under refuse", r.First[0].Handling)
	}
	pe := r.Refusal(0, "batches/b/invalid/x.jsonl")
	if pe == nil || pe.Count != 151 || !errors.Is(pe, api.ErrInvalid) || !strings.Contains(pe.Error(), "line 1: short row") || !strings.Contains(pe.Error(), "batches/b/invalid/x.jsonl") {
		t.Fatalf("refusal under refuse: %v", pe)
	}

	f := &validate.Report{Mode: api.BadRowsFail}
	for i := range 100 {
		f.Row()
		if i < 5 {
			f.Add(api.Problem{Line: int64(i + 1), Kind: api.ProblemSchema, Reason: "r"})
		}
	}
	f.Add(api.Problem{Line: 101, Kind: api.ProblemDuplicate, Reason: "d"})
	if f.First[0].Handling != api.HandlingFailed || f.First[5].Handling != api.HandlingDropped {
		t.Errorf("handlings under fail: %s, %s", f.First[0].Handling, f.First[5].Handling)
	}
	if pe := f.Refusal(0, ""); pe != nil {
		t.Errorf("6 of 100 under the default 10 %%: refused: %v", pe)
	}
	if pe := f.Refusal(5, ""); pe == nil || !strings.Contains(pe.Why, "max_invalid_percent 5") {
		t.Errorf("6 of 100 over 5 %%: %v", pe)
	}
}
