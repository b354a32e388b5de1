package source

// Reading a source in parts: one part of a JSON Lines or CSV object, a
// byte range [lo, hi), read by an invocation of its own (submit's parts,
// shared/submit/parts.go). A record belongs to the part its first byte
// is in; a part ends with the record that holds byte hi-1. A CSV record
// may hold newlines inside quoted fields (RFC 4180 §2.6), so where a
// part's first record starts depends on the quotes before it, which the
// part does not read: its start state (PartStartUnknown guesses it). The
// items a part gives, and the refusal of a malformed record, are those a
// whole read gives, their lines counted from the part's first line.

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Where a CSV part's first byte lies (PartEvent.Start). A quoted field may
// hold a newline (RFC 4180 §2.6), so where a part's first record begins
// depends on the quotes before it, which the part does not read: the
// parity of the '"' bytes before it (every quote opens, closes or doubles
// inside a quoted field, so an odd count is inside one).
const (
	// PartStartUnknown: the part guesses that the first newline after its
	// first byte ends a record (as in JSON Lines), reads from there and
	// records the guess; the assembly re-reads a part that guessed wrong
	// (its first newline was inside a quoted field), as PartStartOutside
	// or PartStartInside, from the quote parities of the parts before it.
	PartStartUnknown = 0
	// PartStartOutside: an even number of quotes precede the part's first byte.
	PartStartOutside = 1
	// PartStartInside: an odd number.
	PartStartInside = 2
)

// PartStartOf is the start state of a part whose first byte is (true) or
// is not inside a quoted field.
func PartStartOf(inQuote bool) int {
	if inQuote {
		return PartStartInside
	}
	return PartStartOutside
}

// Records is how the records of a source read in parts are read, in
// every part alike: its format ("" or jsonl, or csv), its key field and,
// for CSV, the request's csv_delimiter (part 0 reads its header as a whole
// read does) and the delimiter and header part 0 found (read once, given
// to the other parts). JSON: {"key_field", "format", "csv_delimiter",
// "delimiter", "header"}, as a part plan stores it.
type Records struct {
	KeyField string `json:"key_field"`
	// Format is the source's format: "" or jsonl, or csv.
	Format       string   `json:"format,omitempty"`
	CSVDelimiter string   `json:"csv_delimiter,omitempty"`
	Delimiter    string   `json:"delimiter,omitempty"`
	Header       []string `json:"header,omitempty"`
}

// CSV reports whether the source is CSV.
func (rec Records) CSV() bool { return rec.Format == api.FormatCSV }

// PartError is the refusal of a part (an *api.InputError, or a record
// encoding/csv refused), its lines counted in the part: stored with the
// part's result and turned into the batch's refusal by InputError once
// the lines before the part are known. JSON as its tags.
type PartError struct {
	Field  string `json:"field,omitempty"`
	Line   int64  `json:"line,omitempty"`
	Key    string `json:"key,omitempty"`
	Reason string `json:"reason"`
	Err    string `json:"err,omitempty"`
	Empty  bool   `json:"empty,omitempty"`
	// A record encoding/csv refused (Err its error): the lines where the
	// record began and where parsing stopped, and the column, counted in
	// the part.
	CSVStart  int64 `json:"csv_start,omitempty"`
	CSVStop   int64 `json:"csv_stop,omitempty"`
	CSVColumn int   `json:"csv_column,omitempty"`
}

// PartFault returns the refusal of a part's read error: an *InputError or
// a record encoding/csv refused; ok is false for any other error.
func PartFault(err error) (*PartError, bool) {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &PartError{CSVStart: int64(pe.StartLine), CSVStop: int64(pe.Line), CSVColumn: pe.Column, Err: pe.Err.Error()}, true
	}
	var ie *api.InputError
	if !errors.As(err, &ie) {
		return nil, false
	}
	e := &PartError{Field: ie.Field, Line: ie.Line, Key: ie.Key, Reason: ie.Reason}
	if ie.Err != nil {
		e.Err = ie.Err.Error()
		e.Empty = errors.Is(ie.Err, api.ErrEmptySource)
	}
	return e, true
}

// csvErrors are encoding/csv's errors by their text, so a part's refusal
// names the same error a whole read does.
var csvErrors = map[string]error{}

func init() {
	for _, e := range []error{csv.ErrBareQuote, csv.ErrQuote, csv.ErrFieldCount} {
		csvErrors[e.Error()] = e
	}
}

// InputError is the refusal as a whole read gives it, lineBase being
// the lines of the source before the part.
func (e *PartError) InputError(lineBase int64) *api.InputError {
	if e.CSVStop > 0 {
		cause, ok := csvErrors[e.Err]
		if !ok {
			cause = errors.New(e.Err)
		}
		start := e.CSVStart
		if start > 0 {
			start += lineBase
		}
		var ie *api.InputError
		errors.As(csvError(&csv.ParseError{StartLine: int(start), Line: int(e.CSVStop + lineBase), Column: e.CSVColumn, Err: cause}, 0), &ie)
		ie.Field = "source.object"
		return ie
	}
	ie := &api.InputError{Field: e.Field, Key: e.Key, Reason: e.Reason}
	if ie.Field == "" {
		ie.Field = "source.object"
	}
	if e.Line > 0 {
		ie.Line = e.Line + lineBase
	}
	if e.Err != "" {
		ie.Err = errors.New(e.Err)
	}
	if e.Empty {
		ie.Err = api.ErrEmptySource
	}
	return ie
}

// PartReader yields the bytes of one part: from the first record that
// starts at or after lo (the start of the object for part 0) through the
// record that holds byte hi-1, and counts its newlines. A JSON Lines
// record is a line; a CSV record ends at a newline outside a quoted
// field, which the reader tells by the parity of the quotes since the
// part's start (see PartStartUnknown).
type PartReader struct {
	br     *bufio.Reader
	csv    bool
	pos    int64 // offset in the object of the next byte
	hi     int64
	lastNL bool
	done   bool
	lines  int64
	q      bool // CSV: an odd number of quotes since the part's first record
	in     bool // CSV: the start assumed: byte lo inside a quoted field
	odd    bool // CSV: an odd number of quotes in [lo, hi)
}

// OpenPart returns a reader of the part [lo, hi) of an object read from
// r, which holds the object's bytes from lo-1 (from 0 for the first part,
// lo = 0) to its end or past hi's record; start is the part's start state
// (PartStartUnknown, PartStartOutside, PartStartInside; ignored for
// JSON Lines). It reads up to the part's first record.
func OpenPart(r io.Reader, rec Records, lo, hi int64, start int) (*PartReader, error) {
	from := lo
	if lo > 0 {
		from = lo - 1 // to tell whether a record starts at lo
	}
	pr := &PartReader{br: bufio.NewReaderSize(r, 256<<10), csv: rec.CSV(), pos: from, hi: hi, lastNL: true, in: start == PartStartInside}
	if lo > 0 {
		if err := pr.skip(start); err != nil {
			return nil, err
		}
	}
	return pr, nil
}

// skip passes the bytes from lo-1 to the part's first record: after the
// first newline that ends a record (any newline in JSON Lines; in CSV one
// outside a quoted field by the start state, or, the state unknown, the
// first newline, the state taken to be the one it ends a record in). A
// part with no such newline before hi holds no record.
func (r *PartReader) skip(start int) error {
	c, err := r.br.ReadByte() // byte lo-1
	if err != nil {
		if errors.Is(err, io.EOF) {
			r.done = true
			return nil
		}
		return err
	}
	r.pos++
	if c == '\n' && !r.in {
		return nil // a record starts at lo
	}
	rel := false // an odd number of quotes in [lo, pos)
	for {
		if r.pos >= r.hi {
			r.done = true // no record starts in the part
			return nil
		}
		c, err := r.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				r.done = true
				return nil
			}
			return err
		}
		r.pos++
		switch {
		case c == '"' && r.csv:
			rel = !rel
			r.odd = !r.odd
		case c != '\n':
		case !r.csv:
			return nil
		case start == PartStartUnknown:
			r.in = rel // this newline ends a record
			return nil
		case r.in == rel: // outside a quoted field
			return nil
		}
	}
}

// Read reads the part's bytes, through the end of the record that holds
// byte hi-1.
func (r *PartReader) Read(p []byte) (int, error) {
	if r.done || len(p) == 0 {
		if r.done {
			return 0, io.EOF
		}
		return 0, nil
	}
	if r.pos < r.hi {
		n, err := r.br.Read(p[:min(int64(len(p)), r.hi-r.pos)])
		r.account(p[:n])
		if r.csv {
			quotes := bytes.Count(p[:n], []byte{'"'})
			r.q = r.q != (quotes%2 == 1)
			r.odd = r.odd != (quotes%2 == 1)
		}
		if errors.Is(err, io.EOF) {
			r.done = true
			if n > 0 {
				err = nil
			}
		}
		return n, err
	}
	if r.lastNL && !r.q {
		r.done = true
		return 0, io.EOF
	}
	// Past hi: finish the record that crosses it.
	n := 0
	for n < len(p) {
		c, err := r.br.ReadByte()
		if err != nil {
			r.done = true
			if errors.Is(err, io.EOF) {
				break
			}
			return n, err
		}
		p[n] = c
		n++
		if c == '"' && r.csv {
			r.q = !r.q
		}
		if c == '\n' && !r.q {
			r.done = true
			break
		}
	}
	r.account(p[:n])
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// QuoteParity reads what is left of the part's bytes [lo, hi) and
// returns whether they hold an odd number of quotes (false in JSON Lines).
func (r *PartReader) QuoteParity() (bool, error) {
	if !r.csv {
		return false, nil
	}
	buf := make([]byte, 64<<10)
	for r.pos < r.hi {
		n, err := r.br.Read(buf[:min(int64(len(buf)), r.hi-r.pos)])
		r.pos += int64(n)
		r.odd = r.odd != (bytes.Count(buf[:n], []byte{'"'})%2 == 1)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, err
		}
	}
	return r.odd, nil
}

func (r *PartReader) account(b []byte) {
	if len(b) == 0 {
		return
	}
	r.pos += int64(len(b))
	r.lines += int64(bytes.Count(b, []byte{'\n'}))
	r.lastNL = b[len(b)-1] == '\n'
}

// Lines is the newlines read so far: after a whole part, the part's.
func (r *PartReader) Lines() int64 { return r.lines }

// InQuote is the start state the part was read from: its first byte
// inside a quoted field (CSV; a PartStartUnknown guess included).
func (r *PartReader) InQuote() bool { return r.in }

// QuoteOdd reports an odd number of quotes in the part's bytes [lo, hi)
// read so far (CSV).
func (r *PartReader) QuoteOdd() bool { return r.odd }

// ReadPart reads the records of the part pr (first: the source's first
// part), calling emit with each item, its line counted from the part's
// first line; base is the positional index of its first item (a source
// without key field). A record encoding/csv refuses is its
// *csv.ParseError (see PartFault). It reads the part to its end, so that
// pr.Lines counts every line.
func (rec Records) ReadPart(pr *PartReader, first bool, base int64, emit func(SourceItem) error) error {
	var text io.Reader = pr
	if first {
		br, _, err := decodeSource(pr)
		if err != nil {
			return err
		}
		text = br
	}
	var err error
	switch {
	case rec.CSV():
		err = rec.readCSVPart(text, first, base, emit)
	default:
		err = readJSONL(text, rec.KeyField, first, base, nil, emit)
	}
	if err == nil {
		// Drain what the parser left (blank trailing bytes) so lines counts them.
		_, err = io.Copy(io.Discard, pr)
	}
	return err
}

// readCSVPart reads the records of a CSV part: part 0 from its header, as
// a whole read does; another with part 0's delimiter and header.
func (rec Records) readCSVPart(text io.Reader, first bool, base int64, emit func(SourceItem) error) error {
	var t *csvTable
	var err error
	if first {
		given, perr := api.ParseCSVDelimiter(rec.CSVDelimiter)
		if perr != nil {
			return &api.InputError{Field: "source.csv_delimiter", Reason: perr.Error()}
		}
		t, err = openCSV(text, rec.KeyField, given)
	} else {
		delim, _ := utf8.DecodeRuneInString(rec.Delimiter)
		t, err = csvPart(text, rec.KeyField, delim, rec.Header)
	}
	if err != nil || t == nil {
		return err
	}
	err = t.rows(base, emit)
	var pe *csv.ParseError
	if err != nil && !errors.As(err, &pe) {
		return csvError(err, t.lr.line)
	}
	return err
}

// CSVHead reads the delimiter and header of a CSV object from r (the
// object from its first byte) as a whole read does, reading no further
// than the header; a nil header (and no error) when the first part,
// partBytes long, does not hold the first byte of a header a whole read
// accepts (the parts then read nothing, and the whole read refuses the
// source or reads it).
func (rec Records) CSVHead(r io.Reader, partBytes int64) (rune, []string, error) {
	given, err := api.ParseCSVDelimiter(rec.CSVDelimiter)
	if err != nil {
		return 0, nil, nil
	}
	text, _, err := decodeSource(r)
	if err != nil {
		var ie *api.InputError
		if errors.As(err, &ie) {
			return 0, nil, nil
		}
		return 0, nil, err
	}
	t, err := openCSV(text, rec.KeyField, given)
	if err != nil {
		var ie *api.InputError
		var pe *csv.ParseError
		if errors.As(err, &ie) || errors.As(err, &pe) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, nil
		}
		return 0, nil, err
	}
	if t == nil || t.lr.headAt+2*int64(len(bom)) >= partBytes {
		return 0, nil, nil // the header begins past part 0 (byte-order marks aside)
	}
	return t.delim, t.header, nil
}

// PartCount is what counting a part found (a source without key field):
// batches/{id}/parts/{plan}/count-NNNNN.json.
// PartCount is what counting a part found (Records.CountPart), as a part
// count stores it: JSON as its tags.
type PartCount struct {
	Part int `json:"part"`
	// Items are the items the part holds if its first byte is outside
	// ([0]) or inside ([1]) a quoted field (JSON Lines: both the same).
	Items [2]int64 `json:"items"`
	// QuoteOdd: an odd number of '"' in the part's bytes (CSV).
	QuoteOdd bool `json:"quote_odd,omitempty"`
}

// CountPart counts the items of the part [lo, hi) read from r (see
// OpenPart for where r starts) without parsing them: the
// records that begin in [lo, hi) on a line holding more than white space
// (what a read makes an item, or refuses), each way its first byte may
// lie in CSV; part 0 without its byte-order marks, a CSV part 0 without
// its sep= line and header. A source whose part is malformed may count
// wrong; its read refuses it, before any item of a later part matters.
func (rec Records) CountPart(r io.Reader, lo, hi int64) (PartCount, error) {
	var c PartCount
	from := lo
	if lo > 0 {
		from = lo - 1
	}
	br := bufio.NewReaderSize(r, 256<<10)
	pos := from
	atStart := true // the next byte begins a line
	if lo > 0 {
		c0, err := br.ReadByte()
		if err != nil {
			return c, err
		}
		pos++
		atStart = c0 == '\n'
	} else {
		for range 2 { // the byte-order marks a whole read skips
			if head, err := br.Peek(len(bom)); err == nil && bytes.Equal(head, bom) {
				_, _ = br.Discard(len(bom))
				pos += int64(len(bom))
			}
		}
	}
	rel := false // an odd number of quotes in [lo, pos)
	header := !rec.CSV() || lo > 0
	var line bytes.Buffer
	for n := int64(1); pos < hi; n++ {
		line.Reset()
		startsLine, relAt, eof := atStart, rel, false
		for {
			frag, err := br.ReadSlice('\n')
			if rec.CSV() {
				before := frag[:max(0, min(int64(len(frag)), hi-pos))]
				rel = rel != (bytes.Count(frag, []byte{'"'})%2 == 1)
				c.QuoteOdd = c.QuoteOdd != (bytes.Count(before, []byte{'"'})%2 == 1)
			}
			pos += int64(len(frag))
			if line.Len() <= MaxLineBytes {
				line.Write(frag)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				eof = true
			} else if err != nil {
				return c, err
			}
			break
		}
		atStart = !eof
		blank := line.Len() <= MaxLineBytes && len(bytes.TrimSpace(line.Bytes())) == 0
		if startsLine && !blank {
			for q := range 2 {
				if (q == 1) == relAt { // the line begins outside a quoted field
					c.Items[q]++
				}
			}
			if !header && !relAt { // CSV part 0: the sep= line and the header are no items
				if _, sep := sepLine(line.Bytes()); !sep || n > 1 {
					header = true
				}
				c.Items[0]--
			}
		}
		if eof {
			break
		}
	}
	if !rec.CSV() {
		c.Items[1] = c.Items[0]
	}
	return c, nil
}
