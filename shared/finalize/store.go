package finalize

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
)

// Store is what the finalize engine needs of the ledger's store: the methods it
// calls, each with the contract ledger.Store documents. internal/dynamo
// implements it on DynamoDB, integration/testbed/memstore in memory.
type Store interface {
	shardmerge.Scanner
	GetBatch(ctx context.Context, id string) (ledger.Batch, error)
	Progress(ctx context.Context, batchID string, run, shards int) (ledger.Progress, error)
	FinishRun(ctx context.Context, id string, run int, f ledger.Finish) error
	FinalizeFailed(ctx context.Context, f ledger.FinalizeFailure) (bool, error)
	RunningBatches(ctx context.Context) ([]string, error)
	KeepRows(ctx context.Context, b ledger.Batch, keys []string, until time.Time) error
	KeepPacks(ctx context.Context, b ledger.Batch, firsts []int64, attention []string, until time.Time) error
	Unpublished(ctx context.Context) ([]ledger.RunRef, error)
	SetPublished(ctx context.Context, id string, run int) error
	SetTaskGone(ctx context.Context, id string) error
}

// The ledger's store contract holds every method this engine calls.
var _ Store = ledger.Store(nil)
