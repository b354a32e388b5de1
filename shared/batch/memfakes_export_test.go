package batch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"time"
)

// The rest of Blobs on partBlobs, so that the domain's tests in package
// batch_test (which use shared/batch/memstore) run Submit, Worker and
// Finalize on it.

func (m *partBlobs) Create(_ context.Context, key, _ string) (BlobWriter, error) {
	return &blobWriterMem{m: m, key: key}, nil
}

func (m *partBlobs) OpenMatch(ctx context.Context, bucket, key, _ string) (io.ReadCloser, error) {
	return m.Open(ctx, bucket, key)
}

func (m *partBlobs) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if m.spilled(key) {
		f, err := os.Open(m.spillPath(key))
		if err != nil {
			return nil, err
		}
		return struct {
			io.Reader
			io.Closer
		}{io.NewSectionReader(f, offset, length), f}, nil
	}
	b, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	end := min(int64(len(b)), offset+length)
	return io.NopCloser(bytes.NewReader(b[min(offset, end):end])), nil
}

func (m *partBlobs) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, key)
	if m.spilled(key) {
		_ = os.Remove(m.spillPath(key))
	}
	return nil
}

// blobWriterMem makes its object visible on Close only.
type blobWriterMem struct {
	m    *partBlobs
	key  string
	buf  bytes.Buffer
	done bool
}

func (w *blobWriterMem) Write(p []byte) (int, error) { return w.buf.Write(p) }

func (w *blobWriterMem) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	return w.m.Put(context.Background(), w.key, "", w.buf.Bytes())
}

func (w *blobWriterMem) Abort() error { w.done = true; return nil }

// MemBlobs is an in-memory Blobs (S3's semantics for what the domain
// uses), for the tests of package batch_test.
type MemBlobs = partBlobs

// NewMemBlobs returns an empty MemBlobs.
func NewMemBlobs() *MemBlobs { return newPartBlobs() }

// Objects returns the keys of the stored objects under prefix.
func (m *partBlobs) Objects(prefix string) []string {
	var keys []string
	_ = m.List(context.Background(), "", prefix, func(o ObjectInfo) error { keys = append(keys, o.Key); return nil })
	return keys
}

// FixedClock is a Clock that tells T until moved.
type FixedClock struct{ T time.Time }

// Now returns c.T.
func (c *FixedClock) Now() time.Time { return c.T }

// HeadSource returns the object's size and an ETag of its bytes.
func (m *partBlobs) HeadSource(ctx context.Context, _, key string) (ObjectInfo, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Key: key, Size: int64(len(b)), ETag: memETag(b)}, nil
}

func memETag(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// OpenSourceRange reads a range of the object if its ETag is etag.
func (m *partBlobs) OpenSourceRange(ctx context.Context, _, key, etag string, offset, length int64) (io.ReadCloser, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if etag != "" && memETag(b) != etag {
		return nil, ErrConflict
	}
	end := int64(len(b))
	if length >= 0 {
		end = min(end, offset+length)
	}
	return io.NopCloser(bytes.NewReader(b[min(offset, end):end])), nil
}

// Compose concatenates sources into key.
func (m *partBlobs) Compose(ctx context.Context, key, contentType string, sources []string) error {
	var all []byte
	for _, src := range sources {
		b, err := m.Get(ctx, src)
		if err != nil {
			return err
		}
		all = append(all, b...)
	}
	return m.Put(ctx, key, contentType, all)
}

// SetPartCompose sets the smallest manifest part a PartsConfig composes
// (MinComposePartBytes), for tests of small parts.
func SetPartCompose(c *PartsConfig, n int64) { c.minCompose = n }

// SetMaxWholeRead sets the most text a PartsConfig's submitter reads
// whole (MaxWholeReadBytes).
func SetMaxWholeRead(c *PartsConfig, n int64) { c.maxWhole = n }

// FailBlobs makes f decide the fate of every Put (op "put") and PutPart
// (op "put_part") by its key:
// an error fails the call, which does nothing. nil stops it.
func FailBlobs(m *partBlobs, f func(op, key string) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failKey = f
}

// Keys lists the keys under prefix, in order.
func (m *partBlobs) Keys(prefix string) []string {
	var keys []string
	_ = m.List(context.Background(), "", prefix, func(o ObjectInfo) error { keys = append(keys, o.Key); return nil })
	return keys
}

// SetMergeFanIn sets how many sorted runs one merge of a finalize part
// reads at once (MaxMergeFanIn), for tests of the merge's levels; the
// returned func puts it back.
func SetMergeFanIn(n int) func() {
	old := mergeFanIn
	mergeFanIn = n
	return func() { mergeFanIn = old }
}
