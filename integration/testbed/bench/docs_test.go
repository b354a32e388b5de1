package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCostDocIsTheMeasurement holds docs/design/cost.md's tables to the
// run kept in docs/design/cost.json: a figure edited by hand, or a run
// kept without its tables written (make bench-docs), fails here.
func TestCostDocIsTheMeasurement(t *testing.T) {
	if err := CheckDoc("../../../docs/design/cost.json", "../../../docs/design/cost.md"); err != nil {
		t.Fatal(err)
	}
}

func TestCheckDocFindsAnEditedFigure(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/design/cost.md")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := os.ReadFile("../../../docs/design/cost.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	docPath, snapPath := filepath.Join(dir, "cost.md"), filepath.Join(dir, "cost.json")
	if err := os.WriteFile(snapPath, snap, 0o644); err != nil {
		t.Fatal(err)
	}
	// The failures table's first row, a figure put in by hand.
	begin, _ := blockMarkers("failures")
	i := strings.Index(string(doc), begin)
	if i < 0 {
		t.Fatalf("cost.md has no %q", begin)
	}
	row := i + len(begin) + strings.Index(string(doc[i+len(begin):]), "| small outputs, shuffled")
	edited := string(doc[:row]) + strings.Replace(string(doc[row:]), " | ", " | 9.999 | ", 1)
	if edited == string(doc) {
		t.Fatal("the edit changed nothing")
	}
	if err := os.WriteFile(docPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	err = CheckDoc(snapPath, docPath)
	if err == nil || !strings.Contains(err.Error(), `"failures"`) {
		t.Fatalf("CheckDoc of an edited failures table: %v, want an error naming the failures table", err)
	}
}

func TestFillDocNamesAMissingMarker(t *testing.T) {
	_, err := FillDoc("<!-- bench:by-k -->\n<!-- /bench:by-k -->\n", map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "bench:order") {
		t.Fatalf("FillDoc without the order markers: %v, want an error naming them", err)
	}
}

func TestReadMeasurementTakesTheBenchsList(t *testing.T) {
	m, err := ReadMeasurement(strings.NewReader(`[{"name": "a", "items": 2000, "items_per_message": 10}]`))
	if err != nil || m.Items != 2000 || len(m.Figures) != 1 || m.Figures[0].ItemsPerMessage != 10 {
		t.Fatalf("ReadMeasurement of the bench's list: %+v, %v", m, err)
	}
	// A list whose first run is a large one names the bench's own size.
	m, err = ReadMeasurement(strings.NewReader(`[{"name": "l", "items": 20000, "scale": 10}, {"name": "a", "items": 2000}]`))
	if err != nil || m.Items != 2000 {
		t.Fatalf("ReadMeasurement with a large run first: items %d, %v; want 2000", m.Items, err)
	}
	if _, err := ReadMeasurement(strings.NewReader(`{"figures": [`)); err == nil {
		t.Fatal("ReadMeasurement of a cut file: no error")
	}
}

// A run at a larger scale (Scenario.Scale) sits beside its own twin in
// the tracks table, named with its size, and takes no place in the
// tables of the bench's own size.
func TestTracksTablePairsRunsOfOneSize(t *testing.T) {
	fig := func(items, scale, mc int, units float64) Figures {
		return Figures{Name: "f", Items: items, ItemsPerMessage: 10, Delivery: DeliveryShuffled, MaxConcurrency: mc, Scale: scale,
			ChunkItems: map[bool]int{true: 5000}[scale > 1], WriteUnitsPerItem: units}
	}
	fs := []Figures{fig(2000, 0, 0, 0.230), fig(2000, 0, 10, 0.285), fig(20000, 10, 0, 0.212), fig(20000, 10, 10, 0.209)}
	tracks := tracksTable(fs)
	for _, want := range []string{
		"| **K = 10, max_concurrency 10** | | |\n| DynamoDB write units | 0.230 () | 0.285 () |",
		"| **K = 10, max_concurrency 10, 20,000 items in 5,000-item chunks** | | |\n| DynamoDB write units | 0.212 () | 0.209 () |",
	} {
		if !strings.Contains(tracks, want) {
			t.Errorf("tracks table without %q:\n%s", want, tracks)
		}
	}
	if f := find(fs, 10, 0, DeliveryShuffled, 0, 0); f == nil || f.Items != 2000 {
		t.Errorf("find took %+v, want the run at the bench's own size", f)
	}
}
