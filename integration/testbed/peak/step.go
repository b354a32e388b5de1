package peak

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// StepMeter measures one step of a benchmark (an invocation): its wall
// and CPU time, the peak Go heap and the most memory the runtime held
// (total less released, what a function's memory must hold besides its
// executable), sampled every 2 ms from runtime/metrics.
type StepMeter struct {
	heap, held atomic.Uint64
	stop       chan struct{}
	wg         sync.WaitGroup
	cpu0       time.Duration
	start      time.Time
}

// StartStep returns garbage to the OS and starts measuring.
func StartStep() *StepMeter {
	debug.FreeOSMemory()
	m := &StepMeter{stop: make(chan struct{}), cpu0: processCPU(), start: time.Now()}
	m.wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > m.heap.Load() {
				m.heap.Store(v)
			}
			if v := s[1].Value.Uint64() - s[2].Value.Uint64(); v > m.held.Load() {
				m.held.Store(v)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	})
	return m
}

// StepFigures is what a StepMeter measured.
type StepFigures struct {
	Wall, CPU        time.Duration
	HeapMiB, HeldMiB float64
}

// End stops measuring and returns the figures.
func (m *StepMeter) End() StepFigures {
	close(m.stop)
	m.wg.Wait()
	return StepFigures{Wall: time.Since(m.start), CPU: processCPU() - m.cpu0,
		HeapMiB: float64(m.heap.Load()) / (1 << 20), HeldMiB: float64(m.held.Load()) / (1 << 20)}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Add adds f's wall and CPU times to s.
func (s *StepFigures) Add(f StepFigures) { s.Wall += f.Wall; s.CPU += f.CPU }

// Max keeps the larger peak heap and memory held of s and f.
func (s *StepFigures) Max(f StepFigures) {
	s.HeapMiB, s.HeldMiB = max(s.HeapMiB, f.HeapMiB), max(s.HeldMiB, f.HeldMiB)
}
