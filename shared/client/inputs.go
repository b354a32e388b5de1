package client

import (
	"bytes"
	"fmt"
	"io"

	"github.com/bulkrun/bulkrun/shared/api"
)

// InputsWritten is what WriteInputPages wrote: the inputs (Count), in how
// many pages, in which format (api.FormatCSV or api.FormatJSONL; "" when
// no page came).
type InputsWritten struct {
	Count, Pages int
	Format       string
}

// WriteInputPages writes every page page returns (GET
// /batches/{id}/inputs, from cursor "" until a page's NextCursor is "")
// to w one after another as one file, ready to hand to a correction: a
// CSV page's header record once, at the top (a later page whose header is
// not the first's is an error: a batch submitted before CSV headers were
// kept, whose pages name their own columns), JSON Lines as they come.
// Each page is written as it comes: an error after the first leaves the
// pages before it written (Count says how many inputs).
func WriteInputPages(w io.Writer, page func(cursor string) (api.InputPage, error)) (InputsWritten, error) {
	var done InputsWritten
	var header []byte
	cursor := ""
	for {
		p, err := page(cursor)
		if err != nil {
			return done, err
		}
		done.Pages++
		body := p.Body
		if done.Format = p.Format; p.Format == api.FormatCSV {
			h := body[:csvHeaderLen(body)]
			switch {
			case done.Pages == 1:
				header = h
			case !bytes.Equal(h, header):
				return done, fmt.Errorf("inputs page %d: its CSV header %q is not the first page's %q (some items' inputs have columns others lack — rows with more cells than the header, kept as _column_N — or the batch predates kept CSV headers): export fewer items at a time, or list them instead", done.Pages, bytes.TrimSpace(h), bytes.TrimSpace(header))
			default:
				body = body[len(h):]
			}
		}
		if _, err := w.Write(body); err != nil {
			return done, err
		}
		done.Count += p.Count
		if cursor = p.NextCursor; cursor == "" {
			return done, nil
		}
	}
}

// csvHeaderLen is the length of the head of the CSV text b: a first line
// "sep=X" when there is one, then the first record, its line end included
// (up to the first line feed outside a quoted field; RFC 4180: a quote
// inside a quoted field is doubled, which toggles twice), or all of b.
func csvHeaderLen(b []byte) int {
	n := 0
	if bytes.HasPrefix(b, []byte("sep=")) {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return len(b)
		}
		n = i + 1
	}
	return n + firstRecordLen(b[n:])
}

// firstRecordLen is the length of the first CSV record of b, its line
// end included, or all of b.
func firstRecordLen(b []byte) int {
	quoted := false
	for i, c := range b {
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\n' && !quoted:
			return i + 1
		}
	}
	return len(b)
}
