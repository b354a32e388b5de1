//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/effects"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// effectsTable creates a user table (pk string) for staged writes.
func effectsTable(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := "fx-" + strings.ToLower(newID(t))
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	name = strings.Trim(name, "-")
	db := dynamodb.NewFromConfig(env.aws)
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(name), BillingMode: ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	return name
}

// stageCount stages, for req's key, an ADD of 1 to "applied" on the row
// pk = key of table: a row whose applied is 2 was written twice.
func stageCount(ctx context.Context, table string, req pipeline.Request) error {
	return effects.Update(ctx, table, map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: req.Key}},
		ddbtypes.Update{
			UpdateExpression:          aws.String("ADD applied :one SET attempt = :a"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}, ":a": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(req.Attempt)}},
		})
}

// stagingBatch makes a harness running run with staging on tables,
// submits n items and expands the fan-out (chunks of 7); it returns the
// harness and the batch id.
func stagingBatch(t *testing.T, tables []string, n int, run pipeline.Func) (*harness, string) {
	t.Helper()
	return stagingBatchK(t, tables, n, 1, run)
}

// stagingBatchK is stagingBatch with k items per message.
func stagingBatchK(t *testing.T, tables []string, n, k int, run pipeline.Func) (*harness, string) {
	t.Helper()
	h := newHarness(t, run)
	h.worker.Staging = effects.Staging(tables)
	laneBindEffects(t, h, tables[0]) // as a stack declaring it grants
	id := newID(t)
	if _, err := h.submitter.Submit(context.Background(), api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(n)},
		ItemsPerMessage: k}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(context.Background(), h.receive(t, (n+6)/7))
	return h, id
}

// stagingCounter is a pipeline that stages stageCount on table and
// succeeds with its input as output.
func stagingCounter(table string) pipeline.Func {
	return func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if err := stageCount(ctx, table, req); err != nil {
			return pipeline.Result{}, err
		}
		return pipeline.Result{Output: req.Input}, nil
	}
}

// applied reads how many times the staged write of key was applied (0:
// never).
func applied(t *testing.T, table, key string) int {
	t.Helper()
	out, err := dynamodb.NewFromConfig(env.aws).GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: key}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n, ok := out.Item["applied"].(*ddbtypes.AttributeValueMemberN)
	if !ok {
		return 0
	}
	v, _ := strconv.Atoi(n.Value)
	return v
}

// itemState reads item key of batch id from its unit (item row or pack
// row).
func itemState(t *testing.T, h *harness, id, key string) ledger.Item {
	t.Helper()
	ctx := context.Background()
	b, err := h.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var found ledger.Item
	if err := shardmerge.Merge(ctx, h.store, id, b.ListShards, "", shardmerge.Options{Packed: b.Pack() > 1}, func(it ledger.Item) error {
		if it.Key == key {
			found = it
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// TestStagedEffectsOncePerItem guards the product line "a pipeline's
// staged writes are committed with its succeeded outcome, once", K = 1
// and K = 10: every item or pack message delivered three times applies
// each item's write once; an item that stages and then fails permanently
// applies nothing; an item that stages and then fails transiently
// applies its write once, from the attempt that succeeded (two calls,
// one write) — inside a pack, per item, beside its pack's other items.
func TestStagedEffectsOncePerItem(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { stagedEffectsOncePerItem(t, k) })
	}
}

func stagedEffectsOncePerItem(t *testing.T, k int) {
	ctx := context.Background()
	table := effectsTable(t)
	var flaky atomic.Int64
	h, id := stagingBatchK(t, []string{table}, 8, k, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if err := stageCount(ctx, table, req); err != nil {
			return pipeline.Result{}, err
		}
		switch req.Key {
		case api.PositionalKey(3):
			return pipeline.Result{}, pipeline.Permanent(errors.New("bad item after staging"))
		case api.PositionalKey(4):
			if flaky.Add(1) == 1 {
				return pipeline.Result{}, errors.New("transient after staging")
			}
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	want := map[int]int{1: 8, 10: 2}[k] // chunks of 7 and 1: two packs
	items := h.receive(t, want)
	if len(items) != want {
		t.Fatalf("%d messages, want %d", len(items), want)
	}
	tripled := append(append(append([]worker.Delivery{}, items...), items...), items...)
	pending, start := tripled, time.Now()
	for deadline := time.Now().Add(2 * h.worker.Lease); len(pending) > 0 && time.Now().Before(deadline); {
		failed := h.worker.Handle(ctx, pending)
		var again []worker.Delivery
		for _, d := range pending {
			for _, f := range failed {
				if d.MessageID == f {
					again = append(again, d)
					break
				}
			}
		}
		pending = again
		if len(pending) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	// A unit whose items all ended does not hold its duplicates off until
	// its lease ends (a pack whose items all committed staged writes kept
	// its lease: its duplicates waited the whole lease).
	if took := time.Since(start); len(pending) > 0 || took > h.worker.Lease/2 {
		t.Fatalf("%d deliveries not acknowledged, after %s (lease %s)", len(pending), took.Round(time.Millisecond), h.worker.Lease)
	}
	for i := range 8 {
		k := api.PositionalKey(int64(i))
		want, calls := 1, int64(1)
		switch i {
		case 3:
			want = 0
		case 4:
			calls = 2
		}
		if got := applied(t, table, k); got != want {
			t.Errorf("%s: staged write applied %d times, want %d", k, got, want)
		}
		if c := h.callsOf(k); c != calls {
			t.Errorf("%s: %d pipeline calls, want %d", k, c, calls)
		}
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Report.Census.Succeeded != 7 || r.Report.Census.Failed != 1 {
		t.Fatalf("census %+v, want 7 succeeded, 1 failed", r.Report.Census)
	}
}

// crashingStore is a Store whose outcome writes never reach DynamoDB: the
// item function died after the pipeline returned and before it recorded.
type crashingStore struct{ ledger.Store }

var errCrashed = errors.New("the process died before the outcome write")

func (crashingStore) Record(context.Context, ledger.Record) error { return errCrashed }

// crashingPacks is crashingStore for pack rows: every pack write but a
// take never reaches DynamoDB.
type crashingPacks struct{ ledger.Store }

func (crashingPacks) Record(context.Context, ledger.Record) error { return errCrashed }

func (c crashingPacks) WritePack(ctx context.Context, w ledger.PackWrite) error {
	if w.Take {
		return c.Store.WritePack(ctx, w)
	}
	return errCrashed
}

// TestStagedEffectsCrashBeforeRecord guards the product line "writes
// staged by an attempt that never recorded its outcome are never
// applied", K = 1 and K = 10. Attempt 1 stages its write and dies before
// the outcome write: nothing is applied and the item stays in flight
// under its lease. After the lease, the redelivery takes the item over
// (attempt 2), the pipeline runs again and its write is applied once.
func TestStagedEffectsCrashBeforeRecord(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { stagedEffectsCrashBeforeRecord(t, k) })
	}
}

func stagedEffectsCrashBeforeRecord(t *testing.T, k int) {
	ctx := context.Background()
	table := effectsTable(t)
	h, id := stagingBatchK(t, []string{table}, 1, k, stagingCounter(table))
	h.worker.Lease, h.worker.Margin = 5*time.Second, 100*time.Millisecond
	msgs := h.receive(t, 1)
	crashing := *h.worker
	crashing.Store = crashingStore{h.store}
	if k > 1 {
		crashing.Store = crashingPacks{h.store}
	}
	if failed := crashing.Handle(ctx, msgs); len(failed) != 1 {
		t.Fatalf("the crashed delivery was acknowledged: %v", failed)
	}
	key := api.PositionalKey(0)
	if n := applied(t, table, key); n != 0 {
		t.Fatalf("after the crash the staged write was applied %d times, want 0", n)
	}
	if it := itemState(t, h, id, key); it.Outcome != api.OutcomeInFlight || it.Attempt != 1 {
		t.Fatalf("row after the crash: %+v, want in flight, attempt 1", it)
	}
	time.Sleep(h.worker.Lease + 200*time.Millisecond)
	if failed := h.worker.Handle(ctx, msgs); len(failed) != 0 {
		t.Fatalf("takeover failed: %v", failed)
	}
	if n, c := applied(t, table, key), h.callsOf(key); n != 1 || c != 2 {
		t.Fatalf("after the takeover: applied %d, calls %d; want applied 1, calls 2", n, c)
	}
	if it := itemState(t, h, id, key); it.Outcome != api.OutcomeSucceeded || it.Attempt != 2 {
		t.Fatalf("row after the takeover: %+v", it)
	}
}

// TestStagedEffectsLostAnswer guards "a commit whose answer was lost is
// applied once": through the fault proxy the emulator applies the outcome
// and staged write, and the connection is reset before the answer; the
// SDK sends the transaction again (same client token), and the write is
// still applied once, the item succeeded and acknowledged.
func TestStagedEffectsLostAnswer(t *testing.T) {
	ctx := context.Background()
	table := effectsTable(t)
	h, id := stagingBatch(t, []string{table}, 1, stagingCounter(table))
	proxy, cfg := faultProxy(t, faultproxy.Config{Seed: 5, Rules: []faultproxy.Rule{
		{Service: "dynamodb", Operations: []string{"TransactWriteItems"}, Contains: table, Kind: faultproxy.KindResetAfter, Rate: 1, Max: 1},
	}})
	w := *h.worker
	w.Store = dynamo.New(dynamodb.NewFromConfig(h.as(cfg, "item")), h.table)
	if failed := w.Handle(ctx, h.receive(t, 1)); len(failed) != 0 {
		t.Fatalf("delivery failed: %v", failed)
	}
	if n := proxy.Status().Injected[faultproxy.KindResetAfter]; n != 1 {
		t.Fatalf("answers lost: %d, want 1 (the rule did not fire: the test proves nothing)", n)
	}
	key := api.PositionalKey(0)
	if n := applied(t, table, key); n != 1 {
		t.Fatalf("staged write applied %d times, want 1", n)
	}
	if it, _ := h.store.GetItem(ctx, id, key); it.Outcome != api.OutcomeSucceeded {
		t.Fatalf("row: %+v", it)
	}
}

// TestStagedEffectsRefused guards the product lines "a staged write on an
// undeclared table fails the item with an error naming the table" and "a
// staged condition that does not hold applies nothing and retries the
// item": the first attempt's ConditionCheck fails (the row it requires is
// absent), nothing is applied; the test then puts the row and the retry
// commits.
func TestStagedEffectsRefused(t *testing.T) {
	ctx := context.Background()
	table := effectsTable(t)
	gate := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "gate"}}
	h, id := stagingBatch(t, []string{table}, 2, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Key == api.PositionalKey(0) {
			if err := effects.Put(ctx, "not-declared", map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "x"}}); err != nil {
				return pipeline.Result{}, err
			}
			return pipeline.Result{}, nil
		}
		if err := effects.ConditionCheck(ctx, table, gate, ddbtypes.ConditionCheck{ConditionExpression: aws.String("attribute_exists(pk)")}); err != nil {
			return pipeline.Result{}, err
		}
		if err := stageCount(ctx, table, req); err != nil {
			return pipeline.Result{}, err
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	msgs := h.receive(t, 2)
	failed := h.worker.Handle(ctx, msgs)
	if len(failed) != 1 {
		t.Fatalf("failed deliveries %v, want the gated item's only", failed)
	}
	k0, k1 := api.PositionalKey(0), api.PositionalKey(1)
	if it, _ := h.store.GetItem(ctx, id, k0); it.Outcome != api.OutcomeFailed || !strings.Contains(it.Error, `"not-declared"`) {
		t.Fatalf("undeclared table: row %+v, want failed naming the table", it)
	}
	it, _ := h.store.GetItem(ctx, id, k1)
	if it.Outcome != api.OutcomeInFlight || !strings.Contains(it.Error, "staged write 0") || applied(t, table, k1) != 0 {
		t.Fatalf("gated item after a failed condition: row %+v, applied %d; want in flight, error naming write 0, nothing applied", it, applied(t, table, k1))
	}
	if _, err := dynamodb.NewFromConfig(env.aws).PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: gate}); err != nil {
		t.Fatal(err)
	}
	var again []worker.Delivery
	for _, d := range msgs {
		if d.MessageID == failed[0] {
			again = append(again, d)
		}
	}
	if f := h.worker.Handle(ctx, again); len(f) != 0 {
		t.Fatalf("retry failed: %v", f)
	}
	if n, c := applied(t, table, k1), h.callsOf(k1); n != 1 || c != 2 {
		t.Fatalf("gated item: applied %d, calls %d; want 1 and 2", n, c)
	}
}

// TestStagedEffectsMissingTable guards the product line "a commit DynamoDB
// refuses for good fails the item permanently with DynamoDB's message": a
// staged write on a table declared for the item function but missing (a
// stack declaring a table that was deleted, or misspelt) fails the item
// at once, acknowledged, with nothing applied; it does not hold the item
// under its lease until a takeover counts it as an interruption.
func TestStagedEffectsMissingTable(t *testing.T) {
	ctx := context.Background()
	missing := "fx-missing-" + strings.ToLower(newID(t))
	if len(missing) > 60 {
		missing = strings.Trim(missing[:60], "-")
	}
	h, id := stagingBatch(t, []string{missing}, 1, stagingCounter(missing))
	if failed := h.worker.Handle(ctx, h.receive(t, 1)); len(failed) != 0 {
		t.Fatalf("the delivery was not acknowledged (%v): the item waits for its lease", failed)
	}
	it, err := h.store.GetItem(ctx, id, api.PositionalKey(0))
	if err != nil || it.Outcome != api.OutcomeFailed || it.Reason != api.ReasonPermanent || !strings.Contains(it.Error, "ResourceNotFound") {
		t.Fatalf("row %+v %v, want failed (permanent) with DynamoDB's ResourceNotFound message", it, err)
	}
}

// TestStagedEffectsPackRowWithinLimit guards docs/design/bounds.md's pack
// row line on the path of staged effects, K = 1 and 10: 14 items (two
// packs of 7) each stage a write and succeed with an output of 62 KiB
// (inline for an item row), so a pack's outputs together pass DynamoDB's
// 400 KB. Each commit, made on its own with its staged write, keeps the
// pack row within ledger.PackRowBudget (its output to S3 when the row
// would pass it): every item succeeds, its write applied once, its
// output readable from the results, and each row as DynamoDB stores it
// (sized by DynamoDB's rules, meter.ItemBytes; MiniStack enforces no
// limit) stays under 400 KB.
func TestStagedEffectsPackRowWithinLimit(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	for _, k := range packedKs {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { stagedEffectsPackRowWithinLimit(t, k) })
	}
}

func stagedEffectsPackRowWithinLimit(t *testing.T, k int) {
	ctx := context.Background()
	table := effectsTable(t)
	blob := strings.Repeat("x", 62<<10)
	const n = 14
	h, id := stagingBatchK(t, []string{table}, n, k, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if err := stageCount(ctx, table, req); err != nil {
			return pipeline.Result{}, err
		}
		return pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"key":%q,"blob":%q}`, req.Key, blob))}, nil
	})
	want := map[int]int{1: n, 10: 2}[k]
	pending := h.receive(t, want)
	for deadline := time.Now().Add(2 * time.Minute); len(pending) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries not acknowledged after 2 minutes", len(pending))
		}
		failed := h.worker.Handle(ctx, pending)
		var again []worker.Delivery
		for _, d := range pending {
			if slices.Contains(failed, d.MessageID) {
				again = append(again, d)
			}
		}
		pending = again
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Report.Census; c.Succeeded != n {
		t.Fatalf("census %+v, want %d succeeded", c, n)
	}
	for i := range n {
		key := api.PositionalKey(int64(i))
		if got := applied(t, table, key); got != 1 {
			t.Errorf("%s: staged write applied %d times, want 1", key, got)
		}
	}
	body, err := h.blobs.Get(ctx, api.ResultsKey(id, 1, api.OutcomeSucceeded))
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	err = api.ReadResults(bytes.NewReader(body), func(l api.ResultLine) error {
		out := string(l.Output)
		if l.OutputRef != "" {
			refs++
			obj, err := h.blobs.Get(ctx, strings.TrimPrefix(l.OutputRef, "s3://"+h.blobs.Bucket()+"/"))
			if err != nil {
				return fmt.Errorf("%s: %s: %w", l.Key, l.OutputRef, err)
			}
			out = string(obj)
		}
		if !strings.Contains(out, fmt.Sprintf(`"key":%q`, l.Key)) || len(out) < 62<<10 {
			return fmt.Errorf("%s: output of %d bytes", l.Key, len(out))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	largest := 0
	for i := range n {
		if k == 1 {
			it, err := h.store.GetItem(ctx, id, api.PositionalKey(int64(i)))
			if err != nil {
				t.Fatal(err)
			}
			largest = max(largest, len(it.Output))
			continue
		}
		if i%7 != 0 {
			continue // not a pack's first item
		}
		out, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.table, ConsistentRead: aws.Bool(true), Key: map[string]ddbtypes.AttributeValue{
			config.AttrPK: &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("PACK#%s#%d", id, ledger.PackShard(int64(i), b.ListShards))},
			config.AttrSK: &ddbtypes.AttributeValueMemberS{Value: ledger.PackSK(int64(i))}}})
		if err != nil || len(out.Item) == 0 {
			t.Fatalf("raw pack row %d: %v", i, err)
		}
		largest = max(largest, meter.ItemBytes(out.Item))
	}
	t.Logf("K=%d: %d outputs moved to S3; largest row %d bytes (limit 409600)", k, refs, largest)
	if largest >= 400<<10 {
		t.Fatalf("a row of %d bytes: over DynamoDB's 400 KB item limit", largest)
	}
}
