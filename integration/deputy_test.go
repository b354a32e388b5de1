//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// Confused deputy, point 2, on the deployed stack: a caller who may
// submit cannot make bulkrun read another batch's objects under batches/
// or a bucket the stack was not told of. Before, POST /batches with
// {"source": {"object": "s3://<stack bucket>/batches/<other id>/manifests/…"}}
// was accepted (202) and its background read copied the other batch's
// inputs into a batch the caller could read back; now it is 400
// invalid_request naming source.object (source.prefix for a prefix). A
// thumbnail item naming a key under batches/ fails permanently, naming
// its bucket/key, while one naming an upload succeeds. Guards docs/sources.md
// "Sources and who may read what".
func TestConfusedDeputySources(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	png, err := os.ReadFile("../examples/images/folder.png")
	if err != nil {
		t.Fatal(err)
	}
	upload := "uploads/" + id + "/folder.png"
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &upload, Body: bytes.NewReader(png)}); err != nil {
		t.Fatal(err)
	}
	// The other batch: its manifest is what the caller must not read.
	other := id + "-other"
	items, _ := json.Marshal([]map[string]string{{"bucket": env.bucket, "key": upload}})
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: other, Pipeline: "thumbnail", Source: api.SourceSpec{Items: items}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), other) })
	ov := wait(t, other)
	if ov.Census.Succeeded != 1 || ov.ManifestKey == "" {
		t.Fatalf("other batch: %+v", ov.Census)
	}
	if _, err := env.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &env.bucket, Key: &ov.ManifestKey}); err != nil {
		t.Fatalf("the other batch's manifest is not there to be named: %v", err)
	}

	for _, tt := range []struct {
		name  string
		src   api.SourceSpec
		field string
	}{
		{"another batch's manifest", api.SourceSpec{Object: "s3://" + env.bucket + "/" + ov.ManifestKey}, "source.object"},
		{"another batch's objects", api.SourceSpec{Prefix: "s3://" + env.bucket + "/batches/" + other + "/"}, "source.prefix"},
		{"the whole stack bucket", api.SourceSpec{Prefix: "s3://" + env.bucket + "/"}, "source.prefix"},
		{"an undeclared key of the stack bucket", api.SourceSpec{Object: "s3://" + env.bucket + "/private/" + id + ".jsonl"}, "source.object"},
		{"another bucket", api.SourceSpec{Object: "s3://not-a-declared-source-" + strings.ToLower(id[len(id)-8:]) + "/a.jsonl"}, "source.object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bid := fmt.Sprintf("%s-%d", id, len(tt.name))
			_, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: bid, Pipeline: "thumbnail", Source: tt.src})
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Code != "invalid_request" || ae.Body.Field != tt.field {
				t.Fatalf("submit: %v, want 400 invalid_request naming %s", err, tt.field)
			}
			if _, err := env.api.Status(ctx, bid); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("a refused submit left a batch: %v", err)
			}
		})
	}

	// At run time: the item function refuses an item's {bucket, key}
	// under batches/ and reads the upload.
	items, _ = json.Marshal([]map[string]string{
		{"k": "stolen", "bucket": env.bucket, "key": ov.ManifestKey},
		{"k": "own", "bucket": env.bucket, "key": upload},
	})
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "thumbnail", KeyField: "k", MaxAttempts: 3, Source: api.SourceSpec{Items: items}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })
	v := wait(t, id)
	if v.Census.Succeeded != 1 || v.Census.Failed != 1 {
		t.Fatalf("census %+v, want own succeeded and stolen failed", v.Census)
	}
	page, err := env.api.Items(ctx, id, api.OutcomeFailed, "", 10)
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("failed items: %+v %v", page, err)
	}
	it := page.Items[0]
	if it.Key != "stolen" || it.RunAttempts != 1 || !strings.Contains(it.Error, "input bucket/key") || !strings.Contains(it.Error, "never a source") {
		t.Fatalf("failed item %+v, want stolen failed once (permanent), naming its bucket/key", it)
	}
}

// Who submitted, point 2, on the deployed stack: a POST /batches event as
// API Gateway's REST API sends it with IAM authorization (the caller's ARN
// in requestContext.identity.userArn), given to the deployed submit
// function, records that ARN as the batch's submitted_by: the batch row
// (GET /batches/{id}) and the run's report carry it. Guards docs/sources.md "Who
// submitted a batch".
func TestSubmittedByRecorded(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	const arn = "arn:aws:sts::123456789012:assumed-role/bulkrun-operator/alice"
	items, _ := json.Marshal([]int{1, 2})
	body, _ := json.Marshal(map[string]any{"batch_id": id, "pipeline": "webhook", "source": map[string]any{"items": json.RawMessage(items)},
		"pipeline_options": map[string]string{"url": env.hook.route(id, func(string, int) int { return 200 })}})
	event := map[string]any{
		"resource": "/batches", "path": "/batches", "httpMethod": "POST",
		"headers":        map[string]string{"Host": "abc123.execute-api.us-east-1.amazonaws.com", "Content-Type": "application/json"},
		"pathParameters": nil, "queryStringParameters": nil, "stageVariables": nil,
		"requestContext": map[string]any{
			"resourcePath": "/batches", "httpMethod": "POST", "path": "/v1/batches", "stage": "v1", "accountId": "123456789012",
			"apiId": "abc123", "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
			"identity": map[string]any{"accountId": "123456789012", "caller": "AROAEXAMPLEID:alice", "accessKey": "ASIAEXAMPLE",
				"sourceIp": "192.0.2.1", "userArn": arn, "user": "AROAEXAMPLEID:alice", "userAgent": "bulkrun-cli"},
		},
		"body": string(body), "isBase64Encoded": false,
	}
	payload, _ := json.Marshal(event)
	out, err := env.lambda.Invoke(ctx, &lambda.InvokeInput{FunctionName: &env.submitFn, Payload: payload})
	if err != nil || out.FunctionError != nil {
		t.Fatalf("invoke submit: %v %s", err, out.Payload)
	}
	var resp struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	if err := json.Unmarshal(out.Payload, &resp); err != nil || resp.StatusCode != 201 {
		t.Fatalf("answer %s (%v), want 201", out.Payload, err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })
	v := wait(t, id)
	if v.SubmittedBy != arn {
		t.Fatalf("GET submitted_by %q, want %q", v.SubmittedBy, arn)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil || rep.SubmittedBy != arn {
		t.Fatalf("report submitted_by %q (%v), want %q", rep.SubmittedBy, err, arn)
	}
}
