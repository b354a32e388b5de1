package layout

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// PackPK is the partition key of the pack rows of one item shard.
func PackPK(id string, shard int) string { return "PACK#" + ShardKey(id, shard) }

// AttentionPK is the partition key of the attention rows of the pack items of
// one item shard (by the item key's shard, as an item row's).
func AttentionPK(id string, shard int) string { return config.PKAttention + ShardKey(id, shard) }

// PackKey is the key (pk, sk) of the pack row ref names: pk PackPK of its
// shard (ledger.PackShard), sk ledger.PackSK(ref.First).
func PackKey(ref ledger.PackRef) map[string]types.AttributeValue {
	return Key(PackPK(ref.BatchID, ledger.PackShard(ref.First, ref.ListShards)), ledger.PackSK(ref.First))
}

// PackItemAttr is the attribute holding item j of a pack row ("i0" ..
// "i99"): a map of the item's state (PackItemRow).
func PackItemAttr(j int) string { return "i" + strconv.Itoa(j) }

// Attributes of pack rows besides the item maps; AttrRun, AttrAttempt,
// AttrLeaseUntilMs and AttrUpdatedAtMs are the item rows' names.
const (
	AttrPackItems    = "n"        // items in the pack, set by its first take
	AttrPackInFlight = "inflight" // items in flight after the last write (ledger.PackWrite.InFlight)
)

// Attributes of attention rows besides the item row's: where the item's
// pack row is.
const (
	AttrPackFirst = "pack_first"
	AttrPackIndex = "pack_index"
)

// PackItemRow is the stored shape of ledger.ItemState: short names, empty
// fields left out, since every byte of a pack row is billed on each of its
// writes.
type PackItemRow struct {
	Key          string             `dynamodbav:"k"`
	Run          int                `dynamodbav:"r,omitempty"`
	Outcome      string             `dynamodbav:"o,omitempty"`
	Attempt      int                `dynamodbav:"a,omitempty"`
	FirstAttempt int                `dynamodbav:"f,omitempty"`
	Retry        bool               `dynamodbav:"rs,omitempty"`
	RetryAtMs    int64              `dynamodbav:"ra,omitempty"` // ledger.ItemState.RetryAt
	ThrottledMs  int64              `dynamodbav:"ts,omitempty"` // ledger.ItemState.ThrottledSince
	Released     bool               `dynamodbav:"rel,omitempty"`
	Output       string             `dynamodbav:"out,omitempty"`
	OutputRef    string             `dynamodbav:"ref,omitempty"`
	Error        string             `dynamodbav:"e,omitempty"`
	Reason       string             `dynamodbav:"re,omitempty"`
	Cost         map[string]float64 `dynamodbav:"c,omitempty"`
	Spent        map[string]float64 `dynamodbav:"s,omitempty"`
	SpentRun     int                `dynamodbav:"sr,omitempty"`
	CountedRun   int                `dynamodbav:"cr,omitempty"`
	Revision     int                `dynamodbav:"rv,omitempty"` // ledger.ItemState.Revision
	UpdatedAtMs  int64              `dynamodbav:"u,omitempty"`
	HoldSubject  string             `dynamodbav:"hs,omitempty"` // ledger.ItemState.Hold: Subject, Since, Woken
	HoldSinceMs  int64              `dynamodbav:"hn,omitempty"`
	Woken        string             `dynamodbav:"wk,omitempty"`
	HoldWakeAtMs int64              `dynamodbav:"hw,omitempty"` // Hold.WakeAt
	Signalled    int                `dynamodbav:"sg,omitempty"` // ItemState.Signalled
}

// ToPackItemRow is the stored shape of it, its error cut to
// ledger.CutError's bound.
func ToPackItemRow(it ledger.ItemState) PackItemRow {
	return PackItemRow{Key: it.Key, Run: it.Run, Outcome: string(it.Outcome), Attempt: it.Attempt, FirstAttempt: it.FirstAttempt,
		Retry: it.Retry, RetryAtMs: Ms(it.RetryAt), Released: it.Released, Output: string(it.Output), OutputRef: it.OutputRef,
		Error: ledger.CutError(it.Error), Reason: string(it.Reason), Cost: it.Cost, Spent: it.Spent,
		SpentRun: it.SpentRun, CountedRun: it.CountedRun, UpdatedAtMs: Ms(it.UpdatedAt), ThrottledMs: Ms(it.ThrottledSince), Revision: it.Revision,
		HoldSubject: it.Hold.Subject, HoldSinceMs: Ms(it.Hold.Since), Woken: string(it.Hold.Woken),
		HoldWakeAtMs: Ms(it.Hold.WakeAt), Signalled: it.Signalled}
}

func packItemFromRow(r PackItemRow) ledger.ItemState {
	it := ledger.ItemState{Key: r.Key, Run: r.Run, Outcome: api.Outcome(r.Outcome), Attempt: r.Attempt, FirstAttempt: r.FirstAttempt,
		Retry: r.Retry, RetryAt: FromMs(r.RetryAtMs), Released: r.Released, OutputRef: r.OutputRef, Error: r.Error, Reason: api.Reason(r.Reason),
		SpentRun: r.SpentRun, CountedRun: r.CountedRun, UpdatedAt: FromMs(r.UpdatedAtMs), ThrottledSince: FromMs(r.ThrottledMs), Revision: r.Revision,
		Hold: api.Hold{Subject: r.HoldSubject, Since: FromMs(r.HoldSinceMs), Woken: api.Wake(r.Woken),
			WakeAt: FromMs(r.HoldWakeAtMs)}, Signalled: r.Signalled}
	if r.Output != "" {
		it.Output = json.RawMessage(r.Output)
	}
	if len(r.Cost) > 0 {
		it.Cost = r.Cost
	}
	if len(r.Spent) > 0 {
		it.Spent = r.Spent
	}
	return it
}

// PackFrom reads a pack row of batch batchID: its head (run, attempt,
// lease, TTL) and its items i0 … i{n-1}; a row of a newer format version
// is refused (*ledger.NewerFormatError).
func PackFrom(batchID string, av map[string]types.AttributeValue) (ledger.Pack, error) {
	var head struct {
		SK           string `dynamodbav:"sk"`
		Run          int    `dynamodbav:"run"`
		Attempt      int    `dynamodbav:"attempt"`
		LeaseUntilMs int64  `dynamodbav:"lease_until_ms"`
		Items        int    `dynamodbav:"n"`
		ExpiresAt    int64  `dynamodbav:"expires_at"`
		Format       int    `dynamodbav:"fv"`
		Token        string `dynamodbav:"tk"`
	}
	if err := attributevalue.UnmarshalMap(av, &head); err != nil {
		return ledger.Pack{}, fmt.Errorf("pack row: %w", err)
	}
	if err := ledger.CheckFormat("pack row "+batchID+"/"+head.SK, head.Format); err != nil {
		return ledger.Pack{}, err
	}
	first, err := strconv.ParseInt(head.SK, 10, 64)
	if err != nil {
		return ledger.Pack{}, fmt.Errorf("pack row: sort key %q: %w", head.SK, err)
	}
	p := ledger.Pack{BatchID: batchID, First: first, Run: head.Run, Attempt: head.Attempt, LeaseUntil: FromMs(head.LeaseUntilMs), Token: head.Token}
	if head.ExpiresAt > 0 {
		p.ExpiresAt = time.Unix(head.ExpiresAt, 0).UTC()
	}
	n := min(max(head.Items, 0), ledger.MaxItemsPerMessage)
	for j := ledger.MaxItemsPerMessage - 1; j >= n; j-- {
		if _, ok := av[PackItemAttr(j)]; ok {
			n = j + 1
			break
		}
	}
	p.Items = make([]ledger.ItemState, n)
	for j := range n {
		v, ok := av[PackItemAttr(j)]
		if !ok {
			continue
		}
		var r PackItemRow
		if err := attributevalue.Unmarshal(v, &r); err != nil {
			return ledger.Pack{}, fmt.Errorf("pack row %d: item %d: %w", first, j, err)
		}
		p.Items[j] = packItemFromRow(r)
	}
	return p, nil
}
