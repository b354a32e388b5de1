package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// RangeOpener opens a byte range of an object of the batches' bucket
// (ledger.Blobs has this shape).
type RangeOpener interface {
	OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
}

// ReadManifestLine reads the manifest line of key at ref (its offset and
// length in bytes) in the object manifestKey: one ranged read. A line
// that does not decode, or holds another key, is an error naming its
// offset (the manifest and the reference disagree: nothing of it runs).
func ReadManifestLine(ctx context.Context, blobs RangeOpener, manifestKey, key string, ref Chunk) (ManifestLine, error) {
	rc, err := blobs.OpenRange(ctx, manifestKey, ref.Offset, ref.Length)
	if err != nil {
		return ManifestLine{}, err
	}
	defer rc.Close()
	var l ManifestLine
	if err := json.NewDecoder(io.LimitReader(rc, ref.Length)).Decode(&l); err != nil {
		return ManifestLine{}, fmt.Errorf("manifest line at %d: %w", ref.Offset, err)
	}
	if l.Key != key {
		return ManifestLine{}, fmt.Errorf("manifest line at %d holds key %q, want %q", ref.Offset, l.Key, key)
	}
	return l, nil
}
