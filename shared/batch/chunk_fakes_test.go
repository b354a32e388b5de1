package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rowStore is an in-memory Store of one batch's item rows for the finalize
// and merge tests: ScanShard reads the rows of a shard in key order; the
// other methods finalize calls record what they were asked. Methods not
// listed panic (nil Store).
type rowStore struct {
	Store
	mu       sync.Mutex
	b        Batch
	shards   [][]Item // each in key order
	gen      func(shard int, after string, limit int) ([]Item, bool)
	scanErr  func(shard int) error
	finished []Finish
	kept     int
	scans    int
}

func newRowStore(b Batch, rows []Item) *rowStore {
	s := &rowStore{b: b, shards: make([][]Item, max(1, b.ListShards))}
	for _, it := range rows {
		n := Shard(it.Key, len(s.shards))
		s.shards[n] = append(s.shards[n], it)
	}
	for _, sh := range s.shards {
		slices.SortFunc(sh, func(a, b Item) int { return strings.Compare(a.Key, b.Key) })
	}
	return s
}

func (s *rowStore) GetBatch(_ context.Context, id string) (Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b, nil
}

// ScanPacks serves a pack batch's shards from gen, which gives rows with
// their pack positions (Item.Pos).
func (s *rowStore) ScanPacks(ctx context.Context, id string, shard int, after string, limit int) ([]Item, bool, error) {
	return s.ScanShard(ctx, id, shard, after, limit)
}

func (s *rowStore) KeepPacks(context.Context, Batch, []int64, []string, time.Time) error { return nil }

func (s *rowStore) ScanShard(_ context.Context, _ string, shard int, after string, limit int) ([]Item, bool, error) {
	s.mu.Lock()
	s.scans++
	s.mu.Unlock()
	if s.scanErr != nil {
		if err := s.scanErr(shard); err != nil {
			return nil, false, err
		}
	}
	if s.gen != nil {
		rows, more := s.gen(shard, after, limit)
		return rows, more, nil
	}
	rows := s.shards[shard]
	i := sort.Search(len(rows), func(i int) bool { return rows[i].Key > after })
	end := min(len(rows), i+limit)
	return slices.Clone(rows[i:end]), end < len(rows), nil
}

// Progress says every item is done, so that Tick tries the run at once.
func (s *rowStore) Progress(context.Context, string, int, int) (Progress, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Progress{Done: s.b.ItemCount, UpdatedAt: time.Now()}, nil
}

func (s *rowStore) RunningBatches(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Status != StatusRunning {
		return nil, nil
	}
	return []string{s.b.ID}, nil
}

func (s *rowStore) Unpublished(context.Context) ([]RunRef, error) { return nil, nil }

func (s *rowStore) KeepRows(_ context.Context, _ Batch, keys []string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept += len(keys)
	return nil
}

func (s *rowStore) FinishRun(_ context.Context, _ string, run int, f Finish) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Run != run || s.b.Status != StatusRunning {
		return ErrConflict
	}
	s.b.Status = f.Status
	s.b.PublishedRun = 0
	s.finished = append(s.finished, f)
	return nil
}

func (s *rowStore) SetPublished(_ context.Context, _ string, run int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.PublishedRun = run
	return nil
}

// partBlobs is an in-memory Blobs with S3's semantics for what finalize
// uses: If-None-Match puts, multipart uploads whose parts may be written
// again, completion that fails for parts never written, listing in key
// order. fail, when set, is asked before every call and may fail it
// (a call failed this way did nothing). discard counts the bytes of
// completed uploads without keeping them.
type partBlobs struct {
	Blobs
	mu      sync.Mutex
	objects map[string][]byte
	uploads map[string]map[int][]byte // upload id → parts
	nextID  int
	calls   int
	fail    func(call int, op string) error
	discard bool
	spill   string // with discard: a directory that holds sort runs (keys with /sort/)
	sizes   map[string]int64
	puts    map[string]int // PutIfAbsent successes per key
	failKey func(op, key string) error
}

func newPartBlobs() *partBlobs {
	return &partBlobs{objects: map[string][]byte{}, uploads: map[string]map[int][]byte{}, sizes: map[string]int64{}, puts: map[string]int{}}
}

// spilled says key is a sorted run (a chunked pack batch's, or a
// finalize part's) kept on disk (spill set).
func (m *partBlobs) spilled(key string) bool { return m.spill != "" && strings.HasSuffix(key, ".run") }

func (m *partBlobs) spillPath(key string) string {
	return filepath.Join(m.spill, strings.ReplaceAll(key, "/", "_"))
}

func (m *partBlobs) call(op string) error {
	m.calls++
	if m.fail != nil {
		return m.fail(m.calls, op)
	}
	return nil
}

func (m *partBlobs) Bucket() string { return "batches" }

func (m *partBlobs) Put(_ context.Context, key, _ string, body []byte) error {
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

func (m *partBlobs) PutIfAbsent(_ context.Context, key, _ string, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("put_if_absent"); err != nil {
		return err
	}
	if _, ok := m.objects[key]; ok {
		return ErrConflict
	}
	m.objects[key] = slices.Clone(body)
	m.puts[key]++
	return nil
}

func (m *partBlobs) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("get"); err != nil {
		return nil, err
	}
	b, ok := m.objects[key]
	if !ok {
		return nil, ErrNotFound
	}
	return slices.Clone(b), nil
}

func (m *partBlobs) Open(ctx context.Context, _, key string) (io.ReadCloser, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m *partBlobs) List(_ context.Context, _, prefix string, fn func(ObjectInfo) error) error {
	m.mu.Lock()
	if err := m.call("list"); err != nil {
		m.mu.Unlock()
		return err
	}
	var infos []ObjectInfo
	for k, b := range m.objects {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, ObjectInfo{Key: k, Size: int64(len(b))})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(infos, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	for _, o := range infos {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

func (m *partBlobs) DeletePrefix(_ context.Context, prefix string) (int, error) {
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
	if m.spill != "" {
		files, _ := filepath.Glob(m.spillPath(prefix) + "*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	}
	return n, nil
}

func (m *partBlobs) StartParts(_ context.Context, key, _ string) (string, error) {
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

func (m *partBlobs) PutPart(_ context.Context, key, id string, n int, body []byte) error {
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
	if m.discard {
		parts[n] = make([]byte, 0) // size only
		m.sizes[id+"#"+strconv.Itoa(n)] = int64(len(body))
		return nil
	}
	parts[n] = slices.Clone(body)
	return nil
}

func (m *partBlobs) CompleteParts(_ context.Context, key, id string, n int, size int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("complete_parts"); err != nil {
		return err
	}
	parts, ok := m.uploads[id]
	if !ok {
		if got, ok := m.objects[key]; ok && int64(len(got)) == size || m.discard && m.sizes[key] == size {
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
		if i < n && !m.discard && len(p) < 5<<20 {
			return fmt.Errorf("complete %s: part %d of %d bytes is under 5 MiB", key, i, len(p))
		}
		body = append(body, p...)
		total += m.sizes[id+"#"+strconv.Itoa(i)]
	}
	delete(m.uploads, id)
	if m.discard {
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

var errInjected = errors.New("injected fault")

// FinalizeFailed counts nothing: the faults these tests inject are single,
// below FinalizeFailureLimit.
func (s *rowStore) FinalizeFailed(context.Context, FinalizeFailure) (bool, error) { return false, nil }
