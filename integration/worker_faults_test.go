//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/internal/queue"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// recordingQueue is the harness queue, remembering every Delay asked for.
type recordingQueue struct {
	ledger.Queue
	mu       sync.Mutex
	delays   []time.Duration
	requeues []time.Duration
}

func (q *recordingQueue) Requeue(ctx context.Context, body []byte, d time.Duration) error {
	q.mu.Lock()
	q.requeues = append(q.requeues, d)
	q.mu.Unlock()
	return q.Queue.Requeue(ctx, body, d)
}

func (q *recordingQueue) Delay(ctx context.Context, receiptHandle string, d time.Duration) error {
	q.mu.Lock()
	q.delays = append(q.delays, d)
	q.mu.Unlock()
	return q.Queue.Delay(ctx, receiptHandle, d)
}

// delivered is one message as the poller would hand it over, kept on the
// queue until the worker acknowledges it.
type delivered struct {
	worker.Delivery
	key string
}

// poll receives up to 10 messages of the harness queue with their
// receive counts, without deleting them.
func (h *harness) poll(t *testing.T) []delivered {
	t.Helper()
	out, err := env.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &h.queueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil {
		t.Fatal(err)
	}
	var ds []delivered
	for _, m := range out.Messages {
		n, _ := strconv.Atoi(m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
		var msg ledger.Message
		_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &msg)
		ds = append(ds, delivered{Delivery: worker.Delivery{MessageID: aws.ToString(m.MessageId), Body: []byte(aws.ToString(m.Body)),
			ReceiptHandle: aws.ToString(m.ReceiptHandle), ReceiveCount: n}, key: msg.Key})
	}
	return ds
}

// handleAndAck runs the deliveries through w and deletes the acknowledged
// ones, as the event source mapping does with a partial batch response.
func (h *harness) handleAndAck(t *testing.T, w *worker.Worker, ds []delivered) (failed []string) {
	t.Helper()
	h2 := h
	in := make([]worker.Delivery, len(ds))
	for i, d := range ds {
		in[i] = d.Delivery
	}
	failed = w.Handle(context.Background(), in)
	for _, d := range ds {
		if !contains(failed, d.MessageID) {
			h := d.ReceiptHandle
			if _, err := env.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(h2.queueURL), ReceiptHandle: &h}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return failed
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestHarnessRetryAfterDelaysTheRetry guards the product line "the worker
// schedules the retry no sooner than Retry-After": a receiver answering
// 429 with Retry-After: 20 gets its item's message back after ≥ 20 s
// (the harness backoff is 0), and the item stays in flight with its retry
// scheduled, not failed. A 429 is throttling: the attempt counts toward no
// max attempts, and its wait is a new message (delayed ≥ 20 s), so it
// counts no receive either.
func TestHarnessRetryAfterDelaysTheRetry(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "20")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	hook := webhook.New(nil, egress.MustParse("127.0.0.1"))
	h := newHarness(t, hook.Run)
	rq := &recordingQueue{Queue: h.queue}
	h.worker.Queue = rq
	id := newID(t)
	opts, _ := json.Marshal(map[string]string{"url": srv.URL})
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Options: opts, Source: api.SourceSpec{Items: inlineItems(1)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1))
	msgs := h.receive(t, 1)
	if failed := h.worker.Handle(ctx, msgs); len(failed) != 0 {
		t.Fatalf("a 429's delivery is acknowledged, its message sent again: failed %v", failed)
	}
	if len(rq.requeues) != 1 || rq.requeues[0] < 20*time.Second || len(rq.delays) != 0 {
		t.Fatalf("messages sent again with delays %v (visibility delays %v), want one of at least 20 s (Retry-After: 20)", rq.requeues, rq.delays)
	}
	it, err := h.store.GetItem(ctx, id, api.PositionalKey(0))
	if err != nil {
		t.Fatal(err)
	}
	if it.Outcome != api.OutcomeInFlight || it.Attempt != 1 || it.RunAttempts != 0 || it.ThrottledSince.IsZero() || !strings.Contains(it.Error, "HTTP 429") || calls.Load() != 1 {
		t.Fatalf("row %+v after one 429 (calls %d), want in flight with its retry scheduled, attempt 1 counted as none", it, calls.Load())
	}
}

// faultProxy starts an in-process faultproxy in front of the emulator with
// cfg and returns an AWS config whose clients go through it.
func faultProxy(t *testing.T, cfg faultproxy.Config) (*faultproxy.Proxy, aws.Config) {
	t.Helper()
	p, err := faultproxy.New(os.Getenv("AWS_ENDPOINT_URL"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Set(cfg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	c := env.aws.Copy()
	c.BaseEndpoint = aws.String(srv.URL)
	return p, c
}

// TestHarnessThrottlingNeverDeadLetters guards the product line "throttling
// and AWS 5xx never dead-letter an item or end it failed". Through the
// fault proxy, DynamoDB answers the batch read with 500s, throttles the
// reservations of two items, and the outcome write of a third, each past
// the SDK's 6 tries. The messages hit before a reservation are sent again
// as new messages (receive count back to 0, no attempt counted), the
// outcome write is tried again in the invocation; every item succeeds with
// one pipeline call and one attempt, and no message is ever received twice
// (a second receive is a step toward the dead-letter queue).
func TestHarnessThrottlingNeverDeadLetters(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(4)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1)) // fan-out, without faults
	// Each rule fires 7 times: one more than the SDK's 6 tries.
	proxy, cfg := faultProxy(t, faultproxy.Config{Seed: 1, Rules: []faultproxy.Rule{
		{Service: "dynamodb", Operations: []string{"GetItem"}, Kind: faultproxy.KindServerError, Rate: 1, Max: 7},
		{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: `"` + api.PositionalKey(1) + `"`, Kind: faultproxy.KindThrottle, Rate: 1, Max: 7},
		{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: `"` + api.PositionalKey(2) + `"`, Kind: faultproxy.KindThrottle, Rate: 1, Max: 7},
		{Service: "dynamodb", Operations: []string{"UpdateItem"}, Contains: `item 3`, Kind: faultproxy.KindThrottle, Rate: 1, Max: 7}, // only its outcome write holds its output
	}})
	w := *h.worker
	w.Store = dynamo.New(dynamodb.NewFromConfig(h.as(cfg, "item")), h.store.Table())
	w.UnavailableDelay = func(int) time.Duration { return 0 }
	maxReceives := map[string]int{}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		ds := h.poll(t)
		for _, d := range ds {
			maxReceives[d.key] = max(maxReceives[d.key], d.ReceiveCount)
		}
		if len(ds) > 0 {
			h.handleAndAck(t, &w, ds)
			continue
		}
		c, err := finalize.CensusOf(ctx, h.store, mustBatch(t, h, id), nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Succeeded == 4 {
			break
		}
	}
	st := proxy.Status()
	for i, n := range st.Fired {
		if n != 7 {
			t.Fatalf("rule %d fired %d times, want 7 (%+v)", i, n, st)
		}
	}
	t.Logf("injected %v", st.ByCall)
	for i := range 4 {
		key := api.PositionalKey(int64(i))
		it, err := h.store.GetItem(ctx, id, key)
		if err != nil {
			t.Fatal(err)
		}
		if it.Outcome != api.OutcomeSucceeded || it.RunAttempts != 1 || h.callsOf(key) != 1 {
			t.Errorf("%s: %s, %d attempts, %d calls; want succeeded, 1, 1", key, it.Outcome, it.RunAttempts, h.callsOf(key))
		}
		if maxReceives[key] > 1 {
			t.Errorf("%s: a message was received %d times: AWS faults brought it toward the dead-letter queue", key, maxReceives[key])
		}
	}
}

// TestHarnessFanOutPartialSendFailures guards the product line "a retried
// SendMessageBatch re-sends only the entries that failed, and a sender
// fault is never retried": through the fault proxy, SendMessageBatch fails
// some entries transiently (taken out before the emulator), then refuses
// some as the sender's fault. Every item gets exactly one message (no
// accepted entry sent twice); refused items are recorded failed with the
// queue's reason at once, and the fan-out is not retried.
func TestHarnessFanOutPartialSendFailures(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	h.submitter.ChunkItems = 0 // one chunk
	id := newID(t)
	const n = 30
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(n)}}); err != nil {
		t.Fatal(err)
	}
	fan := h.receive(t, 1)
	proxy, cfg := faultProxy(t, faultproxy.Config{Seed: 7, Rules: []faultproxy.Rule{
		{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindPartial, Rate: 1, Max: 2, Fraction: 0.5},
		{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindPartial, Rate: 1, Max: 1, Fraction: 0.3,
			SenderFault: true, Code: "InvalidMessageContents", Message: "Invalid binary character"},
	}})
	w := *h.worker
	w.Queue = queue.New(sqs.NewFromConfig(h.as(cfg, "item")), h.queueURL)
	if failed := w.Handle(ctx, fan); len(failed) != 0 {
		t.Fatalf("the fan-out must not be retried: %v", failed)
	}
	st := proxy.Status()
	if st.Fired[0] != 2 || st.Fired[1] != 1 {
		t.Fatalf("faults fired %v, want 2 transient and 1 sender fault", st.Fired)
	}
	msgs := h.receive(t, n)
	perKey := map[string]int{}
	for _, d := range msgs {
		var m ledger.Message
		_ = json.Unmarshal(d.Body, &m)
		perKey[m.Key]++
	}
	var refused []ledger.Item
	_ = h.store.ScanItems(ctx, id, mustBatch(t, h, id).ListShards, func(it ledger.Item) error {
		refused = append(refused, it)
		return nil
	})
	if len(refused) == 0 {
		t.Fatal("no item was recorded refused")
	}
	for _, it := range refused {
		if it.Outcome != api.OutcomeFailed || it.Reason != api.ReasonPermanent || !strings.Contains(it.Error, "InvalidMessageContents") || perKey[it.Key] != 0 {
			t.Errorf("refused item %s: %+v, %d messages; want failed permanent with the queue's reason and no message", it.Key, it, perKey[it.Key])
		}
	}
	for i := range n {
		key := api.PositionalKey(int64(i))
		if perKey[key] > 1 {
			t.Errorf("%s: %d messages: an accepted entry was sent again", key, perKey[key])
		}
		if perKey[key] == 0 && !slices.ContainsFunc(refused, func(it ledger.Item) bool { return it.Key == key }) {
			t.Errorf("%s: no message and no outcome: lost", key)
		}
	}
	if failed := h.worker.Handle(ctx, msgs); len(failed) != 0 {
		t.Fatal(failed)
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Report.Census.Succeeded+r.Report.Census.Failed != n || r.Report.Census.Failed != int64(len(refused)) {
		t.Fatalf("census %+v with %d refused", r.Report.Census, len(refused))
	}
}

// TestHarnessFanOutResendsOnlyUnsent guards "a SendMessageBatch that
// still fails some entries after its retries sends again only the entries
// not accepted": through the fault proxy, every SendMessageBatch of a
// chunk's fan-out fails some of its entries on every one of its 8 tries,
// so the send gives up with some entries unsent. The fan-out message is
// sent again (AWS unavailable) carrying what is on the queue, and its
// next delivery sends only the rest: every item gets exactly one message,
// none of the accepted ones a second.
func TestHarnessFanOutResendsOnlyUnsent(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	h.submitter.ChunkItems = 0 // one chunk
	id := newID(t)
	const n = 20 // two SendMessageBatch calls of 10
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(n)}}); err != nil {
		t.Fatal(err)
	}
	fan := h.receive(t, 1)
	const tries = 2 * queue.MaxSendTries // each call's every try fails some entries
	proxy, cfg := faultProxy(t, faultproxy.Config{Seed: 3, Rules: []faultproxy.Rule{
		{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindPartial, Rate: 1, Max: tries, Fraction: 0.3},
	}})
	w := *h.worker
	w.Queue = queue.New(sqs.NewFromConfig(h.as(cfg, "item")), h.queueURL)
	w.UnavailableDelay = func(int) time.Duration { return 0 }
	if failed := w.Handle(ctx, fan); len(failed) != 0 {
		t.Fatalf("the fan-out message must be sent again, not left to the queue: %v", failed)
	}
	if st := proxy.Status(); st.Fired[0] != tries {
		t.Fatalf("partial failures fired %d times, want %d", st.Fired[0], tries)
	}
	perKey := map[string]int{}
	var again []worker.Delivery
	for _, d := range h.receive(t, n+1) {
		var m ledger.Message
		_ = json.Unmarshal(d.Body, &m)
		if m.Kind == ledger.KindFanout {
			if m.Sent == nil || len(m.Sent.Unsent) == 0 {
				t.Fatalf("the fan-out sent again carries no sent mark: %s", d.Body)
			}
			again = append(again, d)
			continue
		}
		perKey[m.Key]++
	}
	if len(again) != 1 || len(perKey) == n {
		t.Fatalf("%d fan-out messages sent again, %d items sent; want 1 and some items unsent", len(again), len(perKey))
	}
	if failed := w.Handle(ctx, again); len(failed) != 0 {
		t.Fatalf("the fan-out's second delivery: %v", failed)
	}
	for _, d := range h.receive(t, n) {
		var m ledger.Message
		_ = json.Unmarshal(d.Body, &m)
		perKey[m.Key]++
	}
	for i := range n {
		key := api.PositionalKey(int64(i))
		if perKey[key] != 1 {
			t.Errorf("%s: %d messages, want 1 (an accepted entry sent again, or one lost)", key, perKey[key])
		}
	}
}

func mustBatch(t *testing.T, h *harness, id string) ledger.Batch {
	t.Helper()
	b, err := h.store.GetBatch(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHarnessRefusedCharactersTravel guards the product line "every valid
// manifest line travels": keys and inputs holding U+FFFF (raw, and escaped
// as \uffff in the source) and U+FFFE, which SQS refuses in a message
// (the emulator refuses them too, as a sender fault), reach the pipeline
// with the same key and an input of the same value, and every item
// succeeds.
func TestHarnessRefusedCharactersTravel(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string]string{} // key → input the pipeline saw, re-encoded
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		var v any
		if err := json.Unmarshal(req.Input, &v); err != nil {
			return pipeline.Result{}, pipeline.Permanent(err)
		}
		b, _ := json.Marshal(v)
		mu.Lock()
		seen[req.Key] = string(b)
		mu.Unlock()
		return pipeline.Result{Output: req.Input}, nil
	})
	items := "[" + strings.Join([]string{
		"{\"id\":\"raw-\uffff\",\"v\":\"a\uffffb\"}",
		`{"id":"esc-\uffff","v":"c\uffffd"}`,
		"{\"id\":\"fffe-\ufffe\",\"v\":[\"\ufffe\",\"\uffff\"]}",
		`{"id":"plain","v":"é"}`,
	}, ",") + "]"
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "id", Source: api.SourceSpec{Items: json.RawMessage(items)}}); err != nil {
		t.Fatal(err)
	}
	if failed := h.worker.Handle(ctx, h.receive(t, 1)); len(failed) != 0 {
		t.Fatalf("fan-out failed: %v", failed)
	}
	if failed := h.worker.Handle(ctx, h.receive(t, 4)); len(failed) != 0 {
		t.Fatalf("items failed: %v", failed)
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Report.Census.Succeeded != 4 {
		t.Fatalf("census %+v, want 4 succeeded", r.Report.Census)
	}
	var src []map[string]any
	if err := json.Unmarshal([]byte(items), &src); err != nil {
		t.Fatal(err)
	}
	for _, it := range src {
		want, _ := json.Marshal(it)
		if got := seen[it["id"].(string)]; got != string(want) {
			t.Errorf("key %q: pipeline saw %s, want %s", it["id"], got, want)
		}
	}
}

// TestHarnessInterruptAtDeadlineQuarantines guards the product line "a call
// cut off at the deadline is an interruption": with on_interrupt
// quarantine, a pipeline call still running at the invocation's deadline
// margin is cut off and the item is quarantined (reason interrupted),
// never run again as a transient retry.
func TestHarnessInterruptAtDeadlineQuarantines(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		<-ctx.Done() // a call that outlives the invocation
		return pipeline.Result{}, fmt.Errorf("POST: %w", ctx.Err())
	})
	h.worker.Margin = 2 * time.Second
	for _, policy := range []api.InterruptPolicy{api.InterruptQuarantine, api.InterruptRetry} {
		id := newID(t)
		if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", OnInterrupt: policy, Source: api.SourceSpec{Items: inlineItems(1)}}); err != nil {
			t.Fatal(err)
		}
		h.worker.Handle(ctx, h.receive(t, 1))
		msgs := h.receive(t, 1)
		inv, cancel := context.WithTimeout(ctx, h.worker.Margin+500*time.Millisecond)
		failed := h.worker.Handle(inv, msgs)
		cancel()
		it, err := h.store.GetItem(ctx, id, api.PositionalKey(0))
		if err != nil {
			t.Fatal(err)
		}
		switch policy {
		case api.InterruptQuarantine:
			if len(failed) != 0 || it.Outcome != api.OutcomeQuarantined || it.Reason != api.ReasonInterrupted || !strings.Contains(it.Error, "interrupted") {
				t.Fatalf("quarantine policy: row %+v, failed %v; want quarantined, reason interrupted, acknowledged", it, failed)
			}
		case api.InterruptRetry:
			if len(failed) != 1 || it.Outcome != api.OutcomeInFlight {
				t.Fatalf("retry policy: row %+v, failed %v; want in flight with a retry", it, failed)
			}
		}
	}
}

// TestHarnessDeadLetteredChunkSparesScheduledRetries guards the product
// line "a dead-lettered fan-out chunk settles only items without their own
// message": an item of the chunk waiting for a scheduled retry keeps its
// attempts and later succeeds; an item never reserved is recorded failed,
// dead-lettered.
func TestHarnessDeadLetteredChunkSparesScheduledRetries(t *testing.T) {
	ctx := context.Background()
	var once atomic.Bool
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if req.Key == api.PositionalKey(0) && !once.Swap(true) {
			return pipeline.Result{}, errors.New("HTTP 503")
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(2)}}); err != nil {
		t.Fatal(err)
	}
	fan := h.receive(t, 1)
	h.worker.Handle(ctx, fan)
	msgs := h.receive(t, 2)
	var first []worker.Delivery // item 0's message
	for _, d := range msgs {
		var m ledger.Message
		_ = json.Unmarshal(d.Body, &m)
		if m.Key == api.PositionalKey(0) {
			first = append(first, d)
		}
	}
	if failed := h.worker.Handle(ctx, first); len(failed) != 1 {
		t.Fatalf("item 0's transient error must schedule a retry: %v", failed)
	}
	// The chunk's fan-out message arrives from the dead-letter queue.
	fan[0].DeadLetter, fan[0].ReceiveCount = true, 10
	if failed := h.worker.Handle(ctx, fan); len(failed) != 0 {
		t.Fatalf("dead-lettered chunk not acknowledged: %v", failed)
	}
	it0, _ := h.store.GetItem(ctx, id, api.PositionalKey(0))
	it1, _ := h.store.GetItem(ctx, id, api.PositionalKey(1))
	if it0.Outcome != api.OutcomeInFlight || it0.RunAttempts != 1 {
		t.Fatalf("item 0 waiting for its retry became %+v", it0)
	}
	if it1.Outcome != api.OutcomeFailed || it1.Reason != api.ReasonDeadLettered {
		t.Fatalf("item 1 without a row: %+v, want failed, dead-lettered", it1)
	}
	// Item 0's retry runs and succeeds.
	if failed := h.worker.Handle(ctx, first); len(failed) != 0 {
		t.Fatalf("retry of item 0: %v", failed)
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Report.Census.Succeeded != 1 || r.Report.Census.Failed != 1 || h.callsOf(api.PositionalKey(0)) != 2 {
		t.Fatalf("census %+v, calls of item 0 %d", r.Report.Census, h.callsOf(api.PositionalKey(0)))
	}
}

// TestHarnessHugeErrorIsRecorded guards the bounded-texts product line: a
// pipeline error of 400 KB, and a panic with a 400 KB value, end their
// items failed with the right reason and the text cut to
// pipeline.MaxErrorTextBytes at a UTF-8 boundary — on the row, in the
// listing and in the results — instead of failing the outcome write
// (DynamoDB's 400 KB item limit) and looping to the dead-letter queue.
func TestHarnessHugeErrorIsRecorded(t *testing.T) {
	ctx := context.Background()
	huge := "bad input: " + strings.Repeat("ü", 200<<10) // 400 KiB of two-byte runes
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		switch req.Key {
		case api.PositionalKey(0):
			return pipeline.Result{}, pipeline.Permanent(errors.New(huge))
		case api.PositionalKey(1):
			panic(huge)
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	id := newID(t)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 1, Source: api.SourceSpec{Items: inlineItems(3)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, 1))
	if failed := h.worker.Handle(ctx, h.receive(t, 3)); len(failed) != 0 {
		t.Fatalf("outcomes not recorded: %v", failed)
	}
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Report.Census.Failed != 2 || r.Report.Census.Succeeded != 1 {
		t.Fatalf("census %+v", r.Report.Census)
	}
	p, err := h.control().Items(ctx, id, api.OutcomeFailed, "", 10)
	if err != nil || len(p.Items) != 2 {
		t.Fatalf("failed listing: %d items, %v", len(p.Items), err)
	}
	want := map[string]struct {
		reason api.Reason
		head   string
	}{
		api.PositionalKey(0): {api.ReasonPermanent, "bad input: üü"},
		api.PositionalKey(1): {api.ReasonMaxAttempts, "attempt 1 of 1: pipeline panicked: bad input: üü"},
	}
	for _, it := range p.Items {
		w := want[it.Key]
		if it.Reason != w.reason || len(it.Error) > pipeline.MaxErrorTextBytes || !utf8.ValidString(it.Error) ||
			!strings.HasPrefix(it.Error, w.head) || !strings.Contains(it.Error, "bytes cut]") {
			t.Errorf("%s: reason %s, %d bytes of error %.60q…; want %s, at most %d bytes, valid UTF-8, starting %q, cut", it.Key, it.Reason, len(it.Error), it.Error, w.reason, pipeline.MaxErrorTextBytes, w.head)
		}
	}
	res, err := h.blobs.Get(ctx, strings.TrimPrefix(r.Report.Results.Files[api.OutcomeFailed].URI, "s3://"+h.blobs.Bucket()+"/"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(res), []byte("\n")) {
		var l api.ResultLine
		if err := json.Unmarshal(line, &l); err != nil || len(l.Error) > pipeline.MaxErrorTextBytes {
			t.Errorf("results line of %d bytes with an error of %d: %v", len(line), len(l.Error), err)
		}
	}
}
