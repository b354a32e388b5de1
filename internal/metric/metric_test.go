package metric

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/emf.golden")

// emitAll writes one line of every metric with fixed values.
func emitAll(e *Emitter) {
	e.ItemsRecorded("webhook", "succeeded", 1, "b-1", 1)
	e.ItemDuration("webhook", 1234*time.Millisecond, "b-1", 1)
	e.DeadLetters("thumbnail", 1, "b-2", 3)
	e.Retry("webhook", "b-1", 1)
	e.FanOut(500, "b-1", 1)
	e.FinalizeLag(2500*time.Millisecond, "b-1", 1)
	e.TickFailed()
	e.Paused("webhook", true, "b-1", 1)
	e.Paused("webhook", false, "b-1", 1)
	e.RunHealth("b-1", 1, 3000, 200, 50, 980, 7*time.Minute)
	e.RunHealth("b-3", 2, 40, 40, 5, 0, -1) // finished: its failure rate only
}

// TestEMFGolden guards the metrics product line (items by outcome,
// dead-lettered, retries, item duration, fan-out rate, finalize lag, tick
// failures): the exact EMF lines CloudWatch extracts them from. A change
// of name, unit, dimension or namespace breaks the stack's alarms and
// dashboard, which name them; update both with -update.
func TestEMFGolden(t *testing.T) {
	var buf bytes.Buffer
	e := &Emitter{Stack: "bulkrun", W: &buf, Now: func() time.Time { return time.UnixMilli(1767225600000) }}
	emitAll(e)
	golden := filepath.Join("testdata", "emf.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("EMF lines differ from %s:\ngot:\n%s\nwant:\n%s", golden, buf.Bytes(), want)
	}
}

// TestEMFShape checks every line against the rules of the EMF
// specification that CloudWatch enforces (a line breaking one is dropped
// silently): one JSON object per line; _aws.Timestamp in epoch ms;
// Namespace set; each dimension set names 1–30 root members holding
// strings; each metric is a root member holding a number; and that no
// batch id is a dimension (metrics cost per dimension value).
func TestEMFShape(t *testing.T) {
	var buf bytes.Buffer
	emitAll(&Emitter{Stack: "s", W: &buf})
	sc := bufio.NewScanner(&buf)
	lines := 0
	for sc.Scan() {
		lines++
		var doc map[string]any
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		aws, _ := doc["_aws"].(map[string]any)
		if ts, ok := aws["Timestamp"].(float64); !ok || ts < 1e12 {
			t.Errorf("line %d: Timestamp %v is not epoch milliseconds", lines, aws["Timestamp"])
		}
		dirs, _ := aws["CloudWatchMetrics"].([]any)
		if len(dirs) != 1 {
			t.Fatalf("line %d: %d directives", lines, len(dirs))
		}
		dir := dirs[0].(map[string]any)
		if dir["Namespace"] != Namespace {
			t.Errorf("line %d: namespace %v", lines, dir["Namespace"])
		}
		for _, set := range dir["Dimensions"].([]any) {
			set := set.([]any)
			if len(set) < 1 || len(set) > 30 {
				t.Errorf("line %d: dimension set %v", lines, set)
			}
			for _, d := range set {
				if _, ok := doc[d.(string)].(string); !ok {
					t.Errorf("line %d: dimension %v has no string value at the root", lines, d)
				}
				if !slices.Contains([]string{DimStack, DimPipeline, DimOutcome}, d.(string)) {
					t.Errorf("line %d: dimension %v is not one of the low-cardinality ones", lines, d)
				}
			}
		}
		for _, m := range dir["Metrics"].([]any) {
			m := m.(map[string]any)
			if _, ok := doc[m["Name"].(string)].(float64); !ok {
				t.Errorf("line %d: metric %v has no number at the root", lines, m["Name"])
			}
			if u := m["Unit"]; u != UnitCount && u != UnitMilliseconds && u != UnitSeconds && u != UnitPercent {
				t.Errorf("line %d: unit %v", lines, u)
			}
		}
	}
	if lines != 13 {
		t.Errorf("%d lines, want 13", lines)
	}
}

// TestRunHealthSmallSamples: a run with fewer than MinEndedForRate ended
// items writes no failure rate, fewer than MinWaitingForRate waiting items
// no waiting share, a finished run (stalled < 0) no stall.
func TestRunHealthSmallSamples(t *testing.T) {
	var buf bytes.Buffer
	e := &Emitter{Stack: "s", W: &buf}
	e.RunHealth("b", 1, 100, MinEndedForRate-1, MinEndedForRate-1, MinWaitingForRate-1, -1)
	if buf.Len() != 0 {
		t.Errorf("wrote %s", buf.String())
	}
	e.RunHealth("b", 1, 300, MinEndedForRate, 3, MinWaitingForRate, 0)
	for _, want := range []string{`"FailedItemsPercent":30`, `"RetryWaitingPercent":3.33`, `"RunStalledSeconds":0`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no %s in %s", want, buf.String())
		}
	}
}

func TestNilEmitterDiscards(t *testing.T) {
	var e *Emitter
	emitAll(e) // must not panic
}

// BenchmarkItemLines is the cost the item path pays per item: the
// outcome and duration lines.
func BenchmarkItemLines(b *testing.B) {
	e := &Emitter{Stack: "bulkrun", W: io.Discard}
	b.ReportAllocs()
	for b.Loop() {
		e.ItemsRecorded("webhook", "succeeded", 1, "b-1", 1)
		e.ItemDuration("webhook", 1234*time.Millisecond, "b-1", 1)
	}
}

// TestBufferedLines: a buffered emitter writes nothing for outcomes and
// durations until Flush, then one Items line per pipeline, outcome,
// batch and run with their sum, and the durations as arrays of at most
// MaxValuesPerLine values (a line is written as soon as one fills);
// every other metric is written at once; each line keeps the EMF shape.
func TestBufferedLines(t *testing.T) {
	var buf bytes.Buffer
	e := (&Emitter{Stack: "s", W: &buf, Now: func() time.Time { return time.UnixMilli(1767225600000) }}).Buffered()
	for i := range 250 {
		e.ItemsRecorded("webhook", "succeeded", 1, "b-1", 1)
		e.ItemDuration("webhook", time.Duration(i)*time.Millisecond, "b-1", 1)
	}
	e.ItemsRecorded("webhook", "failed", 3, "b-1", 1)
	e.ItemsRecorded("webhook", "succeeded", 2, "b-2", 1)
	e.Retry("webhook", "b-1", 1)
	before := strings.Count(buf.String(), "\n")
	if got := strings.Count(buf.String(), `"ItemDurationMs":[`); got != 2 || before != 3 {
		t.Fatalf("before Flush: %d lines, %d duration arrays (want 3 lines: 2 full arrays of %d and the retry):\n%s", before, got, MaxValuesPerLine, buf.String())
	}
	e.Flush()
	items := map[string]float64{}
	var durations []float64
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
		var doc map[string]any
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		if v, ok := doc[Items].(float64); ok {
			items[doc[DimOutcome].(string)+" "+doc["batch_id"].(string)] += v
		}
		switch v := doc[ItemDurationMs].(type) {
		case float64:
			durations = append(durations, v)
		case []any:
			if len(v) > MaxValuesPerLine {
				t.Errorf("line %d: %d values", lines, len(v))
			}
			for _, x := range v {
				durations = append(durations, x.(float64))
			}
		}
	}
	if want := map[string]float64{"succeeded b-1": 250, "failed b-1": 3, "succeeded b-2": 2}; !maps.Equal(items, want) {
		t.Errorf("Items by outcome and batch: %v, want %v", items, want)
	}
	if len(durations) != 250 || durations[0] != 0 || durations[249] != 249 {
		t.Errorf("%d durations (first %v), want 250 in order", len(durations), durations[:min(3, len(durations))])
	}
	// 2 full arrays + the retry before; the rest of the durations (one
	// array of 50) and three Items lines after.
	if lines != 7 {
		t.Errorf("%d lines, want 7:\n%s", lines, buf.String())
	}
	buf.Reset()
	e.Flush()
	if buf.Len() != 0 {
		t.Errorf("a second Flush wrote %s", buf.String())
	}
	var none *Emitter
	none.Buffered().Flush() // nil stays nil and discards
}

// BenchmarkItemLinesBuffered is BenchmarkItemLines on a buffered
// emitter, flushed every 10 items as an invocation of 10 would.
func BenchmarkItemLinesBuffered(b *testing.B) {
	e := (&Emitter{Stack: "bulkrun", W: io.Discard}).Buffered()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e.ItemsRecorded("webhook", "succeeded", 1, "b-1", 1)
		e.ItemDuration("webhook", 1234*time.Millisecond, "b-1", 1)
		if i++; i%10 == 0 {
			e.Flush()
		}
	}
}
