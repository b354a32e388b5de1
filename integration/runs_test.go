//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// A rerun runs only what did not succeed: 3 succeeded + 1 failed → one call.
func TestResumeRunsOnlyWhatDidNotSucceed(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	var healed atomic.Bool
	url := env.hook.route(id, func(key string, _ int) int {
		if key == api.PositionalKey(2) && !healed.Load() {
			return 422
		}
		return 200
	})
	req := webhookRequest(id, url, inlineItems(4))
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Census.Succeeded != 3 || v.Census.Failed != 1 {
		t.Fatalf("run 1: %+v", v.Census)
	}
	var ae *client.APIError
	if _, err := env.api.Resume(ctx, newID(t)); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("resume of an unknown batch: %v, want 404", err)
	}
	healed.Store(true)
	before := env.hook.counts(id)
	r, err := env.api.Resume(ctx, id)
	if err != nil || r.Run != 2 || r.Status != api.StatusRunning {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if _, err := env.api.Resume(ctx, id); err != nil && (!errors.As(err, &ae) || ae.Status != 409) {
		t.Fatalf("resume while running: %v, want 409", err)
	}
	v = wait(t, id)
	if v.Run != 2 || v.Census.Succeeded != 4 || v.Census.Failed != 0 || v.Status != api.StatusCompleted {
		t.Fatalf("run 2: run %d %s %+v", v.Run, v.Status, v.Census)
	}
	after := env.hook.counts(id)
	extra := 0
	for k, n := range after {
		extra += n - before[k]
		if k != api.PositionalKey(2) && n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
	}
	if extra != 1 {
		t.Fatalf("the rerun called the pipeline %d times, want 1", extra)
	}
	// Each run has its own report.
	for run := 1; run <= 2; run++ {
		if _, err := env.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &env.bucket, Key: aws.String(api.ReportKey(id, run))}); err != nil {
			t.Errorf("report of run %d: %v", run, err)
		}
	}
	// A plain duplicate submit starts nothing; nor does rerun:true, as
	// everything succeeded (answered as it stands; a resume is refused).
	dup, err := env.api.Submit(ctx, req)
	if err != nil || dup.Run != 2 || *dup.Created {
		t.Fatalf("duplicate submit: %+v %v", dup, err)
	}
	req.Rerun = true
	if again, err := env.api.Submit(ctx, req); err != nil || again.Run != 2 || *again.Created {
		t.Fatalf("rerun of a batch whose every item succeeded: %+v %v; want run 2 as it stands", again, err)
	}
	if _, err := env.api.Resume(ctx, id); !errors.As(err, &ae) || ae.Status != 409 {
		t.Fatalf("resume of a batch whose every item succeeded: %v, want 409", err)
	}
	v = wait(t, id)
	if v.Run != 2 || v.Census.Succeeded != 4 {
		t.Fatalf("after the rerun: %+v", v)
	}
	total := 0
	for _, n := range env.hook.counts(id) {
		total += n
	}
	if total != 5 {
		t.Fatalf("%d pipeline calls over 2 runs, want 5", total)
	}
}

// Once failures exceed the threshold, items not yet started end cancelled
// and the batch ends threshold_exceeded, saying which limit and by how much.
func TestThresholdStopsTheRun(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, func(string, int) int { time.Sleep(10 * time.Millisecond); return 422 })
	req := webhookRequest(id, url, inlineItems(300))
	two := int64(2)
	req.Threshold.FailureCount = &two
	// One item per message: the early stop acts between message batches,
	// and 300 items in packs of 10 are one wave on the emulator, all taken
	// before the first failures are counted (docs/design/items.md, "Item
	// packing").
	req.ItemsPerMessage = 1
	// At most 5 items at once: the fan-out sends every message within
	// milliseconds and the emulator's pollers would otherwise take and
	// start all 300 before the third failure is counted, leaving no item
	// not yet started to cancel (as Lambda's scaling can on AWS).
	req.MaxConcurrency = 5
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Census
	if rep.Status != api.StatusThresholdExceeded || v.Status != api.StatusThresholdExceeded || c.Failed+c.Cancelled != 300 || c.Failed <= 2 || c.Cancelled == 0 {
		t.Fatalf("status %s census %+v", rep.Status, c)
	}
	if !rep.Verdict.Exceeded || rep.Verdict.Limit != "tolerated_failure_count" || !strings.Contains(rep.Verdict.Detail, "> 2 tolerated") {
		t.Fatalf("verdict %+v", rep.Verdict)
	}
	calls := 0
	for _, n := range env.hook.counts(id) {
		calls += n
	}
	if int64(calls) != c.Failed {
		t.Fatalf("%d calls for %d failed items", calls, c.Failed)
	}
}

// Cancel stops a running batch: started items finish, the rest end
// cancelled, and the run ends cancelled. A worker sees the cancel within
// worker.StopCheck (1 s) of its record, so the batch is 1,000 items of
// 30 ms: 300 ended within about a second of their submit on a quiet
// machine, none of them left to cancel.
func TestCancelStopsTheRun(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	const n = 1000
	url := env.hook.route(id, func(string, int) int { time.Sleep(30 * time.Millisecond); return 200 })
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(n))); err != nil {
		t.Fatal(err)
	}
	b, err := env.api.Cancel(ctx, id)
	if err != nil || b.Stop != api.StatusCancelled {
		t.Fatalf("cancel: %+v %v", b, err)
	}
	v := wait(t, id)
	c := *v.Census
	if v.Status != api.StatusCancelled || c.Succeeded+c.Cancelled != n || c.Cancelled == 0 {
		t.Fatalf("status %s census %+v", v.Status, c)
	}
	calls := 0
	for _, n := range env.hook.counts(id) {
		calls += n
	}
	if int64(calls) != c.Succeeded {
		t.Fatalf("%d calls for %d succeeded items", calls, c.Succeeded)
	}
	// Cancel is idempotent: a finished batch is answered as it ended.
	if v, err := env.api.Cancel(ctx, id); err != nil || v.Status != api.StatusCancelled || v.Run != 1 {
		t.Fatalf("cancel of a finished batch: %+v %v, want it as it ended", v.Batch, err)
	}
}

// The failed items page in key order, without the successes.
func TestListFailedItemsPages(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, func(key string, _ int) int {
		var n int
		fmt.Sscanf(key, "item-%d", &n)
		if n%3 == 0 {
			return 400
		}
		return 200
	})
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(36))); err != nil {
		t.Fatal(err)
	}
	wait(t, id)
	var keys []string
	cursor := ""
	pages := 0
	for {
		p, err := env.api.Items(ctx, id, api.OutcomeFailed, cursor, 5)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, it := range p.Items {
			if it.Outcome != api.OutcomeFailed || !strings.Contains(it.Error, "HTTP 400") {
				t.Fatalf("listed %+v", it)
			}
			keys = append(keys, it.Key)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	var want []string
	for i := 0; i < 36; i += 3 {
		want = append(want, api.PositionalKey(int64(i)))
	}
	if strings.Join(keys, ",") != strings.Join(want, ",") || pages != 3 {
		t.Fatalf("listed %v in %d pages, want %v in 3", keys, pages, want)
	}
	var ae *client.APIError
	if _, err := env.api.Items(ctx, id, api.OutcomeSucceeded, "", 0); !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "outcome" {
		t.Fatalf("listing succeeded items: %v, want 400 on outcome", err)
	}
}

// Forget removes rows, manifest, outputs, results and report; the id can
// then be submitted afresh.
func TestForgetRemovesEverything(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, nil)
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(12))); err != nil {
		t.Fatal(err)
	}
	wait(t, id)
	if err := env.api.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := env.api.Status(ctx, id); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("status after forget: %v", err)
	}
	out, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String(api.BatchesPrefix(id))})
	if err != nil || len(out.Contents) != 0 {
		t.Fatalf("%d objects left (%v)", len(out.Contents), err)
	}
	var start map[string]types.AttributeValue
	for {
		page, err := env.ddb.Scan(ctx, &dynamodb.ScanInput{TableName: &env.table, ExclusiveStartKey: start})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			pk := it["pk"].(*types.AttributeValueMemberS).Value
			sk := it["sk"].(*types.AttributeValueMemberS).Value
			if strings.Contains(pk, id) || strings.Contains(sk, id) {
				t.Errorf("row left: %s %s", pk, sk)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	// The id starts from nothing: another manifest is accepted.
	v, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(2)))
	if err != nil || !*v.Created || v.ItemCount != 2 {
		t.Fatalf("submit after forget: %+v %v", v, err)
	}
	wait(t, id)
	if err := env.api.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// A finished run announces itself on EventBridge (source bulkrun).
func TestCompletionEvent(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	qname := strings.ToLower(id)
	q, err := env.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &qname})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	attrs, err := env.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	eb := eventbridge.NewFromConfig(env.aws)
	pattern, _ := json.Marshal(map[string]any{"source": []string{api.EventSource}, "detail": map[string]any{"batch_id": []string{id}}})
	rule := qname
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: &rule, EventPattern: aws.String(string(pattern))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.DeleteRule(context.Background(), &eventbridge.DeleteRuleInput{Name: &rule, Force: true}) })
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: &rule, Targets: []ebtypes.Target{{Id: aws.String("q"), Arn: aws.String(attrs.Attributes["QueueArn"])}}}); err != nil {
		t.Fatal(err)
	}
	url := env.hook.route(id, func(key string, _ int) int {
		if key == api.PositionalKey(1) {
			return 404
		}
		return 200
	})
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(3))); err != nil {
		t.Fatal(err)
	}
	wait(t, id)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := env.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			var kind struct {
				DetailType string `json:"detail-type"`
			}
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &kind); err != nil {
				t.Fatalf("event %s: %v", aws.ToString(m.Body), err)
			}
			if kind.DetailType == api.DetailStateChange {
				continue // the batch's state changes (TestStateChangeEventsOnTheBus)
			}
			var ev struct {
				Source     string       `json:"source"`
				DetailType string       `json:"detail-type"`
				Detail     event.Detail `json:"detail"`
			}
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
				t.Fatalf("event %s: %v", aws.ToString(m.Body), err)
			}
			if ev.Source != api.EventSource || ev.DetailType != api.DetailCompleted || ev.Detail.BatchID != id ||
				ev.Detail.Census.Succeeded != 2 || ev.Detail.Census.Failed != 1 || !ev.Detail.NeedsAttention ||
				!strings.HasPrefix(ev.Detail.EventID, id+":1:") {
				t.Fatalf("event %+v", ev)
			}
			return
		}
	}
	t.Fatal("no completion event within 30 s")
}

// Two batches with the same keys, running at the same time, never share
// state: each runs its own items once and counts only its own.
func TestConcurrentBatchesWithSameKeys(t *testing.T) {
	ctx := context.Background()
	a, b := newID(t), newID(t)
	urlA := env.hook.route(a, nil)
	urlB := env.hook.route(b, func(key string, _ int) int {
		if key == api.PositionalKey(0) {
			return 400
		}
		return 200
	})
	if _, err := env.api.Submit(ctx, webhookRequest(a, urlA, inlineItems(20))); err != nil {
		t.Fatal(err)
	}
	if _, err := env.api.Submit(ctx, webhookRequest(b, urlB, inlineItems(20))); err != nil {
		t.Fatal(err)
	}
	va, vb := wait(t, a), wait(t, b)
	if va.Census.Succeeded != 20 || vb.Census.Succeeded != 19 || vb.Census.Failed != 1 {
		t.Fatalf("a %+v, b %+v", va.Census, vb.Census)
	}
	for _, id := range []string{a, b} {
		calls := env.hook.counts(id)
		if len(calls) != 20 {
			t.Fatalf("%s: %d keys called", id, len(calls))
		}
		for k, n := range calls {
			if n != 1 {
				t.Errorf("%s %s: %d calls", id, k, n)
			}
		}
	}
}
