package dynamo

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/itemexpr"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// batchesEpoch is the first month of the batches index: a listing walks
// back month by month to it (or to `since`). Batch rows created before it
// do not carry the index's keys and are not listed.
var batchesEpoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// Bounds of one ListBatches call: it reads at most this many months and
// examines at most this many index entries, then answers with what it
// found and the position to continue from.
const (
	listMonthsPerCall  = 24
	listEntriesPerCall = 5_000
)

// positionRE is a listing position: a sort key, or a month's start in
// epoch ms (the listing continues below it).
var positionRE = regexp.MustCompile(`^[0-9]{13}(#[A-Za-z0-9_-]{1,128})?$`)

// pages is one sorted source of a k-way merge: rows read a page at a
// time by read, which returns the next page and whether it was the last.
type pages[T any] struct {
	page []T
	done bool
	read func(ctx context.Context) ([]T, bool, error)
}

// fill reads pages until it holds a row or the source is done.
func (p *pages[T]) fill(ctx context.Context) error {
	for len(p.page) == 0 && !p.done {
		page, last, err := p.read(ctx)
		if err != nil {
			return err
		}
		p.page, p.done = page, last
	}
	return nil
}

// merge calls fn with the rows of every source in the order of before (a
// row goes before b), each source being in that order already; it holds
// one page per source. fn returning false stops the merge; fn's or a
// read's error stops it and is returned. ScanItems merges item shards in
// key order with it, ListBatches the batches index shards newest first.
func merge[T any](ctx context.Context, srcs []*pages[T], before func(a, b T) bool, fn func(T) (bool, error)) error {
	h := &pagesHeap[T]{before: before}
	for _, p := range srcs {
		if err := p.fill(ctx); err != nil {
			return err
		}
		if len(p.page) > 0 {
			h.srcs = append(h.srcs, p)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		p := h.srcs[0]
		row := p.page[0]
		p.page = p.page[1:]
		if err := p.fill(ctx); err != nil {
			return err
		}
		if len(p.page) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
		if more, err := fn(row); err != nil || !more {
			return err
		}
	}
	return nil
}

// pagesHeap orders sources by their next row.
type pagesHeap[T any] struct {
	srcs   []*pages[T]
	before func(a, b T) bool
}

func (h *pagesHeap[T]) Len() int           { return len(h.srcs) }
func (h *pagesHeap[T]) Less(i, j int) bool { return h.before(h.srcs[i].page[0], h.srcs[j].page[0]) }
func (h *pagesHeap[T]) Swap(i, j int)      { h.srcs[i], h.srcs[j] = h.srcs[j], h.srcs[i] }
func (h *pagesHeap[T]) Push(x any)         { h.srcs = append(h.srcs, x.(*pages[T])) }
func (h *pagesHeap[T]) Pop() any {
	x := h.srcs[len(h.srcs)-1]
	h.srcs = h.srcs[:len(h.srcs)-1]
	return x
}

// shardPages pages through one item shard (ITEM#{id}#{shard}) in key
// order, every page of it, eventually consistent.
func (s *Store) shardPages(batchID string, shard int) *pages[ledger.Item] {
	pk := layout.ItemPK(batchID, shard)
	var next map[string]types.AttributeValue
	return &pages[ledger.Item]{read: func(ctx context.Context) ([]ledger.Item, bool, error) {
		c, cancel := s.ctx(ctx)
		out, err := s.db.Query(c, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": config.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: pk}},
			ExclusiveStartKey:         next,
		})
		cancel()
		if err != nil {
			return nil, false, fmt.Errorf("query %s: %w", pk, err)
		}
		page := make([]ledger.Item, 0, len(out.Items))
		for _, av := range out.Items {
			item, err := layout.ItemFrom(batchID, av)
			if err != nil {
				return nil, false, err
			}
			page = append(page, item)
		}
		next = out.LastEvaluatedKey
		return page, len(next) == 0, nil
	}}
}

// ScanItems merges the batch's item shards (one Query each on the table,
// pk ITEM#{id}#{shard}, whose sort key is the item key) in key byte order.
// The pages are read eventually consistent (half the read units): a row
// read as in_flight or released is re-read with a strongly consistent
// GetItem before fn sees it (those are the rows whose next write decides a
// run's end).
func (s *Store) ScanItems(ctx context.Context, batchID string, listShards int, fn func(ledger.Item) error) error {
	shards := max(1, listShards)
	srcs := make([]*pages[ledger.Item], shards)
	for i := range srcs {
		srcs[i] = s.shardPages(batchID, i)
	}
	var fnErr error
	err := merge(ctx, srcs, func(a, b ledger.Item) bool { return a.Key < b.Key }, func(item ledger.Item) (bool, error) {
		if item.Outcome == api.OutcomeInFlight || item.Released {
			fresh, err := s.getItem(ctx, batchID, shards, item.Key)
			if err != nil {
				fnErr = err
				return false, err
			}
			item = fresh
		}
		if err := fn(item); err != nil {
			fnErr = err
			return false, err
		}
		return true, nil
	})
	if err != nil && err != fnErr {
		return fmt.Errorf("scan items %s: %w", batchID, err)
	}
	return err
}

// ListItems returns up to limit items of outcome in key byte order after
// the key after (exclusive; "" from the start), and the key to continue
// after ("" when there are no more). failed, quarantined and held items
// (and every one of them, for api.NeedsAttention) come
// from the sparse attention index (item rows) and the attention entries
// of pack items (the ATTN partitions, one per item shard), so successes
// are never read; every pack item's entry is confirmed against its pack
// row (one BatchGetItem for the page's packs) and left out when the pack
// no longer holds the item in that outcome (see WritePack), so a page may
// hold fewer than limit items with a key to continue after. in_flight
// items come from the table's item shards with a filter (DynamoDB reads
// and discards the other rows of the page). Each shard is queried for at
// most limit rows per call.
func (s *Store) ListItems(ctx context.Context, batchID string, listShards int, outcome api.Outcome, after string, limit int) ([]ledger.Item, string, error) {
	type source struct {
		index        *string
		pkAttr, skAt string
		pkOf         func(shard int) string
	}
	var sources []source
	switch {
	case outcome == api.OutcomeFailed || outcome == api.OutcomeQuarantined || outcome.Held() || outcome == api.NeedsAttention:
		sources = []source{
			{aws.String(config.IndexAttention), config.AttrAttentionPK, config.AttrAttentionSK, func(shard int) string { return layout.ShardKey(batchID, shard) }},
			{nil, config.AttrPK, config.AttrSK, func(shard int) string { return layout.AttentionPK(batchID, shard) }},
		}
	case outcome == api.OutcomeInFlight:
		sources = []source{{nil, config.AttrPK, config.AttrSK, func(shard int) string { return layout.ItemPK(batchID, shard) }}}
	default:
		return nil, "", fmt.Errorf("list items: outcome %q is not failed, quarantined, held or in_flight: %w", outcome, api.ErrInvalid)
	}
	filter := expression.Name(layout.AttrOutcome).Equal(expression.Value(string(outcome)))
	if outcome == api.NeedsAttention {
		filter = expression.In(expression.Name(layout.AttrOutcome), expression.Value(string(api.OutcomeFailed)),
			append([]expression.OperandBuilder{expression.Value(string(api.OutcomeQuarantined))}, itemexpr.HeldValues()...)...)
	}
	var all []listed
	seen := map[string]bool{} // an entry of format 0–1 is in the index and its partition
	more := false             // a shard stopped reading with rows left
	for shard := range max(1, listShards) {
		for _, src := range sources {
			kc := expression.Key(src.pkAttr).Equal(expression.Value(src.pkOf(shard)))
			if after != "" {
				kc = kc.And(expression.Key(src.skAt).GreaterThan(expression.Value(after)))
			}
			expr, err := expression.NewBuilder().WithKeyCondition(kc).WithFilter(filter).Build()
			if err != nil {
				return nil, "", err
			}
			var start map[string]types.AttributeValue
			got := 0
			for got < limit {
				c, cancel := s.ctx(ctx)
				out, err := s.db.Query(c, &dynamodb.QueryInput{
					TableName: &s.table, IndexName: src.index,
					KeyConditionExpression: expr.KeyCondition(), FilterExpression: expr.Filter(),
					ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
					ExclusiveStartKey: start, Limit: aws.Int32(int32(min(limit*4, 1000))),
				})
				cancel()
				if err != nil {
					return nil, "", fmt.Errorf("list items %s: %w", batchID, err)
				}
				for _, av := range out.Items {
					it, err := layout.ItemFrom(batchID, av)
					if err != nil {
						return nil, "", err
					}
					got++
					if seen[it.Key] {
						continue
					}
					seen[it.Key] = true
					l := listed{item: it}
					if pk, _ := av[config.AttrPK].(*types.AttributeValueMemberS); pk != nil && strings.HasPrefix(pk.Value, "ATTN#") {
						var loc struct {
							First int64 `dynamodbav:"pack_first"`
							Index int   `dynamodbav:"pack_index"`
						}
						if err := attributevalue.UnmarshalMap(av, &loc); err != nil {
							return nil, "", fmt.Errorf("list items %s: %w", batchID, err)
						}
						l.packed, l.first, l.index = true, loc.First, loc.Index
					}
					all = append(all, l)
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
	}
	slices.SortFunc(all, func(a, b listed) int { return cmp.Compare(a.item.Key, b.item.Key) })
	next := ""
	switch {
	case len(all) > limit:
		all = all[:limit]
		next = all[limit-1].item.Key
	case more && len(all) > 0:
		next = all[len(all)-1].item.Key
	}
	items, err := s.confirmPacked(ctx, batchID, listShards, outcome, all)
	return items, next, err
}

// listed is one row ListItems found: an item row, or a pack item's
// attention entry and where its pack is.
type listed struct {
	item   ledger.Item
	packed bool
	first  int64
	index  int
}

// confirmPacked returns the items of ls in order, each pack item's as its
// pack row holds it (read with one consistent BatchGetItem per 100
// packs), left out when the pack does not hold it in outcome.
func (s *Store) confirmPacked(ctx context.Context, batchID string, listShards int, outcome api.Outcome, ls []listed) ([]ledger.Item, error) {
	packs := map[int64]*ledger.Pack{}
	var keys []map[string]types.AttributeValue
	for _, l := range ls {
		if l.packed && packs[l.first] == nil {
			packs[l.first] = &ledger.Pack{}
			keys = append(keys, layout.PackKey(ledger.PackRef{BatchID: batchID, ListShards: listShards, First: l.first}))
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 100)
		pending := map[string]types.KeysAndAttributes{s.table: {Keys: keys[:n], ConsistentRead: aws.Bool(true)}}
		keys = keys[n:]
		for try := 0; len(pending) > 0; try++ {
			if try == MaxDeleteTries {
				return nil, fmt.Errorf("list items %s: packs left unread", batchID)
			}
			c, cancel := s.ctx(ctx)
			out, err := s.db.BatchGetItem(c, &dynamodb.BatchGetItemInput{RequestItems: pending})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("list items %s: %w", batchID, err)
			}
			for _, av := range out.Responses[s.table] {
				p, err := layout.PackFrom(batchID, av)
				if err != nil {
					return nil, err
				}
				if q := packs[p.First]; q != nil {
					*q = p
				}
			}
			pending = out.UnprocessedKeys
		}
	}
	items := make([]ledger.Item, 0, len(ls))
	for _, l := range ls {
		if !l.packed {
			items = append(items, l.item)
			continue
		}
		p := packs[l.first]
		if l.index < len(p.Items) && p.Items[l.index].Key == l.item.Key && ledger.ListedAs(p.Items[l.index].Outcome, outcome) {
			it := p.Item(l.index)
			it.LeaseUntil = time.Time{} // not in flight: as an item row of that outcome reads
			if it.Error == "" && it.Run == l.item.Run {
				it.Error = l.item.Error // left to the attention row (packerrors.go)
			}
			items = append(items, it)
		}
	}
	if len(items) == 0 {
		items = nil
	}
	return items, nil
}

// shardQuery is the table query of one shard of a batch's items after
// the item key after ("" from the first), at most limit rows: key
// condition pk = ITEM#{batch}#{shard} AND sk > :after. It is the one place
// that knows how a shard's items are keyed for listing.
func (s *Store) shardQuery(batchID string, shard int, after string, limit int) *dynamodb.QueryInput {
	cond := "#p = :p"
	names := map[string]string{"#p": config.AttrPK}
	values := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: layout.ItemPK(batchID, shard)}}
	if after != "" {
		cond += " AND #s > :s"
		names["#s"] = config.AttrSK
		values[":s"] = &types.AttributeValueMemberS{Value: after}
	}
	return &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		Limit:                     aws.Int32(int32(limit)),
	}
}

// ScanShard reads up to limit item rows (1–1,000; DynamoDB also ends a
// page at 1 MB) of item shard `shard` of the batch whose keys sort after
// `after` (exclusive; "" from the first), in key byte order, with one
// eventually consistent Query of the table (ITEM#{batch}#{shard}). more is false once the
// shard holds nothing past the last row returned. A row read as in flight
// or released is re-read from the table with a strongly consistent
// GetItem, as ScanItems does. Memory: the rows returned, whatever the
// shard's size.
func (s *Store) ScanShard(ctx context.Context, batchID string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	limit = min(max(limit, 1), 1000)
	c, cancel := s.ctx(ctx)
	out, err := s.db.Query(c, s.shardQuery(batchID, shard, after, limit))
	cancel()
	if err != nil {
		return nil, false, fmt.Errorf("scan shard %d of %s: %w", shard, batchID, err)
	}
	items := make([]ledger.Item, 0, len(out.Items))
	for _, av := range out.Items {
		it, err := layout.ItemFrom(batchID, av)
		if err != nil {
			return nil, false, fmt.Errorf("scan shard %d of %s: %w", shard, batchID, err)
		}
		if it.Outcome == api.OutcomeInFlight || it.Released {
			if it, err = s.getItemAt(ctx, batchID, shard, it.Key); err != nil {
				return nil, false, err
			}
		}
		items = append(items, it)
	}
	// A page cut by Limit or by the 1 MB cap carries LastEvaluatedKey even
	// when nothing follows; the next call then returns no rows and more
	// false.
	return items, len(out.LastEvaluatedKey) > 0, nil
}

// ListBatches walks the batches index newest month first, merging each
// month's layout.BatchesShards shards newest first (see ledger.Store); with
// q.Source, the one partition of the sources index that holds the
// batches of that source. The position it returns is the sort key of the
// last entry it examined, or the start of the last month it read when it
// stopped between months.
func (s *Store) ListBatches(ctx context.Context, q ledger.BatchQuery) ([]ledger.Batch, string, error) {
	if q.Limit < 1 {
		return nil, "", &api.InputError{Field: "limit", Reason: fmt.Sprintf("%d: want at least 1", q.Limit)}
	}
	if q.Source != "" {
		return s.listSource(ctx, q)
	}
	upper := q.Before
	// A month's entries may be stamped a little after Now by another
	// function's clock: start an hour ahead.
	m := layout.Month(q.Now.Add(time.Hour))
	if upper != "" {
		if !positionRE.MatchString(upper) {
			return nil, "", &api.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
		}
		ms, _ := strconv.ParseInt(upper[:13], 10, 64)
		if !strings.Contains(upper, "#") {
			ms-- // the start of a month already read: continue in the one before
		}
		m = layout.Month(time.UnixMilli(ms))
	}
	floor := batchesEpoch
	lower := ""
	if !q.Since.IsZero() {
		lower = layout.MsKey(q.Since)
		if sm := layout.Month(q.Since); sm.After(floor) {
			floor = sm
		}
	}
	var out []ledger.Batch
	examined := 0
	for months := 0; !m.Before(floor); months++ {
		if months == listMonthsPerCall {
			return out, layout.MsKey(m.AddDate(0, 1, 0)), nil
		}
		srcs := make([]*pages[batchesEntry], layout.BatchesShards)
		for shard := range srcs {
			srcs[shard] = s.batchesPages(layout.BatchesPKOf(m, shard), upper, lower, min(max(q.Limit/2, 25), 250))
		}
		pos := ""
		err := merge(ctx, srcs, func(a, b batchesEntry) bool { return a.sk > b.sk }, func(e batchesEntry) (bool, error) {
			examined++
			if !e.b.Expired(q.Now) && (len(q.Statuses) == 0 || slices.Contains(q.Statuses, e.b.Status)) {
				out = append(out, e.b)
			}
			if len(out) == q.Limit || examined == listEntriesPerCall {
				pos = e.sk
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return nil, "", err
		}
		if pos != "" {
			return out, pos, nil
		}
		upper = ""
		m = m.AddDate(0, -1, 0)
	}
	return out, "", nil
}

// listSource lists the batches of q.Source from the sources index (one
// partition, newest first), as ListBatches does the batches index: at
// most listEntriesPerCall entries examined per call.
func (s *Store) listSource(ctx context.Context, q ledger.BatchQuery) ([]ledger.Batch, string, error) {
	pk := layout.SourcesPK(q.Source)
	if pk == "" {
		return nil, "", nil // only S3 sources are indexed
	}
	if q.Before != "" && (!positionRE.MatchString(q.Before) || !strings.Contains(q.Before, "#")) {
		return nil, "", &api.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
	}
	lower := ""
	if !q.Since.IsZero() {
		lower = layout.MsKey(q.Since)
	}
	src := s.indexPages(config.IndexSources, config.AttrSourcesPK, pk, q.Before, lower, min(max(q.Limit, 25), 250))
	var out []ledger.Batch
	examined, pos := 0, ""
	err := merge(ctx, []*pages[batchesEntry]{src}, func(a, b batchesEntry) bool { return a.sk > b.sk }, func(e batchesEntry) (bool, error) {
		examined++
		if !e.b.Expired(q.Now) && (len(q.Statuses) == 0 || slices.Contains(q.Statuses, e.b.Status)) {
			out = append(out, e.b)
		}
		if len(out) == q.Limit || examined == listEntriesPerCall {
			pos = e.sk
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, pos, nil
}

type batchesEntry struct {
	sk string
	b  ledger.Batch
}

// batchesPages pages through one shard of one month of the batches
// index, newest first, below upper and at or above lower (each "" for no
// bound), size entries a page.
func (s *Store) batchesPages(pk, upper, lower string, size int) *pages[batchesEntry] {
	return s.indexPages(config.IndexBatches, config.AttrBatchesPK, pk, upper, lower, size)
}

// indexPages pages through partition pk (attribute pkAttr) of a GSI
// keyed by AttrBatchesSK (the batches or the sources index), newest
// first, below upper and at or above lower (each "" for no bound), size
// entries a page.
func (s *Store) indexPages(index, pkAttr, pk, upper, lower string, size int) *pages[batchesEntry] {
	var next map[string]types.AttributeValue
	p := &pages[batchesEntry]{done: upper != "" && lower != "" && lower >= upper}
	p.read = func(ctx context.Context) ([]batchesEntry, bool, error) {
		cond := "#p = :p"
		vals := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: pk}}
		switch {
		case upper != "" && lower != "":
			// BETWEEN is inclusive: the entry at upper (the previous page's
			// last) is skipped below.
			cond += " AND #k BETWEEN :lo AND :up"
		case upper != "":
			cond += " AND #k < :up"
		case lower != "":
			cond += " AND #k >= :lo"
		}
		names := map[string]string{"#p": pkAttr}
		if upper != "" || lower != "" {
			names["#k"] = config.AttrBatchesSK
		}
		if upper != "" {
			vals[":up"] = &types.AttributeValueMemberS{Value: upper}
		}
		if lower != "" {
			vals[":lo"] = &types.AttributeValueMemberS{Value: lower}
		}
		c, cancel := s.ctx(ctx)
		out, err := s.db.Query(c, &dynamodb.QueryInput{
			TableName: &s.table, IndexName: aws.String(index),
			KeyConditionExpression:    aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(int32(size)),
			ExclusiveStartKey:         next,
		})
		cancel()
		if err != nil {
			return nil, false, fmt.Errorf("list batches %s: %w", pk, err)
		}
		page := make([]batchesEntry, 0, len(out.Items))
		for _, av := range out.Items {
			var r layout.BatchRow
			if err := attributevalue.UnmarshalMap(av, &r); err != nil {
				return nil, false, fmt.Errorf("list batches %s: %w", pk, err)
			}
			if r.BatchesSK == upper {
				continue
			}
			b, err := layout.FromBatchRow(r)
			if err != nil {
				return nil, false, fmt.Errorf("list batches %s: %w", pk, err)
			}
			page = append(page, batchesEntry{sk: r.BatchesSK, b: b})
		}
		next = out.LastEvaluatedKey
		return page, len(next) == 0, nil
	}
	return p
}
