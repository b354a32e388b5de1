package lanebook

import (
	"maps"
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
	r := b.Run("b1", 1, 3)
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
	if b.Run("b1", 1, 3) != r {
		t.Error("the same run's room was not kept")
	}
	if b.Run("b1", 1, 4) == r {
		t.Error("a run counted in other lanes kept its old room")
	}
}
