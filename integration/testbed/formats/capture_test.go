package formats_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bulkrun/bulkrun/integration/testbed/formats"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/function"
)

// TestCapture writes today's golden formats into BULKRUN_CAPTURE_FORMATS
// (a folder; the test does nothing without it), from the scenario run on
// the emulator in AWS_ENDPOINT_URL:
//
//	BULKRUN_CAPTURE_FORMATS=$PWD/integration/testbed/formats/testdata/vN go test -run TestCapture ./integration/testbed/formats/
func TestCapture(t *testing.T) {
	dir := os.Getenv("BULKRUN_CAPTURE_FORMATS")
	if dir == "" {
		t.Skip("BULKRUN_CAPTURE_FORMATS is not set")
	}
	ctx := context.Background()
	cfg, err := function.AWSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg)
	table := fmt.Sprintf("formats-%d", time.Now().UnixNano())
	if err := dynamo.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	defer db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table})
	if err := formats.Capture(ctx, db, table, dir); err != nil {
		t.Fatal(err)
	}
}
