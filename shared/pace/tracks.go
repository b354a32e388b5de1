package pace

// SliceItems is the items a track claims at a time, rounded up to whole
// packs (SliceSize): small enough that the tracks of a batch end within
// one slice of each other, large enough that the claim counter takes one
// write per SliceItems items.
const SliceItems = 100

// MaxTrackRetries is the most units one track keeps waiting for a retry
// (a transient failure, a throttled call, AWS unavailable): a track whose
// list is full starts no new unit until the earliest is due, so a failing
// downstream slows its own batch down. 64 entries of at most ≈ 120 bytes
// keep a track message under 8 KiB (SQS allows 256 KiB).
const MaxTrackRetries = 64

// SliceSize is the items of a slice of a batch of k items per message
// (k in 1–100; below 1 taken as 1): k × ⌈SliceItems / k⌉, so that a slice
// starts on a pack boundary and holds whole packs (100 items for every k
// dividing 100). The last slice of a fan-out chunk holds what is left of
// the chunk.
func SliceSize(k int) int64 {
	k = max(k, 1)
	return int64(k * ((SliceItems + k - 1) / k))
}

// SlicesPerChunk is how many slice numbers one fan-out chunk of at most
// chunkItems items takes: ⌈chunkItems / SliceSize(k)⌉. A chunk holding
// fewer items (the last one, a correction run's) leaves some of its
// numbers empty (Slice reports them).
func SlicesPerChunk(chunkItems int64, k int) int64 {
	s := SliceSize(k)
	return max(1, (chunkItems+s-1)/s)
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

// ClaimNumber is the slice number of a track's claim: the first tracks
// slice numbers 0 … tracks−1 are the tracks' own (sent with them), and
// the n-th claim (n ≥ 1, as the claim counter answers) takes slice
// tracks + n − 1.
func ClaimNumber(tracks int, n int64) int64 { return int64(tracks) + n - 1 }

// Span is a range of a fan-out chunk's items: the First manifest index
// and Count items.
type Span struct {
	First, Count int64
}

// Slice locates slice number g in a run whose fan-out chunks are
// chunks (in manifest order) cut at chunkItems items (k items per
// message): the chunk's position in chunks, the slice's position in the
// chunk (j) and its items. ok is false past the run's last slice; empty
// is true for a number that a short chunk leaves without items (claim
// the next one).
func Slice(g int64, chunks []Span, chunkItems int64, k int) (chunk int, j int64, s Span, empty, ok bool) {
	per := SlicesPerChunk(chunkItems, k)
	c := g / per
	if g < 0 || c >= int64(len(chunks)) {
		return 0, 0, Span{}, false, false
	}
	j = g % per
	at := j * SliceSize(k)
	ch := chunks[c]
	if at >= ch.Count {
		return int(c), j, Span{}, true, true
	}
	return int(c), j, Span{First: ch.First + at, Count: min(SliceSize(k), ch.Count-at)}, false, true
}

// ChunkItemsOf is the chunk size a run's slices are numbered by: its
// largest chunk (every chunk but the last holds as many in a run cut at
// a fixed size; a correction run's may all be shorter).
func ChunkItemsOf(chunks []Span) int64 {
	var n int64
	for _, c := range chunks {
		n = max(n, c.Count)
	}
	return max(n, 1)
}

// RunSlices is how many slice numbers a run of chunks chunks takes.
func RunSlices(chunks int, chunkItems int64, k int) int64 {
	return int64(chunks) * SlicesPerChunk(chunkItems, k)
}

// ClaimWritesPerSecond is the writes a second the claim counter of a run
// takes when its tracks end itemsPerSecond items a second at k items per
// message: one per slice.
func ClaimWritesPerSecond(itemsPerSecond float64, k int) float64 {
	return itemsPerSecond / float64(SliceSize(k))
}
