package source_test

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/source"
)

// TestManifestSummaryKeepsCSVShape guards what an export of a CSV batch's
// inputs relies on: the summary of a CSV source's manifest names the
// delimiter the read used (given or detected) and the header's columns in
// order; a JSON Lines source's has none.
func TestManifestSummaryKeepsCSVShape(t *testing.T) {
	read := func(format, text string, delim rune) source.ManifestSummary {
		t.Helper()
		mw := source.NewManifestWriter(io.Discard, 0, t.TempDir())
		var err error
		if format == "csv" {
			err = source.ReadCSVDelimited(strings.NewReader(text), "id", delim, mw.Add)
		} else {
			err = source.ReadJSONL(strings.NewReader(text), "id", mw.Add)
		}
		if err != nil {
			t.Fatal(err)
		}
		sum, err := mw.Finish()
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	for _, c := range []struct {
		text  string
		delim rune
		want  string
	}{{"id;name;qty\n1;a;2\n", 0, ";"}, {"id,name,qty\n1,a,2\n", 0, ","}, {"id|name|qty\n1|a|2\n", '|', "|"}} {
		sum := read("csv", c.text, c.delim)
		if sum.CSV == nil || sum.CSV.Delimiter != c.want || !slices.Equal(sum.CSV.Header, []string{"id", "name", "qty"}) {
			t.Errorf("%q: CSV shape %+v, want delimiter %q and header id name qty", c.text, sum.CSV, c.want)
		}
	}
	if sum := read("jsonl", `{"id":"1"}`+"\n", 0); sum.CSV != nil {
		t.Errorf("JSON Lines: CSV shape %+v, want none", sum.CSV)
	}
	var wide bytes.Buffer
	wide.WriteString("id")
	for i := range 5000 {
		fmt.Fprintf(&wide, ",c%d", i)
	}
	if sum := read("csv", wide.String()+"\n1"+strings.Repeat(",", 5000)+"\n", 0); sum.CSV == nil || sum.CSV.Delimiter != "," || sum.CSV.Header != nil {
		t.Errorf("a header over MaxCSVHeaderBytes: %+v, want the delimiter alone", sum.CSV)
	}
}
