package source

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/bulkrun/bulkrun/shared/api"
)

// readAll runs ReadSource over one object holding body and returns the items.
func readAll(t *testing.T, name string, body []byte, spec api.SourceSpec, keyField string) ([]SourceItem, error) {
	t.Helper()
	blobs := objectsMap{name: body}
	spec.Object = "s3://src/" + name
	var c collected
	err := ReadSource(context.Background(), blobs, spec, keyField, c.emit)
	return c.items, err
}

// objectsMap holds the objects of bucket "src" by key (Objects).
type objectsMap map[string][]byte

func (m objectsMap) OpenMatch(_ context.Context, bucket, key, _ string) (io.ReadCloser, error) {
	b, ok := m[key]
	if bucket != "src" || !ok {
		return nil, api.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m objectsMap) List(_ context.Context, bucket, prefix string, fn func(ObjectInfo) error) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.HasPrefix(k, prefix) {
			if err := fn(ObjectInfo{Bucket: bucket, Key: k, Size: int64(len(m[k]))}); err != nil {
				return err
			}
		}
	}
	return nil
}

// gz is a gzip stream of one member per part (RFC 1952 §2.2).
func gz(t testing.TB, parts ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, p := range parts {
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func inputs(items []SourceItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, string(it.Input))
	}
	return out
}

// Product line: CSV as spreadsheets export it — the delimiter is detected
// (comma, semicolon, tab), taken from a sep= first line or from
// csv_delimiter, and a header that looks separated by another delimiter is
// refused instead of running one garbage column per line.
func TestCSVDelimiterAsSpreadsheetsExport(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		delimiter string
		want      []string // inputs
		wantLines []int64
		wantErr   string
		errLine   int64
	}{
		{name: "semicolon detected", in: "id;name;qty\r\nA1;Widget;12\r\nB2;\"Nut; M6\";3\r\n",
			want: []string{`{"id":"A1","name":"Widget","qty":"12"}`, `{"id":"B2","name":"Nut; M6","qty":"3"}`}, wantLines: []int64{2, 3}},
		{name: "tab detected", in: "id\tname\nA1\tWidget, large\n",
			want: []string{`{"id":"A1","name":"Widget, large"}`}, wantLines: []int64{2}},
		{name: "comma detected, semicolons quoted in header", in: "id,\"a;b;c\"\n1,x\n",
			want: []string{`{"id":"1","a;b;c":"x"}`}, wantLines: []int64{2}},
		{name: "most frequent wins", in: "id;name;qty,unit\nA1;W;12,kg\n",
			want: []string{`{"id":"A1","name":"W","qty,unit":"12,kg"}`}, wantLines: []int64{2}},
		{name: "sep line is not an item", in: "sep=;\nid;name\nA1;x\n",
			want: []string{`{"id":"A1","name":"x"}`}, wantLines: []int64{3}},
		{name: "quoted sep line after BOM, CRLF", in: "\xEF\xBB\xBF\"sep=;\"\r\nid;name\r\nA1;x\r\n",
			want: []string{`{"id":"A1","name":"x"}`}, wantLines: []int64{3}},
		{name: "sep line names a delimiter the header lacks (one column)", in: "SEP=|\nid\nA;B\n",
			want: []string{`{"id":"A;B"}`}, wantLines: []int64{3}},
		{name: "sep tab", in: "sep=\t\nid\tname\nA1\tx\n",
			want: []string{`{"id":"A1","name":"x"}`}, wantLines: []int64{3}},
		{name: "given semicolon", in: "id;name,x\nA1;y,z\n", delimiter: ";",
			want: []string{`{"id":"A1","name,x":"y,z"}`}, wantLines: []int64{2}},
		{name: "given pipe", in: "id|name\nA1|x;y\n", delimiter: "pipe",
			want: []string{`{"id":"A1","name":"x;y"}`}, wantLines: []int64{2}},
		{name: "given tab by name", in: "id\tname\nA1\tx\n", delimiter: "tab",
			want: []string{`{"id":"A1","name":"x"}`}, wantLines: []int64{2}},
		{name: "one column", in: "id\nA1\n",
			want: []string{`{"id":"A1"}`}, wantLines: []int64{2}},
		{name: "given comma, header holds semicolons", in: "id;name;qty\nA1;Widget;12\n", delimiter: ",",
			wantErr: `it looks separated by ';'; set csv_delimiter to ';'`, errLine: 1},
		{name: "sep line, header holds another delimiter", in: "sep=,\nid;name\nA1;x\n",
			wantErr: `holds no ',' but 1 × ';'`, errLine: 2},
		{name: "sep line contradicts csv_delimiter", in: "sep=;\nid;name\n", delimiter: ",",
			wantErr: "sep=; but csv_delimiter is ','", errLine: 1},
		{name: "as many commas as semicolons", in: "id,name;qty\nA,B;C\n",
			wantErr: "cannot tell the delimiter", errLine: 1},
		{name: "blank lines before the header", in: "\n  \nid;name\nA1;x\n",
			want: []string{`{"id":"A1","name":"x"}`}, wantLines: []int64{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := readAll(t, "orders.csv", []byte(tt.in), api.SourceSpec{CSVDelimiter: tt.delimiter}, "")
			if tt.wantErr != "" {
				var ie *api.InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantErr) || ie.Line != tt.errLine {
					t.Fatalf("err = %v, want %q at line %d", err, tt.wantErr, tt.errLine)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := inputs(items); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("inputs = %q, want %q", got, tt.want)
			}
			for i, it := range items {
				if it.Line != tt.wantLines[i] {
					t.Errorf("item %d at line %d, want %d", i, it.Line, tt.wantLines[i])
				}
			}
		})
	}
}

// TestCSVCROnlyLineEndingsRefused guards docs/sources.md "Reading a source": "CSV: … a
// source without items is refused": a CSV whose lines end in CR alone
// (Excel's "CSV (Macintosh)") was read as one header line, no item, and
// refused as an empty source although it held rows. It is refused naming
// line 1 and the line endings; a CR inside a quoted header field, CRLF and
// LF files are read as before.
func TestCSVCROnlyLineEndingsRefused(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		wantErr  string
	}{
		{name: "CR only", in: "id,name\rA1,W\rA2,G\r", wantErr: "carriage return alone"},
		{name: "CR only after a sep line", in: "sep=;\rid;name\rA1;W\r", wantErr: "carriage return alone"},
		{name: "CR only without a final CR", in: "id;name\rA1;W", wantErr: "carriage return alone"},
		{name: "CRLF", in: "id,name\r\nA1,W\r\n", want: []string{`{"id":"A1","name":"W"}`}},
		{name: "CR in a quoted header field", in: "id,\"a\rb\"\nA1,W\n", want: []string{`{"id":"A1","a\rb":"W"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := readAll(t, "orders.csv", []byte(tt.in), api.SourceSpec{}, "id")
			if tt.wantErr != "" {
				var ie *api.InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantErr) || ie.Line != 1 {
					t.Fatalf("err = %v (%d items), want %q at line 1", err, len(items), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := inputs(items); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("inputs = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseCSVDelimiter(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want rune
		ok   bool
	}{
		{"", 0, true}, {",", ',', true}, {";", ';', true}, {"\t", '\t', true}, {`\t`, '\t', true},
		{"TAB", '\t', true}, {"semicolon", ';', true}, {"comma", ',', true}, {"pipe", '|', true}, {"|", '|', true},
		{`"`, 0, false}, {"\n", 0, false}, {"ab", 0, false}, {"a", 0, false}, {"7", 0, false}, {"\xff", 0, false},
	} {
		got, err := api.ParseCSVDelimiter(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("api.ParseCSVDelimiter(%q) = %q, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func utf16Bytes(s string, bigEndian, mark bool) []byte {
	var out []byte
	units := utf16.Encode([]rune(s))
	if mark {
		units = append([]uint16{0xFEFF}, units...)
	}
	for _, u := range units {
		if bigEndian {
			out = append(out, byte(u>>8), byte(u))
		} else {
			out = append(out, byte(u), byte(u>>8))
		}
	}
	return out
}

// Product line: UTF-8 is the only encoding; any other is refused with an
// error that names it (and says UTF-8), and a UTF-8 BOM is skipped.
func TestSourceEncodingIsUTF8Only(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		body    []byte
		wantErr string // "" = read fine
		errLine int64
	}{
		{"utf-16le with BOM (Excel 'Unicode text')", "a.csv", utf16Bytes("id\tname\r\nA1\tx\r\n", false, true), "UTF-16 (little-endian, byte-order mark FF FE); bulkrun reads UTF-8 only", 1},
		{"utf-16be with BOM", "a.jsonl", utf16Bytes("{\"a\":1}\n", true, true), "UTF-16 (big-endian", 1},
		{"utf-16le without BOM", "a.csv", utf16Bytes("id,name\nA,x\n", false, false), "UTF-16 (little-endian, without a byte-order mark)", 1},
		{"utf-32le with BOM", "a.json", append([]byte{0xFF, 0xFE, 0, 0}, '[', 0, 0, 0), "UTF-32 (little-endian", 1},
		{"latin-1 in jsonl", "a.jsonl", []byte("{\"a\":\"ok\"}\n{\"a\":\"caf\xe9\"}\n"), "byte 10 of it is 0xe9); bulkrun reads UTF-8 only", 2},
		{"windows-1252 in csv", "a.csv", []byte("id;name\nA1;Stra\xdfe\n"), `column "name" is not valid UTF-8 (byte 5 of it is 0xdf); bulkrun reads UTF-8 only`, 2},
		{"latin-1 in csv header", "a.csv", []byte("id;gr\xf6\xdfe\nA1;x\n"), "header column 2 is not valid UTF-8", 1},
		{"utf-8 BOM skipped", "a.jsonl", []byte("\xEF\xBB\xBF{\"a\":1}\n"), "", 0},
		{"utf-8 BOM skipped in a gzip csv", "a.csv.gz", gz(t, "\xEF\xBB\xBFid;name\nA;x\n"), "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := readAll(t, tt.file, tt.body, api.SourceSpec{}, "")
			if tt.wantErr == "" {
				if err != nil || len(items) != 1 || !json.Valid(items[0].Input) || strings.Contains(string(items[0].Input), "\ufeff") {
					t.Fatalf("items %q, err %v", inputs(items), err)
				}
				return
			}
			var ie *api.InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantErr) || ie.Line != tt.errLine {
				t.Fatalf("err = %v, want %q at line %d", err, tt.wantErr, tt.errLine)
			}
		})
	}
}

// failingReader returns data, then err (a dropped connection).
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// Product line: a manifest stored gzip-compressed (Content-Encoding gzip, or
// named .gz) is read decompressed from every source that reads an object;
// a corrupt stream is refused with an error that says gzip.
func TestGzipSourcesAreReadDecompressed(t *testing.T) {
	lines := "{\"id\":\"a\"}\n{\"id\":\"b\"}\n"
	good := gz(t, lines)
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-6] ^= 0xFF // CRC-32 (RFC 1952 §2.3.1)
	tests := []struct {
		name    string
		file    string
		body    []byte
		spec    api.SourceSpec
		want    int
		wantErr string
	}{
		{"jsonl.gz", "orders.jsonl.gz", good, api.SourceSpec{}, 2, ""},
		{"named .jsonl, stored with Content-Encoding gzip", "orders.jsonl", good, api.SourceSpec{}, 2, ""},
		{"upper-case NDJSON.GZ", "ORDERS.NDJSON.GZ", good, api.SourceSpec{}, 2, ""},
		{"concatenated members", "orders.jsonl.gz", gz(t, "{\"id\":\"a\"}\n", "{\"id\":\"b\"}\n{\"id\":\"c\"}\n"), api.SourceSpec{}, 3, ""},
		{"json array", "orders.json.gz", gz(t, `[{"id":"a"},{"id":"b"}]`), api.SourceSpec{}, 2, ""},
		{"csv with semicolons", "orders.csv.gz", gz(t, "id;qty\na;1\nb;2\n"), api.SourceSpec{}, 2, ""},
		{"format given", "export.bin", gz(t, "id\na\n"), api.SourceSpec{Format: api.FormatCSV}, 1, ""},
		{"named .gz but not compressed", "orders.jsonl.gz", []byte(lines), api.SourceSpec{}, 2, ""},
		{"bad checksum", "orders.jsonl.gz", corrupt, api.SourceSpec{}, 0, "corrupt or truncated gzip stream"},
		{"truncated", "orders.jsonl.gz", good[:len(good)-10], api.SourceSpec{}, 0, "corrupt or truncated gzip stream"},
		{"bad header", "orders.jsonl.gz", []byte{0x1f, 0x8b, 0x00, 0x00, 0x01}, api.SourceSpec{}, 0, "not a valid gzip stream"},
		{"corrupt csv", "orders.csv.gz", append(gz(t, "id\na\n")[:12], 0xFF, 0xFF, 0xFF), api.SourceSpec{}, 0, "gzip"},
		{"corrupt json array", "orders.json.gz", append(gz(t, "[1,2,3]")[:12], 0xFF, 0xFF, 0xFF), api.SourceSpec{}, 0, "gzip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := readAll(t, tt.file, tt.body, tt.spec, "")
			if tt.wantErr != "" {
				if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(items) != tt.want {
				t.Fatalf("items %q, err %v; want %d items", inputs(items), err, tt.want)
			}
		})
	}

	// A connection dropped in the middle of a gzip stream is not a corrupt
	// file: the error stays retryable (not ErrInvalid).
	drop := errors.New("connection reset by peer")
	text, err := SourceText(&failingReader{data: good[:len(good)/2], err: drop})
	if err == nil {
		err = ReadJSONL(text, "", func(SourceItem) error { return nil })
	}
	if !errors.Is(err, drop) || errors.Is(err, api.ErrInvalid) {
		t.Fatalf("dropped connection: err = %v, want it retryable", err)
	}
}

func TestFormatOf(t *testing.T) {
	for key, want := range map[string]string{
		"a.jsonl": api.FormatJSONL, "a.NDJSON": api.FormatJSONL, "a.jsonl.gz": api.FormatJSONL, "a.ndjson.GZ": api.FormatJSONL,
		"a.json": api.FormatJSON, "a.json.gz": api.FormatJSON, "a.CSV": api.FormatCSV, "a.csv.gz": api.FormatCSV, "a.tsv": api.FormatCSV,
		"a.gz": "", "a.txt": "", "a.gz.csv.x": "",
	} {
		if got := api.FormatOf(key); got != want {
			t.Errorf("FormatOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// Product line: a JSON object with a member twice is refused naming the
// member (RFC 8259 §4 leaves it to each parser which one wins).
func TestDuplicateMemberRefused(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string // "" = accepted
	}{
		{"key member twice", `{"id":"a","id":"b"}`, `member "id" appears twice in one object`},
		{"spelled with an escape", `{"id":"a","\u0069d":"b"}`, `member "id" appears twice`},
		{"nested", `{"id":"a","ship":{"zip":"1","zip":"2"}}`, `member "zip" appears twice in one object (in the object at /ship)`},
		{"in an array", `{"id":"a","lines":[{"sku":1},{"sku":2,"sku":3}]}`, `member "sku" appears twice in one object (in the object at /lines/1)`},
		{"case differs: two members", `{"id":"a","ID":"b"}`, ""},
		{"same name in sibling objects", `{"id":"a","x":{"k":1},"y":{"k":1}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, form := range []struct {
				name, in string
				read     func(io.Reader, string, func(SourceItem) error) error
				line     int64
				element  int64
			}{
				{"jsonl", "{\"id\":\"first\"}\n" + tt.in + "\n", ReadJSONL, 2, 0},
				{"json array", `[{"id":"first"},` + tt.in + `]`, ReadJSONArray, 0, 2},
			} {
				var c collected
				err := form.read(strings.NewReader(form.in), "id", c.emit)
				if tt.wantErr == "" {
					if err != nil || len(c.items) != 2 {
						t.Fatalf("%s: %d items, err %v", form.name, len(c.items), err)
					}
					continue
				}
				var ie *api.InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantErr) || ie.Line != form.line || ie.Element != form.element {
					t.Fatalf("%s: err = %v, want %q at line %d element %d", form.name, err, tt.wantErr, form.line, form.element)
				}
			}
		})
	}
}

// Product line: integer JSON keys are accepted by their exact decimal text
// (so 1 and "1" are one key, refused as a duplicate); other non-string keys
// are refused naming the line.
func TestIntegerKeys(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		wantKey string
		wantErr string
	}{
		{"integer", `12345`, "12345", ""},
		{"negative", `-7`, "-7", ""},
		{"zero", `0`, "0", ""},
		{"beyond int64, exact", `123456789012345678901234567890`, "123456789012345678901234567890", ""},
		{"string", `"A-1"`, "A-1", ""},
		{"fraction", `1.0`, "", `key field "order_id" is not a string or an integer (got 1.0)`},
		{"exponent", `1e3`, "", "not a string or an integer"},
		{"bool", `true`, "", "not a string or an integer"},
		{"null", `null`, "", "not a string or an integer"},
		{"object", `{"n":1}`, "", "not a string or an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c collected
			err := ReadJSONL(strings.NewReader("\n{\"order_id\":"+tt.value+"}\n"), "order_id", c.emit)
			if tt.wantErr != "" {
				var ie *api.InputError
				if !errors.As(err, &ie) || ie.Line != 2 || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q at line 2", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(c.items) != 1 || c.items[0].Key != tt.wantKey {
				t.Fatalf("items %+v, err %v; want key %q", c.items, err, tt.wantKey)
			}
		})
	}

	mw := NewManifestWriter(io.Discard, 0, t.TempDir())
	defer mw.Close()
	if err := ReadJSONL(strings.NewReader("{\"id\":1}\n{\"id\":2}\n{\"id\":\"1\"}\n"), "id", mw.Add); err != nil {
		t.Fatal(err)
	}
	_, err := mw.Finish()
	var ie *api.InputError
	if !errors.As(err, &ie) || ie.Key != "1" || !strings.Contains(err.Error(), "first seen at line 1, again at line 3") {
		t.Fatalf("1 and \"1\": err = %v, want a duplicate key", err)
	}
}

// Product line: a CSV record with an unclosed quote is refused naming the
// line where the record began (and where parsing stopped).
func TestCSVUnclosedQuoteNamesRecordStart(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantLine int64
		wantText string
	}{
		{"unclosed to the end", "id,name\nA,ok\nB,\"never closed\nC,x\nD,y\n", 3, "begins on this line (parsing stopped at line 5"},
		{"stray quote on one line", "id,name\nA,\"x\"y\n", 2, "a quoted field is not closed, or a quote inside it is not doubled"},
		{"after a sep line and blank lines", "sep=;\nid;name\n\n  \nB;\"open\nC;x\n", 5, "parsing stopped at line 6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ReadCSV(strings.NewReader(tt.in), "", func(SourceItem) error { return nil })
			var ie *api.InputError
			if !errors.As(err, &ie) || ie.Line != tt.wantLine || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("err = %v, want line %d and %q", err, tt.wantLine, tt.wantText)
			}
		})
	}
}

// Product line: whitespace-only lines are never items, in any format, and
// keep the line numbers of the lines after them.
func TestWhitespaceOnlyLinesAreNotItems(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		in        string
		want      []string
		wantLines []int64
	}{
		{"one-column csv", "a.csv", "id\nA\n   \nB\n\t\r\n", []string{`{"id":"A"}`, `{"id":"B"}`}, []int64{2, 4}},
		{"two-column csv", "a.csv", "id,name\nA,x\n \t \nB,y\n  ", []string{`{"id":"A","name":"x"}`, `{"id":"B","name":"y"}`}, []int64{2, 4}},
		{"csv: spaces inside a quoted field stay", "a.csv", "id,note\nA,\"x\n   \ny\"\nB,z\n", []string{`{"id":"A","note":"x\n   \ny"}`, `{"id":"B","note":"z"}`}, []int64{2, 5}},
		{"csv: a quoted blank value is an item", "a.csv", "id\n\"  \"\n", []string{`{"id":"  "}`}, []int64{2}},
		{"jsonl", "a.jsonl", "{\"a\":1}\n \t \r\n\u00a0\n{\"a\":2}\n   ", []string{`{"a":1}`, `{"a":2}`}, []int64{1, 4}},
		{"json array over lines", "a.json", "[\n  \n {\"a\":1}\n\t\n]\n  \n", []string{`{"a":1}`}, []int64{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := readAll(t, tt.file, []byte(tt.in), api.SourceSpec{}, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := inputs(items); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("inputs = %q, want %q", got, tt.want)
			}
			for i, it := range items {
				if it.Line != tt.wantLines[i] {
					t.Errorf("item %d at line %d, want %d", i, it.Line, tt.wantLines[i])
				}
			}
		})
	}
}
