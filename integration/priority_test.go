//go:build integration

package integration

import (
	"context"
	"errors"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// TestPriorityOnTheStack guards a batch's priority (docs/api.md,
// "Priority") on the deployed stack: batches of priorities 3 (one item a
// message, and ten), 2 (with max_concurrency, on tracks) and 1 run
// together, their messages sent in their message groups (the batch's ID
// and .0 … .{P−1}) through the queue service: every item of each is
// called once and succeeds, the batch view shows the priority asked for,
// and a repeated submit with another priority is 409 naming priority.
// The share each gets is the fair queues': TestPriorityShareOnTheStack
// measures it on the emulator (localstack/delivery.py applies the fair
// queues' rule), TestFairQueueGivesPriorityItsShare in the flow test
// bed's model.
func TestPriorityOnTheStack(t *testing.T) {
	ctx := context.Background()
	type run struct {
		id                    string
		n, k, priority, limit int
	}
	runs := []run{{n: 120, k: 1, priority: 3}, {n: 120, k: 10, priority: 3}, {n: 40, k: 1, priority: 2, limit: 4}, {n: 120, k: 10, priority: 0}}
	urls := make([]string, len(runs))
	for i := range runs {
		runs[i].id = newID(t)
		urls[i] = env.hook.route(runs[i].id, nil)
		req := webhookRequest(runs[i].id, urls[i], inlineItems(runs[i].n))
		req.ItemsPerMessage, req.Priority, req.MaxConcurrency = runs[i].k, runs[i].priority, runs[i].limit
		if _, err := env.api.Submit(ctx, req); err != nil {
			t.Fatalf("submit %+v: %v", runs[i], err)
		}
	}
	for i, r := range runs {
		v := wait(t, r.id)
		if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != int64(r.n) {
			t.Errorf("%+v: status %s, census %+v: want completed, %d succeeded", r, v.Status, v.Census, r.n)
		}
		if v.Priority != r.priority {
			t.Errorf("%+v: the batch view's priority %d, want %d", r, v.Priority, r.priority)
		}
		calls := env.hook.counts(r.id)
		for j := range r.n {
			if c := calls[api.PositionalKey(int64(j))]; c != 1 {
				t.Errorf("%+v: item %d called %d times, want once", r, j, c)
			}
		}
		t.Logf("batch %d (%d items, %d a message, priority %d, max_concurrency %d): %d succeeded, %d keys called", i, r.n, r.k, r.priority, r.limit, v.Census.Succeeded, len(calls))
	}
	r := runs[0]
	req := webhookRequest(r.id, urls[0], inlineItems(r.n))
	req.ItemsPerMessage, req.Priority = r.k, 2
	_, err := env.api.Submit(ctx, req)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Body.Field != "priority" {
		t.Errorf("a repeated submit at priority 2 of a batch at 3: %v, want 409 naming priority", err)
	}
	req.Priority = api.MaxPriority + 1
	req.BatchID = newID(t)
	_, err = env.api.Submit(ctx, req)
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "priority" {
		t.Errorf("priority %d: %v, want 400 naming priority", api.MaxPriority+1, err)
	}
}
