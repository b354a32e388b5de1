package source

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/api"
)

// csvCandidates are the delimiters ReadCSV recognises by itself in a
// header: what spreadsheets export (comma; semicolon where the comma is the
// decimal separator; tab for "text, tab-separated").
var csvCandidates = []rune{',', ';', '\t'}

// delimName prints a delimiter for messages.
func delimName(r rune) string {
	if r == '\t' {
		return "tab"
	}
	return fmt.Sprintf("%q", r)
}

// ReadCSV reads CSV with its delimiter detected from the file: it is
// ReadCSVDelimited with delimiter 0.
func ReadCSV(r io.Reader, keyField string, emit func(SourceItem) error) error {
	return ReadCSVDelimited(r, keyField, 0, emit)
}

// ReadCSVDelimited reads CSV (RFC 4180, via encoding/csv) as spreadsheets
// export it. The first row names the columns; each further row is an item
// whose input is a JSON object of column → string value, in column order.
// keyField, when set, must name a column.
//
// The delimiter is, in order: the one a first line "sep=X" names (what
// Excel writes and reads; that line is not an item), else delimiter when
// not 0, else the one of comma, semicolon and tab that occurs most often
// (outside quotes) in the header line; a header without any is one column.
// A header that holds none of the delimiter but another of those three (a
// semicolon file read as comma-separated) is refused rather than read as
// one garbage column, as is a header with as many of two candidates, and a
// sep= line that contradicts delimiter.
//
// A UTF-8 byte-order mark is skipped; any other encoding is refused (see
// SourceText), and so are lines that end in CR alone (classic Mac OS). Blank and whitespace-only lines outside a quoted field are
// never items and keep their line numbers. Errors are *InputError naming
// the line: a malformed record names the line where the record began (and
// where parsing stopped), a row with the wrong number of fields its line.
func ReadCSVDelimited(r io.Reader, keyField string, delimiter rune, emit func(SourceItem) error) error {
	return readCSV(r, keyField, delimiter, nil, emit)
}

// readCSV is ReadCSVDelimited with chk checking the items (and typing
// their cells by its schema).
func readCSV(r io.Reader, keyField string, delimiter rune, chk *Check, emit func(SourceItem) error) error {
	t, err := openCSV(r, keyField, delimiter)
	if err != nil || t == nil {
		return err
	}
	t.chk = chk
	if err := t.rows(0, emit); err != nil {
		return csvError(err, t.lr.line)
	}
	return nil
}

// csvTable is a CSV source past its header: the reader of its records,
// the header's columns (JSON-encoded) and the key column (-1: positional
// keys).
type csvTable struct {
	lr     *csvLines
	cr     *csv.Reader
	header []string
	delim  rune
	cols   [][]byte
	keyCol int
	chk    *Check // nil: no schema, the first bad record ends the read
	shape  *api.CSVShape
}

// openCSV reads a CSV source up to its header (see ReadCSVDelimited) and
// returns the table of its records; nil (and no error) when the source
// holds no header.
func openCSV(r io.Reader, keyField string, delimiter rune) (*csvTable, error) {
	lr := &csvLines{br: bufio.NewReaderSize(r, 64<<10)}
	if head, err := lr.br.Peek(3); err == nil && bytes.Equal(head, bom) {
		_, _ = lr.br.Discard(3)
	}
	headLine, sep, err := lr.start()
	if errors.Is(err, io.EOF) {
		return nil, nil // no header, no items
	}
	if err != nil {
		if ie := passInputError(err, lr.line+1, 0); ie != nil {
			return nil, ie
		}
		return nil, fmt.Errorf("read csv: %w", err)
	}
	headerAt := lr.line
	if countOutsideQuotes(bytes.TrimSuffix(bytes.TrimSuffix(headLine, newline), []byte{'\r'}), '\r') > 0 {
		// encoding/csv ends lines at '\n' only: the whole file would be
		// one header and no item.
		return nil, &api.InputError{Line: headerAt, Reason: "lines end in a carriage return alone (CR, as classic Mac OS and Excel's \"CSV (Macintosh)\" write them); save the file with LF or CRLF line endings"}
	}
	delim, err := chooseDelimiter(headLine, delimiter, sep, headerAt)
	if err != nil {
		return nil, err
	}
	cr := csv.NewReader(lr)
	cr.Comma = delim
	header, err := cr.Read()
	if err != nil {
		return nil, csvError(err, lr.line)
	}
	t, err := newCSVTable(lr, cr, header, delim, keyField)
	if err != nil {
		var ie *api.InputError
		if errors.As(err, &ie) && ie.Field == "" {
			ie.Line = headerAt
		}
	}
	return t, err
}

// csvPart is the table of a CSV part that begins at a record other than
// the header (a source read in parts): r starts at a record, and the
// delimiter and header are part 0's.
func csvPart(r io.Reader, keyField string, delim rune, header []string) (*csvTable, error) {
	lr := &csvLines{br: bufio.NewReaderSize(r, 64<<10)}
	cr := csv.NewReader(lr)
	cr.Comma = delim
	cr.FieldsPerRecord = len(header)
	return newCSVTable(lr, cr, header, delim, keyField)
}

// newCSVTable checks a header (UTF-8, no column empty or twice, keyField
// one of them)
// and returns the table reading its records from cr.
func newCSVTable(lr *csvLines, cr *csv.Reader, header []string, delim rune, keyField string) (*csvTable, error) {
	t := &csvTable{lr: lr, cr: cr, header: header, delim: delim, cols: make([][]byte, len(header)), keyCol: -1}
	seen := map[string]bool{}
	for i, h := range header {
		if !utf8.ValidString(h) {
			return nil, &api.InputError{Reason: notUTF8(fmt.Sprintf("header column %d", i+1), []byte(h))}
		}
		if h == "" {
			return nil, &api.InputError{Reason: fmt.Sprintf("header column %d is empty", i+1)}
		}
		if seen[h] {
			return nil, &api.InputError{Reason: fmt.Sprintf("header column %q appears twice", h)}
		}
		seen[h] = true
		t.cols[i], _ = json.Marshal(h)
		if h == keyField {
			t.keyCol = i
		}
	}
	if keyField != "" && t.keyCol < 0 {
		return nil, &api.InputError{Field: "key_field", Reason: fmt.Sprintf("%q is not a column of the CSV header (%s, separated by %s)", keyField, strings.Join(header, string(delim)), delimName(delim))}
	}
	t.shape = CSVShapeOf(string(delim), header)
	return t, nil
}

// CSVShapeOf is the api.CSVShape of a CSV table read with delim and
// header: the header kept only when its JSON is at most
// api.MaxCSVHeaderBytes.
func CSVShapeOf(delim string, header []string) *api.CSVShape {
	s := &api.CSVShape{Delimiter: delim}
	if b, _ := json.Marshal(header); len(b) <= api.MaxCSVHeaderBytes {
		s.Header = slices.Clone(header)
	}
	return s
}

// rows reads the records after the header, calling emit with each item;
// index is the positional index of the first (when keyed by position). A
// record encoding/csv refuses is returned as its *csv.ParseError (see
// csvError), its lines counted from the start of the table's reader;
// with t.chk's Bad set it is handed to Bad instead, as is a record with
// a cell that is not UTF-8, a bad key or a cell not of its column's type
// (t.chk's schema), and the read goes on.
func (t *csvTable) rows(index int64, emit func(SourceItem) error) error {
	var buf bytes.Buffer
	for {
		rec, err := t.cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			var pe *csv.ParseError
			if t.chk == nil || t.chk.Bad == nil || !errors.As(err, &pe) {
				return err
			}
			ie, ok := csvError(err, 0).(*api.InputError)
			if !ok {
				return err
			}
			if ie.Key == "" {
				ie.Key = api.Truncate(t.readKey(rec), 80)
			}
			if errors.Is(pe.Err, csv.ErrFieldCount) {
				ie.Reason = fmt.Sprintf("%d fields, the header has %d", len(rec), len(t.header))
				ie.Err = nil
			}
			key := t.rowKey(rec, &index)
			if err := t.chk.fault(ie, key, t.rowObject(rec)); err != nil {
				return err
			}
			continue
		}
		line, _ := t.cr.FieldPos(0)
		it, ie := t.item(rec, int64(line), &buf, index)
		index++
		if ie != nil {
			if err := t.chk.fault(ie, t.keyOf(rec, index-1), t.rowObject(rec)); err != nil {
				return err
			}
			continue
		}
		if err := t.chk.deliver(it, emit); err != nil {
			return err
		}
	}
}

// item is the item of record rec at line, its cells typed by the
// schema (t.chk), positional key index when keyed by position; or the
// *InputError of a cell that is not UTF-8 or not of its type, or of a
// bad key.
func (t *csvTable) item(rec []string, line int64, buf *bytes.Buffer, index int64) (SourceItem, *api.InputError) {
	for i, v := range rec {
		if !utf8.ValidString(v) {
			return SourceItem{}, &api.InputError{Line: line, Key: t.readKey(rec), Reason: notUTF8(fmt.Sprintf("column %q", t.header[i]), []byte(v))}
		}
	}
	var sch interface {
		Cell(column, value string) (json.RawMessage, bool, error)
	}
	if t.chk != nil && t.chk.Schema != nil {
		sch = t.chk.Schema
	}
	buf.Reset()
	buf.WriteByte('{')
	n := 0
	for i, v := range rec {
		var val json.RawMessage
		if sch != nil && i != t.keyCol {
			typed, ok, err := sch.Cell(t.header[i], v)
			if err != nil {
				return SourceItem{}, &api.InputError{Line: line, Key: t.readKey(rec), Field: "column/" + t.header[i], Reason: err.Error()}
			}
			if !ok {
				continue
			}
			val = typed
		} else {
			val, _ = json.Marshal(v)
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		buf.Write(t.cols[i])
		buf.WriteByte(':')
		buf.Write(val)
	}
	buf.WriteByte('}')
	var key string
	if t.keyCol >= 0 {
		key = rec[t.keyCol]
		if r := api.CheckKey(key); r != "" {
			return SourceItem{}, &api.InputError{Line: line, Key: api.Truncate(key, 80), Reason: r}
		}
	} else {
		key = api.PositionalKey(index)
	}
	return SourceItem{Key: key, Input: bytes.Clone(buf.Bytes()), Line: line, CSV: t.shape}, nil
}

// readKey is the key cell of rec when it is there and a valid key, for
// a problem's Key; else "".
func (t *csvTable) readKey(rec []string) string {
	if t.keyCol < 0 || t.keyCol >= len(rec) || api.CheckKey(rec[t.keyCol]) != "" {
		return ""
	}
	return rec[t.keyCol]
}

// keyOf is the key a bad record runs under: its key cell when valid, its
// positional key index without a key column, else "" (LineKey).
func (t *csvTable) keyOf(rec []string, index int64) string {
	if t.keyCol < 0 {
		return api.PositionalKey(index)
	}
	return t.readKey(rec)
}

// rowKey is keyOf for a record encoding/csv refused, taking its
// positional index.
func (t *csvTable) rowKey(rec []string, index *int64) string {
	if t.keyCol < 0 {
		k := api.PositionalKey(*index)
		*index++
		return k
	}
	return t.readKey(rec)
}

// extraColumnFormat names a bad record's cell past the header's columns
// in its input (rowObject): its 1-based column.
const extraColumnFormat = "_column_%d"

// ExtraColumn reports whether name is the name rowObject gives a bad
// record's cell past the header's columns, and its 1-based column.
func ExtraColumn(name string) (int, bool) {
	var n int
	if _, err := fmt.Sscanf(name, extraColumnFormat, &n); err != nil || n < 1 || fmt.Sprintf(extraColumnFormat, n) != name {
		return 0, false
	}
	return n, true
}

// rowObject is a bad record as JSON: header → cell for the fields it has
// (cells as strings, invalid UTF-8 as U+FFFD; cells past the header as
// "_column_N").
func (t *csvTable) rowObject(rec []string) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, v := range rec {
		if i > 0 {
			b.WriteByte(',')
		}
		if i < len(t.cols) {
			b.Write(t.cols[i])
		} else {
			name, _ := json.Marshal(fmt.Sprintf(extraColumnFormat, i+1))
			b.Write(name)
		}
		b.WriteByte(':')
		val, _ := json.Marshal(strings.ToValidUTF8(v, "\uFFFD"))
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// chooseDelimiter decides the delimiter of a CSV whose header is the
// physical line head (at line headerAt): see ReadCSVDelimited.
// DetectedDelimiter is the delimiter a read without csv_delimiter and
// without a sep= line takes from the header line head (see
// ReadCSVDelimited); false when it cannot tell (as many of two
// candidates). A writer whose delimiter this does not detect begins the
// file with "sep=X".
func DetectedDelimiter(head []byte) (rune, bool) {
	d, err := chooseDelimiter(head, 0, 0, 0)
	return d, err == nil
}

func chooseDelimiter(head []byte, given, sep rune, headerAt int64) (rune, error) {
	d := given
	if sep != 0 {
		if given != 0 && given != sep {
			return 0, &api.InputError{Line: 1, Reason: fmt.Sprintf("the file's first line says sep=%c but csv_delimiter is %s", sep, delimName(given))}
		}
		d = sep
	}
	counts := make([]int, len(csvCandidates))
	for i, c := range csvCandidates {
		counts[i] = countOutsideQuotes(head, c)
	}
	if d != 0 {
		if countOutsideQuotes(head, d) > 0 {
			return d, nil
		}
		for i, c := range csvCandidates {
			if c != d && counts[i] > 0 {
				return 0, &api.InputError{Line: headerAt, Reason: fmt.Sprintf("the header %q holds no %s but %d × %s: it looks separated by %s; set csv_delimiter to %s (or begin the file with the line sep=%c)",
					api.Truncate(strings.TrimRight(string(head), "\r\n"), 80), delimName(d), counts[i], delimName(c), delimName(c), delimName(c), c)}
			}
		}
		return d, nil // one column
	}
	best := -1
	for i := range csvCandidates {
		switch {
		case counts[i] == 0:
		case best < 0 || counts[i] > counts[best]:
			best = i
		case counts[i] == counts[best]:
			return 0, &api.InputError{Line: headerAt, Reason: fmt.Sprintf("cannot tell the delimiter: the header %q holds as many %s as %s; set csv_delimiter (or begin the file with a line such as sep=;)",
				api.Truncate(strings.TrimRight(string(head), "\r\n"), 80), delimName(csvCandidates[best]), delimName(csvCandidates[i]))}
		}
	}
	if best < 0 {
		return ',', nil // one column
	}
	return csvCandidates[best], nil
}

// countOutsideQuotes counts r in line outside double-quoted fields.
func countOutsideQuotes(line []byte, r rune) int {
	n, quoted := 0, false
	for _, c := range string(line) {
		switch {
		case c == '"':
			quoted = !quoted
		case c == r && !quoted:
			n++
		}
	}
	return n
}

// sepLine reads Excel's delimiter line "sep=X" (also quoted, or padded
// with more X as a re-saved sheet writes it).
func sepLine(l []byte) (rune, bool) {
	s := strings.TrimRight(string(l), "\r\n")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	if len(s) < 5 || !strings.EqualFold(s[:4], "sep=") {
		return 0, false
	}
	r, n := utf8.DecodeRuneInString(s[4:])
	if r == utf8.RuneError || r == '"' || strings.Trim(s[4+n:], string(r)) != "" {
		return 0, false
	}
	return r, true
}

// csvLines feeds encoding/csv physical lines of the source, with a sep=
// first line and whitespace-only lines outside a quoted field replaced by
// empty lines: encoding/csv skips empty lines and still counts them, so
// line numbers stay those of the file. Memory: one line.
type csvLines struct {
	br      *bufio.Reader
	buf     bytes.Buffer
	pending []byte
	inQuote bool  // a quoted field continues past the last line read
	line    int64 // physical lines read
	bytes   int64 // bytes of the lines read
	headAt  int64 // bytes before the header's first line (start)
	err     error // sticky: io.EOF at the end
}

var newline = []byte{'\n'}

// next reads the next physical line, with its '\n' when it has one.
func (c *csvLines) next() ([]byte, error) {
	c.buf.Reset()
	for {
		frag, err := c.br.ReadSlice('\n')
		c.buf.Write(frag)
		if c.buf.Len() > MaxLineBytes {
			return nil, &api.InputError{Line: c.line + 1, Reason: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)}
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && c.buf.Len() > 0 {
			break
		}
		return nil, err
	}
	c.line++
	c.bytes += int64(c.buf.Len())
	return c.buf.Bytes(), nil
}

// filter returns what encoding/csv is given of line l.
func (c *csvLines) filter(l []byte) []byte {
	if !c.inQuote && len(bytes.TrimSpace(l)) == 0 {
		if bytes.HasSuffix(l, newline) {
			return newline
		}
		return nil
	}
	if bytes.Count(l, []byte{'"'})%2 == 1 {
		c.inQuote = !c.inQuote
	}
	return l
}

// start reads up to the header's first physical line and returns it, with
// the delimiter a sep= first line names (0 if none). io.EOF: no header.
func (c *csvLines) start() (head []byte, sep rune, err error) {
	var prefix []byte
	for {
		l, err := c.next()
		if err != nil {
			return nil, 0, err
		}
		if c.line == 1 {
			if r, ok := sepLine(l); ok {
				sep = r
				prefix = append(prefix, '\n')
				continue
			}
		}
		blank := len(bytes.TrimSpace(l)) == 0
		prefix = append(prefix, c.filter(l)...)
		if blank {
			continue
		}
		c.pending = prefix
		c.headAt = c.bytes - int64(len(l))
		return prefix[len(prefix)-len(l):], sep, nil
	}
}

// Read implements io.Reader for encoding/csv.
func (c *csvLines) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		l, err := c.next()
		if err != nil {
			c.err = err
			continue
		}
		c.pending = c.filter(l)
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// csvError turns an error of encoding/csv into an *InputError naming the
// line where the record began; at is the last physical line read.
func csvError(err error, at int64) error {
	if ie := passInputError(err, at, 0); ie != nil {
		return ie
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		start := pe.StartLine
		if start == 0 {
			start = pe.Line
		}
		reason := "malformed CSV"
		if pe.Line != start {
			reason = fmt.Sprintf("malformed CSV in the record that begins on this line (parsing stopped at line %d, column %d)", pe.Line, pe.Column)
		}
		if errors.Is(pe.Err, csv.ErrQuote) {
			reason += ": a quoted field is not closed, or a quote inside it is not doubled"
			return &api.InputError{Line: int64(start), Reason: reason}
		}
		return &api.InputError{Line: int64(start), Reason: reason, Err: pe.Err}
	}
	return fmt.Errorf("read csv: %w", err)
}
