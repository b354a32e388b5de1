package flow

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// csvPartsSource is a CSV source of n rows keyed by its id column that
// exercises what a part boundary could break: a byte-order mark, a
// semicolon delimiter found in the header, CRLF, blank and whitespace-only
// lines, quoted fields holding newlines (LF and CRLF), doubled quotes,
// delimiters, and, inside quotes, whole lines that read as rows of their
// own.
func csvPartsSource(n int) []byte {
	var b bytes.Buffer
	b.WriteString("\xEF\xBB\xBFid;name;note\r\n")
	for i := range n {
		switch {
		case i%17 == 3:
			b.WriteString("\r\n   \r\n")
		case i%23 == 7:
			b.WriteString("\n")
		}
		id := fmt.Sprintf("k-%06d", (i*7919)%n)
		var note string
		switch i % 7 {
		case 0:
			note = fmt.Sprintf("plain note %d", i)
		case 1:
			note = fmt.Sprintf("\"line one\nline two \"\"quoted\"\" end %d\"", i)
		case 2:
			note = fmt.Sprintf("\"%s\"", strings.Repeat("a;b \"\"c\"\"\r\n", 1+i%9))
		case 3:
			note = fmt.Sprintf("\"row\nk-9%05d;fake;\"\"row\"\"\n%d\"", i, i)
		case 4:
			note = "\"\"\"\""
		case 5:
			note = fmt.Sprintf("\"   \n\n  \r\n%s\"", strings.Repeat("x", i%200))
		default:
			note = strings.Repeat("y", (i*37)%150)
		}
		fmt.Fprintf(&b, "%s;name %d;%s\r\n", id, i, note)
	}
	return b.Bytes()
}

// readByParts reads src, stored as key, by parts of partBytes, each step
// run in any order and twice, and returns the batch, its manifest, and
// how many parts were read again from another quote state (a keyed
// source; a positional one reads each part once, its state known).
func readByParts(t *testing.T, ctx context.Context, key string, src []byte, partBytes int64, req api.SubmitRequest) (ledger.Batch, []byte, int) {
	t.Helper()
	r, steps := partsRig(t, partBytes)
	if err := r.blobs.Put(ctx, key, "", src); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.Accept(ctx, req); err != nil {
		t.Fatal(err)
	}
	b, err := r.sub.Complete(ctx, req.BatchID)
	if err != nil || b.Status != api.StatusSubmitting {
		t.Fatalf("Complete: %s %v (refusal %+v), want submitting with parts handed off", b.Status, err, b.Refusal)
	}
	if len(steps.evs) < 2 {
		t.Fatalf("%d steps handed off, want one read per part", len(steps.evs))
	}
	counted := &countedSteps{partSteps: steps}
	r.sub.Parts.Handoff = counted
	runParts(t, ctx, r, steps, true)
	b, err = r.store.GetBatch(ctx, req.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	if req.KeyField == "" {
		counted.rereads = 0 // every read knows its start
	}
	if b.Status != api.StatusRunning {
		return b, nil, counted.rereads
	}
	m, err := r.blobs.Get(ctx, b.ManifestKey)
	if err != nil {
		t.Fatal(err)
	}
	return b, m, counted.rereads
}

// countedSteps counts the reads handed off with a known quote state.
type countedSteps struct {
	*partSteps
	rereads int
}

func (c *countedSteps) StartPart(ctx context.Context, ev ledger.PartEvent) error {
	if ev.Step == ledger.PartStepRead && ev.Start != source.PartStartUnknown {
		c.rereads++
	}
	return c.partSteps.StartPart(ctx, ev)
}

// boundaryAt is the offset just after the first occurrence of mark at or
// after from, plus delta.
func boundaryAt(t *testing.T, src []byte, from int, mark string, delta int) int64 {
	t.Helper()
	i := bytes.Index(src[from:], []byte(mark))
	if i < 0 {
		t.Fatalf("no %q after %d", mark, from)
	}
	return int64(from + i + delta)
}

// A CSV object read in parts, wherever the part boundaries fall — inside
// a quoted field after one of its newlines (the part's guess is wrong and
// it is read again), between the two quotes of a doubled quote, between
// CR and LF, in blank lines, at many sizes — freezes the manifest a whole
// read writes, byte for byte, with the same items and chunks; a
// synchronous submit and Digest read it by the same parts and give its
// parts digest. Only part 0 holds the header and the byte-order mark.
func TestPartsCSVManifestIsTheWholeRead(t *testing.T) {
	src := csvPartsSource(400)
	rereads := 0
	for _, keyField := range []string{"id", ""} {
		t.Run("key_field="+keyField, func(t *testing.T) {
			rereads += manifestsByParts(t, src, "in/big.csv", keyField)
		})
	}
	if rereads == 0 {
		t.Fatal("no part was read again: no boundary fell inside a quoted field")
	}
}

// A source without key field is read in parts too: each part is counted
// first, then read knowing the index of its first item (its key) and, in
// CSV, its quote state. JSON Lines and CSV give the whole read's
// manifest.
func TestPartsPositionalManifestIsTheWholeRead(t *testing.T) {
	manifestsByParts(t, partsSource(700), "in/big.jsonl", "")
}

// manifestsByParts reads src (stored as key) by parts of many sizes and
// compares each manifest with the whole read's; it returns how many
// parts were read again from another quote state.
func manifestsByParts(t *testing.T, src []byte, key, keyField string) int {
	ctx := context.Background()
	req := api.SubmitRequest{BatchID: "parts", Pipeline: "counted", KeyField: keyField, Source: api.SourceSpec{Object: "s3://batches/" + key}}
	whole, wm, err := wholeReadAt(t, ctx, key, src, req)
	if err != nil {
		t.Fatal(err)
	}
	blank := "\n   \n"
	if strings.HasSuffix(key, ".csv") {
		blank = "\n   \r\n"
	}
	sizes := map[string]int64{"between CR and LF": boundaryAt(t, src, 3000, "\r\n", 1), "in blank lines": boundaryAt(t, src, 3000, blank, 2)}
	if strings.HasSuffix(key, ".csv") {
		sizes["after a quoted newline"] = boundaryAt(t, src, 3000, "\"line one\n", len("\"line one\n"))
		sizes["inside a doubled quote"] = boundaryAt(t, src, 3000, "\"\"quoted", 1)
		sizes["in a quoted CRLF"] = boundaryAt(t, src, 3000, "\"\"c\"\"\r\n", 6)
		sizes["after a quoted row"] = boundaryAt(t, src, 3000, ";fake;\"\"row\"\"\n", len(";fake;\"\"row\"\"\n"))
	}
	for _, n := range []int64{601, 1009, 4096, 7919} {
		sizes[fmt.Sprint(n)] = n
	}
	rereads := 0
	for name, pb := range sizes {
		t.Run(name, func(t *testing.T) {
			b, m, n := readByParts(t, ctx, key, src, pb, req)
			rereads += n
			if b.Status != api.StatusRunning || !bytes.Equal(m, wm) || b.ItemCount != whole.ItemCount || b.Chunks != whole.Chunks || b.ManifestBytes != whole.ManifestBytes {
				t.Fatalf("parts of %d bytes: %s (refusal %+v), %d items, %d chunks, %d bytes; whole read: %d items, %d chunks, %d bytes; same manifest %v",
					pb, b.Status, b.Refusal, b.ItemCount, b.Chunks, b.ManifestBytes, whole.ItemCount, whole.Chunks, whole.ManifestBytes, bytes.Equal(m, wm))
			}
			sameByOneRead(t, ctx, key, src, pb, req, b, m)
		})
	}
	return rereads
}

// A malformed record, a row with too few fields, a bad key and a
// duplicate key across parts are refused naming the lines (in the whole
// source) and key a whole read names, wherever the boundaries fall, with
// a key field or positional keys.
func TestPartsCSVRefuseAsTheWholeRead(t *testing.T) {
	ctx := context.Background()
	base := string(csvPartsSource(300))
	at := func(frac int) int { // the start of a row about frac/10 into the source
		i := len(base) * frac / 10
		return i + strings.Index(base[i:], "\r\nk-") + 2
	}
	cases := map[string]func() string{
		"unclosed quote late": func() string {
			i := at(8)
			return base[:i] + "k-bad;\"never closed;x\r\n" + base[i:]
		},
		"bare quote": func() string {
			i := at(6)
			return base[:i] + "k-bare;na\"me;x\r\n" + base[i:]
		},
		"too few fields": func() string {
			i := at(5)
			return base[:i] + "k-short;x\r\n" + base[i:]
		},
		"duplicate across parts": func() string {
			i := at(9)
			return base[:i] + "k-000007;dup;\"a\nb\"\r\n" + base[i:]
		},
		"empty key": func() string {
			i := at(7)
			return base[:i] + ";nokey;x\r\n" + base[i:]
		},
	}
	for name, mk := range cases {
		for _, pb := range []int64{601, 2048} {
			req := api.SubmitRequest{BatchID: "bad", Pipeline: "counted", KeyField: "id", Source: api.SourceSpec{Object: "s3://batches/in/big.csv"}}
			if pb == 601 && (name == "unclosed quote late" || name == "too few fields" || name == "bare quote") {
				req.KeyField = "" // positional keys: counted, then read
			}
			t.Run(fmt.Sprintf("%s/%d/key_field=%s", name, pb, req.KeyField), func(t *testing.T) {
				src := []byte(mk())
				b, _, _ := readByParts(t, ctx, "in/big.csv", src, pb, req)
				if b.Status != api.StatusRefused {
					t.Fatalf("%s, want refused", b.Status)
				}
				_, _, werr := wholeReadAt(t, ctx, "in/big.csv", src, req)
				want, ok := api.RefusalOf(werr)
				if !ok {
					t.Fatalf("whole read: %v, want a refusal", werr)
				}
				if b.Refusal.Line != want.Line || b.Refusal.Key != want.Key || b.Refusal.Code != want.Code || !strings.Contains(b.Refusal.Message, strings.TrimPrefix(want.Message, "submit bad: ")) {
					t.Fatalf("by parts: %+v\nwhole: %+v", *b.Refusal, want)
				}
			})
		}
	}
}

// A positional source whose counts are done and one of whose reads is
// killed before its result is resumed by the tick's hand-off: only the
// killed read is handed off again, with its start and base, and the
// manifest is the whole read's.
func TestPartsPositionalResumeAfterAKilledPart(t *testing.T) {
	ctx := context.Background()
	src := csvPartsSource(300)
	r, steps := partsRig(t, 2048)
	if err := r.blobs.Put(ctx, "in/big.csv", "", src); err != nil {
		t.Fatal(err)
	}
	req := api.SubmitRequest{BatchID: "kill", Pipeline: "counted", Source: api.SourceSpec{Object: "s3://batches/in/big.csv"}}
	if _, err := r.sub.Accept(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.Complete(ctx, "kill"); err != nil {
		t.Fatal(err)
	}
	counts := steps.take()
	for _, ev := range counts {
		if ev.Step != ledger.PartStepCount {
			t.Fatalf("%+v handed off first, want the counts", ev)
		}
		if _, err := r.sub.Part(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	reads := steps.take()
	// A count that ends with (or after) the one that handed off the reads
	// finds every count too, and hands off nothing.
	if _, err := r.sub.Part(ctx, counts[len(counts)-1]); err != nil {
		t.Fatal(err)
	}
	if len(reads) != len(counts) || len(steps.evs) != 0 {
		t.Fatalf("%d counts handed off %d reads, then %d more; want one read per part, once", len(counts), len(reads), len(steps.evs))
	}
	victim := reads[len(reads)/2]
	if victim.Step != ledger.PartStepRead || victim.Start == source.PartStartUnknown || victim.Base == 0 {
		t.Fatalf("after the counts: %+v, want a read knowing its start and base", victim)
	}
	killAndResume(t, ctx, r, steps, reads, victim, "kill")
	b := runParts(t, ctx, r, steps, false)
	_, wm, err := wholeReadAt(t, ctx, "in/big.csv", src, req)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := r.blobs.Get(ctx, b.ManifestKey)
	if b.Status != api.StatusRunning || !bytes.Equal(m, wm) {
		t.Fatalf("%s, same manifest %v", b.Status, bytes.Equal(m, wm))
	}
}
