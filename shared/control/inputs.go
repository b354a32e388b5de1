package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// InputPageBytes bounds the inputs of one page of Inputs: at most 2 MiB
// (2,097,152 bytes) of inputs as the manifest holds them, and at least
// one input whatever its size. As ItemPageBytes, it keeps the page within
// the 6 MB of a synchronous Lambda response once the function's JSON
// escapes it.
const InputPageBytes = ItemPageBytes

// maxManifestLine is the longest manifest line Inputs reads: a source
// line is at most source.MaxLineBytes, and its manifest line can be
// longer by its key and the escaping of a CSV row's cells.
const maxManifestLine = 2 * source.MaxLineBytes

// Inputs is a page of the current inputs of the batch's items of outcome
// (failed when ""; failed or quarantined: api.InputOutcomes), in the
// source's own format, ready to edit and hand to a correction: a CSV
// source's as CSV (the source's header, then a record per item, with the
// source's delimiter, Batch.CSV), any other source's as JSON Lines (each
// item's input compacted, one a line). A corrected item's input is its
// last correction's.
//
// Pages follow Items: up to limit items (default 100, 1–1,000) in key
// order after cursor (opaque, from the previous page's NextCursor), and at
// most InputPageBytes of inputs (a page cut by bytes goes on after its
// last item); within a page the inputs are in source order. Each page
// reads the batch's manifest from its start until it has found the
// page's items: memory is one page and one manifest line, whatever the
// batch's size.
//
// Errors: *api.InputError naming outcome, limit or cursor; ErrNotFound
// (ErrExpired past the retention); ErrConflict (wrapped) for a batch with
// positional keys, whose inputs name no key to correct them by; an
// error naming the keys the manifest lacks (the ledger and the manifest
// disagree), or the manifest line it could not read.
func (c *Control) Inputs(ctx context.Context, id string, outcome api.Outcome, cursor string, limit int) (api.InputPage, error) {
	if outcome == "" {
		outcome = api.OutcomeFailed
	}
	if !slices.Contains(api.InputOutcomes, outcome) {
		return api.InputPage{}, &api.InputError{Field: "outcome", Reason: fmt.Sprintf("%q: want failed or quarantined (the outcomes a correction takes)", outcome)}
	}
	b, err := c.Get(ctx, id)
	if err != nil {
		return api.InputPage{}, err
	}
	if b.KeyField == "" {
		return api.InputPage{}, fmt.Errorf("inputs of %s: the batch has positional keys (item-0000000000, …), its inputs name no key to correct them by; list its items instead: %w", id, api.ErrConflict)
	}
	q, err := readItemsQuery(outcome, cursor, limit)
	if err != nil {
		return api.InputPage{}, err
	}
	items, err := c.itemsOf(ctx, b, q) // the batch as read above
	if err != nil {
		return api.InputPage{}, err
	}
	p := api.InputPage{Format: api.FormatJSONL, NextCursor: items.NextCursor}
	if b.SourceFormat == api.FormatCSV {
		p.Format = api.FormatCSV
	}
	keys := make([]string, len(items.Items))
	for i, it := range items.Items {
		keys[i] = it.Key
	}
	var found []pageInput
	if len(keys) > 0 {
		manifest := b.ManifestKey // with corrections, the last one's merged manifest
		if n := len(b.Revisions); n > 0 {
			manifest = b.Revisions[n-1].ManifestKey
		}
		r, err := c.Blobs.Open(ctx, c.Blobs.Bucket(), manifest)
		if err != nil {
			return api.InputPage{}, fmt.Errorf("inputs of %s: manifest %s: %w", id, manifest, err)
		}
		defer r.Close()
		var hi int
		found, hi, err = pickInputs(r, keys, InputPageBytes)
		if err != nil {
			return api.InputPage{}, fmt.Errorf("inputs of %s: manifest %s: %w", id, manifest, err)
		}
		if hi < len(keys) {
			p.NextCursor = itemCursor(keys[hi-1])
		}
	}
	var body bytes.Buffer
	if p.Format == api.FormatCSV {
		err = writeInputsCSV(&body, found, b.CSV)
	} else {
		err = writeInputsJSONL(&body, found)
	}
	if err != nil {
		return api.InputPage{}, fmt.Errorf("inputs of %s: %w", id, err)
	}
	p.Body, p.Count = body.Bytes(), len(found)
	return p, nil
}

// pageInput is an item's input as its manifest line holds it.
type pageInput struct {
	key   string
	input json.RawMessage
}

// pickInputs reads manifest (JSON Lines of source.ManifestLine, in source
// order) for the inputs of keys (a page of keys in key order), in
// manifest order, at most maxBytes of them but at least one: when they
// would be more, the page ends before the last keys (hi: the page is
// keys[:hi]). It stops reading once every key of the page is found. A key
// of the page the manifest lacks is an error naming it (and up to four
// more).
func pickInputs(manifest io.Reader, keys []string, maxBytes int) ([]pageInput, int, error) {
	rank := make(map[string]int, len(keys))
	for i, k := range keys {
		rank[k] = i
	}
	hi := len(keys)
	var found []pageInput
	have := make(map[int]bool, len(keys))
	size := 0
	r := bufio.NewReaderSize(manifest, 64<<10)
	for line := int64(1); len(have) < hi; line++ {
		b, err := r.ReadBytes('\n')
		if len(b) > maxManifestLine {
			return nil, 0, fmt.Errorf("manifest line %d: longer than %d bytes", line, maxManifestLine)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			var l source.ManifestLine
			if jerr := json.Unmarshal(b, &l); jerr != nil {
				return nil, 0, fmt.Errorf("manifest line %d: %w", line, jerr)
			}
			if i, ok := rank[l.Key]; ok && i < hi && !have[i] {
				have[i] = true
				found = append(found, pageInput{key: l.Key, input: l.Input})
				size += len(l.Input)
				for size > maxBytes && len(found) > 1 {
					// Over the page's bytes: drop the page's last key found.
					last := 0
					for j, f := range found {
						if rank[f.key] > rank[found[last].key] {
							last = j
						}
					}
					hi = rank[found[last].key]
					size -= len(found[last].input)
					found = slices.Delete(found, last, last+1)
					for k := range have {
						if k >= hi {
							delete(have, k)
						}
					}
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if len(have) < hi {
		var missing []string
		for _, k := range keys[:hi] {
			if !have[rank[k]] {
				missing = append(missing, k)
			}
		}
		return nil, 0, fmt.Errorf("%s of the page not in the manifest: %s", api.Count(len(missing), "key"), strings.Join(missing[:min(len(missing), 5)], ", "))
	}
	return found, hi, nil
}

// writeInputsJSONL writes each input compacted, one a line.
func writeInputsJSONL(w *bytes.Buffer, inputs []pageInput) error {
	for _, in := range inputs {
		if err := json.Compact(w, in.input); err != nil {
			return fmt.Errorf("input of %s: %w", in.key, err)
		}
		w.WriteByte('\n')
	}
	return nil
}

// writeInputsCSV writes inputs (JSON objects, as a CSV source's rows are
// read: column → cell) as CSV (RFC 4180, encoding/csv) with shape's
// delimiter ("," when shape is nil): a header of shape's columns (when
// kept; else, and after them, every column in the order the inputs first
// hold it), then a record per input — a bad row's cells past the kept
// header's columns ("_column_N", source.ExtraColumn) after the header's
// in its record alone, as its line held them —; a string cell as it is, a number or
// boolean as its JSON text, null or a column the input lacks (a schema's
// omitted empty cell) empty, an object or array as its JSON text. A
// header alone when there are no inputs. When a read would not tell the
// delimiter from the header (a pipe; a header holding as many of another
// candidate), a first line "sep=X" names it (ReadCSVDelimited reads it).
func writeInputsCSV(w *bytes.Buffer, inputs []pageInput, shape *api.CSVShape) error {
	delim := ','
	var header []string
	if shape != nil {
		if d, n := utf8.DecodeRuneInString(shape.Delimiter); n > 0 && n == len(shape.Delimiter) {
			delim = d
		}
		header = slices.Clone(shape.Header)
	}
	col := map[string]bool{}
	for _, h := range header {
		col[h] = true
	}
	rows := make([]map[string]string, 0, len(inputs))
	extras := make([][]string, 0, len(inputs))
	for _, in := range inputs {
		cells, order, err := objectCells(in.input)
		if err != nil {
			return fmt.Errorf("input of %s: %w", in.key, err)
		}
		var extra []string
		for _, name := range order {
			if col[name] {
				continue
			}
			if n, ok := source.ExtraColumn(name); ok && shape != nil && len(shape.Header) > 0 && n > len(shape.Header) {
				// A bad row's cell past the header's columns: its record
				// gets it after the header's, as the line held it, and no
				// other row gets its column (a correction of another row
				// would run it with a field it never had).
				extra = append(extra, cells[name])
				continue
			}
			col[name] = true
			header = append(header, name)
		}
		rows, extras = append(rows, cells), append(extras, extra)
	}
	cw := csv.NewWriter(w)
	cw.Comma = delim
	if len(header) > 0 {
		var head bytes.Buffer
		hw := csv.NewWriter(&head)
		hw.Comma = delim
		if err := hw.Write(header); err != nil {
			return err
		}
		if hw.Flush(); hw.Error() != nil {
			return hw.Error()
		}
		if d, ok := source.DetectedDelimiter(head.Bytes()); !ok || d != delim {
			// A delimiter a reader would not find in the header (a pipe,
			// or a header that holds as many of another): say it, as
			// Excel does; a correction's read takes the line as its own.
			fmt.Fprintf(w, "sep=%c\n", delim)
		}
		w.Write(head.Bytes())
	}
	for j, cells := range rows {
		rec := make([]string, len(header), len(header)+len(extras[j]))
		for i, name := range header {
			rec[i] = cells[name]
		}
		if err := cw.Write(append(rec, extras[j]...)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// objectCells is the JSON object in as CSV cells by column, and its columns
// in the object's own order.
func objectCells(in json.RawMessage) (map[string]string, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("%.80s: not a JSON object (a CSV row's input is one)", in)
	}
	cells := map[string]string{}
	var order []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, err
		}
		var cell string
		switch {
		case bytes.Equal(raw, []byte("null")):
		case len(raw) > 0 && raw[0] == '"':
			if err := json.Unmarshal(raw, &cell); err != nil {
				return nil, nil, err
			}
		default:
			cell = string(raw)
		}
		if _, dup := cells[name]; !dup {
			order = append(order, name)
		}
		cells[name] = cell
	}
	return cells, order, nil
}
