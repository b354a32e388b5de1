// Package lanebook keeps what an item function's process knows of the
// counter lanes of the runs it counted (docs/adr/0019): the room left in
// each lane, a hint that only shrinks (other processes fill lanes too; a
// write that does not fit tells the room left), and how a unit's
// outcomes are split to fit it. Its state is the process's, bounded by
// MaxRuns.
package lanebook

import (
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Take moves up to room items (all when room < 0) out of left,
// outcome by outcome in TerminalOutcomes order, and returns them.
func Take(left map[api.Outcome]int64, room int64) map[api.Outcome]int64 {
	part := map[api.Outcome]int64{}
	for _, o := range api.TerminalOutcomes() {
		n := left[o]
		if room >= 0 {
			n = min(n, room)
			room -= n
		}
		if n > 0 {
			part[o] = n
			left[o] -= n
		}
	}
	return part
}

// Give puts part back into left.
func Give(left, part map[api.Outcome]int64) {
	for o, n := range part {
		left[o] += n
	}
}

// Book is what one process knows of the room left in the counter
// lanes of the runs it counted: a lane's target minus its done at its
// last write seen (−1: not written yet). Other processes fill lanes too,
// so the room only shrinks; a write that does not fit tells the room left.
type Book struct {
	mu   sync.Mutex
	runs map[string]*Room
}

// Room is one run's lanes in a Book.
type Room struct {
	mu     sync.Mutex
	room   []int64
	target []int64
}

// MaxRuns bounds the runs a Book remembers: past it, it forgets them all.
const MaxRuns = 1024

// Run is the room of run run of batch id, counted in len(targets) lanes
// whose targets (ledger.LaneTarget) these are: the one the Book keeps,
// or a new one, every lane unknown (−1).
func (l *Book) Run(id string, run int, targets []int64) *Room {
	k := id + "#" + strconv.Itoa(run)
	lanes := max(1, len(targets))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil || len(l.runs) >= MaxRuns {
		l.runs = map[string]*Room{}
	}
	r := l.runs[k]
	if r == nil || len(r.room) != lanes {
		r = &Room{room: make([]int64, lanes), target: make([]int64, lanes)}
		for i := range r.room {
			r.room[i] = -1
			if i < len(targets) {
				r.target[i] = max(targets[i], 0)
			}
		}
		l.runs[k] = r
	}
	return r
}

// Pick returns a lane with room (or not written yet) at random, each
// weighed by its room as known (a lane not written yet by its target),
// and that room (−1: unknown); −1 when every lane is full.
//
// Weighed so, the lanes fill together: a lane behind its share is
// picked more, and every lane's room runs out near the run's end. Picked
// evenly, the lanes' counts drift apart by about the square root of a
// lane's writes, and the lane the furthest behind takes every counter
// write of the run alone at its end — at 10^8 items in message batches
// of 10, 4 lanes, 1,000 writes a second, the whole 1,000 for a second
// in a played run, DynamoDB's limit per partition key; weighed, at most
// ≈ 1.2 × a lane's share (TestWeighedPicksFillLanesTogether).
func (r *Room) Pick() (int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var total int64
	for i := range r.room {
		total += r.weight(i)
	}
	if total == 0 {
		return -1, 0
	}
	x := rand.Int64N(total)
	for i := range r.room {
		w := r.weight(i)
		if x < w {
			return i, r.room[i]
		}
		x -= w
	}
	return -1, 0 // not reached: x < total
}

// weight is lane i's weight in Pick: its room known, else its target
// (at least 1, so that a lane of unknown room with a target of 0 can
// still be tried and tell its room).
func (r *Room) weight(i int) int64 {
	if v := r.room[i]; v >= 0 {
		return v
	}
	return max(r.target[i], 1)
}

// Set keeps room (at least 0) as lane p's room left.
func (r *Room) Set(p int, room int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.room[p] = max(room, 0)
}
