package keyset_test

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/keyset"
)

func TestMeasure10M(t *testing.T) {
	if os.Getenv("KEYSET_MEASURE") == "" {
		t.Skip()
	}
	for _, kind := range []string{"random", "positional"} {
		runtime.GC()
		var peak atomic.Uint64
		done := make(chan struct{})
		go func() {
			s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			for {
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
				}
				metrics.Read(s)
				if v := s[0].Value.Uint64(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}()
		r := rand.New(rand.NewPCG(7, 7))
		d := keyset.New(keyset.Options{Dir: "/tmp/kmeasure"})
		raw := make([]byte, 20)
		key := make([]byte, 40)
		start := time.Now()
		const n = 10_000_000
		perm := rand.New(rand.NewPCG(3, 3)).Perm(n)
		for i := range n {
			if kind == "random" {
				for j := range raw {
					raw[j] = byte(r.Uint32())
				}
				hex.Encode(key, raw)
			} else {
				key = fmt.Appendf(key[:0], "incoming/2026/11/29/objects/obj-%08d", perm[i])
			}
			if err := d.Add(key, int64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		addDur := time.Since(start)
		err := d.Finish()
		close(done)
		st := d.Stats()
		t.Logf("%s keylen=%d: err=%v add=%v total=%v stats=%+v peakHeapObjects=%.1f MiB", kind, len(key), err, addDur, time.Since(start), st, float64(peak.Load())/(1<<20))
	}
}
