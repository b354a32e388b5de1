package worker

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/lifecycle"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// Store is what the item engine needs of the ledger's store: the methods it
// calls, each with the contract ledger.Store documents. internal/dynamo
// implements it on DynamoDB, integration/testbed/memstore in memory.
type Store interface {
	lifecycle.RunStopper
	GetBatch(ctx context.Context, id string) (ledger.Batch, error)
	Reserve(ctx context.Context, r ledger.Reservation) (ledger.Item, error)
	Record(ctx context.Context, r ledger.Record) error
	Release(ctx context.Context, r ledger.Record) error
	Settle(ctx context.Context, r ledger.Record) (ledger.Item, error)
	SettleUnstarted(ctx context.Context, r ledger.Record) (ledger.Item, error)
	CountChunk(ctx context.Context, c ledger.ChunkCount) (ledger.ChunkCounted, error)
	CountLane(ctx context.Context, c ledger.LaneCount) (ledger.LaneCounted, error)
	CountRun(ctx context.Context, c ledger.RunCount) (ledger.RunCounted, error)
	CountWaits(ctx context.Context, c ledger.WaitCount) error
	CountFanned(ctx context.Context, c ledger.FanCount) error
	Pause(ctx context.Context, m ledger.PauseMark) error
	MarkApproval(ctx context.Context, m ledger.ApprovalMark) error
	Progress(ctx context.Context, batchID string, run, shards int) (ledger.Progress, error)
	Unpause(ctx context.Context, m ledger.UnpauseMark) error
	ClaimProbe(ctx context.Context, c ledger.ProbeClaim) error
	Halt(ctx context.Context, m ledger.HaltMark) error
	WakeItem(ctx context.Context, w ledger.WakeMark) (ledger.Item, error)
	MarkCounted(ctx context.Context, batchID string, listShards int, key string, run int, now time.Time) (bool, error)
	AcquireSlot(ctx context.Context, batchID string, slot int, holder string, now time.Time, lease time.Duration) error
	FreeSlot(ctx context.Context, batchID string, slot int, holder string) error
	ClaimSlice(ctx context.Context, c ledger.SliceClaim) (int64, error)
	SliceCounter(ctx context.Context, r ledger.SliceCounterRead) (ledger.SliceCount, error)
	TakeTrack(ctx context.Context, t ledger.TrackTake) (ledger.TrackTaken, error)
	HandToTrack(ctx context.Context, h ledger.TrackHand) (bool, error)
	TakeTrackSlot(ctx context.Context, s ledger.TrackSlot) error
	FreeTrackSlot(ctx context.Context, s ledger.TrackSlot) error
	LeaseRate(ctx context.Context, l pace.RateLease) (pace.RateGrant, error)
	LeaseTokens(ctx context.Context, l pace.TokenLease) (pace.TokenGrant, error)
	SettleTokens(ctx context.Context, s pace.TokenSettle) (pace.TokenGrant, error)
	ReadTokens(ctx context.Context, key string) (pace.TokenGrant, error)
	ReadAdapt(ctx context.Context, key string) (pace.Adapt, error)
	CutAdapt(ctx context.Context, c pace.AdaptCut) (pace.Adapt, bool, error)
	LeaseAdapt(ctx context.Context, l pace.AdaptLease) (pace.AdaptGrant, error)
	GetPack(ctx context.Context, ref ledger.PackRef) (ledger.Pack, error)
	WritePack(ctx context.Context, w ledger.PackWrite) error
}

// The ledger's store contract holds every method this engine calls.
var _ Store = ledger.Store(nil)
