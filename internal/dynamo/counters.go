package dynamo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/batch"
)

// CountChunk adds c to the counter of its chunk with one UpdateItem that
// returns the new values (UPDATED_NEW; no read is billed):
//
//	ADD done :done, failures :failures, wcu :w, rcu :r
//	SET items = :items, updated_at_ms = :now, expires_at = :ttl
//
// on COUNT#{id}#{run}#{p}, CHUNK#{first:012}, where :w and :r are the
// DynamoDB units this Store consumed since its last counter write. When
// the new done reaches items and the old one had not (this write
// completed the chunk), or when c.RunFailures asks for the run's failure
// total, one more UpdateItem on the run row COUNT#{id}#{run}, RUN adds
// 1 to chunks_done (on completion) and the failures, returning both: the
// write that brings chunks_done to c.Chunks reports RunDone. Each chunk
// completes once (its counter crosses items once), so exactly one write
// reports RunDone unless a counter write was lost.
func (s *Store) CountChunk(ctx context.Context, c batch.ChunkCount) (batch.ChunkCounted, error) {
	var res batch.ChunkCounted
	used := s.takePending()
	shards := max(1, c.Shards)
	part := int((c.First / max(c.Items, 1)) % int64(shards))
	done := c.Done()
	u := expression.Add(expression.Name(attrDone), expression.Value(done)).
		Add(expression.Name(attrFailures), expression.Value(c.Failures)).
		Set(expression.Name(attrItems), expression.Value(c.Items)).
		Set(expression.Name(attrUpdatedAtMs), expression.Value(c.Now.UnixMilli()))
	for _, o := range batch.TerminalOutcomes() {
		if n := c.Outcomes[o]; n != 0 {
			u = u.Add(expression.Name(outcomeAttr(o)), expression.Value(n))
		}
	}
	// Cost sums as DynamoDB numbers: ADD is exact in decimal (38
	// significant digits; Amazon DynamoDB developer guide, "Supported
	// data types and naming rules", Number), as the census's sums are.
	for prefix, sum := range map[string]map[string]decimal.Decimal{attrCostPrefix: c.Cost, attrSpentPrefix: c.Spent} {
		for _, name := range slices.Sorted(maps.Keys(sum)) {
			u = u.Add(expression.Name(prefix+name), expression.Value(&types.AttributeValueMemberN{Value: sum[name].String()}))
		}
	}
	if used.DynamoDBWriteUnits > 0 || used.DynamoDBReadUnits > 0 {
		u = u.Add(expression.Name(attrWriteUnits), expression.Value(used.DynamoDBWriteUnits)).
			Add(expression.Name(attrReadUnits), expression.Value(used.DynamoDBReadUnits))
	}
	expr, err := expression.NewBuilder().WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		s.returnPending(used)
		return res, err
	}
	attrs, _, err := s.updateRow(ctx, key(countPK(c.BatchID, c.Run, part), chunkSK(c.First)), expr, types.ReturnValueUpdatedNew)
	if err != nil {
		s.returnPending(used)
		return res, fmt.Errorf("count chunk %d of %s run %d: %w", c.First, c.BatchID, c.Run, err)
	}
	var row struct {
		Done int64 `dynamodbav:"done"`
	}
	if err := attributevalue.UnmarshalMap(attrs, &row); err != nil {
		return res, fmt.Errorf("count chunk %d of %s run %d: %w", c.First, c.BatchID, c.Run, err)
	}
	res.ChunkDone = row.Done >= c.Items && row.Done-done < c.Items
	if !res.ChunkDone && !c.RunFailures {
		return res, nil
	}
	ru := expression.Set(expression.Name(attrUpdatedAtMs), expression.Value(c.Now.UnixMilli())).
		Add(expression.Name(attrChunksDone), expression.Value(boolInt(res.ChunkDone)))
	if c.RunFailures {
		ru = ru.Add(expression.Name(attrFailures), expression.Value(c.Failures))
	}
	expr, err = expression.NewBuilder().WithUpdate(s.stamp(ru, c.Now)).Build()
	if err != nil {
		return res, err
	}
	attrs, _, err = s.updateRow(ctx, key(runPK(c.BatchID, c.Run), skRun), expr, types.ReturnValueUpdatedNew)
	if err != nil {
		return res, fmt.Errorf("count chunks of %s run %d: %w", c.BatchID, c.Run, err)
	}
	var run struct {
		ChunksDone int64 `dynamodbav:"chunks_done"`
		Failures   int64 `dynamodbav:"failures"`
	}
	if err := attributevalue.UnmarshalMap(attrs, &run); err != nil {
		return res, fmt.Errorf("count chunks of %s run %d: %w", c.BatchID, c.Run, err)
	}
	res.Failures = run.Failures
	res.RunDone = res.ChunkDone && c.Chunks > 0 && run.ChunksDone == int64(c.Chunks)
	return res, nil
}

// Counter attributes of the cost sums: "c#{name}" (ChunkCount.Cost) and
// "s#{name}" (ChunkCount.Spent), one number each per cost name.
const (
	attrCostPrefix  = "c#"
	attrSpentPrefix = "s#"
)

// Progress sums the run's chunk counters: one eventually consistent Query
// per counter shard (COUNT#{id}#{run}#{p}, every page), so it reads
// O(shards) partitions and about 100 bytes per chunk of 5,000 items,
// whatever the batch's size.
func (s *Store) Progress(ctx context.Context, batchID string, run, shards int) (batch.Progress, error) {
	p := batch.Progress{ByOutcome: map[batch.Outcome]int64{}, Cost: map[string]decimal.Decimal{}, Spent: map[string]decimal.Decimal{}}
	for part := range max(1, shards) {
		err := s.queryAll(ctx, countPK(batchID, run, part), false, func(av map[string]types.AttributeValue) error {
			var row struct {
				Done        int64   `dynamodbav:"done"`
				Failures    int64   `dynamodbav:"failures"`
				UpdatedAtMs int64   `dynamodbav:"updated_at_ms"`
				WriteUnits  float64 `dynamodbav:"wcu"`
				ReadUnits   float64 `dynamodbav:"rcu"`
				Format      int     `dynamodbav:"fv"`
			}
			if err := attributevalue.UnmarshalMap(av, &row); err != nil {
				return err
			}
			if err := batch.CheckFormat("counter row of "+batchID, row.Format); err != nil {
				return err
			}
			p.Done += row.Done
			p.Failures += row.Failures
			for _, o := range batch.TerminalOutcomes() {
				if v, ok := av[outcomeAttr(o)].(*types.AttributeValueMemberN); ok {
					n, _ := strconv.ParseInt(v.Value, 10, 64)
					p.ByOutcome[o] += n
				}
			}
			for name, v := range av {
				n, ok := v.(*types.AttributeValueMemberN)
				if !ok {
					continue
				}
				sum := p.Cost
				cost, isCost := strings.CutPrefix(name, attrCostPrefix)
				if !isCost {
					sum = p.Spent
					if cost, isCost = strings.CutPrefix(name, attrSpentPrefix); !isCost {
						continue
					}
				}
				d, err := decimal.NewFromString(n.Value)
				if err != nil {
					return fmt.Errorf("counter %s: %w", name, err)
				}
				sum[cost] = sum[cost].Add(d)
			}
			p.Usage.DynamoDBWriteUnits += row.WriteUnits
			p.Usage.DynamoDBReadUnits += row.ReadUnits
			if t := fromMs(row.UpdatedAtMs); t.After(p.UpdatedAt) {
				p.UpdatedAt = t
			}
			return nil
		})
		if err != nil {
			return p, fmt.Errorf("progress %s run %d: %w", batchID, run, err)
		}
	}
	return p, nil
}
