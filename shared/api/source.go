package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
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

// Truncate returns s cut to n bytes and "…" when longer (for the keys and
// values an error message quotes); it may cut a UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
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

// ParseCSVDelimiter reads a csv_delimiter option. "" means detect it from
// the file (0). Else one character, or its name: "comma", "semicolon",
// "tab" (also the two characters \t), "pipe". A quote, CR, LF, a letter, a
// digit or U+FFFD is refused: encoding/csv cannot split on them, or no
// export uses them.
func ParseCSVDelimiter(s string) (rune, error) {
	switch strings.ToLower(s) {
	case "":
		return 0, nil
	case "comma":
		return ',', nil
	case "semicolon":
		return ';', nil
	case "tab", `\t`:
		return '\t', nil
	case "pipe":
		return '|', nil
	}
	r, n := utf8.DecodeRuneInString(s)
	if n != len(s) || r == utf8.RuneError || r == '"' || r == '\r' || r == '\n' || unicode.IsLetter(r) || unicode.IsDigit(r) {
		return 0, fmt.Errorf("%q: want one character (such as , ; | or a tab) or comma, semicolon, tab, pipe", s)
	}
	return r, nil
}
