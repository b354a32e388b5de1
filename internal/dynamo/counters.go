package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/internal/retry"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/streak"
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
func (s *Store) CountChunk(ctx context.Context, c ledger.ChunkCount) (ledger.ChunkCounted, error) {
	var res ledger.ChunkCounted
	used := s.takePending()
	shards := max(1, c.Shards)
	part := int((c.First / max(c.Items, 1)) % int64(shards))
	done := c.Done()
	u := expression.Add(expression.Name(layout.AttrDone), expression.Value(done)).
		Add(expression.Name(layout.AttrFailures), expression.Value(c.Failures)).
		Set(expression.Name(layout.AttrItems), expression.Value(c.Items)).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(c.Now.UnixMilli()))
	for _, o := range api.TerminalOutcomes() {
		if n := c.Outcomes[o]; n != 0 {
			u = u.Add(expression.Name(layout.OutcomeAttr(o)), expression.Value(n))
		}
	}
	u = addCosts(u, c.Cost, c.Spent)
	if used.DynamoDBWriteUnits > 0 || used.DynamoDBReadUnits > 0 {
		u = u.Add(expression.Name(layout.AttrWriteUnits), expression.Value(used.DynamoDBWriteUnits)).
			Add(expression.Name(layout.AttrReadUnits), expression.Value(used.DynamoDBReadUnits))
	}
	expr, err := expression.NewBuilder().WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		s.returnPending(used)
		return res, err
	}
	attrs, _, err := s.updateRow(ctx, layout.Key(layout.CountPK(c.BatchID, c.Run, part), layout.ChunkSK(c.First)), expr, types.ReturnValueUpdatedNew)
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
	ru := expression.Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(c.Now.UnixMilli())).
		Add(expression.Name(layout.AttrChunksDone), expression.Value(boolInt(res.ChunkDone)))
	if c.RunFailures {
		ru = ru.Add(expression.Name(layout.AttrFailures), expression.Value(c.Failures))
	}
	expr, err = expression.NewBuilder().WithUpdate(s.stamp(ru, c.Now)).Build()
	if err != nil {
		return res, err
	}
	attrs, _, err = s.updateRow(ctx, layout.Key(layout.RunPK(c.BatchID, c.Run), layout.SKRun), expr, types.ReturnValueUpdatedNew)
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

// addCosts adds cost and spent to a counter's c#{name} and s#{name}:
// cost sums as DynamoDB numbers, ADD being exact in decimal (38
// significant digits; Amazon DynamoDB developer guide, "Supported data
// types and naming rules", Number), as the census's sums are.
func addCosts(u expression.UpdateBuilder, cost, spent map[string]decimal.Decimal) expression.UpdateBuilder {
	for _, ps := range []struct {
		prefix string
		sum    map[string]decimal.Decimal
	}{{layout.AttrCostPrefix, cost}, {layout.AttrSpentPrefix, spent}} {
		for _, name := range slices.Sorted(maps.Keys(ps.sum)) {
			u = u.Add(expression.Name(ps.prefix+name), expression.Value(&types.AttributeValueMemberN{Value: ps.sum[name].String()}))
		}
	}
	return u
}

// waitPrune is how many minutes before now a wait write removes: the
// buckets of retries already due, which no longer count, so that a wait
// row holds little more than the retries still to come.
const waitPrune = 10

// CountWaits adds c to the wait row of counter partition c.Lane with one
// UpdateItem (ADD w{minute} …, h{minute} … for the throttled, n{slot}_
// {minute} … for each failure class with SET c{slot} and e{slot} its
// name and one error, interrupted, timed_out, held_{outcome}; REMOVE the buckets of the
// waitPrune minutes before now; SET its token slot), sent once at a time
// as CountLane's (addOnce): never counted twice. A class has one of
// streak.Slots slots (streak.Slot): two classes in one
// slot are counted together under the name written last.
func (s *Store) CountWaits(ctx context.Context, c ledger.WaitCount) error {
	u := expression.Set(expression.Name(layout.TokenSlot(c.Token)), expression.Value(layout.TokenMark(c.Token, c.Now)))
	add := func(name string, n int64) {
		if n != 0 {
			u = u.Add(expression.Name(name), expression.Value(n))
		}
	}
	for m, n := range c.Due {
		add(layout.AttrWaitPrefix+strconv.FormatInt(m, 10), n)
	}
	for m, n := range c.Throttled {
		add(layout.AttrThrottledPrefix+strconv.FormatInt(m, 10), n)
	}
	slots := map[int]map[int64]int64{}
	for class, w := range c.Causes {
		slot := streak.Slot(class)
		u = u.Set(expression.Name(layout.CauseClassAttr(slot)), expression.Value(class))
		if w.Error != "" {
			u = u.Set(expression.Name(layout.CauseErrorAttr(slot)), expression.Value(w.Error)) // cut by the caller (ledger.MaxWaitCauseBytes)
		}
		if slots[slot] == nil {
			slots[slot] = map[int64]int64{}
		}
		for m, n := range w.Due {
			slots[slot][m] += n
		}
	}
	for slot, due := range slots {
		total := int64(0)
		for m, n := range due {
			add(layout.CauseDueAttr(slot, m), n)
			total += n
		}
		add(layout.CauseTotalAttr(slot), total)
	}
	sum := func(m map[int64]int64) (n int64) {
		for _, c := range m {
			n += c
		}
		return n
	}
	add(layout.AttrRetried, sum(c.Due))
	add(layout.AttrRetriedThrottled, sum(c.Throttled))
	add(layout.AttrInterrupted, c.Interrupted)
	add(layout.AttrTimedOut, c.TimedOut)
	for _, o := range api.HeldOutcomes() {
		if n := c.Held[o]; n != 0 {
			u = u.Add(expression.Name(layout.HeldAttr(o)), expression.Value(n))
		}
	}
	now := c.Now.Unix() / 60
	for m := now - waitPrune; m < now; m++ {
		if _, due := c.Due[m]; !due {
			u = u.Remove(expression.Name(layout.AttrWaitPrefix + strconv.FormatInt(m, 10)))
		}
		if _, due := c.Throttled[m]; !due {
			u = u.Remove(expression.Name(layout.AttrThrottledPrefix + strconv.FormatInt(m, 10)))
		}
		for slot, due := range slots {
			if _, ok := due[m]; !ok {
				u = u.Remove(expression.Name(layout.CauseDueAttr(slot, m)))
			}
		}
	}
	expr, err := expression.NewBuilder().WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return err
	}
	if _, err := s.addOnce(ctx, layout.Key(layout.CountPK(c.BatchID, c.Run, c.Lane), layout.SKWait), expr, c.Token, c.Now); err != nil {
		return fmt.Errorf("count waits of %s run %d: %w", c.BatchID, c.Run, err)
	}
	return nil
}

// CountFanned adds c's items to fan row c.Row (layout.FanSK) of counter
// partition c.Lane under the condition that its chunk is not among the row's
// fanned_chunks (ADD fanned :n, fanned_chunks {first}): a chunk fanned
// out again, or a write the SDK sends again, counts once.
func (s *Store) CountFanned(ctx context.Context, c ledger.FanCount) error {
	first := strconv.FormatInt(c.First, 10)
	u := expression.Add(expression.Name(layout.AttrFanned), expression.Value(c.Items)).
		Add(expression.Name(layout.AttrFannedChunks), expression.Value(&types.AttributeValueMemberSS{Value: []string{first}}))
	cond := expression.Or(expression.AttributeNotExists(expression.Name(layout.AttrFannedChunks)),
		expression.Not(expression.Contains(expression.Name(layout.AttrFannedChunks), first)))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.CountPK(c.BatchID, c.Run, c.Lane), layout.FanSK(c.Row)), expr, types.ReturnValueNone); err != nil && !errors.Is(err, api.ErrConflict) {
		return fmt.Errorf("count fanned-out chunk %d of %s run %d: %w", c.First, c.BatchID, c.Run, err)
	}
	return nil
}

// Progress sums the run's chunk counters: one eventually consistent Query
// per counter shard (COUNT#{id}#{run}#{p}, every page), so it reads
// O(shards) partitions and about 100 bytes per chunk of 5,000 items,
// whatever the batch's size.
func (s *Store) Progress(ctx context.Context, batchID string, run, shards int) (ledger.Progress, error) {
	p := ledger.Progress{ByOutcome: map[api.Outcome]int64{}, Cost: map[string]decimal.Decimal{}, Spent: map[string]decimal.Decimal{}, RetryDue: map[int64]int64{},
		ThrottledDue: map[int64]int64{}, Causes: map[string]ledger.WaitCause{}}
	for part := range max(1, shards) {
		err := s.queryAll(ctx, layout.CountPK(batchID, run, part), false, func(av map[string]types.AttributeValue) error {
			return layout.AddCounterRow(batchID, av, &p)
		})
		if err != nil {
			return p, fmt.Errorf("progress %s run %d: %w", batchID, run, err)
		}
	}
	return p, nil
}

// CountLane adds c's items to counter lane c.Lane with one UpdateItem
// that returns the new values (UPDATED_NEW; no read is billed):
//
//	ADD done :n, failures :f, n_{outcome} …, wcu :w, rcu :r [, busy_ms :b]
//	SET items = :target, t{h} = :token@:now, updated_at_ms = :now, fv, expires_at
//	IF attribute_not_exists(done) OR done <= :target − :n
//
// on COUNT#{id}#{run}#{lane}, LANE (:w and :r as in CountChunk). A lost
// condition returns the room left and api.ErrConflict. The write is sent
// one try at a time (see addOnce): a write whose answer was lost is
// recognised by its token, never counted twice.
func (s *Store) CountLane(ctx context.Context, c ledger.LaneCount) (ledger.LaneCounted, error) {
	var res ledger.LaneCounted
	used := s.takePending()
	n := c.Done()
	u := expression.Add(expression.Name(layout.AttrDone), expression.Value(n)).
		Add(expression.Name(layout.AttrFailures), expression.Value(c.Failures)).
		Set(expression.Name(layout.AttrItems), expression.Value(c.Target)).
		Set(expression.Name(layout.TokenSlot(c.Token)), expression.Value(layout.TokenMark(c.Token, c.Now))).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(c.Now.UnixMilli()))
	for _, o := range api.TerminalOutcomes() {
		if v := c.Outcomes[o]; v != 0 {
			u = u.Add(expression.Name(layout.OutcomeAttr(o)), expression.Value(v))
		}
	}
	u = addCosts(u, c.Cost, c.Spent)
	if c.Answered {
		for i := range streak.Slots {
			u = u.Remove(expression.Name(layout.StreakAttr(i)))
		}
	} else {
		for slot, n := range c.Streaks {
			u = u.Add(expression.Name(layout.StreakAttr(slot)), expression.Value(n))
		}
	}
	if used.DynamoDBWriteUnits > 0 || used.DynamoDBReadUnits > 0 {
		u = u.Add(expression.Name(layout.AttrWriteUnits), expression.Value(used.DynamoDBWriteUnits)).
			Add(expression.Name(layout.AttrReadUnits), expression.Value(used.DynamoDBReadUnits))
	}
	if c.BusyMs > 0 {
		u = u.Add(expression.Name(layout.AttrBusyMs), expression.Value(c.BusyMs))
	}
	fits := expression.Or(expression.AttributeNotExists(expression.Name(layout.AttrDone)),
		expression.Name(layout.AttrDone).LessThanEqual(expression.Value(c.Target-n)))
	expr, err := expression.NewBuilder().WithCondition(fits).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		s.returnPending(used)
		return res, err
	}
	row, err := s.addOnce(ctx, layout.Key(layout.CountPK(c.BatchID, c.Run, c.Lane), layout.SKLane), expr, c.Token, c.Now)
	var v struct {
		Done     int64 `dynamodbav:"done"`
		Failures int64 `dynamodbav:"failures"`
	}
	if uerr := attributevalue.UnmarshalMap(row, &v); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		s.returnPending(used)
		if errors.Is(err, api.ErrConflict) {
			res.Room = c.Target - v.Done
		}
		return res, fmt.Errorf("count lane %d of %s run %d: %w", c.Lane, c.BatchID, c.Run, err)
	}
	got := ledger.LaneCounted{Done: v.Done, Failures: v.Failures}
	if !c.Answered && len(c.Streaks) > 0 {
		got.Streaks = map[int]int64{}
		for slot := range c.Streaks {
			var n int64
			if av, ok := row[layout.StreakAttr(slot)]; ok {
				if err := attributevalue.Unmarshal(av, &n); err != nil {
					return got, fmt.Errorf("count lane %d of %s run %d: %s: %w", c.Lane, c.BatchID, c.Run, layout.StreakAttr(slot), err)
				}
			}
			got.Streaks[slot] = n
		}
	}
	return got, nil
}

// CountRun adds c to the run row COUNT#{id}#{run}, RUN with one UpdateItem
// returning the new totals (ADD lanes_done, failures; SET t{h},
// updated_at_ms), sent once at a time as CountLane's (addOnce).
func (s *Store) CountRun(ctx context.Context, c ledger.RunCount) (ledger.RunCounted, error) {
	u := expression.Add(expression.Name(layout.AttrLanesDone), expression.Value(c.LanesDone)).
		Add(expression.Name(layout.AttrFailures), expression.Value(c.Failures)).
		Set(expression.Name(layout.TokenSlot(c.Token)), expression.Value(layout.TokenMark(c.Token, c.Now))).
		Set(expression.Name(layout.AttrUpdatedAtMs), expression.Value(c.Now.UnixMilli()))
	expr, err := expression.NewBuilder().WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return ledger.RunCounted{}, err
	}
	row, err := s.addOnce(ctx, layout.Key(layout.RunPK(c.BatchID, c.Run), layout.SKRun), expr, c.Token, c.Now)
	if err != nil {
		return ledger.RunCounted{}, fmt.Errorf("count run %d of %s: %w", c.Run, c.BatchID, err)
	}
	var v struct {
		LanesDone int64 `dynamodbav:"lanes_done"`
		Failures  int64 `dynamodbav:"failures"`
	}
	if err := attributevalue.UnmarshalMap(row, &v); err != nil {
		return ledger.RunCounted{}, fmt.Errorf("count run %d of %s: %w", c.Run, c.BatchID, err)
	}
	return ledger.RunCounted{LanesDone: v.LanesDone, Failures: v.Failures}, nil
}

// countClockSkew is how far apart two writers' clocks may be.
const countClockSkew = 2 * time.Second

// countThrottleRetry spaces the tries of a counter write DynamoDB
// throttled (which it did not apply): 50 ms doubling, at most 2 s.
var countThrottleRetry = retry.Schedule{Interval: 50 * time.Millisecond, MaxDelay: 2 * time.Second, Jitter: 0.5}

// addOnce runs a counter UpdateItem (an ADD: not idempotent) whose update
// sets its token's slot (layout.TokenSlot) to layout.TokenMark(token, now), so that it
// is never applied twice. The SDK does not send it again by itself; this
// does:
//
//   - throttled (DynamoDB did not apply it): sent again, up to
//     awsfault.MaxAttempts tries in all;
//   - answered with its condition lost: the stored row and
//     api.ErrConflict — unless the row's slot holds its mark, when an
//     earlier try took effect and the row is its answer;
//   - no answer (a connection reset or timeout, a 500: it may have taken
//     effect): the row is read, strongly consistent. Its slot holding the
//     mark, an earlier try took effect and the row is its answer (no write
//     can have come after it with that slot empty of it). Row or slot
//     absent, or the slot last written more than countClockSkew before
//     now, no try took effect (it would have written the slot) and it is
//     sent again. Otherwise a later write took the slot and whether this
//     one took effect cannot be told: ledger.ErrCountUnknown. With 16 slots
//     a write is told apart unless one of the writes since took its slot:
//     always while the row is quiet, in most cases at a lane's 250 writes/s.
//
// It returns the row's attributes after the write (UPDATED_NEW, or the
// whole row when recognised).
func (s *Store) addOnce(ctx context.Context, k map[string]types.AttributeValue, expr expression.Expression, token string, now time.Time) (map[string]types.AttributeValue, error) {
	once := func(o *dynamodb.Options) { o.Retryer = awsretry.AddWithMaxAttempts(o.Retryer, 1) }
	slot, mark := layout.TokenSlot(token), layout.TokenMark(token, now)
	var err error
	for try := 1; try <= awsfault.MaxAttempts; try++ {
		if try > 1 {
			if werr := sleepCtx(ctx, countThrottleRetry.Delay(try-1)); werr != nil {
				return nil, werr
			}
		}
		c, cancel := s.ctx(ctx)
		var out *dynamodb.UpdateItemOutput
		out, err = s.db.UpdateItem(c, &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: k,
			ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
			ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
			ReturnValues:                        types.ReturnValueUpdatedNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, once)
		cancel()
		if old, ok := conflict(err); ok {
			if stringAttr(old, slot) == mark {
				return old, nil
			}
			return old, api.ErrConflict
		}
		switch {
		case err == nil:
			return out.Attributes, nil
		case !errors.Is(err, ledger.ErrUnavailable):
			return nil, err
		case awsretry.IsErrorThrottles(awsretry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary:
			continue // not applied
		}
		row, gerr := s.getRow(ctx, k)
		if gerr != nil {
			return nil, fmt.Errorf("%w: %w (and reading the row: %w)", ledger.ErrCountUnknown, err, gerr)
		}
		got := stringAttr(row, slot)
		if got == mark {
			return row, nil
		}
		if _, at, ok := strings.Cut(got, "@"); ok {
			ms, _ := strconv.ParseInt(at, 10, 64)
			if ms >= now.Add(-countClockSkew).UnixMilli() {
				return nil, fmt.Errorf("%w: %w", ledger.ErrCountUnknown, err)
			}
		}
	}
	return nil, err
}

// getRow reads the row at k strongly consistent; nil when there is none.
func (s *Store) getRow(ctx context.Context, k map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

func stringAttr(row map[string]types.AttributeValue, name string) string {
	if v, ok := row[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
