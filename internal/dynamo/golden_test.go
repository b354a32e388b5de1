package dynamo

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

	"github.com/bulkrun/bulkrun/internal/dynjson"
	"github.com/bulkrun/bulkrun/shared/batch"
)

// goldenDir is where the golden formats of version v live.
func goldenDir(v int) string {
	return filepath.Join("..", "..", "internal", "formats", "testdata", fmt.Sprintf("v%d", v))
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
// golden row (internal/formats/testdata: an item row in each state, a
// pack row, an attention row, the batch row, a chunk counter of versions
// 0 and 1, a counter lane of version 2) of every version is read by
// today's readers,
// holds no attribute they do not know, and carries its version (none on
// version 0); a row of a newer version is refused with a
// *batch.NewerFormatError.
func TestGoldenRows(t *testing.T) {
	itemAttrs := tags(itemRow{}, "pk", "apk", "ask")
	rows := map[string]struct {
		known    map[string]bool
		read     func(map[string]types.AttributeValue) (int, error)
		versions []int // nil: every version
	}{
		"row-item-succeeded":   {itemAttrs, readItem, nil},
		"row-item-failed":      {itemAttrs, readItem, nil},
		"row-item-retry":       {itemAttrs, readItem, nil},
		"row-item-in-flight":   {itemAttrs, readItem, nil},
		"row-item-quarantined": {itemAttrs, readItem, nil},
		"row-attention":        {tags(itemRow{}, "pk", "apk", "ask", attrPackFirst, attrPackIndex), readItem, nil},
		"row-batch":            {tags(batchRow{}), readBatch, nil},
		"row-pack":             {nil, readPack, nil},
		"row-counter-chunk": {tags(struct{}{}, "pk", "sk", attrDone, attrFailures, attrItems, attrUpdatedAtMs, attrWriteUnits, attrReadUnits, attrFormat, "expires_at",
			outcomeAttr(batch.OutcomeSucceeded), outcomeAttr(batch.OutcomeFailed), outcomeAttr(batch.OutcomeQuarantined), outcomeAttr(batch.OutcomeCancelled)), readCounter, []int{0, 1}},
		"row-counter-lane": {tags(struct{}{}, append(tokenSlots(), "pk", "sk", attrDone, attrFailures, attrItems, attrUpdatedAtMs, attrWriteUnits, attrReadUnits, attrFormat, "expires_at",
			outcomeAttr(batch.OutcomeSucceeded), outcomeAttr(batch.OutcomeFailed), outcomeAttr(batch.OutcomeQuarantined), outcomeAttr(batch.OutcomeCancelled))...), readCounter, []int{2}},
	}
	for v := range batch.FormatVersion + 1 {
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
				av[attrFormat] = &types.AttributeValueMemberN{Value: fmt.Sprint(batch.FormatVersion + 1)}
				var nf *batch.NewerFormatError
				if _, err := r.read(av); !errors.As(err, &nf) {
					t.Errorf("a row of version %d: %v, want a *batch.NewerFormatError", batch.FormatVersion+1, err)
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
	it, err := itemFrom("upgrade", av)
	if err == nil && (it.Key == "" || !it.Outcome.Valid()) {
		err = fmt.Errorf("read %+v", it)
	}
	return formatOf(av), err
}

func readBatch(av map[string]types.AttributeValue) (int, error) {
	var r batchRow
	if err := attributevalue.UnmarshalMap(av, &r); err != nil {
		return 0, err
	}
	b, err := fromRow(r)
	if err == nil && (b.ID == "" || b.Status != batch.StatusRunning) {
		err = fmt.Errorf("read %+v", b)
	}
	return r.Format, err
}

func readPack(av map[string]types.AttributeValue) (int, error) {
	p, err := packFrom("upgrade-k4", av)
	if err == nil && (len(p.Items) != 4 || p.Items[0].Outcome != batch.OutcomeSucceeded || !p.Items[2].Retry) {
		err = fmt.Errorf("read %+v", p)
	}
	return formatOf(av), err
}

func readCounter(av map[string]types.AttributeValue) (int, error) {
	return formatOf(av), batch.CheckFormat("counter row", formatOf(av))
}
