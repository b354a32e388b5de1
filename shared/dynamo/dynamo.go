// Package dynamo is the DynamoDB adapter of batch.Store: one table, string
// keys pk/sk, two GSIs (config.IndexAttention, config.IndexBatches). It is the
// only importer of the DynamoDB SDK; it translates
// ConditionalCheckFailedException and TransactionCanceledException into
// batch.ErrConflict / batch.ErrBatchExists and never leaks SDK errors.
//
// Rows (pk, sk → attributes):
//
//	BATCH#{id}, BATCH                      the batch row (one per batch)
//	                                       bpk=BATCHES#{yyyy-mm}#{shard}, bsk={created ms:013}#{id}: batches index (see BatchesPK)
//	ITEM#{id}#{shard}, {key}               an item row (one per item, from its first reservation); the
//	                                       table lists a batch's items per shard in key order (shard =
//	                                       FNV-1a(key) mod list_shards)
//	                                       apk={id}#{shard}, ask={key}: attention index, only while failed or quarantined
//	COUNT#{id}#{run}#{p}, CHUNK#{first:012} the counter of the fan-out chunk starting at item first (done,
//	                                       failures, items), one write per message batch; p = chunk
//	                                       number mod counter_shards
//	COUNT#{id}#{run}, RUN                  the run's chunks-done counter (chunks_done, failures), one write
//	                                       per chunk (and per message batch with failures when the
//	                                       threshold may stop the run early)
//	MARK#{id}#{run}#{shard}, {key}         an item answered from an earlier run's row, counted in run
//	SLOT#{id}#{i}, SLOT                    concurrency slot i of a batch with max_concurrency (holder, lease_until_ms)
//	RUNNING, {id}                          running marker (one per batch run)
//	RETENTION, {expires_at_ms:020}#{id}    retention marker of a finished batch
//	PUBLISH, {id}#{run:010}                a finished run whose completion event is not marked published
//
// TTL: config.AttrExpiresAt (epoch seconds) is DynamoDB's TTL attribute.
// Item, counter and slot rows carry now + RowTTL from every write; finalize
// extends any that would end less than half of batch.TTLGrace after the
// batch's retention to its end plus batch.TTLGrace, the time the batch row
// gets when its run finishes (removed when a run starts). Markers carry
// none: the sweep deletes them.
//
// No partition key receives more than DynamoDB's 1,000 write units/s at the
// stack's flow: item rows are spread over list_shards partition keys and
// chunk counters over counter_shards, both sized from the flow
// (batch.ListShards, batch.CounterShards; DynamoDB developer guide,
// "Partitions and data distribution"). An item row is written twice in a
// clean run (reservation, outcome) and never after its outcome by the
// ledger itself: no index copies its output, rerun counting writes MARK
// rows, and completion is detected on counters.
package dynamo

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/errgroup"

	"github.com/bulkrun/bulkrun/shared/awsfault"
	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/effects"
)

// Store implements batch.Store on one DynamoDB table. Safe for concurrent use.
type Store struct {
	db    *dynamodb.Client
	table string
	// Timeout bounds every DynamoDB call (default 10 s).
	Timeout time.Duration
	// RowTTL is the TTL item and counter rows get from each write (their
	// config.AttrExpiresAt is set to the write's time + RowTTL); 0 writes
	// none (finalize then sets every row's). Set it to the retention plus
	// batch.TTLGrace so that finalize rarely has to extend a row.
	RowTTL   time.Duration
	capacity capacity
}

var (
	_ batch.Store               = (*Store)(nil)
	_ batch.EventualBatchReader = (*Store)(nil)
)

// DB returns the DynamoDB client (for tests and tools).
func (s *Store) DB() *dynamodb.Client { return s.db }

// Table returns the table's name.
func (s *Store) Table() string { return s.table }

// New returns a Store on table. It uses a copy of db with bulkrun's
// retryer (no client-side retry quota, so that throttling is retried with
// backoff instead of failing at once), AWS's transient faults tagged
// batch.ErrUnavailable (shared/awsfault) and every call asking for its
// consumed capacity (see Capacity); db itself is not changed.
func New(db *dynamodb.Client, table string) *Store {
	s := &Store{table: table, Timeout: 10 * time.Second}
	s.db = dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.Retryer = awsfault.Retryer()
		o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag, s.consumed)
	})
	return s
}

const (
	skBatch   = "BATCH"
	skRun     = "RUN"
	skSlot    = "SLOT"
	pkRunning = "RUNNING"
	pkRetain  = "RETENTION"
	pkPublish = "PUBLISH"
)

func publishSK(id string, run int) string { return fmt.Sprintf("%s#%010d", id, run) }

// stamp sets the row's TTL to now + RowTTL on update u (when RowTTL is set).
func (s *Store) stamp(u expression.UpdateBuilder, now time.Time) expression.UpdateBuilder {
	if s.RowTTL <= 0 {
		return u
	}
	return u.Set(expression.Name(config.AttrExpiresAt), expression.Value(now.Add(s.RowTTL).Unix()))
}

func batchPK(id string) string             { return "BATCH#" + id }
func shardKey(id string, shard int) string { return id + "#" + strconv.Itoa(shard) }

// itemPK is the partition key of the item rows of one shard.
func itemPK(id string, shard int) string { return "ITEM#" + shardKey(id, shard) }

// itemKey is the key of item itemKey's row in a batch of shards shards.
func itemKey(id string, shards int, itemKey string) map[string]types.AttributeValue {
	return itemKeyAt(id, batch.Shard(itemKey, shards), itemKey)
}

// itemKeyAt is the key of item itemKey's row in item shard `shard`.
func itemKeyAt(id string, shard int, itemKey string) map[string]types.AttributeValue {
	return key(itemPK(id, shard), itemKey)
}

// countPK is the partition key of the chunk counters of one counter shard.
func countPK(id string, run, shard int) string {
	return "COUNT#" + id + "#" + strconv.Itoa(run) + "#" + strconv.Itoa(shard)
}

// runPK is the partition key of the run's chunks-done row.
func runPK(id string, run int) string { return "COUNT#" + id + "#" + strconv.Itoa(run) }

// chunkSK is the sort key of the counter of the chunk starting at first.
func chunkSK(first int64) string { return fmt.Sprintf("CHUNK#%012d", first) }

// markPK is the partition key of the rerun count marks of one item shard.
func markPK(id string, run, shard int) string {
	return "MARK#" + id + "#" + strconv.Itoa(run) + "#" + strconv.Itoa(shard)
}

func slotPK(id string, slot int) string { return "SLOT#" + id + "#" + strconv.Itoa(slot) }

// RetentionSK is the sort key of a retention marker: the expiry in epoch
// milliseconds, zero-padded to 20 digits so that byte order is time order.
func RetentionSK(expiresAt time.Time, id string) string {
	return fmt.Sprintf("%020d#%s", expiresAt.UnixMilli(), id)
}

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		config.AttrPK: &types.AttributeValueMemberS{Value: pk},
		config.AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.Timeout)
}

// batchRow is the stored shape of batch.Batch.
type batchRow struct {
	PK             string            `dynamodbav:"pk"`
	SK             string            `dynamodbav:"sk"`
	ID             string            `dynamodbav:"batch_id"`
	Pipeline       string            `dynamodbav:"pipeline"`
	Digest         string            `dynamodbav:"manifest_digest"`
	ManifestKey    string            `dynamodbav:"manifest_key"`
	ManifestBytes  int64             `dynamodbav:"manifest_bytes"`
	ItemCount      int64             `dynamodbav:"item_count"`
	ListShards     int               `dynamodbav:"list_shards"`
	CounterShards  int               `dynamodbav:"counter_shards"`
	Chunks         int               `dynamodbav:"chunks,omitempty"`
	Run            int               `dynamodbav:"run"`
	Status         string            `dynamodbav:"status"`
	Threshold      string            `dynamodbav:"threshold"` // JSON
	MaxAttempts    int               `dynamodbav:"max_attempts"`
	MaxConcurrency int               `dynamodbav:"max_concurrency,omitempty"`
	OnInterrupt    string            `dynamodbav:"on_interrupt,omitempty"`
	Headers        map[string]string `dynamodbav:"headers,omitempty"`
	Options        string            `dynamodbav:"pipeline_options"` // JSON
	KeyField       string            `dynamodbav:"key_field,omitempty"`
	Source         string            `dynamodbav:"source"`
	SubmittedBy    string            `dynamodbav:"submitted_by,omitempty"`
	FannedOut      bool              `dynamodbav:"fanned_out"`
	CreatedAtMs    int64             `dynamodbav:"created_at_ms"`
	RunStartedAtMs int64             `dynamodbav:"run_started_at_ms"`
	FinishedAtMs   int64             `dynamodbav:"finished_at_ms,omitempty"`
	ReportKey      string            `dynamodbav:"report_key,omitempty"`
	Census         string            `dynamodbav:"census,omitempty"` // JSON
	NeedsAttention bool              `dynamodbav:"needs_attention"`
	Stop           string            `dynamodbav:"stop,omitempty"`
	StopDetail     string            `dynamodbav:"stop_detail,omitempty"`
	ExpiresAtMs    int64             `dynamodbav:"expires_at_ms,omitempty"`
	Request        string            `dynamodbav:"request,omitempty"` // JSON
	SubmitAttempts int               `dynamodbav:"submit_attempts,omitempty"`
	SubmitDeadMs   int64             `dynamodbav:"submit_deadline_ms,omitempty"`
	Refusal        string            `dynamodbav:"refusal,omitempty"` // JSON
	Forgetting     bool              `dynamodbav:"forgetting,omitempty"`
	PublishedRun   int               `dynamodbav:"published_run,omitempty"`

	StopOnThreshold *bool `dynamodbav:"stop_on_threshold,omitempty"` // absent: true

	// Keys of the batches index (see BatchesPK), set at creation.
	BatchesPK string `dynamodbav:"bpk,omitempty"`
	BatchesSK string `dynamodbav:"bsk,omitempty"`
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func toRow(b batch.Batch) (batchRow, error) {
	th, err := json.Marshal(b.Threshold)
	if err != nil {
		return batchRow{}, err
	}
	r := batchRow{
		PK: batchPK(b.ID), SK: skBatch, ID: b.ID, Pipeline: b.Pipeline, Digest: b.Digest,
		ManifestKey: b.ManifestKey, ManifestBytes: b.ManifestBytes, ItemCount: b.ItemCount,
		ListShards: b.ListShards, CounterShards: b.CounterShards, Chunks: b.Chunks, Run: b.Run, Status: string(b.Status),
		Threshold: string(th), MaxAttempts: b.MaxAttempts, MaxConcurrency: b.MaxConcurrency, OnInterrupt: string(b.OnInterrupt), Headers: b.Headers, Options: string(b.Options),
		KeyField: b.KeyField, Source: b.Source, SubmittedBy: b.SubmittedBy, FannedOut: b.FannedOut, CreatedAtMs: ms(b.CreatedAt),
		RunStartedAtMs: ms(b.RunStartedAt), FinishedAtMs: ms(b.FinishedAt), ReportKey: b.ReportKey,
		NeedsAttention: b.NeedsAttention, Stop: string(b.Stop), StopDetail: b.StopDetail, ExpiresAtMs: ms(b.ExpiresAt),
		Request: string(b.Request), SubmitAttempts: b.SubmitAttempts, SubmitDeadMs: ms(b.SubmitDeadline),
		StopOnThreshold: b.StopOnThreshold,
	}
	if !b.CreatedAt.IsZero() {
		r.BatchesPK, r.BatchesSK = BatchesPK(b.ID, b.CreatedAt), BatchesSK(b.ID, b.CreatedAt)
	}
	if b.Refusal != nil {
		rf, err := json.Marshal(b.Refusal)
		if err != nil {
			return batchRow{}, err
		}
		r.Refusal = string(rf)
	}
	if b.FinalCensus != nil {
		c, err := json.Marshal(b.FinalCensus)
		if err != nil {
			return batchRow{}, err
		}
		r.Census = string(c)
	}
	return r, nil
}

func fromRow(r batchRow) (batch.Batch, error) {
	b := batch.Batch{
		ID: r.ID, Pipeline: r.Pipeline, Digest: r.Digest, ManifestKey: r.ManifestKey, ManifestBytes: r.ManifestBytes,
		ItemCount: r.ItemCount, ListShards: r.ListShards, CounterShards: r.CounterShards, Chunks: r.Chunks, Run: r.Run,
		Status: batch.Status(r.Status), MaxAttempts: r.MaxAttempts, MaxConcurrency: r.MaxConcurrency, OnInterrupt: batch.InterruptPolicy(r.OnInterrupt), Headers: r.Headers,
		KeyField: r.KeyField, Source: r.Source, SubmittedBy: r.SubmittedBy, FannedOut: r.FannedOut, CreatedAt: fromMs(r.CreatedAtMs),
		RunStartedAt: fromMs(r.RunStartedAtMs), FinishedAt: fromMs(r.FinishedAtMs), ReportKey: r.ReportKey,
		NeedsAttention: r.NeedsAttention, Stop: batch.Status(r.Stop), StopDetail: r.StopDetail, ExpiresAt: fromMs(r.ExpiresAtMs),
		SubmitAttempts: r.SubmitAttempts, SubmitDeadline: fromMs(r.SubmitDeadMs),
		PendingDeletion: r.Forgetting, PublishedRun: r.PublishedRun,
		StopOnThreshold: r.StopOnThreshold,
	}
	if r.Request != "" {
		b.Request = json.RawMessage(r.Request)
	}
	if r.Refusal != "" {
		b.Refusal = &batch.SubmitRefusal{}
		if err := json.Unmarshal([]byte(r.Refusal), b.Refusal); err != nil {
			return b, fmt.Errorf("batch %s: refusal: %w", r.ID, err)
		}
	}
	if r.Options != "" {
		b.Options = json.RawMessage(r.Options)
	}
	if r.Threshold != "" {
		if err := json.Unmarshal([]byte(r.Threshold), &b.Threshold); err != nil {
			return b, fmt.Errorf("batch %s: threshold: %w", r.ID, err)
		}
	}
	if r.Census != "" {
		b.FinalCensus = &batch.Census{}
		if err := json.Unmarshal([]byte(r.Census), b.FinalCensus); err != nil {
			return b, fmt.Errorf("batch %s: census: %w", r.ID, err)
		}
	}
	return b, nil
}

// itemRow is the stored shape of batch.Item. The batch id and the item key
// are the row's keys (pk ITEM#{id}#{shard}, sk {key}) and the run id
// derives from them (batch.RunID), so the row stores none of them again:
// every byte of it is billed on each of its two writes.
type itemRow struct {
	SK           string             `dynamodbav:"sk"`
	Run          int                `dynamodbav:"run"`
	Outcome      string             `dynamodbav:"outcome"`
	Attempt      int                `dynamodbav:"attempt"`
	FirstAttempt int                `dynamodbav:"first_attempt"`
	Released     bool               `dynamodbav:"released"`
	Retry        bool               `dynamodbav:"retry_scheduled"`
	LeaseUntilMs int64              `dynamodbav:"lease_until_ms"`
	Output       string             `dynamodbav:"output"`
	OutputRef    string             `dynamodbav:"output_ref"`
	Error        string             `dynamodbav:"error"`
	Reason       string             `dynamodbav:"reason"`
	Cost         map[string]float64 `dynamodbav:"cost"`
	Spent        map[string]float64 `dynamodbav:"spent"`     // batch.Item.Spent
	SpentRun     int                `dynamodbav:"spent_run"` // the run Spent counts
	UpdatedAtMs  int64              `dynamodbav:"updated_at_ms"`
	ExpiresAt    int64              `dynamodbav:"expires_at"` // TTL, epoch seconds
}

// itemFrom reads an item row of batch batchID.
func itemFrom(batchID string, av map[string]types.AttributeValue) (batch.Item, error) {
	if len(av) == 0 {
		return batch.Item{}, nil
	}
	var r itemRow
	if err := attributevalue.UnmarshalMap(av, &r); err != nil {
		return batch.Item{}, fmt.Errorf("item row: %w", err)
	}
	it := batch.Item{
		BatchID: batchID, Key: r.SK, RunID: batch.RunID(batchID, r.SK), Run: r.Run, Outcome: batch.Outcome(r.Outcome),
		Attempt: r.Attempt, LeaseUntil: fromMs(r.LeaseUntilMs), OutputRef: r.OutputRef, Error: r.Error,
		Reason: batch.Reason(r.Reason), UpdatedAt: fromMs(r.UpdatedAtMs), Released: r.Released,
		RunAttempts: max(0, r.Attempt-max(r.FirstAttempt, 1)+1),
	}
	if r.Output != "" {
		it.Output = json.RawMessage(r.Output)
	}
	if r.ExpiresAt > 0 {
		it.ExpiresAt = time.Unix(r.ExpiresAt, 0).UTC()
	}
	if len(r.Cost) > 0 {
		it.Cost = pipeline.Cost(r.Cost)
	}
	if len(r.Spent) > 0 {
		it.Spent, it.SpentRun = pipeline.Cost(r.Spent), r.SpentRun
	}
	return it, nil
}

// conflict reports whether err is a lost condition, returning the old item
// when DynamoDB sent it back.
func conflict(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// transact runs one TransactWriteItems whose first operation carries the
// condition. When that condition fails it returns the stored item that
// DynamoDB sent back (if asked for) and batch.ErrConflict; other
// cancellations and errors come back as they are.
func (s *Store) transact(ctx context.Context, items ...types.TransactWriteItem) (map[string]types.AttributeValue, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.db.TransactWriteItems(c, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) && len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
		return tce.CancellationReasons[0].Item, batch.ErrConflict
	}
	return nil, err
}

// batchUpdate is a transaction operation updating the batch row with expr.
func (s *Store) batchUpdate(id string, expr expression.Expression) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: &s.table, Key: key(batchPK(id), skBatch),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}}
}

// putRunning is a transaction operation putting the running marker of run.
func (s *Store) putRunning(id string, run int) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
		config.AttrPK: &types.AttributeValueMemberS{Value: pkRunning},
		config.AttrSK: &types.AttributeValueMemberS{Value: id},
		"run":         &types.AttributeValueMemberN{Value: strconv.Itoa(run)},
	}}}
}

// updateRow runs one UpdateItem of the row at k with expr (its condition,
// if any), returning the attributes asked for by rv. A lost condition
// returns the stored row (empty when there is none) and batch.ErrConflict.
func (s *Store) updateRow(ctx context.Context, k map[string]types.AttributeValue, expr expression.Expression, rv types.ReturnValue) (attrs, old map[string]types.AttributeValue, err error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: k,
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValues:                        rv,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, ok := conflict(err); ok {
		return nil, old, batch.ErrConflict
	}
	if err != nil {
		return nil, nil, err
	}
	return out.Attributes, nil, nil
}

// CreateBatch puts the batch row and its running marker in one transaction,
// only if no row has the batch's id; otherwise it returns the stored batch
// and batch.ErrBatchExists.
func (s *Store) CreateBatch(ctx context.Context, b batch.Batch) (batch.Batch, error) {
	row, err := toRow(b)
	if err != nil {
		return batch.Batch{}, err
	}
	av, err := attributevalue.MarshalMap(row)
	if err != nil {
		return batch.Batch{}, fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(config.AttrPK))).Build()
	if err != nil {
		return batch.Batch{}, err
	}
	old, err := s.transact(ctx, types.TransactWriteItem{Put: &types.Put{
		TableName: &s.table, Item: av,
		ConditionExpression:                 cond.Condition(),
		ExpressionAttributeNames:            cond.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, s.putRunning(b.ID, b.Run))
	switch {
	case err == nil:
		return b, nil
	case !errors.Is(err, batch.ErrConflict):
		return batch.Batch{}, fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	if len(old) > 0 {
		var r batchRow
		if uerr := attributevalue.UnmarshalMap(old, &r); uerr == nil {
			if stored, uerr := fromRow(r); uerr == nil {
				return stored, batch.ErrBatchExists
			}
		}
	}
	stored, gerr := s.GetBatch(ctx, b.ID)
	if gerr != nil {
		return batch.Batch{}, fmt.Errorf("create batch %s: exists, but: %w", b.ID, gerr)
	}
	return stored, batch.ErrBatchExists
}

// GetBatch reads the batch row with a strongly consistent read.
func (s *Store) GetBatch(ctx context.Context, id string) (batch.Batch, error) {
	return s.getBatch(ctx, id, true)
}

// GetBatchEventually reads the batch row with an eventually consistent
// read (half the read units of GetBatch); it may miss a write of the last
// second (see batch.EventualBatchReader).
func (s *Store) GetBatchEventually(ctx context.Context, id string) (batch.Batch, error) {
	return s.getBatch(ctx, id, false)
}

func (s *Store) getBatch(ctx context.Context, id string, consistent bool) (batch.Batch, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: key(batchPK(id), skBatch), ConsistentRead: aws.Bool(consistent)})
	if err != nil {
		return batch.Batch{}, fmt.Errorf("get batch %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return batch.Batch{}, fmt.Errorf("batch %s: %w", id, batch.ErrNotFound)
	}
	var r batchRow
	if err := attributevalue.UnmarshalMap(out.Item, &r); err != nil {
		return batch.Batch{}, fmt.Errorf("get batch %s: %w", id, err)
	}
	return fromRow(r)
}

// submitting is the condition status = submitting.
func submitting() expression.ConditionBuilder {
	return expression.Name("status").Equal(expression.Value(string(batch.StatusSubmitting)))
}

// BeginSubmit adds 1 to submit_attempts and sets submit_deadline_ms under
// the condition status = submitting (see batch.Store).
func (s *Store) BeginSubmit(ctx context.Context, id string, deadline time.Time) (batch.Batch, error) {
	expr, err := expression.NewBuilder().WithCondition(submitting()).
		WithUpdate(expression.Add(expression.Name("submit_attempts"), expression.Value(1)).
			Set(expression.Name("submit_deadline_ms"), expression.Value(deadline.UnixMilli()))).Build()
	if err != nil {
		return batch.Batch{}, err
	}
	attrs, _, err := s.updateRow(ctx, key(batchPK(id), skBatch), expr, types.ReturnValueAllNew)
	if err != nil {
		return batch.Batch{}, fmt.Errorf("begin submit %s: %w", id, err)
	}
	var r batchRow
	if err := attributevalue.UnmarshalMap(attrs, &r); err != nil {
		return batch.Batch{}, fmt.Errorf("begin submit %s: %w", id, err)
	}
	return fromRow(r)
}

// Freeze writes the manifest fields and status running under the
// condition status = submitting (see batch.Store).
func (s *Store) Freeze(ctx context.Context, b batch.Batch) error {
	expr, err := expression.NewBuilder().WithCondition(submitting()).
		WithUpdate(expression.Set(expression.Name("status"), expression.Value(string(batch.StatusRunning))).
			Set(expression.Name("manifest_digest"), expression.Value(b.Digest)).
			Set(expression.Name("manifest_key"), expression.Value(b.ManifestKey)).
			Set(expression.Name("manifest_bytes"), expression.Value(b.ManifestBytes)).
			Set(expression.Name("item_count"), expression.Value(b.ItemCount)).
			Set(expression.Name("list_shards"), expression.Value(b.ListShards)).
			Set(expression.Name("counter_shards"), expression.Value(b.CounterShards)).
			Set(expression.Name("chunks"), expression.Value(b.Chunks)).
			Set(expression.Name("fanned_out"), expression.Value(false)).
			Set(expression.Name("run_started_at_ms"), expression.Value(ms(b.RunStartedAt)))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, key(batchPK(b.ID), skBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("freeze %s: %w", b.ID, err)
	}
	return nil
}

// Refuse moves a submitting batch to refused, deletes its running marker
// and puts its retention marker, in one transaction (see batch.Store).
func (s *Store) Refuse(ctx context.Context, id string, r batch.SubmitRefusal, now, expiresAt time.Time) error {
	rf, err := json.Marshal(r)
	if err != nil {
		return err
	}
	expr, err := expression.NewBuilder().WithCondition(submitting()).
		WithUpdate(expression.Set(expression.Name("status"), expression.Value(string(batch.StatusRefused))).
			Set(expression.Name("refusal"), expression.Value(string(rf))).
			Set(expression.Name("finished_at_ms"), expression.Value(now.UnixMilli())).
			Set(expression.Name("expires_at_ms"), expression.Value(expiresAt.UnixMilli()))).Build()
	if err != nil {
		return err
	}
	_, err = s.transact(ctx, s.batchUpdate(id, expr),
		types.TransactWriteItem{Delete: &types.Delete{TableName: &s.table, Key: key(pkRunning, id)}},
		types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			config.AttrPK: &types.AttributeValueMemberS{Value: pkRetain},
			config.AttrSK: &types.AttributeValueMemberS{Value: RetentionSK(expiresAt, id)},
			"batch_id":    &types.AttributeValueMemberS{Value: id},
		}}})
	if err != nil {
		return fmt.Errorf("refuse %s: %w", id, err)
	}
	return nil
}

// SetFannedOut sets fanned_out on the batch row if it is at run.
func (s *Store) SetFannedOut(ctx context.Context, id string, run int) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.Name("run").Equal(expression.Value(run))).
		WithUpdate(expression.Set(expression.Name("fanned_out"), expression.Value(true))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, key(batchPK(id), skBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("set fanned out %s run %d: %w", id, run, err)
	}
	return nil
}

// fresh is the condition under which an item starts a new run: no row; a
// failed, cancelled (or interrupted) row of an earlier run; a quarantined
// row of an earlier run that was released.
//
//	attribute_not_exists(pk)
//	OR (run < :run AND (outcome IN (failed, cancelled, in_flight)
//	                    OR (outcome = quarantined AND released = true)))
func fresh(run int) expression.ConditionBuilder {
	out := expression.Name("outcome")
	return expression.Or(
		expression.AttributeNotExists(expression.Name(config.AttrPK)),
		expression.And(
			expression.Name("run").LessThan(expression.Value(run)),
			expression.Or(
				expression.In(out, expression.Value(string(batch.OutcomeFailed)), expression.Value(string(batch.OutcomeCancelled)), expression.Value(string(batch.OutcomeInFlight))),
				expression.And(out.Equal(expression.Value(string(batch.OutcomeQuarantined))), expression.Name("released").Equal(expression.Value(true))),
			),
		),
	)
}

// expired is the condition of a takeover: the item is in flight in this
// run and its lease has expired.
//
//	run = :run AND outcome = in_flight AND lease_until_ms < :now
func expired(run int, now time.Time) expression.ConditionBuilder {
	return expression.And(
		expression.Name("run").Equal(expression.Value(run)),
		expression.Name("outcome").Equal(expression.Value(string(batch.OutcomeInFlight))),
		expression.Name("lease_until_ms").LessThan(expression.Value(now.UnixMilli())),
	)
}

// fenced is the condition of Record and Release:
//
//	outcome = in_flight AND attempt = :attempt AND run = :run
func fenced(run, attempt int) expression.ConditionBuilder {
	return expression.And(
		expression.Name("outcome").Equal(expression.Value(string(batch.OutcomeInFlight))),
		expression.Name("attempt").Equal(expression.Value(attempt)),
		expression.Name("run").Equal(expression.Value(run)),
	)
}

func identity(u expression.UpdateBuilder, run int, now time.Time) expression.UpdateBuilder {
	return u.Set(expression.Name("run"), expression.Value(run)).
		Set(expression.Name("updated_at_ms"), expression.Value(now.UnixMilli()))
}

// Reserve takes the item under a new attempt and lease (see batch.Store).
// Attempts count across runs (the attempt is the fence); first_attempt
// marks where this run's attempts start, so Item.RunAttempts counts them.
//
// First one UpdateItem conditioned on fresh: SET outcome = in_flight,
// attempt = if_not_exists(attempt, 0) + 1, first_attempt = the same,
// lease_until_ms = now + lease. If that condition fails and the stored row
// is in flight in this run with an expired lease, a second UpdateItem
// conditioned on expired takes it over: attempt + 1, first_attempt kept.
func (s *Store) Reserve(ctx context.Context, r batch.Reservation) (batch.Item, error) {
	next := expression.Plus(expression.IfNotExists(expression.Name("attempt"), expression.Value(0)), expression.Value(1))
	u := identity(expression.UpdateBuilder{}, r.Run, r.Now).
		Set(expression.Name("outcome"), expression.Value(string(batch.OutcomeInFlight))).
		Set(expression.Name("attempt"), next).
		Set(expression.Name("first_attempt"), next).
		Set(expression.Name("lease_until_ms"), expression.Value(r.Now.Add(r.Lease).UnixMilli())).
		Remove(expression.Name("output")).Remove(expression.Name("output_ref")).Remove(expression.Name("reason")).
		Remove(expression.Name("error")).Remove(expression.Name("released")).Remove(expression.Name("retry_scheduled")).
		Remove(expression.Name("cost")).Remove(expression.Name(config.AttrAttentionPK)).Remove(expression.Name(config.AttrAttentionSK))
	it, err := s.reserve(ctx, r, fresh(r.Run), s.stamp(u, r.Now))
	if !errors.Is(err, batch.ErrConflict) || it.Outcome != batch.OutcomeInFlight || it.Run != r.Run || !it.LeaseUntil.Before(r.Now) {
		return it, err
	}
	take := expression.Set(expression.Name("attempt"), expression.Plus(expression.Name("attempt"), expression.Value(1))).
		Set(expression.Name("lease_until_ms"), expression.Value(r.Now.Add(r.Lease).UnixMilli())).
		Set(expression.Name("updated_at_ms"), expression.Value(r.Now.UnixMilli())).
		Remove(expression.Name("retry_scheduled"))
	return s.reserve(ctx, r, expired(r.Run, r.Now), s.stamp(take, r.Now))
}

func (s *Store) reserve(ctx context.Context, r batch.Reservation, cond expression.ConditionBuilder, u expression.UpdateBuilder) (batch.Item, error) {
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return batch.Item{}, err
	}
	attrs, old, err := s.updateRow(ctx, itemKey(r.BatchID, r.ListShards, r.Key), expr, types.ReturnValueAllOld)
	if errors.Is(err, batch.ErrConflict) {
		it, uerr := itemFrom(r.BatchID, old)
		if uerr != nil {
			return batch.Item{}, uerr
		}
		return it, fmt.Errorf("reserve %s/%s: %w", r.BatchID, r.Key, err)
	}
	if err != nil {
		return batch.Item{}, fmt.Errorf("reserve %s/%s: %w", r.BatchID, r.Key, err)
	}
	// The row as written, from the row as it was: one round trip, and the
	// old row tells whether this reservation interrupted an attempt.
	var prev itemRow
	if len(attrs) > 0 {
		if err := attributevalue.UnmarshalMap(attrs, &prev); err != nil {
			return batch.Item{}, fmt.Errorf("reserve %s/%s: %w", r.BatchID, r.Key, err)
		}
	}
	it := batch.Item{BatchID: r.BatchID, Key: r.Key, RunID: r.RunID, Run: r.Run, Outcome: batch.OutcomeInFlight,
		Attempt: prev.Attempt + 1, LeaseUntil: fromMs(r.Now.Add(r.Lease).UnixMilli()), UpdatedAt: fromMs(r.Now.UnixMilli())}
	if prev.Run == r.Run && prev.Outcome == string(batch.OutcomeInFlight) {
		it.Interrupted = !prev.Retry // a takeover, not a scheduled retry
		it.RunAttempts = it.Attempt - max(prev.FirstAttempt, 1) + 1
		if prev.SpentRun == r.Run && len(prev.Spent) > 0 {
			// What this run's earlier attempts spent; the fence makes it
			// current (an earlier attempt can no longer write).
			it.Spent, it.SpentRun = pipeline.Cost(prev.Spent), r.Run
		}
	} else {
		it.RunAttempts = 1
	}
	return it, nil
}

func outcomeUpdate(r batch.Record) (expression.UpdateBuilder, error) {
	u := identity(expression.UpdateBuilder{}, r.Run, r.Now).
		Set(expression.Name("outcome"), expression.Value(string(r.Outcome)))
	set := func(name, v string) {
		if v != "" {
			u = u.Set(expression.Name(name), expression.Value(v))
		} else {
			u = u.Remove(expression.Name(name))
		}
	}
	set("output", string(r.Output))
	set("output_ref", r.OutputRef)
	set("error", pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes))
	set("reason", string(r.Reason))
	if len(r.Cost) > 0 {
		u = u.Set(expression.Name("cost"), expression.Value(map[string]float64(r.Cost)))
	} else {
		u = u.Remove(expression.Name("cost"))
	}
	u = setSpent(u, r)
	if r.Outcome == batch.OutcomeFailed || r.Outcome == batch.OutcomeQuarantined {
		u = u.Set(expression.Name(config.AttrAttentionPK), expression.Value(shardKey(r.BatchID, batch.Shard(r.Key, r.ListShards)))).
			Set(expression.Name(config.AttrAttentionSK), expression.Value(r.Key))
	} else {
		u = u.Remove(expression.Name(config.AttrAttentionPK)).Remove(expression.Name(config.AttrAttentionSK))
	}
	if !r.Outcome.Terminal() {
		return u, fmt.Errorf("record %s/%s: %q is not a terminal outcome", r.BatchID, r.Key, r.Outcome)
	}
	return u, nil
}

// Record writes a terminal outcome under the attempt fence (see batch.Store).
// Safe for the SDK to retry: a retry of a write that was applied but whose
// answer was lost finds this run and attempt already holding this outcome,
// reason and error, and Record returns nil; any other row that fails the
// fence is batch.ErrConflict.
func (s *Store) Record(ctx context.Context, r batch.Record) error {
	u, err := outcomeUpdate(r)
	if err != nil {
		return err
	}
	u = s.stamp(u.Set(expression.Name("lease_until_ms"), expression.Value(0)), r.Now)
	expr, err := expression.NewBuilder().WithCondition(fenced(r.Run, r.Attempt)).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	k := itemKey(r.BatchID, r.ListShards, r.Key)
	var old map[string]types.AttributeValue
	if w, ok := r.Effects.(effects.Writes); ok && len(w) > 0 && r.Outcome == batch.OutcomeSucceeded {
		old, err = s.recordWithEffects(ctx, r, k, expr, w)
	} else if r.Effects != nil && r.Effects.Len() > 0 {
		return fmt.Errorf("record %s/%s attempt %d: staged writes of type %T with outcome %s: only effects.Writes with a succeeded outcome are committed", r.BatchID, r.Key, r.Attempt, r.Effects, r.Outcome)
	} else {
		_, old, err = s.updateRow(ctx, k, expr, types.ReturnValueNone)
	}
	if errors.Is(err, batch.ErrConflict) {
		// The SDK sends a write again when its answer was lost (a reset
		// connection, a 5xx), also when the first try was applied: the
		// retry then fails the fence on this attempt's own outcome. A row
		// of this run and attempt holding this outcome, reason and error
		// is that write, not a later attempt's: success.
		if it, ierr := itemFrom(r.BatchID, old); ierr == nil && it.Run == r.Run && it.Attempt == r.Attempt &&
			it.Outcome == r.Outcome && it.Reason == r.Reason && it.Error == pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("record %s/%s attempt %d: %w", r.BatchID, r.Key, r.Attempt, err)
	}
	return nil
}

// Release ends the attempt's lease without an outcome, keeping the error
// text, under the attempt fence.
func (s *Store) Release(ctx context.Context, r batch.Record) error {
	u := expression.Set(expression.Name("lease_until_ms"), expression.Value(r.Now.UnixMilli())).
		Set(expression.Name("retry_scheduled"), expression.Value(true)).
		Set(expression.Name("error"), expression.Value(pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes))).
		Set(expression.Name("updated_at_ms"), expression.Value(r.Now.UnixMilli()))
	u = setSpent(s.stamp(u, r.Now), r)
	expr, err := expression.NewBuilder().WithCondition(fenced(r.Run, r.Attempt)).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	return s.update(ctx, "release", r, expr)
}

// setSpent writes what r.Run's attempts spent (spent, spent_run) when r
// carries it, in the same write as the outcome or release, so it costs no
// extra request. An empty Spent leaves the stored one: a row settled
// without running keeps its earlier run's figure, which the census reads
// only for that run.
func setSpent(u expression.UpdateBuilder, r batch.Record) expression.UpdateBuilder {
	if len(r.Spent) == 0 {
		return u
	}
	return u.Set(expression.Name("spent"), expression.Value(map[string]float64(r.Spent))).
		Set(expression.Name("spent_run"), expression.Value(r.Run))
}

// Settle writes a terminal outcome for an item that did not run: under the
// fresh condition, or, when the stored row is in flight in r.Run with an
// expired lease, under the expired condition (a second conditional write,
// which keeps the run's attempts). It returns the stored row on conflict.
func (s *Store) Settle(ctx context.Context, r batch.Record) (batch.Item, error) {
	// UpdateBuilder shares its operations between copies: build each
	// variant from scratch.
	update := func(newRun bool) (expression.UpdateBuilder, error) {
		u, err := outcomeUpdate(r)
		if err != nil {
			return u, err
		}
		u = u.Set(expression.Name("attempt"), expression.IfNotExists(expression.Name("attempt"), expression.Value(0))).
			Set(expression.Name("lease_until_ms"), expression.Value(0)).
			Remove(expression.Name("released")).Remove(expression.Name("retry_scheduled"))
		if newRun {
			// A row new to this run starts the run's attempts here (none
			// made); a row in flight in this run keeps them.
			u = u.Set(expression.Name("first_attempt"), expression.Plus(expression.IfNotExists(expression.Name("attempt"), expression.Value(0)), expression.Value(1)))
		}
		return s.stamp(u, r.Now), nil
	}
	u, err := update(true)
	if err != nil {
		return batch.Item{}, err
	}
	it, err := s.settle(ctx, r, fresh(r.Run), u)
	if errors.Is(err, batch.ErrConflict) && it.Outcome == batch.OutcomeInFlight && it.Run == r.Run && it.LeaseUntil.Before(r.Now) {
		if u, err = update(false); err != nil {
			return batch.Item{}, err
		}
		it, err = s.settle(ctx, r, expired(r.Run, r.Now), u)
	}
	return it, err
}

// SettleUnstarted writes a terminal outcome for an item not reserved in
// r.Run, under the fresh condition only (see batch.Store); it returns the
// stored row on conflict.
func (s *Store) SettleUnstarted(ctx context.Context, r batch.Record) (batch.Item, error) {
	u, err := outcomeUpdate(r)
	if err != nil {
		return batch.Item{}, err
	}
	u = u.Set(expression.Name("attempt"), expression.IfNotExists(expression.Name("attempt"), expression.Value(0))).
		Set(expression.Name("first_attempt"), expression.Plus(expression.IfNotExists(expression.Name("attempt"), expression.Value(0)), expression.Value(1))).
		Set(expression.Name("lease_until_ms"), expression.Value(0)).
		Remove(expression.Name("released")).Remove(expression.Name("retry_scheduled"))
	return s.settle(ctx, r, fresh(r.Run), u)
}

func (s *Store) settle(ctx context.Context, r batch.Record, cond expression.ConditionBuilder, u expression.UpdateBuilder) (batch.Item, error) {
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return batch.Item{}, err
	}
	_, old, err := s.updateRow(ctx, itemKey(r.BatchID, r.ListShards, r.Key), expr, types.ReturnValueNone)
	if errors.Is(err, batch.ErrConflict) {
		it, uerr := itemFrom(r.BatchID, old)
		if uerr != nil {
			return batch.Item{}, uerr
		}
		return it, fmt.Errorf("settle %s/%s: %w", r.BatchID, r.Key, err)
	}
	if err != nil {
		return batch.Item{}, fmt.Errorf("settle %s/%s: %w", r.BatchID, r.Key, err)
	}
	return batch.Item{}, nil
}

func (s *Store) update(ctx context.Context, op string, r batch.Record, expr expression.Expression) error {
	if _, _, err := s.updateRow(ctx, itemKey(r.BatchID, r.ListShards, r.Key), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("%s %s/%s attempt %d: %w", op, r.BatchID, r.Key, r.Attempt, err)
	}
	return nil
}

// GetItem reads an item row with a strongly consistent read; ErrNotFound
// when the item has no row. It reads the batch row (eventually consistent)
// to find the row's shard; for tests and tools.
func (s *Store) GetItem(ctx context.Context, batchID, itemKey string) (batch.Item, error) {
	b, err := s.getBatch(ctx, batchID, false)
	if err != nil {
		return batch.Item{}, err
	}
	return s.getItem(ctx, batchID, b.ListShards, itemKey)
}

func (s *Store) getItem(ctx context.Context, batchID string, shards int, key string) (batch.Item, error) {
	return s.getItemAt(ctx, batchID, batch.Shard(key, shards), key)
}

// getItemAt reads the row of item key in item shard `shard` with a
// strongly consistent read; ErrNotFound when it has no row.
func (s *Store) getItemAt(ctx context.Context, batchID string, shard int, key string) (batch.Item, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: itemKeyAt(batchID, shard, key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return batch.Item{}, fmt.Errorf("get item %s/%s: %w", batchID, key, err)
	}
	if len(out.Item) == 0 {
		return batch.Item{}, fmt.Errorf("item %s/%s: %w", batchID, key, batch.ErrNotFound)
	}
	return itemFrom(batchID, out.Item)
}

// Counter-row attributes.
const (
	attrDone       = "done"
	attrFailures   = "failures"
	attrItems      = "items"
	attrChunksDone = "chunks_done"
	attrWriteUnits = "wcu" // DynamoDB units attributed to the run (see Capacity)
	attrReadUnits  = "rcu"
)

// CountChunk adds c to the counter of its chunk with one UpdateItem that
// returns the new values (UPDATED_NEW; no read is billed):
//
//	ADD done :done, failures :failures, wcu :w, rcu :r
//	SET items = :items, updated_at_ms = :now, expires_at = :ttl
//
// on COUNT#{id}#{run}#{p}, CHUNK#{first:012}, where :w and :r are the
// DynamoDB units this Store consumed since its last counter write. When
// the new done reaches items and the old one had not (this write
// completed the chunk), or when c.RunFailures asks for the run's failure
// total, one more UpdateItem on the run row COUNT#{id}#{run}, RUN adds
// 1 to chunks_done (on completion) and the failures, returning both: the
// write that brings chunks_done to c.Chunks reports RunDone. Each chunk
// completes once (its counter crosses items once), so exactly one write
// reports RunDone unless a counter write was lost.
func (s *Store) CountChunk(ctx context.Context, c batch.ChunkCount) (batch.ChunkCounted, error) {
	var res batch.ChunkCounted
	used := s.takePending()
	shards := max(1, c.Shards)
	part := int((c.First / max(c.Items, 1)) % int64(shards))
	done := c.Done()
	u := expression.Add(expression.Name(attrDone), expression.Value(done)).
		Add(expression.Name(attrFailures), expression.Value(c.Failures)).
		Set(expression.Name(attrItems), expression.Value(c.Items)).
		Set(expression.Name("updated_at_ms"), expression.Value(c.Now.UnixMilli()))
	for _, o := range batch.TerminalOutcomes() {
		if n := c.Outcomes[o]; n != 0 {
			u = u.Add(expression.Name(outcomeAttr(o)), expression.Value(n))
		}
	}
	if used.DynamoDBWriteUnits > 0 || used.DynamoDBReadUnits > 0 {
		u = u.Add(expression.Name(attrWriteUnits), expression.Value(used.DynamoDBWriteUnits)).
			Add(expression.Name(attrReadUnits), expression.Value(used.DynamoDBReadUnits))
	}
	expr, err := expression.NewBuilder().WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		s.returnPending(used)
		return res, err
	}
	attrs, _, err := s.updateRow(ctx, key(countPK(c.BatchID, c.Run, part), chunkSK(c.First)), expr, types.ReturnValueUpdatedNew)
	if err != nil {
		s.returnPending(used)
		return res, fmt.Errorf("count chunk %d of %s run %d: %w", c.First, c.BatchID, c.Run, err)
	}
	var row struct {
		Done int64 `dynamodbav:"done"`
	}
	if err := attributevalue.UnmarshalMap(attrs, &row); err != nil {
		return res, fmt.Errorf("count chunk %d of %s run %d: %w", c.First, c.BatchID, c.Run, err)
	}
	res.ChunkDone = row.Done >= c.Items && row.Done-done < c.Items
	if !res.ChunkDone && !c.RunFailures {
		return res, nil
	}
	ru := expression.Set(expression.Name("updated_at_ms"), expression.Value(c.Now.UnixMilli())).
		Add(expression.Name(attrChunksDone), expression.Value(boolInt(res.ChunkDone)))
	if c.RunFailures {
		ru = ru.Add(expression.Name(attrFailures), expression.Value(c.Failures))
	}
	expr, err = expression.NewBuilder().WithUpdate(s.stamp(ru, c.Now)).Build()
	if err != nil {
		return res, err
	}
	attrs, _, err = s.updateRow(ctx, key(runPK(c.BatchID, c.Run), skRun), expr, types.ReturnValueUpdatedNew)
	if err != nil {
		return res, fmt.Errorf("count chunks of %s run %d: %w", c.BatchID, c.Run, err)
	}
	var run struct {
		ChunksDone int64 `dynamodbav:"chunks_done"`
		Failures   int64 `dynamodbav:"failures"`
	}
	if err := attributevalue.UnmarshalMap(attrs, &run); err != nil {
		return res, fmt.Errorf("count chunks of %s run %d: %w", c.BatchID, c.Run, err)
	}
	res.Failures = run.Failures
	res.RunDone = res.ChunkDone && c.Chunks > 0 && run.ChunksDone == int64(c.Chunks)
	return res, nil
}

// outcomeAttr is the counter attribute counting items of outcome o
// ("n_succeeded", ...).
func outcomeAttr(o batch.Outcome) string { return "n_" + string(o) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Progress sums the run's chunk counters: one eventually consistent Query
// per counter shard (COUNT#{id}#{run}#{p}, every page), so it reads
// O(shards) partitions and about 100 bytes per chunk of 5,000 items,
// whatever the batch's size.
func (s *Store) Progress(ctx context.Context, batchID string, run, shards int) (batch.Progress, error) {
	p := batch.Progress{ByOutcome: map[batch.Outcome]int64{}}
	for part := range max(1, shards) {
		err := s.queryAll(ctx, countPK(batchID, run, part), false, func(av map[string]types.AttributeValue) error {
			var row struct {
				Done        int64   `dynamodbav:"done"`
				Failures    int64   `dynamodbav:"failures"`
				UpdatedAtMs int64   `dynamodbav:"updated_at_ms"`
				WriteUnits  float64 `dynamodbav:"wcu"`
				ReadUnits   float64 `dynamodbav:"rcu"`
			}
			if err := attributevalue.UnmarshalMap(av, &row); err != nil {
				return err
			}
			p.Done += row.Done
			p.Failures += row.Failures
			for _, o := range batch.TerminalOutcomes() {
				if v, ok := av[outcomeAttr(o)].(*types.AttributeValueMemberN); ok {
					n, _ := strconv.ParseInt(v.Value, 10, 64)
					p.ByOutcome[o] += n
				}
			}
			p.Usage.DynamoDBWriteUnits += row.WriteUnits
			p.Usage.DynamoDBReadUnits += row.ReadUnits
			if t := fromMs(row.UpdatedAtMs); t.After(p.UpdatedAt) {
				p.UpdatedAt = t
			}
			return nil
		})
		if err != nil {
			return p, fmt.Errorf("progress %s run %d: %w", batchID, run, err)
		}
	}
	return p, nil
}

// queryAll calls fn with every row under partition key pk, in sort-key
// order, reading every page.
func (s *Store) queryAll(ctx context.Context, pk string, consistent bool, fn func(map[string]types.AttributeValue) error) error {
	var start map[string]types.AttributeValue
	for {
		c, cancel := s.ctx(ctx)
		out, err := s.db.Query(c, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": config.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: pk}},
			ExclusiveStartKey:         start,
			ConsistentRead:            aws.Bool(consistent),
		})
		cancel()
		if err != nil {
			return err
		}
		for _, av := range out.Items {
			if err := fn(av); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		start = out.LastEvaluatedKey
	}
}

// queryKeys returns the keys (pk, sk) of every row under partition key pk.
func (s *Store) queryKeys(ctx context.Context, pk string) ([]map[string]types.AttributeValue, error) {
	var keys []map[string]types.AttributeValue
	err := s.queryAll(ctx, pk, false, func(av map[string]types.AttributeValue) error {
		keys = append(keys, map[string]types.AttributeValue{config.AttrPK: av[config.AttrPK], config.AttrSK: av[config.AttrSK]})
		return nil
	})
	return keys, err
}

// shardIter pages through one item shard (ITEM#{id}#{shard}) in key order.
type shardIter struct {
	s       *Store
	batchID string
	pk      string
	page    []batch.Item
	next    map[string]types.AttributeValue
	done    bool
}

func (it *shardIter) fill(ctx context.Context) error {
	for len(it.page) == 0 && !it.done {
		c, cancel := it.s.ctx(ctx)
		out, err := it.s.db.Query(c, &dynamodb.QueryInput{
			TableName:                 &it.s.table,
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": config.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: it.pk}},
			ExclusiveStartKey:         it.next,
		})
		cancel()
		if err != nil {
			return fmt.Errorf("query %s: %w", it.pk, err)
		}
		for _, av := range out.Items {
			item, err := itemFrom(it.batchID, av)
			if err != nil {
				return err
			}
			it.page = append(it.page, item)
		}
		it.next = out.LastEvaluatedKey
		it.done = len(out.LastEvaluatedKey) == 0
	}
	return nil
}

type iterHeap []*shardIter

func (h iterHeap) Len() int           { return len(h) }
func (h iterHeap) Less(i, j int) bool { return cmp.Less(h[i].page[0].Key, h[j].page[0].Key) }
func (h iterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *iterHeap) Push(x any)        { *h = append(*h, x.(*shardIter)) }
func (h *iterHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ScanItems merges the batch's item shards (one Query each on the table,
// pk ITEM#{id}#{shard}, whose sort key is the item key) in key byte order.
// The pages are read eventually consistent (half the read units): a row
// read as in_flight or released is re-read with a strongly consistent
// GetItem before fn sees it (those are the rows whose next write decides a
// run's end).
func (s *Store) ScanItems(ctx context.Context, batchID string, listShards int, fn func(batch.Item) error) error {
	h := &iterHeap{}
	shards := max(1, listShards)
	for i := range shards {
		it := &shardIter{s: s, batchID: batchID, pk: itemPK(batchID, i)}
		if err := it.fill(ctx); err != nil {
			return fmt.Errorf("scan items %s: %w", batchID, err)
		}
		if len(it.page) > 0 {
			*h = append(*h, it)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		it := (*h)[0]
		item := it.page[0]
		it.page = it.page[1:]
		if len(it.page) == 0 {
			if err := it.fill(ctx); err != nil {
				return fmt.Errorf("scan items %s: %w", batchID, err)
			}
		}
		if len(it.page) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
		if item.Outcome == batch.OutcomeInFlight || item.Released {
			fresh, err := s.getItem(ctx, batchID, shards, item.Key)
			if err != nil {
				return err
			}
			item = fresh
		}
		if err := fn(item); err != nil {
			return err
		}
	}
	return nil
}

// FinishRun moves the batch to f.Status under the condition
// run = :run AND status = running (setting the batch row's TTL to
// f.RowsExpireAt), deletes the running marker and writes the retention
// marker and the run's PUBLISH marker, in one transaction.
func (s *Store) FinishRun(ctx context.Context, id string, run int, f batch.Finish) error {
	census, err := json.Marshal(f.Census)
	if err != nil {
		return err
	}
	u := expression.Set(expression.Name("status"), expression.Value(string(f.Status))).
		Set(expression.Name("report_key"), expression.Value(f.ReportKey)).
		Set(expression.Name("census"), expression.Value(string(census))).
		Set(expression.Name("needs_attention"), expression.Value(f.Census.NeedsAttention())).
		Set(expression.Name("finished_at_ms"), expression.Value(f.FinishedAt.UnixMilli())).
		Set(expression.Name("expires_at_ms"), expression.Value(f.ExpiresAt.UnixMilli()))
	if !f.RowsExpireAt.IsZero() {
		u = u.Set(expression.Name(config.AttrExpiresAt), expression.Value(f.RowsExpireAt.Unix()))
	}
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name("run").Equal(expression.Value(run)),
			expression.Name("status").Equal(expression.Value(string(batch.StatusRunning))))).
		WithUpdate(u).Build()
	if err != nil {
		return err
	}
	_, err = s.transact(ctx, s.batchUpdate(id, expr),
		types.TransactWriteItem{Delete: &types.Delete{TableName: &s.table, Key: key(pkRunning, id)}},
		types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			config.AttrPK: &types.AttributeValueMemberS{Value: pkRetain},
			config.AttrSK: &types.AttributeValueMemberS{Value: RetentionSK(f.ExpiresAt, id)},
			"batch_id":    &types.AttributeValueMemberS{Value: id},
		}}},
		types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			config.AttrPK: &types.AttributeValueMemberS{Value: pkPublish},
			config.AttrSK: &types.AttributeValueMemberS{Value: publishSK(id, run)},
			"batch_id":    &types.AttributeValueMemberS{Value: id},
			"run":         &types.AttributeValueMemberN{Value: strconv.Itoa(run)},
		}}})
	if err != nil {
		return fmt.Errorf("finish %s run %d: %w", id, run, err)
	}
	return nil
}

// RunningBatches lists running markers (pk RUNNING), every page.
func (s *Store) RunningBatches(ctx context.Context) ([]string, error) {
	ids, err := s.markerKeys(ctx, pkRunning)
	if err != nil {
		return nil, fmt.Errorf("running batches: %w", err)
	}
	return ids, nil
}

// markerKeys returns the sort keys of every row under the marker
// partition pk (RUNNING, PUBLISH), reading every page.
func (s *Store) markerKeys(ctx context.Context, pk string) ([]string, error) {
	var sks []string
	var start map[string]types.AttributeValue
	for {
		c, cancel := s.ctx(ctx)
		out, err := s.db.Query(c, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": config.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: pk}},
			ExclusiveStartKey:         start,
		})
		cancel()
		if err != nil {
			return nil, err
		}
		for _, av := range out.Items {
			if sk, ok := av[config.AttrSK].(*types.AttributeValueMemberS); ok {
				sks = append(sks, sk.Value)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return sks, nil
		}
		start = out.LastEvaluatedKey
	}
}

// Stop marks the run as stopping (status cancelled or threshold_exceeded)
// under the condition run = :run AND status = running AND
// attribute_not_exists(stop); else batch.ErrConflict. Idempotent in effect:
// the first stop wins.
func (s *Store) Stop(ctx context.Context, id string, run int, status batch.Status, detail string) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name("run").Equal(expression.Value(run)),
			expression.Name("status").Equal(expression.Value(string(batch.StatusRunning))),
			expression.AttributeNotExists(expression.Name("stop")))).
		WithUpdate(expression.Set(expression.Name("stop"), expression.Value(string(status))).
			Set(expression.Name("stop_detail"), expression.Value(detail))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, key(batchPK(id), skBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("stop %s run %d: %w", id, run, err)
	}
	return nil
}

// StartRun starts run from+1 of a finished batch, in one transaction: the
// batch row (condition run = :from AND status <> running AND not being
// forgotten) becomes running
// with fanned_out false and no stop, and the running marker is put. It
// returns the updated batch, or batch.ErrConflict when the batch is not at
// run from or still running.
func (s *Store) StartRun(ctx context.Context, id string, from int, now time.Time) (batch.Batch, error) {
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name("run").Equal(expression.Value(from)),
			expression.Name("status").In(expression.Value(string(batch.StatusCompleted)),
				expression.Value(string(batch.StatusThresholdExceeded)), expression.Value(string(batch.StatusCancelled))),
			expression.AttributeNotExists(expression.Name("forgetting")))).
		WithUpdate(expression.Set(expression.Name("run"), expression.Value(from+1)).
			Set(expression.Name("status"), expression.Value(string(batch.StatusRunning))).
			Set(expression.Name("fanned_out"), expression.Value(false)).
			Set(expression.Name("run_started_at_ms"), expression.Value(now.UnixMilli())).
			Remove(expression.Name("stop")).Remove(expression.Name("stop_detail")).
			Remove(expression.Name(config.AttrExpiresAt))).Build()
	if err != nil {
		return batch.Batch{}, err
	}
	_, err = s.transact(ctx, s.batchUpdate(id, expr), s.putRunning(id, from+1))
	if err != nil {
		return batch.Batch{}, fmt.Errorf("start run %d of %s: %w", from+1, id, err)
	}
	return s.GetBatch(ctx, id)
}

// ReleaseItem marks a quarantined item released, so that the next run
// runs it again: condition outcome = quarantined. batch.ErrNotFound when
// the item has no row, batch.ErrConflict when it is not quarantined.
func (s *Store) ReleaseItem(ctx context.Context, batchID string, listShards int, key string) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.Name("outcome").Equal(expression.Value(string(batch.OutcomeQuarantined)))).
		WithUpdate(expression.Set(expression.Name("released"), expression.Value(true))).Build()
	if err != nil {
		return err
	}
	_, old, err := s.updateRow(ctx, itemKey(batchID, listShards, key), expr, types.ReturnValueNone)
	switch {
	case errors.Is(err, batch.ErrConflict) && len(old) == 0:
		return fmt.Errorf("item %s/%s: %w", batchID, key, batch.ErrNotFound)
	case errors.Is(err, batch.ErrConflict):
		return fmt.Errorf("release %s/%s: not quarantined: %w", batchID, key, err)
	case err != nil:
		return fmt.Errorf("release %s/%s: %w", batchID, key, err)
	}
	return nil
}

// ListItems returns up to limit items of outcome in key byte order after
// the key after (exclusive; "" from the start), and the key to continue
// after ("" when there are no more). failed and quarantined items come
// from the sparse attention index, so successes are never read; in_flight
// items come from the table's item shards with a filter (DynamoDB reads and
// discards the other rows of the page). Each shard is queried for at most
// limit rows per call.
func (s *Store) ListItems(ctx context.Context, batchID string, listShards int, outcome batch.Outcome, after string, limit int) ([]batch.Item, string, error) {
	var index *string
	pkAttr, skAttr := config.AttrAttentionPK, config.AttrAttentionSK
	pkOf := func(shard int) string { return shardKey(batchID, shard) }
	switch outcome {
	case batch.OutcomeFailed, batch.OutcomeQuarantined:
		index = aws.String(config.IndexAttention)
	case batch.OutcomeInFlight:
		pkAttr, skAttr = config.AttrPK, config.AttrSK
		pkOf = func(shard int) string { return itemPK(batchID, shard) }
	default:
		return nil, "", fmt.Errorf("list items: outcome %q is not failed, quarantined or in_flight: %w", outcome, batch.ErrInvalid)
	}
	var all []batch.Item
	more := false // a shard stopped reading with rows left
	for shard := range max(1, listShards) {
		kc := expression.Key(pkAttr).Equal(expression.Value(pkOf(shard)))
		if after != "" {
			kc = kc.And(expression.Key(skAttr).GreaterThan(expression.Value(after)))
		}
		expr, err := expression.NewBuilder().WithKeyCondition(kc).
			WithFilter(expression.Name("outcome").Equal(expression.Value(string(outcome)))).Build()
		if err != nil {
			return nil, "", err
		}
		var start map[string]types.AttributeValue
		got := 0
		for got < limit {
			c, cancel := s.ctx(ctx)
			out, err := s.db.Query(c, &dynamodb.QueryInput{
				TableName: &s.table, IndexName: index,
				KeyConditionExpression: expr.KeyCondition(), FilterExpression: expr.Filter(),
				ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
				ExclusiveStartKey: start, Limit: aws.Int32(int32(min(limit*4, 1000))),
			})
			cancel()
			if err != nil {
				return nil, "", fmt.Errorf("list items %s: %w", batchID, err)
			}
			for _, av := range out.Items {
				it, err := itemFrom(batchID, av)
				if err != nil {
					return nil, "", err
				}
				all = append(all, it)
				got++
			}
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			start = out.LastEvaluatedKey
			if got >= limit {
				more = true
			}
		}
	}
	slices.SortFunc(all, func(a, b batch.Item) int { return cmp.Compare(a.Key, b.Key) })
	if len(all) > limit {
		all = all[:limit]
		return all, all[limit-1].Key, nil
	}
	if more && len(all) > 0 {
		return all, all[len(all)-1].Key, nil
	}
	return all, "", nil
}

// DeleteBatch removes every row of the batch: item rows (one Query of
// keys per item shard), chunk counters and the run row of every run, the
// rerun count marks, its max_concurrency slot rows, the running and PUBLISH
// markers, then the batch row, and the retention marker last, only once
// everything else is gone: a marker never outlives the sweep's reason to
// come back. BatchWriteItem deletes 25 keys a call; keys it leaves
// unprocessed are retried with exponential backoff (DynamoDB API
// reference, "BatchWriteItem": "If any requested operations fail because
// the table's provisioned throughput is exceeded or an internal processing
// failure occurs, the failed operations are returned in the
// UnprocessedItems response parameter ... we strongly recommend that you
// use an exponential backoff algorithm"); keys still unprocessed after
// MaxDeleteTries fail the call, which leaves the rest for a retry.
func (s *Store) DeleteBatch(ctx context.Context, b batch.Batch) error {
	var keys []map[string]types.AttributeValue
	flush := func(force bool) error {
		for len(keys) >= 25 || force && len(keys) > 0 {
			n := min(25, len(keys))
			if err := s.deleteKeys(ctx, keys[:n]); err != nil {
				return fmt.Errorf("forget %s: %w", b.ID, err)
			}
			keys = keys[n:]
		}
		return nil
	}
	partition := func(pk string) error {
		found, err := s.queryKeys(ctx, pk)
		if err != nil {
			return fmt.Errorf("forget %s: %w", b.ID, err)
		}
		keys = append(keys, found...)
		return flush(false)
	}
	for shard := range max(1, b.ListShards) {
		if err := partition(itemPK(b.ID, shard)); err != nil {
			return err
		}
	}
	for run := 1; run <= b.Run; run++ {
		for p := range s.counterPartitions(b, run) {
			if err := partition(p); err != nil {
				return err
			}
		}
		keys = append(keys, key(runPK(b.ID, run), skRun), key(pkPublish, publishSK(b.ID, run)))
	}
	for i := range b.MaxConcurrency {
		keys = append(keys, key(slotPK(b.ID, i), skSlot))
		if err := flush(false); err != nil {
			return err
		}
	}
	keys = append(keys, key(pkRunning, b.ID))
	if err := flush(true); err != nil {
		return err
	}
	if err := s.deleteKeys(ctx, []map[string]types.AttributeValue{key(batchPK(b.ID), skBatch)}); err != nil {
		return fmt.Errorf("forget %s: %w", b.ID, err)
	}
	if !b.ExpiresAt.IsZero() {
		if err := s.deleteKeys(ctx, []map[string]types.AttributeValue{key(pkRetain, RetentionSK(b.ExpiresAt, b.ID))}); err != nil {
			return fmt.Errorf("forget %s: retention marker: %w", b.ID, err)
		}
	}
	return nil
}

// counterPartitions yields the partition keys of run's chunk counters and,
// for runs after the first, of its rerun count marks.
func (s *Store) counterPartitions(b batch.Batch, run int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for p := range max(1, b.CounterShards) {
			if !yield(countPK(b.ID, run, p)) {
				return
			}
		}
		if run < 2 {
			return
		}
		for shard := range max(1, b.ListShards) {
			if !yield(markPK(b.ID, run, shard)) {
				return
			}
		}
	}
}

// AcquireSlot takes the slot row SLOT#{id}#{slot} (see batch.Store) with
// one UpdateItem: SET holder, lease_until_ms = now + lease and the row TTL,
// under the condition attribute_not_exists(pk) OR lease_until_ms < now.
func (s *Store) AcquireSlot(ctx context.Context, batchID string, slot int, holder string, now time.Time, lease time.Duration) error {
	u := expression.Set(expression.Name("holder"), expression.Value(holder)).
		Set(expression.Name("lease_until_ms"), expression.Value(now.Add(lease).UnixMilli()))
	cond := expression.Or(expression.AttributeNotExists(expression.Name(config.AttrPK)),
		expression.Name("lease_until_ms").LessThan(expression.Value(now.UnixMilli())))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, now)).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, key(slotPK(batchID, slot), skSlot), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("take slot %d of %s: %w", slot, batchID, err)
	}
	return nil
}

// FreeSlot deletes the slot row under the condition holder = :holder (see
// batch.Store); a lost condition is not an error.
func (s *Store) FreeSlot(ctx context.Context, batchID string, slot int, holder string) error {
	expr, err := expression.NewBuilder().WithCondition(expression.Name("holder").Equal(expression.Value(holder))).Build()
	if err != nil {
		return err
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.db.DeleteItem(c, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: key(slotPK(batchID, slot), skSlot),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	if _, ok := conflict(err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("free slot %d of %s: %w", slot, batchID, err)
	}
	return nil
}

// MaxDeleteTries bounds the BatchWriteItem calls for one set of keys.
const MaxDeleteTries = 8

// deleteKeys deletes up to 25 keys with BatchWriteItem, retrying the
// unprocessed ones with exponential backoff (50 ms doubling, jittered, at
// most MaxDeleteTries calls).
func (s *Store) deleteKeys(ctx context.Context, keys []map[string]types.AttributeValue) error {
	reqs := make([]types.WriteRequest, 0, len(keys))
	for _, k := range keys {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: k}})
	}
	pending := map[string][]types.WriteRequest{s.table: reqs}
	bo := &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 2 * time.Second}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		c, cancel := s.ctx(ctx)
		out, err := s.db.BatchWriteItem(c, &dynamodb.BatchWriteItemInput{RequestItems: pending})
		cancel()
		if err != nil {
			return struct{}{}, backoff.Permanent(err)
		}
		pending = out.UnprocessedItems
		if n := len(pending[s.table]); n > 0 {
			return struct{}{}, fmt.Errorf("delete: %d of %d keys left unprocessed", n, len(keys))
		}
		return struct{}{}, nil
	}, backoff.WithBackOff(bo), backoff.WithMaxTries(MaxDeleteTries), backoff.WithMaxElapsedTime(0))
	return err
}

// KeepRows sets config.AttrExpiresAt = until on the item rows of keys,
// the chunk counters and run row of runs 1..b.Run and the rerun count
// marks (found with one Query per counter or mark partition), each with
// one UpdateItem under the condition attribute_exists(pk) AND
// (attribute_not_exists(expires_at) OR expires_at < :until), 16 at a
// time. A row gone or already later is skipped.
func (s *Store) KeepRows(ctx context.Context, b batch.Batch, keys []string, until time.Time) error {
	rows := make([]map[string]types.AttributeValue, 0, len(keys)+b.Run)
	for _, k := range keys {
		rows = append(rows, itemKey(b.ID, b.ListShards, k))
	}
	for run := 1; run <= b.Run; run++ {
		for p := range s.counterPartitions(b, run) {
			found, err := s.queryKeys(ctx, p)
			if err != nil {
				return fmt.Errorf("keep rows of %s: %w", b.ID, err)
			}
			rows = append(rows, found...)
		}
		rows = append(rows, key(runPK(b.ID, run), skRun))
	}
	ttl := expression.Name(config.AttrExpiresAt)
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(expression.AttributeExists(expression.Name(config.AttrPK)),
			expression.Or(expression.AttributeNotExists(ttl), ttl.LessThan(expression.Value(until.Unix()))))).
		WithUpdate(expression.Set(ttl, expression.Value(until.Unix()))).Build()
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, k := range rows {
		g.Go(func() error {
			_, _, err := s.updateRow(gctx, k, expr, types.ReturnValueNone)
			if err != nil && !errors.Is(err, batch.ErrConflict) {
				return fmt.Errorf("keep rows of %s: %w", b.ID, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// Unpublished queries the PUBLISH markers (every page).
func (s *Store) Unpublished(ctx context.Context) ([]batch.RunRef, error) {
	sks, err := s.markerKeys(ctx, pkPublish)
	if err != nil {
		return nil, fmt.Errorf("unpublished runs: %w", err)
	}
	var refs []batch.RunRef
	for _, sk := range sks {
		id, digits, ok := strings.Cut(sk, "#")
		run, err := strconv.Atoi(digits)
		if ok && err == nil && run > 0 {
			refs = append(refs, batch.RunRef{BatchID: id, Run: run})
		}
	}
	return refs, nil
}

// SetPublished sets published_run = :run on the batch row under the
// condition attribute_exists(pk) AND (attribute_not_exists(published_run)
// OR published_run < :run) (a lost condition is no error), then deletes
// the run's PUBLISH marker.
func (s *Store) SetPublished(ctx context.Context, id string, run int) error {
	pr := expression.Name("published_run")
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(expression.AttributeExists(expression.Name(config.AttrPK)),
			expression.Or(expression.AttributeNotExists(pr), pr.LessThan(expression.Value(run))))).
		WithUpdate(expression.Set(pr, expression.Value(run))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, key(batchPK(id), skBatch), expr, types.ReturnValueNone); err != nil && !errors.Is(err, batch.ErrConflict) {
		return fmt.Errorf("set published %s run %d: %w", id, run, err)
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	if _, err := s.db.DeleteItem(c, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(pkPublish, publishSK(id, run))}); err != nil {
		return fmt.Errorf("set published %s run %d: %w", id, run, err)
	}
	return nil
}

// ExpiredMarkers returns up to limit retention markers whose expiry is at
// or before now, oldest first: Query pk = RETENTION AND sk < {now_ms+1:020}.
// A marker whose sort key is not "{20 digits}#{batch id}" comes back with
// Malformed set.
func (s *Store) ExpiredMarkers(ctx context.Context, now time.Time, limit int) ([]batch.RetentionMarker, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.Query(c, &dynamodb.QueryInput{
		TableName:                &s.table,
		KeyConditionExpression:   aws.String("#p = :p AND #s < :s"),
		ExpressionAttributeNames: map[string]string{"#p": config.AttrPK, "#s": config.AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":p": &types.AttributeValueMemberS{Value: pkRetain},
			":s": &types.AttributeValueMemberS{Value: fmt.Sprintf("%020d", now.UnixMilli()+1)},
		},
		Limit: aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("expired markers: %w", err)
	}
	markers := make([]batch.RetentionMarker, 0, len(out.Items))
	for _, av := range out.Items {
		sk, _ := av[config.AttrSK].(*types.AttributeValueMemberS)
		m := batch.RetentionMarker{Malformed: true}
		if sk != nil {
			m.Key = sk.Value
			digits, id, ok := strings.Cut(sk.Value, "#")
			msec, perr := strconv.ParseInt(digits, 10, 64)
			if ok && len(digits) == 20 && perr == nil && batch.ValidBatchID(id) {
				m = batch.RetentionMarker{Key: sk.Value, BatchID: id, ExpiresAt: fromMs(msec)}
			}
		}
		markers = append(markers, m)
	}
	return markers, nil
}

// DeleteMarker deletes the retention marker whose sort key is markerKey.
func (s *Store) DeleteMarker(ctx context.Context, markerKey string) error {
	c, cancel := s.ctx(ctx)
	defer cancel()
	if _, err := s.db.DeleteItem(c, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(pkRetain, markerKey)}); err != nil {
		return fmt.Errorf("delete retention marker %q: %w", markerKey, err)
	}
	return nil
}

// MarkCounted puts the count mark MARK#{id}#{run}#{shard}, {key} under the
// condition attribute_not_exists(pk) and reports whether it did (false:
// already counted in this run, a duplicate delivery). The caller has read
// the item row (its reservation was refused with the row): succeeded, or
// quarantined and not released, in an earlier run. The mark is its own
// small row, so that counting never writes the item row again (which
// would bill its output once more); it carries the row TTL.
func (s *Store) MarkCounted(ctx context.Context, batchID string, listShards int, key string, run int) (bool, error) {
	item := map[string]types.AttributeValue{
		config.AttrPK: &types.AttributeValueMemberS{Value: markPK(batchID, run, batch.Shard(key, listShards))},
		config.AttrSK: &types.AttributeValueMemberS{Value: key},
	}
	if s.RowTTL > 0 {
		item[config.AttrExpiresAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(s.RowTTL).Unix(), 10)}
	}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(config.AttrPK))).Build()
	if err != nil {
		return false, err
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.db.PutItem(c, &dynamodb.PutItemInput{TableName: &s.table, Item: item,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names()})
	if _, ok := conflict(err); ok {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mark counted %s/%s: %w", batchID, key, err)
	}
	return true, nil
}

// MarkForgetting flags a finished batch as being forgotten, under the
// condition status <> running; from then on StartRun refuses it. Returns
// batch.ErrConflict while a run is going, batch.ErrNotFound without a row.
// Idempotent.
func (s *Store) MarkForgetting(ctx context.Context, id string) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.AttributeExists(expression.Name(config.AttrPK)),
			expression.Name("status").NotEqual(expression.Value(string(batch.StatusRunning))),
			expression.Name("status").NotEqual(expression.Value(string(batch.StatusSubmitting))))).
		WithUpdate(expression.Set(expression.Name("forgetting"), expression.Value(true))).Build()
	if err != nil {
		return err
	}
	_, old, err := s.updateRow(ctx, key(batchPK(id), skBatch), expr, types.ReturnValueNone)
	switch {
	case errors.Is(err, batch.ErrConflict) && len(old) == 0:
		return fmt.Errorf("batch %s: %w", id, batch.ErrNotFound)
	case err != nil:
		return fmt.Errorf("forget %s: a run is going: %w", id, err)
	}
	return nil
}
