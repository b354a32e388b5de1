//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Every aggregate within its service's limit, on the emulator's storage:
// a batch of 150 items whose pipeline names 100 costs per item (each
// record folded to pipeline.MaxCostNames, every item succeeded), and one
// of 150 items naming 10 costs of their own (1,500 in the batch), finish; the
// batch row as DynamoDB stores it (sized by DynamoDB's rules,
// meter.ItemBytes) stays under its 400 KB item limit and the completion
// event's entry under EventBridge's 256 KB. MiniStack enforces neither
// limit, so the sizes are checked here. Guards docs/design/bounds.md, "Every
// aggregate within its service's limit".
func TestHarnessAggregatesWithinLimits(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		names    int
		distinct bool
		failed   int64
	}{
		{"150 items x 100 cost names", 100, false, 0},
		{"150 items x 10 cost names of their own", 10, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				c := pipeline.Cost{}
				for i := range tc.names {
					name := fmt.Sprintf("cost-%03d-%s", i, strings.Repeat("x", 28))
					if tc.distinct {
						name = fmt.Sprintf("%s-%02d-%s", req.Key, i, strings.Repeat("y", 20))
					}
					c[name] = 0.001
				}
				return pipeline.Result{Cost: c}, nil
			})
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(150)}}); err != nil {
				t.Fatal(err)
			}
			h.drainRetrying(t, ctx, 2*time.Minute)
			res, err := h.finalizer.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatalf("finalize: %v", err)
			}
			c := res.Report.Census
			if c.Total != 150 || c.Failed != tc.failed {
				t.Fatalf("census %d total, %d failed; want 150, %d", c.Total, c.Failed, tc.failed)
			}
			b, err := h.store.GetBatch(ctx, id)
			if err != nil || !b.Status.Finished() {
				t.Fatalf("batch %s %v, want finished", b.Status, err)
			}
			out, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.table, ConsistentRead: aws.Bool(true), Key: map[string]ddbtypes.AttributeValue{
				config.AttrPK: &ddbtypes.AttributeValueMemberS{Value: "BATCH#" + id}, config.AttrSK: &ddbtypes.AttributeValueMemberS{Value: "BATCH"}}})
			if err != nil || len(out.Item) == 0 {
				t.Fatalf("raw batch row: %v", err)
			}
			rowBytes := meter.ItemBytes(out.Item)
			detail, err := event.CompletionDetail(res.Report, h.table)
			if err != nil {
				t.Fatal(err)
			}
			entry := event.EntryBytes(api.EventSource, event.DetailType(res.Report.Status), detail, nil)
			t.Logf("%s: status %s, %d failed, report %d cost names; batch row %d bytes (limit 409600), event entry %d bytes (limit %d)",
				tc.name, b.Status, c.Failed, len(c.Cost), rowBytes, entry, event.MaxEntryBytes)
			if rowBytes >= 400*1024 || entry > event.MaxEntryBytes {
				t.Fatalf("batch row %d bytes, event entry %d bytes: over their limits", rowBytes, entry)
			}
		})
	}
}

// A pack row of 100 items stays under DynamoDB's 400 KB item limit
// whatever its items report: 100 outputs of 60 KiB (each under the
// 64 KiB an item row keeps inline) or 100 error texts of 4 KiB, in one
// pack of items_per_message 100, finish with every outcome recorded, the
// pack row as DynamoDB stores it (sized by DynamoDB's rules,
// meter.ItemBytes; MiniStack enforces no limit) within 400 KB, the
// outputs that did not fit read back from S3 through their output_ref.
// Guards docs/design/bounds.md, "Every aggregate within its service's limit"
// (ledger.PackRowBudget).
func TestHarnessPackRowWithinLimit(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	big := strings.Repeat("x", 60<<10)
	for _, tc := range []struct {
		name   string
		run    func(context.Context, pipeline.Request) (pipeline.Result, error)
		failed int64
	}{
		{"100 outputs of 60 KiB", func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{Output: json.RawMessage(`{"key":"` + req.Key + `","blob":"` + big + `"}`)}, nil
		}, 0},
		{"100 errors of 4 KiB", func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
			return pipeline.Result{}, pipeline.Permanent(errors.New(req.Key + ": " + strings.Repeat("e", 5000)))
		}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.run)
			h.submitter.ChunkItems = 1000 // one chunk: the harness's 7-item chunks would cut the packs
			id := newID(t)
			if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", ItemsPerMessage: 100, Source: api.SourceSpec{Items: inlineItems(100)}}); err != nil {
				t.Fatal(err)
			}
			h.drainRetrying(t, ctx, 2*time.Minute)
			res, err := h.finalizer.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatalf("finalize: %v", err)
			}
			if c := res.Report.Census; c.Total != 100 || c.Failed != tc.failed || c.Succeeded != 100-tc.failed {
				t.Fatalf("census %+v, want 100 items, %d failed", c, tc.failed)
			}
			b, err := h.store.GetBatch(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			out, err := env.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.table, ConsistentRead: aws.Bool(true), Key: map[string]ddbtypes.AttributeValue{
				config.AttrPK: &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("PACK#%s#%d", id, ledger.PackShard(0, b.ListShards))},
				config.AttrSK: &ddbtypes.AttributeValueMemberS{Value: ledger.PackSK(0)}}})
			if err != nil || len(out.Item) == 0 {
				t.Fatalf("raw pack row: %v", err)
			}
			rowBytes := meter.ItemBytes(out.Item)
			t.Logf("%s: pack row %d bytes (limit 409600)", tc.name, rowBytes)
			if rowBytes >= 400*1024 {
				t.Fatalf("pack row %d bytes: over DynamoDB's 400 KB item limit", rowBytes)
			}
			if tc.failed > 0 {
				return
			}
			body, err := h.blobs.Get(ctx, api.ResultsKey(id, 1, api.OutcomeSucceeded))
			if err != nil {
				t.Fatal(err)
			}
			refs, inline := 0, 0
			err = api.ReadResults(bytes.NewReader(body), func(l api.ResultLine) error {
				if l.OutputRef == "" {
					inline++
					return nil
				}
				refs++
				obj, err := h.blobs.Get(ctx, strings.TrimPrefix(l.OutputRef, "s3://"+h.blobs.Bucket()+"/"))
				if err != nil || !strings.Contains(string(obj), `"key":"`+l.Key+`"`) || len(obj) < 60<<10 {
					return fmt.Errorf("%s: output at %s: %d bytes, %v", l.Key, l.OutputRef, len(obj), err)
				}
				return nil
			})
			if err != nil || refs+inline != 100 || refs == 0 {
				t.Fatalf("results: %d outputs by reference, %d inline (%v); want 100, some in S3", refs, inline, err)
			}
			t.Logf("%d outputs moved to S3, %d kept inline", refs, inline)
		})
	}
}
