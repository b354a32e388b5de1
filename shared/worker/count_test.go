package worker

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// laneStore is the counter rows of one run, in memory, with DynamoDB's
// conditions: enough of a Store for Worker.count. It records each write
// (its row and its simulated second) to find the busiest row.
type laneStore struct {
	ledger.Store
	mu        sync.Mutex
	done      map[int]int64
	failures  map[int]int64
	run       ledger.RunCounted
	now       func() int64 // the simulated second of a write
	writes    map[string]map[int64]int
	stops     int
	triggered int
	busyMs    int64 // LaneCount.BusyMs of the writes that counted
}

func newLaneStore() *laneStore {
	return &laneStore{done: map[int]int64{}, failures: map[int]int64{}, writes: map[string]map[int64]int{}}
}

func (s *laneStore) wrote(row string) {
	if s.writes[row] == nil {
		s.writes[row] = map[int64]int{}
	}
	s.writes[row][s.now()]++
}

func (s *laneStore) CountLane(_ context.Context, c ledger.LaneCount) (ledger.LaneCounted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote(fmt.Sprintf("lane %d", c.Lane))
	if s.done[c.Lane]+c.Done() > c.Target {
		return ledger.LaneCounted{Done: s.done[c.Lane], Room: c.Target - s.done[c.Lane]}, api.ErrConflict
	}
	s.done[c.Lane] += c.Done()
	s.failures[c.Lane] += c.Failures
	s.busyMs += c.BusyMs
	return ledger.LaneCounted{Done: s.done[c.Lane], Failures: s.failures[c.Lane]}, nil
}

func (s *laneStore) CountRun(_ context.Context, c ledger.RunCount) (ledger.RunCounted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote("run")
	s.run.LanesDone += c.LanesDone
	s.run.Failures += c.Failures
	return s.run, nil
}

func (s *laneStore) Progress(context.Context, string, int, int) (ledger.Progress, error) {
	return ledger.Progress{}, nil
}

func (s *laneStore) Stop(context.Context, ledger.StopMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote("batch")
	s.stops++
	if s.stops > 1 {
		return api.ErrConflict
	}
	return nil
}

func (s *laneStore) Finalize(context.Context, string, int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.triggered++
	return nil
}

// busiest is the most writes one row took in one simulated second.
func (s *laneStore) busiest() (string, int) {
	row, most := "", 0
	for r, per := range s.writes {
		for _, n := range per {
			if n > most {
				row, most = r, n
			}
		}
	}
	return row, most
}

// TestLanesStayUnderTheLimit plays a run at the stack's flow: 10,000
// items/s in message batches of 10 items from 100 (and 1,000) item
// function instances, each batch counted by a random instance (its own
// Worker, so its own knowledge of which lanes are full), with 0 %, 5 %
// and 100 % failures and the early stop armed at 10 % (or not). Every
// item is counted once and the run completes exactly once, and no
// counter row (lane or run) nor the batch row (stop attempts) takes more
// than DynamoDB's 1,000 write units/s per partition key in any second —
// also while the lanes fill one after another at the end. A run's
// counter rows used to be one per fan-out chunk: with message batches
// mixing chunks (as SQS standard queues deliver them) a message batch
// wrote ≈ 6.5 counters, and with the early stop every message batch
// holding a failure wrote the run row: 10,000 × 5 % ≈ 450 writes/s, all
// of them at 100 % failures.
func TestLanesStayUnderTheLimit(t *testing.T) {
	for _, tc := range []struct {
		items     int64
		writers   int
		failPct   int
		threshold float64 // 0: none
		flow      int64   // items/s; 0: the defaults' 10,000
		perBatch  int64   // items per message batch; 0: ledger.ItemsPerMessageBatch (K = 1)
	}{
		{1_000, 100, 0, 0, 0, 0}, {100_000, 100, 0, 0, 0, 0}, {1_000_000, 1000, 0, 0, 0, 0},
		{200_000, 100, 5, 10, 0, 0}, {200_000, 1000, 100, 10, 0, 0}, {200_000, 100, 100, 0, 0, 0},
		{200_000, 100, 5, 0.0005, 0, 0}, {200_000, 1000, 100, 0.15, 0, 0},
		{1_000_000, 1000, 5, 10, 100_000, 0}, // the largest flow: StackFlow(1000, 10)
		// K = 10 and 100: ten packs a message batch
		{1_000_000, 100, 0, 0, 0, 100}, {1_000_000, 1000, 0, 0, 0, 100}, {1_000_000, 100, 5, 10, 0, 100},
		{1_000_000, 100, 0, 0, 0, 1000}, {1_000_000, 1000, 0, 0, 0, 1000},
	} {
		flow := cmp.Or(tc.flow, 10_000)
		perBatch := cmp.Or(tc.perBatch, ledger.ItemsPerMessageBatch)
		name := fmt.Sprintf("%d items at %d per s in message batches of %d, %d instances, %d%% failures, threshold %g%%", tc.items, flow, perBatch, tc.writers, tc.failPct, tc.threshold)
		t.Run(name, func(t *testing.T) {
			s := newLaneStore()
			var sec int64
			s.now = func() int64 { return sec }
			b := ledger.Batch{Batch: api.Batch{ID: "b", Run: 1, ItemCount: tc.items}, CounterLanes: ledger.CounterLanes(tc.items, int(flow))}
			if tc.threshold > 0 {
				b.Threshold.FailurePercent = &tc.threshold
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			ws := make([]*Worker, tc.writers)
			for i := range ws {
				ws[i] = &Worker{Store: s, Trigger: s, Clock: fixedClock{}, Log: log}
			}
			rng := rand.New(rand.NewPCG(1, uint64(tc.items)))
			stopped, stopAt := false, int64(-1)
			for i := int64(0); i < tc.items; i += perBatch {
				sec = i / flow
				var dones []done
				for j := i; j < min(i+perBatch, tc.items); j++ {
					o := api.OutcomeSucceeded
					if rng.IntN(100) < tc.failPct {
						o = api.OutcomeFailed
					}
					if stopped {
						o = api.OutcomeCancelled
					}
					dones = append(dones, done{batch: b, outcome: o, first: 0, items: 1})
				}
				w := ws[rng.IntN(len(ws))]
				w.count(context.Background(), dones, 1)
				// The stop reaches the workers with the batch row they
				// read, a second later.
				switch {
				case s.stops > 0 && stopAt < 0:
					stopAt = sec
				case stopAt >= 0 && sec > stopAt && !stopped:
					stopped, b.Stop = true, api.StatusThresholdExceeded
				}
			}
			var total int64
			for _, d := range s.done {
				total += d
			}
			if total != tc.items || s.triggered != 1 || s.run.LanesDone != int64(b.CounterLanes) {
				t.Errorf("counted %d of %d items, finalize triggered %d times, %d of %d lanes done", total, tc.items, s.triggered, s.run.LanesDone, b.CounterLanes)
			}
			if wantStop := tc.threshold > 0 && float64(tc.failPct) > tc.threshold; (s.stops > 0) != wantStop {
				t.Errorf("stop attempts %d, want a stop %v", s.stops, wantStop)
			}
			row, most := s.busiest()
			if most > 1000 {
				t.Errorf("%s took %d writes in one second, over DynamoDB's 1,000 write units/s", row, most)
			}
			// The lanes' end: the busiest lane's second against a lane's
			// mean (message batches a second over the lanes). The cost
			// bench's partition model takes it at 1.6 × where a lane's
			// mean is 100 writes a second or more (bench.LaneEndGame; K = 1
			// here: at most 1.21 × on 4 lanes and 1.38 × on 40 in about 60 plays,
			// the lanes filling together as lanebook.Room.Pick weighs them
			// by their room; picked evenly, up to 2.32 ×), and as every lane
			// write of the second on one lane below that (K = 10: up to
			// 3.16 × of 4 lanes; K = 100: 4.00 ×, 10 writes).
			lane, laneMost := "", 0
			for r, per := range s.writes {
				if strings.HasPrefix(r, "lane") {
					for _, n := range per {
						if n > laneMost {
							lane, laneMost = r, n
						}
					}
				}
			}
			mean := float64(flow) / float64(perBatch) / float64(b.CounterLanes)
			if mean >= 100 && float64(laneMost) > 1.6*mean {
				t.Errorf("%s took %d writes in its busiest second, %.2f × a lane's mean %.1f: over the bench's 1.6 ×", lane, laneMost, float64(laneMost)/mean, mean)
			}
			t.Logf("%d lanes; busiest row %s: %d writes/s; busiest lane %.2f × a lane's mean of %.1f writes/s; run row %d writes; stop attempts %d",
				b.CounterLanes, row, most, float64(laneMost)/mean, mean, sumWrites(s.writes["run"]), s.stops)
			if lanes := b.CounterLanes; s.stops > lanes+1 || sumWrites(s.writes["run"]) > lanes+lanes*(8*lanes+2) {
				t.Errorf("%d stop attempts and %d run-row writes, want at most %d and %d", s.stops, sumWrites(s.writes["run"]), lanes+1, lanes+lanes*(8*lanes+2))
			}
		})
	}
}

func sumWrites(per map[int64]int) int {
	n := 0
	for _, v := range per {
		n += v
	}
	return n
}

type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Unix(1_800_000_000, 0) }

// An invocation's item-slot time is spread over its endings that ran an
// attempt: 300 ms of two items, each in its own slot, is 600 ms of slot
// time (300 ms each); with one slot, 300 ms (150 ms each); a count of no
// ran ending carries none and keeps the time for the next. A sampled
// first run without its estimate counts the slot time once, with the
// write that counts, though the first lane tried is full and refuses it;
// once the estimate is written, or on a batch that does not sample, it
// is not sent.
func TestCountSendsTheSampleItemSlotTimeOnce(t *testing.T) {
	s := newLaneStore()
	s.now = func() int64 { return 0 }
	b := ledger.Batch{Batch: api.Batch{ID: "b", Run: 1, ItemCount: 40, Approval: &api.Approval{Sample: 20}}, CounterLanes: 2}
	s.done[0] = ledger.LaneTarget(40, 2, 0) // full: refuses
	w := &Worker{Store: s, Trigger: s, Clock: fixedClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	held := []done{{batch: b, heldAs: api.OutcomeSuspended, heldBy: 1}}
	if next := spreadBusy(held, t0, t0.Add(time.Second), 10); !next.Equal(t0) || held[0].busy != 0 {
		t.Fatalf("no ran ending: next %v, busy %v: want the time kept from %v", next, held[0].busy, t0)
	}
	dns := []done{{batch: b, outcome: api.OutcomeSucceeded, items: 1}, {batch: b, outcome: api.OutcomeSucceeded, items: 1, ran: true},
		{batch: b, outcome: api.OutcomeFailed, items: 1, ran: true}}
	one := []done{dns[1], dns[2]}
	spreadBusy(one, t0, t0.Add(300*time.Millisecond), 1)
	if one[0].busy != 150*time.Millisecond || one[1].busy != 150*time.Millisecond {
		t.Fatalf("one slot: busy %v %v, want 150 ms each", one[0].busy, one[1].busy)
	}
	if next := spreadBusy(dns, t0, t0.Add(300*time.Millisecond), 10); !next.Equal(t0.Add(300*time.Millisecond)) ||
		dns[0].busy != 0 || dns[1].busy != 300*time.Millisecond || dns[2].busy != 300*time.Millisecond {
		t.Fatalf("busy %v %v %v (next %v): want 300 ms on each ending that ran", dns[0].busy, dns[1].busy, dns[2].busy, next)
	}
	w.count(context.Background(), dns, 1)
	if s.busyMs != 600 {
		t.Fatalf("busy %d ms counted, want 600, once", s.busyMs)
	}
	for _, tc := range []struct {
		name string
		a    *api.Approval
	}{{"estimated", &api.Approval{Sample: 20, Estimate: &api.SampleEstimate{}}}, {"not sampled", nil}} {
		b.Approval = tc.a
		w.count(context.Background(), []done{{batch: b, outcome: api.OutcomeSucceeded, items: 1, ran: true, busy: time.Second}}, 1)
		if s.busyMs != 600 {
			t.Errorf("%s: busy %d ms counted, want none more", tc.name, s.busyMs)
		}
	}
}
