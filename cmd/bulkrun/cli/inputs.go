package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/source"
)

// maxManifestLine is the longest manifest line the export reads: a
// source line is at most source.MaxLineBytes, and its manifest line can
// be longer by its key and the escaping of a CSV row's cells.
const maxManifestLine = 2 * source.MaxLineBytes

// itemInputs writes the inputs of every item of the batch id whose outcome
// is outcome (every page of GET /batches/{id}/items) to w, in the source's
// own order and format, ready to edit and hand to `bulkrun correct`: a CSV
// source's items as CSV (a header, then one record per item), any other
// source's as JSON Lines (the item as read, one JSON value a line). The
// inputs are the current ones — a corrected item's its last correction's —
// read from the batch's manifest in the stack's bucket (one streamed read).
// A summary goes to errw. A batch with positional keys (no key field) is
// refused: its items' inputs do not name the item they correct.
func (a *app) itemInputs(ctx context.Context, w io.Writer, id string, outcome api.Outcome) error {
	v, err := a.api.Status(ctx, id)
	if err != nil {
		return err
	}
	if v.KeyField == "" {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("batch %s has positional keys (item-0000000000, …): its inputs name no key to correct them by; list the items without --inputs", id)}
	}
	keys := map[string]bool{}
	next := ""
	for {
		p, err := a.api.Items(ctx, id, outcome, next, api.MaxListLimit)
		if err != nil {
			if len(keys) > 0 {
				return fmt.Errorf("%w (after %s were listed; nothing was written)", err, api.Count(len(keys), "item"))
			}
			return err
		}
		for _, it := range p.Items {
			keys[it.Key] = true
		}
		if next = p.NextCursor; next == "" {
			break
		}
	}
	bucket, err := a.outs.Get(config.OutputBucket)
	if err != nil {
		return err
	}
	manifest := v.ManifestKey // with corrections, the last one's merged manifest
	if n := len(v.Revisions); n > 0 {
		manifest = v.Revisions[n-1].ManifestKey
	}
	out, err := blob.NewS3(a.aws).GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &manifest})
	if err != nil {
		return fmt.Errorf("read the manifest of %s (s3://%s/%s): %w", id, bucket, manifest, err)
	}
	defer out.Body.Close()
	format := api.FormatJSONL
	if v.SourceFormat == api.FormatCSV {
		format = api.FormatCSV
	}
	n, err := writeInputs(w, out.Body, keys, format)
	if err != nil {
		return fmt.Errorf("inputs of %s from s3://%s/%s: %w", id, bucket, manifest, err)
	}
	textf(a.errw, "%s of %s items of batch %s, in source order (%s): edit them, then bulkrun correct %s FILE\n",
		api.Count(n, "input"), outcome, id, format, id)
	return nil
}

// writeInputs copies, from manifest (JSON Lines of source.ManifestLine, in
// source order), the input of every line whose key is in keys to w: as
// JSON Lines (format jsonl), or as CSV (format csv; see inputsCSV). It
// returns how many it wrote, and an error naming the keys it did not find
// (and writing nothing then) or the line it could not read.
func writeInputs(w io.Writer, manifest io.Reader, keys map[string]bool, format string) (int, error) {
	r := bufio.NewReaderSize(manifest, 64<<10)
	var inputs []json.RawMessage
	found := map[string]bool{}
	for line := int64(1); ; line++ {
		b, err := r.ReadBytes('\n')
		if len(b) > maxManifestLine {
			return 0, fmt.Errorf("manifest line %d: longer than %d bytes", line, maxManifestLine)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			var l source.ManifestLine
			if jerr := json.Unmarshal(b, &l); jerr != nil {
				return 0, fmt.Errorf("manifest line %d: %w", line, jerr)
			}
			if keys[l.Key] && !found[l.Key] {
				found[l.Key] = true
				inputs = append(inputs, l.Input)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if len(found) < len(keys) {
		var missing []string
		for k := range keys {
			if !found[k] {
				missing = append(missing, k)
			}
		}
		slices.Sort(missing)
		return 0, fmt.Errorf("%s not in the manifest: %s", api.Count(len(missing), "key"), strings.Join(missing[:min(len(missing), 5)], ", "))
	}
	if format == api.FormatCSV {
		return len(inputs), inputsCSV(w, inputs)
	}
	bw := bufio.NewWriter(w)
	for _, in := range inputs {
		var c bytes.Buffer
		if err := json.Compact(&c, in); err != nil {
			return 0, err
		}
		c.WriteByte('\n')
		if _, err := bw.Write(c.Bytes()); err != nil {
			return 0, err
		}
	}
	return len(inputs), bw.Flush()
}

// inputsCSV writes inputs (JSON objects, as a CSV source's rows are read:
// column → cell) as CSV (RFC 4180, encoding/csv): a header of every
// column in the order first seen, then a record per input; a string cell
// as it is, a number or boolean as its JSON text, null or a column the
// input lacks (a schema's omitted empty cell) empty, an object or array
// as its JSON text.
func inputsCSV(w io.Writer, inputs []json.RawMessage) error {
	var header []string
	col := map[string]int{}
	rows := make([]map[string]string, 0, len(inputs))
	for _, in := range inputs {
		cells, order, err := objectCells(in)
		if err != nil {
			return err
		}
		for _, name := range order {
			if _, ok := col[name]; !ok {
				col[name] = len(header)
				header = append(header, name)
			}
		}
		rows = append(rows, cells)
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	rec := make([]string, len(header))
	for _, cells := range rows {
		for i, name := range header {
			rec[i] = cells[name]
		}
		if err := cw.Write(rec); err != nil {
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
		return nil, nil, fmt.Errorf("input %.80s: not a JSON object (a CSV row's input is one)", in)
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
