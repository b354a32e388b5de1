//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// uploadImages puts n files of examples/images under prefix of the
// stack's bucket — the three broken ones first, then good ones — and
// returns their names.
func uploadImages(t *testing.T, prefix string, n int) []string {
	t.Helper()
	files := []string{"broken-text.png", "broken-empty.png", "broken-truncated.png"}
	all, _ := filepath.Glob("../examples/images/*.png")
	for _, f := range all {
		if len(files) == n {
			break
		}
		if !strings.HasPrefix(filepath.Base(f), "broken-") {
			files = append(files, filepath.Base(f))
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("../examples/images", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &env.bucket, Key: aws.String(prefix + f), Body: bytes.NewReader(b)}); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func inlineItems(n int) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"n":%d,"name":"item %d"}`, i, i)
	}
	b.WriteByte(']')
	return b.Bytes()
}

func webhookRequest(id, url string, items json.RawMessage) api.SubmitRequest {
	return api.SubmitRequest{
		BatchID: id, Pipeline: "webhook", Source: api.SourceSpec{Items: items},
		Options: json.RawMessage(fmt.Sprintf(`{"url": %q, "timeout_ms": 5000}`, url)),
	}
}

// rowsCensus counts the batch's item rows straight from the table.
func rowsCensus(t *testing.T, id string) api.Census {
	t.Helper()
	b, err := env.store.GetBatch(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := finalize.CensusOf(context.Background(), env.store, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fanOutBodies are the message bodies the fan-out sends for inline items
// lines of batch b (one chunk, positional keys): item messages at one
// item per message, pack messages at the batch's K, so that a test can
// deliver them again as duplicates of the batch's own messages.
func fanOutBodies(t *testing.T, b ledger.Batch, lines []json.RawMessage) []string {
	t.Helper()
	chunk := source.Chunk{Count: int64(len(lines))}
	var bodies []string
	p, err := ledger.NewPacker(b.ID, b.Run, b.ManifestKey, chunk, b.Pack(), func(body []byte, _ []string) error {
		bodies = append(bodies, string(body))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range lines {
		if err := p.Add(source.ManifestLine{Key: api.PositionalKey(int64(i)), Input: in}, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	return bodies
}

func sameCounts(a, b api.Census) bool {
	return a.Total == b.Total && a.Succeeded == b.Succeeded && a.Failed == b.Failed && a.Quarantined == b.Quarantined &&
		a.Cancelled == b.Cancelled && a.InFlight == b.InFlight && a.Pending == b.Pending
}

// DESIGN §3.1: one id, one plan.
func TestSubmitSameIDSameManifestIsOneBatch(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, nil)
	req := webhookRequest(id, url, inlineItems(5))
	first, err := env.api.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !*first.Created || first.ItemCount != 5 || len(first.Digest) != 64 {
		t.Fatalf("first submit: %+v", first)
	}
	// The same manifest written differently (whitespace) is the same plan.
	req2 := req
	req2.Source.Items = json.RawMessage(strings.ReplaceAll(string(req.Source.Items), ",", " , "))
	second, err := env.api.Submit(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	if *second.Created || second.Digest != first.Digest || second.ManifestKey != first.ManifestKey || second.Run != 1 {
		t.Fatalf("second submit must return the first batch: %+v", second)
	}
	v := wait(t, id)
	// A duplicate submit after the batch finished starts nothing either.
	third, err := env.api.Submit(ctx, req)
	if err != nil || *third.Created || third.Run != 1 || third.Status != v.Status {
		t.Fatalf("submit after finish: %+v, %v", third, err)
	}
	calls := env.hook.counts(id)
	if len(calls) != 5 {
		t.Fatalf("pipeline ran for %d keys, want 5: %v", len(calls), calls)
	}
	for k, n := range calls {
		if n != 1 {
			t.Errorf("key %s ran %d times", k, n)
		}
	}
	// No second manifest object is left behind.
	out, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String("batches/" + id + "/manifests/")})
	if err != nil || len(out.Contents) != 1 {
		t.Fatalf("manifests: %d objects, err %v", len(out.Contents), err)
	}
}

func TestSubmitOtherManifestSameIDIs409(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, nil)
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(3))); err != nil {
		t.Fatal(err)
	}
	_, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(4)))
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Body.Code != "batch_mismatch" || ae.Body.Field != "manifest_digest" || !errors.Is(err, api.ErrBatchMismatch) {
		t.Fatalf("err = %v, want 409 batch_mismatch on manifest_digest", err)
	}
	req := webhookRequest(id, url, inlineItems(3))
	req.Pipeline, req.Options = "thumbnail", nil
	_, err = env.api.Submit(ctx, req)
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Body.Field != "pipeline" {
		t.Fatalf("other pipeline: err = %v, want 409 on pipeline", err)
	}
	v := wait(t, id)
	if v.ItemCount != 3 || v.Census.Succeeded != 3 {
		t.Fatalf("the stored batch must be untouched: %+v", v.Census)
	}
}

// DESIGN §3.2/§3.3: every item message delivered twice (or three times)
// still runs the pipeline once per item, and the census equals the rows.
func TestDuplicateDeliveriesRunOncePerItem(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, nil)
	const n = 30
	items := inlineItems(n)
	b, err := env.api.Submit(ctx, webhookRequest(id, url, items))
	if err != nil {
		t.Fatal(err)
	}
	// Send every item's message twice more, straight to the items queue,
	// while the fan-out sends the originals.
	var lines []json.RawMessage
	if err := json.Unmarshal(items, &lines); err != nil {
		t.Fatal(err)
	}
	bodies := fanOutBodies(t, ledger.Batch{Batch: b.Batch}, lines)
	sendRaw(t, append(bodies, bodies...))
	v := wait(t, id)
	if v.Status != api.StatusCompleted || v.Census.Succeeded != n || v.Census.Failed != 0 {
		t.Fatalf("batch: %s %+v", v.Status, v.Census)
	}
	calls := env.hook.counts(id)
	if len(calls) != n {
		t.Fatalf("pipeline ran for %d keys, want %d", len(calls), n)
	}
	for k, c := range calls {
		if c != 1 {
			t.Errorf("key %s: pipeline ran %d times, want 1", k, c)
		}
	}
	if rc := rowsCensus(t, id); !sameCounts(rc, *v.Census) {
		t.Fatalf("census %+v != rows %+v", *v.Census, rc)
	}
	if v.Census.Cost.Text("calls") != fmt.Sprint(n) {
		t.Fatalf("cost rollup: %v, want calls=%d", v.Census.Cost, n)
	}
}

func sendRaw(t *testing.T, bodies []string) {
	t.Helper()
	for i := 0; i < len(bodies); i++ {
		if _, err := env.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &env.queueURL, MessageBody: &bodies[i]}); err != nil {
			t.Fatal(err)
		}
	}
}

// A pipeline that fails permanently on some items gives exactly those keys
// as failed (with the reason), transient errors are retried, and finalize
// triggered again writes no second report.
func TestPermanentFailuresAreExactlyThoseKeys(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	bad := map[string]bool{api.PositionalKey(3): true, api.PositionalKey(7): true, api.PositionalKey(10): true}
	flaky := api.PositionalKey(5)
	url := env.hook.route(id, func(key string, attempt int) int {
		switch {
		case bad[key]:
			return 422
		case key == flaky && attempt == 1:
			return 500 // a transient error that counts (a 503 is throttling, which counts no attempt)
		}
		return 200
	})
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(12))); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Census.Failed != 3 || v.Census.Succeeded != 9 || !v.NeedsAttention || v.Status != api.StatusCompleted {
		t.Fatalf("batch: %s %+v", v.Status, v.Census)
	}
	// Each item's cost is its last attempt's: failed calls were calls too.
	if v.Census.Cost.Text("calls") != "12" {
		t.Fatalf("cost %v, want calls=12", v.Census.Cost)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	failed := readResults(t, rep.Results.Files[api.OutcomeFailed].URI)
	var keys []string
	for _, l := range failed {
		keys = append(keys, l.Key)
		if !strings.Contains(l.Error, "HTTP 422") || !strings.Contains(l.Error, l.Key) || l.Reason != api.ReasonPermanent || l.Attempts != 1 {
			t.Errorf("failed line %+v: want HTTP 422 naming the key, permanent, 1 attempt", l)
		}
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "item-0000000003,item-0000000007,item-0000000010" {
		t.Fatalf("failed keys = %v", keys)
	}
	// manifest.json names the result files in Distributed Map's ResultWriter shape.
	mb, mk, _ := api.ParseS3URI(rep.Results.Manifest)
	mo, err := env.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &mb, Key: &mk})
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		DestinationBucket string
		ResultFiles       map[string][]struct {
			Key  string
			Size int64
		}
	}
	err = json.NewDecoder(mo.Body).Decode(&manifest)
	mo.Body.Close()
	if err != nil || manifest.DestinationBucket != env.bucket || len(manifest.ResultFiles["FAILED"]) != 1 || len(manifest.ResultFiles["SUCCEEDED"]) != 1 ||
		manifest.ResultFiles["FAILED"][0].Key != api.ResultsKey(id, 1, api.OutcomeFailed) || manifest.ResultFiles["FAILED"][0].Size == 0 {
		t.Fatalf("results manifest %+v (%v)", manifest, err)
	}
	ok := readResults(t, rep.Results.Files[api.OutcomeSucceeded].URI)
	for _, l := range ok {
		if l.Key == flaky && l.Attempts != 2 {
			t.Errorf("flaky item: %d attempts, want 2 (one transient 500, then success)", l.Attempts)
		}
	}
	if calls := env.hook.counts(id); calls[flaky] != 2 {
		t.Errorf("flaky item called %d times, want 2", calls[flaky])
	}

	// Finalize triggered twice more, concurrently: one report, untouched.
	head := func() string {
		o, err := env.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &env.bucket, Key: aws.String(api.ReportKey(id, 1))})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(o.ETag) + o.LastModified.String()
	}
	before := head()
	var wg sync.WaitGroup
	results := make([]map[string]any, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload, _ := json.Marshal(ledger.FinalizeEvent{BatchID: id, Run: 1})
			out, err := env.lambda.Invoke(ctx, &lambda.InvokeInput{FunctionName: &env.finalizeFn, Payload: payload})
			if err != nil || out.FunctionError != nil {
				t.Errorf("invoke finalize: %v %s", err, out.Payload)
				return
			}
			_ = json.Unmarshal(out.Payload, &results[i])
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r["wrote"] != false || r["status"] != string(api.StatusCompleted) {
			t.Errorf("repeated finalize answered %v, want wrote=false", r)
		}
	}
	if after := head(); after != before {
		t.Fatalf("report rewritten: %s -> %s", before, after)
	}
	again, err := env.api.Status(ctx, id)
	if err != nil || !again.FinishedAt.Equal(v.FinishedAt) {
		t.Fatalf("batch row changed: %v -> %v (%v)", v.FinishedAt, again.FinishedAt, err)
	}
}

func readResults(t *testing.T, uri string) []api.ResultLine {
	t.Helper()
	bucket, key, err := api.ParseS3URI(uri)
	if err != nil {
		t.Fatalf("results uri %q: %v", uri, err)
	}
	o, err := env.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Body.Close()
	var lines []api.ResultLine
	if err := api.ReadResults(o.Body, func(l api.ResultLine) error { lines = append(lines, l); return nil }); err != nil {
		t.Fatal(err)
	}
	return lines
}

// The thumbnail pipeline over an S3 prefix: images succeed with a
// thumbnail, broken files fail permanently with their key in the error.
func TestPrefixThumbnails(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	prefix := "it-sources/" + id + "/"
	uploadImages(t, prefix, 7)
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "thumbnail", Source: api.SourceSpec{Prefix: "s3://" + env.bucket + "/" + prefix}}); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Census.Succeeded != 4 || v.Census.Failed != 3 || v.ItemCount != 7 {
		t.Fatalf("census %+v", v.Census)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range readResults(t, rep.Results.Files[api.OutcomeFailed].URI) {
		if !strings.HasPrefix(l.Key, prefix+"broken-") || !strings.Contains(l.Error, l.Key) {
			t.Errorf("failed %s: %s", l.Key, l.Error)
		}
	}
	for _, l := range readResults(t, rep.Results.Files[api.OutcomeSucceeded].URI) {
		var out struct{ Thumbnail string }
		if err := json.Unmarshal(l.Output, &out); err != nil || out.Thumbnail == "" {
			t.Fatalf("output of %s: %s", l.Key, l.Output)
		}
		bucket, key, _ := api.ParseS3URI(out.Thumbnail)
		if _, err := env.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key}); err != nil {
			t.Errorf("thumbnail %s: %v", out.Thumbnail, err)
		}
	}
}

// TestThumbnailOfAMissingObjectFailsAtOnce guards the product line "an
// item naming an object that does not exist fails at once, permanently,
// as no such object". S3 answers a missing key with 404 only to a caller
// that may list the bucket (s3:ListBucket), and with 403 AccessDenied
// otherwise — which reads as a transient failure, retried to the last
// attempt. Under the IAM lane the emulator answers as S3 would, so this
// test fails when the item function's role lacks s3:ListBucket.
func TestThumbnailOfAMissingObjectFailsAtOnce(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	prefix := "it-sources/" + id + "/"
	uploadImages(t, prefix, 4) // three broken files and one image
	items, _ := json.Marshal([]map[string]string{
		{"bucket": env.bucket, "key": prefix + "missing.png"},
	})
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "thumbnail", Source: api.SourceSpec{Items: items}}); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Census.Failed != 1 || v.ItemCount != 1 {
		t.Fatalf("census %+v", v.Census)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	lines := readResults(t, rep.Results.Files[api.OutcomeFailed].URI)
	if len(lines) != 1 || !strings.Contains(lines[0].Error, "no such object") || lines[0].Reason != api.ReasonPermanent || lines[0].Attempts != 1 {
		t.Fatalf("failed items %+v, want one, permanent, \"no such object\", after 1 attempt", lines)
	}
}

// An upload under incoming/ starts a batch; a duplicate notification of the
// same upload is the same batch.
func TestUploadStartsOneBatch(t *testing.T) {
	ctx := context.Background()
	route := newID(t)
	url := env.hook.route(route, nil)
	key := "incoming/" + route + ".jsonl"
	body := "{\"id\":\"a\"}\n{\"id\":\"b\"}\r\n\n{\"id\":\"c\"}"
	put, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: strings.NewReader(body),
		Metadata: map[string]string{"pipeline": "webhook", "key-field": "id", "pipeline-options": fmt.Sprintf(`{"url":%q}`, url)}})
	if err != nil {
		t.Fatal(err)
	}
	id := uploadID(t, key) // the name and the manifest digest
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := env.api.Status(ctx, id); err == nil {
			break
		} else if !errors.Is(err, api.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("batch %s from the upload: %v", id, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	v := wait(t, id)
	if v.Census.Succeeded != 3 || v.KeyField != "id" {
		t.Fatalf("upload batch: %+v", v.Census)
	}
	// The same notification again (S3 delivers at least once).
	ev := events.S3Event{Records: []events.S3EventRecord{{EventName: "ObjectCreated:Put", S3: events.S3Entity{
		Bucket: events.S3Bucket{Name: env.bucket}, Object: events.S3Object{Key: key, ETag: aws.ToString(put.ETag)}}}}}
	payload, _ := json.Marshal(ev)
	out, err := env.lambda.Invoke(ctx, &lambda.InvokeInput{FunctionName: &env.submitFn, Payload: payload})
	if err != nil || out.FunctionError != nil {
		t.Fatalf("invoke submit: %v %s", err, out.Payload)
	}
	again, err := env.api.Status(ctx, id)
	if err != nil || again.Run != 1 || !again.FinishedAt.Equal(v.FinishedAt) {
		t.Fatalf("duplicate notification changed the batch: %+v %v", again, err)
	}
	if calls := env.hook.counts(route); len(calls) != 3 || calls["a"] != 1 || calls["b"] != 1 || calls["c"] != 1 {
		t.Fatalf("calls = %v", calls)
	}
}

// DESIGN §3.6: bad input names its line and writes nothing. An S3
// source is read in the background: the batch is refused with the line.
// A refused batch does not hold its id: a repeat of the same request is
// read afresh and refused again with the same line, and another source
// under the id is accepted (here refused in turn, for a duplicate key).
func TestBadInputNamesLineAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	src := "it-sources/" + id + ".jsonl"
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &src, Body: strings.NewReader("{\"a\":1}\n\n{\"a\":2}\n{\"a\":\n")}); err != nil {
		t.Fatal(err)
	}
	hook := json.RawMessage(`{"url":"http://127.0.0.1:9/unused"}`)
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: hook, Source: api.SourceSpec{Object: "s3://" + env.bucket + "/" + src}}
	for _, try := range []string{"submit", "repeat"} {
		if v, err := env.api.Submit(ctx, req); err != nil || v.Status != api.StatusSubmitting {
			t.Fatalf("%s: %s %v, want accepted (submitting)", try, v.Status, err)
		}
		v, err := env.api.Submitted(ctx, id, 300*time.Millisecond)
		if err != nil || v.Status != api.StatusRefused || v.Refusal == nil || v.Refusal.Line != 4 || v.Refusal.Field != "source.object" || v.Refusal.Code != "invalid_request" {
			t.Fatalf("%s: batch %s: %s %+v %v, want refused naming line 4 of source.object", try, id, v.Status, v.Refusal, err)
		}
	}
	dup := "it-sources/" + id + "-dup.jsonl"
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &dup, Body: strings.NewReader("{\"k\":\"x\"}\n{\"k\":\"y\"}\n{\"k\":\"x\"}\n")}); err != nil {
		t.Fatal(err)
	}
	var ae *client.APIError
	dupReq := api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: hook, KeyField: "k", Source: api.SourceSpec{Object: "s3://" + env.bucket + "/" + dup}}
	if v, err := env.api.Submit(ctx, dupReq); err != nil || v.Status != api.StatusSubmitting {
		t.Fatalf("other source under the refused id: %s %v, want accepted (submitting)", v.Status, err)
	}
	if v, err := env.api.Submitted(ctx, id, 300*time.Millisecond); err != nil || v.Refusal == nil || v.Refusal.Key != "x" {
		t.Fatalf("other source under the refused id: %+v %v, want refused for key x", v.Refusal, err)
	}
	dupReq.BatchID = id + "-dup"
	if _, err := env.api.Submit(ctx, dupReq); err != nil {
		t.Fatal(err)
	}
	v, err := env.api.Submitted(ctx, dupReq.BatchID, 300*time.Millisecond)
	if err != nil || v.Refusal == nil || v.Refusal.Key != "x" || !strings.Contains(v.Refusal.Message, "line 1") || !strings.Contains(v.Refusal.Message, "line 3") {
		t.Fatalf("duplicate key: %+v %v, want both lines and the key", v.Refusal, err)
	}
	for _, bid := range []string{id, dupReq.BatchID} {
		out, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String("batches/" + bid + "/")})
		if err != nil || len(out.Contents) != 0 {
			t.Fatalf("objects left under %s: %d (%v)", bid, len(out.Contents), err)
		}
		uploads, err := env.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &env.bucket, Prefix: aws.String("batches/" + bid + "/")})
		if err == nil && len(uploads.Uploads) != 0 {
			t.Fatalf("multipart uploads left under %s: %d", bid, len(uploads.Uploads))
		}
		if err := env.api.Forget(ctx, bid); err != nil {
			t.Fatalf("forget refused %s: %v", bid, err)
		}
	}
	if _, err := env.api.Status(ctx, id); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("status after forget: %v, want not found", err)
	}
	for _, bad := range []struct {
		req   api.SubmitRequest
		field string
	}{
		{api.SubmitRequest{BatchID: "no/slash", Pipeline: "webhook", Source: api.SourceSpec{Items: inlineItems(1)}}, "batch_id"},
		{api.SubmitRequest{BatchID: id, Pipeline: "nope", Source: api.SourceSpec{Items: inlineItems(1)}}, "pipeline"},
		{api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: hook}, "source"},
		{api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: hook, Source: api.SourceSpec{Items: inlineItems(1)}, Headers: map[string]string{"bulkrun.x": "1"}}, "headers.bulkrun.x"},
		{api.SubmitRequest{BatchID: id, Pipeline: "webhook", Source: api.SourceSpec{Items: inlineItems(1)}}, "pipeline_options"},
	} {
		_, err := env.api.Submit(ctx, bad.req)
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != bad.field {
			t.Errorf("submit %+v: err = %v, want 400 on %s", bad.req, err, bad.field)
		}
	}
}

func TestUnknownBatchIs404(t *testing.T) {
	_, err := env.api.Status(context.Background(), newID(t))
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Body.Code != "not_found" {
		t.Fatalf("err = %v, want 404 not_found", err)
	}
}

// DESIGN §4: no partition key (of the table or an index) takes more write
// units than the shard budget allows: a batch's item rows live under
// ListShards keys ITEM#{id}#{shard} as ledger.Shard places them (the table
// lists them in key order; no list index copies them), each key holding
// no more items than ShardWriteBudget / ShardWriteUnitsPerItem at the
// flow's shard count, and its counter rows under its counter shards.
func TestStorageLayoutHasNoPerBatchHotKey(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) { storageLayoutHasNoHotKey(t, k) })
	}
}

func storageLayoutHasNoHotKey(t *testing.T, k int) {
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, nil)
	const n = 40
	req := webhookRequest(id, url, inlineItems(n))
	req.ItemsPerMessage = k
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	wait(t, id)
	b, _ := env.store.GetBatch(ctx, id)
	if want := ledger.ListShards(n, 0); b.ListShards != want || b.CounterShards < 1 || b.Chunks != 1 {
		t.Fatalf("batch shards %d, counter shards %d, chunks %d; want %d item shards", b.ListShards, b.CounterShards, b.Chunks, want)
	}
	pks := map[string]int{}
	items := 0
	var start map[string]types.AttributeValue
	for {
		out, err := env.ddb.Scan(ctx, &dynamodb.ScanInput{TableName: &env.table, ExclusiveStartKey: start})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			pk := it["pk"].(*types.AttributeValueMemberS).Value
			sk, _ := it["sk"].(*types.AttributeValueMemberS)
			if !strings.Contains(pk, "#"+id) && (sk == nil || !strings.Contains(sk.Value, id)) {
				continue
			}
			pks[pk]++
			if _, ok := it["lpk"]; ok {
				t.Errorf("row %s carries a list-index key", pk)
			}
			switch {
			case strings.HasPrefix(pk, "ITEM#"):
				items++
				if want := "ITEM#" + id + "#" + strconv.Itoa(ledger.Shard(sk.Value, b.ListShards)); pk != want {
					t.Errorf("item %s under %s, want %s", sk.Value, pk, want)
				}
				if _, ok := it["output"]; !ok {
					t.Errorf("item %s has no output", sk.Value)
				}
			case strings.HasPrefix(pk, "PACK#"):
				first, _ := strconv.ParseInt(sk.Value, 10, 64)
				if want := "PACK#" + id + "#" + strconv.Itoa(ledger.PackShard(first, b.ListShards)); pk != want {
					t.Errorf("pack %s under %s, want %s", sk.Value, pk, want)
				}
				for j := range ledger.MaxItemsPerMessage {
					if _, ok := it[fmt.Sprintf("i%d", j)]; ok {
						items++
					}
				}
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	for pk, c := range pks {
		switch {
		case strings.HasPrefix(pk, "ITEM#"):
			if c*ledger.ShardWriteUnitsPerItem > ledger.ShardWriteBudget {
				t.Errorf("item partition %s holds %d items: %d planned write units, budget %d", pk, c, c*ledger.ShardWriteUnitsPerItem, ledger.ShardWriteBudget)
			}
		case strings.HasPrefix(pk, "PACK#"):
			// A shard's packs: each written about twice per K items.
		case strings.HasPrefix(pk, "COUNT#"+id+"#1#"):
		case c != 1:
			t.Errorf("partition key %s holds %d rows", pk, c)
		}
	}
	if items != n {
		t.Fatalf("%d items in the rows, want %d", items, n)
	}
}

// A scheduled tick starts a batch whose id derives from the tick's time; a
// duplicate delivery of the same tick is the same batch.
func TestScheduleTickIsOneBatch(t *testing.T) {
	ctx := context.Background()
	name := newID(t)
	url := env.hook.route(name, nil)
	tick := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	ev := handler.ScheduleEvent{Schedule: name, Time: tick, Request: webhookRequest("", url, inlineItems(3))}
	payload, _ := json.Marshal(ev)
	var ids []string
	for range 2 {
		out, err := env.lambda.Invoke(ctx, &lambda.InvokeInput{FunctionName: &env.submitFn, Payload: payload})
		if err != nil || out.FunctionError != nil {
			t.Fatalf("invoke submit: %v %s", err, out.Payload)
		}
		var res struct {
			BatchID string `json:"batch_id"`
			Created bool   `json:"created"`
		}
		_ = json.Unmarshal(out.Payload, &res)
		ids = append(ids, res.BatchID)
		if len(ids) == 2 && res.Created {
			t.Fatal("the duplicate tick created a batch")
		}
	}
	want := handler.ScheduleBatchID(name, tick)
	if ids[0] != want || ids[1] != want || want != name+"-20261129T020000Z" {
		t.Fatalf("batch ids %v, want %s", ids, want)
	}
	v := wait(t, want)
	if v.Census.Succeeded != 3 || v.Run != 1 {
		t.Fatalf("scheduled batch: %+v", v.Census)
	}
}

// A refused upload leaves an error report naming the line and a refused
// batch that `bulkrun list` shows; the refused batch does not hold its id.
func TestRefusedUploadIsReported(t *testing.T) {
	ctx := context.Background()
	name := newID(t)
	key := "incoming/" + name + ".jsonl"
	// The options name the test: the same items for the same options
	// uploaded by an earlier run of the suite would be a repeated upload.
	opts := fmt.Sprintf(`{"url":"http://127.0.0.1:9/%s"}`, name)
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: strings.NewReader("{\"a\":1}\n{oops\n"),
		Metadata: map[string]string{"pipeline": "webhook", "batch-id": name, "pipeline-options": opts}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		o, err := env.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &env.bucket, Key: aws.String(config.UploadErrorKey(key))})
		if err == nil {
			var rep handler.UploadError
			err = json.NewDecoder(o.Body).Decode(&rep)
			o.Body.Close()
			if err != nil || rep.Key != key || rep.BatchID != name || rep.Error.Code != "invalid_request" || rep.Error.Line != 2 {
				t.Fatalf("report %+v (%v)", rep, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error report: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The refusal is a refused batch, listed as any other, naming the line.
	v, err := env.api.Status(ctx, name)
	if err != nil || v.Status != api.StatusRefused || v.Refusal == nil || v.Refusal.Line != 2 || v.Source != "s3://"+env.bucket+"/"+key {
		t.Fatalf("status: %+v %v, want refused naming line 2 and the upload", v.Refusal, err)
	}
	page, err := env.api.ListBatches(ctx, api.ListBatchesRequest{Statuses: []api.Status{api.StatusRefused}, Limit: 1000})
	if err != nil || !slices.ContainsFunc(page.Batches, func(b api.BatchSummary) bool { return b.ID == name && b.Refusal != nil }) {
		t.Fatalf("list --status refused: %v, want %s among %d", err, name, len(page.Batches))
	}
	// The refused batch does not hold its id: the corrected upload runs under it.
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: strings.NewReader("{\"a\":1}\n{\"a\":2}\n"),
		Metadata: map[string]string{"pipeline": "webhook", "batch-id": name, "pipeline-options": opts}}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for v.Status == api.StatusRefused && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		v, err = env.api.Status(ctx, name)
	}
	if err != nil || v.Status == api.StatusRefused || v.ItemCount != 2 {
		t.Fatalf("corrected upload under the refused id: %s %d items %v, want a batch of 2 items", v.Status, v.ItemCount, err)
	}
	wait(t, name)
}

// The API refuses options the pipeline would refuse for every item, and
// the same manifest under the same id with other options.
func TestSubmitRefusesBadBodiesAndOptions(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	var ae *client.APIError
	_, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", Source: api.SourceSpec{Items: inlineItems(1)}})
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "pipeline_options" || !strings.Contains(ae.Body.Message, "url") {
		t.Fatalf("webhook without url: %v, want 400 on pipeline_options", err)
	}
	_, err = env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", Source: api.SourceSpec{Items: inlineItems(1)}, Options: json.RawMessage(`{"url":"ftp://x"}`)})
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "pipeline_options" {
		t.Fatalf("ftp url: %v, want 400 on pipeline_options", err)
	}
	url := env.hook.route(id, nil)
	if _, err := env.api.Submit(ctx, webhookRequest(id, url, inlineItems(2))); err != nil {
		t.Fatal(err)
	}
	other := webhookRequest(id, url+"/other", inlineItems(2))
	_, err = env.api.Submit(ctx, other)
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Body.Field != "pipeline_options" {
		t.Fatalf("same manifest, other options: %v, want 409 on pipeline_options", err)
	}
	wait(t, id)
}
