package pace

import (
	"fmt"
	"testing"
)

// TestSliceSize guards that a slice holds whole packs and that a run has
// at least SlicesPerTrack slices per track while slices are under 100
// units: 100 units (100 × K items) for a run of 400 × limit × K items or
// more, smaller below (a run of 10^6 items at limit 1,000 and K = 100:
// 250 items, rounded up to 3 packs). SliceSizeItems, the rule of tracks
// sent without their size, stops at 100 items whatever K: K × ⌈100 / K⌉.
func TestSliceSize(t *testing.T) {
	for _, c := range []struct {
		k         int
		items     int64
		limit     int
		want, old int64
	}{
		{0, 1e6, 10, 100, 100}, {1, 1e6, 10, 100, 100}, {10, 1e6, 10, 1000, 100}, {3, 1e6, 10, 300, 102}, {7, 1e6, 10, 700, 105},
		{100, 1e6, 1000, 300, 100}, {100, 1e8, 1000, 10000, 100}, {10, 20000, 10, 500, 100}, {10, 2000, 10, 50, 50},
		{1, 4000, 10, 100, 100}, {1, 40, 3, 4, 4}, {10, 40, 3, 10, 10}, {1, 1, 1000, 1, 1}, {1, 10000, 10, 100, 100}, {1, 1000, 10, 25, 25},
	} {
		if got := SliceSize(c.k, c.items, c.limit); got != c.want {
			t.Errorf("SliceSize(%d, %d, %d) = %d, want %d", c.k, c.items, c.limit, got, c.want)
		}
		if got := SliceSizeItems(c.k, c.items, c.limit); got != c.old {
			t.Errorf("SliceSizeItems(%d, %d, %d) = %d, want %d", c.k, c.items, c.limit, got, c.old)
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
	if got := ClaimNumber(10, 1, 0, 1); got != 10 {
		t.Errorf("ClaimNumber(10, 1, 0, 1) = %d, want 10", got)
	}
	if got := ClaimNumber(10, 1, 0, 5); got != 14 {
		t.Errorf("ClaimNumber(10, 1, 0, 5) = %d, want 14", got)
	}
}

// TestCountersDealTheSlices guards the claim counters of a run on many
// tracks: one per 64 tracks, each track's home counter shared by at most
// 64 tracks, and the counters' answers dealing every slice number after
// the tracks' own to exactly one counter and answer, so that no slice is
// skipped or dealt twice; a counter is drained exactly when its next
// answer lies past the last slice.
func TestCountersDealTheSlices(t *testing.T) {
	for _, c := range []struct{ tracks, want int }{{1, 1}, {64, 1}, {65, 2}, {128, 2}, {129, 3}, {1000, 16}} {
		n := Counters(c.tracks)
		if n != c.want {
			t.Errorf("Counters(%d) = %d, want %d", c.tracks, n, c.want)
		}
		home := make([]int, n)
		for i := range c.tracks {
			home[HomeCounter(i, n)]++
		}
		for k, h := range home {
			if h > TracksPerCounter || h < c.tracks/n {
				t.Errorf("%d tracks: counter %d is home to %d", c.tracks, k, h)
			}
		}
	}
	l := NewLayout([]Span{{0, 20000}, {20000, 20000}, {40000, 7000}}, 10, 300)
	tracks := Tracks(300, l.Slices())
	counters := Counters(tracks)
	if counters != 5 {
		t.Fatalf("%d tracks: %d counters, want 5", tracks, counters)
	}
	dealt := map[int64]string{}
	for c := range counters {
		for n := int64(1); ; n++ {
			g := ClaimNumber(tracks, counters, c, n)
			if l.CounterDrained(tracks, counters, c, n-1) != (g >= l.Slices()) {
				t.Fatalf("counter %d after %d answers: drained %v, next slice %d of %d", c, n-1, l.CounterDrained(tracks, counters, c, n-1), g, l.Slices())
			}
			if g >= l.Slices() {
				break
			}
			if was, ok := dealt[g]; ok {
				t.Fatalf("slice %d dealt twice: %s and counter %d answer %d", g, was, c, n)
			}
			dealt[g] = fmt.Sprintf("counter %d answer %d", c, n)
		}
	}
	for g := int64(tracks); g < l.Slices(); g++ {
		if _, ok := dealt[g]; !ok {
			t.Errorf("slice %d dealt by no counter", g)
		}
	}
}

// TestClaimCounterUnderTheKeyLimit guards the partition arithmetic: a
// run of 10^8 items at the largest limit (1,000 tracks), ending 10^5
// items a second (beyond a stack's Lambda concurrency at any real item
// time), has each of its 16 claim counters take ≈ 63 writes a second at
// K = 1 and no more at any K, each of one write unit (64 tracks to a
// row): under DynamoDB's 1,000 write units a second per key. (A run under
// 400 × limit items takes at most SlicesPerTrack × limit claims in all.)
func TestClaimCounterUnderTheKeyLimit(t *testing.T) {
	for _, k := range []int{1, 3, 10, 100} {
		if w := ClaimWritesPerSecond(1e5, SliceSize(k, 1e8, 1000), 1000); w > 1000 {
			t.Errorf("K=%d: %.0f claim writes a second on a counter", k, w)
		}
	}
}
