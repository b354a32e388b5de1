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
	mu   sync.Mutex
	room []int64
}

// MaxRuns bounds the runs a Book remembers: past it, it forgets them all.
const MaxRuns = 1024

// Run is the room of run run of batch id, counted in lanes lanes: the
// one the Book keeps, or a new one, every lane unknown (−1).
func (l *Book) Run(id string, run, lanes int) *Room {
	k := id + "#" + strconv.Itoa(run)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil || len(l.runs) >= MaxRuns {
		l.runs = map[string]*Room{}
	}
	r := l.runs[k]
	if r == nil || len(r.room) != max(1, lanes) {
		r = &Room{room: make([]int64, max(1, lanes))}
		for i := range r.room {
			r.room[i] = -1
		}
		l.runs[k] = r
	}
	return r
}

// Pick returns a lane at random among those with room (or not written
// yet) and the room known (−1: unknown), or −1 when every lane is full.
func (r *Room) Pick() (int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var open []int
	for i, v := range r.room {
		if v != 0 {
			open = append(open, i)
		}
	}
	if len(open) == 0 {
		return -1, 0
	}
	p := open[rand.IntN(len(open))]
	return p, r.room[p]
}

// Set keeps room (at least 0) as lane p's room left.
func (r *Room) Set(p int, room int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.room[p] = max(room, 0)
}
