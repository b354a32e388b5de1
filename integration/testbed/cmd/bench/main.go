// Command bench measures the cost of bulkrun runs on the emulator (or the
// AWS account of the environment): scenarios of -items items of 1 KB
// inputs, with small and with ~1 KB outputs at one item per message, and
// with small outputs at 10 and 100 items per message (packs), each with
// the queue delivering chunk-ordered and shuffled (see Scenarios), and
// runs with transient and permanent failures. It prints units,
// requests and dollars per 10^6 items next to the Distributed Map anchors,
// the partition table, and writes the figures to -out. Each scenario also
// runs at bench.FixedProbeItems items to split what a batch costs whatever
// its size from what each item adds, so the dollars are given for one
// batch of 10^6 items as well as for batches of -items items. `make bench` runs
// it; `make bench BENCH_ITEMS=100000` measures 10^5 items (and the large
// runs of Scenarios 10^6). -limit sets the max_concurrency of the
// scenarios with one (10): `-items 20000 -limit 200 -only
// 'max_concurrency [0-9]+, shuffled$'` measures runs on 200 tracks and 4
// claim counters.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/bulkrun/bulkrun/integration/testbed/bench"
	"github.com/bulkrun/bulkrun/shared/function"
	"github.com/bulkrun/bulkrun/shared/source"
)

func main() {
	items := flag.Int("items", 2000, "items per scenario")
	out := flag.String("out", "build/bench/cost.json", "where to write the figures as JSON")
	only := flag.String("only", "", "run only the scenarios whose name matches this regular expression")
	limit := flag.Int("limit", 10, "the max_concurrency of the scenarios with one (above 64: a run on several claim counters)")
	chunk := flag.Int("chunk", 0, "the fan-out chunk of every scenario in items (0: the bench's 200, bench.ChunkItems, and the product's 5,000 for the large runs)")
	flag.Parse()
	if err := run(*items, *limit, *chunk, *out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Scenarios are the runs of `make bench` for items items: each clean run
// in both delivery orders (bench.DeliveryChunkOrdered,
// bench.DeliveryShuffled), runs with max_concurrency limit (10 in make
// bench) at 1 and 10 items per message (shuffled), and, shuffled, 5 % transient and 5 %
// permanent failures (early stop armed at 10 %) and 100 % permanent
// failures, at 1, 10 and 100 items per message. A clean run also runs at
// bench.FixedProbeItems items (Figures.WithFixed).
// chunk, when > 0, is every run's fan-out chunk (-chunk), the large
// runs' too.
func Scenarios(items, limit, chunk int) (clean, failing []bench.Scenario) {
	bases := []bench.Scenario{
		{Name: "small outputs", Items: items},
		{Name: "1 KB outputs", Items: items, OutputBytes: 1024},
		{Name: "small outputs, 10 items per message", Items: items, ItemsPerMessage: 10},
		{Name: "small outputs, 100 items per message", Items: items, ItemsPerMessage: 100},
	}
	for _, b := range bases {
		for _, d := range []string{bench.DeliveryChunkOrdered, bench.DeliveryShuffled} {
			sc := b
			sc.Name, sc.Delivery = b.Name+", "+d, d
			clean = append(clean, sc)
		}
	}
	// max_concurrency limit (the run on that many tracks), shuffled, at 1
	// and 10 items per message.
	for _, b := range []bench.Scenario{bases[0], bases[2]} {
		sc := b
		sc.Name, sc.Delivery, sc.MaxConcurrency = fmt.Sprintf("%s, max_concurrency %d, shuffled", b.Name, limit), bench.DeliveryShuffled, limit
		clean = append(clean, sc)
	}
	for _, mc := range []int{0, limit} {
		sc := bases[2]
		sc.Name, sc.Delivery, sc.MaxConcurrency = bases[2].Name+", ", bench.DeliveryShuffled, mc
		if mc > 0 {
			sc.Name += fmt.Sprintf("max_concurrency %d, ", mc)
		}
		sc.Items, sc.Scale, sc.ChunkItems = LargeScale*items, LargeScale, cmp.Or(chunk, source.DefaultChunkItems)
		sc.Name += fmt.Sprintf("shuffled, %d items in %d-item chunks", sc.Items, sc.ChunkItems)
		clean = append(clean, sc)
	}
	for _, b := range []bench.Scenario{bases[0], bases[2], bases[3]} {
		sc := b
		sc.Name, sc.Delivery = b.Name+", shuffled, 5 % transient + 5 % permanent", bench.DeliveryShuffled
		sc.TransientPercent, sc.PermanentPercent, sc.ThresholdPercent = 5, 5, 10
		failing = append(failing, sc)
		sc = b
		sc.Name, sc.Delivery, sc.PermanentPercent = b.Name+", shuffled, 100 % permanent", bench.DeliveryShuffled, 100
		failing = append(failing, sc)
	}
	return clean, failing
}

// LargeScale is how many times the bench's items the large runs of
// Scenarios take: 20,000 items at make bench's 2,000.
const LargeScale = 10

func run(items, limit, chunk int, out, only string) error {
	ctx := context.Background()
	cfg, err := function.AWSConfig(ctx)
	if err != nil {
		return err
	}
	match, err := regexp.Compile(only)
	if err != nil {
		return fmt.Errorf("-only: %w", err)
	}
	var fs []bench.Figures
	clean, failing := Scenarios(items, limit, chunk)
	for _, sc := range append(clean, failing...) {
		if !match.MatchString(sc.Name) {
			continue
		}
		if chunk > 0 {
			sc.ChunkItems = chunk // the large runs' name says so already
		}
		fmt.Fprintf(os.Stderr, "bench: %s, %d items ...\n", sc.Name, sc.Items)
		r, err := bench.Run(ctx, cfg, sc)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		f := r.Figures()
		f.WithPartitions(r)
		if sc.TransientPercent+sc.PermanentPercent == 0 {
			// What a batch costs whatever its size: the same scenario at
			// FixedProbeItems items (Figures.WithFixed).
			probe := sc
			probe.Name, probe.Items = sc.Name+" (fixed-cost probe)", bench.FixedProbeItems
			fmt.Fprintf(os.Stderr, "bench: %s, %d items ...\n", probe.Name, probe.Items)
			pr, err := bench.Run(ctx, cfg, probe)
			if err != nil {
				return fmt.Errorf("%s: %w", probe.Name, err)
			}
			f.WithFixed(pr.Figures())
		}
		fs = append(fs, f)
	}
	bench.Print(os.Stdout, fs)
	bench.PrintComparisons(os.Stdout, bench.Compare(fs))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(fs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s\n", out)
	return nil
}
