package source

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/bulkrun/bulkrun/shared/api"
)

// MaxLineBytes is the longest source line (or JSON array element) read:
// 64 MiB. Longer lines are refused with their line number.
const MaxLineBytes = 64 << 20

// SourceItem is one item read from a source: its key, its input JSON
// (compact), and where it was read.
type SourceItem struct {
	Key     string
	Input   json.RawMessage
	Line    int64 // 1-based line (JSONL, CSV) or object number (prefix)
	Element int64 // 1-based element (JSON array)
	// Invalid, when set, is why the item cannot run (a bad row under
	// bad_rows fail, see Check): it is written to the manifest with the
	// reason (ManifestLine.Invalid) and ends failed without its pipeline
	// being called.
	Invalid string
	// CSV is the layout of the CSV table the item is a row of (one value
	// shared by every row of the table); nil for any other source.
	CSV *api.CSVShape
}

// keyer turns a parsed input into its key: positional, or the string value
// of the key field.
type keyer struct {
	field string
	next  int64 // next positional index
}

// skip takes the positional key of a row that cannot be read (without a
// key field: the rows after it keep their keys), or returns "" (a key
// field: the row has no key).
func (k *keyer) skip() string {
	if k.field != "" {
		return ""
	}
	key := api.PositionalKey(k.next)
	k.next++
	return key
}

func (k *keyer) key(input json.RawMessage, line, element int64) (string, error) {
	if k.field == "" {
		key := api.PositionalKey(k.next)
		k.next++
		return key, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(input, &obj); err != nil || obj == nil {
		return "", &api.InputError{Line: line, Element: element, Reason: fmt.Sprintf("key field %q: the item is not a JSON object", k.field)}
	}
	raw, ok := obj[k.field]
	if !ok {
		return "", &api.InputError{Line: line, Element: element, Reason: fmt.Sprintf("key field %q is missing", k.field)}
	}
	key, ok := keyText(raw)
	if !ok {
		return "", &api.InputError{Line: line, Element: element, Reason: fmt.Sprintf("key field %q is not a string or an integer (got %s)", k.field, api.Truncate(string(raw), 40))}
	}
	if r := api.CheckKey(key); r != "" {
		return "", &api.InputError{Line: line, Element: element, Key: api.Truncate(key, 80), Reason: r}
	}
	return key, nil
}

// keyText returns the key a key field's JSON value stands for: a string's
// value, or an integer's exact decimal text (-?(0|[1-9][0-9]*), RFC 8259
// §6 without fraction or exponent, of any size), so 12345 and "12345" are
// the same key. Other values (1.0, 1e3, true, null, objects) are not keys.
func keyText(raw json.RawMessage) (string, bool) {
	if len(raw) > 0 && raw[0] == '"' {
		var key string
		if err := json.Unmarshal(raw, &key); err != nil {
			return "", false
		}
		return key, true
	}
	digits := bytes.TrimPrefix(raw, []byte{'-'})
	if len(digits) == 0 || (digits[0] == '0' && len(digits) > 1) {
		return "", false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return string(raw), true
}

var bom = []byte("\xEF\xBB\xBF")

// ReadJSONL reads JSON Lines (one JSON value per line, RFC 8259 values,
// https://jsonlines.org): a UTF-8 byte-order mark is skipped, CRLF and LF
// both end a line, blank lines are not items, the last line needs no
// newline. A malformed line is an *InputError with its line number.
func ReadJSONL(r io.Reader, keyField string, emit func(SourceItem) error) error {
	return readJSONL(r, keyField, true, 0, nil, emit)
}

// readJSONL is ReadJSONL; first says that r starts at the start of its
// source (where a byte-order mark may open line 1), not at a part's; next
// is the positional index of r's first item (no key field); chk checks
// the items (nil: none).
func readJSONL(r io.Reader, keyField string, first bool, next int64, chk *Check, emit func(SourceItem) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	k := keyer{field: keyField, next: next}
	var line int64
	var buf bytes.Buffer
	for {
		buf.Reset()
		eof := false
		for {
			frag, err := br.ReadSlice('\n')
			buf.Write(frag)
			if buf.Len() > MaxLineBytes {
				return &api.InputError{Line: line + 1, Reason: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)}
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				eof = true
				break
			}
			if ie := passInputError(err, line+1, 0); ie != nil {
				return ie
			}
			return fmt.Errorf("read line %d: %w", line+1, err)
		}
		if buf.Len() == 0 && eof {
			return nil
		}
		line++
		b := buf.Bytes()
		if line == 1 && first {
			b = bytes.TrimPrefix(b, bom)
		}
		b = bytes.TrimSpace(b)
		if len(b) > 0 {
			if err := emitJSON(b, line, 0, &k, chk, emit); err != nil {
				return err
			}
		}
		if eof {
			return nil
		}
	}
}

// emitJSON reads one JSON value b (a line, an element) as an item and
// hands it to chk (the schema, then emit); a value that cannot be an item
// goes to chk.fault under its positional key (without key field) or its
// LineKey.
func emitJSON(b []byte, line, element int64, k *keyer, chk *Check, emit func(SourceItem) error) error {
	// encoding/json would replace invalid UTF-8 with U+FFFD and so change a
	// key silently; JSON text must be UTF-8 (RFC 8259 §8.1).
	if !utf8.Valid(b) {
		what := "the line"
		if element > 0 {
			what = "the element"
		}
		return chk.fault(&api.InputError{Line: line, Element: element, Reason: notUTF8(what, b)}, k.skip(), lineText(b))
	}
	// Compact and check in one pass. RFC 8259 §4 leaves an object with a
	// member twice to each parser ({"id":"a","id":"b"} is "a" to some and
	// "b" to others): refuse it, at any depth, naming the member.
	input := jsontext.Value(bytes.Clone(b))
	if err := input.Compact(jsontext.AllowDuplicateNames(false)); err != nil {
		var se *jsontext.SyntacticError
		if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
			where := ""
			if parent := se.JSONPointer.Parent(); parent != "" {
				where = fmt.Sprintf(" (in the object at %s)", parent)
			}
			return chk.fault(&api.InputError{Line: line, Element: element, Reason: fmt.Sprintf("member %q appears twice in one object%s", se.JSONPointer.LastToken(), where)}, k.skip(), lineText(b))
		}
		var v any
		if uerr := json.Unmarshal(b, &v); uerr != nil {
			err = uerr
		}
		return chk.fault(&api.InputError{Line: line, Element: element, Reason: "not valid JSON", Err: err}, k.skip(), lineText(b))
	}
	key, err := k.key(json.RawMessage(input), line, element)
	if err != nil {
		var ie *api.InputError
		if errors.As(err, &ie) {
			return chk.fault(ie, "", json.RawMessage(input))
		}
		return err
	}
	return chk.deliver(SourceItem{Key: key, Input: json.RawMessage(input), Line: line, Element: element}, emit)
}

// ReadJSONArray reads one JSON array (RFC 8259) whose elements are the
// items, streaming element by element. Anything but whitespace after the
// closing bracket is an error.
func ReadJSONArray(r io.Reader, keyField string, emit func(SourceItem) error) error {
	return readJSONArray(r, keyField, nil, emit)
}

// readJSONArray is ReadJSONArray with chk checking the items.
func readJSONArray(r io.Reader, keyField string, chk *Check, emit func(SourceItem) error) error {
	br := bufio.NewReader(r)
	if head, err := br.Peek(3); err == nil && bytes.Equal(head, bom) {
		br.Discard(3)
	}
	dec := json.NewDecoder(br)
	tok, err := dec.Token()
	if err != nil {
		if ie := passInputError(err, 0, 0); ie != nil {
			return ie
		}
		if errors.Is(err, io.EOF) {
			return &api.InputError{Reason: "holds nothing, want a JSON array", Err: api.ErrEmptySource}
		}
		return &api.InputError{Reason: "not valid JSON", Err: err}
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return &api.InputError{Reason: fmt.Sprintf("want a JSON array, got %v", tok)}
	}
	k := keyer{field: keyField}
	var element int64
	for dec.More() {
		element++
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if ie := passInputError(err, 0, element); ie != nil {
				return ie
			}
			return &api.InputError{Element: element, Reason: "not valid JSON", Err: err}
		}
		if len(raw) > MaxLineBytes {
			return &api.InputError{Element: element, Reason: fmt.Sprintf("element longer than %d bytes", MaxLineBytes)}
		}
		if err := emitJSON(raw, 0, element, &k, chk, emit); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		if ie := passInputError(err, 0, element+1); ie != nil {
			return ie
		}
		return &api.InputError{Element: element + 1, Reason: "unterminated JSON array", Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if ie := passInputError(err, 0, 0); ie != nil {
			return ie
		}
		return &api.InputError{Reason: "content after the closing bracket of the JSON array"}
	}
	return nil
}
