package faultproxy

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// upstream is a stand-in for the emulator: it answers the few calls the
// tests make with minimal successful answers and records what reached it.
type upstream struct {
	mu    sync.Mutex
	calls []string // "service.Operation"
	// what the batch calls carried: DynamoDB item ids, S3 keys, SQS entry ids
	entries []string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c := classify(r, body)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, c.String())
	switch c.String() {
	case "dynamodb.BatchWriteItem":
		var req struct {
			RequestItems map[string][]struct {
				PutRequest struct{ Item map[string]map[string]string }
			}
		}
		_ = json.Unmarshal(body, &req)
		for _, ws := range req.RequestItems {
			for _, w := range ws {
				u.entries = append(u.entries, w.PutRequest.Item["id"]["S"])
			}
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		io.WriteString(w, `{"UnprocessedItems":{}}`)
	case "sqs.SendMessageBatch":
		var req struct {
			Entries []struct{ Id, MessageBody string }
		}
		_ = json.Unmarshal(body, &req)
		var ok []map[string]string
		for _, e := range req.Entries {
			u.entries = append(u.entries, e.Id)
			sum := md5.Sum([]byte(e.MessageBody))
			ok = append(ok, map[string]string{"Id": e.Id, "MessageId": "m-" + e.Id, "MD5OfMessageBody": hex.EncodeToString(sum[:])})
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		json.NewEncoder(w).Encode(map[string]any{"Successful": ok})
	case "s3.DeleteObjects":
		var req deleteRequest
		_ = xml.Unmarshal(body, &req)
		var out bytes.Buffer
		out.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
		for _, o := range req.Objects {
			u.entries = append(u.entries, o.Key)
			fmt.Fprintf(&out, "<Deleted><Key>%s</Key></Deleted>", escapeXML(o.Key))
		}
		out.WriteString("</DeleteResult>")
		w.Header().Set("Content-Type", "application/xml")
		w.Write(out.Bytes())
	case "s3.PutObject", "s3.GetObject":
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, "x")
	case "lambda.Invoke":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	default:
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		io.WriteString(w, `{}`)
	}
}

func (u *upstream) seen() (calls, entries []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string{}, u.calls...), append([]string{}, u.entries...)
}

type rig struct {
	proxy *Proxy
	up    *upstream
	url   string
	cfg   aws.Config
}

// newRig starts an upstream, a proxy in front of it and SDK clients that
// make one attempt per call (so the test sees each injected fault).
func newRig(t *testing.T, c Config) *rig {
	t.Helper()
	up := &upstream{}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	p, err := New(us.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Set(c); err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(p)
	t.Cleanup(ps.Close)
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(ps.URL),
		Retryer:      func() aws.Retryer { return aws.NopRetryer{} },
	}
	return &rig{proxy: p, up: up, url: ps.URL, cfg: cfg}
}

func (r *rig) ddb() *dynamodb.Client { return dynamodb.NewFromConfig(r.cfg) }
func (r *rig) sqs() *sqs.Client      { return sqs.NewFromConfig(r.cfg) }
func (r *rig) lambda() *lambda.Client {
	return lambda.NewFromConfig(r.cfg)
}
func (r *rig) s3() *s3.Client {
	return s3.NewFromConfig(r.cfg, func(o *s3.Options) { o.UsePathStyle = true })
}

func (r *rig) call(t *testing.T, service string) error {
	t.Helper()
	ctx := context.Background()
	var err error
	switch service {
	case "dynamodb":
		_, err = r.ddb().PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "a"}}})
	case "sqs":
		_, err = r.sqs().SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(r.url + "/000000000000/q"),
			Entries: []sqstypes.SendMessageBatchRequestEntry{{Id: aws.String("0"), MessageBody: aws.String("b")}}})
	case "s3":
		_, err = r.s3().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
	case "lambda":
		_, err = r.lambda().Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String("f")})
	default:
		t.Fatalf("no call for %s", service)
	}
	return err
}

// Guards the integration suite's fault injection (faults "in each
// service's real wire shape"): every injected throttling or 500 answer
// reaches the AWS SDK for Go v2 as the service's own error code, which the
// SDK classifies as a throttle or a retryable error exactly as it does
// AWS's, and the emulator never sees the call.
func TestFaultProxyWireShapes(t *testing.T) {
	tests := []struct {
		service, code string
		kind          Kind
		wantCode      string
		wantStatus    int
		wantThrottle  bool
	}{
		{"dynamodb", "", KindThrottle, "ProvisionedThroughputExceededException", 400, true},
		{"dynamodb", "ThrottlingException", KindThrottle, "ThrottlingException", 400, true},
		{"dynamodb", "RequestLimitExceeded", KindThrottle, "RequestLimitExceeded", 400, true},
		{"dynamodb", "", KindServerError, "InternalServerError", 500, false},
		{"sqs", "", KindThrottle, "RequestThrottled", 403, true},
		{"sqs", "ThrottlingException", KindThrottle, "ThrottlingException", 400, true},
		{"sqs", "", KindServerError, "InternalError", 500, false},
		{"s3", "", KindThrottle, "SlowDown", 503, true},
		{"s3", "", KindServerError, "InternalError", 500, false},
		{"lambda", "", KindThrottle, "TooManyRequestsException", 429, true},
		{"lambda", "", KindServerError, "ServiceException", 500, false},
	}
	for _, tt := range tests {
		t.Run(tt.service+"/"+string(tt.kind)+"/"+tt.wantCode, func(t *testing.T) {
			r := newRig(t, Config{Seed: 1, Rules: []Rule{{Service: tt.service, Kind: tt.kind, Rate: 1, Code: tt.code}}})
			err := r.call(t, tt.service)
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tt.wantCode {
				t.Fatalf("error %v, want API error %s", err, tt.wantCode)
			}
			var status interface{ HTTPStatusCode() int }
			if !errors.As(err, &status) || status.HTTPStatusCode() != tt.wantStatus {
				t.Fatalf("status of %v, want %d", err, tt.wantStatus)
			}
			if got := retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary; got != tt.wantThrottle {
				t.Errorf("SDK sees throttle = %v, want %v", got, tt.wantThrottle)
			}
			if retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) != aws.TrueTernary && !tt.wantThrottle {
				t.Errorf("SDK does not retry %v", err)
			}
			if calls, _ := r.up.seen(); len(calls) != 0 {
				t.Errorf("emulator saw %v, want nothing", calls)
			}
			if s := r.proxy.Status(); s.Injected[tt.kind] != 1 || s.Requests != 1 {
				t.Errorf("status %+v", s)
			}
		})
	}
}

// Guards the crash windows of the integration suite and `make soak`: reset
// drops the connection before the emulator sees the call, reset_after
// after it took effect; either way the caller gets no answer.
func TestFaultProxyResets(t *testing.T) {
	for _, kind := range []Kind{KindReset, KindResetAfter} {
		t.Run(string(kind), func(t *testing.T) {
			r := newRig(t, Config{Rules: []Rule{{Service: "dynamodb", Operations: []string{"PutItem"}, Kind: kind, Rate: 1}}})
			err := r.call(t, "dynamodb")
			var api smithy.APIError
			if err == nil || errors.As(err, &api) {
				t.Fatalf("error %v, want a transport error", err)
			}
			if retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) != aws.TrueTernary {
				t.Errorf("SDK does not retry %v", err)
			}
			calls, _ := r.up.seen()
			want := 0
			if kind == KindResetAfter {
				want = 1
			}
			if len(calls) != want {
				t.Fatalf("emulator saw %v, want %d calls", calls, want)
			}
		})
	}
}

// Guards the partial-failure answers bulkrun must handle (BatchWriteItem
// UnprocessedItems, DeleteObjects per-key Errors, SendMessageBatch
// Failed): the entries reported failed really did not reach the emulator,
// the others did, and together they are the whole request.
func TestFaultProxyPartialFailures(t *testing.T) {
	ctx := context.Background()
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	check := func(t *testing.T, r *rig, failed []string) {
		t.Helper()
		_, reached := r.up.seen()
		if len(failed) == 0 || len(reached) == 0 {
			t.Fatalf("failed %v reached %v: want some of each", failed, reached)
		}
		all := append(append([]string{}, failed...), reached...)
		sort.Strings(all)
		if strings.Join(all, ",") != strings.Join(keys, ",") {
			t.Fatalf("failed %v + reached %v is not the request", failed, reached)
		}
		if r.proxy.Status().Injected[KindPartial] != 1 {
			t.Fatalf("status %+v", r.proxy.Status())
		}
	}
	t.Run("BatchWriteItem", func(t *testing.T) {
		r := newRig(t, Config{Seed: 3, Rules: []Rule{{Service: "dynamodb", Operations: []string{"BatchWriteItem"}, Kind: KindPartial, Rate: 1}}})
		var ws []ddbtypes.WriteRequest
		for _, k := range keys {
			ws = append(ws, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: k}}}})
		}
		out, err := r.ddb().BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{"t": ws}})
		if err != nil {
			t.Fatal(err)
		}
		var failed []string
		for table, ws := range out.UnprocessedItems {
			if table != "t" {
				t.Fatalf("unprocessed table %q", table)
			}
			for _, w := range ws {
				failed = append(failed, w.PutRequest.Item["id"].(*ddbtypes.AttributeValueMemberS).Value)
			}
		}
		check(t, r, failed)
	})
	t.Run("DeleteObjects", func(t *testing.T) {
		r := newRig(t, Config{Seed: 3, Rules: []Rule{{Service: "s3", Operations: []string{"DeleteObjects"}, Kind: KindPartial, Rate: 1, Code: "SlowDown"}}})
		var ids []s3types.ObjectIdentifier
		for _, k := range keys {
			ids = append(ids, s3types.ObjectIdentifier{Key: aws.String(k)})
		}
		out, err := r.s3().DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("b"), Delete: &s3types.Delete{Objects: ids}})
		if err != nil {
			t.Fatal(err)
		}
		var failed []string
		for _, e := range out.Errors {
			if aws.ToString(e.Code) != "SlowDown" {
				t.Fatalf("error code %q, want SlowDown", aws.ToString(e.Code))
			}
			failed = append(failed, aws.ToString(e.Key))
		}
		if len(out.Deleted)+len(out.Errors) != len(keys) {
			t.Fatalf("%d deleted + %d errors, want %d", len(out.Deleted), len(out.Errors), len(keys))
		}
		check(t, r, failed)
	})
	t.Run("SendMessageBatch", func(t *testing.T) {
		r := newRig(t, Config{Seed: 3, Rules: []Rule{{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: KindPartial, Rate: 1}}})
		var es []sqstypes.SendMessageBatchRequestEntry
		for _, k := range keys {
			es = append(es, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(k), MessageBody: aws.String("body " + k)})
		}
		out, err := r.sqs().SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(r.url + "/000000000000/q"), Entries: es})
		if err != nil {
			t.Fatal(err)
		}
		var failed []string
		for _, f := range out.Failed {
			if f.SenderFault || aws.ToString(f.Code) != "InternalError" {
				t.Fatalf("failed entry %+v, want a transient InternalError", f)
			}
			failed = append(failed, aws.ToString(f.Id))
		}
		if len(out.Successful)+len(out.Failed) != len(keys) {
			t.Fatalf("%d successful + %d failed, want %d", len(out.Successful), len(out.Failed), len(keys))
		}
		check(t, r, failed)
	})
	// A batch of one entry fails whole, without reaching the emulator.
	t.Run("single entry", func(t *testing.T) {
		r := newRig(t, Config{Rules: []Rule{{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: KindPartial, Rate: 1, SenderFault: true, Code: "InvalidMessageContents"}}})
		out, err := r.sqs().SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(r.url + "/000000000000/q"),
			Entries: []sqstypes.SendMessageBatchRequestEntry{{Id: aws.String("only"), MessageBody: aws.String("b")}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Failed) != 1 || !out.Failed[0].SenderFault || aws.ToString(out.Failed[0].Code) != "InvalidMessageContents" || len(out.Successful) != 0 {
			t.Fatalf("answer %+v", out)
		}
		if calls, _ := r.up.seen(); len(calls) != 0 {
			t.Fatalf("emulator saw %v", calls)
		}
	})
}

// Guards "seeded and reproducible": the same seed and the same calls give
// the same faults; another seed gives others; the rate is honoured.
func TestFaultProxySeededReproducible(t *testing.T) {
	run := func(seed int64) string {
		r := newRig(t, Config{Seed: seed, Rules: []Rule{
			{Service: "dynamodb", Kind: KindThrottle, Rate: 0.05},
			{Service: "dynamodb", Kind: KindServerError, Rate: 0.05},
		}})
		var b strings.Builder
		for range 400 {
			err := r.call(t, "dynamodb")
			var api smithy.APIError
			switch {
			case err == nil:
				b.WriteByte('.')
			case errors.As(err, &api) && api.ErrorCode() == "ProvisionedThroughputExceededException":
				b.WriteByte('T')
			case errors.As(err, &api) && api.ErrorCode() == "InternalServerError":
				b.WriteByte('E')
			default:
				t.Fatalf("unexpected %v", err)
			}
		}
		return b.String()
	}
	a, again, other := run(7), run(7), run(8)
	if a != again {
		t.Fatalf("seed 7 twice differs:\n%s\n%s", a, again)
	}
	if a == other {
		t.Fatal("seeds 7 and 8 give the same faults")
	}
	// 400 calls at 5 %: 20 expected of each; the seed is fixed, so the
	// count is too, and it must be plausibly near the rate.
	for _, c := range "TE" {
		if n := strings.Count(a, string(c)); n < 8 || n > 36 {
			t.Errorf("%d of %c in 400 calls at 5 %%: %s", n, c, a)
		}
	}
}

// Guards rule selection: operation, access key and body filters, the
// fire limit, latency adding up before the deciding rule, and that
// unsigned requests are never faulted.
func TestFaultProxyRuleMatching(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{Rules: []Rule{
		{Service: "dynamodb", Kind: KindLatency, Rate: 1, Delay: Millis(1e6)},
		{Service: "dynamodb", Operations: []string{"GetItem"}, Kind: KindServerError, Rate: 1, Max: 2},
		{Service: "dynamodb", Operations: []string{"PutItem"}, AccessKey: "000000000000", Kind: KindServerError, Rate: 1},
		{Service: "dynamodb", Operations: []string{"DeleteItem"}, Contains: `"poison"`, Kind: KindThrottle, Rate: 1},
		{Service: "*", Kind: KindThrottle, Rate: 1},
	}})
	ddb := r.ddb()
	key := func(v string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: v}}
	}
	code := func(err error) string {
		var api smithy.APIError
		if errors.As(err, &api) {
			return api.ErrorCode()
		}
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	var got []string
	for range 3 {
		_, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key("a")})
		got = append(got, code(err))
	}
	_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key("a")})
	got = append(got, code(err))
	_, err = ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: key("poison")})
	got = append(got, code(err))
	_, err = ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: key("fine")})
	got = append(got, code(err))
	want := "InternalServerError InternalServerError ProvisionedThroughputExceededException ProvisionedThroughputExceededException ProvisionedThroughputExceededException ProvisionedThroughputExceededException"
	if strings.Join(got, " ") != want {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	s := r.proxy.Status()
	if fmt.Sprint(s.Fired) != "[6 2 0 1 3]" || s.Injected[KindLatency] != 6 || s.ByCall["dynamodb.GetItem"][KindServerError] != 2 {
		t.Fatalf("status %+v", s)
	}
	// Unsigned: forwarded whatever the rules say.
	resp, err := http.Get(r.url + "/_ministack/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health through the proxy: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestMillisJSON(t *testing.T) {
	var r Rule
	if err := json.Unmarshal([]byte(`{"kind":"latency","rate":1,"delay_ms":250}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Delay != Millis(250e6) {
		t.Fatalf("delay %v", r.Delay)
	}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"delay_ms":250`) {
		t.Fatalf("%s", b)
	}
}

// Guards the control endpoint: POST sets the rules (invalid ones refused
// naming rule and field, the old ones kept), GET reports the counts by
// kind, DELETE clears.
func TestFaultProxyControl(t *testing.T) {
	r := newRig(t, Config{})
	post := func(body string) (int, string) {
		resp, err := http.Post(r.url+ControlPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"rules":[{"kind":"throttle","rate":2}]}`, "rules[0].rate: 2 is outside [0, 1]"},
		{`{"rules":[{"kind":"slow","rate":1}]}`, `rules[0].kind: "slow" is not one of`},
		{`{"rules":[{"rate":1}]}`, "rules[0].kind: missing"},
		{`{"rules":[{"kind":"throttle","rate":1},{"kind":"latency","rate":1}]}`, "rules[1].delay_ms: latency needs a delay"},
		{`{"rules":[{"service":"s3","kind":"throttle","rate":1,"code":"Nope"}]}`, `rules[0].code: "Nope" is not a throttling code of "s3"`},
		{`{"rules":[{"service":"dynamodb","operations":["PutItem"],"kind":"partial","rate":1}]}`, "rules[0].operations: dynamodb.PutItem has no partial failure"},
		{`{"rules":[{"kind":"reset","rate":1,"fraction":0.2}]}`, "rules[0]: fraction and sender_fault are only for kind partial, message for partial and error"},
		{`{"rules":[],"seeed":1}`, `unknown field "seeed"`},
	} {
		status, body := post(tt.body)
		if status != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("POST %s: %d %q, want 400 with %q", tt.body, status, body, tt.want)
		}
	}
	if status, body := post(`{"seed":5,"rules":[{"service":"lambda","kind":"throttle","rate":1}]}`); status != http.StatusOK {
		t.Fatalf("POST valid: %d %s", status, body)
	}
	_ = r.call(t, "lambda")
	_ = r.call(t, "lambda")
	resp, err := http.Get(r.url + ControlPath)
	if err != nil {
		t.Fatal(err)
	}
	var s Status
	json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if s.Config.Seed != 5 || s.Requests != 2 || s.Injected[KindThrottle] != 2 || s.ByCall["lambda.Invoke"][KindThrottle] != 2 {
		t.Fatalf("GET: %+v", s)
	}
	req, _ := http.NewRequest(http.MethodDelete, r.url+ControlPath, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	if err := r.call(t, "lambda"); err != nil {
		t.Fatalf("after DELETE: %v", err)
	}
	if s := r.proxy.Status(); len(s.Config.Rules) != 0 || s.Injected[KindThrottle] != 0 {
		t.Fatalf("after DELETE: %+v", s)
	}
}

func TestClassify(t *testing.T) {
	sig := func(service, key string) string {
		return "AWS4-HMAC-SHA256 Credential=" + key + "/20261130/us-east-1/" + service + "/aws4_request, SignedHeaders=host, Signature=00"
	}
	tests := []struct {
		name, method, target, service, path, body string
		copySource                                bool
		want                                      Call
	}{
		{"dynamodb", "POST", "DynamoDB_20120810.TransactWriteItems", "dynamodb", "/", "", false, Call{"dynamodb", "TransactWriteItems", "test"}},
		{"sqs json", "POST", "AmazonSQS.ChangeMessageVisibility", "sqs", "/", "", false, Call{"sqs", "ChangeMessageVisibility", "test"}},
		{"sqs query", "POST", "", "sqs", "/", "Action=SendMessage&Version=2012-11-05", false, Call{"sqs", "SendMessage", "test"}},
		{"events", "POST", "AWSEvents.PutEvents", "events", "/", "", false, Call{"events", "PutEvents", "test"}},
		{"s3 get", "GET", "", "s3", "/bucket/a/b.jsonl", "", false, Call{"s3", "GetObject", "test"}},
		{"s3 head", "HEAD", "", "s3", "/bucket/a", "", false, Call{"s3", "HeadObject", "test"}},
		{"s3 put", "PUT", "", "s3", "/bucket/a", "", false, Call{"s3", "PutObject", "test"}},
		{"s3 copy", "PUT", "", "s3", "/bucket/a", "", true, Call{"s3", "CopyObject", "test"}},
		{"s3 part", "PUT", "", "s3", "/bucket/a?partNumber=1&uploadId=u", "", false, Call{"s3", "UploadPart", "test"}},
		{"s3 create mpu", "POST", "", "s3", "/bucket/a?uploads", "", false, Call{"s3", "CreateMultipartUpload", "test"}},
		{"s3 complete mpu", "POST", "", "s3", "/bucket/a?uploadId=u", "", false, Call{"s3", "CompleteMultipartUpload", "test"}},
		{"s3 abort mpu", "DELETE", "", "s3", "/bucket/a?uploadId=u", "", false, Call{"s3", "AbortMultipartUpload", "test"}},
		{"s3 delete", "DELETE", "", "s3", "/bucket/a", "", false, Call{"s3", "DeleteObject", "test"}},
		{"s3 delete many", "POST", "", "s3", "/bucket?delete", "", false, Call{"s3", "DeleteObjects", "test"}},
		{"s3 list", "GET", "", "s3", "/bucket?list-type=2&prefix=x", "", false, Call{"s3", "ListObjectsV2", "test"}},
		{"s3 create bucket", "PUT", "", "s3", "/bucket", "", false, Call{"s3", "CreateBucket", "test"}},
		{"lambda invoke", "POST", "", "lambda", "/2015-03-31/functions/bulkrun-finalize/invocations", "", false, Call{"lambda", "Invoke", "test"}},
		{"lambda get", "GET", "", "lambda", "/2015-03-31/functions/f", "", false, Call{"lambda", "GetFunction", "test"}},
		{"lambda account settings", "GET", "", "lambda", "/2016-08-19/account-settings/", "", false, Call{"lambda", "GetAccountSettings", "test"}},
		{"lambda concurrency", "GET", "", "lambda", "/2019-09-30/functions/f/concurrency", "", false, Call{"lambda", "GetFunctionConcurrency", "test"}},
		{"apigateway account", "GET", "", "apigateway", "/account", "", false, Call{"apigateway", "GetAccount", "test"}},
		{"apigateway update account", "PATCH", "", "apigateway", "/account", "", false, Call{"apigateway", "UpdateAccount", "test"}},
		{"s3 location", "GET", "", "s3", "/bucket?location", "", false, Call{"s3", "GetBucketLocation", "test"}},
		{"s3 encryption", "GET", "", "s3", "/bucket?encryption", "", false, Call{"s3", "GetBucketEncryption", "test"}},
		{"kms", "POST", "TrentService.DescribeKey", "kms", "/", "", false, Call{"kms", "DescribeKey", "test"}},
		{"sns query", "POST", "", "sns", "/", "Action=GetTopicAttributes&TopicArn=t", false, Call{"sns", "GetTopicAttributes", "test"}},
		{"unsigned", "GET", "", "", "/_ministack/health", "", false, Call{"", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			if tt.service != "" {
				r.Header.Set("Authorization", sig(tt.service, "test"))
			}
			if tt.target != "" {
				r.Header.Set("X-Amz-Target", tt.target)
			}
			if tt.body != "" {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if tt.copySource {
				r.Header.Set("X-Amz-Copy-Source", "/bucket/src")
			}
			if got := classify(r, []byte(tt.body)); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Guards duplicate deliveries in the integration suite and `make soak`:
// a duplicated call reaches the emulator twice (so an SQS message is
// queued twice) while the caller sees one answer.
func TestFaultProxyDuplicate(t *testing.T) {
	r := newRig(t, Config{Rules: []Rule{{Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: KindDuplicate, Rate: 1}}})
	if err := r.call(t, "sqs"); err != nil {
		t.Fatal(err)
	}
	calls, entries := r.up.seen()
	if strings.Join(calls, " ") != "sqs.SendMessageBatch sqs.SendMessageBatch" || strings.Join(entries, " ") != "0 0" {
		t.Fatalf("emulator saw %v with entries %v, want the batch twice", calls, entries)
	}
	if s := r.proxy.Status(); s.Injected[KindDuplicate] != 1 {
		t.Fatalf("status %+v", s)
	}
}

// Guards the preflight's account cases (integration TestPreflight): a
// canned answer reaches the SDK as the service's own answer (a Lambda
// account of a low quota, a bucket in another Region), only on the calls
// and paths its rule names, and the emulator never sees those calls.
func TestFaultProxyAnswer(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{Rules: []Rule{
		{Service: "lambda", Operations: []string{"GetAccountSettings"}, Kind: KindAnswer, Rate: 1, Status: 200,
			Body: `{"AccountLimit":{"ConcurrentExecutions":10,"UnreservedConcurrentExecutions":10},"AccountUsage":{"FunctionCount":0}}`},
		{Service: "s3", Operations: []string{"GetBucketLocation"}, Path: "/src-eu", Kind: KindAnswer, Rate: 1, Status: 200,
			Headers: map[string]string{"Content-Type": "application/xml"},
			Body:    `<?xml version="1.0" encoding="UTF-8"?><LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">eu-west-1</LocationConstraint>`},
	}})
	out, err := r.lambda().GetAccountSettings(ctx, &lambda.GetAccountSettingsInput{})
	if err != nil || out.AccountLimit == nil || out.AccountLimit.ConcurrentExecutions != 10 || aws.ToInt32(out.AccountLimit.UnreservedConcurrentExecutions) != 10 {
		t.Fatalf("GetAccountSettings: %+v %v, want the canned quota of 10", out, err)
	}
	loc, err := r.s3().GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String("src-eu")})
	if err != nil || loc.LocationConstraint != s3types.BucketLocationConstraintEuWest1 {
		t.Fatalf("GetBucketLocation src-eu: %+v %v, want eu-west-1", loc, err)
	}
	// Another bucket's location is the emulator's (the rule's path does
	// not match).
	_, _ = r.s3().GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String("local")})
	calls, _ := r.up.seen()
	if fmt.Sprint(calls) != "[s3.GetBucketLocation]" {
		t.Fatalf("the emulator saw %v, want only the other bucket's GetBucketLocation", calls)
	}
	if s := r.proxy.Status(); s.Injected[KindAnswer] != 2 || fmt.Sprint(s.Fired) != "[1 1]" {
		t.Fatalf("status %+v", s)
	}
	for _, bad := range []Rule{
		{Kind: KindAnswer, Rate: 1},
		{Kind: KindThrottle, Rate: 1, Body: "x"},
	} {
		if err := (Config{Rules: []Rule{bad}}).Validate(); err == nil {
			t.Errorf("%+v: valid, want refused", bad)
		}
	}
}

// Guards the error kind, which the suite's tests of each error class
// inject: every API error of bulkrun's error table for DynamoDB, SQS, S3
// and Lambda, answered by the proxy, reaches the AWS SDK for Go v2 as that
// code (SQS's KMS codes through X-Amzn-Query-Error, as SQS's JSON
// protocol sends them) with the table's status, and awsfault classifies it
// as its row; a TransactionCanceledException carries its reasons by the
// request's operations, and is classified by them.
func TestFaultProxyErrorKind(t *testing.T) {
	ops := map[string]string{"dynamodb": "PutItem", "sqs": "SendMessageBatch", "s3": "GetObject", "lambda": "Invoke"}
	tried := 0
	for _, row := range awsfault.Table {
		op, ok := ops[row.Service]
		if !ok || row.Function || row.Code == "" || row.Reason != "" || row.Operations != nil && !slices.Contains(row.Operations, op) {
			continue
		}
		tried++
		t.Run(row.Service+"/"+row.Code+"/"+row.Message, func(t *testing.T) {
			msg := row.Message
			if msg == "" {
				msg = "injected"
			}
			r := newRig(t, Config{Seed: 1, Rules: []Rule{{Service: row.Service, Kind: KindError, Rate: 1, Code: row.Code, Message: msg}}})
			err := r.call(t, row.Service)
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != row.Code && api.ErrorCode() != row.Alias {
				t.Fatalf("error %v, want API error %s", err, row.Code)
			}
			var status interface{ HTTPStatusCode() int }
			if !errors.As(err, &status) || status.HTTPStatusCode() != row.Status {
				t.Fatalf("status of %v, want %d", err, row.Status)
			}
			if got, ok := awsfault.Classify(row.Service, op, err); !ok || got.Class != row.Class {
				t.Fatalf("classified %+v (%v), want class %s", got, ok, row.Class)
			}
			if calls, _ := r.up.seen(); len(calls) != 0 {
				t.Errorf("emulator saw %v, want nothing", calls)
			}
		})
	}
	if tried < 50 {
		t.Fatalf("only %d rows tried", tried)
	}
	t.Run("transaction cancelled", func(t *testing.T) {
		r := newRig(t, Config{Seed: 1, Rules: []Rule{{Service: "dynamodb", Kind: KindError, Rate: 1, Code: "TransactionCanceledException", Reasons: []string{"None", "TransactionConflict"}}}})
		_, err := r.ddb().TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			{Put: &ddbtypes.Put{TableName: aws.String("t"), Item: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "a"}}}},
			{Put: &ddbtypes.Put{TableName: aws.String("t"), Item: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "b"}}}},
			{Delete: &ddbtypes.Delete{TableName: aws.String("t"), Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "c"}}}},
		}})
		var tce *ddbtypes.TransactionCanceledException
		if !errors.As(err, &tce) || len(tce.CancellationReasons) != 3 || aws.ToString(tce.CancellationReasons[1].Code) != "TransactionConflict" ||
			aws.ToString(tce.CancellationReasons[2].Code) != "None" {
			t.Fatalf("err %v (%+v), want three reasons, the second TransactionConflict", err, tce)
		}
		if c := awsfault.ClassOf("dynamodb", "TransactWriteItems", err); c != ledger.FaultRetry {
			t.Fatalf("class %s, want retry", c)
		}
	})
	t.Run("a code not in the table is refused", func(t *testing.T) {
		if err := (Config{Rules: []Rule{{Service: "sqs", Kind: KindError, Rate: 1, Code: "NoSuchThing"}}}).Validate(); err == nil {
			t.Fatal("accepted")
		}
	})
}

// The proxy closes an idle connection to the emulator well before the
// emulator's server would (EmulatorKeepAlive), so that it never sends a
// call on a connection the emulator is closing.
func TestUpstreamIdleConnectionsCloseBeforeTheEmulators(t *testing.T) {
	p, err := New("http://127.0.0.1:4566", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.rp.Transport.(*http.Transport).IdleConnTimeout; got <= 0 || got > EmulatorKeepAlive/2 {
		t.Errorf("upstream idle timeout %v, want in (0, %v]", got, EmulatorKeepAlive/2)
	}
}
