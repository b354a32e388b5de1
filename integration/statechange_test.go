//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/integration/testbed/eventschema"
	"github.com/bulkrun/bulkrun/shared/api"
)

// stateChanges routes the Batch State Change events of the batches ids
// from the default bus to a new queue (an EventBridge rule with an SQS
// target, as a subscriber would), and returns a function that collects
// what arrived until done says every expected event is there (limit at
// most); each event's detail is returned as delivered, with its envelope.
func stateChanges(t *testing.T, name string, ids ...string) func(limit time.Duration, done func([]api.StateChangeEvent) bool) ([]api.StateChangeEvent, [][]byte) {
	t.Helper()
	ctx := context.Background()
	qname := strings.ToLower(name)
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
	pattern, _ := json.Marshal(map[string]any{"source": []string{api.EventSource}, "detail-type": []string{api.DetailStateChange}, "detail": map[string]any{"batch_id": ids}})
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: &qname, EventPattern: aws.String(string(pattern))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.DeleteRule(context.Background(), &eventbridge.DeleteRuleInput{Name: &qname, Force: true}) })
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: &qname, Targets: []ebtypes.Target{{Id: aws.String("q"), Arn: aws.String(attrs.Attributes["QueueArn"])}}}); err != nil {
		t.Fatal(err)
	}
	var got []api.StateChangeEvent
	var raw [][]byte
	return func(limit time.Duration, done func([]api.StateChangeEvent) bool) ([]api.StateChangeEvent, [][]byte) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !done(got) && time.Now().Before(deadline) {
			out, err := env.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1, MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				var ev struct {
					Source     string          `json:"source"`
					DetailType string          `json:"detail-type"`
					Detail     json.RawMessage `json:"detail"`
				}
				if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil || ev.Source != api.EventSource || ev.DetailType != api.DetailStateChange {
					t.Fatalf("event %s: %v", aws.ToString(m.Body), err)
				}
				var d api.StateChangeEvent
				if err := json.Unmarshal(ev.Detail, &d); err != nil {
					t.Fatalf("detail %s: %v", ev.Detail, err)
				}
				got, raw = append(got, d), append(raw, ev.Detail)
				env.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
			}
		}
		return got, raw
	}
}

// gate holds calls until it is opened (or a minute has passed), and
// tells when the first call arrived.
type gate struct {
	once, shut sync.Once
	called     chan struct{}
	open       chan struct{}
}

func newGate() *gate { return &gate{called: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) hold() {
	g.once.Do(func() { close(g.called) })
	select {
	case <-g.open:
	case <-time.After(time.Minute):
	}
}

func (g *gate) release() { g.shut.Do(func() { close(g.open) }) }

// One batch's whole life on the emulator, as a subscriber sees it: its
// Batch State Change events, captured from the default bus through a rule
// to a queue, are submitted (an S3 source, read in the background),
// running, paused and unpaused (by a caller), finished completed (an item
// failed), running again (a resume) and finished cancelled; a batch whose
// source is malformed is submitted and refused. Every event validates
// against docs/events/batch-state-change.schema.json, closed to
// undocumented fields, and names the change, run and status it should.
func TestStateChangeEventsOnTheBus(t *testing.T) {
	ctx := context.Background()
	id, bad := newID(t), newID(t)+"-bad"
	collect := stateChanges(t, newID(t), id, bad)
	schema, err := eventschema.Load()
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	run1, run2 := newGate(), newGate()
	defer run1.release()
	defer run2.release()
	second := false
	url := env.hook.route(id, func(key string, _ int) int {
		mu.Lock()
		again := second
		mu.Unlock()
		switch {
		case again:
			run2.hold()
			return 404
		case key == "c":
			return 404
		}
		run1.hold()
		return 200
	})
	src := putObject(t, "it-sources/"+id+".jsonl", "{\"k\":\"a\"}\n{\"k\":\"b\"}\n{\"k\":\"c\"}\n")
	retry := &api.RetryPolicy{IntervalSeconds: 1, BackoffRate: 2, MaxDelaySeconds: 5, Jitter: 0}
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", Source: api.SourceSpec{Object: src}, Retry: retry, ItemsPerMessage: 1,
		Options: json.RawMessage(fmt.Sprintf(`{"url": %q, "timeout_ms": 120000}`, url))}
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	badReq := api.SubmitRequest{BatchID: bad, Pipeline: "webhook", KeyField: "k", Source: api.SourceSpec{Object: putObject(t, "it-sources/"+bad+".jsonl", "{\"k\":\"a\"}\n{not json\n")},
		Options: json.RawMessage(fmt.Sprintf(`{"url": %q}`, url))}
	if _, err := env.api.Submit(ctx, badReq); err != nil {
		t.Fatal(err)
	}

	// Run 1: pause and unpause while an item's call is held, then let it
	// finish (c fails: the run completes, needing attention).
	select {
	case <-run1.called:
	case <-time.After(time.Minute):
		t.Fatal("no pipeline call within a minute")
	}
	if v, err := env.api.Pause(ctx, id); err != nil || v.Pause == nil {
		t.Fatalf("pause: %+v, %v", v.Pause, err)
	}
	if _, err := env.api.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	run1.release()
	if v := wait(t, id); v.Status != api.StatusCompleted || v.Census.Failed != 1 {
		t.Fatalf("run 1: %s %+v", v.Status, v.Census)
	}
	// Run 2: a resume runs c again; cancelled while its call is held.
	mu.Lock()
	second = true
	mu.Unlock()
	if _, err := env.api.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-run2.called:
	case <-time.After(time.Minute):
		t.Fatal("no call of run 2 within a minute")
	}
	if _, err := env.api.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	run2.release()
	if v := wait(t, id); v.Status != api.StatusCancelled || v.Run != 2 {
		t.Fatalf("run 2: %s run %d", v.Status, v.Run)
	}

	type step struct {
		batch  string
		change api.StateChange
		run    int
		status api.Status
	}
	want := []step{
		{id, api.ChangeSubmitted, 1, api.StatusSubmitting},
		{id, api.ChangeRunning, 1, api.StatusRunning},
		{id, api.ChangePaused, 1, api.StatusRunning},
		{id, api.ChangeUnpaused, 1, api.StatusRunning},
		{id, api.ChangeFinished, 1, api.StatusCompleted},
		{id, api.ChangeRunning, 2, api.StatusRunning},
		{id, api.ChangeFinished, 2, api.StatusCancelled},
		{bad, api.ChangeSubmitted, 1, api.StatusSubmitting},
		{bad, api.ChangeRefused, 1, api.StatusRefused},
	}
	key := func(e api.StateChangeEvent) step { return step{e.BatchID, e.Change, e.Run, e.Status} }
	has := func(got []api.StateChangeEvent) bool {
		for _, w := range want {
			if !slices.ContainsFunc(got, func(e api.StateChangeEvent) bool { return key(e) == w }) {
				return false
			}
		}
		return true
	}
	got, raw := collect(time.Minute, has)
	if !has(got) {
		t.Fatalf("state changes %+v\nwant %+v", got, want)
	}
	for i, e := range got {
		if err := schema.Validate(raw[i]); err != nil {
			t.Errorf("%s against %s: %v", raw[i], eventschema.SchemaPath, err)
		}
		if !slices.Contains(want, key(e)) {
			t.Errorf("unexpected state change %s", raw[i])
		}
	}
	// The order of the batch's life, by the changes' own times.
	var life []api.StateChangeEvent
	for _, e := range got {
		if e.BatchID == id && !slices.ContainsFunc(life, func(l api.StateChangeEvent) bool { return l.EventID == e.EventID }) {
			life = append(life, e)
		}
	}
	slices.SortStableFunc(life, func(a, b api.StateChangeEvent) int { return a.At.Compare(b.At) })
	for i, e := range life {
		if i >= 7 || key(e) != want[i] {
			t.Fatalf("life in order of at: %d is %+v, want %+v", i, key(e), want[min(i, 6)])
		}
	}
	fin := life[4]
	if fin.Verdict != api.StatusCompleted || fin.NeedsAttention == nil || !*fin.NeedsAttention || fin.Census == nil || fin.Census.Failed != 1 ||
		!strings.HasSuffix(fin.Report, api.ReportKey(id, 1)) || life[6].Verdict != api.StatusCancelled || life[3].UnpausedBy != api.PauseByCaller {
		t.Errorf("finished %+v, cancelled %+v, unpaused %+v", fin, life[6], life[3])
	}
	for _, e := range got {
		if e.Change == api.ChangeRefused && (e.Refusal == nil || e.Refusal.Line != 2) {
			t.Errorf("refused %+v: want the refusal naming line 2", e)
		}
	}
	t.Logf("%d state changes captured, each valid against %s", len(got), eventschema.SchemaPath)
	for _, e := range got {
		t.Logf("  %s %s run %d: %s (verdict %q) at %s", e.BatchID, e.Change, e.Run, e.Status, e.Verdict, e.At.Format(time.RFC3339Nano))
	}
}
