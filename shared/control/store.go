package control

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/lifecycle"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// Store is what the control engine (a caller's commands and the sweep) needs of the ledger's store: the methods it
// calls, each with the contract ledger.Store documents. internal/dynamo
// implements it on DynamoDB, integration/testbed/memstore in memory.
type Store interface {
	lifecycle.RunStopper
	lifecycle.BatchDeleter
	shardmerge.Scanner // PartialResults
	ListBatches(ctx context.Context, q ledger.BatchQuery) ([]ledger.Batch, string, error)
	Pause(ctx context.Context, m ledger.PauseMark) error
	// ReadAdapt and CutAdapt: an unpause restarts a downstream's adaptive
	// pace (pace.Rows).
	ReadAdapt(ctx context.Context, key string) (pace.Adapt, error)
	// ReadRate and ReadTokens: the live view of a batch with a rate says
	// how far ahead its key's calls, and its token budget, are booked
	// (RateBooked).
	ReadRate(ctx context.Context, key string, shard int) (time.Time, error)
	ReadTokens(ctx context.Context, key string) (pace.TokenGrant, error)
	CutAdapt(ctx context.Context, c pace.AdaptCut) (pace.Adapt, bool, error)
	Unpause(ctx context.Context, m ledger.UnpauseMark) error
	SetLimits(ctx context.Context, id string, l ledger.Limits) error
	MarkApproval(ctx context.Context, m ledger.ApprovalMark) error
	Progress(ctx context.Context, batchID string, run, shards int) (ledger.Progress, error)
	Lift(ctx context.Context, m ledger.LiftMark) error
	ReleaseItem(ctx context.Context, batchID string, listShards int, key string) error
	ListItems(ctx context.Context, batchID string, listShards int, outcome api.Outcome, after string, limit int) ([]ledger.Item, string, error)
	ListPackItems(ctx context.Context, batchID string, listShards int, after string, limit int) ([]ledger.Item, string, error)
	ExpiredMarkers(ctx context.Context, now time.Time, limit int) ([]ledger.RetentionMarker, error)
	DeleteMarker(ctx context.Context, markerKey string) error
}

// The ledger's store contract holds every method this engine calls.
var _ Store = ledger.Store(nil)
