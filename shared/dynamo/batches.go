package dynamo

import (
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
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
)

// The batches index (config.IndexBatches) holds one entry per batch row:
//
//	bpk = BATCHES#{yyyy-mm}#{shard}   UTC month of created_at; shard = FNV-1a(id) mod BatchesShards
//	bsk = {created_at epoch ms:013}#{id}
//
// Its keys are written once, when the batch row is created, and never
// change; a later write of the row updates the entry's projected
// attributes (config.BatchesProjection) only when it changes one of them.
//
// Why no key of it passes DynamoDB's 1,000 write units/s per partition
// ("Partitions and data distribution", DynamoDB developer guide,
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.Partitions.html):
// all writes of batches being created now go to the current month, whatever
// the bucket's width, so the shards carry the rate and the month only
// bounds how much one key holds and lets `since` skip old months. A batch
// writes its entry at most ≈ 6 times per run (created, frozen or refused,
// finished; stop; forgetting; deleted), each ≤ 1 KB, one write unit, as
// only the listing's attributes are projected. The API stage allows
// APIRateLimit requests/s (default 50, burst 100), so API submits write at
// most 100 × 6 / BatchesShards = 75 units/s per key; a key reaches 1,000
// only past ≈ 1,300 batches created per second by API, uploads and
// schedules together.
const BatchesShards = 8

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

func month(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// BatchesPK is the batches index's partition key of a batch created at
// createdAt: "BATCHES#{yyyy-mm}#{FNV-1a(id) mod BatchesShards}".
func BatchesPK(id string, createdAt time.Time) string {
	return batchesPKOf(month(createdAt), batch.Shard(id, BatchesShards))
}

func batchesPKOf(m time.Time, shard int) string {
	return "BATCHES#" + m.Format("2006-01") + "#" + strconv.Itoa(shard)
}

// BatchesSK is the batches index's sort key: the creation time in epoch
// milliseconds, 13 digits (byte order is time order until the year 2286),
// "#" and the id.
func BatchesSK(id string, createdAt time.Time) string {
	return fmt.Sprintf("%013d#%s", createdAt.UnixMilli(), id)
}

func msKey(t time.Time) string { return fmt.Sprintf("%013d", t.UnixMilli()) }

// positionRE is a listing position: a sort key, or a month's start in
// epoch ms (the listing continues below it).
var positionRE = regexp.MustCompile(`^[0-9]{13}(#[A-Za-z0-9_-]{1,128})?$`)

// ListBatches walks the batches index newest month first, merging each
// month's BatchesShards shards newest first (see batch.Store). The
// position it returns is the sort key of the last entry it examined, or
// the start of the last month it read when it stopped between months.
func (s *Store) ListBatches(ctx context.Context, q batch.BatchQuery) ([]batch.Batch, string, error) {
	if q.Limit < 1 {
		return nil, "", &batch.InputError{Field: "limit", Reason: fmt.Sprintf("%d: want at least 1", q.Limit)}
	}
	upper := q.Before
	// A month's entries may be stamped a little after Now by another
	// function's clock: start an hour ahead.
	m := month(q.Now.Add(time.Hour))
	if upper != "" {
		if !positionRE.MatchString(upper) {
			return nil, "", &batch.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
		}
		ms, _ := strconv.ParseInt(upper[:13], 10, 64)
		if !strings.Contains(upper, "#") {
			ms-- // the start of a month already read: continue in the one before
		}
		m = month(time.UnixMilli(ms))
	}
	floor := batchesEpoch
	lower := ""
	if !q.Since.IsZero() {
		lower = msKey(q.Since)
		if sm := month(q.Since); sm.After(floor) {
			floor = sm
		}
	}
	var out []batch.Batch
	examined := 0
	for months := 0; !m.Before(floor); months++ {
		if months == listMonthsPerCall {
			return out, msKey(m.AddDate(0, 1, 0)), nil
		}
		h := &batchesHeap{}
		for shard := range BatchesShards {
			it := &batchesIter{s: s, pk: batchesPKOf(m, shard), upper: upper, lower: lower, size: min(max(q.Limit/2, 25), 250)}
			if err := it.fill(ctx); err != nil {
				return nil, "", err
			}
			if len(it.page) > 0 {
				*h = append(*h, it)
			}
		}
		heap.Init(h)
		for h.Len() > 0 {
			it := (*h)[0]
			e := it.page[0]
			it.page = it.page[1:]
			if len(it.page) == 0 {
				if err := it.fill(ctx); err != nil {
					return nil, "", err
				}
			}
			if len(it.page) == 0 {
				heap.Pop(h)
			} else {
				heap.Fix(h, 0)
			}
			examined++
			if !e.b.Expired(q.Now) && (len(q.Statuses) == 0 || slices.Contains(q.Statuses, e.b.Status)) {
				out = append(out, e.b)
			}
			if len(out) == q.Limit || examined == listEntriesPerCall {
				return out, e.sk, nil
			}
		}
		upper = ""
		m = m.AddDate(0, -1, 0)
	}
	return out, "", nil
}

type batchesEntry struct {
	sk string
	b  batch.Batch
}

// batchesIter pages through one shard of one month, newest first, below
// upper and at or above lower (each "" for no bound).
type batchesIter struct {
	s            *Store
	pk           string
	upper, lower string
	size         int
	page         []batchesEntry
	next         map[string]types.AttributeValue
	done         bool
}

func (it *batchesIter) fill(ctx context.Context) error {
	if it.upper != "" && it.lower != "" && it.lower >= it.upper {
		it.done = true
	}
	for len(it.page) == 0 && !it.done {
		cond := "#p = :p"
		vals := map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: it.pk}}
		switch {
		case it.upper != "" && it.lower != "":
			// BETWEEN is inclusive: the entry at upper (the previous page's
			// last) is skipped below.
			cond += " AND #k BETWEEN :lo AND :up"
		case it.upper != "":
			cond += " AND #k < :up"
		case it.lower != "":
			cond += " AND #k >= :lo"
		}
		names := map[string]string{"#p": config.AttrBatchesPK}
		if it.upper != "" || it.lower != "" {
			names["#k"] = config.AttrBatchesSK
		}
		if it.upper != "" {
			vals[":up"] = &types.AttributeValueMemberS{Value: it.upper}
		}
		if it.lower != "" {
			vals[":lo"] = &types.AttributeValueMemberS{Value: it.lower}
		}
		c, cancel := it.s.ctx(ctx)
		out, err := it.s.db.Query(c, &dynamodb.QueryInput{
			TableName: &it.s.table, IndexName: aws.String(config.IndexBatches),
			KeyConditionExpression:    aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(int32(it.size)),
			ExclusiveStartKey:         it.next,
		})
		cancel()
		if err != nil {
			return fmt.Errorf("list batches %s: %w", it.pk, err)
		}
		for _, av := range out.Items {
			var r batchRow
			if err := attributevalue.UnmarshalMap(av, &r); err != nil {
				return fmt.Errorf("list batches %s: %w", it.pk, err)
			}
			if r.BatchesSK == it.upper {
				continue
			}
			b, err := fromRow(r)
			if err != nil {
				return fmt.Errorf("list batches %s: %w", it.pk, err)
			}
			it.page = append(it.page, batchesEntry{sk: r.BatchesSK, b: b})
		}
		it.next = out.LastEvaluatedKey
		it.done = len(out.LastEvaluatedKey) == 0
	}
	return nil
}

// batchesHeap orders shard iterators by their next entry, newest first.
type batchesHeap []*batchesIter

func (h batchesHeap) Len() int           { return len(h) }
func (h batchesHeap) Less(i, j int) bool { return h[i].page[0].sk > h[j].page[0].sk }
func (h batchesHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *batchesHeap) Push(x any)        { *h = append(*h, x.(*batchesIter)) }
func (h *batchesHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
