package control

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// inputsBatch stores a finished batch keyed by "id" whose manifest holds
// lines ("key\tinput"), and records outcomes by key (items not named have
// no row).
func inputsBatch(t *testing.T, format string, shape *api.CSVShape, lines []string, outcomes map[string]api.Outcome) *Control {
	t.Helper()
	s, blobs := memstore.NewStore(), memblobs.New()
	ctx := context.Background()
	b := partialBatch("in-1", len(lines), 3, 1)
	b.KeyField, b.SourceFormat, b.CSV = "id", format, shape
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	var m strings.Builder
	for _, l := range lines {
		k, in, _ := strings.Cut(l, "\t")
		m.WriteString(`{"key":"` + k + `","input":` + in + "}\n")
	}
	if err := blobs.Put(ctx, b.ManifestKey, "application/x-ndjson", []byte(m.String())); err != nil {
		t.Fatal(err)
	}
	for k, o := range outcomes {
		record(t, s, b, k, 1, o)
	}
	return &Control{Store: s, Blobs: blobs, Clock: &memstore.FixedClock{T: t0}}
}

// allInputs reads every page of Inputs, limit items a page, and returns
// the pages' bodies.
func allInputs(t *testing.T, c *Control, outcome api.Outcome, limit int) []api.InputPage {
	t.Helper()
	var pages []api.InputPage
	cursor := ""
	for {
		p, err := c.Inputs(context.Background(), "in-1", outcome, cursor, limit)
		if err != nil {
			t.Fatalf("page %d: %v", len(pages)+1, err)
		}
		pages = append(pages, p)
		if cursor = p.NextCursor; cursor == "" || len(pages) > 100 {
			return pages
		}
	}
}

// TestInputsJSONLinesInSourceOrder guards the JSON Lines export: exactly
// the failed items' inputs (not the succeeded or quarantined ones), in
// manifest (source) order within the page although their keys sort
// otherwise, each compacted on its line; quarantined selects the
// quarantined one.
func TestInputsJSONLinesInSourceOrder(t *testing.T) {
	c := inputsBatch(t, api.FormatJSONL, nil, []string{
		"z\t{\"id\": \"z\", \"n\": 1}",
		"a\t{\"id\":\"a\",\"n\":2}",
		"m\t{\"id\":\"m\",\"n\":3}",
		"q\t{\"id\":\"q\",\"n\":4}",
	}, map[string]api.Outcome{"z": api.OutcomeFailed, "a": api.OutcomeSucceeded, "m": api.OutcomeFailed, "q": api.OutcomeQuarantined})
	pages := allInputs(t, c, "", 100)
	if len(pages) != 1 || pages[0].Format != api.FormatJSONL || pages[0].Count != 2 {
		t.Fatalf("pages %+v, want one JSON Lines page of 2", pages)
	}
	if got, want := string(pages[0].Body), "{\"id\":\"z\",\"n\":1}\n{\"id\":\"m\",\"n\":3}\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	if p := allInputs(t, c, api.OutcomeQuarantined, 100); string(p[0].Body) != "{\"id\":\"q\",\"n\":4}\n" {
		t.Errorf("quarantined: %q", p[0].Body)
	}
}

// TestInputsCSVWithTheSourcesDelimiter guards the CSV export: the
// source's delimiter (;) and header (every column, in the source's order,
// even one no failed row fills), cells with the delimiter, quotes or a
// line break quoted so that encoding/csv with that delimiter reads the
// same cells back, numbers as their JSON text, null empty.
func TestInputsCSVWithTheSourcesDelimiter(t *testing.T) {
	c := inputsBatch(t, api.FormatCSV, &api.CSVShape{Delimiter: ";", Header: []string{"id", "name", "qty", "note"}}, []string{
		"o-1\t{\"id\":\"o-1\",\"name\":\"Ann; Jr.\",\"qty\":\"2\"}",
		"o-2\t{\"id\":\"o-2\",\"name\":\"ok\",\"qty\":\"1\"}",
		"o-3\t{\"id\":\"o-3\",\"name\":\"say \\\"hi\\\"\\nthere\",\"qty\":1.50,\"note\":null}",
	}, map[string]api.Outcome{"o-1": api.OutcomeFailed, "o-2": api.OutcomeSucceeded, "o-3": api.OutcomeFailed})
	p := allInputs(t, c, api.OutcomeFailed, 100)[0]
	if p.Format != api.FormatCSV || p.Count != 2 {
		t.Fatalf("page %+v, want CSV of 2", p)
	}
	if !strings.HasPrefix(string(p.Body), "id;name;qty;note\n\"o-1\";") && !strings.HasPrefix(string(p.Body), "id;name;qty;note\no-1;\"Ann; Jr.\";2;\n") {
		t.Errorf("body %q: want the ; header and a quoted cell", p.Body)
	}
	r := csv.NewReader(bytes.NewReader(p.Body))
	r.Comma = ';'
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatalf("read back %q: %v", p.Body, err)
	}
	want := [][]string{{"id", "name", "qty", "note"}, {"o-1", "Ann; Jr.", "2", ""}, {"o-3", "say \"hi\"\nthere", "1.50", ""}}
	if fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Errorf("records %q, want %q", recs, want)
	}
}

// TestInputsNoFailedItems guards a batch none of whose items failed: a
// CSV page of the header alone, a JSON Lines page empty, no cursor.
func TestInputsNoFailedItems(t *testing.T) {
	c := inputsBatch(t, api.FormatCSV, &api.CSVShape{Delimiter: "\t", Header: []string{"id", "v"}}, []string{"a\t{\"id\":\"a\",\"v\":\"1\"}"},
		map[string]api.Outcome{"a": api.OutcomeSucceeded})
	if p := allInputs(t, c, "", 10); len(p) != 1 || p[0].Count != 0 || string(p[0].Body) != "id\tv\n" || p[0].NextCursor != "" {
		t.Errorf("CSV: %+v, want the header alone", p)
	}
	c = inputsBatch(t, api.FormatJSONL, nil, []string{"a\t{\"id\":\"a\"}"}, nil)
	if p := allInputs(t, c, "", 10); len(p) != 1 || p[0].Count != 0 || len(p[0].Body) != 0 {
		t.Errorf("JSON Lines: %+v, want an empty page", p)
	}
}

// TestInputsPages guards paging: 25 failed items of 40, 7 a page, come in
// 4 pages, every failed input exactly once and no other; each CSV page
// has the header; and a bad outcome, limit or cursor is an *InputError
// naming it.
func TestInputsPages(t *testing.T) {
	var lines []string
	outcomes := map[string]api.Outcome{}
	want := map[string]bool{}
	for i := range 40 {
		k := fmt.Sprintf("k-%02d", (i*17)%40)
		lines = append(lines, fmt.Sprintf("%s\t{\"id\":%q,\"i\":\"%d\"}", k, k, i))
		if i%8 < 5 {
			outcomes[k] = api.OutcomeFailed
			want[k] = true
		} else {
			outcomes[k] = api.OutcomeSucceeded
		}
	}
	c := inputsBatch(t, api.FormatCSV, &api.CSVShape{Delimiter: ",", Header: []string{"id", "i"}}, lines, outcomes)
	pages := allInputs(t, c, "", 7)
	if len(pages) != 4 {
		t.Fatalf("%d pages, want 4", len(pages))
	}
	got := map[string]int{}
	for n, p := range pages {
		recs, err := csv.NewReader(bytes.NewReader(p.Body)).ReadAll()
		if err != nil || len(recs) != p.Count+1 || fmt.Sprint(recs[0]) != "[id i]" {
			t.Fatalf("page %d: %q, %v (count %d)", n+1, p.Body, err, p.Count)
		}
		for _, r := range recs[1:] {
			got[r[0]]++
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d keys, want %d", len(got), len(want))
	}
	for k, n := range got {
		if !want[k] || n != 1 {
			t.Errorf("key %s: %d times, failed %v", k, n, want[k])
		}
	}
	for _, bad := range []struct {
		outcome api.Outcome
		cursor  string
		limit   int
		field   string
	}{{"withheld", "", 0, "outcome"}, {"succeeded", "", 0, "outcome"}, {"", "", 1001, "limit"}, {"", "!!", 0, "cursor"}} {
		_, err := c.Inputs(context.Background(), "in-1", bad.outcome, bad.cursor, bad.limit)
		var ie *api.InputError
		if !errors.As(err, &ie) || ie.Field != bad.field {
			t.Errorf("%+v: %v, want an error naming %s", bad, err, bad.field)
		}
	}
	if _, err := c.Inputs(context.Background(), "nope", "", "", 0); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("unknown batch: %v, want ErrNotFound", err)
	}
}

// TestInputsPositionalKeys guards that a batch without key field is
// refused (ErrConflict): its inputs name no key to correct them by.
func TestInputsPositionalKeys(t *testing.T) {
	s := memstore.NewStore()
	b := partialBatch("pos-1", 1, 1, 1)
	if _, err := s.CreateBatch(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	c := &Control{Store: s, Blobs: memblobs.New(), Clock: &memstore.FixedClock{T: t0}}
	if _, err := c.Inputs(context.Background(), "pos-1", "", "", 0); !errors.Is(err, api.ErrConflict) {
		t.Errorf("positional keys: %v, want ErrConflict", err)
	}
}

// TestPickInputsByBytes guards a page cut by bytes: when the page's
// inputs are over the bound, the page ends before its last keys (in key
// order, whatever the manifest's order), holds at least one input, and a
// key of the page the manifest lacks is named.
func TestPickInputsByBytes(t *testing.T) {
	var m strings.Builder
	for _, k := range []string{"d", "a", "c", "b"} {
		m.WriteString(`{"key":"` + k + `","input":"` + strings.Repeat(k, 10) + `"}` + "\n")
	}
	found, hi, err := pickInputs(strings.NewReader(m.String()), []string{"a", "b", "c", "d"}, 30)
	if err != nil || hi != 2 || len(found) != 2 || found[0].key != "a" || found[1].key != "b" {
		t.Fatalf("found %+v, hi %d, %v; want a and b (24 bytes), hi 2", found, hi, err)
	}
	found, hi, err = pickInputs(strings.NewReader(m.String()), []string{"c", "d"}, 5)
	if err != nil || hi != 1 || len(found) != 1 || found[0].key != "c" {
		t.Fatalf("one input over the bound: %+v, hi %d, %v; want c alone", found, hi, err)
	}
	if _, _, err := pickInputs(strings.NewReader(m.String()), []string{"a", "zz"}, 1<<20); err == nil || !strings.Contains(err.Error(), "zz") {
		t.Errorf("missing key: %v", err)
	}
	if _, _, err := pickInputs(strings.NewReader(m.String()+"{not json\n"), []string{"a", "zz"}, 1<<20); err == nil || !strings.Contains(err.Error(), "manifest line 5") {
		t.Errorf("bad line: %v", err)
	}
}

// TestInputsCSVReadsBackAsACorrection guards the round trip to a
// correction: an export with each delimiter (comma, semicolon, tab, pipe;
// cells holding other candidates, quotes and a line break) read by
// submit's CSV reader without csv_delimiter, as a correction object is,
// gives back every failed row's cells — a pipe, which the reader would
// not find in the header, named by a first line sep=|.
func TestInputsCSVReadsBackAsACorrection(t *testing.T) {
	for _, d := range []string{",", ";", "\t", "|"} {
		c := inputsBatch(t, api.FormatCSV, &api.CSVShape{Delimiter: d, Header: []string{"id", "a,b", "note"}}, []string{
			"x-1\t{\"id\":\"x-1\",\"a,b\":\"1;2|3\\t4\",\"note\":\"say \\\"hi\\\"\\nok\"}",
			"x-2\t{\"id\":\"x-2\",\"a,b\":\"\",\"note\":\"plain\"}",
		}, map[string]api.Outcome{"x-1": api.OutcomeFailed, "x-2": api.OutcomeFailed})
		p := allInputs(t, c, "", 10)[0]
		if strings.HasPrefix(string(p.Body), "sep=") != (d == "|") {
			t.Errorf("delimiter %q: %q, want a sep= line for the pipe alone", d, p.Body)
		}
		var got []string
		err := source.ReadCSVDelimited(bytes.NewReader(p.Body), "id", 0, func(it source.SourceItem) error {
			got = append(got, it.Key+"="+string(it.Input))
			return nil
		})
		want := []string{`x-1={"id":"x-1","a,b":"1;2|3\t4","note":"say \"hi\"\nok"}`, `x-2={"id":"x-2","a,b":"","note":"plain"}`}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("delimiter %q: %q read back as %q (%v), want %q", d, p.Body, got, err, want)
		}
	}
}
