package meter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// ChunkBytes is the payload size SQS and EventBridge bill as one request
// or event: "Amazon SQS pricing" (https://aws.amazon.com/sqs/pricing/) and
// "Amazon EventBridge pricing" (https://aws.amazon.com/eventbridge/pricing/)
// bill each 64 KB chunk of a payload as one.
const ChunkBytes = 64 * 1024

// Meter sizes every request made by the SDK clients it is attached to and
// sums what AWS would bill for them (see the package comment for the
// rules). Writes are sized from the item's before image (a consistent
// GetItem made before the write) and after image (the put item, or a
// consistent GetItem after an update); concurrent writes of one key through
// the meter are serialised so the images belong to the write. The extra
// reads go through an unmetered client. Meter is safe for concurrent use.
//
// Known approximations: reads with a ProjectionExpression or Select COUNT
// are sized by what they return; a cancelled transaction is billed as if
// each of its writes failed its condition (before image, doubled, no index
// writes); errors other than a failed condition or a cancelled transaction
// bill nothing.
type Meter struct {
	raw     *dynamodb.Client
	mu      sync.Mutex
	u       Usage
	schemas map[string]*schema
	locks   sync.Map // "table/pk/sk" → *sync.Mutex
}

// New returns a meter whose before and after images are read with a
// client built from cfg (call it before [Meter.Attach] so that those reads
// are not metered).
func New(cfg aws.Config) *Meter {
	m := &Meter{raw: dynamodb.NewFromConfig(cfg), schemas: map[string]*schema{}}
	m.u.init()
	return m
}

// Attach adds the meter to cfg: every client built from cfg afterwards is
// metered.
func (m *Meter) Attach(cfg *aws.Config) {
	cfg.APIOptions = append(slices.Clip(cfg.APIOptions), func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("bulkrunMeter", m.handle), middleware.After)
	})
}

// Usage returns a copy of the sums so far.
func (m *Meter) Usage() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.u.Clone()
}

// Reset sets the sums to zero.
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.u = Usage{}
	m.u.init()
}

func (m *Meter) add(f func(u *Usage)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.u)
}

func (m *Meter) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	svc, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	m.add(func(u *Usage) { u.Calls[svc+"."+op]++ })
	switch svc {
	case "DynamoDB":
		return m.dynamo(ctx, in, next)
	case "SQS":
		out, md, err := next.HandleInitialize(ctx, in)
		m.add(func(u *Usage) { u.SQSRequests += sqsRequests(in.Parameters, out.Result) })
		return out, md, err
	case "S3":
		m.add(func(u *Usage) {
			switch {
			case strings.HasPrefix(op, "Delete"):
			case strings.HasPrefix(op, "Put"), strings.HasPrefix(op, "Copy"), strings.HasPrefix(op, "List"),
				strings.HasPrefix(op, "Create"), strings.HasPrefix(op, "UploadPart"), op == "CompleteMultipartUpload":
				u.S3Put++
			default:
				u.S3Get++
			}
		})
	case "EventBridge":
		if p, ok := in.Parameters.(*eventbridge.PutEventsInput); ok {
			var n float64
			for _, e := range p.Entries {
				n += chunks(len(aws.ToString(e.Detail)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Source)))
			}
			m.add(func(u *Usage) { u.EventBridgeEvents += n })
		}
	case "Lambda":
		if op == "Invoke" {
			m.add(func(u *Usage) { u.LambdaRequests++ })
		}
	}
	return next.HandleInitialize(ctx, in)
}

// chunks is the billed count of a payload of n bytes: one per started
// 64 KiB, at least 1.
func chunks(n int) float64 { return math.Max(1, math.Ceil(float64(n)/ChunkBytes)) }

func sqsRequests(in, out any) float64 {
	switch p := in.(type) {
	case *sqs.SendMessageInput:
		n := len(aws.ToString(p.MessageBody))
		for k, v := range p.MessageAttributes {
			n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
		}
		return chunks(n)
	case *sqs.SendMessageBatchInput:
		n := 0
		for _, e := range p.Entries {
			n += len(aws.ToString(e.MessageBody))
			for k, v := range e.MessageAttributes {
				n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
			}
		}
		return chunks(n)
	case *sqs.ReceiveMessageInput:
		n := 0
		if o, ok := out.(*sqs.ReceiveMessageOutput); ok {
			for _, msg := range o.Messages {
				n += len(aws.ToString(msg.Body))
			}
		}
		return chunks(n)
	}
	return 1
}

// schema is what the meter needs of a table: its key and its indexes.
type schema struct {
	pk, sk  string
	indexes []index
}

type index struct {
	name       string
	pk, sk     string
	projection types.ProjectionType
	include    []string
}

func (m *Meter) schema(ctx context.Context, table string) (*schema, error) {
	m.mu.Lock()
	s := m.schemas[table]
	m.mu.Unlock()
	if s != nil {
		return s, nil
	}
	out, err := m.raw.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		return nil, fmt.Errorf("meter: describe %s: %w", table, err)
	}
	s = &schema{}
	s.pk, s.sk = keyNames(out.Table.KeySchema)
	for _, g := range out.Table.GlobalSecondaryIndexes {
		ix := index{name: aws.ToString(g.IndexName), projection: types.ProjectionTypeAll}
		ix.pk, ix.sk = keyNames(g.KeySchema)
		if g.Projection != nil {
			ix.projection, ix.include = g.Projection.ProjectionType, g.Projection.NonKeyAttributes
		}
		s.indexes = append(s.indexes, ix)
	}
	m.mu.Lock()
	m.schemas[table] = s
	m.mu.Unlock()
	return s, nil
}

func keyNames(ks []types.KeySchemaElement) (hash, rng string) {
	for _, k := range ks {
		if k.KeyType == types.KeyTypeHash {
			hash = aws.ToString(k.AttributeName)
		} else {
			rng = aws.ToString(k.AttributeName)
		}
	}
	return hash, rng
}

func (s *schema) key(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	k := map[string]types.AttributeValue{s.pk: item[s.pk]}
	if s.sk != "" {
		k[s.sk] = item[s.sk]
	}
	return k
}

// entry is an item's entry in index ix: its index key values and its
// projected attributes, or ok false when the item has no entry there (no
// item, or an index key attribute missing).
func (s *schema) entry(ix index, item map[string]types.AttributeValue) (key [2]types.AttributeValue, view map[string]types.AttributeValue, ok bool) {
	if item == nil || item[ix.pk] == nil || (ix.sk != "" && item[ix.sk] == nil) {
		return key, nil, false
	}
	key = [2]types.AttributeValue{item[ix.pk], item[ix.sk]}
	if ix.projection == types.ProjectionTypeAll {
		return key, item, true
	}
	view = map[string]types.AttributeValue{}
	names := []string{s.pk, s.sk, ix.pk, ix.sk}
	if ix.projection == types.ProjectionTypeInclude {
		names = append(names, ix.include...)
	}
	for _, n := range names {
		if v, ok := item[n]; ok {
			view[n] = v
		}
	}
	return key, view, true
}

// indexWriteUnits is what one write of an item costs index ix, given the
// item's before and after images (nil when absent): nothing when the
// entry is absent from both or unchanged; an insert or delete of the entry
// by its size; an update in place by the larger of its sizes; a change of
// the index key a delete plus an insert.
func (s *schema) indexWriteUnits(ix index, before, after map[string]types.AttributeValue) float64 {
	bk, bv, bok := s.entry(ix, before)
	ak, av, aok := s.entry(ix, after)
	switch {
	case !bok && !aok:
		return 0
	case !bok:
		return WriteUnits(ItemBytes(av))
	case !aok:
		return WriteUnits(ItemBytes(bv))
	case !reflect.DeepEqual(bk, ak):
		return WriteUnits(ItemBytes(bv)) + WriteUnits(ItemBytes(av))
	case reflect.DeepEqual(bv, av):
		return 0
	}
	return WriteUnits(max(ItemBytes(bv), ItemBytes(av)))
}

// Kind is the row kind of a key or item: its partition key's string value
// up to the first '#' (the whole value when it has none); for a counter
// row (COUNT) also its sort key's, so that a run's lanes, its run row and
// chunk counters are told apart: "COUNT LANE", "COUNT RUN", "COUNT CHUNK";
// for a row under SLOT its sort key's when it is not SLOT, so that a run
// on tracks' claim counters and track fences are told apart from each
// other and from the slot rows: "SLOT CLAIM", "SLOT TRACK", "SLOT"
// (internal/dynamo/layout).
func (s *schema) kind(item map[string]types.AttributeValue) string {
	v, _ := item[s.pk].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	k, _, _ := strings.Cut(v.Value, "#")
	sk, ok := item[s.sk].(*types.AttributeValueMemberS)
	switch {
	case ok && k == "COUNT":
		p, _, _ := strings.Cut(sk.Value, "#")
		k += " " + p
	case ok && k == "SLOT" && sk.Value != "SLOT":
		k += " " + sk.Value
	}
	return k
}

// write is one write of one item as DynamoDB bills it.
type write struct {
	table         string
	key           map[string]types.AttributeValue
	after         map[string]types.AttributeValue // the put item; nil for update (read back) and delete
	readBack      bool                            // after image is read after the write
	before        map[string]types.AttributeValue
	conditionOnly bool // a ConditionCheck in a transaction: sized, writes nothing
}

// bill adds the units of one write to u: the table's by the larger of the
// before and after images (the before image alone when the write failed its
// condition), each index's by [schema.indexWriteUnits] (none when failed),
// all multiplied by factor (2 in a transaction).
func (s *schema) bill(u *Usage, before, after map[string]types.AttributeValue, failed bool, factor float64) {
	kind := s.kind(before)
	if kind == "" {
		kind = s.kind(after)
	}
	if failed {
		u.Write[Target{Kind: kind}] += factor * WriteUnits(ItemBytes(before))
		return
	}
	units := factor * WriteUnits(max(ItemBytes(before), ItemBytes(after)))
	u.Write[Target{Kind: kind}] += units
	if (kind == "ITEM" || kind == "PACK") && takes(after) >= 2 {
		u.Retried[Target{Kind: kind}] += units
	}
	for _, ix := range s.indexes {
		if w := s.indexWriteUnits(ix, before, after); w > 0 {
			u.Write[Target{Index: ix.name, Kind: kind}] += factor * w
		}
	}
}

// AttemptAttr is the attribute of an item or pack row that counts its
// takes (the product's layout.AttrAttempt; a bench test checks they
// agree): 1 after the first take, 2 after a redelivered unit's.
const AttemptAttr = "attempt"

// takes is the number of takes item counts (AttemptAttr), 0 when it has
// none.
func takes(item map[string]types.AttributeValue) int {
	v, ok := item[AttemptAttr].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v.Value)
	if err != nil {
		return 0
	}
	return n
}

func (m *Meter) lock(keys []string) func() {
	sort.Strings(keys)
	var held []*sync.Mutex
	for i, k := range keys {
		if i > 0 && keys[i-1] == k {
			continue
		}
		l, _ := m.locks.LoadOrStore(k, new(sync.Mutex))
		mu := l.(*sync.Mutex)
		mu.Lock()
		held = append(held, mu)
	}
	return func() {
		for _, mu := range held {
			mu.Unlock()
		}
	}
}

func lockName(table string, key map[string]types.AttributeValue) string {
	names := make([]string, 0, len(key))
	for n, v := range key {
		names = append(names, fmt.Sprintf("%s=%#v", n, v))
	}
	sort.Strings(names)
	return table + "/" + strings.Join(names, "/")
}

func (m *Meter) get(ctx context.Context, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := m.raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("meter: image of %s: %w", table, err)
	}
	return out.Item, nil
}

func (m *Meter) dynamo(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	var ws []write
	factor := 1.0
	switch p := in.Parameters.(type) {
	case *dynamodb.PutItemInput:
		ws = []write{{table: aws.ToString(p.TableName), after: p.Item}}
	case *dynamodb.UpdateItemInput:
		ws = []write{{table: aws.ToString(p.TableName), key: p.Key, readBack: true}}
	case *dynamodb.DeleteItemInput:
		ws = []write{{table: aws.ToString(p.TableName), key: p.Key}}
	case *dynamodb.BatchWriteItemInput:
		for t, reqs := range p.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					ws = append(ws, write{table: t, after: r.PutRequest.Item})
				} else if r.DeleteRequest != nil {
					ws = append(ws, write{table: t, key: r.DeleteRequest.Key})
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		factor = 2
		for _, it := range p.TransactItems {
			switch {
			case it.Put != nil:
				ws = append(ws, write{table: aws.ToString(it.Put.TableName), after: it.Put.Item})
			case it.Update != nil:
				ws = append(ws, write{table: aws.ToString(it.Update.TableName), key: it.Update.Key, readBack: true})
			case it.Delete != nil:
				ws = append(ws, write{table: aws.ToString(it.Delete.TableName), key: it.Delete.Key})
			case it.ConditionCheck != nil:
				ws = append(ws, write{table: aws.ToString(it.ConditionCheck.TableName), key: it.ConditionCheck.Key, conditionOnly: true})
			}
		}
	default:
		out, md, err := next.HandleInitialize(ctx, in)
		if err == nil {
			if rerr := m.reads(ctx, in.Parameters, out.Result); rerr != nil {
				return out, md, rerr
			}
		}
		return out, md, err
	}
	schemas := make([]*schema, len(ws))
	names := make([]string, len(ws))
	for i := range ws {
		s, err := m.schema(ctx, ws[i].table)
		if err != nil {
			return middleware.InitializeOutput{}, middleware.Metadata{}, err
		}
		schemas[i] = s
		if ws[i].key == nil {
			ws[i].key = s.key(ws[i].after)
		}
		names[i] = lockName(ws[i].table, ws[i].key)
	}
	defer m.lock(names)()
	for i := range ws {
		b, err := m.get(ctx, ws[i].table, ws[i].key)
		if err != nil {
			return middleware.InitializeOutput{}, middleware.Metadata{}, err
		}
		ws[i].before = b
	}
	out, md, err := next.HandleInitialize(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	var tce *types.TransactionCanceledException
	failed := errors.As(err, &ccf) || errors.As(err, &tce)
	if err != nil && !failed {
		return out, md, err
	}
	if bw, ok := out.Result.(*dynamodb.BatchWriteItemOutput); ok && len(bw.UnprocessedItems) > 0 {
		ws = unprocessed(ws, bw.UnprocessedItems, schemas)
	}
	for i := range ws {
		w := &ws[i]
		after := w.after
		switch {
		case w.conditionOnly || failed:
			after = w.before
		case w.readBack:
			if after, err = m.get(ctx, w.table, w.key); err != nil {
				return out, md, err
			}
		}
		m.add(func(u *Usage) { schemas[i].bill(u, w.before, after, failed || w.conditionOnly, factor) })
	}
	return out, md, err
}

// unprocessed drops from ws the writes DynamoDB returned unprocessed
// (they are retried by the caller and metered then).
func unprocessed(ws []write, left map[string][]types.WriteRequest, schemas []*schema) []write {
	skip := map[string]bool{}
	for t, reqs := range left {
		for _, r := range reqs {
			if r.PutRequest != nil {
				for i := range ws {
					if ws[i].table == t {
						skip[lockName(t, schemas[i].key(r.PutRequest.Item))] = true
						break
					}
				}
			} else if r.DeleteRequest != nil {
				skip[lockName(t, r.DeleteRequest.Key)] = true
			}
		}
	}
	kept := ws[:0]
	for _, w := range ws {
		if !skip[lockName(w.table, w.key)] {
			kept = append(kept, w)
		}
	}
	return kept
}

// reads bills a successful read.
func (m *Meter) reads(ctx context.Context, in, out any) error {
	switch p := in.(type) {
	case *dynamodb.GetItemInput:
		o := out.(*dynamodb.GetItemOutput)
		s, err := m.schema(ctx, aws.ToString(p.TableName))
		if err != nil {
			return err
		}
		m.add(func(u *Usage) {
			u.Read[Target{Kind: s.kind(p.Key)}] += ReadUnits(ItemBytes(o.Item), aws.ToBool(p.ConsistentRead))
		})
	case *dynamodb.BatchGetItemInput:
		o := out.(*dynamodb.BatchGetItemOutput)
		for t, ka := range p.RequestItems {
			s, err := m.schema(ctx, t)
			if err != nil {
				return err
			}
			consistent := aws.ToBool(ka.ConsistentRead)
			missing := len(ka.Keys) - len(o.UnprocessedKeys[t].Keys) - len(o.Responses[t])
			m.add(func(u *Usage) {
				for _, it := range o.Responses[t] {
					u.Read[Target{Kind: s.kind(it)}] += ReadUnits(ItemBytes(it), consistent)
				}
				if missing > 0 && len(ka.Keys) > 0 {
					u.Read[Target{Kind: s.kind(ka.Keys[0])}] += float64(missing) * ReadUnits(0, consistent)
				}
			})
		}
	case *dynamodb.TransactGetItemsInput:
		o := out.(*dynamodb.TransactGetItemsOutput)
		for i, it := range p.TransactItems {
			if it.Get == nil || i >= len(o.Responses) {
				continue
			}
			s, err := m.schema(ctx, aws.ToString(it.Get.TableName))
			if err != nil {
				return err
			}
			item := o.Responses[i].Item
			m.add(func(u *Usage) { u.Read[Target{Kind: s.kind(it.Get.Key)}] += 2 * ReadUnits(ItemBytes(item), true) })
		}
	case *dynamodb.QueryInput:
		o := out.(*dynamodb.QueryOutput)
		return m.page(ctx, aws.ToString(p.TableName), aws.ToString(p.IndexName), aws.ToBool(p.ConsistentRead), o.Items)
	case *dynamodb.ScanInput:
		o := out.(*dynamodb.ScanOutput)
		return m.page(ctx, aws.ToString(p.TableName), aws.ToString(p.IndexName), aws.ToBool(p.ConsistentRead), o.Items)
	}
	return nil
}

// page bills one page of a Query or Scan: the summed size of its items,
// rounded up once to 4 KB.
func (m *Meter) page(ctx context.Context, table, index string, consistent bool, items []map[string]types.AttributeValue) error {
	s, err := m.schema(ctx, table)
	if err != nil {
		return err
	}
	n, kind := 0, ""
	for _, it := range items {
		n += ItemBytes(it)
	}
	if len(items) > 0 {
		kind = s.kind(items[0])
	}
	m.add(func(u *Usage) { u.Read[Target{Index: index, Kind: kind}] += ReadUnits(n, consistent) })
	return nil
}
