//go:build integration

package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/function"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// submitMemoryMiB is the submit function's memory in the stack
// (SubmitMemoryMiB in infra/bulkrun);
// the test runs submit under the Go memory limit the function sets from
// it (function.SetMemoryLimit).
const submitMemoryMiB = 1024

// memoryPeak samples the Go runtime's memory every 2 ms: the heap's
// objects, and everything the runtime holds from the OS (total minus
// released), the figure GOMEMLIMIT bounds and the one a Lambda function's
// memory must hold, the executable aside.
// The suite's own memory at the start (what earlier tests and the test
// process hold, after a collection) is taken off: the figure is what the
// measured work added, as a function's process holds nothing else.
type memoryPeak struct {
	heap, runtime atomic.Uint64
	base0, base1  uint64 // heap objects and runtime at the start
	stop          chan struct{}
	wg            sync.WaitGroup
}

func startMemoryPeak() *memoryPeak {
	debug.FreeOSMemory() // what earlier work left is not counted
	p := &memoryPeak{stop: make(chan struct{})}
	base := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(base)
	p.base0, p.base1 = base[0].Value.Uint64(), base[1].Value.Uint64()-base[2].Value.Uint64()
	p.wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				metrics.Read(s)
				if v := s[0].Value.Uint64(); v > p.heap.Load() {
					p.heap.Store(v)
				}
				if v := s[1].Value.Uint64() - s[2].Value.Uint64(); v > p.runtime.Load() {
					p.runtime.Store(v)
				}
			}
		}
	})
	return p
}

func (p *memoryPeak) end() (heapMiB, runtimeMiB float64) {
	close(p.stop)
	p.wg.Wait()
	sub := func(v, base uint64) float64 {
		if v < base {
			return 0
		}
		return float64(v-base) / (1 << 20)
	}
	return sub(p.heap.Load(), p.base0), sub(p.runtime.Load(), p.base1)
}

// envCount is the positive integer in the environment variable name, or
// def when it is unset or not one.
func envCount(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

// putSource writes the JSON Lines object incoming/{id}.jsonl of n lines
// (line writes line i, from 0) on the harness's bucket through the S3
// adapter's streaming writer, removes incoming/ and batches/ when the test
// ends, and returns the object as a batch source.
func putSource(t *testing.T, h *harness, id string, n int64, line func(bw *bufio.Writer, i int64)) api.SourceSpec {
	t.Helper()
	ctx := context.Background()
	key := "incoming/" + id + ".jsonl"
	w, err := h.blobs.Create(ctx, key, "application/x-ndjson")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.blobs.DeletePrefix(context.Background(), "incoming/")
		h.blobs.DeletePrefix(context.Background(), "batches/")
	})
	bw := bufio.NewWriterSize(w, 1<<20)
	for i := range n {
		line(bw, i)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return api.SourceSpec{Object: "s3://" + h.blobs.Bucket() + "/" + key}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSubmitPeakMemory guards the product line "a submit of 10^6 items of
// ~1 KB through the real S3 adapter peaks below 128 MiB", and measures a
// submit of BULKRUN_SUBMIT_ITEMS JSONL
// items of ~1 KB (default 300,000; 10^6 for the figure in docs/design/measured.md)
// from an object on the emulator's S3, read and written through the real
// S3 adapter (manifest multipart upload), duplicate keys checked, fan-out
// sent, under the Go memory limit of the stack's submit function. It checks
// the batch and that the runtime's memory stayed below 128 MiB, and logs
// the peaks, the wall and CPU time, and the CPU time 10^7 items would take
// at the function's share of a vCPU (Lambda gives 1 vCPU at 1,769 MB and
// CPU in proportion to memory: AWS Lambda developer guide, "Configuring
// Lambda function memory").
//
//	BULKRUN_SUBMIT_ITEMS=1000000 go test -tags integration -run TestSubmitPeakMemory -v -timeout 30m ./integration/
func TestSubmitPeakMemory(t *testing.T) {
	ctx := context.Background()
	n := envCount("BULKRUN_SUBMIT_ITEMS", 300_000)
	h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	id := newID(t)
	// Keys of ~110 bytes fill keyset's default 32 MiB buffer from
	// ≈ 270,000 items on (submit's 8 MiB from ≈ 66,000), so that the
	// default size already measures a full buffer.
	keyPad, pad := strings.Repeat("k", 94), strings.Repeat("p", 860)
	src := putSource(t, h, id, n, func(bw *bufio.Writer, i int64) {
		fmt.Fprintf(bw, `{"id":"order-%s-%010d","customer":"c-%06d","note":"%s"}`+"\n", keyPad, i, i%7919, pad)
	})

	t.Setenv(function.EnvFunctionMemory, strconv.Itoa(submitMemoryMiB))
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	function.SetMemoryLimit()

	s := *h.submitter
	s.ChunkItems = 0 // the stack's 5,000 items per fan-out message
	s.TempDir = t.TempDir()
	peak := startMemoryPeak()
	cpu0, start := cpuTime(), time.Now()
	res, err := s.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "id",
		Source: src})
	wall, cpu := time.Since(start), cpuTime()-cpu0
	heapMiB, runtimeMiB := peak.end()
	if err != nil {
		t.Fatal(err)
	}
	if res.Batch.ItemCount != n {
		t.Fatalf("batch of %d items, want %d", res.Batch.ItemCount, n)
	}
	share := float64(submitMemoryMiB) / 1769
	at1e7 := time.Duration(float64(cpu) * 1e7 / float64(n) / share)
	t.Logf("submit of %d items (%d MB source): %s wall, %s CPU (%.0f items per CPU-second); peak heap %.1f MiB, runtime %.1f MiB (GOMEMLIMIT %d MiB); 10^7 items at %d MB (%.2f vCPU): ≈ %s of CPU",
		n, res.Batch.ManifestBytes>>20, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), float64(n)/cpu.Seconds(),
		heapMiB, runtimeMiB, function.MemoryLimit(submitMemoryMiB)>>20, submitMemoryMiB, share, at1e7.Round(time.Second))
	if runtimeMiB >= 128 {
		t.Fatalf("submit held %.1f MiB, want < 128", runtimeMiB)
	}
}
