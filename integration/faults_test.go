//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/function"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// Faults in the integration suite. The emulator never throttles, fails or
// drops a connection, so the suite puts integration/testbed/faultproxy in
// between:
//
//   - in-process harness: faultProxy (worker_faults_test.go) starts a
//     proxy in this process in front of AWS_ENDPOINT_URL and returns a
//     config whose clients go through it; newFaultHarness builds the
//     harness's DynamoDB, S3 and SQS clients on one. The test sets rules
//     with proxy.Set and reads the injected faults with proxy.Status. The
//     test's own view (h.receive, env.*) goes straight to the emulator.
//   - deployed stack: started with BULKRUN_FAULT_PROXY=1 (see
//     localstack/README.md), AWS_ENDPOINT_URL is the proxy and MiniStack
//     hands it to every function; stackFaults drives its control endpoint.

// newFaultHarness is newHarness whose storage calls go through a fault
// proxy; set its rules after this returns (the harness's table is created
// through it).
func newFaultHarness(t *testing.T, run pipeline.Func) (*harness, *faultproxy.Proxy) {
	t.Helper()
	p, cfg := faultProxy(t, faultproxy.Config{})
	return newHarnessOn(t, cfg, run), p
}

// setFaults sets the proxy's rules or fails the test.
func setFaults(t *testing.T, p *faultproxy.Proxy, seed int64, rules ...faultproxy.Rule) {
	t.Helper()
	if err := p.Set(faultproxy.Config{Seed: seed, Rules: rules}); err != nil {
		t.Fatal(err)
	}
}

// faultControl drives the control endpoint of the proxy in front of the
// deployed stack.
type faultControl struct{ url string }

// stackFaults returns the control of the stack's fault proxy, clearing its
// rules now and when the test ends. Without a proxy (the emulator was not
// started with BULKRUN_FAULT_PROXY=1) the test is skipped; it fails instead
// under CI=true (.ci/run starts the proxy) or when BULKRUN_FAULT_PROXY=1 is
// set (as `make soak` does).
func stackFaults(t *testing.T) *faultControl {
	t.Helper()
	c := &faultControl{url: strings.TrimRight(os.Getenv("AWS_ENDPOINT_URL"), "/") + faultproxy.ControlPath}
	if _, err := c.status(); err != nil {
		msg := fmt.Sprintf("the stack is not behind the fault proxy (%v); start the emulator with BULKRUN_FAULT_PROXY=1", err)
		if os.Getenv("CI") == "true" || os.Getenv("BULKRUN_FAULT_PROXY") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	c.set(t, faultproxy.Config{})
	t.Cleanup(func() { c.set(t, faultproxy.Config{}) })
	return c
}

func (c *faultControl) set(t *testing.T, cfg faultproxy.Config) {
	t.Helper()
	body, _ := json.Marshal(cfg)
	resp, err := http.Post(c.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("set faults: %d %s", resp.StatusCode, b)
	}
}

func (c *faultControl) status() (faultproxy.Status, error) {
	var s faultproxy.Status
	resp, err := http.Get(c.url)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", c.url, resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// emulatorFunctionAccessKey is the access key id MiniStack gives every
// function it runs (localstack/README.md: inside a function
// AWS_ACCESS_KEY_ID is the account id): a rule with it as access_key
// faults the deployed functions' calls, not the test's own.
const emulatorFunctionAccessKey = "000000000000"

// Guards the fault proxy's partial failures on the emulator (the shapes
// the sweep, fan-out and SQS tests rely on): entries reported unprocessed,
// undeleted or failed were really not written, deleted or sent, and the
// others were.
func TestFaultProxyPartialFailuresOnEmulator(t *testing.T) {
	ctx := context.Background()
	p, cfg := faultProxy(t, faultproxy.Config{})
	name := strings.Trim(strings.ToLower(newID(t)), "-")
	if len(name) > 60 {
		name = strings.Trim(name[len(name)-60:], "-")
	}
	if err := dynamo.CreateTable(ctx, env.ddb, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	if _, err := env.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatal(err)
	}
	q, err := env.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	setFaults(t, p, 11,
		faultproxy.Rule{Service: "dynamodb", Operations: []string{"BatchWriteItem"}, Kind: faultproxy.KindPartial, Rate: 1},
		faultproxy.Rule{Service: "s3", Operations: []string{"DeleteObjects"}, Kind: faultproxy.KindPartial, Rate: 1},
		faultproxy.Rule{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindPartial, Rate: 1},
	)
	faultyDDB, faultyS3, faultySQS := dynamodb.NewFromConfig(cfg), function.NewS3(cfg), sqs.NewFromConfig(cfg)
	t.Run("BatchWriteItem", func(t *testing.T) {
		row := func(i int) map[string]ddbtypes.AttributeValue {
			return map[string]ddbtypes.AttributeValue{
				"pk": &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("fp-%d", i)}, "sk": &ddbtypes.AttributeValueMemberS{Value: "x"}}
		}
		var ws []ddbtypes.WriteRequest
		for i := range 10 {
			ws = append(ws, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: row(i)}})
		}
		out, err := faultyDDB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{name: ws}})
		if err != nil {
			t.Fatal(err)
		}
		unprocessed := map[string]bool{}
		for _, w := range out.UnprocessedItems[name] {
			unprocessed[w.PutRequest.Item["pk"].(*ddbtypes.AttributeValueMemberS).Value] = true
		}
		if len(unprocessed) == 0 || len(unprocessed) == 10 {
			t.Fatalf("%d of 10 unprocessed, want some", len(unprocessed))
		}
		for i := range 10 {
			got, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &name, ConsistentRead: aws.Bool(true), Key: row(i)})
			if err != nil {
				t.Fatal(err)
			}
			if pk := fmt.Sprintf("fp-%d", i); (len(got.Item) == 0) != unprocessed[pk] {
				t.Errorf("%s: stored %v, unprocessed %v", pk, len(got.Item) > 0, unprocessed[pk])
			}
		}
	})
	t.Run("DeleteObjects", func(t *testing.T) {
		var ids []s3types.ObjectIdentifier
		for i := range 10 {
			k := fmt.Sprintf("fp/%d", i)
			if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: &k, Body: strings.NewReader("x")}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, s3types.ObjectIdentifier{Key: aws.String(k)})
		}
		out, err := faultyS3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &name, Delete: &s3types.Delete{Objects: ids}})
		if err != nil {
			t.Fatal(err)
		}
		var want, left []string
		for _, e := range out.Errors {
			want = append(want, aws.ToString(e.Key))
		}
		if len(want) == 0 || len(want) == 10 || len(out.Deleted)+len(out.Errors) != 10 {
			t.Fatalf("%d deleted, %d errors", len(out.Deleted), len(out.Errors))
		}
		list, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &name, Prefix: aws.String("fp/")})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Contents {
			left = append(left, aws.ToString(o.Key))
		}
		sort.Strings(left)
		sort.Strings(want)
		if strings.Join(left, ",") != strings.Join(want, ",") {
			t.Fatalf("left %v, want exactly the failed keys %v", left, want)
		}
		for _, k := range left {
			env.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &name, Key: aws.String(k)})
		}
		env.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name})
	})
	t.Run("SendMessageBatch", func(t *testing.T) {
		var es []sqstypes.SendMessageBatchRequestEntry
		for i := range 10 {
			es = append(es, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprintf(`{"fp":%d}`, i))})
		}
		out, err := faultySQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: es})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Failed) == 0 || len(out.Successful) == 0 || len(out.Failed)+len(out.Successful) != 10 {
			t.Fatalf("%d successful, %d failed", len(out.Successful), len(out.Failed))
		}
		failed := map[string]bool{}
		for _, f := range out.Failed {
			failed[fmt.Sprintf(`{"fp":%s}`, aws.ToString(f.Id))] = true
		}
		got := 0
		for got < len(out.Successful) {
			r, err := env.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Messages) == 0 {
				break
			}
			for _, m := range r.Messages {
				got++
				if failed[aws.ToString(m.Body)] {
					t.Errorf("failed entry %s was sent", aws.ToString(m.Body))
				}
			}
		}
		if got != len(out.Successful) {
			t.Fatalf("%d messages on the queue, want the %d successful", got, len(out.Successful))
		}
	})
	if s := p.Status(); s.Injected[faultproxy.KindPartial] != 3 {
		t.Fatalf("status %+v", s)
	}
}

// Guards the harness's use of the fault proxy: a batch run by the
// in-process submitter and worker under throttling, 500s, connection
// resets, partial SendMessageBatch answers and duplicate sends on their
// DynamoDB, SQS and S3 calls still runs each item once and ends with every
// item succeeded in the rows.
func TestFaultProxyHarnessRunsUnderFaults(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h, p := newFaultHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	setFaults(t, p, 42,
		faultproxy.Rule{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindPartial, Rate: 0.3},
		faultproxy.Rule{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindDuplicate, Rate: 0.3},
		faultproxy.Rule{Service: "dynamodb", Kind: faultproxy.KindThrottle, Rate: 0.05},
		faultproxy.Rule{Service: "sqs", Kind: faultproxy.KindThrottle, Rate: 0.05},
		faultproxy.Rule{Service: "s3", Kind: faultproxy.KindServerError, Rate: 0.05},
		faultproxy.Rule{Service: "*", Kind: faultproxy.KindReset, Rate: 0.03},
	)
	id := newID(t)
	var err error
	for range 5 { // submit is retried by its caller (API Gateway's client, the S3 event)
		if _, err = h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(60)}}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	h.drainRetrying(t, ctx, 3*time.Minute)
	s := p.Status()
	for _, k := range []faultproxy.Kind{faultproxy.KindThrottle, faultproxy.KindPartial, faultproxy.KindDuplicate, faultproxy.KindReset} {
		if s.Injected[k] == 0 {
			t.Fatalf("no %s injected: %+v", k, s)
		}
	}
	hb, err := h.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := finalize.CensusOf(ctx, h.store, hb, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Succeeded != 60 || c.Total != 60 {
		t.Fatalf("census %+v after faults %v", c, s.Injected)
	}
	for i := range 60 {
		if n := h.callsOf(api.PositionalKey(int64(i))); n != 1 {
			t.Errorf("%s: %d pipeline calls, want 1", api.PositionalKey(int64(i)), n)
		}
	}
	t.Logf("%d requests, injected %v", s.Requests, s.Injected)
}

// Guards the wiring of the deployed stack through the fault proxy
// (BULKRUN_FAULT_PROXY=1): the functions' own AWS calls reach it — they
// are the ones signed with MiniStack's function access key — so the
// faults of a rule reach them.
func TestFaultProxyStackFunctionsGoThroughIt(t *testing.T) {
	ctx := context.Background()
	faults := stackFaults(t)
	faults.set(t, faultproxy.Config{Seed: 1, Rules: []faultproxy.Rule{
		{AccessKey: emulatorFunctionAccessKey, Service: "dynamodb", Kind: faultproxy.KindThrottle, Rate: 0.1},
	}})
	id := newID(t)
	url := env.hook.route(id, nil)
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(20))); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	s, err := faults.status()
	if err != nil {
		t.Fatal(err)
	}
	if s.ByCall["dynamodb.UpdateItem"][faultproxy.KindThrottle] == 0 {
		t.Fatalf("the functions' DynamoDB calls were not throttled: %+v", s)
	}
	if v.Census.Succeeded != 20 {
		t.Fatalf("census %+v under %v", v.Census, s.Injected)
	}
	for k, n := range env.hook.counts(id) {
		if n != 1 {
			t.Errorf("%s: %d calls", k, n)
		}
	}
}

// drainRetrying hands every message on the harness queue to the worker
// and hands failed deliveries back (the queue would redeliver them; the
// harness deleted them on receipt) until none is left, polling once a
// second while only failed ones remain. It fails the test when limit
// passes with no delivery handled (every one failing, or none left to
// hand but a failed one), or when the queue still gives messages after
// drainCap × limit: a delivery loop that never ends. The limit counts
// from the last handled delivery, not from the start, so that a loaded
// machine (the suite's parallel tests on two cores) draining slowly is
// not taken for messages that keep failing.
func (h *harness) drainRetrying(t *testing.T, ctx context.Context, limit time.Duration) {
	t.Helper()
	start := time.Now()
	stuck := start.Add(limit)
	var pending []worker.Delivery
	handled := 0
	for {
		now := time.Now()
		if now.After(stuck) {
			t.Fatalf("no delivery handled in the last %v (%d handled in %v): %d still failing", limit, handled, now.Sub(start).Round(time.Second), len(pending))
		}
		if now.After(start.Add(drainCap * limit)) {
			t.Fatalf("messages still coming after %v (%d handled, %d failing): a delivery loop that does not end", now.Sub(start).Round(time.Second), handled, len(pending))
		}
		ds := append(pending, h.receive(t, 10)...)
		if len(ds) == 0 {
			return
		}
		failed := h.worker.Handle(ctx, ds)
		pending = pending[:0:0]
		for _, d := range ds {
			if slices.Contains(failed, d.MessageID) {
				pending = append(pending, d)
			}
		}
		if n := len(ds) - len(pending); n > 0 {
			handled += n
			stuck = time.Now().Add(limit)
		} else {
			time.Sleep(time.Second)
		}
	}
}

// drainCap bounds drainRetrying's whole drain: drainCap × its limit.
const drainCap = 5
