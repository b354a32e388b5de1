//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// The on-call incidents of docs/operations.md, each run by the runbook's
// own commands (the bulkrun CLI as built, the AWS CLI where the page uses
// it) against the deployed stack, checking what the runbook says will be
// seen. The durations are shortened through each batch's retry policy
// and the webhook's timeout_ms; TestIncidentReceiverDown5Minutes (build
// tag incident) runs the first at the product's defaults.

// runbookCLI returns a runner of the bulkrun CLI built from this tree
// (cliRunner): its stdout and exit code, with stderr logged.
func runbookCLI(t *testing.T) func(args ...string) (string, int) {
	t.Helper()
	run := cliRunner(t)
	return func(args ...string) (string, int) {
		t.Helper()
		out, _, code := run(args...)
		return out, code
	}
}

// statusJSON is `bulkrun status ID -o json`.
func statusJSON(t *testing.T, run func(...string) (string, int), id string) wire.BatchView {
	t.Helper()
	out, code := run("status", id, "-o", "json")
	var v wire.BatchView
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("status %s: exit %d, %s (%v)", id, code, out, err)
	}
	return v
}

// liveLine is the live view as `bulkrun status` prints it, for the log.
func liveLine(v wire.BatchView) string {
	c := v.Census
	if c == nil {
		c = &api.Census{}
	}
	s := fmt.Sprintf("%s, needs_attention %v, census succeeded %d failed %d in_flight %d pending %d",
		v.Status, v.NeedsAttention, c.Succeeded, c.Failed, c.InFlight, c.Pending)
	if l := v.Live; l != nil {
		next := "-"
		if l.NextRetryAt != nil {
			next = l.NextRetryAt.Format("15:04:05Z")
		}
		s += fmt.Sprintf("; live: in flight %d, waiting %d (next %s), interrupted %d, not fanned out %d; attention %q",
			l.InFlight, l.RetryWaiting, next, l.Interrupted, l.NotFannedOut, l.Attention)
	}
	return s
}

// TestIncidentReceiverDown follows "The downstream is down": a receiver
// answers 502 for 20 s from its first call in a 40-item batch whose retry
// policy spreads 3
// attempts over at least 30 s (10 s, ×2). During the outage `bulkrun
// status` shows the items waiting for a retry with the next retry's time
// and needs_attention true, `bulkrun items --outcome in_flight` lists
// them with the 502; after it the batch completes with no item failed,
// each key answered 200 once.
func TestIncidentReceiverDown(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	run := runbookCLI(t)
	id := newID(t)
	const n = 40
	start := time.Now()
	down := fromFirstCall(20 * time.Second)
	var mu sync.Mutex
	ok := map[string]int{}
	url := env.hook.route(id, func(key string, _ int) int {
		mu.Lock()
		defer mu.Unlock()
		if down.in() {
			return http.StatusBadGateway
		}
		ok[key]++
		return http.StatusOK
	})
	src := filepath.Join(t.TempDir(), "items.jsonl")
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"k":"k%03d","route":%q}`, i, id))
	}
	if err := os.WriteFile(src, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run("submit", src, "--id", id, "--pipeline", "webhook", "--key-field", "k", "--items-per-message", "1",
		"--options", fmt.Sprintf(`{"url":%q}`, url), "--tolerated-failure-percent", "10",
		"--retry", "interval_seconds=10,backoff_rate=2,max_delay_seconds=40,jitter=0"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, out)
	}
	sawWaiting, sawListed := false, false
	for down.before(t, -2*time.Second) {
		time.Sleep(2 * time.Second)
		v := statusJSON(t, run, id)
		t.Logf("t+%2.0fs (receiver down) %s", time.Since(start).Seconds(), liveLine(v))
		if v.Live != nil && v.Live.RetryWaiting > 0 {
			if v.Live.NextRetryAt == nil || !v.NeedsAttention || !strings.Contains(strings.Join(v.Live.Attention, ","), "waiting for a retry") {
				t.Errorf("waiting items without the next retry's time or needs_attention: %+v", v.Live)
			}
			sawWaiting = true
			if !sawListed {
				out, code := run("items", id, "--outcome", "in_flight")
				t.Logf("bulkrun items %s --outcome in_flight:\n%s", id, out)
				sawListed = code == 0 && strings.Contains(out, "502") && strings.Contains(out, "waiting for a retry")
			}
		}
	}
	if !sawWaiting || !sawListed {
		t.Errorf("during the outage: items waiting shown %v, listed with their 502 %v", sawWaiting, sawListed)
	}
	v := waitCLI(t, run, id, 3*time.Minute)
	t.Logf("t+%2.0fs %s", time.Since(start).Seconds(), liveLine(v))
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, c := range ok {
		if c != 1 {
			twice++
		}
	}
	if v.Status != api.StatusCompleted || v.Census.Failed != 0 || v.Census.Succeeded != n || len(ok) != n || twice != 0 {
		t.Errorf("finished %s: %+v; %d keys answered 200, %d more than once; want completed, %d succeeded, none failed",
			v.Status, v.Census, len(ok), twice, n)
	}
}

// waitCLI polls `bulkrun status` until the batch finishes.
func waitCLI(t *testing.T, run func(...string) (string, int), id string, within time.Duration) wire.BatchView {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(2 * time.Second) {
		v := statusJSON(t, run, id)
		if v.Status.Finished() {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not finished after %s: %s", id, within, liveLine(v))
		}
	}
}

// callWindow is a receiver's misbehaviour window that opens at its first
// call, so that the time the submit and the fan-out took on a busy
// machine does not eat into what the test watches.
type callWindow struct {
	mu             sync.Mutex
	long           time.Duration
	created, first time.Time
}

func fromFirstCall(long time.Duration) *callWindow {
	return &callWindow{long: long, created: time.Now()}
}

// in reports whether a call now falls in the window, opening it on the
// first call.
func (w *callWindow) in() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.first.IsZero() {
		w.first = now
	}
	return now.Before(w.first.Add(w.long))
}

// before reports whether now is before the window's end moved by d
// (negative: earlier), true while no call has come; it fails the test
// when no call came within a minute.
func (w *callWindow) before(t *testing.T, d time.Duration) bool {
	t.Helper()
	w.mu.Lock()
	first := w.first
	w.mu.Unlock()
	if first.IsZero() {
		if time.Since(w.created) > time.Minute {
			t.Fatal("the receiver got no call within a minute of the submit")
		}
		return true
	}
	return time.Now().Before(first.Add(w.long + d))
}

// TestIncidentReceiverHangs follows "A receiver hangs": for 12 s from its
// first call the receiver holds every call 8 s, longer than the batch's
// timeout_ms (2 s), then answers at once. The live view at each step:
// while the calls hang, items in flight and needs_attention false; as
// each call ends at timeout_ms, items waiting for a retry (with the next
// retry's time) and needs_attention true; `items --outcome in_flight`
// lists them with the timeout; at the end every item succeeded.
func TestIncidentReceiverHangs(t *testing.T) {
	// Not in parallel: a hanging call is seen in flight only until its
	// timeout_ms (2 s), so the first status must come within 2 s of the
	// first calls, which other tests' load can delay past it.
	run := runbookCLI(t)
	id := newID(t)
	const n = 20
	start := time.Now()
	hang := fromFirstCall(12 * time.Second)
	url := env.hook.route(id, func(string, int) int {
		if hang.in() {
			time.Sleep(8 * time.Second)
		}
		return http.StatusOK
	})
	src := filepath.Join(t.TempDir(), "items.jsonl")
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"k":"k%03d"}`, i))
	}
	if err := os.WriteFile(src, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run("submit", src, "--id", id, "--pipeline", "webhook", "--key-field", "k", "--items-per-message", "1",
		"--options", fmt.Sprintf(`{"url":%q,"timeout_ms":2000}`, url),
		"--retry", "interval_seconds=15,backoff_rate=1,max_delay_seconds=15,jitter=0"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, out)
	}
	sawHanging, sawWaiting := false, false
	for hang.before(t, 2*time.Second) {
		v := statusJSON(t, run, id)
		t.Logf("t+%2.0fs %s", time.Since(start).Seconds(), liveLine(v))
		if l := v.Live; l != nil {
			if l.InFlight > 0 && l.RetryWaiting == 0 && v.Census.Succeeded == 0 {
				sawHanging = true
			}
			if l.RetryWaiting > 0 {
				if !v.NeedsAttention || l.NextRetryAt == nil {
					t.Errorf("items wait for a retry but needs_attention %v, next retry %v", v.NeedsAttention, l.NextRetryAt)
				}
				if !sawWaiting {
					out, _ := run("items", id, "--outcome", "in_flight")
					t.Logf("bulkrun items %s --outcome in_flight:\n%s", id, out)
					if !strings.Contains(out, "deadline") && !strings.Contains(out, "timeout") && !strings.Contains(out, "Timeout") {
						t.Errorf("in-flight listing without the timeout as the error:\n%s", out)
					}
				}
				sawWaiting = true
			}
		}
		time.Sleep(time.Second)
	}
	v := waitCLI(t, run, id, 2*time.Minute)
	t.Logf("t+%2.0fs %s", time.Since(start).Seconds(), liveLine(v))
	if !sawHanging || !sawWaiting {
		t.Errorf("the live view showed hanging calls in flight %v, then items waiting %v", sawHanging, sawWaiting)
	}
	if v.Status != api.StatusCompleted || v.Census.Succeeded != n {
		t.Errorf("finished %s %+v, want completed with %d succeeded", v.Status, v.Census, n)
	}
	out, _ := run("report", id)
	t.Logf("bulkrun report %s:\n%s", id, out)
}

// TestIncidentWrongOptionFailsEveryItem follows "Items fail": a header
// the receiver refuses (401, permanent) fails every item of a
// batch with a 10 % threshold. The run stops threshold_exceeded (the
// event the alarm topic gets), `list --needs-attention` shows it,
// `items --outcome failed` gives the reason and the receiver's answer;
// the batch submitted again with the fixed option completes.
func TestIncidentWrongOptionFailsEveryItem(t *testing.T) {
	run := runbookCLI(t)
	id := newID(t)
	const n = 60
	var calls atomic.Int64
	url := env.hook.routeRequest(id, func(r *http.Request) int {
		calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer right" {
			return http.StatusUnauthorized
		}
		return http.StatusOK
	})
	src := filepath.Join(t.TempDir(), "items.jsonl")
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"k":"k%03d"}`, i))
	}
	if err := os.WriteFile(src, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	submit := func(batchID, token string) {
		t.Helper()
		headers := filepath.Join(t.TempDir(), "headers")
		if err := os.WriteFile(headers, []byte("Authorization: Bearer "+token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, code := run("submit", src, "--id", batchID, "--pipeline", "webhook", "--key-field", "k",
			"--options", fmt.Sprintf(`{"url":%q}`, url), "--headers-file", headers,
			"--tolerated-failure-percent", "10"); code != 0 {
			t.Fatalf("submit: exit %d: %s", code, out)
		}
	}
	submit(id, "wrong")
	v := waitCLI(t, run, id, 2*time.Minute)
	t.Logf("%s", liveLine(v))
	if v.Status != api.StatusThresholdExceeded || !v.NeedsAttention {
		t.Fatalf("ended %s (needs_attention %v), want threshold_exceeded", v.Status, v.NeedsAttention)
	}
	out, _ := run("list", "--since", "1h", "--needs-attention")
	if !strings.Contains(out, id) {
		t.Errorf("list --needs-attention does not show %s:\n%s", id, out)
	}
	out, code := run("items", id, "--outcome", "failed", "-o", "json")
	var p api.ItemPage
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 || len(p.Items) == 0 {
		t.Fatalf("items --outcome failed: exit %d, %s (%v)", code, out, err)
	}
	if it := p.Items[0]; it.Reason != api.ReasonPermanent || !strings.Contains(it.Error, "401") {
		t.Errorf("failed item %+v: want reason permanent with the receiver's 401", it)
	}
	stopCalls := calls.Load()
	t.Logf("stopped after %d calls of %d items (%d failed, %d cancelled)", stopCalls, n, v.Census.Failed, v.Census.Cancelled)
	fixed := id + "-fixed"
	submit(fixed, "right")
	if v := waitCLI(t, run, fixed, 2*time.Minute); v.Status != api.StatusCompleted || v.Census.Succeeded != n {
		t.Errorf("the fixed batch ended %s %+v, want completed with %d succeeded", v.Status, v.Census, n)
	}
}

// TestIncidentRetentionSweep follows the retention steps on the deployed
// stack: a finished batch past its retention answers 404 expired at
// once; `bulkrun sweep` (the sweep function invoked with {}, as the
// schedule does) deletes its objects and rows and is safe to run again; a batch within its
// retention is untouched. RetentionDays is at least 1, so the test
// shortens one batch's retention by writing its expiry (the batch row's
// expires_at_ms and its RETENTION marker) a minute in the past, as the
// finalize of a stack with a one-minute retention would have.
func TestIncidentRetentionSweep(t *testing.T) {
	ctx := context.Background()
	run := runbookCLI(t)
	expired, kept := newID(t), newID(t)
	for _, id := range []string{expired, kept} {
		if _, err := env.api.Submit(ctx, webhookRequest(id, env.hook.route(id, nil), inlineItems(3))); err != nil {
			t.Fatal(err)
		}
		wait(t, id)
	}
	expireNow(t, expired)
	if out, code := run("status", expired); code != 1 {
		t.Errorf("status of an expired batch: exit %d, %s; want 1 (404 expired)", code, out)
	}
	for i := range 2 {
		out, code := run("sweep", "-o", "json")
		var res api.SweepResult
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
			t.Fatalf("bulkrun sweep (pass %d): exit %d, %s (%v)", i+1, code, out, err)
		}
		t.Logf("bulkrun sweep -o json (pass %d): %+v", i+1, res)
	}
	objs, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String(api.BatchesPrefix(expired))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.GetBatch(ctx, expired); !errors.Is(err, api.ErrNotFound) || len(objs.Contents) != 0 {
		t.Errorf("after the sweep: the batch row read %v, %d objects under %s", err, len(objs.Contents), api.BatchesPrefix(expired))
	}
	if v := statusJSON(t, run, kept); v.Status != api.StatusCompleted {
		t.Errorf("the batch within its retention: %s", v.Status)
	}
}

// expireNow moves finished batch id's retention end a minute into the
// past: its batch row's expires_at_ms and its RETENTION marker.
func expireNow(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	b, err := env.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute).UnixMilli()
	key := func(pk, sk string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{config.AttrPK: &ddbtypes.AttributeValueMemberS{Value: pk}, config.AttrSK: &ddbtypes.AttributeValueMemberS{Value: sk}}
	}
	if _, err := env.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &env.table, Key: key("BATCH#"+id, "BATCH"),
		UpdateExpression:          aws.String("SET expires_at_ms = :p"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(past, 10)}}}); err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf("%020d#%s", b.ExpiresAt.UnixMilli(), id)
	if _, err := env.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &env.table, Key: key("RETENTION", old)}); err != nil {
		t.Fatal(err)
	}
	item := key("RETENTION", fmt.Sprintf("%020d#%s", past, id))
	item["batch_id"] = &ddbtypes.AttributeValueMemberS{Value: id}
	if _, err := env.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.table, Item: item}); err != nil {
		t.Fatal(err)
	}
}

// TestRunbookRedriveWithoutMoveTask runs the runbook's redrive loop for
// parked dead letters (docs/operations.md, "Parked dead letters: what to
// do", the loop where StartMessageMoveTask is missing), taken from the
// page as written, with the AWS CLI against the emulator: every parked
// message reaches the destination once, with its body, and the parking
// queue is left empty. It first checks that the emulator does lack
// StartMessageMoveTask (else the loop would not be needed there).
func TestRunbookRedriveWithoutMoveTask(t *testing.T) {
	t.Parallel() // its own queues: beside the other parallel tests
	real, err := exec.LookPath("aws")
	if err != nil {
		t.Skip("the AWS CLI is not on PATH")
	}
	// AWS CLI v1 does not read AWS_ENDPOINT_URL: a shim on PATH passes it.
	shim := t.TempDir()
	if err := os.WriteFile(filepath.Join(shim, "aws"), []byte("#!/bin/sh\nexec "+real+` --endpoint-url "$AWS_ENDPOINT_URL" "$@"`+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + shim + string(os.PathListSeparator) + os.Getenv("PATH")
	ctx := context.Background()
	page, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	i := strings.Index(text, "while m=$(aws sqs receive-message")
	if i < 0 {
		t.Fatal("docs/operations.md has no redrive loop")
	}
	j := strings.Index(text[i:], "done\n")
	var script []string
	for _, l := range strings.Split(text[i:i+j+len("done")], "\n") {
		script = append(script, strings.TrimPrefix(l, "   "))
	}
	id := strings.ToLower(newID(t))
	urls := map[string]string{}
	for _, name := range []string{"parking", "dlq"} {
		q, err := env.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(id + "-" + name)})
		if err != nil {
			t.Fatal(err)
		}
		urls[name] = aws.ToString(q.QueueUrl)
		t.Cleanup(func() { env.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	}
	parkingARN := "arn:aws:sqs:" + env.aws.Region + ":000000000000:" + id + "-parking"
	move := exec.Command(filepath.Join(shim, "aws"), "sqs", "start-message-move-task", "--source-arn", parkingARN, "--destination-arn", parkingARN)
	move.Env = append(os.Environ(), path)
	if out, err := move.CombinedOutput(); err == nil {
		t.Logf("the emulator answers StartMessageMoveTask now (%s): the loop is the fallback only", out)
	} else {
		t.Logf("aws sqs start-message-move-task: %s", bytes.TrimSpace(out))
	}
	want := map[string]bool{}
	for i := range 3 {
		body := fmt.Sprintf(`{"v":2,"kind":"item","batch_id":%q,"run":1,"key":"k%d"}`, id, i)
		want[body] = true
		if _, err := env.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls["parking"]), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-c", strings.Join(script, "\n"))
	cmd.Env = append(os.Environ(), path, "PARKING_URL="+urls["parking"], "DLQ_URL="+urls["dlq"])
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("the runbook's loop: %v\n%s", err, out)
	}
	got := map[string]int{}
	for range 5 {
		out, err := env.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls["dlq"]), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got[aws.ToString(m.Body)]++
		}
	}
	for body := range want {
		if got[body] != 1 {
			t.Errorf("message %s reached the destination %d times, want once", body, got[body])
		}
	}
	left, err := env.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(urls["parking"]),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	if n := left.Attributes["ApproximateNumberOfMessages"] + "/" + left.Attributes["ApproximateNumberOfMessagesNotVisible"]; n != "0/0" {
		t.Errorf("parking queue left with %s messages (visible/in flight)", n)
	}
	t.Logf("moved %d parked messages by the runbook's loop", len(got))
}
