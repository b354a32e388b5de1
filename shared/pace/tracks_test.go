package pace

import "testing"

// TestSliceSize guards that a slice holds whole packs: 100 items for
// every K dividing 100, K × ⌈100 / K⌉ otherwise.
func TestSliceSize(t *testing.T) {
	for _, c := range []struct {
		k    int
		want int64
	}{{0, 100}, {1, 100}, {10, 100}, {3, 102}, {7, 105}, {100, 100}} {
		if got := SliceSize(c.k); got != c.want {
			t.Errorf("SliceSize(%d) = %d, want %d", c.k, got, c.want)
		}
	}
}

// TestSliceNumbersCoverEveryItemOnce guards that the slice numbers of a
// run, claimed in order, cover each chunk's items exactly once, start on
// a pack of their chunk, with
// short chunks leaving empty numbers and ok false past the last.
func TestSliceNumbersCoverEveryItemOnce(t *testing.T) {
	chunks := []Span{{First: 0, Count: 250}, {First: 250, Count: 250}, {First: 500, Count: 30}}
	per := ChunkItemsOf(chunks)
	for _, k := range []int{1, 3, 10} {
		seen := make([]int, 530)
		total := RunSlices(len(chunks), per, k)
		for g := int64(0); g < total; g++ {
			c, _, s, empty, ok := Slice(g, chunks, per, k)
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
		if _, _, _, _, ok := Slice(total, chunks, per, k); ok {
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

// TestClaimCounterUnderTheKeyLimit guards the partition arithmetic: at
// 10^5 items a second (beyond a stack's Lambda concurrency at any real
// item time) the claim counter takes 1,000 writes a second at K = 1, and
// no more at any K: DynamoDB's 1,000 write units a second per key.
func TestClaimCounterUnderTheKeyLimit(t *testing.T) {
	for _, k := range []int{1, 3, 10, 100} {
		if w := ClaimWritesPerSecond(1e5, k); w > 1000 {
			t.Errorf("K=%d: %.0f claim writes a second", k, w)
		}
	}
}
