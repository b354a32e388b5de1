package flow

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// partSteps collects the part steps a submit hands off; the test runs them
// (in any order, again, or not at all).
type partSteps struct {
	mu  sync.Mutex
	evs []ledger.PartEvent
}

func (p *partSteps) StartPart(_ context.Context, ev ledger.PartEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evs = append(p.evs, ev)
	return nil
}

func (p *partSteps) take() []ledger.PartEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := p.evs
	p.evs = nil
	return evs
}

// partsSource is a JSON Lines source with a key field of n items that
// exercises what a part boundary could break: a byte-order mark, CRLF,
// blank and whitespace-only lines, long and short lines.
func partsSource(n int) []byte {
	var b bytes.Buffer
	b.WriteString("\xEF\xBB\xBF")
	for i := range n {
		switch {
		case i%17 == 3:
			b.WriteString("\n   \n")
		case i%11 == 5:
			b.WriteString("\r\n")
		}
		pad := strings.Repeat("x", (i*37)%300)
		fmt.Fprintf(&b, "{\"id\":\"k-%06d\", \"n\": %d, \"pad\":\"%s\"}\n", (i*7919)%n, i, pad)
	}
	return b.Bytes()
}

// partsRig is a rig whose submitter reads sources larger than partBytes in
// parts, and a second rig reading every source whole, for comparison.
func partsRig(t *testing.T, partBytes int64) (*rig, *partSteps) {
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	r.sub.Handoff = nopHandoff{}
	steps := &partSteps{}
	cfg := &submit.PartsConfig{PartBytes: partBytes, Handoff: steps}
	cfg.MinComposeBytes = 1
	r.sub.Parts = cfg
	return r, steps
}

// runParts runs the handed-off steps, shuffled, until none is left; each
// step is run twice when twice is set (a duplicate invocation).
func runParts(t *testing.T, ctx context.Context, r *rig, steps *partSteps, twice bool) ledger.Batch {
	t.Helper()
	var last ledger.Batch
	for range 100 {
		evs := steps.take()
		if len(evs) == 0 {
			return last
		}
		rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		for _, ev := range evs {
			for range 1 + btoi(twice) {
				b, err := r.sub.Part(ctx, ev)
				if err != nil {
					t.Fatalf("%+v: %v", ev, err)
				}
				if b.ID != "" {
					last = b
				}
			}
		}
	}
	t.Fatal("part steps never ended")
	return last
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func wholeRead(t *testing.T, ctx context.Context, src []byte, req api.SubmitRequest) (ledger.Batch, []byte, error) {
	t.Helper()
	return wholeReadAt(t, ctx, "in/big.jsonl", src, req)
}

// wholeReadAt submits src, stored under key, read whole, and returns the
// batch and its manifest.
func wholeReadAt(t *testing.T, ctx context.Context, key string, src []byte, req api.SubmitRequest) (ledger.Batch, []byte, error) {
	t.Helper()
	w := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	if err := w.blobs.Put(ctx, key, "", src); err != nil {
		t.Fatal(err)
	}
	res, err := w.sub.Submit(ctx, req)
	if err != nil {
		return ledger.Batch{}, nil, err
	}
	m, err := w.blobs.Get(ctx, res.Batch.ManifestKey)
	if err != nil {
		t.Fatal(err)
	}
	return res.Batch, m, nil
}

// A source read in parts, each step run in any order and twice, freezes
// the manifest a whole read writes, byte for byte, with the same item
// count and chunks; its digest is the parts digest, which a synchronous
// submit of the same object (read by parts in one call) and Digest give
// too. The parts' objects are gone once the batch runs.
func TestPartsManifestIsTheWholeRead(t *testing.T) {
	ctx := context.Background()
	src := partsSource(3000)
	r, steps := partsRig(t, 16<<10)
	if err := r.blobs.Put(ctx, "in/big.jsonl", "", src); err != nil {
		t.Fatal(err)
	}
	req := api.SubmitRequest{BatchID: "big", Pipeline: "counted", KeyField: "id", Source: api.SourceSpec{Object: "s3://batches/in/big.jsonl"}}
	if _, err := r.sub.Accept(ctx, req); err != nil {
		t.Fatal(err)
	}
	b, err := r.sub.Complete(ctx, "big")
	if err != nil || b.Status != api.StatusSubmitting {
		t.Fatalf("Complete: %s %v, want still submitting with parts handed off", b.Status, err)
	}
	parts := (int64(len(src)) + 16<<10 - 1) / (16 << 10)
	if evs := steps.evs; int64(len(evs)) != parts {
		t.Fatalf("handed off %d steps, want %d parts", len(evs), parts)
	}
	b = runParts(t, ctx, r, steps, true)
	if b.Status != api.StatusRunning || b.ItemCount != 3000 {
		t.Fatalf("after the parts: %s, %d items (refusal %+v), want running with 3000", b.Status, b.ItemCount, b.Refusal)
	}
	whole, wm, err := wholeRead(t, ctx, src, req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.blobs.Get(ctx, b.ManifestKey)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, wm) || b.ManifestBytes != whole.ManifestBytes || b.Chunks != whole.Chunks || b.ItemCount != whole.ItemCount {
		t.Fatalf("manifest by parts: %d bytes, %d chunks; whole: %d bytes, %d chunks; equal bytes %v",
			len(m), b.Chunks, len(wm), whole.Chunks, bytes.Equal(m, wm))
	}
	if b.Digest == whole.Digest {
		t.Fatal("a manifest read in parts has the parts digest, not the SHA-256 of its bytes")
	}
	// The same object submitted synchronously (read by parts in one call)
	// and its Digest: the same parts digest.
	one, res := sameByOneRead(t, ctx, "in/big.jsonl", src, 16<<10, req, b, m)
	// The fan-out chunks are the whole read's: the same offsets.
	var got, want []string
	for _, d := range r.queue.take() {
		got = append(got, string(d.Body))
	}
	for _, d := range one.queue.take() {
		want = append(want, strings.ReplaceAll(string(d.Body), res.Batch.ManifestKey, b.ManifestKey))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("fan-out by parts:\n%s\nwhole read:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A fan-out sent again (resume, the finalize tick) sends the same
	// chunks, read from beside the manifest, not cut from it.
	if err := r.sub.FanOut(ctx, b); err != nil {
		t.Fatal(err)
	}
	var again []string
	for _, d := range r.queue.take() {
		again = append(again, string(d.Body))
	}
	if strings.Join(again, "\n") != strings.Join(got, "\n") {
		t.Fatalf("fan-out sent again:\n%s\nfirst:\n%s", strings.Join(again, "\n"), strings.Join(got, "\n"))
	}
	if left := r.blobs.Objects("batches/big/parts/"); len(left) > 0 {
		t.Fatalf("parts' objects left: %v", left)
	}
}

// A bad line and a duplicate key are refused naming the lines and key a
// whole read names, wherever the part boundaries fall.
func TestPartsRefuseAsTheWholeRead(t *testing.T) {
	ctx := context.Background()
	base := partsSource(2000)
	lines := strings.SplitAfter(string(base), "\n")
	cases := map[string]func() string{
		"bad line late": func() string {
			l := cloneLines(lines)
			l[len(l)-40] = "{\"id\": \"zz\", oops}\n"
			return strings.Join(l, "")
		},
		"duplicate across parts": func() string {
			l := cloneLines(lines)
			l[len(l)-30] = "{\"id\":\"k-000007\"}\n"
			return strings.Join(l, "")
		},
		"two duplicates": func() string {
			l := cloneLines(lines)
			l[len(l)-30] = "{\"id\":\"k-000009\"}\n"
			l[len(l)-900] = "{\"id\":\"k-000003\"}\n"
			return strings.Join(l, "")
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			src := []byte(mk())
			r, steps := partsRig(t, 8<<10)
			if err := r.blobs.Put(ctx, "in/big.jsonl", "", src); err != nil {
				t.Fatal(err)
			}
			req := api.SubmitRequest{BatchID: "bad", Pipeline: "counted", KeyField: "id", Source: api.SourceSpec{Object: "s3://batches/in/big.jsonl"}}
			if _, err := r.sub.Accept(ctx, req); err != nil {
				t.Fatal(err)
			}
			if _, err := r.sub.Complete(ctx, "bad"); err != nil {
				t.Fatal(err)
			}
			runParts(t, ctx, r, steps, false)
			b, err := r.store.GetBatch(ctx, "bad")
			if err != nil || b.Status != api.StatusRefused {
				t.Fatalf("%s %v, want refused", b.Status, err)
			}
			_, _, werr := wholeRead(t, ctx, src, req)
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

func cloneLines(s []string) []string { return append([]string(nil), s...) }

// sameByOneRead submits src (stored as key) synchronously with parts of
// partBytes, read one after the other in one call, and checks that it
// and Digest give b's parts digest and manifest m; it returns its rig and
// result.
func sameByOneRead(t *testing.T, ctx context.Context, key string, src []byte, partBytes int64, req api.SubmitRequest, b ledger.Batch, m []byte) (*rig, submit.SubmitResult) {
	t.Helper()
	one := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	one.sub.Parts = &submit.PartsConfig{PartBytes: partBytes}
	if err := one.blobs.Put(ctx, key, "", src); err != nil {
		t.Fatal(err)
	}
	res, err := one.sub.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sm, _ := one.blobs.Get(ctx, res.Batch.ManifestKey)
	if res.Batch.Digest != b.Digest || !bytes.Equal(sm, m) {
		t.Fatalf("synchronous read by parts: digest %s, want %s; same manifest %v", res.Batch.Digest, b.Digest, bytes.Equal(sm, m))
	}
	if d, err := one.sub.Digest(ctx, req); err != nil || d != b.Digest {
		t.Fatalf("Digest: %s %v, want %s", d, err, b.Digest)
	}
	return one, res
}

// killAndResume runs the read steps evs, victim's killed before its result
// is written, then, Lambda's retries spent, lets the tick hand batch id's
// read off again: only the victim is handed off again, and it is left in
// steps to run.
func killAndResume(t *testing.T, ctx context.Context, r *rig, steps *partSteps, evs []ledger.PartEvent, victim ledger.PartEvent, id string) {
	t.Helper()
	memblobs.FailBlobs(r.blobs, func(op, key string) error {
		if op == "put" && strings.Contains(key, fmt.Sprintf("/part-%05d", victim.Index)) {
			return errors.New("killed")
		}
		return nil
	})
	for _, ev := range evs {
		_, err := r.sub.Part(ctx, ev)
		if (err != nil) != (ev == victim) {
			t.Fatalf("%+v: %v", ev, err)
		}
	}
	if left := steps.take(); len(left) != 0 {
		t.Fatalf("with a part missing, %d steps were handed off", len(left))
	}
	memblobs.FailBlobs(r.blobs, nil)
	r.clock.T = r.clock.T.Add(20 * 60e9)
	if _, err := r.sub.TickSubmitting(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.Complete(ctx, id); err != nil {
		t.Fatal(err)
	}
	again := steps.take()
	if len(again) != 1 || again[0] != victim {
		t.Fatalf("resumed: %+v, want the killed part only (%+v)", again, victim)
	}
	steps.evs = again
}

// A part killed before its result is written (its manifest written, or
// half of it) is run again by the tick's hand-off, which hands off only
// the parts without a result: the batch is frozen with the manifest of an
// uninterrupted read.
func TestPartsResumeAfterAKilledPart(t *testing.T) {
	ctx := context.Background()
	src := partsSource(1500)
	r, steps := partsRig(t, 8<<10)
	if err := r.blobs.Put(ctx, "in/big.jsonl", "", src); err != nil {
		t.Fatal(err)
	}
	req := api.SubmitRequest{BatchID: "kill", Pipeline: "counted", KeyField: "id", Source: api.SourceSpec{Object: "s3://batches/in/big.jsonl"}}
	if _, err := r.sub.Accept(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.Complete(ctx, "kill"); err != nil {
		t.Fatal(err)
	}
	evs := steps.take()
	victim := evs[len(evs)/2]
	killAndResume(t, ctx, r, steps, evs, victim, "kill")
	b := runParts(t, ctx, r, steps, false)
	_, wm, err := wholeRead(t, ctx, src, req)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := r.blobs.Get(ctx, b.ManifestKey)
	if b.Status != api.StatusRunning || !bytes.Equal(m, wm) {
		t.Fatalf("%s, same manifest %v", b.Status, bytes.Equal(m, wm))
	}
}

// A gzip source, however large, and a source under the part size are
// read whole: no part is handed off.
func TestPartsGzipAndSmallStayWhole(t *testing.T) {
	ctx := context.Background()
	src := partsSource(1500)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(src)
	zw.Close()
	for name, body := range map[string][]byte{"gzip": gz.Bytes(), "small": src[:bytes.LastIndexByte(src[:4000], '\n')+1]} {
		t.Run(name, func(t *testing.T) {
			r, steps := partsRig(t, 1<<10)
			if name == "small" {
				r.sub.Parts.PartBytes = 8 << 10
			}
			if err := r.blobs.Put(ctx, "in/big.jsonl", "", body); err != nil {
				t.Fatal(err)
			}
			req := api.SubmitRequest{BatchID: "one", Pipeline: "counted", KeyField: "id", Source: api.SourceSpec{Object: "s3://batches/in/big.jsonl"}}
			if _, err := r.sub.Accept(ctx, req); err != nil {
				t.Fatal(err)
			}
			b, err := r.sub.Complete(ctx, "one")
			if err != nil || b.Status != api.StatusRunning || len(steps.take()) != 0 {
				t.Fatalf("%s %v, want running, read in one invocation", b.Status, err)
			}
			whole, _, err := wholeRead(t, ctx, body, req)
			if err != nil || whole.Digest != b.Digest {
				t.Fatalf("digest %s, whole read %s %v", b.Digest, whole.Digest, err)
			}
		})
	}
}
