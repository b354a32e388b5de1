//go:build integration

package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/shared/api"
)

// fairShareStack skips t unless BULKRUN_FAIR_SHARE=1: the fair share
// tests run on a stack whose item event source runs at most 3
// invocations at once (make fair-share deploys it so; .ci/run runs it).
// At the stack's default of 100 the emulator takes in up to 1,000
// messages at once, far more than a 2-core machine runs, so every
// message waits about as long whatever order the queue hands them out
// in (measured: the small batch ended with the large one, fair queues
// or not); on AWS each invocation has its own share of CPU.
func fairShareStack(t *testing.T) {
	t.Helper()
	if os.Getenv("BULKRUN_FAIR_SHARE") != "1" {
		t.Skip("run by make fair-share: a stack whose item event source runs 3 invocations at once (BULKRUN_FAIR_SHARE=1)")
	}
}

// TestPriorityShareOnTheStack measures a batch's priority (docs/api.md,
// "Priority") on the deployed stack, the emulator delivering as fair
// queues do: two batches of 1,000 webhook items, one a message, at
// priorities 3 and 1, submitted together (the priority-1 batch first).
// The priority-3 batch's
// messages go in 3 message groups, the other's in one, so that while
// both have a backlog the first counts as 3 tenants: it makes at least
// 60 % of the two batches' calls until one of them has every item
// called (3 shares of 4 are 75 %; groups too little in flight to be
// noisy go first, up to all of it; with BULKRUN_SQS_FAIR=0, 50.0 %
// measured). The share is logged; every item of both is called once.
// It comes first in this file, so that `make fair-share` runs it on the
// stack it has just deployed: run right after TestFairShareOnTheStack's
// batches it measured 52.9–65.3 % (5 runs), alone on the same emulator
// 62.9–76.4 % (9 runs); what carries over was not found.
func TestPriorityShareOnTheStack(t *testing.T) {
	fairShareStack(t)
	ctx := context.Background()
	const n = 1000
	ids := [2]string{newID(t), newID(t)}
	for _, i := range []int{1, 0} { // the priority-1 batch first: the other starts no earlier
		req := webhookRequest(ids[i], env.hook.route(ids[i], nil), inlineItems(n))
		p := 3 - 2*i
		req.ItemsPerMessage, req.Priority = 1, p
		if _, err := env.api.Submit(ctx, req); err != nil {
			t.Fatalf("submit at priority %d: %v", p, err)
		}
	}
	var high, low int
	deadline := time.Now().Add(3 * time.Minute)
	for {
		high, low = len(env.hook.counts(ids[0])), len(env.hook.counts(ids[1]))
		if high == n || low == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes %d and %d of %d items called", high, low, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	share := float64(high) / float64(high+low)
	if share < 0.6 {
		t.Errorf("priority 3 made %d of the %d calls until one batch had every item called (%.1f %%), want at least 60 %%", high, high+low, 100*share)
	}
	t.Logf("priority 3: %d calls, priority 1: %d, until one batch had all %d called: %.1f %% to priority 3", high, low, n, 100*share)
	for _, id := range ids {
		v := wait(t, id)
		if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != n {
			t.Errorf("%s: status %s, census %+v: want completed, %d succeeded", id, v.Status, v.Census, n)
		}
		calls := env.hook.counts(id)
		for j := range n {
			if c := calls[api.PositionalKey(int64(j))]; c != 1 {
				t.Errorf("%s: item %d called %d times, want once", id, j, c)
			}
		}
	}
}

// TestFairShareOnTheStack guards the fair share between batches
// (docs/adr/0037) on the deployed stack, with the emulator delivering
// as SQS fair queues do (localstack/delivery.py; BULKRUN_SQS_FAIR=0
// turns them off): a batch of 50 webhook items, one a message,
// submitted once a large batch has its backlog on the items queue
// runs ahead of that backlog. Each batch sends its messages in its own
// message group, so the large batch, holding most of the messages in
// flight, is a noisy tenant and the small batch's messages are handed
// out first: it ends while more than a third of the large batch's
// items have not been called. In the queue's order without groups (a
// draw among all visible messages), its last message would come near
// the backlog's end. Every item of both is called once. The small
// batch's time from submit to end is logged beside the same batch run
// alone just before (issue 30's goal: at most twice): its first and
// last calls by the receiver's clock and its end by its own record
// (finished_at − created_at), not by the 0.5 s steps of the poll that
// waits for it.
//
// It runs twice. With a receiver that answers at once (3,000 items
// behind), the large batch's invocations keep the machine's two cores
// busy (the emulator, each invocation a local process, the receiver),
// so every step of the small batch (its submit, its fan-out, its
// finalize) waits for a core as well as for the queue: on AWS each
// invocation has a CPU of its own. With a receiver that takes 400 ms a
// call, as a downstream does (1,500 items behind; about 60 calls a
// second through the 3 invocations of 10 messages), the cores are not
// the bound and what is measured is the queue's order and the wait for
// a free invocation.
func TestFairShareOnTheStack(t *testing.T) {
	fairShareStack(t)
	t.Run("instant receiver", func(t *testing.T) { fairShare(t, 3000, 0) })
	t.Run("receiver taking 400 ms", func(t *testing.T) { fairShare(t, 1500, 400*time.Millisecond) })
}

// fairShare runs the 50-item batch alone, then behind a batch of large
// items, every call answered after latency.
func fairShare(t *testing.T, large int, latency time.Duration) {
	ctx := context.Background()
	const small = 50
	answer := func(string, int) int {
		time.Sleep(latency)
		return 200
	}
	// run submits n items and returns the batch's ID, when its submit
	// was sent and how long the submit call took.
	run := func(n int) (string, time.Time, time.Duration) {
		id := newID(t)
		req := webhookRequest(id, env.hook.route(id, answer), inlineItems(n))
		req.ItemsPerMessage = 1
		start := time.Now()
		if _, err := env.api.Submit(ctx, req); err != nil {
			t.Fatalf("submit %d items: %v", n, err)
		}
		return id, start, time.Since(start)
	}
	check := func(id string, n int) handler.BatchView {
		t.Helper()
		v := wait(t, id)
		if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != int64(n) {
			t.Errorf("batch of %d: status %s, census %+v: want completed, %d succeeded", n, v.Status, v.Census, n)
		}
		calls := env.hook.counts(id)
		for j := range n {
			if c := calls[api.PositionalKey(int64(j))]; c != 1 {
				t.Errorf("batch of %d: item %d called %d times, want once", n, j, c)
			}
		}
		return v
	}
	// timing is a small batch's times from its submit: its first and
	// last calls by the receiver's clock, and its end by the batch's own
	// record (finished_at − created_at, the stack's clock: the poll's
	// 0.5 s steps do not enter it).
	type timing struct{ submit, first, last, end time.Duration }
	timed := func(id string, start time.Time, submit time.Duration, v handler.BatchView) timing {
		first, last := env.hook.callSpan(id)
		return timing{submit: submit, first: first.Sub(start), last: last.Sub(start), end: v.FinishedAt.Sub(v.CreatedAt)}
	}
	aloneID, aloneStart, aloneSubmit := run(small)
	alone := timed(aloneID, aloneStart, aloneSubmit, check(aloneID, small))

	largeID, _, _ := run(large)
	deadline := time.Now().Add(2 * time.Minute)
	for len(env.hook.counts(largeID)) < 300 {
		if time.Now().After(deadline) {
			t.Fatalf("the large batch had %d calls after 2 minutes, want 300 before the small one is submitted", len(env.hook.counts(largeID)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := len(env.hook.counts(largeID))
	smallID, smallStart, smallSubmit := run(small)
	behind := timed(smallID, smallStart, smallSubmit, check(smallID, small))
	called := len(env.hook.counts(largeID))
	if called > 2*large/3 {
		t.Errorf("the small batch ended once %d of the large batch's %d items were called (%d when it was submitted): want it ahead of the backlog, before two thirds", called, large, before)
	}
	if alone.end <= 0 || behind.end <= 0 {
		t.Errorf("a finished batch without its times: alone %+v, behind %+v", alone, behind)
	}
	s := func(d time.Duration) float64 { return d.Seconds() }
	t.Logf("receiver answering in %v; 50 items from submit, alone: submit call %.2f s, first call %.2f s, last call %.2f s, end %.2f s; behind %d items (%d called at its submit, %d at its end): submit call %.2f s, first call %.2f s, last call %.2f s, end %.2f s (%.1f× alone)",
		latency, s(alone.submit), s(alone.first), s(alone.last), s(alone.end), large, before, called, s(behind.submit), s(behind.first), s(behind.last), s(behind.end), s(behind.end)/s(alone.end))
	check(largeID, large)
}
