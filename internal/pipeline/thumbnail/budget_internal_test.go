package thumbnail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

type oneObject []byte

func (o oneObject) Open(context.Context, string, string) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(o)), nil
}

type discardOutputs struct{ puts int }

func (d *discardOutputs) Put(context.Context, string, string, []byte) (string, error) {
	d.puts++
	return "s3://b/out.png", nil
}

// TestMemoryBudgetWaits guards the product line "items wait for decode
// budget": while other items hold the whole budget, an item does not
// decode; it waits (here until its context ends: a transient error, the
// item is retried) and runs once the budget is given back.
func TestMemoryBudgetWaits(t *testing.T) {
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 64, 64))); err != nil {
		t.Fatal(err)
	}
	p := NewBudgeted(oneObject(img.Bytes()), 1<<20)
	in, _ := json.Marshal(Input{Bucket: "b", Key: "a.png"})
	req := func(out pipeline.Outputs) pipeline.Request {
		return pipeline.Request{Key: "a.png", Input: in, Outputs: out}
	}
	if !p.mem.sem.TryAcquire(p.mem.bytes) { // other items hold every byte
		t.Fatal("budget not free at start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	out := &discardOutputs{}
	_, err := p.Run(ctx, req(out))
	if !errors.Is(err, context.DeadlineExceeded) || pipeline.Classify(err) != pipeline.ClassTransient || out.puts != 0 {
		t.Fatalf("Run while the budget is held: %v (class %v, %d puts), want a transient wait that ran nothing", err, pipeline.Classify(err), out.puts)
	}
	p.mem.sem.Release(p.mem.bytes)
	if _, err := p.Run(context.Background(), req(out)); err != nil || out.puts != 1 {
		t.Fatalf("Run once the budget is free: %v, %d puts", err, out.puts)
	}
	if !p.mem.sem.TryAcquire(p.mem.bytes) {
		t.Fatal("Run did not give its budget back")
	}
}
