package finalize

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// rowStore is an in-memory Store of one batch's item rows for the finalize
// and merge tests: ScanShard reads the rows of a shard in key order; the
// other methods finalize calls record what they were asked. Methods not
// listed panic (nil Store).
type rowStore struct {
	ledger.Store
	mu       sync.Mutex
	b        ledger.Batch
	shards   [][]ledger.Item // each in key order
	gen      func(shard int, after string, limit int) ([]ledger.Item, bool)
	scanErr  func(shard int) error
	finished []ledger.Finish
	kept     int
	scans    int
}

func newRowStore(b ledger.Batch, rows []ledger.Item) *rowStore {
	s := &rowStore{b: b, shards: make([][]ledger.Item, max(1, b.ListShards))}
	for _, it := range rows {
		n := ledger.Shard(it.Key, len(s.shards))
		s.shards[n] = append(s.shards[n], it)
	}
	for _, sh := range s.shards {
		slices.SortFunc(sh, func(a, b ledger.Item) int { return strings.Compare(a.Key, b.Key) })
	}
	return s
}

func (s *rowStore) GetBatch(_ context.Context, id string) (ledger.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b, nil
}

// ScanPacks serves a pack batch's shards from gen, which gives rows with
// their pack positions (Item.Pos).
func (s *rowStore) ScanPacks(ctx context.Context, id string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	return s.ScanShard(ctx, id, shard, after, limit)
}

func (s *rowStore) KeepPacks(context.Context, ledger.Batch, []int64, []string, time.Time) error {
	return nil
}

func (s *rowStore) ScanShard(_ context.Context, _ string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
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
func (s *rowStore) Progress(context.Context, string, int, int) (ledger.Progress, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ledger.Progress{Done: s.b.ItemCount, UpdatedAt: time.Now()}, nil
}

func (s *rowStore) RunningBatches(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Status != api.StatusRunning {
		return nil, nil
	}
	return []string{s.b.ID}, nil
}

func (s *rowStore) Unpublished(context.Context) ([]ledger.RunRef, error) { return nil, nil }

func (s *rowStore) KeepRows(_ context.Context, _ ledger.Batch, keys []string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept += len(keys)
	return nil
}

func (s *rowStore) FinishRun(_ context.Context, _ string, run int, f ledger.Finish) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Run != run || s.b.Status != api.StatusRunning {
		return api.ErrConflict
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

func (s *rowStore) SetTaskGone(context.Context, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.TaskGone = true
	return nil
}

// FinalizeFailed counts nothing: the faults these tests inject are single,
// below FinalizeFailureLimit.
func (s *rowStore) FinalizeFailed(context.Context, ledger.FinalizeFailure) (bool, error) {
	return false, nil
}
