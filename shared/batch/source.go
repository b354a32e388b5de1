package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// SourceSpec names where a batch's items come from; exactly one of Items,
// Object and Prefix is set.
//
//	{"items": [ {...}, ... ]}                          inline JSON array
//	{"object": "s3://bucket/key.jsonl", "format": "jsonl"}  one S3 object: jsonl, json (array) or csv (header row)
//	{"prefix": "s3://bucket/images/"}                  one item per object under the prefix
type SourceSpec struct {
	Items  json.RawMessage `json:"items,omitempty"`
	Object string          `json:"object,omitempty"`
	Format string          `json:"format,omitempty"` // jsonl | json | csv; default from the object's extension
	Prefix string          `json:"prefix,omitempty"`
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

// FormatOf returns the source format of an object key by its extension
// (.jsonl/.ndjson, .json, .csv), or "".
func FormatOf(key string) string {
	k := strings.ToLower(key)
	switch {
	case strings.HasSuffix(k, ".jsonl"), strings.HasSuffix(k, ".ndjson"):
		return FormatJSONL
	case strings.HasSuffix(k, ".json"):
		return FormatJSON
	case strings.HasSuffix(k, ".csv"):
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
	var key string
	if err := json.Unmarshal(raw, &key); err != nil {
		return "", &InputError{Line: line, Element: element, Reason: fmt.Sprintf("key field %q is not a string (got %s)", k.field, truncate(string(raw), 40))}
	}
	if r := CheckKey(key); r != "" {
		return "", &InputError{Line: line, Element: element, Key: truncate(key, 80), Reason: r}
	}
	return key, nil
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
	br := bufio.NewReaderSize(r, 64<<10)
	k := keyer{field: keyField}
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
			return fmt.Errorf("read line %d: %w", line+1, err)
		}
		if buf.Len() == 0 && eof {
			return nil
		}
		line++
		b := buf.Bytes()
		if line == 1 {
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
		return &InputError{Line: line, Element: element, Reason: "not valid UTF-8 (JSON text must be UTF-8, RFC 8259 §8.1)"}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		var v any
		if uerr := json.Unmarshal(b, &v); uerr != nil {
			err = uerr
		}
		return &InputError{Line: line, Element: element, Reason: "not valid JSON", Err: err}
	}
	input := json.RawMessage(compact.Bytes())
	key, err := k.key(input, line, element)
	if err != nil {
		return err
	}
	return emit(SourceItem{Key: key, Input: input, Line: line, Element: element})
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
		if errors.Is(err, io.EOF) {
			return &InputError{Reason: "empty source: want a JSON array"}
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
		return &InputError{Element: element + 1, Reason: "unterminated JSON array", Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &InputError{Reason: "content after the closing bracket of the JSON array"}
	}
	return nil
}

// ReadCSV reads CSV (RFC 4180, via encoding/csv) whose first row names the
// columns; each further row is an item whose input is a JSON object of
// column → string value, in column order. keyField must name a column.
// Blank lines are skipped; a row with the wrong number of fields is an
// error naming its line.
func ReadCSV(r io.Reader, keyField string, emit func(SourceItem) error) error {
	br := bufio.NewReader(r)
	if head, err := br.Peek(3); err == nil && bytes.Equal(head, bom) {
		br.Discard(3)
	}
	cr := csv.NewReader(br)
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil // no header, no items
	}
	if err != nil {
		return csvError(err)
	}
	cols := make([][]byte, len(header))
	seen := map[string]bool{}
	keyCol := -1
	for i, h := range header {
		if h == "" {
			return &InputError{Line: 1, Reason: fmt.Sprintf("header column %d is empty", i+1)}
		}
		if seen[h] {
			return &InputError{Line: 1, Reason: fmt.Sprintf("header column %q appears twice", h)}
		}
		seen[h] = true
		cols[i], _ = json.Marshal(h)
		if h == keyField {
			keyCol = i
		}
	}
	if keyField != "" && keyCol < 0 {
		return &InputError{Field: "key_field", Reason: fmt.Sprintf("%q is not a column of the CSV header (%s)", keyField, strings.Join(header, ","))}
	}
	var index int64
	var buf bytes.Buffer
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return csvError(err)
		}
		line, _ := cr.FieldPos(0)
		for i, v := range rec {
			if !utf8.ValidString(v) {
				return &InputError{Line: int64(line), Reason: fmt.Sprintf("column %q is not valid UTF-8", header[i])}
			}
		}
		buf.Reset()
		buf.WriteByte('{')
		for i, v := range rec {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.Write(cols[i])
			buf.WriteByte(':')
			val, _ := json.Marshal(v)
			buf.Write(val)
		}
		buf.WriteByte('}')
		var key string
		if keyCol >= 0 {
			key = rec[keyCol]
			if r := CheckKey(key); r != "" {
				return &InputError{Line: int64(line), Key: truncate(key, 80), Reason: r}
			}
		} else {
			key = PositionalKey(index)
		}
		index++
		if err := emit(SourceItem{Key: key, Input: bytes.Clone(buf.Bytes()), Line: int64(line)}); err != nil {
			return err
		}
	}
}

func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &InputError{Line: int64(pe.Line), Reason: "malformed CSV", Err: pe.Err}
	}
	return fmt.Errorf("read csv: %w", err)
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
		rc, err := blobs.Open(ctx, bucket, key)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return &InputError{Field: "source.object", Reason: fmt.Sprintf("%s does not exist", spec.Object)}
			}
			return fmt.Errorf("open %s: %w", spec.Object, err)
		}
		defer rc.Close()
		format := spec.Format
		if format == "" {
			format = FormatOf(key)
		}
		switch format {
		case FormatJSONL:
			return ReadJSONL(rc, keyField, emit)
		case FormatJSON:
			return ReadJSONArray(rc, keyField, emit)
		case FormatCSV:
			return ReadCSV(rc, keyField, emit)
		}
		return &InputError{Field: "source.format", Reason: fmt.Sprintf("%q is not one of jsonl, json, csv", format)}
	}
	return &InputError{Field: "source", Reason: "set one of items, object, prefix"}
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
		if f == "" {
			f = FormatOf(key)
		}
		if f != FormatJSONL && f != FormatJSON && f != FormatCSV {
			return &InputError{Field: "source.format", Reason: fmt.Sprintf("cannot tell the format of %q: set format to jsonl, json or csv", key)}
		}
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
