package source

// Chunk is a byte range of the manifest holding Count whole lines, the
// first of which is item number FirstIndex (0-based). Fan-out sends one
// message per chunk; the item function expands it into item messages, so a
// batch of any size is fanned out in parallel, resumable pieces.
type Chunk struct {
	Offset     int64 `json:"offset"`
	Length     int64 `json:"length"`
	FirstIndex int64 `json:"first_index"`
	Count      int64 `json:"count"`
}
