package finalize

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// staleStore is a rowStore whose reads miss one item's row, as an
// eventually consistent Query may read it as of before its outcome.
type staleStore struct {
	*rowStore
	miss string
}

func (s *staleStore) ScanShard(ctx context.Context, id string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	rows, more, err := s.rowStore.ScanShard(ctx, id, shard, after, limit)
	out := make([]ledger.Item, 0, len(rows))
	for _, r := range rows {
		if r.Key != s.miss {
			out = append(out, r)
		}
	}
	return out, more, err
}

// heldBlobs holds the first part written until release is closed.
type heldBlobs struct {
	*memblobs.Blobs
	once    sync.Once
	writing chan struct{}
	release chan struct{}
}

func (h *heldBlobs) PutPart(ctx context.Context, key, id string, n int, body []byte) error {
	h.once.Do(func() { close(h.writing); <-h.release })
	return h.Blobs.PutPart(ctx, key, id, n, body)
}

// TestOneCallWritesFromACheckpoint guards the results against two calls
// going on from one checkpoint that read different rows (claim.go): call
// A reads an item's row as not yet written (an eventually consistent
// read) and is slow to write its first part; call B, from the same
// checkpoint, reads every row. Without the claim, B won the next
// checkpoint and A's part then replaced B's in their shared upload: the
// census counted the item, its line was missing from the results file
// and another key's line was in it twice. With it, B answers
// ErrNotFinished and writes nothing while A holds the chunk; A's chunk
// is short of the item, so the chain starts over when its rows come up
// short, and the results are those of a single pass.
func TestOneCallWritesFromACheckpoint(t *testing.T) {
	const n = 300
	rows := chunkRows(n, 60<<10)
	want := onePass(t, n, rows)
	ctx := context.Background()
	s, blobs := newRowStore(runningBatch(n), rows), memblobs.New()
	if r, err := chunkFinalizer(s, blobs, 20).Finalize(ctx, "b1", 1); err != nil || !r.Continued {
		t.Fatalf("the first chunk: %+v, %v", r, err)
	}
	a := chunkFinalizer(s, nil, 200)
	a.Store = &staleStore{rowStore: s, miss: rows[25].Key} // after the first checkpoint
	held := &heldBlobs{Blobs: blobs, writing: make(chan struct{}), release: make(chan struct{})}
	a.Blobs = held
	var wg sync.WaitGroup
	var aErr error
	wg.Go(func() { _, aErr = a.Finalize(ctx, "b1", 1) })
	<-held.writing

	_, err := chunkFinalizer(s, blobs, 200).Finalize(ctx, "b1", 1)
	if !errors.Is(err, ErrChunkClaimed) || !errors.Is(err, api.ErrNotFinished) || !strings.Contains(err.Error(), "checkpoint 2,") {
		t.Errorf("B beside A: %v, want ErrChunkClaimed and ErrNotFinished for checkpoint 2", err)
	}
	if _, ok := blobs.Object(checkpointKey("b1", 1, 2)); ok {
		t.Error("B wrote checkpoint 2 while A held it")
	}
	close(held.release)
	wg.Wait()
	if aErr != nil && !errors.Is(aErr, api.ErrConflict) {
		t.Fatalf("A: %v", aErr)
	}
	if keys := blobs.Objects(FinalizePrefix("b1", 1) + "000002.claim"); len(keys) != 0 {
		t.Fatalf("A's claim left behind: %v", keys)
	}
	got := snapshot(t, finalizeUntilDone(t, chunkFinalizer(s, blobs, 200)), blobs)
	if got.census.Succeeded != want.census.Succeeded {
		t.Fatalf("census: %d succeeded, want %d", got.census.Succeeded, want.census.Succeeded)
	}
	sameResults(t, got, want, "two calls from one checkpoint")
}

// TestClaimTakenOverAfterItsEnd guards a chunk whose claimant died: its
// claim, past its end, is taken over by the next generation after the
// newest (21 claims left by killed calls) and the run finishes; a claim still held answers ErrNotFinished and writes no
// checkpoint; a claim of a checkpoint already written is ErrConflict,
// and the call goes on from that checkpoint.
func TestClaimTakenOverAfterItsEnd(t *testing.T) {
	const n = 100
	rows := chunkRows(n, 1<<10)
	ctx := context.Background()
	hold := func(blobs *memblobs.Blobs, until time.Time) {
		body, _ := json.Marshal(active{Until: until})
		if err := blobs.Put(ctx, claimKey("b1", 1, 1, 1), "application/json", body); err != nil {
			t.Fatal(err)
		}
	}

	s, blobs := newRowStore(runningBatch(n), rows), memblobs.New()
	hold(blobs, time.Now().Add(time.Minute))
	if _, err := chunkFinalizer(s, blobs, 0).Finalize(ctx, "b1", 1); !errors.Is(err, api.ErrNotFinished) {
		t.Fatalf("beside a held claim: %v, want ErrNotFinished", err)
	}
	if len(blobs.Objects(FinalizePrefix("b1", 1)+"000001.json")) != 0 || len(s.finished) != 0 {
		t.Fatal("a call beside a held claim wrote a checkpoint or finished the run")
	}

	// Its holder past its end, and 20 more killed after taking it over
	// (more than claimTries): the newest generation is the one looked at.
	hold(blobs, time.Now().Add(-time.Second))
	expired, _ := json.Marshal(active{Until: time.Now().Add(-time.Second)})
	for gen := 2; gen <= 21; gen++ {
		if err := blobs.Put(ctx, claimKey("b1", 1, 1, gen), "application/json", expired); err != nil {
			t.Fatal(err)
		}
	}
	r, err := chunkFinalizer(s, blobs, 0).Finalize(ctx, "b1", 1)
	if err != nil || !r.Wrote || len(s.finished) != 1 {
		t.Fatalf("over an expired claim: %+v, %v, the run moved %d times; want the report written", r, err, len(s.finished))
	}

	s, blobs = newRowStore(runningBatch(n), rows), memblobs.New()
	if r, err := chunkFinalizer(s, blobs, 30).Finalize(ctx, "b1", 1); err != nil || !r.Continued {
		t.Fatalf("the first chunk: %+v, %v", r, err)
	}
	f := chunkFinalizer(s, blobs, 30)
	if _, err := f.claimChunk(ctx, "b1", 1, 1, time.Now().Add(time.Minute)); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("claiming a written checkpoint: %v, want ErrConflict", err)
	}
	if keys := blobs.Objects(FinalizePrefix("b1", 1) + "000001.claim"); len(keys) != 0 {
		t.Fatalf("a refused claim left behind: %v", keys)
	}
	sameResults(t, snapshot(t, finalizeUntilDone(t, f), blobs), onePass(t, n, rows), "after a refused claim")
}
