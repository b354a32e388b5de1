package layout

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Counter attributes of the cost sums: "c#{name}" (ChunkCount.Cost) and
// "s#{name}" (ChunkCount.Spent), one number each per cost name.
const (
	AttrCostPrefix  = "c#"
	AttrSpentPrefix = "s#"
)

// The live view's rows in a counter partition (ledger.Store.CountWaits,
// CountFanned) and their attributes.
const (
	SKWait = "WAIT" // w{minute}: items whose retry is due in that Unix minute; h{minute}: those of them throttled; per failure-class slot s: c{s} the class, e{s} one error, n{s}_{minute} its items; interrupted; timed_out; token slots
	SKFan  = "FAN"  // fan row 0 (FanSK); fanned: items of the chunks fanned out; fanned_chunks: their first indexes (a string set)
	// SKPace is the recent pace's row, in counter partition 0 only:
	// pace, the ring of samples (eta.Encode's JSON, a string);
	// pace_at_ms, its newest sample's time (Unix ms), which the write's
	// condition reads.
	SKPace = "PACE"

	AttrWaitPrefix = "w"
	// AttrThrottledPrefix prefixes the wait row's throttled buckets,
	// h{minute}; CauseClassAttr, CauseErrorAttr and CauseDueAttr name its
	// failure-class slots' attributes.
	AttrThrottledPrefix = "h"
	AttrInterrupted     = "interrupted"
	// AttrRetried and AttrRetriedThrottled count every retry the run's
	// wait writes scheduled, and those throttled (Progress.Retried), never
	// pruned; CauseTotalAttr the same per failure-class slot.
	AttrRetried          = "retried"
	AttrRetriedThrottled = "retried_throttled"
	AttrTimedOut         = "timed_out"
	AttrFanned           = "fanned"
	AttrFannedChunks     = "fanned_chunks"
	AttrPace             = "pace"
	AttrPaceAtMs         = "pace_at_ms"
)

// HeldAttr is the wait row's attribute counting the run's items held
// with outcome o: "held_withheld".
func HeldAttr(o api.Outcome) string { return "held_" + string(o) }

// CauseClassAttr is the wait row's attribute of failure-class slot s's
// class name, c{s}; CauseErrorAttr its error text, e{s}; CauseDueAttr
// its items due in Unix minute m, n{s}_{m}.
func CauseClassAttr(s int) string { return "c" + strconv.Itoa(s) }

// CauseErrorAttr is the wait row's attribute of slot s's error text, e{s}.
func CauseErrorAttr(s int) string { return "e" + strconv.Itoa(s) }

// CauseTotalAttr is the wait row's attribute counting every item slot s's
// retries counted, total_{s} (never pruned).
func CauseTotalAttr(s int) string { return "total_" + strconv.Itoa(s) }

// CauseDueAttr is the wait row's attribute counting slot s's items due in
// Unix minute m, n{s}_{m}.
func CauseDueAttr(s int, m int64) string {
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
		if rest, ok := strings.CutPrefix(name, AttrWaitPrefix); ok {
			if m, err := strconv.ParseInt(rest, 10, 64); err == nil {
				if c, ok := num(v); ok {
					p.RetryDue[m] += c
				}
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, AttrThrottledPrefix); ok {
			if m, err := strconv.ParseInt(rest, 10, 64); err == nil {
				if c, ok := num(v); ok {
					p.ThrottledDue[m] += c
				}
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, "total_"); ok {
			if s, err := strconv.Atoi(rest); err == nil {
				if c, ok := num(v); ok {
					cause(s).Total += c
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
	if n, ok := num(av[AttrInterrupted]); ok {
		p.Interrupted += n
	}
	if n, ok := num(av[AttrRetried]); ok {
		p.Retried += n
	}
	if n, ok := num(av[AttrRetriedThrottled]); ok {
		p.RetriedThrottled += n
	}
	if n, ok := num(av[AttrTimedOut]); ok {
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
		had.Total += w.Total
		if had.Error == "" {
			had.Error = w.Error
		}
		p.Causes[class] = had
	}
}

// StreakAttr is the lane attribute of failure-class slot i
// (streak.Slot): x0 … x7, the attempts that failed transiently with
// a class of that slot since an item of the lane was last answered.
func StreakAttr(i int) string { return "x" + strconv.Itoa(i) }

// countTokenSlots is how many recent writes' tokens a counter row keeps:
// slot t{h}, h = FNV-1a(token) mod countTokenSlots, holds the token and
// send time of the last write whose token fell into it. 16 slots of ≈ 25
// bytes keep a lane row well under 1 KB (one write unit per write).
const countTokenSlots = 16

// TokenSlot is the attribute of token's slot: "t0" … "t15".
func TokenSlot(token string) string {
	h := fnv.New32a()
	h.Write([]byte(token))
	return "t" + strconv.Itoa(int(h.Sum32()%countTokenSlots))
}

// TokenMark is what a write leaves in its slot: "{token}@{now ms}".
func TokenMark(token string, now time.Time) string {
	return token + "@" + strconv.FormatInt(now.UnixMilli(), 10)
}

// FanSK is the sort key of fan row row of a counter partition
// (fanout.CountOf): SKFan for row 0, as before a partition had several,
// "FAN#{row}" for the others.
func FanSK(row int) string {
	if row <= 0 {
		return SKFan
	}
	return SKFan + "#" + strconv.Itoa(row)
}

// AddCounterRow adds one row of a run's counter partition
// (COUNT#{id}#{run}#{p}) to p: a wait row (SKWait) its retries due,
// throttled buckets, failure classes and held items; a fan row (FanSK) the
// items and chunks fanned out; the pace row (SKPace) its ring of samples
// (Progress.Pace); any other (a lane, a chunk counter) its
// done, failures, outcomes, cost and spent sums (DynamoDB numbers, exact
// in decimal), DynamoDB units and the latest updated_at_ms. A counter row
// of a newer format is refused with a *ledger.NewerFormatError.
func AddCounterRow(batchID string, av map[string]types.AttributeValue, p *ledger.Progress) error {
	var sk string
	if v, ok := av[config.AttrSK].(*types.AttributeValueMemberS); ok {
		sk = v.Value
	}
	if sk == SKFan || strings.HasPrefix(sk, SKFan+"#") {
		if n, ok := av[AttrFanned].(*types.AttributeValueMemberN); ok {
			c, _ := strconv.ParseInt(n.Value, 10, 64)
			p.FannedOut += c
		}
		if ss, ok := av[AttrFannedChunks].(*types.AttributeValueMemberSS); ok {
			p.FanChunks += int64(len(ss.Value))
		}
		return nil
	}
	switch sk {
	case SKWait:
		readWaitRow(av, p)
		for _, o := range api.HeldOutcomes() {
			if n, ok := av[HeldAttr(o)].(*types.AttributeValueMemberN); ok {
				c, _ := strconv.ParseInt(n.Value, 10, 64)
				if p.Held == nil {
					p.Held = map[api.Outcome]int64{}
				}
				p.Held[o] += c
			}
		}
		return nil
	case SKPace:
		return readPaceRow(batchID, av, p)
	}
	var row struct {
		Done        int64   `dynamodbav:"done"`
		Failures    int64   `dynamodbav:"failures"`
		UpdatedAtMs int64   `dynamodbav:"updated_at_ms"`
		WriteUnits  float64 `dynamodbav:"wcu"`
		ReadUnits   float64 `dynamodbav:"rcu"`
		BusyMs      int64   `dynamodbav:"busy_ms"`
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
	p.BusyMs += row.BusyMs
	for _, o := range api.TerminalOutcomes() {
		if v, ok := av[OutcomeAttr(o)].(*types.AttributeValueMemberN); ok {
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
		cost, isCost := strings.CutPrefix(name, AttrCostPrefix)
		if !isCost {
			sum = p.Spent
			if cost, isCost = strings.CutPrefix(name, AttrSpentPrefix); !isCost {
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
	if t := FromMs(row.UpdatedAtMs); t.After(p.UpdatedAt) {
		p.UpdatedAt = t
	}
	return nil
}

// readPaceRow sets p.Pace from the pace row (SKPace): its format checked,
// its ring decoded (none when it does not decode).
func readPaceRow(batchID string, av map[string]types.AttributeValue, p *ledger.Progress) error {
	var row struct {
		Pace   string `dynamodbav:"pace"`
		Format int    `dynamodbav:"fv"`
	}
	if err := attributevalue.UnmarshalMap(av, &row); err != nil {
		return err
	}
	if err := ledger.CheckFormat("pace row of "+batchID, row.Format); err != nil {
		return err
	}
	if row.Pace == "" {
		return nil
	}
	// A ring that does not decode is no ring: the estimate falls back to
	// the run's average and the next sample replaces it; the live view
	// does not fail for it.
	p.Pace, _ = eta.Decode([]byte(row.Pace))
	return nil
}
