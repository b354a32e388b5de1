//go:build integration

package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
)

// slowReceiver answers each call after 300 ms and remembers the most calls
// it had open at once.
type slowReceiver struct {
	mu       sync.Mutex
	cur, top int
}

func (r *slowReceiver) decide(string, int) int {
	r.mu.Lock()
	r.cur++
	r.top = max(r.top, r.cur)
	r.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	r.mu.Lock()
	r.cur--
	r.mu.Unlock()
	return 200
}

func (r *slowReceiver) most() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.top
}

// TestMaxConcurrency guards the per-batch max_concurrency option (safe to
// share: bounded concurrency for receivers that can take only so much): a
// batch of 40 items with max_concurrency 3 never has more than 3 calls open
// at its slow receiver, and each item succeeds with one call (waiting for a
// slot costs no attempt). A control batch without the option shows the
// same deployment opening more than 3 at once, so the limit is what holds
// the first batch back. Forget removes slot rows, which carry the row TTL.
func TestMaxConcurrency(t *testing.T) {
	ctx := context.Background()
	const items, limit = 40, 3
	limited, control := newID(t), newID(t)+"-control"
	var lr, cr slowReceiver
	req := webhookRequest(limited, env.hook.route(limited, lr.decide), inlineItems(items))
	req.MaxConcurrency = limit
	req.MaxAttempts = 2
	if v, err := env.api.Submit(ctx, req); err != nil || v.MaxConcurrency != limit {
		t.Fatalf("submit limited: %+v, %v", v, err)
	}
	creq := webhookRequest(control, env.hook.route(control, cr.decide), inlineItems(items))
	if _, err := env.api.Submit(ctx, creq); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{limited, control} {
		v := wait(t, id)
		if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != items {
			t.Fatalf("%s: status %s, census %+v; want all %d succeeded", id, v.Status, v.Census, items)
		}
		calls := env.hook.counts(id)
		if len(calls) != items {
			t.Fatalf("%s: receiver saw %d keys, want %d", id, len(calls), items)
		}
		for k, n := range calls {
			if n != 1 {
				t.Errorf("%s: key %s called %d times, want 1", id, k, n)
			}
		}
	}
	t.Logf("most simultaneous calls: limited %d (max_concurrency %d), control %d", lr.most(), limit, cr.most())
	if got := lr.most(); got > limit || got < 1 {
		t.Errorf("limited batch: %d calls at once, want 1–%d", got, limit)
	}
	if got := cr.most(); got <= limit {
		t.Errorf("control batch: at most %d calls at once; the deployment must open more than %d for this test to show the limit", got, limit)
	}
	// A repeated submit with another limit is another plan.
	req.MaxConcurrency = limit + 1
	if _, err := env.api.Submit(ctx, req); err == nil {
		t.Errorf("repeated submit with max_concurrency %d accepted, want a conflict", limit+1)
	}
	// A slot left by a crashed holder carries the row TTL and is removed
	// by forget.
	st := dynamo.New(env.ddb, env.table)
	st.RowTTL = time.Hour
	if err := st.AcquireSlot(ctx, limited, 1, "crashed", time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	slotKey := map[string]types.AttributeValue{
		config.AttrPK: &types.AttributeValueMemberS{Value: fmt.Sprintf("SLOT#%s#%d", limited, 1)},
		config.AttrSK: &types.AttributeValueMemberS{Value: "SLOT"},
	}
	got, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &env.table, Key: slotKey, ConsistentRead: aws.Bool(true)})
	if err != nil || got.Item == nil || got.Item[config.AttrExpiresAt] == nil {
		t.Fatalf("slot row %v (%v): want one carrying %s", got.Item, err, config.AttrExpiresAt)
	}
	if err := st.AcquireSlot(ctx, limited, 1, "other", time.Now(), time.Hour); err == nil {
		t.Fatal("a held slot was taken again")
	}
	if err := env.api.Forget(ctx, limited); err != nil {
		t.Fatal(err)
	}
	got, err = env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &env.table, Key: slotKey, ConsistentRead: aws.Bool(true)})
	if err != nil || got.Item != nil {
		t.Fatalf("slot row after forget: %v (%v), want gone", got.Item, err)
	}
}

// TestMaxConcurrencyOnSeveralCounters guards the claim counters of a run
// of more than 64 tracks on the stack (docs/adr/0028): 1,000 items at
// one item per message and max_concurrency 100 run on 100 tracks (334
// slices of 3 items) claiming from 2 counters, each its own row under
// the run's claim key; every item is called once and succeeds, both
// counters dealt slices, and forget removes both rows.
func TestMaxConcurrencyOnSeveralCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const items, limit = 1000, 100
	id := newID(t)
	req := webhookRequest(id, env.hook.route(id, func(string, int) int { return 200 }), inlineItems(items))
	req.MaxConcurrency, req.ItemsPerMessage = limit, 1
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != items {
		t.Fatalf("status %s, census %+v; want all %d succeeded", v.Status, v.Census, items)
	}
	calls := env.hook.counts(id)
	if len(calls) != items {
		t.Fatalf("receiver saw %d keys, want %d", len(calls), items)
	}
	for k, n := range calls {
		if n != 1 {
			t.Errorf("key %s called %d times, want 1", k, n)
		}
	}
	counter := func(c int) map[string]types.AttributeValue {
		key := map[string]types.AttributeValue{
			config.AttrPK: &types.AttributeValueMemberS{Value: fmt.Sprintf("SLOT#%s#r1#c2.%d", id, c)},
			config.AttrSK: &types.AttributeValueMemberS{Value: "CLAIM"},
		}
		got, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &env.table, Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return got.Item
	}
	for c := range 2 {
		row := counter(c)
		var claims int
		if row != nil {
			if n, ok := row["claims"].(*types.AttributeValueMemberN); ok {
				fmt.Sscan(n.Value, &claims)
			}
		}
		// 234 slices after the tracks' own, 117 to each counter.
		if claims < 117 {
			t.Errorf("counter %d of 2: %d claims answered, want its 117 slices: %v", c, claims, row)
		}
	}
	if err := env.api.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
	for c := range 2 {
		if row := counter(c); row != nil {
			t.Errorf("counter %d of 2 after forget: %v, want gone", c, row)
		}
	}
}
