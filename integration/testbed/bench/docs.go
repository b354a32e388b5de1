package bench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// Measurement is a `make bench` run as the docs keep it
// (docs/design/cost.json): the figures of every scenario, the head of
// the code that was measured and the day, so that the tables of
// docs/design/cost.md can be made again from it and checked against it.
//
// JSON: {"head": "1eec83c", "date": "2026-12-03", "items": 2000,
// "figures": [Figures, …]}.
type Measurement struct {
	// Head is the short commit hash of the code the bench ran on.
	Head string `json:"head"`
	// Date is the day of the run, YYYY-MM-DD (UTC).
	Date string `json:"date"`
	// Items is the bench's -items: the items of each scenario's run (a
	// run at a larger Scenario.Scale takes that many times more).
	Items   int       `json:"items"`
	Figures []Figures `json:"figures"`
}

// DocBlocks are the names of the tables DocTables makes, in the order
// they appear in docs/design/cost.md.
var DocBlocks = []string{"by-k", "order", "failures", "tracks", "partitions"}

// DocTables makes the Markdown tables of docs/design/cost.md from m:
// by-k (units, requests and dollars per item at 1, 10 and 100 items per
// message, and ~1 KB outputs), order (chunk-ordered beside shuffled),
// failures (every run with failures beside its clean run, named as the
// bench names it; Compare) and partitions (the busiest key's write units
// per second at each batch size, from Figures.PartitionTable), tracks
// (runs with max_concurrency beside the same runs without). Each
// table ends with a line naming the run it comes from. A scenario
// missing from m leaves its cells "—".
func DocTables(m Measurement) map[string]string {
	src := fmt.Sprintf("\n`make bench`, %s items per scenario, head %s, %s; docs/design/cost.json.\n", thousands(m.Items), m.Head, m.Date)
	return map[string]string{
		"by-k":       byKTable(m.Figures) + src,
		"order":      orderTable(m.Figures) + src,
		"failures":   failuresTable(m.Figures) + src,
		"tracks":     tracksTable(m.Figures) + src,
		"partitions": partitionsTable(m.Figures) + src,
	}
}

// find is the figures of the clean or failing scenario with k items per
// message, outputs of ~1 KB (outputBytes 1024) or small (0: under
// 1 KB), the delivery order and the failure mix, and no max_concurrency,
// run at the bench's own size (Scale ≤ 1); nil when m has none.
func find(fs []Figures, k, outputBytes int, delivery string, transient, permanent int) *Figures {
	return findAt(fs, k, outputBytes, delivery, transient, permanent, 1)
}

// findAt is find for the runs at scale times the bench's items (≤ 1: its
// own size).
func findAt(fs []Figures, k, outputBytes int, delivery string, transient, permanent, scale int) *Figures {
	for i, f := range fs {
		if f.ItemsPerMessage == k && (f.OutputBytes >= 1024) == (outputBytes >= 1024) && f.Delivery == delivery && f.MaxConcurrency == 0 &&
			f.TransientPercent == transient && f.PermanentPercent == permanent && max(f.Scale, 1) == max(scale, 1) {
			return &fs[i]
		}
	}
	return nil
}

func byKTable(fs []Figures) string {
	cols := []*Figures{
		find(fs, 1, 0, DeliveryShuffled, 0, 0),
		find(fs, 1, 1024, DeliveryShuffled, 0, 0),
		find(fs, 10, 0, DeliveryShuffled, 0, 0),
		find(fs, 100, 0, DeliveryShuffled, 0, 0),
	}
	var b strings.Builder
	b.WriteString("| per item (shuffled delivery) | K = 1 | K = 1, ~1 KB outputs | K = 10 | K = 100 |\n| --- | --- | --- | --- | --- |\n")
	row := func(name string, v func(*Figures) string) {
		b.WriteString("| " + name)
		for _, f := range cols {
			b.WriteString(" | " + cellOf(f, v))
		}
		b.WriteString(" |\n")
	}
	row("DynamoDB write units", func(f *Figures) string {
		return fmt.Sprintf("%.3f (%s)", f.WriteUnitsPerItem, largest(f.WriteUnitsByTarget, 2))
	})
	row("DynamoDB read units", func(f *Figures) string {
		return fmt.Sprintf("%.4f (%s)", f.ReadUnitsPerItem, largest(f.ReadUnitsByTarget, 2))
	})
	row("SQS requests", func(f *Figures) string { return fmt.Sprintf("%.3f", f.SQSRequestsPerItem) })
	row("Lambda requests", func(f *Figures) string { return fmt.Sprintf("%.4f", f.LambdaInvocationsPerItem) })
	row("Lambda GB-s (the emulator's wall time)", func(f *Figures) string { return fmt.Sprintf("%.5f", f.LambdaGBSecondsPerItem) })
	row("CloudWatch Logs bytes ingested", func(f *Figures) string { return fmt.Sprintf("%.0f", f.LogBytesPerItem) })
	row("**USD per 10^6 items**, one batch of 10^6", func(f *Figures) string {
		return fmt.Sprintf("**%.3f** (%s)", f.USDPerMillionItems, largest(f.USDByComponent, 2))
	})
	row("USD per 10^6 items in batches of the run's size", func(f *Figures) string {
		return fmt.Sprintf("%.3f (%s-item batches)", f.USDPerMillionItemsAtRunSize, thousands(f.Items))
	})
	return b.String()
}

// largest is the n largest of m, "name value" by value, largest first.
func largest(m map[string]float64, n int) string {
	ks := sortedKeys(m)
	slices.SortStableFunc(ks, func(a, b string) int { return cmp.Compare(m[b], m[a]) })
	var parts []string
	for _, k := range ks[:min(n, len(ks))] {
		name := strings.TrimPrefix(k, "table ")
		if name == "" { // a run stored before NoRowKind
			name = NoRowKind
		}
		parts = append(parts, fmt.Sprintf("%s %s", name, decimal(m[k])))
	}
	return strings.Join(parts, ", ")
}

// decimal is v with three significant decimals after the leading zeros
// of a value under 1 (0.0125, 0.224, 2.00).
func decimal(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	places := max(2, int(-math.Floor(math.Log10(math.Abs(v))))+2)
	return fmt.Sprintf("%.*f", places, v)
}

func orderTable(fs []Figures) string {
	var b strings.Builder
	b.WriteString("| write units per item (USD per 10^6, one batch) | chunk-ordered | shuffled |\n| --- | --- | --- |\n")
	for _, base := range []struct {
		name       string
		k, outputs int
	}{{"1 item per message", 1, 0}, {"1 item per message, ~1 KB outputs", 1, 1024}, {"10 items per message", 10, 0}, {"100 items per message", 100, 0}} {
		c, s := find(fs, base.k, base.outputs, DeliveryChunkOrdered, 0, 0), find(fs, base.k, base.outputs, DeliveryShuffled, 0, 0)
		v := func(f *Figures) string { return fmt.Sprintf("%.3f ($%.3f)", f.WriteUnitsPerItem, f.USDPerMillionItems) }
		fmt.Fprintf(&b, "| %s | %s | %s |\n", base.name, cellOf(c, v), cellOf(s, v))
	}
	return b.String()
}

// tracksTable sets each clean run with max_concurrency beside the clean
// run of the same items per message, delivery and size without it; a
// run at a larger scale (Scenario.Scale) is named with its items and
// fan-out chunk.
func tracksTable(fs []Figures) string {
	var b strings.Builder
	b.WriteString("| per item (shuffled delivery) | without max_concurrency | with max_concurrency |\n| --- | --- | --- |\n")
	rows := b.Len()
	for _, f := range fs {
		if f.MaxConcurrency == 0 || f.TransientPercent+f.PermanentPercent != 0 {
			continue
		}
		c := findAt(fs, f.ItemsPerMessage, f.OutputBytes, f.Delivery, 0, 0, f.Scale)
		size := ""
		if f.Scale > 1 {
			chunk := f.ChunkItems
			if chunk <= 0 {
				chunk = ChunkItems
			}
			size = fmt.Sprintf(", %s items in %s-item chunks", thousands(f.Items), thousands(chunk))
		}
		fmt.Fprintf(&b, "| **K = %d, max_concurrency %d%s** | | |\n", f.ItemsPerMessage, f.MaxConcurrency, size)
		pair := func(name string, v func(*Figures) string) {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", name, cellOf(c, v), v(&f))
		}
		pair("DynamoDB write units", func(f *Figures) string {
			return fmt.Sprintf("%.3f (%s)", f.WriteUnitsPerItem, largest(f.WriteUnitsByTarget, 3))
		})
		pair("DynamoDB read units", func(f *Figures) string { return fmt.Sprintf("%.4f", f.ReadUnitsPerItem) })
		pair("SQS requests", func(f *Figures) string { return fmt.Sprintf("%.3f", f.SQSRequestsPerItem) })
		pair("S3 GET-tier requests", func(f *Figures) string { return fmt.Sprintf("%.4f", f.S3GetPerItem) })
		pair("Lambda requests", func(f *Figures) string { return fmt.Sprintf("%.4f", f.LambdaInvocationsPerItem) })
		pair("USD per 10^6 items in batches of the run's size", func(f *Figures) string {
			return fmt.Sprintf("%.3f (%s)", f.USDPerMillionItemsAtRunSize, largest(f.USDByComponentAtRunSize, 2))
		})
	}
	if b.Len() == rows {
		return "No run with max_concurrency in this measurement.\n"
	}
	return b.String()
}

// cellOf is v(f), or "—" for a scenario the measurement lacks.
func cellOf(f *Figures, v func(*Figures) string) string {
	if f == nil {
		return "—"
	}
	return v(f)
}

func failuresTable(fs []Figures) string {
	var b strings.Builder
	b.WriteString("| run (the bench's scenario) | clean | failing | retried units' own writes | attention (per failed item) | excess | USD per 10^6, clean → failing |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	byName := map[string]*Figures{}
	for i := range fs {
		byName[fs[i].Name] = &fs[i]
	}
	for _, c := range Compare(fs) {
		f, cl := byName[c.Failing], byName[c.Clean]
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f | %.3f (%.2f) | %.1f %% | %.3f → %.3f |\n", c.Failing, c.CleanUnits, c.FailingUnits,
			c.RetriedWork, c.Attention, c.AttentionPerFailed, c.ExcessPercent, cl.USDPerMillionItems, f.USDPerMillionItems)
	}
	return b.String()
}

func partitionsTable(fs []Figures) string {
	k1 := []*Figures{find(fs, 1, 0, DeliveryShuffled, 0, 0), find(fs, 1, 0, DeliveryShuffled, 5, 5), find(fs, 1, 0, DeliveryShuffled, 0, 100)}
	k10 := []*Figures{find(fs, 10, 0, DeliveryShuffled, 0, 0), find(fs, 10, 0, DeliveryShuffled, 5, 5), find(fs, 10, 0, DeliveryShuffled, 0, 100)}
	k100 := []*Figures{find(fs, 100, 0, DeliveryShuffled, 0, 0), find(fs, 100, 0, DeliveryShuffled, 5, 5), find(fs, 100, 0, DeliveryShuffled, 0, 100)}
	rowOf := func(f *Figures, i int) *PartitionRow {
		if f == nil || i >= len(f.PartitionTable) {
			return nil
		}
		return &f.PartitionTable[i]
	}
	maxes := func(fs []*Figures, i int) string {
		var parts []string
		for _, f := range fs {
			if r := rowOf(f, i); r != nil {
				parts = append(parts, fmt.Sprintf("%.0f", r.Max))
			} else {
				parts = append(parts, "—")
			}
		}
		return strings.Join(parts, " / ")
	}
	// The clean runs with max_concurrency, K = 1 and 10 (the first of
	// each), and the key their busiest track row is on.
	var tracked []*Figures
	for _, k := range []int{1, 10} {
		for i := range fs {
			if f := &fs[i]; f.MaxConcurrency > 0 && f.ItemsPerMessage == k && f.TransientPercent+f.PermanentPercent == 0 && f.Scale <= 1 {
				tracked = append(tracked, f)
				break
			}
		}
	}
	trackCol := func(i int) string {
		if len(tracked) == 0 {
			return "—"
		}
		s := maxes(tracked, i)
		if r := rowOf(tracked[len(tracked)-1], i); r != nil {
			s += " (" + r.Busiest["table"] + ")"
		}
		return s
	}
	trackHead := "max_concurrency: —"
	if len(tracked) > 0 {
		var ks []string
		for _, f := range tracked {
			ks = append(ks, fmt.Sprintf("K = %d", f.ItemsPerMessage))
		}
		trackHead = fmt.Sprintf("max_concurrency %d, 0 %%: %s (the last one's busiest table key)", tracked[0].MaxConcurrency, strings.Join(ks, " / "))
	}
	var b strings.Builder
	b.WriteString("| batch items | item shards | lanes | K = 1: 0 % / 5 % + 5 % / 100 % failures, busiest key (write units/s) | its key (K = 1, 0 %) | attention index (K = 1, 5 % + 5 % / 100 %) | K = 10: 0 % / 5 % + 5 % / 100 % | K = 100: 0 % / 5 % + 5 % / 100 % | " + trackHead + " | batch row reads (K = 1 / K = 10) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for i, n := range PartitionSizes {
		base := rowOf(k1[0], i)
		if base == nil {
			continue
		}
		attn := func(f *Figures) string {
			if r := rowOf(f, i); r != nil {
				return fmt.Sprintf("%.0f", r.WCUPerS["index attention"])
			}
			return "—"
		}
		reads := func(f *Figures) string {
			if r := rowOf(f, i); r != nil {
				return fmt.Sprintf("%.0f", r.BatchRowRCUPerS)
			}
			return "—"
		}
		fmt.Fprintf(&b, "| 10^%d | %d | %d | %s | %s | %s / %s | %s | %s | %s | %s / %s |\n", int(math.Round(math.Log10(float64(n)))), base.ListShards, base.CounterLanes,
			maxes(k1, i), base.Busiest["table"], attn(k1[1]), attn(k1[2]), maxes(k10, i), maxes(k100, i), trackCol(i), reads(k1[0]), reads(k10[0]))
	}
	return b.String()
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ReadMeasurement reads a Measurement, or the bare list of Figures that
// the bench writes to build/bench/cost.json (its head and date then
// empty).
func ReadMeasurement(r io.Reader) (Measurement, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Measurement{}, err
	}
	var m Measurement
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		err = json.Unmarshal(t, &m.Figures)
		// The bench's -items: the first run at its own size (a run at a
		// larger Scale takes more).
		for _, f := range m.Figures {
			if err == nil && f.Scale <= 1 {
				m.Items = f.Items
				break
			}
		}
	} else {
		err = json.Unmarshal(data, &m)
	}
	if err != nil {
		return Measurement{}, fmt.Errorf("bench figures: %w", err)
	}
	return m, nil
}

// Block markers in a Markdown document: a table DocTables made sits
// between "<!-- bench:NAME -->" and "<!-- /bench:NAME -->", each on a
// line of its own.
func blockMarkers(name string) (begin, end string) {
	return "<!-- bench:" + name + " -->\n", "<!-- /bench:" + name + " -->"
}

// FillDoc returns doc with each block's text between its markers
// replaced by tables[block]. A block of DocBlocks whose markers are
// missing or out of order is an error naming it.
func FillDoc(doc string, tables map[string]string) (string, error) {
	for _, name := range DocBlocks {
		begin, end := blockMarkers(name)
		i := strings.Index(doc, begin)
		if i < 0 {
			return "", fmt.Errorf("no %q line", strings.TrimSpace(begin))
		}
		j := strings.Index(doc[i:], end)
		if j < 0 {
			return "", fmt.Errorf("no %q after %q", end, strings.TrimSpace(begin))
		}
		doc = doc[:i+len(begin)] + tables[name] + doc[i+j:]
	}
	return doc, nil
}

// CheckDoc fails when the tables of the document at docPath are not the
// ones the Measurement at snapshotPath makes (DocTables), naming the
// first block that differs: a figure edited by hand, or a run kept
// without its tables written.
func CheckDoc(snapshotPath, docPath string) error {
	f, err := os.Open(snapshotPath)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := ReadMeasurement(f)
	if err != nil {
		return fmt.Errorf("%s: %w", snapshotPath, err)
	}
	text, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	tables := DocTables(m)
	want, err := FillDoc(string(text), tables)
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	if want == string(text) {
		return nil
	}
	for _, name := range DocBlocks {
		begin, _ := blockMarkers(name)
		i := strings.Index(string(text), begin) + len(begin)
		if !strings.HasPrefix(string(text)[i:], tables[name]) {
			return fmt.Errorf("%s: the %q table is not the one %s makes (make bench-docs writes it)", docPath, name, snapshotPath)
		}
	}
	return fmt.Errorf("%s: its tables are not the ones %s makes", docPath, snapshotPath)
}
