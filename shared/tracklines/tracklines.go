// Package tracklines reads what the tracks of a batch with
// max_concurrency read of its manifest (shared/worker, track.go): its
// lines one at a time from a ranged read (Reader), the run's chunk table
// and each chunk's slices of pace.SliceSize items, written beside the
// manifest by the first track that needs them and kept per process
// (Book).
package tracklines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Blobs is what the package reads and writes of the batches bucket
// (ledger.Blobs has it).
type Blobs interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key, contentType string, body []byte) error
	OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
}

// Reader reads manifest lines one at a time from a ranged read that
// starts at byte base of the manifest.
type Reader struct {
	rc   io.ReadCloser
	dec  *json.Decoder
	base int64
	off  int64 // the next line's byte offset
}

// NewReader reads the lines of rc, a ranged read of the manifest from
// byte base.
func NewReader(rc io.ReadCloser, base int64) *Reader {
	return &Reader{rc: rc, dec: json.NewDecoder(rc), base: base, off: base}
}

// Close closes the ranged read.
func (r *Reader) Close() error { return r.rc.Close() }

// Next returns the next line, its byte offset and its length (with its
// '\n'), as source.ReadManifestLines gives them.
func (r *Reader) Next() (source.ManifestLine, int64, int64, error) {
	var l source.ManifestLine
	if err := r.dec.Decode(&l); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return l, 0, 0, fmt.Errorf("manifest at byte %d: %w", r.off, err)
	}
	// The encoder wrote a '\n' after each line; the decoder stops before it.
	at := r.off
	length := r.base + r.dec.InputOffset() - at + 1
	r.off += length
	return l, at, length, nil
}

// Chunks is the run's chunk table (ledger.ChunksKey), read once per
// process and manifest.
func (c *Book) Chunks(ctx context.Context, blobs Blobs, manifestKey string) ([]source.Chunk, error) {
	c.mu.Lock()
	chunks, ok := c.chunks[manifestKey]
	c.mu.Unlock()
	if ok {
		return chunks, nil
	}
	body, err := blobs.Get(ctx, ledger.ChunksKey(manifestKey))
	if err != nil {
		return nil, fmt.Errorf("read the chunk table: %w", err)
	}
	if err := json.Unmarshal(body, &chunks); err != nil {
		return nil, fmt.Errorf("read the chunk table: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chunks == nil || len(c.chunks) >= maxBookEntries {
		c.chunks = map[string][]source.Chunk{}
	}
	c.chunks[manifestKey] = chunks
	return chunks, nil
}

// Slices is where the slices of a fan-out chunk lie in the manifest
// (ledger.SlicesKey): read once per process, written by the first track
// that reads the chunk, which then counts the chunk's items fanned out.
func (c *Book) Slices(ctx context.Context, blobs Blobs, manifestKey string, chunk source.Chunk, size int64) ([]source.Chunk, error) {
	key := ledger.SlicesKey(manifestKey, size, chunk.FirstIndex)
	c.mu.Lock()
	cuts, ok := c.slices[key]
	c.mu.Unlock()
	if ok {
		return cuts, nil
	}
	body, err := blobs.Get(ctx, key)
	switch {
	case err == nil:
		if err := json.Unmarshal(body, &cuts); err != nil {
			return nil, fmt.Errorf("read the slices of the chunk at %d: %w", chunk.FirstIndex, err)
		}
	case errors.Is(err, api.ErrNotFound):
		if cuts, err = cutSlices(ctx, blobs, manifestKey, chunk, size); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("read the slices of the chunk at %d: %w", chunk.FirstIndex, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slices == nil || len(c.slices) >= maxBookEntries {
		c.slices = map[string][]source.Chunk{}
	}
	c.slices[key] = cuts
	return cuts, nil
}

// cutSlices reads a chunk's lines, cuts them into slices of size items
// (the run's pace.Layout) and writes them beside the manifest.
func cutSlices(ctx context.Context, blobs Blobs, manifestKey string, chunk source.Chunk, size int64) ([]source.Chunk, error) {
	rc, err := blobs.OpenRange(ctx, manifestKey, chunk.Offset, chunk.Length)
	if err != nil {
		return nil, fmt.Errorf("read the chunk at %d: %w", chunk.FirstIndex, err)
	}
	defer rc.Close()
	var cuts []source.Chunk
	index := chunk.FirstIndex
	err = source.ReadManifestLines(rc, chunk.Offset, func(_ source.ManifestLine, off, length int64) error {
		if (index-chunk.FirstIndex)%size == 0 {
			cuts = append(cuts, source.Chunk{Offset: off, FirstIndex: index})
		}
		c := &cuts[len(cuts)-1]
		c.Length, c.Count = off+length-c.Offset, c.Count+1
		index++
		return nil
	})
	if err == nil && index-chunk.FirstIndex != chunk.Count {
		err = fmt.Errorf("the chunk at %d holds %d items, want %d", chunk.FirstIndex, index-chunk.FirstIndex, chunk.Count)
	}
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(cuts)
	if err != nil {
		return nil, err
	}
	if err := blobs.Put(ctx, ledger.SlicesKey(manifestKey, size, chunk.FirstIndex), "application/json", body); err != nil {
		return nil, fmt.Errorf("write the slices of the chunk at %d: %w", chunk.FirstIndex, err)
	}
	return cuts, nil
}

// maxBookEntries bounds the chunk tables and slice lists a process
// keeps.
const maxBookEntries = 256

// Book is what a process keeps of the runs' chunk tables and chunks'
// slices, which never change (at most maxBookEntries of each). The zero
// Book is empty and ready; safe for concurrent use.
type Book struct {
	mu     sync.Mutex
	chunks map[string][]source.Chunk
	slices map[string][]source.Chunk
}
