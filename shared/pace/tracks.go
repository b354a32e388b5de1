package pace

import "time"

// SliceUnits is the most units (messages' worth: K items each) a track
// claims at a time (SliceSize): small enough that the tracks of a batch
// end within one slice of each other (a slice's units run one after
// another), large enough that the claim counter of a large run takes one
// write, its track one fence take and one counter write per SliceUnits
// units, not per SliceUnits items.
const SliceUnits = 100

// SliceItems is the most items of a slice of a run whose tracks were
// sent before they carried their slice size (ledger.Track.Size 0):
// SliceSizeItems.
const SliceItems = 100

// MaxTrackRetries is the most units one track keeps waiting for a retry
// (a transient failure, a throttled call, AWS unavailable): a track whose
// list is full starts no new unit until the earliest is due, so a failing
// downstream slows its own batch down. 64 entries of at most ≈ 120 bytes
// keep a track message under 8 KiB (SQS allows 256 KiB).
const MaxTrackRetries = 64

// TrackLookEvery is the longest a track waits between deliveries (for its
// retries, its batch's pause): a unit handed to it (a woken unit of its
// run, ledger.Store HandToTrack) is taken at its next delivery, so it
// waits at most this (or one delivery of a busy track, the item
// function's timeout). An idle track costs a message, a take of its
// fence row and a read of its batch row a minute.
const TrackLookEvery = time.Minute

// SlicesPerTrack is how many slices a run is cut into per track at
// least (while slices stay under SliceItems): so that a small run still
// has a slice for every track its limit allows, and its tracks end
// within a small slice of each other.
const SlicesPerTrack = 4

// SliceSize is the items of a slice of a run of runItems items, k items
// per message (1–100; below 1 taken as 1) and limit max_concurrency:
// ⌈runItems / (SlicesPerTrack × limit)⌉ clamped to 1–SliceUnits × k,
// rounded up to whole packs (k × ⌈size / k⌉), so that a slice starts on a
// pack boundary of its chunk and holds whole packs: 100 units (100 × k
// items) for every run of 400 × limit × k items or more. The last slice
// of a fan-out chunk holds what is left of the chunk (a product run's
// chunks are 5,000 items, source.DefaultChunkItems). The submit that
// starts a run's tracks computes it once and sends it with each track
// (ledger.Track.Size), so that a change of this rule never meets a run
// already going.
func SliceSize(k int, runItems int64, limit int) int64 {
	return sliceSize(k, runItems, limit, int64(SliceUnits)*int64(max(k, 1)))
}

// SliceSizeItems is SliceSize as it was before tracks carried their
// slice size: at most SliceItems items whatever k, so that a slice of a
// large run at K = 10 held 10 units. A track message with no size (sent
// by a stack before the change, ledger.Track.Size 0) numbers its run's
// slices by it, as every track of that run does.
func SliceSizeItems(k int, runItems int64, limit int) int64 {
	return sliceSize(k, runItems, limit, SliceItems)
}

func sliceSize(k int, runItems int64, limit int, most int64) int64 {
	k, limit = max(k, 1), max(limit, 1)
	per := min(max((runItems+int64(SlicesPerTrack*limit)-1)/int64(SlicesPerTrack*limit), 1), most)
	return int64(k) * ((per + int64(k) - 1) / int64(k))
}

// Tracks is how many tracks a batch with limit n (max_concurrency ≥ 1)
// runs over slices slice numbers: one per unit of concurrency, but no
// more than there are slices. 0 when n or slices is 0.
func Tracks(n int, slices int64) int {
	if n <= 0 || slices <= 0 {
		return 0
	}
	return int(min(int64(n), slices))
}

// TracksPerCounter is the most tracks that claim from one claim counter
// row. The row keeps each of its tracks' last claim and answer (two
// number attributes), so that a claim made again is answered again: at
// 64 tracks it is ≈ 780 bytes by DynamoDB's item-size rules, one write
// unit per claim; one row for 1,000 tracks would be ≈ 12.9 KB, 13 write
// units per claim ("Working with items: DynamoDB item sizes", Amazon
// DynamoDB developer guide; the sizes from integration/testbed/meter).
const TracksPerCounter = 64

// Counters is how many claim counters a run of tracks tracks has: one per
// TracksPerCounter tracks (⌈tracks / 64⌉, at least 1). Track i claims
// from counter i mod Counters first (HomeCounter), so the counters'
// tracks differ by at most one.
func Counters(tracks int) int { return max(1, (tracks+TracksPerCounter-1)/TracksPerCounter) }

// HomeCounter is the counter track index claims from first.
func HomeCounter(index, counters int) int { return index % max(counters, 1) }

// ClaimNumber is the slice number of the n-th answer (n ≥ 1) of claim
// counter c of counters: the first tracks slice numbers 0 … tracks−1
// are the tracks' own (sent with them), and the numbers after them are
// dealt to the counters in turn, counter c taking tracks + c,
// tracks + c + counters, …: tracks + (n − 1) × counters + c. With one
// counter the n-th answer takes tracks + n − 1.
func ClaimNumber(tracks, counters, c int, n int64) int64 {
	counters = max(counters, 1)
	return int64(tracks) + (n-1)*int64(counters) + int64(c)
}

// CounterDrained says whether counter c of counters, having answered
// claims claims, has no slice of l left: its next answer lies past the
// run's last slice. A counter once drained stays drained (its count only
// grows).
func (l Layout) CounterDrained(tracks, counters, c int, claims int64) bool {
	return ClaimNumber(tracks, counters, c, claims+1) >= l.Slices()
}

// Span is a range of a fan-out chunk's items: the First manifest index
// and Count items.
type Span struct {
	First, Count int64
}

// Layout is how a run's slices are numbered: its fan-out chunks (in
// manifest order), the chunk size the numbers go by (ChunkItems: the
// largest chunk; every chunk but the last holds as many in a run cut at
// a fixed size, a correction run's may all be shorter) and the slice
// size (SliceSize). Each chunk takes ⌈ChunkItems / Size⌉ numbers; a
// shorter chunk leaves some of its numbers empty.
type Layout struct {
	Chunks     []Span
	ChunkItems int64
	Size       int64
}

// NewLayout is the layout of a new run of chunks at k items per message
// and limit max_concurrency (SliceSize). The submit that starts the
// run's tracks computes it and sends its Size with each track; every
// track lays the run out again from the run's chunk table and that size
// (LayoutOf).
func NewLayout(chunks []Span, k, limit int) Layout {
	return LayoutOf(chunks, SliceSize(k, SpanItems(chunks), limit))
}

// LayoutOf is the layout of a run of chunks cut into slices of size
// items (at least 1).
func LayoutOf(chunks []Span, size int64) Layout {
	var n int64
	for _, c := range chunks {
		n = max(n, c.Count)
	}
	return Layout{Chunks: chunks, ChunkItems: max(n, 1), Size: max(size, 1)}
}

// SpanItems is how many items chunks hold.
func SpanItems(chunks []Span) int64 {
	var items int64
	for _, c := range chunks {
		items += c.Count
	}
	return items
}

// PerChunk is how many slice numbers each chunk takes.
func (l Layout) PerChunk() int64 { return max(1, (l.ChunkItems+l.Size-1)/l.Size) }

// Slices is how many slice numbers the run takes.
func (l Layout) Slices() int64 { return int64(len(l.Chunks)) * l.PerChunk() }

// Slice locates slice number g: the chunk's position in Chunks, the
// slice's position in the chunk (j) and its items. ok is false past the
// run's last slice; empty is true for a number that a short chunk leaves
// without items (claim the next one).
func (l Layout) Slice(g int64) (chunk int, j int64, s Span, empty, ok bool) {
	per := l.PerChunk()
	c := g / per
	if g < 0 || c >= int64(len(l.Chunks)) {
		return 0, 0, Span{}, false, false
	}
	j = g % per
	at := j * l.Size
	ch := l.Chunks[c]
	if at >= ch.Count {
		return int(c), j, Span{}, true, true
	}
	return int(c), j, Span{First: ch.First + at, Count: min(l.Size, ch.Count-at)}, false, true
}

// ClaimWritesPerSecond is the writes a second each claim counter of a
// run on tracks tracks takes when its tracks end itemsPerSecond items a
// second in slices of size items: one per slice, shared by its Counters.
func ClaimWritesPerSecond(itemsPerSecond float64, size int64, tracks int) float64 {
	return itemsPerSecond / float64(max(size, 1)) / float64(Counters(tracks))
}
