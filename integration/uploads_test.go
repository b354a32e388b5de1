//go:build integration

package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// upload puts body under key with the webhook pipeline's metadata (calls
// go to hookURL) and returns the object's ETag (unquoted).
func upload(t *testing.T, key string, body []byte, hookURL, encoding string) string {
	t.Helper()
	in := &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: bytes.NewReader(body),
		Metadata: map[string]string{"pipeline": "webhook", "key-field": "id", "pipeline-options": fmt.Sprintf(`{"url":%q}`, hookURL)}}
	if encoding != "" {
		in.ContentEncoding = &encoding
	}
	out, err := env.s3.PutObject(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Trim(aws.ToString(out.ETag), `"`)
}

// uploadID is the batch id an upload of key gets: its name and the digest
// of the manifest of what is stored under key now.
func uploadID(t *testing.T, key string) string {
	t.Helper()
	spec := api.SourceSpec{Object: "s3://" + env.bucket + "/" + key}
	digest, err := (&submit.Submitter{Blobs: env.blobs}).Digest(context.Background(), api.SubmitRequest{Source: spec, KeyField: "id"})
	if err != nil {
		t.Fatal(err)
	}
	return api.UploadBatchID(env.bucket, key, digest)
}

// waitBatch polls until the batch exists (a minute at most), then until
// its run is finished.
func waitBatch(t *testing.T, id string) handler.BatchView {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := env.api.Status(context.Background(), id)
		if err == nil {
			return wait(t, id)
		}
		if !errors.Is(err, api.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("batch %s: %v", id, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitReport polls for the error report at key (a minute at most).
func waitReport(t *testing.T, key string, ok func(handler.Refusal) bool) handler.Refusal {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		body, err := env.blobs.Get(context.Background(), key)
		if err == nil {
			var r handler.Refusal
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("report %s: %v", key, err)
			}
			if ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error report at %s: %v (%s)", key, err, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// invokeSubmit runs submit synchronously on payload and returns its answer.
func invokeSubmit(t *testing.T, payload any) json.RawMessage {
	t.Helper()
	raw, _ := json.Marshal(payload)
	out, err := env.lambda.Invoke(context.Background(), &lambda.InvokeInput{FunctionName: &env.submitFn, Payload: raw})
	if err != nil || out.FunctionError != nil {
		t.Fatalf("invoke submit: %v %s", err, out.Payload)
	}
	return out.Payload
}

// s3Event is an S3 notification as S3 sends it: the key URL-encoded
// ('+' for a space), the ETag unquoted.
func s3Event(key, etag string, size int64) events.S3Event {
	return events.S3Event{Records: []events.S3EventRecord{{EventVersion: "2.1", EventSource: "aws:s3", AWSRegion: "us-east-1",
		EventName: "ObjectCreated:Put", S3: events.S3Entity{SchemaVersion: "1.0",
			Bucket: events.S3Bucket{Name: env.bucket, Arn: "arn:aws:s3:::" + env.bucket},
			Object: events.S3Object{Key: strings.ReplaceAll(url.QueryEscape(key), "%2F", "/"), Size: size, ETag: etag}}}}}
}

// refusedEvents routes the Batch Refused events whose detail matches
// detail (an EventBridge pattern) to a new queue, and returns a function
// that waits for the first one (30 s at most).
func refusedEvents(t *testing.T, name string, detail map[string]any) func() handler.Refusal {
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
	pattern, _ := json.Marshal(map[string]any{"source": []string{api.EventSource}, "detail-type": []string{api.DetailRefused}, "detail": detail})
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: &qname, EventPattern: aws.String(string(pattern))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.DeleteRule(context.Background(), &eventbridge.DeleteRuleInput{Name: &qname, Force: true}) })
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: &qname, Targets: []ebtypes.Target{{Id: aws.String("q"), Arn: aws.String(attrs.Attributes["QueueArn"])}}}); err != nil {
		t.Fatal(err)
	}
	return func() handler.Refusal {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out, err := env.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				var ev struct {
					DetailType string          `json:"detail-type"`
					Detail     handler.Refusal `json:"detail"`
				}
				if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil || ev.DetailType != api.DetailRefused {
					t.Fatalf("event %s: %v", aws.ToString(m.Body), err)
				}
				return ev.Detail
			}
		}
		t.Fatal("no Batch Refused event within 30 s")
		return handler.Refusal{}
	}
}

// S3 uploads, formats: names in any case and .ndjson start a batch, as
// through the CLI; an object under incoming/ whose format cannot be told
// leaves an error report (no notification suffix filter drops it).
func TestUploadFormatsAnyCase(t *testing.T) {
	name := newID(t)
	files := map[string]string{
		"incoming/" + name + "-a.CSV":    "id,qty\na,1\nb,2\n",
		"incoming/" + name + "-b.JSONL":  "{\"id\":\"a\"}\n{\"id\":\"b\"}\n",
		"incoming/" + name + "-c.ndjson": "{\"id\":\"a\"}\n{\"id\":\"b\"}\n",
	}
	for key, body := range files {
		upload(t, key, []byte(body), env.hook.route(key, nil), "")
	}
	unknown := "incoming/" + name + " notes.txt"
	upload(t, unknown, []byte("{\"id\":\"a\"}\n"), env.hook.route(unknown, nil), "")
	for key := range files {
		if v := waitBatch(t, uploadID(t, key)); v.Census.Succeeded != 2 || v.Census.Total != 2 {
			t.Errorf("%s: census %+v, want 2 succeeded", key, v.Census)
		}
		if calls := env.hook.counts(key); calls["a"] != 1 || calls["b"] != 1 {
			t.Errorf("%s: calls %v", key, calls)
		}
	}
	rep := waitReport(t, config.UploadErrorKey(unknown), func(handler.Refusal) bool { return true })
	if rep.Key != unknown || rep.Retrying || !strings.Contains(rep.Error.Message, "cannot tell the format") {
		t.Fatalf("report %+v", rep)
	}
}

// S3 uploads, gzip: a .jsonl.gz upload and a .jsonl stored with
// Content-Encoding: gzip are read decompressed; a truncated gzip stream is
// refused with an error that says gzip.
func TestUploadGzip(t *testing.T) {
	name := newID(t)
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	fmt.Fprint(w, "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n")
	w.Close()
	byName := "incoming/" + name + "-n.jsonl.gz"
	byEncoding := "incoming/" + name + "-e.jsonl"
	cutGzip := "incoming/" + name + "-x.csv.gz"
	upload(t, byName, z.Bytes(), env.hook.route(byName, nil), "")
	upload(t, byEncoding, z.Bytes(), env.hook.route(byEncoding, nil), "gzip")
	var zcsv bytes.Buffer
	w = gzip.NewWriter(&zcsv)
	fmt.Fprint(w, "id,qty\na,1\nb,2\n")
	w.Close()
	upload(t, cutGzip, zcsv.Bytes()[:zcsv.Len()-6], env.hook.route(cutGzip, nil), "") // the gzip trailer cut short
	for _, key := range []string{byName, byEncoding} {
		if v := waitBatch(t, uploadID(t, key)); v.Census.Succeeded != 3 {
			t.Errorf("%s: census %+v, want 3 succeeded", key, v.Census)
		}
		if calls := env.hook.counts(key); len(calls) != 3 || calls["c"] != 1 {
			t.Errorf("%s: calls %v", key, calls)
		}
	}
	rep := waitReport(t, config.UploadErrorKey(cutGzip), func(handler.Refusal) bool { return true })
	if rep.Key != cutGzip || !strings.Contains(rep.Error.Message, "gzip") {
		t.Fatalf("report %+v, want one that says gzip", rep)
	}
}

// S3 uploads, identity: the same bytes uploaded again as a multipart upload
// (another ETag) under the same name are the same batch, and every item
// runs once; a changed file under the same name is a new batch.
func TestUploadIdentityIsNameAndDigest(t *testing.T) {
	ctx := context.Background()
	name := newID(t)
	key := "incoming/" + name + " orders.jsonl"
	body := []byte("{\"id\":\"a\"}\n{\"id\":\"b\"}\n")
	hook := env.hook.route(name, nil)
	upload(t, key, body, hook, "")
	id := uploadID(t, key)
	first := waitBatch(t, id)

	// The same bytes as a one-part multipart upload: ETag "{md5 of md5}-1".
	mp, err := env.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &env.bucket, Key: &key,
		Metadata: map[string]string{"pipeline": "webhook", "key-field": "id", "pipeline-options": fmt.Sprintf(`{"url":%q}`, hook)}})
	if err != nil {
		t.Fatal(err)
	}
	part, err := env.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: &env.bucket, Key: &key, UploadId: mp.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	done, err := env.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &env.bucket, Key: &key, UploadId: mp.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: []s3types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	etag := strings.Trim(aws.ToString(done.ETag), `"`)
	// Its notification, delivered now and synchronously (S3 sends one too).
	var res handler.UploadsResult
	if err := json.Unmarshal(invokeSubmit(t, s3Event(key, etag, int64(len(body)))), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Started) != 1 || res.Started[0].BatchID != id || res.Started[0].Created || res.Started[0].Key != key {
		t.Fatalf("multipart re-upload: %+v, want batch %s found, not created", res, id)
	}
	again, err := env.api.Status(ctx, id)
	if err != nil || again.Run != 1 || !again.FinishedAt.Equal(first.FinishedAt) {
		t.Fatalf("the re-upload changed the batch: %+v %v", again, err)
	}

	// A changed file under the same name is a new batch.
	upload(t, key, []byte("{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n"), hook, "")
	changed := uploadID(t, key)
	if changed == id {
		t.Fatal("a changed file has the same batch id")
	}
	if v := waitBatch(t, changed); v.Census.Succeeded != 3 {
		t.Fatalf("changed file: census %+v", v.Census)
	}
	if calls := env.hook.counts(name); calls["a"] != 2 || calls["b"] != 2 || calls["c"] != 1 {
		t.Fatalf("calls %v: want a and b once per batch, c once", calls)
	}
}

// S3 uploads, the object the event names: an event whose object was
// replaced or deleted before submit read it leaves an error report naming
// the decoded key (and a Batch Refused event), never a batch of another
// version.
func TestUploadReadsTheObjectTheEventNames(t *testing.T) {
	name := newID(t)
	replaced := "incoming/" + name + " v+1.jsonl"
	hook := env.hook.route(name, nil)
	old := upload(t, replaced, []byte("{\"id\":\"a\"}\n"), hook, "")
	upload(t, replaced, []byte("{\"id\":\"z\"}\n"), hook, "")
	gone := "incoming/" + name + " gone é.csv"
	nextRefusal := refusedEvents(t, name, map[string]any{"key": []string{gone}})

	var res handler.UploadsResult
	if err := json.Unmarshal(invokeSubmit(t, s3Event(replaced, old, 11)), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Started) != 0 || len(res.Refused) != 1 || res.Refused[0] != replaced {
		t.Fatalf("replaced object: %+v, want it refused", res)
	}
	rep := waitReport(t, config.UploadErrorKey(replaced), func(r handler.Refusal) bool { return r.ETag == old })
	if rep.Key != replaced || rep.Retrying || !strings.Contains(rep.Error.Message, "was replaced before it was read") {
		t.Fatalf("report %+v", rep)
	}

	invokeSubmit(t, s3Event(gone, "0123456789abcdef0123456789abcdef", 20))
	rep = waitReport(t, config.UploadErrorKey(gone), func(handler.Refusal) bool { return true })
	if rep.Key != gone || rep.Retrying || !strings.Contains(rep.Error.Message, "s3://"+env.bucket+"/"+gone+" was deleted before it was read") {
		t.Fatalf("report %+v", rep)
	}
	if ev := nextRefusal(); ev.Source != handler.SourceUpload || ev.Key != gone || ev.Error.Message != rep.Error.Message ||
		ev.Report != "s3://"+env.bucket+"/"+config.UploadErrorKey(gone) {
		t.Fatalf("Batch Refused event %+v, want the report's detail", ev)
	}
}

// Failed starts leave no trace, schedule ticks: a tick whose submit is
// refused leaves an error report and a Batch Refused event naming the
// schedule, the tick and the reason, and no batch.
func TestScheduleTickRefusedLeavesATrace(t *testing.T) {
	name := newID(t)
	tick := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	nextRefusal := refusedEvents(t, name, map[string]any{"schedule": []string{name}})
	req := api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Object: "s3://" + env.bucket + "/it-sources/" + name + "-missing.jsonl"},
		Options: json.RawMessage(`{"url":"http://127.0.0.1:9/x"}`)}
	invokeSubmit(t, handler.ScheduleEvent{Schedule: name, Time: tick, Request: req})
	id := handler.ScheduleBatchID(name, tick)
	rep := waitReport(t, handler.ScheduleErrorKey(name, id), func(handler.Refusal) bool { return true })
	ev := nextRefusal()
	for _, r := range []handler.Refusal{rep, ev} {
		if r.Source != handler.SourceSchedule || r.Schedule != name || r.Tick == nil || !r.Tick.Equal(tick) || r.BatchID != id ||
			r.Retrying || !strings.Contains(r.Error.Message, "does not exist") {
			t.Fatalf("refusal %+v", r)
		}
	}
	if _, err := env.api.Status(context.Background(), id); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("status of %s: %v, want not found", id, err)
	}
}

// Failed starts leave no trace, failure destination: an asynchronous
// invocation of submit that fails every attempt (Lambda retries it twice)
// ends on the submit failures queue with its event.
func TestFailedStartGoesToTheFailureQueue(t *testing.T) {
	ctx := context.Background()
	marker := newID(t)
	queueURL, err := env.stack.Get(config.OutputSubmitFailuresQueueURL)
	if err != nil {
		t.Fatal(err)
	}
	// An event submit cannot handle: it fails on every attempt.
	payload, _ := json.Marshal(map[string]any{"not_a_bulkrun_event": marker})
	if _, err := env.lambda.Invoke(ctx, &lambda.InvokeInput{FunctionName: &env.submitFn, Payload: payload, InvocationType: lambdatypes.InvocationTypeEvent}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		out, err := env.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queueURL, WaitTimeSeconds: 2, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			if !strings.Contains(body, marker) {
				continue // another test's failed start
			}
			env.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &queueURL, ReceiptHandle: m.ReceiptHandle})
			var rec struct {
				RequestContext struct {
					Condition              string `json:"condition"`
					ApproximateInvokeCount int    `json:"approximateInvokeCount"`
				} `json:"requestContext"`
				RequestPayload map[string]any `json:"requestPayload"`
			}
			if err := json.Unmarshal([]byte(body), &rec); err != nil || rec.RequestPayload["not_a_bulkrun_event"] != marker {
				t.Fatalf("failure record %s: %v", body, err)
			}
			return
		}
	}
	t.Fatal("the failed invocation did not reach the submit failures queue within 90 s")
}

// listBySource polls GET /batches?source=… through the deployed API (a
// minute at most: the index is eventually consistent) until it answers
// want batches, and returns them.
func listBySource(t *testing.T, source string, want int) []api.BatchSummary {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := env.api.ListBatches(context.Background(), api.ListBatchesRequest{Source: source})
		if err != nil {
			t.Fatalf("list source %s: %v", source, err)
		}
		if len(p.Batches) >= want {
			return p.Batches
		}
		if time.Now().After(deadline) {
			t.Fatalf("list source %s: %d batches, want %d", source, len(p.Batches), want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Guards docs/sources.md "Upload instead" (find an upload's batch by its
// key): an upload is found by its object key through the deployed API
// (GET /batches?source=s3://bucket/key), whether its id was derived or
// named with x-amz-meta-batch-id, a name with spaces and parentheses
// included; the other file's batches are not listed.
func TestUploadFoundBySource(t *testing.T) {
	ctx := context.Background()
	name := newID(t)
	hook := env.hook.route(name, nil)
	key := "incoming/" + name + " records (1).csv"
	upload(t, key, []byte("id,text\na,x\nb,y\n"), hook, "")
	id := uploadID(t, key)
	got := listBySource(t, "s3://"+env.bucket+"/"+key, 1)
	if len(got) != 1 || got[0].ID != id || got[0].Pipeline != "webhook" {
		t.Fatalf("by source: %+v, want the one batch %s", got, id)
	}
	if v := waitBatch(t, id); v.Source != "s3://"+env.bucket+"/"+key || v.Census.Succeeded != 2 {
		t.Fatalf("batch %s: source %q census %+v", id, v.Source, v.Census)
	}

	named := "incoming/" + name + "-named.csv"
	in := &s3.PutObjectInput{Bucket: &env.bucket, Key: &named, Body: strings.NewReader("id,text\nc,z\n"),
		Metadata: map[string]string{"pipeline": "webhook", "key-field": "id", "batch-id": name + "-named", "pipeline-options": fmt.Sprintf(`{"url":%q}`, hook)}}
	if _, err := env.s3.PutObject(ctx, in); err != nil {
		t.Fatal(err)
	}
	got = listBySource(t, "s3://"+env.bucket+"/"+named, 1)
	if len(got) != 1 || got[0].ID != name+"-named" {
		t.Fatalf("named upload by source: %+v, want %s-named", got, name)
	}
	waitBatch(t, name+"-named")
	if p, err := env.api.ListBatches(ctx, api.ListBatchesRequest{Source: "s3://" + env.bucket + "/incoming/" + name + " none.csv"}); err != nil || len(p.Batches) != 0 {
		t.Fatalf("a file never uploaded: %+v %v, want none", p.Batches, err)
	}
}

// Guards docs/sources.md "Upload instead" (a renamed copy is not run
// again), on the deployed stack: the same file uploaded again under
// another name ("records (1).csv", as a browser names a second download)
// starts nothing — an error report with code repeated_upload names the
// batch the first name started and says how to run it again, and the
// listing by source shows the upload as a refused batch; uploaded once
// more with x-amz-meta-rerun: true it runs, every item once more. Every
// item of the first batch runs once.
func TestUploadRepeatedUnderAnotherName(t *testing.T) {
	ctx := context.Background()
	name := newID(t)
	hook := env.hook.route(name, nil)
	body := []byte("id,text\nr1,a\nr2,b\nr3,c\n")
	first := "incoming/" + name + " records.csv"
	upload(t, first, body, hook, "")
	firstID := uploadID(t, first)
	if v := waitBatch(t, firstID); v.Census.Succeeded != 3 {
		t.Fatalf("first upload: census %+v", v.Census)
	}

	again := "incoming/" + name + " records (1).csv"
	upload(t, again, body, hook, "")
	rep := waitReport(t, config.UploadErrorKey(again), func(handler.Refusal) bool { return true })
	if rep.Error.Code != api.RefusalRepeatedUpload || rep.Retrying || !strings.Contains(rep.Error.Message, "batch "+firstID) ||
		!strings.Contains(rep.Error.Message, first) || !strings.Contains(rep.Error.Message, "x-amz-meta-rerun: true") {
		t.Fatalf("report of the renamed copy: %+v", rep)
	}
	got := listBySource(t, "s3://"+env.bucket+"/"+again, 1)
	if len(got) != 1 || got[0].Status != api.StatusRefused || got[0].Refusal == nil || got[0].Refusal.Code != api.RefusalRepeatedUpload {
		t.Fatalf("the renamed copy by source: %+v, want one refused batch (repeated_upload)", got)
	}
	time.Sleep(2 * time.Second) // nothing may run: give a wrongly started batch the time to call
	if calls := env.hook.counts(name); calls["r1"] != 1 || calls["r2"] != 1 || calls["r3"] != 1 {
		t.Fatalf("calls %v: want each item once (the copy ran nothing)", calls)
	}

	// Asked to run again: it does, under its own batch.
	in := &s3.PutObjectInput{Bucket: &env.bucket, Key: &again, Body: bytes.NewReader(body),
		Metadata: map[string]string{"pipeline": "webhook", "key-field": "id", "rerun": "true", "pipeline-options": fmt.Sprintf(`{"url":%q}`, hook)}}
	if _, err := env.s3.PutObject(ctx, in); err != nil {
		t.Fatal(err)
	}
	rerunID := uploadID(t, again)
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := env.api.Status(ctx, rerunID)
		// Its id held the refused batch of the copy: wait past it.
		if err == nil && v.Status.Finished() && v.Status != api.StatusRefused {
			if v.Census == nil || v.Census.Succeeded != 3 {
				t.Fatalf("the rerun upload: %+v", v.Census)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rerun upload %s did not run: %+v %v", rerunID, v.Batch, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if calls := env.hook.counts(name); calls["r1"] != 2 || calls["r2"] != 2 || calls["r3"] != 2 {
		t.Fatalf("calls %v: want each item twice (first upload, rerun)", calls)
	}
}
