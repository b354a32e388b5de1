package client

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// TestWriteInputPages guards how the pages of GET /batches/{id}/inputs
// become one file: a CSV header once (a quoted header cell with a line
// break or doubled quotes and a ; delimiter included), an empty page in
// between, the count summed; JSON Lines as they come; a later page with
// another header, and a page's error, end it.
func TestWriteInputPages(t *testing.T) {
	serve := func(pages ...api.InputPage) func(string) (api.InputPage, error) {
		return func(cursor string) (api.InputPage, error) {
			i := 0
			if cursor != "" {
				i = int(cursor[0] - '0')
			}
			if i >= len(pages) {
				return api.InputPage{}, errors.New("no such page")
			}
			p := pages[i]
			if i+1 < len(pages) {
				p.NextCursor = string(rune('0' + i + 1))
			}
			return p, nil
		}
	}
	h := "\"i\nd\";\"n\"\"m\"\n"
	var out bytes.Buffer
	done, err := WriteInputPages(&out, serve(
		api.InputPage{Format: api.FormatCSV, Body: []byte(h + "a;\"x;y\"\n"), Count: 1},
		api.InputPage{Format: api.FormatCSV, Body: []byte(h), Count: 0},
		api.InputPage{Format: api.FormatCSV, Body: []byte(h + "b;z\nc;w\n"), Count: 2}))
	if err != nil || done != (InputsWritten{Count: 3, Pages: 3, Format: api.FormatCSV}) || out.String() != h+"a;\"x;y\"\nb;z\nc;w\n" {
		t.Fatalf("CSV: %+v %v %q", done, err, out.String())
	}
	out.Reset()
	done, err = WriteInputPages(&out, serve(api.InputPage{Format: api.FormatJSONL, Body: []byte("{\"a\":1}\n"), Count: 1}, api.InputPage{Format: api.FormatJSONL, Body: []byte("2\n"), Count: 1}))
	if err != nil || done.Count != 2 || out.String() != "{\"a\":1}\n2\n" {
		t.Fatalf("JSON Lines: %+v %v %q", done, err, out.String())
	}
	out.Reset()
	done, err = WriteInputPages(&out, serve(api.InputPage{Format: api.FormatCSV, Body: []byte("sep=|\nid|n\na|1\n"), Count: 1}, api.InputPage{Format: api.FormatCSV, Body: []byte("sep=|\nid|n\nb|2\n"), Count: 1}))
	if err != nil || done.Count != 2 || out.String() != "sep=|\nid|n\na|1\nb|2\n" {
		t.Fatalf("CSV with a sep= line: %+v %v %q", done, err, out.String())
	}
	_, err = WriteInputPages(&out, serve(api.InputPage{Format: api.FormatCSV, Body: []byte("id\na\n"), Count: 1}, api.InputPage{Format: api.FormatCSV, Body: []byte("other\nb\n"), Count: 1}))
	if err == nil || !strings.Contains(err.Error(), "not the first page's") {
		t.Errorf("another header: %v", err)
	}
}
