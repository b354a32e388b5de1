package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// GetPack reads a pack row with a strongly consistent read.
func (s *Store) GetPack(ctx context.Context, ref ledger.PackRef) (ledger.Pack, error) {
	return s.getPackAt(ctx, ref.BatchID, layout.Key(layout.PackPK(ref.BatchID, ledger.PackShard(ref.First, ref.ListShards)), ledger.PackSK(ref.First)))
}

func (s *Store) getPackAt(ctx context.Context, batchID string, k map[string]types.AttributeValue) (ledger.Pack, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return ledger.Pack{}, fmt.Errorf("get pack of %s: %w", batchID, err)
	}
	if len(out.Item) == 0 {
		return ledger.Pack{}, fmt.Errorf("pack of %s: %w", batchID, api.ErrNotFound)
	}
	return layout.PackFrom(batchID, out.Item)
}

// WritePack takes or writes a pack row (see ledger.PackWrite) with one
// UpdateItem:
//
//	take, no row read:  attribute_not_exists(pk)
//	take:               attempt = :seen AND lease_until_ms < :now
//	                    SET attempt = :seen + 1, run = :run
//	fenced:             attempt = :attempt
//	every write:        SET lease_until_ms = :lease, updated_at_ms, expires_at,
//	                    i{j} = :item (REMOVE i{j} for an item written empty)
//
// An item that enters failed, quarantined or a held outcome gets its attention entry (pk
// ATTN#{id}#{shard of its key}, sk its key, with the item row's attributes
// and where its pack is; no index entry), put before the pack's write
// with BatchWriteItem, so that every failed or quarantined pack item has
// one; an item that leaves them loses it after the pack's write. No
// transaction: a transactional write costs twice the units of each row it
// writes (DynamoDB developer guide, "Capacity and throughput for
// transactions"), which made a failed pack item cost ≈ 4 write units; an
// entry now costs one (with an error text under ≈ 800 bytes). An entry
// can thus say more than its pack (the pack's write after it was fenced
// or never made, a delete lost): ListItems confirms every entry against
// its pack row and leaves out those the pack does not hold, and release
// is conditioned on the pack. An item that enters failed or quarantined
// keeps its error text on the entry alone, not in the pack row
// (packerrors.go).
func (s *Store) WritePack(ctx context.Context, w ledger.PackWrite) error {
	var puts []types.WriteRequest
	var gone []map[string]types.AttributeValue
	for _, iw := range w.Items {
		switch attentionChange(iw) {
		case 1:
			put, err := s.attentionPut(w, iw)
			if err != nil {
				return err
			}
			puts = append(puts, put)
		case -1:
			gone = append(gone, layout.Key(layout.AttentionPK(w.Ref.BatchID, ledger.Shard(iw.Item.Key, w.Ref.ListShards)), iw.Item.Key))
		}
	}
	if len(puts) > 0 && w.Effects != nil && w.Effects.Len() > 0 {
		return fmt.Errorf("write pack %s/%d: staged writes are committed only with one succeeded item", w.Ref.BatchID, w.Ref.First)
	}
	for len(puts) > 0 {
		n := min(len(puts), 25)
		if err := s.batchWrite(ctx, puts[:n]); err != nil {
			return fmt.Errorf("write pack %s/%d: attention entries: %w", w.Ref.BatchID, w.Ref.First, err)
		}
		puts = puts[n:]
	}
	if err := s.writePack(ctx, w, true); err != nil {
		return err
	}
	// The pack is written; an entry left behind by a failed delete is
	// stale, which listings leave out (the pack no longer confirms it).
	for len(gone) > 0 {
		n := min(len(gone), 25)
		_ = s.deleteKeys(ctx, gone[:n])
		gone = gone[n:]
	}
	return nil
}

// attentionChange is +1 when the write puts the item's attention row, -1
// when it deletes it, 0 when it leaves it.
func attentionChange(iw ledger.PackItemWrite) int {
	had := iw.Was == api.OutcomeFailed || iw.Was == api.OutcomeQuarantined || iw.Was.Held()
	switch {
	case iw.Item.Outcome != "" && iw.Item.Attention() && iw.Item.Outcome != iw.Was:
		return 1
	case !iw.Item.Attention() && had:
		return -1
	}
	return 0
}

func (s *Store) writePack(ctx context.Context, w ledger.PackWrite, first bool) error {
	var cond expression.ConditionBuilder
	u := expression.Set(expression.Name(layout.AttrLeaseUntilMs), expression.Value(layout.Ms(w.LeaseUntil))).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(w.Now.UnixMilli()))
	switch {
	case w.Take && w.Attempt == 0:
		cond = expression.AttributeNotExists(expression.Name(config.AttrPK))
	case w.Take:
		cond = expression.And(expression.Name(layout.AttrAttempt).Equal(expression.Value(w.Attempt)),
			expression.Name(layout.AttrLeaseUntilMs).LessThan(expression.Value(w.Now.UnixMilli())))
	default:
		cond = expression.Name(layout.AttrAttempt).Equal(expression.Value(w.Attempt))
	}
	if w.Take {
		u = u.Set(expression.Name(layout.AttrAttempt), expression.Value(w.Attempt+1)).
			Set(expression.Name(layout.AttrRun), expression.Value(w.Run))
		if w.Token != "" {
			u = u.Set(expression.Name(layout.AttrTakeToken), expression.Value(w.Token))
		}
	}
	if w.InFlight >= 0 {
		u = u.Set(expression.Name(layout.AttrPackInFlight), expression.Value(w.InFlight))
	}
	if first && w.Take && w.Attempt == 0 {
		n := 0
		for _, iw := range w.Items {
			n = max(n, iw.Index+1)
		}
		u = u.Set(expression.Name(layout.AttrPackItems), expression.Value(n))
	}
	for _, iw := range w.Items {
		if iw.Index < 0 || iw.Index >= ledger.MaxItemsPerMessage {
			return fmt.Errorf("write pack %s/%d: item index %d", w.Ref.BatchID, w.Ref.First, iw.Index)
		}
		name := expression.Name(layout.PackItemAttr(iw.Index))
		if iw.Item.Outcome == "" {
			u = u.Remove(name)
		} else {
			row := layout.ToPackItemRow(iw.Item)
			if errorOnAttentionRow(iw) {
				row.Error = "" // on its attention row, put before this write (packerrors.go)
			}
			av, err := attributevalue.Marshal(row)
			if err != nil {
				return fmt.Errorf("write pack %s/%d: %w", w.Ref.BatchID, w.Ref.First, err)
			}
			u = u.Set(name, expression.Value(av))
		}
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, w.Now)).Build()
	if err != nil {
		return err
	}
	k := layout.PackKey(w.Ref)
	switch {
	case w.Effects != nil && w.Effects.Len() > 0:
		wr, ok := w.Effects.(stagedWrites)
		if !ok || len(w.Items) != 1 || w.Items[0].Item.Outcome != api.OutcomeSucceeded {
			return fmt.Errorf("write pack %s/%d: staged writes of type %T are committed only with one succeeded item", w.Ref.BatchID, w.Ref.First, w.Effects)
		}
		it := w.Items[0].Item
		_, err = s.recordWithEffects(ctx, ledger.Record{BatchID: w.Ref.BatchID, Key: it.Key, Run: w.Run, Attempt: w.Attempt, Now: w.Now}, k, expr, wr.TransactWriteItems())
	default:
		var stored map[string]types.AttributeValue
		_, stored, err = s.updateRow(ctx, k, expr, types.ReturnValueNone)
		if errors.Is(err, api.ErrConflict) && len(stored) > 0 {
			// The row as stored, sent back with the refusal
			// (ReturnValuesOnConditionCheckFailure ALL_OLD): the holder
			// plans again from it without a read.
			err = fmt.Errorf("write pack %s/%d attempt %d: %w", w.Ref.BatchID, w.Ref.First, w.Attempt, err)
			if p, perr := layout.PackFrom(w.Ref.BatchID, stored); perr == nil {
				if ledger.TakenBefore(w, p) {
					return nil // this take, sent again after its answer was lost
				}
				return &ledger.PackConflict{Pack: p, Err: err}
			}
			return err
		}
	}
	if errors.Is(err, api.ErrConflict) {
		return fmt.Errorf("write pack %s/%d attempt %d: %w", w.Ref.BatchID, w.Ref.First, w.Attempt, err)
	}
	var ee *ledger.EffectsError
	if err != nil && !errors.As(err, &ee) {
		return fmt.Errorf("write pack %s/%d attempt %d: %w", w.Ref.BatchID, w.Ref.First, w.Attempt, err)
	}
	return err
}

// attentionPut is the put of the attention row of pack item iw: the item
// row's attributes (layout.ItemRow's names, so that ListItems reads it as it
// reads an item row) and where its pack is. (Rows of format versions 0
// and 1 also carry apk/ask, an attention index entry.)
func (s *Store) attentionPut(w ledger.PackWrite, iw ledger.PackItemWrite) (types.WriteRequest, error) {
	it := iw.Item
	shard := ledger.Shard(it.Key, w.Ref.ListShards)
	row := map[string]any{
		config.AttrPK: layout.AttentionPK(w.Ref.BatchID, shard), config.AttrSK: it.Key,
		layout.AttrRun: it.Run, layout.AttrOutcome: string(it.Outcome), layout.AttrAttempt: it.Attempt, layout.AttrFirstAttempt: it.FirstAttempt,
		layout.AttrUpdatedAtMs: layout.Ms(it.UpdatedAt), layout.AttrPackFirst: w.Ref.First, layout.AttrPackIndex: iw.Index,
		layout.AttrFormat: ledger.FormatVersion,
	}
	if it.Error != "" {
		row[layout.AttrError] = ledger.CutError(it.Error)
	}
	if it.Reason != "" {
		row[layout.AttrReason] = string(it.Reason)
	}
	if len(it.Cost) > 0 {
		row[layout.AttrCost] = map[string]float64(it.Cost)
	}
	if len(it.Spent) > 0 {
		row[layout.AttrSpent], row[layout.AttrSpentRun] = map[string]float64(it.Spent), it.SpentRun
	}
	if it.Released {
		row[layout.AttrReleased] = true
	}
	if it.Outcome.Held() {
		row[layout.AttrHoldSinceMs] = layout.Ms(it.Hold.Since)
		if it.Hold.Subject != "" {
			row[layout.AttrHoldSubject] = it.Hold.Subject
		}
		if !it.Hold.WakeAt.IsZero() {
			row[layout.AttrHoldWakeAtMs] = layout.Ms(it.Hold.WakeAt)
		}
	}
	if s.RowTTL > 0 {
		row[config.AttrExpiresAt] = w.Now.Add(s.RowTTL).Unix()
	}
	av, err := attributevalue.MarshalMap(row)
	if err != nil {
		return types.WriteRequest{}, fmt.Errorf("attention row %s/%s: %w", w.Ref.BatchID, it.Key, err)
	}
	return types.WriteRequest{PutRequest: &types.PutRequest{Item: av}}, nil
}

// releasePackItem releases a quarantined pack item found by its attention
// row: in one transaction, released on the attention row and on the item
// in its pack row, under the condition that the item is quarantined.
// found is false when the item has no attention row.
func (s *Store) releasePackItem(ctx context.Context, batchID string, listShards int, itemKey string) (found bool, err error) {
	ak := layout.Key(layout.AttentionPK(batchID, ledger.Shard(itemKey, listShards)), itemKey)
	c, cancel := s.ctx(ctx)
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: ak, ConsistentRead: aws.Bool(true)})
	cancel()
	if err != nil {
		return false, fmt.Errorf("release %s/%s: %w", batchID, itemKey, err)
	}
	if len(out.Item) == 0 {
		return false, nil
	}
	var loc struct {
		Outcome string `dynamodbav:"outcome"`
		First   int64  `dynamodbav:"pack_first"`
		Index   int    `dynamodbav:"pack_index"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &loc); err != nil {
		return true, fmt.Errorf("release %s/%s: %w", batchID, itemKey, err)
	}
	if loc.Outcome != string(api.OutcomeQuarantined) {
		return true, fmt.Errorf("release %s/%s: not quarantined: %w", batchID, itemKey, api.ErrConflict)
	}
	item := expression.Name(layout.PackItemAttr(loc.Index))
	pexpr, err := expression.NewBuilder().
		WithCondition(expression.And(item.AppendName(expression.Name("k")).Equal(expression.Value(itemKey)),
			item.AppendName(expression.Name("o")).Equal(expression.Value(string(api.OutcomeQuarantined))))).
		WithUpdate(expression.Set(item.AppendName(expression.Name("rel")), expression.Value(true))).Build()
	if err != nil {
		return true, err
	}
	aexpr, err := expression.NewBuilder().
		WithCondition(expression.Name(layout.AttrOutcome).Equal(expression.Value(string(api.OutcomeQuarantined)))).
		WithUpdate(expression.Set(expression.Name(layout.AttrReleased), expression.Value(true))).Build()
	if err != nil {
		return true, err
	}
	update := func(k map[string]types.AttributeValue, e expression.Expression) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{TableName: &s.table, Key: k,
			ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()}}
	}
	_, err = s.transact(ctx, update(layout.PackKey(ledger.PackRef{BatchID: batchID, ListShards: listShards, First: loc.First}), pexpr), update(ak, aexpr))
	switch {
	case errors.Is(err, api.ErrConflict), awsfault.ClassOf("dynamodb", "TransactWriteItems", err) == ledger.FaultConflict:
		// A condition of either row did not hold: the item is not
		// quarantined (any longer). A conflicting writer or throttling
		// past the retryer's tries is no answer on that: unavailable.
		return true, fmt.Errorf("release %s/%s: not quarantined: %w", batchID, itemKey, api.ErrConflict)
	case err != nil:
		return true, fmt.Errorf("release %s/%s: %w", batchID, itemKey, err)
	}
	return true, nil
}

// ScanPacks queries pack partition PACK#{id}#{shard} from the pack that
// holds position after, eventually consistent, and returns its items past
// after in position order (never-reserved items left out). A pack read
// with an item in flight or released is read again with a consistent
// GetItem, as ScanShard does for item rows. A failed or quarantined
// item's error text comes from its attention row (attentionErrors).
func (s *Store) ScanPacks(ctx context.Context, batchID string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	limit = min(max(limit, 1), 1000)
	kc := expression.Key(config.AttrPK).Equal(expression.Value(layout.PackPK(batchID, shard)))
	if after != "" {
		sk, _, _ := strings.Cut(after, ".")
		kc = kc.And(expression.Key(config.AttrSK).GreaterThanEqual(expression.Value(sk)))
	}
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, false, err
	}
	var items []ledger.Item
	var start map[string]types.AttributeValue
	for {
		c, cancel := s.ctx(ctx)
		out, err := s.db.Query(c, &dynamodb.QueryInput{
			TableName: &s.table, KeyConditionExpression: expr.KeyCondition(),
			ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
			ExclusiveStartKey: start, Limit: aws.Int32(int32(max(1, limit/10))),
		})
		cancel()
		if err != nil {
			return nil, false, fmt.Errorf("scan packs %s/%d: %w", batchID, shard, err)
		}
		for _, av := range out.Items {
			p, err := layout.PackFrom(batchID, av)
			if err != nil {
				return nil, false, err
			}
			if packUnsettled(p) {
				if p, err = s.getPackAt(ctx, batchID, layout.Key(layout.PackPK(batchID, shard), ledger.PackSK(p.First))); err != nil {
					return nil, false, err
				}
			}
			for j := range p.Items {
				if p.Items[j].Outcome == "" {
					continue
				}
				if it := p.Item(j); it.Pos > after {
					items = append(items, it)
				}
			}
		}
		start = out.LastEvaluatedKey
		if len(start) == 0 || len(items) >= limit {
			if err := s.attentionErrors(ctx, batchID, items); err != nil {
				return nil, false, fmt.Errorf("scan packs %s/%d: %w", batchID, shard, err)
			}
			return items, len(start) > 0, nil
		}
	}
}

// packUnsettled reports a pack with an item in flight or released: the
// rows whose next write decides a run's end.
func packUnsettled(p ledger.Pack) bool {
	for _, it := range p.Items {
		if it.Outcome == api.OutcomeInFlight || it.Released {
			return true
		}
	}
	return false
}

// ListPackItems queries the pack partitions of the batch (one paged
// Query per item shard, eventually consistent) with the filter
//
//	attribute_not_exists(inflight) OR inflight > 0
//
// so that only packs with items in flight come back (a row written before
// the count existed is read as one that may have some), and pages their
// in-flight items in key order. Its memory is the in-flight packs', not
// the batch's.
func (s *Store) ListPackItems(ctx context.Context, batchID string, listShards int, after string, limit int) ([]ledger.Item, string, error) {
	cond := expression.Or(expression.AttributeNotExists(expression.Name(layout.AttrPackInFlight)),
		expression.Name(layout.AttrPackInFlight).GreaterThan(expression.Value(0)))
	var items []ledger.Item
	for shard := range max(1, listShards) {
		expr, err := expression.NewBuilder().WithKeyCondition(expression.Key(config.AttrPK).Equal(expression.Value(layout.PackPK(batchID, shard)))).
			WithFilter(cond).Build()
		if err != nil {
			return nil, "", err
		}
		var start map[string]types.AttributeValue
		for {
			c, cancel := s.ctx(ctx)
			out, err := s.db.Query(c, &dynamodb.QueryInput{
				TableName: &s.table, KeyConditionExpression: expr.KeyCondition(), FilterExpression: expr.Filter(),
				ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ExclusiveStartKey: start,
			})
			cancel()
			if err != nil {
				return nil, "", fmt.Errorf("list pack items %s: %w", batchID, err)
			}
			for _, av := range out.Items {
				p, err := layout.PackFrom(batchID, av)
				if err != nil {
					return nil, "", err
				}
				for j, it := range p.Items {
					if it.Outcome == api.OutcomeInFlight && it.Key > after {
						items = append(items, p.Item(j))
					}
				}
			}
			if start = out.LastEvaluatedKey; len(start) == 0 {
				break
			}
		}
	}
	slices.SortFunc(items, func(a, b ledger.Item) int { return strings.Compare(a.Key, b.Key) })
	if limit > 0 && len(items) > limit {
		items = items[:limit]
		return items, items[len(items)-1].Key, nil
	}
	return items, "", nil
}

// KeepPacks sets the TTL of the pack rows starting at firsts, and of the
// attention rows of the pack items named by attention, to until where it
// is earlier or unset (see KeepRows).
func (s *Store) KeepPacks(ctx context.Context, b ledger.Batch, firsts []int64, attention []string, until time.Time) error {
	keys := make([]map[string]types.AttributeValue, 0, len(firsts)+len(attention))
	for _, f := range firsts {
		keys = append(keys, layout.PackKey(ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: f}))
	}
	for _, k := range attention {
		keys = append(keys, layout.Key(layout.AttentionPK(b.ID, ledger.Shard(k, b.ListShards)), k))
	}
	if err := s.extendTTL(ctx, keys, until); err != nil {
		return fmt.Errorf("keep packs of %s: %w", b.ID, err)
	}
	return nil
}
