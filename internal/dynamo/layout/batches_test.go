package layout

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/config"
)

// Guards the listing's product line "a status change keeps the listing
// current": every attribute the batches index projects is one the batch
// row stores (a misspelt name would project nothing, and the listing would
// show an empty status), and status is among them.
func TestBatchesProjectionIsBatchRowAttributes(t *testing.T) {
	stored := map[string]bool{}
	rt := reflect.TypeFor[BatchRow]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("dynamodbav"), ",")
		stored[name] = true
	}
	proj := config.BatchesProjection()
	for _, a := range proj {
		if !stored[a] {
			t.Errorf("projected attribute %q is not a batch row attribute", a)
		}
	}
	for _, need := range []string{"status", "expires_at_ms", "created_at_ms", "batch_id"} {
		if !strings.Contains(" "+strings.Join(proj, " ")+" ", " "+need+" ") {
			t.Errorf("%q is not projected: the listing filters or shows it", need)
		}
	}
}

// Guards the listing's order (newest first across months and shards):
// the index keys of the batches index.
func TestBatchesIndexKeys(t *testing.T) {
	at := time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.FixedZone("x", 3600)) // 22:59:59.999 UTC
	tests := []struct {
		name, got, want string
	}{
		{"pk month is UTC", BatchesPK("b1", at)[:len("BATCHES#2026-12#")], "BATCHES#2026-12#"},
		{"sk", BatchesSK("b1", at), "1798757999999#b1"},
		{"sk of 1970 is still 13 digits", BatchesSK("b", time.UnixMilli(5)), "0000000000005#b"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	shards := map[string]bool{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"} {
		shards[BatchesPK(id, at)] = true
	}
	if len(shards) < 4 {
		t.Errorf("16 ids fall in %d shards of %d: the shard is not spread", len(shards), BatchesShards)
	}
	// Byte order of sort keys is time order (what the index sorts by).
	if BatchesSK("z", at) > BatchesSK("a", at.Add(time.Millisecond)) {
		t.Error("a later batch sorts before an earlier one")
	}
}
