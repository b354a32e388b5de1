// Package peak samples the Go runtime's memory while a measured piece of
// work runs, for benchmarks and measurement tests. Standard library only.
package peak

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Heap samples the Go heap's objects (runtime/metrics
// "/memory/classes/heap/objects:bytes") every 2 ms from now until the
// returned stop is called, which returns the peak in bytes (0 when stop
// comes before the first sample).
func Heap() (stop func() uint64) {
	var peak atomic.Uint64
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				metrics.Read(sample)
				if v := sample[0].Value.Uint64(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}
