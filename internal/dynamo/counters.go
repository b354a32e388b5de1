package dynamo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
	"github.com/bulkrun/bulkrun/internal/retry"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
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
	u := expression.Add(expression.Name(attrDone), expression.Value(done)).
		Add(expression.Name(attrFailures), expression.Value(c.Failures)).
		Set(expression.Name(attrItems), expression.Value(c.Items)).
		Set(expression.Name(attrUpdatedAtMs), expression.Value(c.Now.UnixMilli()))
	for _, o := range api.TerminalOutcomes() {
		if n := c.Outcomes[o]; n != 0 {
			u = u.Add(expression.Name(outcomeAttr(o)), expression.Value(n))
		}
	}
	u = addCosts(u, c.Cost, c.Spent)
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

// addCosts adds cost and spent to a counter's c#{name} and s#{name}:
// cost sums as DynamoDB numbers, ADD being exact in decimal (38
// significant digits; Amazon DynamoDB developer guide, "Supported data
// types and naming rules", Number), as the census's sums are.
func addCosts(u expression.UpdateBuilder, cost, spent map[string]decimal.Decimal) expression.UpdateBuilder {
	for _, ps := range []struct {
		prefix string
		sum    map[string]decimal.Decimal
	}{{attrCostPrefix, cost}, {attrSpentPrefix, spent}} {
		for _, name := range slices.Sorted(maps.Keys(ps.sum)) {
			u = u.Add(expression.Name(ps.prefix+name), expression.Value(&types.AttributeValueMemberN{Value: ps.sum[name].String()}))
		}
	}
	return u
}

// Counter attributes of the cost sums: "c#{name}" (ChunkCount.Cost) and
// "s#{name}" (ChunkCount.Spent), one number each per cost name.
const (
	attrCostPrefix  = "c#"
	attrSpentPrefix = "s#"
)

// The live view's rows in a counter partition (ledger.Store.CountWaits,
// CountFanned) and their attributes.
const (
	skWait = "WAIT" // w{minute}: items whose retry is due in that Unix minute; h{minute}: those of them throttled; per failure-class slot s: c{s} the class, e{s} one error, n{s}_{minute} its items; interrupted; timed_out; token slots
	skFan  = "FAN"  // fanned: items of the chunks fanned out; fanned_chunks: their first indexes (a string set)

	attrWaitPrefix = "w"
	// attrThrottledPrefix prefixes the wait row's throttled buckets,
	// h{minute}; causeClassAttr, causeErrorAttr and causeDueAttr name its
	// failure-class slots' attributes.
	attrThrottledPrefix = "h"
	attrInterrupted     = "interrupted"
	attrTimedOut        = "timed_out"
	attrFanned          = "fanned"
	attrFannedChunks    = "fanned_chunks"
	// waitPrune is how many minutes before now a wait write removes: the
	// buckets of retries already due, which no longer count, so that a
	// wait row holds little more than the retries still to come.
	waitPrune = 10
)

// heldAttr is the wait row's attribute counting the run's items held
// with outcome o: "held_withheld".
func heldAttr(o api.Outcome) string { return "held_" + string(o) }

// CountWaits adds c to the wait row of counter partition c.Lane with one
// UpdateItem (ADD w{minute} …, h{minute} … for the throttled, n{slot}_
// {minute} … for each failure class with SET c{slot} and e{slot} its
// name and one error, interrupted, timed_out, held_{outcome}; REMOVE the buckets of the
// waitPrune minutes before now; SET its token slot), sent once at a time
// as CountLane's (addOnce): never counted twice. A class has one of
// ledger.StreakSlots() slots (ledger.StreakSlot): two classes in one
// slot are counted together under the name written last.
func (s *Store) CountWaits(ctx context.Context, c ledger.WaitCount) error {
	u := expression.Set(expression.Name(tokenSlot(c.Token)), expression.Value(tokenMark(c.Token, c.Now)))
	add := func(name string, n int64) {
		if n != 0 {
			u = u.Add(expression.Name(name), expression.Value(n))
		}
	}
	for m, n := range c.Due {
		add(attrWaitPrefix+strconv.FormatInt(m, 10), n)
	}
	for m, n := range c.Throttled {
		add(attrThrottledPrefix+strconv.FormatInt(m, 10), n)
	}
	slots := map[int]map[int64]int64{}
	for class, w := range c.Causes {
		slot := ledger.StreakSlot(class)
		u = u.Set(expression.Name(causeClassAttr(slot)), expression.Value(class))
		if w.Error != "" {
			u = u.Set(expression.Name(causeErrorAttr(slot)), expression.Value(w.Error)) // cut by the caller (ledger.MaxWaitCauseBytes)
		}
		if slots[slot] == nil {
			slots[slot] = map[int64]int64{}
		}
		for m, n := range w.Due {
			slots[slot][m] += n
		}
	}
	for slot, due := range slots {
		for m, n := range due {
			add(causeDueAttr(slot, m), n)
		}
	}
	add(attrInterrupted, c.Interrupted)
	add(attrTimedOut, c.TimedOut)
	for _, o := range api.HeldOutcomes() {
		if n := c.Held[o]; n != 0 {
			u = u.Add(expression.Name(heldAttr(o)), expression.Value(n))
		}
	}
	now := c.Now.Unix() / 60
	for m := now - waitPrune; m < now; m++ {
		if _, due := c.Due[m]; !due {
			u = u.Remove(expression.Name(attrWaitPrefix + strconv.FormatInt(m, 10)))
		}
		if _, due := c.Throttled[m]; !due {
			u = u.Remove(expression.Name(attrThrottledPrefix + strconv.FormatInt(m, 10)))
		}
		for slot, due := range slots {
			if _, ok := due[m]; !ok {
				u = u.Remove(expression.Name(causeDueAttr(slot, m)))
			}
		}
	}
	expr, err := expression.NewBuilder().WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return err
	}
	if _, err := s.addOnce(ctx, key(countPK(c.BatchID, c.Run, c.Lane), skWait), expr, c.Token, c.Now); err != nil {
		return fmt.Errorf("count waits of %s run %d: %w", c.BatchID, c.Run, err)
	}
	return nil
}

// causeClassAttr is the wait row's attribute of failure-class slot s's
// class name, c{s}; causeErrorAttr its error text, e{s}; causeDueAttr
// its items due in Unix minute m, n{s}_{m}.
func causeClassAttr(s int) string { return "c" + strconv.Itoa(s) }
func causeErrorAttr(s int) string { return "e" + strconv.Itoa(s) }
func causeDueAttr(s int, m int64) string {
	return "n" + strconv.Itoa(s) + "_" + strconv.FormatInt(m, 10)
}

// readWaitRow adds a wait row's counts (CountWaits) to p.
func readWaitRow(av map[string]types.AttributeValue, p *ledger.Progress) {
	num := func(v types.AttributeValue) (int64, bool) {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return 0, false
		}
		c, err := strconv.ParseInt(n.Value, 10, 64)
		return c, err == nil
	}
	causes := map[int]*ledger.WaitCause{}
	cause := func(s int) *ledger.WaitCause {
		if causes[s] == nil {
			causes[s] = &ledger.WaitCause{Due: map[int64]int64{}}
		}
		return causes[s]
	}
	names := map[int]string{}
	for name, v := range av {
		if rest, ok := strings.CutPrefix(name, attrWaitPrefix); ok {
			if m, err := strconv.ParseInt(rest, 10, 64); err == nil {
				if c, ok := num(v); ok {
					p.RetryDue[m] += c
				}
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, attrThrottledPrefix); ok {
			if m, err := strconv.ParseInt(rest, 10, 64); err == nil {
				if c, ok := num(v); ok {
					p.ThrottledDue[m] += c
				}
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, "n"); ok {
			sl, mi, found := strings.Cut(rest, "_")
			s, err1 := strconv.Atoi(sl)
			m, err2 := strconv.ParseInt(mi, 10, 64)
			if c, ok := num(v); found && err1 == nil && err2 == nil && ok {
				cause(s).Due[m] += c
			}
			continue
		}
		str, isS := v.(*types.AttributeValueMemberS)
		if !isS || len(name) < 2 {
			continue
		}
		s, err := strconv.Atoi(name[1:])
		switch {
		case err != nil:
		case name[0] == 'c':
			names[s] = str.Value
		case name[0] == 'e':
			cause(s).Error = str.Value
		}
	}
	if n, ok := num(av[attrInterrupted]); ok {
		p.Interrupted += n
	}
	if n, ok := num(av[attrTimedOut]); ok {
		p.TimedOut += n
	}
	for s, w := range causes {
		class := names[s]
		if class == "" {
			class = "transient"
		}
		had := p.Causes[class]
		if had.Due == nil {
			had.Due = map[int64]int64{}
		}
		for m, n := range w.Due {
			had.Due[m] += n
		}
		if had.Error == "" {
			had.Error = w.Error
		}
		p.Causes[class] = had
	}
}

// CountFanned adds c's items to the fan row of counter partition c.Lane
// under the condition that its chunk is not among the row's
// fanned_chunks (ADD fanned :n, fanned_chunks {first}): a chunk fanned
// out again, or a write the SDK sends again, counts once.
func (s *Store) CountFanned(ctx context.Context, c ledger.FanCount) error {
	first := strconv.FormatInt(c.First, 10)
	u := expression.Add(expression.Name(attrFanned), expression.Value(c.Items)).
		Add(expression.Name(attrFannedChunks), expression.Value(&types.AttributeValueMemberSS{Value: []string{first}}))
	cond := expression.Or(expression.AttributeNotExists(expression.Name(attrFannedChunks)),
		expression.Not(expression.Contains(expression.Name(attrFannedChunks), first)))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, key(countPK(c.BatchID, c.Run, c.Lane), skFan), expr, types.ReturnValueNone); err != nil && !errors.Is(err, api.ErrConflict) {
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
		err := s.queryAll(ctx, countPK(batchID, run, part), false, func(av map[string]types.AttributeValue) error {
			switch stringAttr(av, config.AttrSK) {
			case skWait:
				readWaitRow(av, &p)
				for _, o := range api.HeldOutcomes() {
					if n, ok := av[heldAttr(o)].(*types.AttributeValueMemberN); ok {
						c, _ := strconv.ParseInt(n.Value, 10, 64)
						if p.Held == nil {
							p.Held = map[api.Outcome]int64{}
						}
						p.Held[o] += c
					}
				}
				return nil
			case skFan:
				if n, ok := av[attrFanned].(*types.AttributeValueMemberN); ok {
					c, _ := strconv.ParseInt(n.Value, 10, 64)
					p.FannedOut += c
				}
				if ss, ok := av[attrFannedChunks].(*types.AttributeValueMemberSS); ok {
					p.FanChunks += int64(len(ss.Value))
				}
				return nil
			}
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
			if err := ledger.CheckFormat("counter row of "+batchID, row.Format); err != nil {
				return err
			}
			p.Done += row.Done
			p.Failures += row.Failures
			for _, o := range api.TerminalOutcomes() {
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

// CountLane adds c's items to counter lane c.Lane with one UpdateItem
// that returns the new values (UPDATED_NEW; no read is billed):
//
//	ADD done :n, failures :f, n_{outcome} …, wcu :w, rcu :r
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
	u := expression.Add(expression.Name(attrDone), expression.Value(n)).
		Add(expression.Name(attrFailures), expression.Value(c.Failures)).
		Set(expression.Name(attrItems), expression.Value(c.Target)).
		Set(expression.Name(tokenSlot(c.Token)), expression.Value(tokenMark(c.Token, c.Now))).
		Set(expression.Name(attrUpdatedAtMs), expression.Value(c.Now.UnixMilli()))
	for _, o := range api.TerminalOutcomes() {
		if v := c.Outcomes[o]; v != 0 {
			u = u.Add(expression.Name(outcomeAttr(o)), expression.Value(v))
		}
	}
	u = addCosts(u, c.Cost, c.Spent)
	if c.Answered {
		for i := range ledger.StreakSlots() {
			u = u.Remove(expression.Name(streakAttr(i)))
		}
	} else {
		for slot, n := range c.Streaks {
			u = u.Add(expression.Name(streakAttr(slot)), expression.Value(n))
		}
	}
	if used.DynamoDBWriteUnits > 0 || used.DynamoDBReadUnits > 0 {
		u = u.Add(expression.Name(attrWriteUnits), expression.Value(used.DynamoDBWriteUnits)).
			Add(expression.Name(attrReadUnits), expression.Value(used.DynamoDBReadUnits))
	}
	fits := expression.Or(expression.AttributeNotExists(expression.Name(attrDone)),
		expression.Name(attrDone).LessThanEqual(expression.Value(c.Target-n)))
	expr, err := expression.NewBuilder().WithCondition(fits).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		s.returnPending(used)
		return res, err
	}
	row, err := s.addOnce(ctx, key(countPK(c.BatchID, c.Run, c.Lane), skLane), expr, c.Token, c.Now)
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
			if av, ok := row[streakAttr(slot)]; ok {
				if err := attributevalue.Unmarshal(av, &n); err != nil {
					return got, fmt.Errorf("count lane %d of %s run %d: %s: %w", c.Lane, c.BatchID, c.Run, streakAttr(slot), err)
				}
			}
			got.Streaks[slot] = n
		}
	}
	return got, nil
}

// streakAttr is the lane attribute of failure-class slot i
// (ledger.StreakSlot): x0 … x7, the attempts that failed transiently with
// a class of that slot since an item of the lane was last answered.
func streakAttr(i int) string { return "x" + strconv.Itoa(i) }

// CountRun adds c to the run row COUNT#{id}#{run}, RUN with one UpdateItem
// returning the new totals (ADD lanes_done, failures; SET t{h},
// updated_at_ms), sent once at a time as CountLane's (addOnce).
func (s *Store) CountRun(ctx context.Context, c ledger.RunCount) (ledger.RunCounted, error) {
	u := expression.Add(expression.Name(attrLanesDone), expression.Value(c.LanesDone)).
		Add(expression.Name(attrFailures), expression.Value(c.Failures)).
		Set(expression.Name(tokenSlot(c.Token)), expression.Value(tokenMark(c.Token, c.Now))).
		Set(expression.Name(attrUpdatedAtMs), expression.Value(c.Now.UnixMilli()))
	expr, err := expression.NewBuilder().WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return ledger.RunCounted{}, err
	}
	row, err := s.addOnce(ctx, key(runPK(c.BatchID, c.Run), skRun), expr, c.Token, c.Now)
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

// countTokenSlots is how many recent writes' tokens a counter row keeps:
// slot t{h}, h = FNV-1a(token) mod countTokenSlots, holds the token and
// send time of the last write whose token fell into it. 16 slots of ≈ 25
// bytes keep a lane row well under 1 KB (one write unit per write).
const countTokenSlots = 16

// tokenSlot is the attribute of token's slot: "t0" … "t15".
func tokenSlot(token string) string {
	h := fnv.New32a()
	h.Write([]byte(token))
	return "t" + strconv.Itoa(int(h.Sum32()%countTokenSlots))
}

// tokenMark is what a write leaves in its slot: "{token}@{now ms}".
func tokenMark(token string, now time.Time) string {
	return token + "@" + strconv.FormatInt(now.UnixMilli(), 10)
}

// countThrottleRetry spaces the tries of a counter write DynamoDB
// throttled (which it did not apply): 50 ms doubling, at most 2 s.
var countThrottleRetry = retry.Schedule{Interval: 50 * time.Millisecond, MaxDelay: 2 * time.Second, Jitter: 0.5}

// addOnce runs a counter UpdateItem (an ADD: not idempotent) whose update
// sets its token's slot (tokenSlot) to tokenMark(token, now), so that it
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
	slot, mark := tokenSlot(token), tokenMark(token, now)
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
