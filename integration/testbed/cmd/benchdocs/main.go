// Command benchdocs makes the cost tables of docs/design/cost.md from a
// `make bench` run, so that the figures the docs give are the ones a run
// printed. It keeps the run as docs/design/cost.json (the figures, the
// head of the code measured and the day) and writes each table between
// its markers in the document ("<!-- bench:NAME -->" …
// "<!-- /bench:NAME -->"; bench.DocTables). `make bench` runs it after a
// full run; `make bench-docs` runs it on build/bench/cost.json as it is.
// With -check it changes nothing and fails when the document's tables
// are not the ones docs/design/cost.json makes.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/bench"
)

func main() {
	in := flag.String("in", "build/bench/cost.json", "the bench's figures (a list, as `make bench` writes them)")
	doc := flag.String("doc", "docs/design/cost.md", "the document whose tables to write")
	snapshot := flag.String("snapshot", "docs/design/cost.json", "where the docs keep the run the tables come from")
	head := flag.String("head", "", "the short commit hash of the code the bench ran on (required unless -check)")
	check := flag.Bool("check", false, "change nothing; fail when -doc's tables are not the ones -snapshot makes")
	flag.Parse()
	if err := run(*in, *doc, *snapshot, *head, *check); err != nil {
		fmt.Fprintln(os.Stderr, "benchdocs:", err)
		os.Exit(1)
	}
}

func run(in, doc, snapshot, head string, check bool) error {
	if check {
		return bench.CheckDoc(snapshot, doc)
	}
	if head == "" {
		return fmt.Errorf("-head: the commit the bench ran on is required")
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	m, err := bench.ReadMeasurement(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(m.Figures) == 0 {
		return fmt.Errorf("%s: no scenario", in)
	}
	m.Head, m.Date = head, time.Now().UTC().Format(time.DateOnly)
	text, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	filled, err := bench.FillDoc(string(text), bench.DocTables(m))
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return err
	}
	if err := os.WriteFile(snapshot, b.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(doc, []byte(filled), 0o644); err != nil {
		return err
	}
	fmt.Printf("benchdocs: %d scenarios of head %s: %s and %s written\n", len(m.Figures), head, snapshot, doc)
	return nil
}
