package handler

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// createStore keeps the batch row a submit creates.
type createStore struct {
	ledger.Store // other methods are not reached
	created      []ledger.Batch
}

func (s *createStore) CreateBatch(_ context.Context, b ledger.Batch) (ledger.Batch, error) {
	s.created = append(s.created, b)
	return b, nil
}
func (s *createStore) SetFannedOut(context.Context, string, int) error { return nil }

type sentQueue struct{ ledger.Queue }

func (sentQueue) Send(context.Context, [][]byte) error { return nil }

// Requeue takes a wake's message (a signal's) as sent.
func (sentQueue) Requeue(context.Context, []byte, time.Duration) error { return nil }

// Confused deputy, point 2 (who submitted): a POST /batches event as API
// Gateway's REST API sends it with IAM authorization records the
// caller's ARN from requestContext.identity.userArn as the batch's
// submitted_by, whatever the body says; an upload records its uploader
// (userIdentity.principalId) and a schedule's tick its name. Guards docs/sources.md
// "Who submitted a batch".
func TestSubmittedByIsRecorded(t *testing.T) {
	const event = `{
  "resource": "/batches",
  "path": "/batches",
  "httpMethod": "POST",
  "headers": {"Host": "abc123.execute-api.us-east-1.amazonaws.com", "Content-Type": "application/json",
    "Authorization": "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/20261130/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"},
  "multiValueHeaders": {"Host": ["abc123.execute-api.us-east-1.amazonaws.com"]},
  "queryStringParameters": null,
  "multiValueQueryStringParameters": null,
  "pathParameters": null,
  "stageVariables": null,
  "requestContext": {
    "resourceId": "r1", "resourcePath": "/batches", "httpMethod": "POST", "path": "/v1/batches", "stage": "v1",
    "accountId": "123456789012", "apiId": "abc123", "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
    "identity": {
      "cognitoIdentityPoolId": null, "accountId": "123456789012", "cognitoIdentityId": null,
      "caller": "AROAEXAMPLEID:alice", "sourceIp": "192.0.2.1", "principalOrgId": null,
      "accessKey": "ASIAEXAMPLE", "cognitoAuthenticationType": null, "cognitoAuthenticationProvider": null,
      "userArn": "arn:aws:sts::123456789012:assumed-role/bulkrun-operator/alice", "userAgent": "bulkrun-cli", "user": "AROAEXAMPLEID:alice"
    }
  },
  "body": "{\"batch_id\":\"who-1\",\"pipeline\":\"webhook\",\"source\":{\"items\":[{\"a\":1}]}}",
  "isBase64Encoded": false
}`
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := &createStore{}
	s := &submit.Submitter{Store: store, Blobs: &discardBlobs{}, Queue: sentQueue{}, Clock: ledger.SystemClock{}, Log: log, MaxAttempts: 3, TempDir: t.TempDir()}
	sub := &Submit{API: NewAPI(s, store, nil, log), Submitter: s, Log: log}
	out, err := sub.Handle(context.Background(), json.RawMessage(event))
	resp, _ := out.(events.APIGatewayProxyResponse)
	if err != nil || resp.StatusCode != 201 || len(store.created) != 1 {
		t.Fatalf("submit: %v %+v, %d rows", err, resp, len(store.created))
	}
	if got := store.created[0].SubmittedBy; got != "arn:aws:sts::123456789012:assumed-role/bulkrun-operator/alice" {
		t.Fatalf("submitted_by %q, want the caller's ARN", got)
	}
	var view BatchView
	if err := json.Unmarshal([]byte(resp.Body), &view); err != nil || view.SubmittedBy != store.created[0].SubmittedBy {
		t.Fatalf("answer's submitted_by %q (%v)", view.SubmittedBy, err)
	}

	// The body cannot claim another identity: the field is unknown.
	var spoof map[string]any
	_ = json.Unmarshal([]byte(event), &spoof)
	spoof["body"] = `{"batch_id":"who-2","pipeline":"webhook","submitted_by":"arn:aws:iam::123456789012:user/admin","source":{"items":[1]}}`
	raw, _ := json.Marshal(spoof)
	out, _ = sub.Handle(context.Background(), raw)
	if resp := out.(events.APIGatewayProxyResponse); resp.StatusCode != 400 || len(store.created) != 1 {
		t.Fatalf("a body naming submitted_by: %d, want 400 and no batch", resp.StatusCode)
	}

	// A schedule's tick and an upload.
	if _, err := sub.Scheduled(context.Background(), ScheduleEvent{Schedule: "nightly", Time: time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC),
		Request: api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: json.RawMessage(`[1]`)}}}); err != nil {
		t.Fatal(err)
	}
	if got := store.created[len(store.created)-1].SubmittedBy; got != "schedule:nightly" {
		t.Errorf("schedule tick submitted_by %q", got)
	}
	var rec events.S3EventRecord
	_ = json.Unmarshal([]byte(`{"eventName":"ObjectCreated:Put","userIdentity":{"principalId":"AWS:AIDAEXAMPLE"}}`), &rec)
	if got := UploadSubmitter(rec); got != "s3-upload:AWS:AIDAEXAMPLE" {
		t.Errorf("upload submitted_by %q", got)
	}
}
