package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// MaxSchemaBytes is the largest schema Compile takes: 64 KiB of JSON. A
// batch's schema travels in its submit request and is stored with the
// batch (DynamoDB items are at most 400 KB).
const MaxSchemaBytes = 64 << 10

// MaxPatternBytes is the longest regular expression ("pattern",
// "patternProperties") a schema may hold: 1,024 bytes. Go's regexp
// matches in time linear in the text; the pattern's own size bounds the
// program it compiles to.
const MaxPatternBytes = 1024

// MaxReasonBytes bounds a Violation's reason: 512 bytes, cut on a UTF-8
// boundary.
const MaxReasonBytes = 512

// schemaURL is the name a batch's schema is compiled under: a URN, so
// that a relative "$ref" cannot name a file or a host.
const schemaURL = "urn:bulkrun:schema"

// SchemaError is a schema Compile refuses: Keyword is where in the schema
// (a JSON pointer such as "/properties/qty/pattern", "" when the whole
// document is at fault) and Reason what is wrong.
type SchemaError struct {
	Keyword string
	Reason  string
}

func (e *SchemaError) Error() string {
	if e.Keyword == "" {
		return "schema: " + e.Reason
	}
	return fmt.Sprintf("schema at %s: %s", e.Keyword, e.Reason)
}

// Schema is a compiled JSON Schema and the types it gives the top-level
// properties (for CSV cells, see Cell). Safe for concurrent use.
type Schema struct {
	sch     *jsonschema.Schema
	columns map[string]columnType
}

// Compile compiles doc, a JSON Schema (draft 2020-12 unless its "$schema"
// names another draft), with the limits of the package comment. Errors:
// *SchemaError for a document that is not JSON, too large, not a valid
// schema, a remote "$ref", or a pattern over MaxPatternBytes or one RE2
// does not compile.
func Compile(doc json.RawMessage) (*Schema, error) {
	if len(doc) > MaxSchemaBytes {
		return nil, &SchemaError{Reason: fmt.Sprintf("%d bytes, more than %d", len(doc), MaxSchemaBytes)}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, &SchemaError{Reason: "not valid JSON: " + err.Error()}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemote{})
	c.UseRegexpEngine(boundedRegexp)
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, &SchemaError{Reason: err.Error()}
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, compileError(err)
	}
	return &Schema{sch: sch, columns: columnTypes(v)}, nil
}

// compileError turns the library's compile error into a *SchemaError.
func compileError(err error) error {
	var se *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &se) && errors.As(se.Err, &ve) {
		leaf := firstLeaf(ve)
		return &SchemaError{Keyword: pointer(leaf.InstanceLocation), Reason: "not a valid schema: " + kindText(leaf)}
	}
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		return &SchemaError{Reason: fmt.Sprintf("$ref %s: %v", le.URL, le.Err)}
	}
	var ie *jsonschema.InvalidRegexError
	if errors.As(err, &ie) {
		return &SchemaError{Keyword: strings.TrimPrefix(ie.URL, schemaURL+"#"), Reason: fmt.Sprintf("pattern %q: %v", ie.Regex, ie.Err)}
	}
	return &SchemaError{Reason: strings.ReplaceAll(err.Error(), schemaURL+"#", "")}
}

// noRemote refuses to load any URL: a schema's references stay inside
// the schema.
type noRemote struct{}

func (noRemote) Load(url string) (any, error) {
	return nil, errors.New("remote references are not fetched: put the referenced schema under $defs and refer to it as #/$defs/NAME")
}

// boundedRegexp compiles a pattern with Go's regexp (RE2), at most
// MaxPatternBytes long.
func boundedRegexp(s string) (jsonschema.Regexp, error) {
	if len(s) > MaxPatternBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", len(s), MaxPatternBytes)
	}
	return regexp.Compile(s)
}

// Violation is why an item does not satisfy a schema: Path is the JSON
// pointer (RFC 6901) of the failing value in the item ("" for the item
// itself), Keyword the schema keyword that failed (a JSON pointer into the
// schema, such as "/properties/qty/type") and Reason what the keyword
// says, at most MaxReasonBytes.
type Violation struct {
	Path    string
	Keyword string
	Reason  string
}

// Check validates one item's input (JSON) against the schema and returns
// nil when it is valid, else the first violation (the first leaf of the
// validator's error tree, in the schema's keyword order). Input that is
// not JSON is a violation at the item itself.
func (s *Schema) Check(input json.RawMessage) *Violation {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return &Violation{Reason: "not valid JSON: " + err.Error()}
	}
	err = s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Violation{Reason: cut(err.Error())}
	}
	leaf := firstLeaf(ve)
	kw := strings.TrimPrefix(strings.TrimPrefix(leaf.SchemaURL, schemaURL), "#")
	if leaf.ErrorKind != nil {
		kw += pointer(leaf.ErrorKind.KeywordPath())
	}
	return &Violation{Path: pointer(leaf.InstanceLocation), Keyword: kw, Reason: cut(kindText(leaf))}
}

// firstLeaf is the first error of e's tree that has no causes.
func firstLeaf(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}

var printer = message.NewPrinter(language.English)

func kindText(e *jsonschema.ValidationError) string {
	if e.ErrorKind == nil {
		return "invalid"
	}
	return e.ErrorKind.LocalizedString(printer)
}

// pointer joins tokens into a JSON pointer (RFC 6901: "~" as "~0", "/"
// as "~1").
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// cut bounds a reason to MaxReasonBytes on a UTF-8 boundary.
func cut(s string) string {
	if len(s) <= MaxReasonBytes {
		return s
	}
	return strings.ToValidUTF8(s[:MaxReasonBytes-3], "") + "..."
}

// columnType is what a schema's top-level property declares in "type".
type columnType struct {
	integer, number, boolean, null, str bool
}

// columnTypes reads the "type" of each of doc's top-level "properties"
// (a string or an array of strings); other properties are left out.
func columnTypes(doc any) map[string]columnType {
	obj, _ := doc.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	cols := map[string]columnType{}
	for name, p := range props {
		ps, _ := p.(map[string]any)
		var types []string
		switch t := ps["type"].(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				if s, ok := x.(string); ok {
					types = append(types, s)
				}
			}
		}
		var ct columnType
		for _, t := range types {
			switch t {
			case "integer":
				ct.integer = true
			case "number":
				ct.number = true
			case "boolean":
				ct.boolean = true
			case "null":
				ct.null = true
			case "string":
				ct.str = true
			}
		}
		if !ct.str && (ct.integer || ct.number || ct.boolean) {
			cols[name] = ct
		}
	}
	return cols
}

// CellError is a CSV cell that is not of the type the schema gives its
// column.
type CellError struct {
	Column string
	Value  string
	Want   string // "an integer", "a number", "true or false"
}

func (e *CellError) Error() string {
	return fmt.Sprintf("column %q: %q is not %s (the schema's type for it)", e.Column, cutValue(e.Value), e.Want)
}

func cutValue(v string) string {
	if len(v) > 40 {
		return strings.ToValidUTF8(v[:40], "") + "…"
	}
	return v
}

// Typed reports whether the schema types column (a top-level property
// whose "type" is integer, number or boolean, possibly with null, and not
// string): Cell converts its cells.
func (s *Schema) Typed(column string) bool {
	if s == nil {
		return false
	}
	_, ok := s.columns[column]
	return ok
}

// Cell returns the JSON value of a CSV cell of column as the schema types
// it (see Typed): an integer's or number's text as a JSON number (JSON
// number syntax, RFC 8259 §6; an integer without fraction or exponent),
// true or false for a boolean (any case). An empty cell is null where the
// type allows null, else absent (ok false): the item has no such member,
// and "required" decides. A cell of an untyped column is its JSON string.
// A cell that is not of its type is a *CellError.
func (s *Schema) Cell(column, value string) (v json.RawMessage, ok bool, err error) {
	ct, typed := columnType{}, false
	if s != nil {
		ct, typed = s.columns[column]
	}
	if !typed {
		b, _ := json.Marshal(value)
		return b, true, nil
	}
	t := strings.TrimSpace(value)
	if t == "" {
		if ct.null {
			return json.RawMessage("null"), true, nil
		}
		return nil, false, nil
	}
	if ct.integer && integerText(t) || ct.number && numberText(t) {
		return json.RawMessage(t), true, nil
	}
	if ct.boolean {
		switch strings.ToLower(t) {
		case "true":
			return json.RawMessage("true"), true, nil
		case "false":
			return json.RawMessage("false"), true, nil
		}
	}
	var want []string
	switch {
	case ct.number:
		want = append(want, "a number")
	case ct.integer:
		want = append(want, "an integer")
	}
	if ct.boolean {
		want = append(want, "true or false")
	}
	return nil, false, &CellError{Column: column, Value: value, Want: strings.Join(want, " or ")}
}

// integerText reports whether t is -?(0|[1-9][0-9]*).
func integerText(t string) bool {
	d := strings.TrimPrefix(t, "-")
	if d == "" || d[0] == '0' && len(d) > 1 {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// numberText reports whether t is a JSON number (RFC 8259 §6).
func numberText(t string) bool {
	if !json.Valid([]byte(t)) {
		return false
	}
	_, err := strconv.ParseFloat(t, 64)
	return err == nil && t[0] != '"' && t != "true" && t != "false" && t != "null"
}
