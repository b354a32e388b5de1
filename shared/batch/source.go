package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// SourceSpec names where a batch's items come from; exactly one of Items,
// Object and Prefix is set.
//
//	{"items": [ {...}, ... ]}                          inline JSON array
//	{"object": "s3://bucket/key.jsonl", "format": "jsonl"}  one S3 object: jsonl, json (array) or csv (header row)
//	{"object": "s3://bucket/key.csv", "csv_delimiter": ";"}  CSV with a given delimiter
//	{"prefix": "s3://bucket/images/"}                  one item per object under the prefix
//
// An object is UTF-8 text, read gzip-decompressed when it is gzip (see
// SourceText).
type SourceSpec struct {
	Items  json.RawMessage `json:"items,omitempty"`
	Object string          `json:"object,omitempty"`
	Format string          `json:"format,omitempty"` // jsonl | json | csv; default from the object's extension
	// CSVDelimiter is a CSV object's delimiter (ParseCSVDelimiter: one
	// character, or comma, semicolon, tab, pipe); "" detects it from a
	// sep= first line or the header (ReadCSVDelimited).
	CSVDelimiter string `json:"csv_delimiter,omitempty"`
	Prefix       string `json:"prefix,omitempty"`
	// ETag, for an object source, reads the object only if its ETag is
	// this one (S3 If-Match; quotes optional): an object since replaced or
	// deleted is refused (*InputError on source.object) rather than read.
	//
	//	{"object": "s3://bucket/in/orders.csv", "etag": "9b2cf535f27731c974343645a3985328"}
	ETag string `json:"etag,omitempty"`
}

// Source formats.
const (
	FormatJSONL = "jsonl"
	FormatJSON  = "json"
	FormatCSV   = "csv"
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
}

// ParseS3URI splits "s3://bucket/key" into bucket and key. The key may be
// empty (a bucket-wide prefix).
func ParseS3URI(uri string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(uri, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q is not an s3:// URI", uri)
	}
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%q names no bucket", uri)
	}
	return bucket, key, nil
}

// FormatOf returns the source format of an object key by its extension,
// compared case-insensitively: .jsonl/.ndjson, .json, .csv/.tsv, each also
// with .gz after it (orders.csv.gz is csv, read decompressed); else "".
func FormatOf(key string) string {
	k := strings.TrimSuffix(strings.ToLower(key), ".gz")
	switch {
	case strings.HasSuffix(k, ".jsonl"), strings.HasSuffix(k, ".ndjson"):
		return FormatJSONL
	case strings.HasSuffix(k, ".json"):
		return FormatJSON
	case strings.HasSuffix(k, ".csv"), strings.HasSuffix(k, ".tsv"):
		return FormatCSV
	}
	return ""
}

// keyer turns a parsed input into its key: positional, or the string value
// of the key field.
type keyer struct {
	field string
	next  int64 // next positional index
}

func (k *keyer) key(input json.RawMessage, line, element int64) (string, error) {
	if k.field == "" {
		key := PositionalKey(k.next)
		k.next++
		return key, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(input, &obj); err != nil || obj == nil {
		return "", &InputError{Line: line, Element: element, Reason: fmt.Sprintf("key field %q: the item is not a JSON object", k.field)}
	}
	raw, ok := obj[k.field]
	if !ok {
		return "", &InputError{Line: line, Element: element, Reason: fmt.Sprintf("key field %q is missing", k.field)}
	}
	key, ok := keyText(raw)
	if !ok {
		return "", &InputError{Line: line, Element: element, Reason: fmt.Sprintf("key field %q is not a string or an integer (got %s)", k.field, truncate(string(raw), 40))}
	}
	if r := CheckKey(key); r != "" {
		return "", &InputError{Line: line, Element: element, Key: truncate(key, 80), Reason: r}
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

var bom = []byte("\xEF\xBB\xBF")

// ReadJSONL reads JSON Lines (one JSON value per line, RFC 8259 values,
// https://jsonlines.org): a UTF-8 byte-order mark is skipped, CRLF and LF
// both end a line, blank lines are not items, the last line needs no
// newline. A malformed line is an *InputError with its line number.
func ReadJSONL(r io.Reader, keyField string, emit func(SourceItem) error) error {
	return readJSONL(r, keyField, true, 0, emit)
}

// readJSONL is ReadJSONL; first says that r starts at the start of its
// source (where a byte-order mark may open line 1), not at a part's; next
// is the positional index of r's first item (no key field).
func readJSONL(r io.Reader, keyField string, first bool, next int64, emit func(SourceItem) error) error {
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
				return &InputError{Line: line + 1, Reason: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)}
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
			if err := emitJSON(b, line, 0, &k, emit); err != nil {
				return err
			}
		}
		if eof {
			return nil
		}
	}
}

func emitJSON(b []byte, line, element int64, k *keyer, emit func(SourceItem) error) error {
	// encoding/json would replace invalid UTF-8 with U+FFFD and so change a
	// key silently; JSON text must be UTF-8 (RFC 8259 §8.1).
	if !utf8.Valid(b) {
		what := "the line"
		if element > 0 {
			what = "the element"
		}
		return &InputError{Line: line, Element: element, Reason: notUTF8(what, b)}
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
			return &InputError{Line: line, Element: element, Reason: fmt.Sprintf("member %q appears twice in one object%s", se.JSONPointer.LastToken(), where)}
		}
		var v any
		if uerr := json.Unmarshal(b, &v); uerr != nil {
			err = uerr
		}
		return &InputError{Line: line, Element: element, Reason: "not valid JSON", Err: err}
	}
	key, err := k.key(json.RawMessage(input), line, element)
	if err != nil {
		return err
	}
	return emit(SourceItem{Key: key, Input: json.RawMessage(input), Line: line, Element: element})
}

// ReadJSONArray reads one JSON array (RFC 8259) whose elements are the
// items, streaming element by element. Anything but whitespace after the
// closing bracket is an error.
func ReadJSONArray(r io.Reader, keyField string, emit func(SourceItem) error) error {
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
			return &InputError{Reason: "holds nothing, want a JSON array", Err: ErrEmptySource}
		}
		return &InputError{Reason: "not valid JSON", Err: err}
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return &InputError{Reason: fmt.Sprintf("want a JSON array, got %v", tok)}
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
			return &InputError{Element: element, Reason: "not valid JSON", Err: err}
		}
		if len(raw) > MaxLineBytes {
			return &InputError{Element: element, Reason: fmt.Sprintf("element longer than %d bytes", MaxLineBytes)}
		}
		if err := emitJSON(raw, 0, element, &k, emit); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		if ie := passInputError(err, 0, element+1); ie != nil {
			return ie
		}
		return &InputError{Element: element + 1, Reason: "unterminated JSON array", Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if ie := passInputError(err, 0, 0); ie != nil {
			return ie
		}
		return &InputError{Reason: "content after the closing bracket of the JSON array"}
	}
	return nil
}

// ListPrefix emits one item per object under bucket/prefix (every page):
// key = the object key, input = {"bucket","key","size","etag"}. Keys ending
// in "/" (folder markers) are skipped.
func ListPrefix(ctx context.Context, blobs Blobs, bucket, prefix string, emit func(SourceItem) error) error {
	var n int64
	return blobs.List(ctx, bucket, prefix, func(o ObjectInfo) error {
		if strings.HasSuffix(o.Key, "/") {
			return nil
		}
		n++
		if r := CheckKey(o.Key); r != "" {
			return &InputError{Line: n, Key: truncate(o.Key, 80), Reason: r}
		}
		input, err := json.Marshal(struct {
			Bucket string `json:"bucket"`
			Key    string `json:"key"`
			Size   int64  `json:"size"`
			ETag   string `json:"etag,omitempty"`
		}{o.Bucket, o.Key, o.Size, strings.Trim(o.ETag, `"`)})
		if err != nil {
			return err
		}
		return emit(SourceItem{Key: o.Key, Input: input, Line: n})
	})
}

// ReadSource reads the items of spec, calling emit for each in source order.
func ReadSource(ctx context.Context, blobs Blobs, spec SourceSpec, keyField string, emit func(SourceItem) error) error {
	switch {
	case spec.Items != nil:
		return ReadJSONArray(bytes.NewReader(spec.Items), keyField, emit)
	case spec.Prefix != "":
		bucket, prefix, _ := ParseS3URI(spec.Prefix)
		return ListPrefix(ctx, blobs, bucket, prefix, emit)
	case spec.Object != "":
		bucket, key, _ := ParseS3URI(spec.Object)
		rc, err := blobs.OpenMatch(ctx, bucket, key, spec.ETag)
		if err != nil {
			switch {
			case errors.Is(err, ErrNotFound) && spec.ETag != "":
				return &InputError{Field: "source.object", Reason: fmt.Sprintf("%s (ETag %s) does not exist any more", spec.Object, spec.ETag)}
			case errors.Is(err, ErrNotFound):
				return &InputError{Field: "source.object", Reason: fmt.Sprintf("%s does not exist", spec.Object)}
			case errors.Is(err, ErrConflict):
				return &InputError{Field: "source.object", Reason: fmt.Sprintf("%s changed: its ETag is no longer %s", spec.Object, spec.ETag)}
			}
			return fmt.Errorf("open %s: %w", spec.Object, err)
		}
		defer rc.Close()
		text, gzr, err := sourceText(rc)
		if err != nil {
			return err
		}
		return blameGzip(readObject(text, spec, key, keyField, emit), text, gzr)
	}
	return &InputError{Field: "source", Reason: "set one of items, object, prefix"}
}

// readObject reads the text of an object source in its format.
func readObject(text io.Reader, spec SourceSpec, key, keyField string, emit func(SourceItem) error) error {
	format := spec.Format
	if format == "" {
		format = FormatOf(key)
	}
	switch format {
	case FormatJSONL:
		return ReadJSONL(text, keyField, emit)
	case FormatJSON:
		return ReadJSONArray(text, keyField, emit)
	case FormatCSV:
		delim, err := ParseCSVDelimiter(spec.CSVDelimiter)
		if err != nil {
			return &InputError{Field: "source.csv_delimiter", Reason: err.Error()}
		}
		return ReadCSVDelimited(text, keyField, delim, emit)
	}
	return &InputError{Field: "source.format", Reason: fmt.Sprintf("%q is not one of jsonl, json, csv", format)}
}

// Validate checks the spec's shape (exactly one source, well-formed URIs,
// a known format) and names the field at fault.
func (s SourceSpec) Validate(keyField string) error {
	n := 0
	if s.Items != nil {
		n++
	}
	if s.Object != "" {
		n++
	}
	if s.Prefix != "" {
		n++
	}
	if n != 1 {
		return &InputError{Field: "source", Reason: "set exactly one of items, object, prefix"}
	}
	switch {
	case s.Object != "":
		_, key, err := ParseS3URI(s.Object)
		if err != nil {
			return &InputError{Field: "source.object", Reason: err.Error()}
		}
		if key == "" {
			return &InputError{Field: "source.object", Reason: "names no object key"}
		}
		f := s.Format
		switch f {
		case "":
			f = FormatOf(key)
		case FormatJSONL, FormatJSON, FormatCSV:
		default:
			return &InputError{Field: "source.format", Reason: fmt.Sprintf("%q is not a format: want jsonl, json or csv (lower case)", f)}
		}
		if f != FormatJSONL && f != FormatJSON && f != FormatCSV {
			return &InputError{Field: "source.format", Reason: fmt.Sprintf("cannot tell the format of %q: set format to jsonl, json or csv", key)}
		}
		if _, err := ParseCSVDelimiter(s.CSVDelimiter); err != nil {
			return &InputError{Field: "source.csv_delimiter", Reason: err.Error()}
		}
		if s.CSVDelimiter != "" && f != FormatCSV {
			return &InputError{Field: "source.csv_delimiter", Reason: fmt.Sprintf("applies to a csv source, not %s", f)}
		}
	case s.CSVDelimiter != "":
		return &InputError{Field: "source.csv_delimiter", Reason: "applies to a csv object source only"}
	case s.ETag != "":
		return &InputError{Field: "source.etag", Reason: "applies to an object source only"}
	case s.Prefix != "":
		if _, _, err := ParseS3URI(s.Prefix); err != nil {
			return &InputError{Field: "source.prefix", Reason: err.Error()}
		}
		if keyField != "" {
			return &InputError{Field: "key_field", Reason: "a prefix source keys items by object key; key_field does not apply"}
		}
		if s.Format != "" {
			return &InputError{Field: "source.format", Reason: "does not apply to a prefix source"}
		}
	case s.Items != nil:
		if t := bytes.TrimSpace(s.Items); len(t) == 0 || t[0] != '[' {
			return &InputError{Field: "source.items", Reason: "want a JSON array"}
		}
	}
	return nil
}

// Describe returns a short description of the source for the batch row.
func (s SourceSpec) Describe() string {
	switch {
	case s.Object != "":
		return s.Object
	case s.Prefix != "":
		return s.Prefix + "*"
	}
	return "inline"
}
