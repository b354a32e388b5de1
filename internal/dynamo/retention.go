package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/errgroup"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// RunningBatches lists running markers (pk RUNNING), every page.
func (s *Store) RunningBatches(ctx context.Context) ([]string, error) {
	ids, err := s.markerKeys(ctx, layout.PKRunning)
	if err != nil {
		return nil, fmt.Errorf("running batches: %w", err)
	}
	return ids, nil
}

// markerKeys returns the sort keys of every row under the marker
// partition pk (RUNNING, PUBLISH), reading every page.
func (s *Store) markerKeys(ctx context.Context, pk string) ([]string, error) {
	var sks []string
	err := s.queryAll(ctx, pk, false, func(av map[string]types.AttributeValue) error {
		if sk, ok := av[config.AttrSK].(*types.AttributeValueMemberS); ok {
			sks = append(sks, sk.Value)
		}
		return nil
	})
	return sks, err
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
func (s *Store) DeleteBatch(ctx context.Context, b ledger.Batch) error {
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
		if err := partition(layout.ItemPK(b.ID, shard)); err != nil {
			return err
		}
		if b.Packed() {
			if err := partition(layout.PackPK(b.ID, shard)); err != nil {
				return err
			}
			if err := partition(layout.AttentionPK(b.ID, shard)); err != nil {
				return err
			}
		}
	}
	for run := 1; run <= b.Run; run++ {
		for p := range s.counterPartitions(b, run) {
			if err := partition(p); err != nil {
				return err
			}
		}
		keys = append(keys, layout.Key(layout.RunPK(b.ID, run), layout.SKRun), layout.Key(layout.PKPublish, layout.PublishSK(b.ID, run)))
	}
	for i := range b.MaxConcurrency {
		keys = append(keys, layout.Key(layout.SlotPK(b.ID, i), layout.SKSlot))
		if err := flush(false); err != nil {
			return err
		}
	}
	if b.MaxConcurrency > 0 {
		// Each run's claim counters and track fences (at most one track
		// per unit of the limit; a run of n tracks has pace.Counters(n)
		// counters, and n is not kept: every count up to the limit's).
		for run := 1; run <= b.Run; run++ {
			keys = append(keys, layout.Key(layout.ClaimPK(b.ID, run), layout.SKClaim))
			for n := 2; n <= pace.Counters(b.MaxConcurrency); n++ {
				for c := range n {
					keys = append(keys, layout.Key(layout.CounterPK(b.ID, run, n, c), layout.SKClaim))
					if err := flush(false); err != nil {
						return err
					}
				}
			}
			for t := range b.MaxConcurrency {
				keys = append(keys, layout.Key(layout.TrackPK(b.ID, run, t), layout.SKTrack))
				if err := flush(false); err != nil {
					return err
				}
			}
		}
	}
	keys = append(keys, layout.Key(layout.PKRunning, b.ID))
	if err := flush(true); err != nil {
		return err
	}
	if err := s.deleteBatchRow(ctx, b); err != nil {
		return err
	}
	if !b.ExpiresAt.IsZero() {
		if err := s.deleteKeys(ctx, []map[string]types.AttributeValue{layout.Key(layout.PKRetention, layout.RetentionSK(b.ExpiresAt, b.ID))}); err != nil {
			return fmt.Errorf("forget %s: retention marker: %w", b.ID, err)
		}
	}
	return nil
}

// deleteBatchRow deletes the batch row; with b.ForgettingBy set, one
// DeleteItem conditioned on forgetting_by = it (the row is this forget's
// to delete: a later forget's mark makes it that one's), else
// unconditioned. A row already gone is no error (a resend after a lost
// answer finds none).
func (s *Store) deleteBatchRow(ctx context.Context, b ledger.Batch) error {
	k := layout.Key(layout.BatchPK(b.ID), layout.SKBatch)
	if b.ForgettingBy == "" {
		if err := s.deleteKeys(ctx, []map[string]types.AttributeValue{k}); err != nil {
			return fmt.Errorf("forget %s: %w", b.ID, err)
		}
		return nil
	}
	expr, err := expression.NewBuilder().WithCondition(expression.Or(
		expression.AttributeNotExists(expression.Name(config.AttrPK)),
		expression.Name(layout.AttrForgettingBy).Equal(expression.Value(b.ForgettingBy)))).Build()
	if err != nil {
		return err
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.db.DeleteItem(c, &dynamodb.DeleteItemInput{TableName: &s.table, Key: k,
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	if _, ok := conflict(err); ok {
		return fmt.Errorf("forget %s: the batch row is no longer this forget's (marked by a later forget, which deletes it, or the id submitted again): %w", b.ID, ledger.ErrForgetGoing)
	}
	if err != nil {
		return fmt.Errorf("forget %s: %w", b.ID, err)
	}
	return nil
}

// counterPartitions yields the partition keys of run's chunk counters and,
// for runs after the first, of its rerun count marks.
func (s *Store) counterPartitions(b ledger.Batch, run int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for p := range max(1, b.CounterShards) {
			if !yield(layout.CountPK(b.ID, run, p)) {
				return
			}
		}
		if run < 2 {
			return
		}
		for shard := range max(1, b.ListShards) {
			if !yield(layout.MarkPK(b.ID, run, shard)) {
				return
			}
		}
	}
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
	return s.batchWrite(ctx, reqs)
}

// batchWrite makes up to 25 puts or deletes with BatchWriteItem, retrying
// the unprocessed ones with exponential backoff (50 ms doubling,
// jittered, at most MaxDeleteTries calls).
func (s *Store) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	n := len(reqs)
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
		if left := len(pending[s.table]); left > 0 {
			return struct{}{}, fmt.Errorf("batch write: %d of %d rows left unprocessed", left, n)
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
func (s *Store) KeepRows(ctx context.Context, b ledger.Batch, keys []string, until time.Time) error {
	rows := make([]map[string]types.AttributeValue, 0, len(keys)+b.Run)
	for _, k := range keys {
		rows = append(rows, layout.ItemKey(b.ID, b.ListShards, k))
	}
	for run := 1; run <= b.Run; run++ {
		for p := range s.counterPartitions(b, run) {
			found, err := s.queryKeys(ctx, p)
			if err != nil {
				return fmt.Errorf("keep rows of %s: %w", b.ID, err)
			}
			rows = append(rows, found...)
		}
		rows = append(rows, layout.Key(layout.RunPK(b.ID, run), layout.SKRun))
	}
	if err := s.extendTTL(ctx, rows, until); err != nil {
		return fmt.Errorf("keep rows of %s: %w", b.ID, err)
	}
	return nil
}

// extendTTL sets the TTL of each existing row at keys to until where it is
// earlier or unset, 16 writes at a time; a row that is gone or already
// kept longer is left as it is.
func (s *Store) extendTTL(ctx context.Context, keys []map[string]types.AttributeValue, until time.Time) error {
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
	for _, k := range keys {
		g.Go(func() error {
			_, _, err := s.updateRow(gctx, k, expr, types.ReturnValueNone)
			if err != nil && !errors.Is(err, api.ErrConflict) {
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

// Unpublished queries the PUBLISH markers (every page).
func (s *Store) Unpublished(ctx context.Context) ([]ledger.RunRef, error) {
	sks, err := s.markerKeys(ctx, layout.PKPublish)
	if err != nil {
		return nil, fmt.Errorf("unpublished runs: %w", err)
	}
	var refs []ledger.RunRef
	for _, sk := range sks {
		if ref, ok := layout.PublishMarkerFrom(sk); ok {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// SetPublished sets published_run = :run on the batch row under the
// condition attribute_exists(pk) AND (attribute_not_exists(published_run)
// OR published_run < :run) (a lost condition is no error), then deletes
// the run's PUBLISH marker.
func (s *Store) SetPublished(ctx context.Context, id string, run int) error {
	pr := expression.Name(layout.AttrPublishedRun)
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(expression.AttributeExists(expression.Name(config.AttrPK)),
			expression.Or(expression.AttributeNotExists(pr), pr.LessThan(expression.Value(run))))).
		WithUpdate(expression.Set(pr, expression.Value(run))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(id), layout.SKBatch), expr, types.ReturnValueNone); err != nil && !errors.Is(err, api.ErrConflict) {
		return fmt.Errorf("set published %s run %d: %w", id, run, err)
	}
	c, cancel := s.ctx(ctx)
	defer cancel()
	if _, err := s.db.DeleteItem(c, &dynamodb.DeleteItemInput{TableName: &s.table, Key: layout.Key(layout.PKPublish, layout.PublishSK(id, run))}); err != nil {
		return fmt.Errorf("set published %s run %d: %w", id, run, err)
	}
	return nil
}

// SetTaskGone sets task_gone = true on the batch row under the condition
// attribute_exists(pk) (a missing batch is no error).
func (s *Store) SetTaskGone(ctx context.Context, id string) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.AttributeExists(expression.Name(config.AttrPK))).
		WithUpdate(expression.Set(expression.Name(layout.AttrTaskGone), expression.Value(true))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(id), layout.SKBatch), expr, types.ReturnValueNone); err != nil && !errors.Is(err, api.ErrConflict) {
		return fmt.Errorf("set task gone %s: %w", id, err)
	}
	return nil
}

// ExpiredMarkers returns up to limit retention markers whose expiry is at
// or before now, oldest first: Query pk = RETENTION AND sk < {now_ms+1:020}.
// A marker whose sort key is not "{20 digits}#{batch id}" comes back with
// Malformed set.
func (s *Store) ExpiredMarkers(ctx context.Context, now time.Time, limit int) ([]ledger.RetentionMarker, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.Query(c, &dynamodb.QueryInput{
		TableName:                &s.table,
		KeyConditionExpression:   aws.String("#p = :p AND #s < :s"),
		ExpressionAttributeNames: map[string]string{"#p": config.AttrPK, "#s": config.AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":p": &types.AttributeValueMemberS{Value: layout.PKRetention},
			":s": &types.AttributeValueMemberS{Value: fmt.Sprintf("%020d", now.UnixMilli()+1)},
		},
		Limit: aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("expired markers: %w", err)
	}
	markers := make([]ledger.RetentionMarker, 0, len(out.Items))
	for _, av := range out.Items {
		markers = append(markers, layout.RetentionMarkerFrom(av))
	}
	return markers, nil
}

// DeleteMarker deletes the retention marker whose sort key is markerKey.
func (s *Store) DeleteMarker(ctx context.Context, markerKey string) error {
	c, cancel := s.ctx(ctx)
	defer cancel()
	if _, err := s.db.DeleteItem(c, &dynamodb.DeleteItemInput{TableName: &s.table, Key: layout.Key(layout.PKRetention, markerKey)}); err != nil {
		return fmt.Errorf("delete retention marker %q: %w", markerKey, err)
	}
	return nil
}

// MarkForgetting flags a finished batch as being forgotten, under the
// condition status <> running (and <> submitting), created_at_ms = the
// batch read (m.CreatedAt, when set) and, with m.Quiet, no other mark
// within it (forgetting_at_ms absent or < m.Now − m.Quiet); it sets
// forgetting and forgetting_at_ms = m.Now. From then on StartRun refuses
// it. Errors: api.ErrNotFound without a row or for another batch of the
// id, api.ErrConflict while a run is going, ledger.ErrForgetGoing for a
// mark within m.Quiet.
func (s *Store) MarkForgetting(ctx context.Context, m ledger.ForgetMark) error {
	cond := expression.And(
		expression.AttributeExists(expression.Name(config.AttrPK)),
		expression.Name(layout.AttrStatus).NotEqual(expression.Value(string(api.StatusRunning))),
		expression.Name(layout.AttrStatus).NotEqual(expression.Value(string(api.StatusSubmitting))))
	if !m.CreatedAt.IsZero() {
		cond = cond.And(expression.Name(layout.AttrCreatedAtMs).Equal(expression.Value(m.CreatedAt.UnixMilli())))
	}
	if m.Quiet > 0 {
		cond = cond.And(expression.Or(
			expression.AttributeNotExists(expression.Name(layout.AttrForgettingAtMs)),
			expression.Name(layout.AttrForgettingAtMs).LessThan(expression.Value(m.Now.Add(-m.Quiet).UnixMilli()))))
	}
	u := expression.Set(expression.Name(layout.AttrForgetting), expression.Value(true)).
		Set(expression.Name(layout.AttrForgettingAtMs), expression.Value(m.Now.UnixMilli()))
	if m.Token != "" {
		u = u.Set(expression.Name(layout.AttrForgettingBy), expression.Value(m.Token))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	_, old, err := s.updateRow(ctx, layout.Key(layout.BatchPK(m.BatchID), layout.SKBatch), expr, types.ReturnValueNone)
	if !errors.Is(err, api.ErrConflict) {
		if err != nil {
			return fmt.Errorf("forget %s: %w", m.BatchID, err)
		}
		return nil
	}
	var row layout.BatchRow
	if len(old) == 0 || attributevalue.UnmarshalMap(old, &row) != nil {
		return fmt.Errorf("batch %s: %w", m.BatchID, api.ErrNotFound)
	}
	switch {
	case !m.CreatedAt.IsZero() && row.CreatedAtMs != m.CreatedAt.UnixMilli():
		return fmt.Errorf("batch %s (created %s): submitted again since: %w", m.BatchID, m.CreatedAt.Format(time.RFC3339), api.ErrNotFound)
	case m.Token != "" && row.ForgettingBy == m.Token && row.ForgettingAtMs == m.Now.UnixMilli():
		return nil // this mark, sent again by the SDK after its answer was lost
	case row.Status == string(api.StatusRunning) || row.Status == string(api.StatusSubmitting):
		return fmt.Errorf("forget %s: a run is going: %w", m.BatchID, err)
	}
	return fmt.Errorf("forget %s: marked by another forget at %s: %w", m.BatchID, layout.FromMs(row.ForgettingAtMs).Format(time.RFC3339), ledger.ErrForgetGoing)
}
