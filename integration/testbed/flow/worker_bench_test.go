package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// BenchmarkWorkerItems is the item function's own work per item: the
// worker (Handle: parse, batch row, reservation or take, pipeline call,
// outcome write, counter lane) over the in-memory store, with a pipeline
// that answers at once, in message batches of 10 messages of 1 or 10
// items; so what it measures is what bulkrun adds to an item's pipeline
// on the CPU, without the network. It reports ns of wall and of CPU (user
// + system, getrusage) per item. The time to result on AWS (docs/design/cost.md,
// "Time to result") adds the requests on the critical path to it.
//
//	go test -run '^$' -bench WorkerItems -benchtime 2000x ./integration/testbed/flow/
func BenchmarkWorkerItems(b *testing.B) {
	for _, k := range []int{1, 10} {
		b.Run(fmt.Sprintf("items_per_message=%d", k), func(b *testing.B) {
			ctx := context.Background()
			r := newRig(b, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: json.RawMessage(`{"ok":true}`)}, nil
			})
			r.sub.ChunkItems = source.DefaultChunkItems
			perCall := 10 * k // items per Handle: 10 messages of k items
			items := b.N * perCall
			var src bytes.Buffer
			src.WriteByte('[')
			for i := range items {
				if i > 0 {
					src.WriteByte(',')
				}
				fmt.Fprintf(&src, `{"key":"item-%09d","pad":"%0500d"}`, i, 0)
			}
			src.WriteByte(']')
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "bench", Pipeline: "counted", KeyField: "key",
				Source: api.SourceSpec{Items: src.Bytes()}, ItemsPerMessage: k}); err != nil {
				b.Fatal(err)
			}
			// The fan-out first, untimed: chunk messages into item messages.
			fan := r.queue.take()
			for i := 0; i < len(fan); i += 10 {
				r.worker.Handle(ctx, fan[i:min(i+10, len(fan))])
			}
			ds := r.queue.take()
			cpu0 := cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				lo := i * 10
				if failed := r.worker.Handle(ctx, ds[lo:min(lo+10, len(ds))]); len(failed) > 0 {
					b.Fatalf("%d deliveries failed", len(failed))
				}
			}
			b.StopTimer()
			n := float64(b.N * perCall)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/item")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/n, "cpu-ns/item")
			if r.trigger.n.Load() != 1 {
				b.Fatalf("finalize triggered %d times, want 1", r.trigger.n.Load())
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
