package dynamo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/streak"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// A counter lane write at the worker's bound — api.MaxCensusCostNames
// cost and spent names of pipeline.MaxCostNameBytes each, every outcome
// and failure-class slot, the units and a sample's busy time — has an update expression within
// DynamoDB's 4 KB ("Service, account, and table quotas", Expression
// parameters: the maximum length of any expression string is 4 KB), as
// the in-memory store (memstore.MaxExpressionBytes) assumes.
func TestCountLaneExpressionWithinLimit(t *testing.T) {
	f := &fakeDynamo{answer: map[string]string{"UpdateItem": `{"Attributes":{"done":{"N":"10"}}}`}}
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://dynamo.invalid"),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), HTTPClient: f})
	s := New(db, "t")
	cost, spent := pipeline.CostSum{}, pipeline.CostSum{}
	for i := range api.MaxCensusCostNames {
		name := fmt.Sprintf("%03d-%s", i, strings.Repeat("n", pipeline.MaxCostNameBytes-4))
		cost[name], spent[name] = decimal.NewFromFloat(0.25), decimal.NewFromFloat(0.5)
	}
	streaks := map[int]int64{}
	for i := range streak.Slots {
		streaks[i] = 1
	}
	outcomes := map[api.Outcome]int64{}
	for _, o := range api.TerminalOutcomes() {
		outcomes[o] = 1
	}
	if _, err := s.CountLane(context.Background(), ledger.LaneCount{BatchID: "b", Run: 1, Lane: 0, Target: 100, Outcomes: outcomes, Failures: 2,
		Cost: cost, Spent: spent, Streaks: streaks, BusyMs: 1 << 40, Token: ledger.NewToken(), Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if len(f.bodies) != 1 {
		t.Fatalf("%d calls, want one UpdateItem", len(f.bodies))
	}
	update, _ := f.bodies[0]["UpdateExpression"].(string)
	cond, _ := f.bodies[0]["ConditionExpression"].(string)
	t.Logf("update expression %d bytes, condition %d bytes", len(update), len(cond))
	if len(update) > 4<<10 || len(cond) > 4<<10 || !strings.Contains(update, "ADD") {
		t.Fatalf("update expression of %d bytes, condition of %d: over DynamoDB's 4 KB", len(update), len(cond))
	}
}
