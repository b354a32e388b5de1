// Package memblobs is an in-memory store of the batches bucket and the
// sources (ledger.Blobs and the source reader's object store) for the
// engines' tests: S3's semantics for what the engines use.
package memblobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Blobs is an in-memory ledger.Blobs with S3's semantics for what the
// engines use: If-None-Match puts, If-Match reads, ranged reads, multipart
// uploads whose parts may be written again, completion that fails for
// parts never written, server-side composition, listing in key order.
// Safe for concurrent use.
type Blobs struct {
	ledger.Blobs
	mu      sync.Mutex
	objects map[string][]byte
	uploads map[string]map[int][]byte // upload id → parts
	nextID  int
	calls   int
	// Fail, when set, is asked before every call and may fail it (a call
	// failed this way did nothing); call counts from 1.
	Fail func(call int, op string) error
	// Discard counts the bytes of completed uploads without keeping them.
	Discard bool
	// Spill, with Discard: a directory that holds sort runs (keys with /sort/).
	Spill   string
	sizes   map[string]int64
	puts    map[string]int // PutIfAbsent successes per key
	failKey func(op, key string) error
}

// NewBlobs returns an empty Blobs.
func New() *Blobs {
	return &Blobs{objects: map[string][]byte{}, uploads: map[string]map[int][]byte{}, sizes: map[string]int64{}, puts: map[string]int{}}
}

// spilled says key is a sorted run (a chunked pack batch's, or a
// finalize part's) or a merge range's piece of results, kept on disk
// (spill set).
func (m *Blobs) spilled(key string) bool {
	return m.Spill != "" && (strings.HasSuffix(key, ".run") || strings.HasSuffix(key, ".piece"))
}

func (m *Blobs) spillPath(key string) string {
	return filepath.Join(m.Spill, strings.ReplaceAll(key, "/", "_"))
}

func (m *Blobs) call(op string) error {
	m.calls++
	if m.Fail != nil {
		return m.Fail(m.calls, op)
	}
	return nil
}

// Bucket is ledger.Blobs's Bucket, in memory.
func (m *Blobs) Bucket() string { return "batches" }

// Put is ledger.Blobs's Put, in memory.
func (m *Blobs) Put(_ context.Context, key, _ string, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("put"); err != nil {
		return err
	}
	if m.failKey != nil {
		if err := m.failKey("put", key); err != nil {
			return err
		}
	}
	if m.spilled(key) {
		return os.WriteFile(m.spillPath(key), body, 0o600)
	}
	m.objects[key] = slices.Clone(body)
	return nil
}

// PutIfAbsent is ledger.Blobs's PutIfAbsent, in memory.
func (m *Blobs) PutIfAbsent(_ context.Context, key, _ string, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("put_if_absent"); err != nil {
		return err
	}
	if _, ok := m.objects[key]; ok {
		return api.ErrConflict
	}
	m.objects[key] = slices.Clone(body)
	m.puts[key]++
	return nil
}

// Get is ledger.Blobs's Get, in memory.
func (m *Blobs) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("get"); err != nil {
		return nil, err
	}
	b, ok := m.objects[key]
	if !ok {
		return nil, api.ErrNotFound
	}
	return slices.Clone(b), nil
}

// Open is ledger.Blobs's Open, in memory.
func (m *Blobs) Open(ctx context.Context, _, key string) (io.ReadCloser, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// List is ledger.Blobs's List, in memory.
func (m *Blobs) List(_ context.Context, _, prefix string, fn func(source.ObjectInfo) error) error {
	m.mu.Lock()
	if err := m.call("list"); err != nil {
		m.mu.Unlock()
		return err
	}
	var infos []source.ObjectInfo
	for k, b := range m.objects {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, source.ObjectInfo{Key: k, Size: int64(len(b))})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(infos, func(a, b source.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	for _, o := range infos {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// DeletePrefix is ledger.Blobs's DeletePrefix, in memory.
func (m *Blobs) DeletePrefix(_ context.Context, prefix string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("delete_prefix"); err != nil {
		return 0, err
	}
	n := 0
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) {
			delete(m.objects, k)
			n++
		}
	}
	if m.Spill != "" {
		files, _ := filepath.Glob(m.spillPath(prefix) + "*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	}
	return n, nil
}

// StartParts is ledger.Blobs's StartParts, in memory.
func (m *Blobs) StartParts(_ context.Context, key, _ string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("start_parts"); err != nil {
		return "", err
	}
	m.nextID++
	id := key + "#" + strconv.Itoa(m.nextID)
	m.uploads[id] = map[int][]byte{}
	return id, nil
}

// PutPart is ledger.Blobs's PutPart, in memory.
func (m *Blobs) PutPart(_ context.Context, key, id string, n int, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("put_part"); err != nil {
		return err
	}
	if m.failKey != nil {
		if err := m.failKey("put_part", key); err != nil {
			return err
		}
	}
	parts, ok := m.uploads[id]
	if !ok {
		return fmt.Errorf("upload part %d of %s: NoSuchUpload", n, key)
	}
	if m.spilled(key) {
		parts[n] = nil
		return os.WriteFile(m.spillPath(key)+".part"+strconv.Itoa(n), body, 0o600)
	}
	if m.Discard {
		parts[n] = make([]byte, 0) // size only
		m.sizes[id+"#"+strconv.Itoa(n)] = int64(len(body))
		return nil
	}
	parts[n] = slices.Clone(body)
	return nil
}

// CompleteParts is ledger.Blobs's CompleteParts, in memory.
func (m *Blobs) CompleteParts(_ context.Context, key, id string, n int, size int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("complete_parts"); err != nil {
		return err
	}
	parts, ok := m.uploads[id]
	if !ok {
		if got, ok := m.objects[key]; ok && int64(len(got)) == size || m.Discard && m.sizes[key] == size {
			return nil
		}
		return fmt.Errorf("complete %s: NoSuchUpload", key)
	}
	if m.spilled(key) {
		out, err := os.Create(m.spillPath(key))
		if err != nil {
			return err
		}
		defer out.Close()
		for i := 1; i <= n; i++ {
			part := m.spillPath(key) + ".part" + strconv.Itoa(i)
			b, err := os.ReadFile(part)
			if err != nil {
				return err
			}
			if _, err := out.Write(b); err != nil {
				return err
			}
			_ = os.Remove(part)
		}
		delete(m.uploads, id)
		return nil
	}
	var body []byte
	var total int64
	for i := 1; i <= n; i++ {
		p, ok := parts[i]
		if !ok {
			return fmt.Errorf("complete %s: part %d never written", key, i)
		}
		if i < n && !m.Discard && len(p) < 5<<20 {
			return fmt.Errorf("complete %s: part %d of %d bytes is under 5 MiB", key, i, len(p))
		}
		if size := m.sizes[id+"#"+strconv.Itoa(i)]; i < n && m.Discard && size < 5<<20 {
			return fmt.Errorf("complete %s: part %d of %d bytes is under 5 MiB", key, i, size)
		}
		body = append(body, p...)
		total += m.sizes[id+"#"+strconv.Itoa(i)]
	}
	delete(m.uploads, id)
	if m.Discard {
		m.sizes[key] = total
		m.objects[key] = nil
		return nil
	}
	if int64(len(body)) != size {
		return fmt.Errorf("complete %s: %d bytes, want %d", key, len(body), size)
	}
	m.objects[key] = body
	return nil
}

// CopyPart is ledger.Blobs's CopyPart, in memory: bytes [offset,
// offset+length) of src become part n (S3's bounds: 1 byte to 5 GiB).
func (m *Blobs) CopyPart(ctx context.Context, key, id string, n int, src string, offset, length int64) error {
	if length < 1 || length > 5<<30 || offset < 0 {
		return fmt.Errorf("copy %s bytes %d+%d into part %d of %s: a part copies 1 byte to 5 GiB", src, offset, length, n, key)
	}
	if m.Discard && !m.spilled(key) {
		// Sizes only: the copy is not read into this process (the
		// benchmarks measure the caller's memory).
		size, err := m.sizeOf(src)
		if err != nil {
			return err
		}
		if offset+length > size {
			return fmt.Errorf("copy %s bytes %d+%d into part %d of %s: InvalidRange (%d bytes there)", src, offset, length, n, key, size)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		parts, ok := m.uploads[id]
		if !ok {
			return fmt.Errorf("copy into part %d of %s: NoSuchUpload", n, key)
		}
		parts[n] = make([]byte, 0)
		m.sizes[id+"#"+strconv.Itoa(n)] = length
		return nil
	}
	body, err := m.OpenRange(ctx, src, offset, length)
	if err != nil {
		return err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if int64(len(b)) != length {
		return fmt.Errorf("copy %s bytes %d+%d into part %d of %s: InvalidRange (%d bytes there)", src, offset, length, n, key, len(b))
	}
	return m.PutPart(ctx, key, id, n, b)
}

// sizeOf is the size of the object at key.
func (m *Blobs) sizeOf(key string) (int64, error) {
	if m.spilled(key) {
		st, err := os.Stat(m.spillPath(key))
		if err != nil {
			return 0, api.ErrNotFound
		}
		return st.Size(), nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[key]
	if !ok {
		return 0, api.ErrNotFound
	}
	if b == nil && m.Discard {
		return m.sizes[key], nil
	}
	return int64(len(b)), nil
}

// ErrInjected is the error a Fail function returns in the engines' tests.
var ErrInjected = errors.New("injected fault")

// Create is ledger.Blobs's Create, in memory: the object is visible once
// the writer is closed.
func (m *Blobs) Create(_ context.Context, key, _ string) (ledger.BlobWriter, error) {
	return &blobWriterMem{m: m, key: key}, nil
}

// OpenMatch is ledger.Blobs's OpenMatch, in memory.
func (m *Blobs) OpenMatch(ctx context.Context, bucket, key, _ string) (io.ReadCloser, error) {
	return m.Open(ctx, bucket, key)
}

// OpenRange is ledger.Blobs's OpenRange, in memory.
func (m *Blobs) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
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

// Delete is ledger.Blobs's Delete, in memory.
func (m *Blobs) Delete(_ context.Context, key string) error {
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
	m    *Blobs
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

// Objects returns the keys of the stored objects under prefix.
func (m *Blobs) Objects(prefix string) []string {
	var keys []string
	_ = m.List(context.Background(), "", prefix, func(o source.ObjectInfo) error { keys = append(keys, o.Key); return nil })
	return keys
}

// HeadSource returns the object's size and an ETag of its bytes.
func (m *Blobs) HeadSource(ctx context.Context, _, key string) (source.ObjectInfo, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return source.ObjectInfo{}, err
	}
	return source.ObjectInfo{Key: key, Size: int64(len(b)), ETag: memETag(b)}, nil
}

func memETag(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// OpenSourceRange reads a range of the object if its ETag is etag.
func (m *Blobs) OpenSourceRange(ctx context.Context, _, key, etag string, offset, length int64) (io.ReadCloser, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if etag != "" && memETag(b) != etag {
		return nil, api.ErrConflict
	}
	end := int64(len(b))
	if length >= 0 {
		end = min(end, offset+length)
	}
	return io.NopCloser(bytes.NewReader(b[min(offset, end):end])), nil
}

// Compose concatenates sources into key.
func (m *Blobs) Compose(ctx context.Context, key, contentType string, sources []string) error {
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

// FailBlobs makes f decide the fate of every Put (op "put") and PutPart
// (op "put_part") by its key:
// an error fails the call, which does nothing. nil stops it.
func FailBlobs(m *Blobs, f func(op, key string) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failKey = f
}

// Keys lists the keys under prefix, in order.
func (m *Blobs) Keys(prefix string) []string {
	var keys []string
	_ = m.List(context.Background(), "", prefix, func(o source.ObjectInfo) error { keys = append(keys, o.Key); return nil })
	return keys
}

// Calls is how many calls the blobs have answered (failed ones included).
func (m *Blobs) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// Puts is how many PutIfAbsent calls wrote key.
func (m *Blobs) Puts(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.puts[key]
}

// Object returns the object at key as stored, without a call: no failure
// is injected and no call is counted.
func (m *Blobs) Object(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[key]
	return b, ok
}
