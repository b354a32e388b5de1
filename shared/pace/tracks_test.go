package pace

import "testing"

// TestSliceSize guards that a slice holds whole packs and that a run has
// at least SlicesPerTrack slices per track while slices are under 100
// items: 100 items for a run of 400 × limit items or more at every K
// dividing 100, K × ⌈100 / K⌉ at the others, smaller below.
func TestSliceSize(t *testing.T) {
	for _, c := range []struct {
		k     int
		items int64
		limit int
		want  int64
	}{
		{0, 1e6, 10, 100}, {1, 1e6, 10, 100}, {10, 1e6, 10, 100}, {3, 1e6, 10, 102}, {7, 1e6, 10, 105}, {100, 1e6, 1000, 100},
		{1, 4000, 10, 100}, {1, 40, 3, 4}, {10, 40, 3, 10}, {1, 1, 1000, 1}, {1, 10000, 10, 100}, {1, 1000, 10, 25},
	} {
		if got := SliceSize(c.k, c.items, c.limit); got != c.want {
			t.Errorf("SliceSize(%d, %d, %d) = %d, want %d", c.k, c.items, c.limit, got, c.want)
		}
	}
}

// TestSliceNumbersCoverEveryItemOnce guards that the slice numbers of a
// run, claimed in order, are at least one per track, cover each chunk's
// items exactly once, start on a pack of their chunk, with
// short chunks leaving empty numbers and ok false past the last.
func TestSliceNumbersCoverEveryItemOnce(t *testing.T) {
	chunks := []Span{{First: 0, Count: 250}, {First: 250, Count: 250}, {First: 500, Count: 30}}
	for _, c := range []struct{ k, limit int }{{1, 1}, {3, 1}, {10, 1}, {1, 10}, {3, 10}, {10, 10}, {1, 1000}} {
		k := c.k
		l := NewLayout(chunks, k, c.limit)
		seen := make([]int, 530)
		total := l.Slices()
		if total < int64(min(c.limit, 530/k)) {
			t.Errorf("K=%d, limit %d: %d slices of %d items", k, c.limit, total, l.Size)
		}
		for g := int64(0); g < total; g++ {
			c, _, s, empty, ok := l.Slice(g)
			if !ok {
				t.Fatalf("K=%d: slice %d of %d not ok", k, g, total)
			}
			if empty {
				continue
			}
			if (s.First-chunks[c].First)%int64(k) != 0 {
				t.Errorf("K=%d: slice %d starts at %d, not on a pack of its chunk", k, g, s.First)
			}
			for i := s.First; i < s.First+s.Count; i++ {
				seen[i]++
			}
		}
		if _, _, _, _, ok := l.Slice(total); ok {
			t.Errorf("K=%d: slice %d past the run is ok", k, total)
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("K=%d: item %d in %d slices", k, i, n)
			}
		}
	}
}

// TestTracksAndClaims guards the track count (the limit, at most one per
// slice) and claim numbering (the n-th claim takes slice tracks + n − 1).
func TestTracksAndClaims(t *testing.T) {
	if got := Tracks(10, 3); got != 3 {
		t.Errorf("Tracks(10, 3) = %d, want 3", got)
	}
	if got := Tracks(10, 1000); got != 10 {
		t.Errorf("Tracks(10, 1000) = %d, want 10", got)
	}
	if got := Tracks(0, 1000); got != 0 {
		t.Errorf("Tracks(0, 1000) = %d, want 0", got)
	}
	if got := ClaimNumber(10, 1); got != 10 {
		t.Errorf("ClaimNumber(10, 1) = %d, want 10", got)
	}
}

// TestClaimCounterUnderTheKeyLimit guards the partition arithmetic: a
// run of 10^8 items at the largest limit, ending 10^5 items a second
// (beyond a stack's Lambda concurrency at any real item time), has its
// claim counter take 1,000 writes a second at K = 1, and no more at any
// K: DynamoDB's 1,000 write units a second per key. (A run under 400 ×
// limit items takes at most SlicesPerTrack × limit claims in all.)
func TestClaimCounterUnderTheKeyLimit(t *testing.T) {
	for _, k := range []int{1, 3, 10, 100} {
		if w := ClaimWritesPerSecond(1e5, SliceSize(k, 1e8, 1000)); w > 1000 {
			t.Errorf("K=%d: %.0f claim writes a second", k, w)
		}
	}
}
