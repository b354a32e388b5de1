package lanebook

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// TestTakeAndGive guards that Take moves at most room items out of left
// in TerminalOutcomes order (all of them for a room < 0) and that Give
// puts them back as they were.
func TestTakeAndGive(t *testing.T) {
	left := map[api.Outcome]int64{api.OutcomeSucceeded: 5, api.OutcomeFailed: 3}
	was := maps.Clone(left)
	part := Take(left, 6)
	var n int64
	for _, v := range part {
		n += v
	}
	if n != 6 || left[api.OutcomeSucceeded]+left[api.OutcomeFailed] != 2 {
		t.Fatalf("Take(…, 6) = %v, left %v", part, left)
	}
	Give(left, part)
	if !maps.Equal(left, was) {
		t.Errorf("Give put back %v, want %v", left, was)
	}
	if all := Take(left, -1); all[api.OutcomeSucceeded] != 5 || all[api.OutcomeFailed] != 3 {
		t.Errorf("Take(…, -1) = %v, want everything", all)
	}
}

// TestRoomOnlyPicksOpenLanes guards that a run's lanes start unknown,
// that a full lane is never picked, and that every lane full picks none.
func TestRoomOnlyPicksOpenLanes(t *testing.T) {
	var b Book
	r := b.Run("b1", 1, []int64{10, 10, 10})
	if p, room := r.Pick(); p < 0 || room != -1 {
		t.Fatalf("a new run's Pick = %d, %d; want a lane of unknown room", p, room)
	}
	r.Set(0, 0)
	r.Set(1, -5) // kept as 0
	r.Set(2, 7)
	for range 20 {
		if p, room := r.Pick(); p != 2 || room != 7 {
			t.Fatalf("Pick = %d, %d; want lane 2 with 7", p, room)
		}
	}
	r.Set(2, 0)
	if p, _ := r.Pick(); p != -1 {
		t.Errorf("every lane full: Pick = %d, want -1", p)
	}
	if b.Run("b1", 1, []int64{10, 10, 10}) != r {
		t.Error("the same run's room was not kept")
	}
	if b.Run("b1", 1, []int64{10, 10, 10, 10}) == r {
		t.Error("a run counted in other lanes kept its old room")
	}
}

// TestWeighedPicksFillLanesTogether plays the counter writes of runs of
// 10^7 and 10^8 items at the stack's default flow: message batches of 10
// items, 1,000 a second, each counted by one of 1,000 processes (its own
// Book, knowing each lane's room as of its own last write there) into 4
// lanes. A write to a lane already full is refused and tells its room, as
// DynamoDB's condition does, and counts as a write. Every item is counted
// once, and the busiest lane's busiest second stays ≤ 1.5 × a lane's share
// of 250 writes a second: picked evenly (put back for a play), the lane
// furthest behind took 587 to all 1,000 writes in a second at 10^7 and
// 10^8 items as the others filled before it.
func TestWeighedPicksFillLanesTogether(t *testing.T) {
	for _, items := range []int64{10_000_000, 100_000_000} {
		const lanes, perSecond, processes, batch = 4, 1000, 1000, 10
		targets := []int64{items / lanes, items / lanes, items / lanes, items / lanes}
		books := make([]Book, processes)
		done := make([]int64, lanes)
		var busiest, second int64
		perLane := make([]int64, lanes)
		rng := rand.New(rand.NewPCG(7, uint64(items)))
		for w := int64(0); w < items/batch; w++ {
			if s := w / perSecond; s != second {
				for p := range perLane {
					busiest, perLane[p] = max(busiest, perLane[p]), 0
				}
				second = s
			}
			r := books[rng.IntN(processes)].Run("b", 1, targets)
			left := int64(batch)
			for left > 0 {
				p, room := r.Pick()
				if p < 0 {
					t.Fatalf("%d items, write %d: every lane full with %d items left", items, w, left)
				}
				perLane[p]++
				n := left
				if room >= 0 {
					n = min(left, room)
				}
				if fits := targets[p] - done[p]; n > fits {
					r.Set(p, fits) // refused: the room left
					continue
				}
				done[p] += n
				left -= n
				r.Set(p, targets[p]-done[p])
			}
		}
		for p := range perLane {
			busiest = max(busiest, perLane[p])
		}
		for p, d := range done {
			if d != targets[p] {
				t.Errorf("%d items: lane %d counted %d items, want %d", items, p, d, targets[p])
			}
		}
		share := float64(perSecond) / lanes
		t.Logf("%d items: busiest lane second: %d writes, %.2f × a lane's share of %.0f", items, busiest, float64(busiest)/share, share)
		if float64(busiest) > 1.5*share {
			t.Errorf("%d items: busiest lane second: %d writes, over 1.5 × a lane's share of %.0f", items, busiest, share)
		}
	}
}
