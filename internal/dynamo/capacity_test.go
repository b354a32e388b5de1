package dynamo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// fakeDynamo answers every call with one canned JSON body and keeps the
// requests it got.
type fakeDynamo struct {
	mu     sync.Mutex
	bodies []map[string]any
	answer map[string]string // X-Amz-Target operation → JSON body
}

func (f *fakeDynamo) Do(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndex(op, ".")+1:]
	m["_op"] = op
	f.mu.Lock()
	f.bodies = append(f.bodies, m)
	f.mu.Unlock()
	body := f.answer[op]
	if body == "" {
		body = "{}"
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// Point 1 of capacity metering ("every DynamoDB call asks for
// ReturnConsumedCapacity=INDEXES and the figures are summed per batch"):
// the product line it guards is the report's usage block and
// Store.Capacity, the billed figures on AWS.
func TestCapacityMeteringAsksAndSums(t *testing.T) {
	f := &fakeDynamo{answer: map[string]string{
		"UpdateItem": `{"Attributes":{"done":{"N":"10"}},"ConsumedCapacity":{"TableName":"t","CapacityUnits":7,"GlobalSecondaryIndexes":{"attention":{"CapacityUnits":1}}}}`,
		"GetItem":    `{"ConsumedCapacity":{"TableName":"t","CapacityUnits":0.5}}`,
		"Query":      `{"Items":[{"done":{"N":"10"},"failures":{"N":"0"},"wcu":{"N":"6.5"},"rcu":{"N":"1.5"}}],"ConsumedCapacity":{"TableName":"t","CapacityUnits":1}}`,
	}}
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://dynamo.invalid"),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), HTTPClient: f})
	s := New(db, "t")
	ctx := context.Background()
	if _, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: layout.Key("p", "s")}); err != nil {
		t.Fatal(err)
	}
	// The counter write carries the units consumed so far (0.5 read), and
	// itself is attributed to the next one.
	count := ledger.ChunkCount{BatchID: "b", Run: 1, Items: 5000, Chunks: 1, Shards: 1, Outcomes: map[api.Outcome]int64{api.OutcomeSucceeded: 10}, Now: time.Now()}
	if _, err := s.CountChunk(ctx, count); err != nil {
		t.Fatal(err)
	}
	count.Outcomes = nil
	if _, err := s.CountChunk(ctx, count); err != nil {
		t.Fatal(err)
	}
	for _, b := range f.bodies {
		if b["ReturnConsumedCapacity"] != "INDEXES" {
			t.Errorf("%s asked ReturnConsumedCapacity %v, want INDEXES", b["_op"], b["ReturnConsumedCapacity"])
		}
	}
	vals := func(i int) map[string]any { return f.bodies[i]["ExpressionAttributeValues"].(map[string]any) }
	// 7 units a write: a number no other value of the write (the row's
	// format version among them) takes.
	if got := vals(1); !strings.Contains(jsonOf(got), `"0.5"`) || strings.Contains(jsonOf(got), `"7"`) {
		t.Errorf("first counter write values %s, want the 0.5 read unit only", jsonOf(got))
	}
	if got := vals(2); !strings.Contains(jsonOf(got), `"7"`) {
		t.Errorf("second counter write values %s, want the first counter write's 7 units", jsonOf(got))
	}
	c := s.Capacity()
	if c.WriteUnits != 14 || c.ReadUnits != 0.5 || c.Indexes["attention"] != 2 {
		t.Errorf("Capacity = %+v, want 14 write, 0.5 read, attention 2", c)
	}
	p, err := s.Progress(ctx, "b", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Usage.DynamoDBWriteUnits != 6.5 || p.Usage.DynamoDBReadUnits != 1.5 {
		t.Errorf("Progress usage = %+v, want the counter rows' 6.5 write and 1.5 read units", p.Usage)
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }
