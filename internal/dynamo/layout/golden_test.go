package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/integration/testbed/dynjson"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// goldenDir is where the golden formats of version v live.
func goldenDir(v int) string {
	return filepath.Join("..", "..", "..", "integration", "testbed", "formats", "testdata", fmt.Sprintf("v%d", v))
}

func readGoldenRow(t *testing.T, v int, name string) map[string]types.AttributeValue {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir(v), name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r dynjson.Row
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	av, err := dynjson.DecodeRow(r)
	if err != nil {
		t.Fatal(err)
	}
	return av
}

// tags is the set of dynamodbav names of struct type v.
func tags(v any, extra ...string) map[string]bool {
	m := map[string]bool{}
	rt := reflect.TypeOf(v)
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("dynamodbav"), ",")
		m[name] = true
	}
	for _, e := range extra {
		m[e] = true
	}
	return m
}

// TestGoldenRows guards the ledger row formats of every version: each
// golden row (integration/testbed/formats/testdata: an item row in each state, a
// pack row, an attention row, the batch row, a chunk counter of versions
// 0 and 1, a counter lane of version 2; from version 2 also the run row,
// the pace row,
// a rerun count mark, a corrected item row and pack row and a batch row
// with a revision, a max_concurrency slot, claim counter and track
// fence, a pack row whose items
// carry every attribute, a finished batch row, the retention and publish
// markers and an upload claim) of every version is read by today's
// readers, holds no attribute they do not know, and carries its version
// (none on version 0); a row of a newer version is refused with a
// *ledger.NewerFormatError by the readers that interpret its attributes
// (refuses; a mark, a slot, a marker and an upload claim are read by
// their key or a condition only).
func TestGoldenRows(t *testing.T) {
	itemAttrs := tags(ItemRow{}, "pk", "apk", "ask")
	counterAttrs := []string{"pk", "sk", AttrDone, AttrFailures, AttrItems, AttrUpdatedAtMs, AttrWriteUnits, AttrReadUnits, AttrBusyMs, AttrFormat, "expires_at",
		OutcomeAttr(api.OutcomeSucceeded), OutcomeAttr(api.OutcomeFailed), OutcomeAttr(api.OutcomeQuarantined), OutcomeAttr(api.OutcomeCancelled)}
	packAttrs := tags(struct{}{}, "pk", "sk", AttrRun, AttrAttempt, AttrLeaseUntilMs, AttrPackItems, AttrPackInFlight, AttrUpdatedAtMs, AttrFormat, "expires_at")
	for j := range ledger.MaxItemsPerMessage {
		packAttrs[PackItemAttr(j)] = true
	}
	v2 := []int{2}
	rows := map[string]struct {
		known    map[string]bool
		read     func(map[string]types.AttributeValue) (int, error)
		versions []int // nil: every version
		keyOnly  bool  // read by its key or a condition: no newer-version refusal
	}{
		"row-item-succeeded":       {itemAttrs, readItem, nil, false},
		"row-item-failed":          {itemAttrs, readItem, nil, false},
		"row-item-retry":           {itemAttrs, readItem, nil, false},
		"row-item-in-flight":       {itemAttrs, readItem, nil, false},
		"row-item-quarantined":     {itemAttrs, readItem, nil, false},
		"row-attention":            {tags(ItemRow{}, "pk", "apk", "ask", AttrPackFirst, AttrPackIndex), readItem, nil, false},
		"row-batch":                {tags(BatchRow{}), readBatch, nil, false},
		"row-pack":                 {packAttrs, readPack, nil, false},
		"row-counter-chunk":        {tags(struct{}{}, counterAttrs...), readCounter, []int{0, 1}, false},
		"row-counter-lane":         {tags(struct{}{}, append(tokenSlots(), counterAttrs...)...), readCounter, v2, false},
		"row-counter-run":          {tags(struct{}{}, append(tokenSlots(), "pk", "sk", AttrLanesDone, AttrFailures, AttrUpdatedAtMs, AttrFormat, "expires_at")...), readCounter, v2, false},
		"row-batch-finished":       {tags(BatchRow{}, "expires_at"), readFinishedBatch, v2, false},
		"row-pack-every-attribute": {packAttrs, readFullPack, v2, false},
		"row-counter-pace":         {tags(struct{}{}, "pk", "sk", AttrPace, AttrPaceAtMs, AttrFormat, "expires_at"), readPace, v2, false},
		"row-mark":                 {tags(struct{}{}, "pk", "sk", AttrFormat, "expires_at"), readMark, v2, true},
		"row-slot":                 {tags(struct{}{}, "pk", "sk", AttrHolder, AttrLeaseUntilMs, AttrFormat, "expires_at"), readSlot, v2, true},
		"row-claim":                {tags(struct{}{}, "pk", "sk", AttrClaims, "c0", "c1", "g0", "g1", AttrFormat, "expires_at"), readClaim, v2, true},
		"row-track":                {tags(struct{}{}, "pk", "sk", AttrSeq, AttrHolder, AttrLeaseUntilMs, AttrHanded, AttrSlotHolder, AttrSlotUntilMs, AttrFormat, "expires_at"), readTrack, v2, true},
		"row-retention":            {tags(struct{}{}, "pk", "sk", AttrBatchID, AttrFormat), readRetention, v2, true},
		"row-publish":              {tags(struct{}{}, "pk", "sk", AttrBatchID, AttrRun, AttrFormat), readPublish, v2, true},
		"row-upload":               {tags(UploadRow{}), readUpload, v2, true},
		"row-batch-correction":     {tags(BatchRow{}), readCorrectionBatch, v2, false},
		"row-item-corrected":       {itemAttrs, readCorrectedItem, v2, false},
		"row-pack-corrected":       {packAttrs, readCorrectedPack, v2, false},
	}
	for v := range ledger.FormatVersion + 1 {
		for name, r := range rows {
			if r.versions != nil && !slices.Contains(r.versions, v) {
				continue
			}
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				av := readGoldenRow(t, v, name)
				for a := range av {
					if r.known != nil && !r.known[a] {
						t.Errorf("attribute %q is unknown to today's reader", a)
					}
				}
				got, err := r.read(av)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if got != v {
					t.Errorf("format %d, want %d", got, v)
				}
				if r.keyOnly {
					return
				}
				av[AttrFormat] = &types.AttributeValueMemberN{Value: fmt.Sprint(ledger.FormatVersion + 1)}
				var nf *ledger.NewerFormatError
				if _, err := r.read(av); !errors.As(err, &nf) {
					t.Errorf("a row of version %d: %v, want a *ledger.NewerFormatError", ledger.FormatVersion+1, err)
				}
			})
		}
	}
}

// tokenSlots are the names of a counter row's token slots.
func tokenSlots() []string {
	var names []string
	for h := range countTokenSlots {
		names = append(names, fmt.Sprintf("t%d", h))
	}
	return names
}

func formatOf(av map[string]types.AttributeValue) int {
	var f struct {
		Format int `dynamodbav:"fv"`
	}
	_ = attributevalue.UnmarshalMap(av, &f)
	return f.Format
}

func readItem(av map[string]types.AttributeValue) (int, error) {
	it, err := ItemFrom("upgrade", av)
	if err == nil && (it.Key == "" || !it.Outcome.Valid()) {
		err = fmt.Errorf("read %+v", it)
	}
	return formatOf(av), err
}

func readBatch(av map[string]types.AttributeValue) (int, error) {
	var r BatchRow
	if err := attributevalue.UnmarshalMap(av, &r); err != nil {
		return 0, err
	}
	b, err := FromBatchRow(r)
	if err == nil && (b.ID == "" || b.Status != api.StatusRunning) {
		err = fmt.Errorf("read %+v", b)
	}
	return r.Format, err
}

func readCorrectionBatch(av map[string]types.AttributeValue) (int, error) {
	var r BatchRow
	if err := attributevalue.UnmarshalMap(av, &r); err != nil {
		return 0, err
	}
	b, err := FromBatchRow(r)
	if err == nil && (b.Run != 2 || b.RunRevision != 2 || len(b.Revisions) != 1 || b.Revisions[0].N != 2 || b.RunItems() != 1) {
		err = fmt.Errorf("read %+v", b)
	}
	return r.Format, err
}

func readCorrectedItem(av map[string]types.AttributeValue) (int, error) {
	it, err := ItemFrom("upgrade-fix-k1", av)
	if err == nil && (it.Outcome != api.OutcomeFailed || it.Run != 1 || it.Revision != 2) {
		err = fmt.Errorf("read %+v", it)
	}
	return formatOf(av), err
}

func readCorrectedPack(av map[string]types.AttributeValue) (int, error) {
	p, err := PackFrom("upgrade-fix-k4", av)
	if err == nil && (len(p.Items) != 4 || p.Items[1].Outcome != api.OutcomeFailed || p.Items[1].Revision != 2 || p.Items[0].Revision != 0) {
		err = fmt.Errorf("read %+v", p)
	}
	return formatOf(av), err
}

func readPack(av map[string]types.AttributeValue) (int, error) {
	p, err := PackFrom("upgrade-k4", av)
	if err == nil && (len(p.Items) != 4 || p.Items[0].Outcome != api.OutcomeSucceeded || !p.Items[2].Retry) {
		err = fmt.Errorf("read %+v", p)
	}
	return formatOf(av), err
}

func readFinishedBatch(av map[string]types.AttributeValue) (int, error) {
	var r BatchRow
	if err := attributevalue.UnmarshalMap(av, &r); err != nil {
		return 0, err
	}
	b, err := FromBatchRow(r)
	if err == nil && (b.Status != api.StatusCompleted || b.ReportKey == "" || b.FinishedAt.IsZero() || b.MaxConcurrency != 2) {
		err = fmt.Errorf("read %+v", b)
	}
	return r.Format, err
}

// readFullPack reads the pack whose items carry every attribute an item
// of a pack can, and checks that no item holds one today's reader does
// not know.
func readFullPack(av map[string]types.AttributeValue) (int, error) {
	known := tags(PackItemRow{})
	for j := range 3 {
		m, _ := av[PackItemAttr(j)].(*types.AttributeValueMemberM)
		if m == nil {
			return 0, fmt.Errorf("item %d is not a map", j)
		}
		for a := range m.Value {
			if !known[a] {
				return 0, fmt.Errorf("item %d: attribute %q is unknown to today's reader", j, a)
			}
		}
	}
	p, err := PackFrom("golden-extra", av)
	if err == nil {
		it := p.Items
		if len(it) != 3 || !it[0].Released || it[0].CountedRun != 2 || it[1].ThrottledSince.IsZero() || !it[1].Retry || it[2].OutputRef == "" {
			err = fmt.Errorf("read %+v", p)
		}
	}
	return formatOf(av), err
}

func readMark(av map[string]types.AttributeValue) (int, error) {
	return formatOf(av), ledger.CheckFormat("count mark", formatOf(av))
}

func readSlot(av map[string]types.AttributeValue) (int, error) {
	var r struct {
		Holder       string `dynamodbav:"holder"`
		LeaseUntilMs int64  `dynamodbav:"lease_until_ms"`
	}
	err := attributevalue.UnmarshalMap(av, &r)
	if err == nil && (r.Holder == "" || r.LeaseUntilMs == 0) {
		err = fmt.Errorf("read %+v", r)
	}
	return formatOf(av), err
}

func readClaim(av map[string]types.AttributeValue) (int, error) {
	var r struct {
		Claims int64 `dynamodbav:"claims"`
		C0     int64 `dynamodbav:"c0"`
		G0     int64 `dynamodbav:"g0"`
	}
	err := attributevalue.UnmarshalMap(av, &r)
	if err == nil && (r.Claims < r.G0 || r.C0 < 1 || r.G0 < 1) {
		err = fmt.Errorf("read %+v", r)
	}
	return formatOf(av), err
}

func readTrack(av map[string]types.AttributeValue) (int, error) {
	var r struct {
		Seq          int64  `dynamodbav:"seq"`
		Holder       string `dynamodbav:"holder"`
		LeaseUntilMs int64  `dynamodbav:"lease_until_ms"`
	}
	err := attributevalue.UnmarshalMap(av, &r)
	if err == nil && (r.Seq < 1 || r.Holder == "" || r.LeaseUntilMs == 0) {
		err = fmt.Errorf("read %+v", r)
	}
	return formatOf(av), err
}

func readRetention(av map[string]types.AttributeValue) (int, error) {
	m := RetentionMarkerFrom(av)
	if m.Malformed || m.BatchID == "" || m.ExpiresAt.IsZero() {
		return 0, fmt.Errorf("read %+v", m)
	}
	return formatOf(av), nil
}

func readPublish(av map[string]types.AttributeValue) (int, error) {
	sk, _ := av["sk"].(*types.AttributeValueMemberS)
	if sk == nil {
		return 0, errors.New("no sort key")
	}
	if ref, ok := PublishMarkerFrom(sk.Value); !ok || ref.BatchID == "" {
		return 0, fmt.Errorf("read %q", sk.Value)
	}
	return formatOf(av), nil
}

func readUpload(av map[string]types.AttributeValue) (int, error) {
	var r UploadRow
	err := attributevalue.UnmarshalMap(av, &r)
	if err == nil && (r.BatchID == "" || r.Source == "" || r.UntilMs == 0) {
		err = fmt.Errorf("read %+v", r)
	}
	return r.Format, err
}

// readPace reads the pace row as the live view does (AddCounterRow): its
// ring of two samples, the newest without its cost.
func readPace(av map[string]types.AttributeValue) (int, error) {
	var p ledger.Progress
	if err := AddCounterRow("golden", av, &p); err != nil {
		return 0, err
	}
	if len(p.Pace) != 2 || p.Pace[0].Done != 1 || p.Pace[0].Cost["calls"].IntPart() != 1 || p.Pace[1].Done != 2 || !p.Pace[1].NoCost || p.Done != 0 || !p.UpdatedAt.IsZero() {
		return 0, fmt.Errorf("pace row read as ring %+v, done %d, updated %v", p.Pace, p.Done, p.UpdatedAt)
	}
	return formatOf(av), nil
}

func readCounter(av map[string]types.AttributeValue) (int, error) {
	return formatOf(av), ledger.CheckFormat("counter row", formatOf(av))
}
