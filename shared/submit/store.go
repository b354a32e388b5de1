package submit

import (
	"context"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/lifecycle"
)

// Store is what the submit engine needs of the ledger's store: the methods it
// calls, each with the contract ledger.Store documents. internal/dynamo
// implements it on DynamoDB, integration/testbed/memstore in memory.
type Store interface {
	lifecycle.BatchDeleter
	CreateBatch(ctx context.Context, b ledger.Batch) (ledger.Batch, error)
	BeginSubmit(ctx context.Context, id string, deadline time.Time) (ledger.Batch, error)
	Freeze(ctx context.Context, b ledger.Batch) error
	Refuse(ctx context.Context, id string, r api.SubmitRefusal, now, expiresAt time.Time) error
	SetFannedOut(ctx context.Context, id string, run int) error
	RunningBatches(ctx context.Context) ([]string, error)
	NoteRateConflict(ctx context.Context, id string, c api.RateConflict) error
	StartRun(ctx context.Context, id string, from int, now time.Time) (ledger.Batch, error)
	StartCorrection(ctx context.Context, id string, from int, rev api.Revision, now time.Time) (ledger.Batch, error)
	MarkRevision(ctx context.Context, b ledger.Batch, rev int, marks []ledger.RevisionMark) error
	ReadItems(ctx context.Context, batchID string, listShards int, keys []string) ([]ledger.Item, error)
	ClaimUpload(ctx context.Context, c api.UploadClaim, force bool) (api.UploadClaim, error)
	GetPack(ctx context.Context, ref ledger.PackRef) (ledger.Pack, error)
	// CountFanned counts a chunk submit fanned out itself
	// (Submitter.FanOutHere).
	CountFanned(ctx context.Context, c ledger.FanCount) error
}

// The ledger's store contract holds every method this engine calls.
var _ Store = ledger.Store(nil)
